//! Model against reality, and extrapolation. Each real run the simulator
//! can express gets a simulated twin: the same workload shape, the vanilla
//! (emulated-LAPIC) policy, and this host's calibrated costs for the path
//! the real run took. The twins then run under APICv, ELI and DID with the
//! same costs: what those designs would save on this host.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use dirq_sim::policy::PolicyKind;
use dirq_sim::scenario::{
    HostShape, IdleMode, IpiMode, RunGroup, Scenario, Transport, WorkloadKind, MAX_IPI_RATE_PER_S,
};
use dirq_sim::CostProfile;
use dirq_stats::{f64_of, round_u64};
use dirq_vmm::config::{BenchConfig, BenchParams, GuestExec, GuestIdle, HaltMode, Irqchip};
use dirq_vmm::exits::VmxExit;
use dirq_vmm::probe::ProbeReport;
use indicatif::ProgressBar;
use serde::Serialize;

use crate::calibrate::costs::HostCosts;

use super::charts::{exit_bars, exit_table};
use super::data::{Figure, Section, Spread, Table, TableRow};
use super::figures::compact_number;
use super::misses::{explain, MissExplained, TwinRates};
use super::model::{comparison_figure, Comparison, Metric};
use super::plan::path_label;
use super::progress::StepFailure;
use super::real::RealCase;
use super::views::SimRun;

/// The only timer rate the simulator's cyclictest runs: 1 kHz.
pub const CYCLICTEST_PERIOD_NS: u64 = 1_000_000;

/// Simulated time per twin run: long enough for thousands of interrupts at
/// the rates the real benches use.
const TWIN_DURATION_MS: u64 = 500;

/// The policies the extrapolation compares with vanilla.
const EXTRAPOLATED: [PolicyKind; 3] = [PolicyKind::Apicv, PolicyKind::Eli, PolicyKind::Did];

/// Why a real run has no simulated twin.
#[derive(Debug, thiserror::Error)]
enum NoTwin {
    #[error("PV EOI: the simulator has no PV EOI mechanism")]
    PvEoi,
    #[error("no simulated workload of this shape")]
    Shape,
}

/// A real run's simulated twin: a one-group scenario and the path's costs.
struct Twin {
    /// The scenario's one group, without `policies`.
    group: RunGroup,
    profile: CostProfile,
}

/// The costs of one real path. Our guest test kernel has no background
/// device or paging activity, so the idle VM's exits (a property of the
/// guest OS in did-2015) are zero. With the userspace irqchip every
/// interrupt-controller exit is served by the VMM: a userspace exit; a
/// kick (the VMM's signal to a running vCPU) costs what the probe's
/// userspace-LAPIC IPI floors say it takes from a busy vCPU.
fn path_profile(base: &CostProfile, costs: &HostCosts, config: &BenchConfig) -> CostProfile {
    let mut profile = base.clone();
    profile.idle_exits_per_s.io_instruction = 0.0;
    profile.idle_exits_per_s.ept_violation = 0.0;
    if config.common.irqchip == Irqchip::Userspace {
        let userspace = round_u64(costs.userspace_exit.ns);
        let service = &mut profile.exit_service_ns;
        service.external_interrupt = round_u64(costs.userspace_kick.ns);
        profile.host_ns.wakeup = round_u64(costs.hlt_wakeup_userspace.ns);
        service.eoi_write = userspace;
        service.interrupt_window = userspace;
        service.timer_write = userspace;
        service.icr_write = userspace;
        service.hlt = userspace;
        service.apic_access = userspace;
    }
    if let HaltMode::Poll { ns } = config.common.halt {
        profile.host_ns.halt_poll = u64::from(ns);
    }
    profile
}

/// How the real run's idle vCPUs waited. With HLT not exiting a halted
/// vCPU stays in the guest, unless KVM counted HLT exits anyway (kvm_pvm
/// traps every HLT): then it waited in KVM's halt polling with the host's
/// default window, the profile's.
fn idle_mode(case: &RealCase) -> IdleMode {
    match (case.config.common.guest_idle, case.config.common.halt) {
        (GuestIdle::Halt, HaltMode::None) if case.saw_hlt_exits() => IdleMode::HaltPoll,
        (GuestIdle::Busy, _) | (GuestIdle::Halt, HaltMode::None) => IdleMode::Poll,
        (GuestIdle::Halt, HaltMode::Exit) => IdleMode::Hlt,
        (GuestIdle::Halt, HaltMode::Poll { .. }) => IdleMode::HaltPoll,
    }
}

/// The simulated twin of a real run, or why there is none.
fn twin(case: &RealCase, base: &CostProfile, costs: &HostCosts) -> Result<Twin, NoTwin> {
    let config = &case.config;
    if config.common.pv_eoi {
        return Err(NoTwin::PvEoi);
    }
    let idle = idle_mode(case);
    let group = match &config.params {
        // The device thread's MSIs are virtual-device interrupts: a backend
        // on another core kicks the vCPU, as virtio does.
        BenchParams::IrqLatency(params) if params.rate_hz > 0 => {
            let mut group = device_events(WorkloadKind::UdpRx, params.rate_hz);
            group.idle = idle;
            group
        }
        BenchParams::TimerLatency(params) if params.period_ns == CYCLICTEST_PERIOD_NS => {
            let mut group = RunGroup::new(WorkloadKind::Cyclictest, Vec::new());
            group.idle = idle;
            group
        }
        BenchParams::Ipi(_) => {
            let mut group = RunGroup::new(WorkloadKind::Ipi, Vec::new());
            group.idle = idle;
            group.ipi_mode = IpiMode::Unicast;
            // The real bench is a ping-pong: the next ping follows the last
            // pong, so the pinged vCPU idles only between them. The twin
            // sends at the rate the real pings went; the simulator has no
            // closed loop.
            if let Some(rate) = case.pings_per_s() {
                group.ipi_rate_per_s = round_u64(rate.median).clamp(1, MAX_IPI_RATE_PER_S);
            }
            group.host = HostShape {
                cores: 3,
                vms: 1,
                vcpus_per_vm: twin_vcpus(config),
            };
            group
        }
        BenchParams::Whileloop(params) => device_events(WorkloadKind::Whileloop, params.rate_hz),
        _ => return Err(NoTwin::Shape),
    };
    Ok(Twin {
        group,
        profile: path_profile(base, costs, config),
    })
}

/// A twin of dirq's device thread: `rate_hz` virtual-device events a
/// second, each its own interrupt. dirq's guest handles one event per
/// interrupt and never polls for more, so its NAPI weight is 1 (a guest
/// NAPI of 64 would take several events per interrupt and raise fewer).
fn device_events(workload: WorkloadKind, rate_hz: u64) -> RunGroup {
    let mut group = RunGroup::new(workload, Vec::new());
    group.transport = Transport::Pv;
    group.rates_pps = vec![rate_hz];
    group.napi_weight = Some(1);
    group
}

/// The vCPUs of a twin: two for the IPI ping-pong, one for every other
/// workload (the scenarios' default).
fn twin_vcpus(config: &BenchConfig) -> u32 {
    match config.params {
        BenchParams::Ipi(_) => 2,
        _ => 1,
    }
}

/// The one-run scenario of a twin under one policy.
fn twin_scenario(twin: &Twin, policy: PolicyKind) -> Result<Scenario> {
    let mut group = twin.group.clone();
    group.policies = vec![policy];
    let scenario = Scenario {
        name: "twin".into(),
        description: "simulated twin of a real run".into(),
        duration_ms: TWIN_DURATION_MS,
        nic: Default::default(),
        profile: Default::default(),
        runs: vec![group],
    };
    scenario.validate().context("twin scenario")?;
    Ok(scenario)
}

/// One simulated twin run under one policy.
fn simulate(twin: &Twin, policy: PolicyKind, seed: u64) -> Result<SimRun> {
    let scenario = twin_scenario(twin, policy)?;
    let options = dirq_sim::RunOptions {
        seed,
        profile: Some(twin.profile.clone()),
        trace: false,
    };
    let output = dirq_sim::run_scenario(&scenario, &options)?;
    let run = output
        .result
        .runs
        .first()
        .context("the twin scenario made no run")?;
    Ok(SimRun::from(run))
}

/// Simulated seconds per handled interrupt of a twin run.
fn seconds_per_interrupt(run: &SimRun) -> Option<f64> {
    run.interrupts_handled()
        .filter(|&handled| handled > 0)
        .map(|handled| (f64_of(TWIN_DURATION_MS) / 1e3) / f64_of(handled))
}

/// Exits per handled interrupt of a simulated run, every exit counted.
fn exits_per_interrupt(run: &SimRun) -> Option<f64> {
    per_handled_interrupt(run, run.exits_per_s)
}

fn per_handled_interrupt(run: &SimRun, rate_per_s: f64) -> Option<f64> {
    seconds_per_interrupt(run).map(|per| rate_per_s * per)
}

/// A twin run's exits per handled interrupt by reason; empty without any.
fn exits_per_interrupt_by_reason(run: &SimRun) -> BTreeMap<String, f64> {
    seconds_per_interrupt(run)
        .map(|per| {
            run.exits_by_reason_per_s
                .iter()
                .map(|(reason, rate)| (reason.clone(), rate * per))
                .collect()
        })
        .unwrap_or_default()
}

/// What the host's KVM `exits` statistic counts, so that a twin predicts
/// the same quantity the real run measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatistic {
    /// Every exit, as on VMX and SVM.
    EveryExit,
    /// kvm_pvm serves the guest's writes to KVM's own LAPIC (EOI, timer,
    /// ICR) by emulating the trapped instruction, which its `exits`
    /// statistic leaves out (the real runs count them as `insn_emulation`).
    WithoutEmulatedLapicWrites,
    /// kvm_pvm's native mode: every privileged instruction the guest runs
    /// traps into KVM and is counted. Beside the twin's exits (its LAPIC
    /// writes among them) each handled interrupt pays kvm_pvm's injection
    /// into the guest (whether the vCPU was woken from HLT or kicked out of
    /// guest code), its handler's IRETQ, and the EOI that PV EOI would skip
    /// if the host ever waived it: `dirq run` counts three OTHER exits per
    /// interrupt on every in-kernel path (timer-latency exactly HLT + arm +
    /// EOI + IRETQ + injection).
    NativeTraps { pv_eoi_waives: bool },
}

/// Every handler of dirq's guest returns with one IRETQ, and kvm_pvm
/// enters the guest's handler with one more trap: both count natively
/// (docs/native.md).
const NATIVE_TRAPS_PER_INTERRUPT: f64 = 2.0;

/// The exit reasons of LAPIC register writes.
const LAPIC_WRITE_REASONS: [VmxExit; 2] = [VmxExit::MsrWrite, VmxExit::ApicAccess];

impl ExitStatistic {
    /// The statistic of the host `probe` describes. `pv_eoi_waives`: some
    /// real run with PV EOI had an EOI skipped (KVM set the flag).
    pub fn of_host(probe: Option<&ProbeReport>, pv_eoi_waives: bool) -> Self {
        match probe.map(|probe| probe.guest_exec) {
            Some(GuestExec::Native) => ExitStatistic::NativeTraps { pv_eoi_waives },
            Some(GuestExec::Emulated) => ExitStatistic::WithoutEmulatedLapicWrites,
            Some(GuestExec::Hardware) | None => ExitStatistic::EveryExit,
        }
    }

    /// A twin's exits per interrupt as this statistic counts them. With
    /// the userspace irqchip every LAPIC write is a userspace exit, counted
    /// on every backend.
    fn exits_per_interrupt(self, run: &SimRun, config: &BenchConfig) -> Option<f64> {
        if let ExitStatistic::NativeTraps { pv_eoi_waives } = self {
            let unwaived_eoi = if config.common.pv_eoi && !pv_eoi_waives {
                1.0
            } else {
                0.0
            };
            let exits = per_handled_interrupt(run, run.exits_per_s)?;
            return Some(exits + NATIVE_TRAPS_PER_INTERRUPT + unwaived_eoi);
        }
        let emulated = self == ExitStatistic::WithoutEmulatedLapicWrites
            && config.common.irqchip != Irqchip::Userspace;
        let uncounted: f64 = if emulated {
            LAPIC_WRITE_REASONS
                .iter()
                .filter_map(|reason| run.exits_by_reason_per_s.get(reason.name()))
                .sum()
        } else {
            0.0
        };
        per_handled_interrupt(run, run.exits_per_s - uncounted)
    }
}

/// "whileloop · kernel · 10K/s": the bench, the path and, where the bench
/// has one, the interrupt rate.
fn configuration_name(case: &RealCase) -> String {
    let mut name = format!("{} · {}", case.bench(), case.label);
    if let Some(rate_hz) = case.config.params.rate_hz() {
        name.push_str(&format!(" · {}/s", compact_number(f64_of(rate_hz))));
    }
    name
}

/// A real case's latency p50 as the simulator predicts it: one way (the
/// real IPI bench times a round trip).
fn one_way_p50(case: &RealCase) -> Option<Spread> {
    let p50 = case.p50()?;
    Some(match case.config.params {
        BenchParams::Ipi(_) => Spread {
            median: p50.median / 2.0,
            min: p50.min / 2.0,
            max: p50.max / 2.0,
            runs: p50.runs,
        },
        _ => p50,
    })
}

/// The numbers a real run and its twin are compared on.
fn compare(case: &RealCase, predicted: &SimRun, statistic: ExitStatistic) -> Vec<Comparison> {
    let name = configuration_name(case);
    let mut comparisons = Vec::new();
    if let (Some(measured), Some(exits)) = (
        case.exits_per_interrupt(),
        statistic.exits_per_interrupt(predicted, &case.config),
    ) {
        comparisons.push(Comparison::new(
            name.clone(),
            Metric::ExitsPerInterrupt,
            measured,
            exits,
        ));
    }
    if let (Some(measured), Some(latency)) = (one_way_p50(case), predicted.latency_ns.as_ref()) {
        comparisons.push(Comparison::new(
            name.clone(),
            Metric::LatencyP50Ns,
            measured,
            latency.p50,
        ));
    }
    if let (Some(share), Some(loop_share)) = (case.guest_share(), predicted.throughput_value()) {
        comparisons.push(Comparison::new(
            name.clone(),
            Metric::TimeInGuest,
            share,
            loop_share,
        ));
        // Near saturation the share is a small difference of large times:
        // the time each handled interrupt took from the loop is not.
        if let (Some(measured), Some(per)) = (
            lost_per_interrupt_ns(case),
            seconds_per_interrupt(predicted),
        ) {
            comparisons.push(Comparison::new(
                name,
                Metric::LostPerInterruptNs,
                measured,
                (1.0 - loop_share) * per * 1e9,
            ));
        }
    }
    comparisons
}

/// The time the loop lost per interrupt its guest handled (ns), as the
/// guest timed it chunk by chunk.
fn lost_per_interrupt_ns(case: &RealCase) -> Option<Spread> {
    case.spread(|r| {
        r.run
            .results
            .get(dirq_vmm::bench::LOST_PER_INTERRUPT_NS)
            .copied()
    })
}

/// A real run with no twin, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Unmodelled {
    pub configuration: String,
    pub reason: String,
}

/// What the real run behind a workload measured (KVM's in-kernel LAPIC,
/// the path vanilla models), in the extrapolation's units.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub exits_per_interrupt: Option<Spread>,
    /// One way, as predicted.
    pub latency_p50_ns: Option<Spread>,
    pub time_in_guest: Option<Spread>,
    pub cpu_cores: Option<Spread>,
}

impl Measured {
    fn of(case: &RealCase) -> Self {
        Measured {
            exits_per_interrupt: case.exits_per_interrupt(),
            latency_p50_ns: one_way_p50(case),
            time_in_guest: case.guest_share(),
            cpu_cores: case.cpu_cores(),
        }
    }
}

/// One twin under one policy, for the extrapolation.
#[derive(Debug, Clone, Serialize)]
pub struct Extrapolated {
    pub workload: String,
    /// The real bench the workload's twin stands for.
    pub bench: String,
    pub policy: String,
    /// Every exit counted, as on a VT-x host with this host's costs.
    pub exits_per_interrupt: Option<f64>,
    /// As this host's KVM counts them (kvm_pvm's own traps included): the
    /// prediction the model check compares; on the vanilla twin only.
    pub exits_per_interrupt_counted_here: Option<f64>,
    /// Empty when the run handled no interrupt.
    pub exits_per_interrupt_by_reason: BTreeMap<String, f64>,
    pub latency_p50_ns: Option<f64>,
    pub time_in_guest: f64,
    /// Host cores the VM's vCPUs keep busy: the busy fraction of their cores.
    pub cpu_cores: Option<f64>,
    /// The real run this twin stands for; on the vanilla twin only.
    pub measured: Option<Measured>,
}

impl Extrapolated {
    fn new(
        workload: String,
        policy: PolicyKind,
        run: &SimRun,
        case: &RealCase,
        statistic: ExitStatistic,
    ) -> Self {
        let vanilla = policy == PolicyKind::Vanilla;
        Self {
            workload,
            bench: case.config.bench().name().to_string(),
            policy: policy.name().to_string(),
            exits_per_interrupt: exits_per_interrupt(run),
            exits_per_interrupt_counted_here: vanilla
                .then(|| statistic.exits_per_interrupt(run, &case.config))
                .flatten(),
            exits_per_interrupt_by_reason: exits_per_interrupt_by_reason(run),
            latency_p50_ns: run.latency_ns.as_ref().map(|l| l.p50),
            time_in_guest: run.time_in_guest,
            cpu_cores: run
                .cpu_busy
                .map(|busy| busy * f64::from(twin_vcpus(&case.config))),
            measured: vanilla.then(|| Measured::of(case)),
        }
    }
}

/// Everything the model checks produced, as it goes into data.json.
#[derive(Debug, Clone, Serialize)]
pub struct ModelChecks {
    pub comparisons: Vec<Comparison>,
    pub unmodelled: Vec<Unmodelled>,
    pub extrapolation: Vec<Extrapolated>,
    /// Every miss among `comparisons`, with what the counters say.
    pub misses: Vec<MissExplained>,
    /// Twins the simulator could not run.
    pub failures: Vec<StepFailure>,
}

/// Runs each real case's twin under vanilla (the comparison) and under
/// the extrapolated policies. `bar` advances once per real case.
pub fn run_checks(
    cases: &[RealCase],
    base: &CostProfile,
    costs: &HostCosts,
    statistic: ExitStatistic,
    seed: u64,
    bar: &ProgressBar,
) -> ModelChecks {
    let mut checks = ModelChecks {
        comparisons: Vec::new(),
        unmodelled: Vec::new(),
        extrapolation: Vec::new(),
        misses: Vec::new(),
        failures: Vec::new(),
    };
    // Twins already extrapolated: paths that differ only where APICv, ELI
    // and DID would replace them (how the VMM injects, PV EOI) share a twin.
    let mut extrapolated: Vec<(RunGroup, u64)> = Vec::new();
    for case in cases {
        let configuration = configuration_name(case);
        super::progress::working_on(bar, configuration.clone());
        match twin(case, base, costs) {
            Err(reason) => checks.unmodelled.push(Unmodelled {
                configuration,
                reason: reason.to_string(),
            }),
            Ok(twin) => {
                let key = (twin.group.clone(), twin.profile.host_ns.halt_poll);
                // The designs replace KVM's in-kernel LAPIC, so only its
                // twins are extrapolated.
                let extrapolate =
                    case.config.common.irqchip == Irqchip::Kernel && !extrapolated.contains(&key);
                if extrapolate {
                    extrapolated.push(key);
                }
                let others: &[PolicyKind] = if extrapolate { &EXTRAPOLATED } else { &[] };
                for &policy in std::iter::once(&PolicyKind::Vanilla).chain(others) {
                    match simulate(&twin, policy, seed) {
                        Ok(run) => {
                            if policy == PolicyKind::Vanilla {
                                let comparisons = compare(case, &run, statistic);
                                let predicted = TwinRates {
                                    seconds_per_interrupt: seconds_per_interrupt(&run),
                                    exits_per_interrupt_by_reason: exits_per_interrupt_by_reason(
                                        &run,
                                    ),
                                };
                                checks.misses.extend(
                                    comparisons
                                        .iter()
                                        .filter(|c| !c.within_tolerance)
                                        .map(|c| explain(case, &predicted, c)),
                                );
                                checks.comparisons.extend(comparisons);
                            }
                            if extrapolate {
                                checks.extrapolation.push(Extrapolated::new(
                                    workload_name(&case.config),
                                    policy,
                                    &run,
                                    case,
                                    statistic,
                                ));
                            }
                        }
                        Err(err) => checks.failures.push(StepFailure {
                            configuration: format!(
                                "the twin of {configuration} under {}",
                                policy.name()
                            ),
                            reason: format!("{err:#}"),
                            command: Some(case.command.clone()),
                        }),
                    }
                }
            }
        }
        bar.inc(1);
    }
    checks
}

/// The workload a twin simulates, without the real path that ran it.
fn workload_name(config: &BenchConfig) -> String {
    match &config.params {
        BenchParams::IrqLatency(params) => {
            let idle = match config.common.guest_idle {
                GuestIdle::Busy => "busy",
                GuestIdle::Halt => "halted",
            };
            format!(
                "irq-latency · {idle} · {}/s",
                compact_number(f64_of(params.rate_hz))
            )
        }
        BenchParams::TimerLatency(_) => "timer-latency · 1 kHz".into(),
        BenchParams::Ipi(_) => format!("ipi · {}", path_label(config)),
        BenchParams::Whileloop(params) => {
            format!("whileloop · {}/s", compact_number(f64_of(params.rate_hz)))
        }
        _ => config.bench().to_string(),
    }
}

/// The model-vs-reality section: every comparison, misses flagged, and the
/// real runs the model cannot express.
pub fn model_section(checks: &ModelChecks, profile_file: &str) -> Section {
    let misses = checks
        .comparisons
        .iter()
        .filter(|c| !c.within_tolerance)
        .count();
    let mut figures = Vec::new();
    if !checks.comparisons.is_empty() {
        figures.push(comparison_figure(
            &checks.comparisons,
            format!(
                "Every real run above against its simulated twin: `dirq sim` on \
                 a one-group scenario of the same shape and device (irq-latency as udp-rx over \
                 virtio at the same rate, timer-latency as cyclictest, ipi as ipi, whileloop as \
                 whileloop under a virtio receive at the same rate), \
                 vanilla policy, {TWIN_DURATION_MS} ms simulated, with {profile_file} adjusted \
                 for the path (userspace-irqchip exits cost a userspace exit, and a kicked \
                 one the kick's host interrupt too; halt polling window; no idle-VM exits, \
                 which dirq's guest does not make). The IPI bench is a ping-pong measuring a \
                 round trip: its p50 is halved to compare with the one-way prediction, and \
                 the twin sends its pings at the rate the real ones went; where KVM counted \
                 HLT exits although HLT was not to exit (kvm_pvm traps every HLT), the twin \
                 halt-polls with the host's default window, as KVM did. Whileloop's time in \
                 guest is the loop's share of the core; beside it, the time the loop lost per \
                 handled interrupt, which stays well-conditioned where the share nears zero \
                 at saturation. \
                 The measured value is the median of the real runs, the range beside it."
            ),
            Vec::new(),
        ));
    }
    let unmodelled = Table {
        title: "Real runs the model does not express".into(),
        columns: vec!["configuration".into(), "why".into()],
        rows: checks
            .unmodelled
            .iter()
            .map(|u| TableRow::new(vec![u.configuration.clone(), u.reason.clone()]))
            .collect(),
    };
    let explained = Table {
        title: "Every miss, and what the counters of the run and its twin say".into(),
        columns: vec!["configuration".into(), "metric".into(), "why".into()],
        rows: checks
            .misses
            .iter()
            .map(|miss| {
                TableRow::new(vec![
                    miss.configuration.clone(),
                    miss.metric.label().into(),
                    miss.why.clone(),
                ])
            })
            .collect(),
    };
    let mut tables = Vec::new();
    if !explained.rows.is_empty() {
        tables.push(explained);
    }
    if !unmodelled.rows.is_empty() {
        tables.push(unmodelled);
    }
    Section {
        id: "model-vs-reality".into(),
        title: "Model against reality".into(),
        intro: vec![
            format!(
                "{} of {} predictions are within 20% of the measurement; every miss is flagged \
                 in the table, none is hidden. Nothing was tuned to make a prediction match: \
                 the costs come from the calibration above and the simulator's mechanisms are \
                 unchanged.",
                checks.comparisons.len() - misses,
                checks.comparisons.len()
            ),
            format!(
                "Within 20%, by metric: {}.",
                hits_by_metric(&checks.comparisons)
            ),
            "Measured exits are KVM's `exits` statistic. The model counts every EOI and timer \
             write as an exit, as VMX does; kvm_pvm serves writes to KVM's own LAPIC by \
             emulating the trapped instruction and leaves them out of `exits` (see the \
             instruction emulations per interrupt in the real runs table), so on a kvm_pvm host \
             the predictions for KVM's LAPIC leave out the model's MSR-write and APIC-access \
             exits. The extrapolation below counts every exit."
                .into(),
        ],
        figures,
        tables,
    }
}

/// "exits per interrupt 6 of 20, latency p50 (ns) 3 of 8, ...".
fn hits_by_metric(comparisons: &[Comparison]) -> String {
    super::model::scores(comparisons)
        .iter()
        .map(|score| format!("{} {} of {}", score.metric.label(), score.hits, score.of))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A design and its predicted exits per interrupt by reason.
type ExitsOfDesign = (String, BTreeMap<String, f64>);

/// Exits per interrupt to two decimals: what a figure can tell apart.
fn rounded(by_reason: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    by_reason
        .iter()
        .map(|(reason, value)| (reason.clone(), (value * 100.0).round() / 100.0))
        .collect()
}

/// The extrapolation section: the exits each design would take, by
/// reason, per workload (the pivots of every metric open the report).
pub fn extrapolation_section(checks: &ModelChecks, profile_file: &str) -> Option<Section> {
    // Workloads whose designs take the same exits share one figure.
    let mut groups: Vec<(Vec<&str>, Vec<ExitsOfDesign>)> = Vec::new();
    for e in &checks.extrapolation {
        if groups
            .iter()
            .any(|(names, _)| names.contains(&e.workload.as_str()))
        {
            continue;
        }
        let entries: Vec<ExitsOfDesign> = checks
            .extrapolation
            .iter()
            .filter(|other| other.workload == e.workload)
            .map(|other| {
                (
                    other.policy.clone(),
                    rounded(&other.exits_per_interrupt_by_reason),
                )
            })
            .collect();
        match groups.iter_mut().find(|(_, same)| *same == entries) {
            Some((names, _)) => names.push(&e.workload),
            None => groups.push((vec![&e.workload], entries)),
        }
    }
    let figures: Vec<Figure> = groups
        .iter()
        .enumerate()
        .filter_map(|(index, (workloads, entries))| {
            let chart = exit_bars("predicted exits per interrupt", entries);
            let names = workloads.join("; ");
            chart.has_data().then(|| Figure {
                id: format!("extrapolation-exits-{index}"),
                title: format!("{names}: predicted exits per interrupt by VMX reason"),
                caption: format!(
                    "The simulated twin of each real run named in the title (KVM's in-kernel \
                     LAPIC), under each design, with this host's profile {profile_file}; \
                     workloads whose designs take the same exits share a figure."
                ),
                commands: Vec::new(),
                table: exit_table("design", &chart, "exits/interrupt"),
                chart,
            })
        })
        .collect();
    if figures.is_empty() {
        return None;
    }
    Some(Section {
        id: "extrapolation".into(),
        title: "Extrapolation: APICv, ELI and DID with this host's costs".into(),
        intro: vec![
            "This host has no VT-x, so none of these designs can run here; the simulator \
             predicts what each would save with the exit costs measured on this host. The \
             conclusions at the top compare every metric per design and workload; here are \
             the exits each design would still take, by reason."
                .into(),
        ],
        figures,
        tables: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::costs::{derive_costs, Observations};
    use crate::report::real::Repeat;
    use crate::report::views::RealRun;
    use dirq_vmm::config::params::TimerLatencyParams;
    use dirq_vmm::config::Bench;

    fn host_costs() -> HostCosts {
        derive_costs(&Observations {
            userspace_exit_ns: 10_000.0,
            kernel_exit_ns: 4_000.0,
            inject_running_p50_ns: 30_000.0,
            inject_halted_p50_ns: 36_000.0,
            ..Observations::default()
        })
    }

    fn config(bench: Bench, irqchip: Irqchip) -> BenchConfig {
        let mut config = BenchConfig::new(bench);
        config.common.irqchip = irqchip;
        config
    }

    /// timer-latency at the simulator's cyclictest rate.
    fn cyclictest(irqchip: Irqchip) -> BenchConfig {
        let mut config = BenchConfig::from(BenchParams::TimerLatency(TimerLatencyParams {
            period_ns: CYCLICTEST_PERIOD_NS,
            ..TimerLatencyParams::default()
        }));
        config.common.irqchip = irqchip;
        config
    }

    #[test]
    fn each_real_bench_gets_the_twin_of_its_shape() {
        let base = CostProfile::did_2015();
        let costs = host_costs();
        let irq = twin(
            &case(config(Bench::IrqLatency, Irqchip::Kernel)),
            &base,
            &costs,
        )
        .expect("irq-latency has a twin");
        assert_eq!(irq.group.workload, WorkloadKind::UdpRx);
        assert_eq!(irq.group.rates_pps, [5000]);
        assert_eq!(irq.profile.idle_exits_per_s.io_instruction, 0.0);

        let timer = config(Bench::TimerLatency, Irqchip::Userspace);
        assert!(
            matches!(twin(&case(timer), &base, &costs), Err(NoTwin::Shape)),
            "only 1 kHz timers have a twin"
        );
        let timer = cyclictest(Irqchip::Userspace);
        let timer_twin = twin(&case(timer), &base, &costs).expect("1 kHz timer has a twin");
        assert_eq!(timer_twin.group.workload, WorkloadKind::Cyclictest);
        // The userspace irqchip serves every interrupt-controller exit in the VMM.
        assert_eq!(timer_twin.profile.exit_service_ns.eoi_write, 10_000);
        assert_eq!(timer_twin.profile.exit_service_ns.timer_write, 10_000);

        let mut ipi = config(Bench::Ipi, Irqchip::Kernel);
        ipi.common.halt = HaltMode::Poll { ns: 50_000 };
        let ipi_twin = twin(&case(ipi), &base, &costs).expect("ipi has a twin");
        assert_eq!(ipi_twin.group.idle, IdleMode::HaltPoll);
        assert_eq!(ipi_twin.profile.host_ns.halt_poll, 50_000);

        let mut pv = config(Bench::IrqLatency, Irqchip::Kernel);
        pv.common.pv_eoi = true;
        assert!(matches!(twin(&case(pv), &base, &costs), Err(NoTwin::PvEoi)));
    }

    #[test]
    fn twin_scenarios_are_the_groups_the_scenario_files_spell() {
        let base = CostProfile::did_2015();
        let costs = host_costs();
        let mut ipi = config(Bench::Ipi, Irqchip::Kernel);
        ipi.common.halt = HaltMode::Poll { ns: 50_000 };
        let whileloop = config(Bench::Whileloop, Irqchip::Kernel);
        let whileloop_group = format!(
            "workload = \"whileloop\"\ntransport = \"pv\"\nrates_pps = [{}]\nnapi_weight = 1\n",
            whileloop.params.rate_hz().expect("whileloop has a rate")
        );
        let cases = [
            (whileloop, whileloop_group.as_str()),
            (
                config(Bench::IrqLatency, Irqchip::Kernel),
                "workload = \"udp-rx\"\ntransport = \"pv\"\nrates_pps = [5000]\nidle = \"halt\"\n\
                 napi_weight = 1\n",
            ),
            (
                cyclictest(Irqchip::Kernel),
                "workload = \"cyclictest\"\nidle = \"halt\"\n",
            ),
            (
                ipi,
                "workload = \"ipi\"\nidle = \"halt-poll\"\nipi_mode = \"unicast\"\n\
                 host = { cores = 3, vms = 1, vcpus_per_vm = 2 }\n",
            ),
        ];
        for (config, group) in cases {
            let twin = twin(&case(config), &base, &costs).expect("has a twin");
            let text = format!(
                "name = \"twin\"\ndescription = \"simulated twin of a real run\"\n\
                 duration_ms = {TWIN_DURATION_MS}\n[[runs]]\npolicies = [\"did\"]\n{group}"
            );
            assert_eq!(
                twin_scenario(&twin, PolicyKind::Did).expect("valid"),
                Scenario::from_toml(&text).expect("parses"),
                "{group}"
            );
        }
    }

    /// A real case of `config` with one run that counted `by_category`
    /// exits and `results` over one second.
    fn case_with(
        config: BenchConfig,
        by_category: serde_json::Value,
        results: serde_json::Value,
    ) -> RealCase {
        let run: RealRun = serde_json::from_value(serde_json::json!({
            "bench": config.bench().name(),
            "interrupts": 1000,
            "exits": {"userspace": 0, "by_reason": {}, "by_category": by_category},
            "exits_per_interrupt": 1.0,
            "results": results,
            "duration_s": 1.0
        }))
        .expect("contract parses");
        RealCase {
            label: "kernel".into(),
            command: "dirq run".into(),
            config,
            repeats: vec![Repeat {
                run,
                cpu_cores: 1.0,
            }],
        }
    }

    fn case(config: BenchConfig) -> RealCase {
        case_with(config, serde_json::json!({}), serde_json::json!({}))
    }

    #[test]
    fn an_ipi_twin_pings_at_the_real_rate_and_polls_where_kvm_halted() {
        let base = CostProfile::did_2015();
        let costs = host_costs();
        let mut config = config(Bench::Ipi, Irqchip::Kernel);
        config.common.halt = HaltMode::None;
        let in_guest = twin(&case(config.clone()), &base, &costs).expect("ipi has a twin");
        assert_eq!(in_guest.group.idle, IdleMode::Poll);
        let trapped = case_with(
            config,
            serde_json::json!({"HLT": 3000}),
            serde_json::json!({"ipis_to_vcpu1": 3000.0}),
        );
        let trapped = twin(&trapped, &base, &costs).expect("ipi has a twin");
        assert_eq!(trapped.group.idle, IdleMode::HaltPoll);
        assert_eq!(trapped.profile.host_ns.halt_poll, base.host_ns.halt_poll);
        assert_eq!(trapped.group.ipi_rate_per_s, 3000);
    }

    #[test]
    fn a_userspace_twin_is_kicked_and_woken_at_the_userspace_paths_costs() {
        let mut obs_costs = host_costs();
        obs_costs.userspace_kick.ns = 40_000.0;
        obs_costs.hlt_wakeup_userspace.ns = 20_000.0;
        let userspace = twin(
            &case(config(Bench::Whileloop, Irqchip::Userspace)),
            &CostProfile::did_2015(),
            &obs_costs,
        )
        .expect("whileloop has a twin");
        assert_eq!(userspace.profile.exit_service_ns.external_interrupt, 40_000);
        assert_eq!(userspace.profile.exit_service_ns.eoi_write, 10_000);
        assert_eq!(userspace.profile.host_ns.wakeup, 20_000);
        // The in-kernel path keeps the kick into KVM.
        let kernel = twin(
            &case(config(Bench::Whileloop, Irqchip::Kernel)),
            &CostProfile::did_2015(),
            &obs_costs,
        )
        .expect("whileloop has a twin");
        assert_eq!(
            kernel.profile.exit_service_ns.external_interrupt,
            CostProfile::did_2015().exit_service_ns.external_interrupt
        );
    }

    fn timer_case(exits_per_interrupt: f64) -> RealCase {
        let config = cyclictest(Irqchip::Kernel);
        let run: RealRun = serde_json::from_value(serde_json::json!({
            "bench": "timer-latency",
            "config": serde_json::to_value(&config).expect("config serializes"),
            "interrupts": 1000,
            "exits": {"total": 3000, "userspace": 0, "kernel": 3000, "by_reason": {}},
            "exits_per_interrupt": exits_per_interrupt,
            "latency_ns": {"mean": 40000.0, "p50": 40000.0, "p99": 60000.0, "max": 90000.0},
            "duration_s": 1.0
        }))
        .expect("contract parses");
        RealCase {
            label: "kernel".into(),
            command: "dirq run timer-latency".into(),
            config,
            repeats: vec![Repeat {
                run,
                cpu_cores: 1.0,
            }],
        }
    }

    #[test]
    fn checks_compare_real_runs_with_their_twins_and_extrapolate() {
        let costs = host_costs();
        let checks = run_checks(
            &[timer_case(3.0)],
            &CostProfile::did_2015(),
            &costs,
            ExitStatistic::EveryExit,
            1,
            &ProgressBar::hidden(),
        );
        assert!(checks.failures.is_empty(), "{:?}", checks.failures);
        let exits = checks
            .comparisons
            .iter()
            .find(|c| c.metric == Metric::ExitsPerInterrupt)
            .expect("exits compared");
        assert_eq!(exits.measured, 3.0);
        // Vanilla: the expiry wakes the halted vCPU (HLT), then EOI and the
        // next TSC-deadline write exit.
        assert!((exits.predicted - 3.0).abs() < 0.05, "{}", exits.predicted);
        assert!(checks
            .comparisons
            .iter()
            .any(|c| c.metric == Metric::LatencyP50Ns && c.measured == 40_000.0));
        let policies: Vec<&str> = checks
            .extrapolation
            .iter()
            .map(|e| e.policy.as_str())
            .collect();
        assert_eq!(policies, ["vanilla", "apicv", "eli", "did"]);
        let exits_of = |policy: &str| {
            checks
                .extrapolation
                .iter()
                .find(|e| e.policy == policy)
                .and_then(|e| e.exits_per_interrupt)
                .expect("predicted")
        };
        assert!(exits_of("did") < exits_of("vanilla"));
    }

    #[test]
    fn on_kvm_pvm_the_twin_counts_what_the_execution_mode_traps() {
        let checks_with = |statistic, irqchip| {
            let mut case = timer_case(1.0);
            case.config.common.irqchip = irqchip;
            let checks = run_checks(
                &[case],
                &CostProfile::did_2015(),
                &host_costs(),
                statistic,
                1,
                &ProgressBar::hidden(),
            );
            checks
                .comparisons
                .iter()
                .find(|c| c.metric == Metric::ExitsPerInterrupt)
                .map(|c| c.predicted)
                .expect("exits compared")
        };
        let pvm = ExitStatistic::WithoutEmulatedLapicWrites;
        // HLT, EOI and the TSC-deadline write; emulated kvm_pvm counts only the HLT.
        let every = checks_with(ExitStatistic::EveryExit, Irqchip::Kernel);
        assert!((every - 3.0).abs() < 0.05, "{every}");
        let kernel = checks_with(pvm, Irqchip::Kernel);
        assert!((kernel - 1.0).abs() < 0.05, "{kernel}");
        // Natively every one of them traps, so do the handler's IRETQ and
        // kvm_pvm's injection into the handler.
        let native = ExitStatistic::NativeTraps {
            pv_eoi_waives: false,
        };
        let native = checks_with(native, Irqchip::Kernel);
        assert!((native - 5.0).abs() < 0.05, "{native}");
        // The userspace irqchip's LAPIC writes are userspace exits, counted anyway.
        let userspace = checks_with(pvm, Irqchip::Userspace);
        assert!((userspace - 3.0).abs() < 0.05, "{userspace}");
    }

    #[test]
    fn natively_a_kicked_interrupt_pays_the_injection_trap_as_a_woken_one_does() {
        // A busy guest's twin: per interrupt, the kick (EXTERNAL_INTERRUPT)
        // and the EOI; no HLT.
        let handled = 1_000 * TWIN_DURATION_MS / 1_000;
        let run: SimRun = serde_json::from_value(serde_json::json!({
            "policy": "vanilla",
            "exits_per_s": 2_000.0,
            "exits_by_reason_per_s": {"EXTERNAL_INTERRUPT": 1_000.0, "MSR_WRITE": 1_000.0},
            "time_in_guest": 0.99,
            "interrupts": {"raised": handled, "handled": handled, "coalesced": 0, "pending_at_end": 0}
        }))
        .expect("contract parses");
        let config = config(Bench::IrqLatency, Irqchip::Kernel);
        let native = ExitStatistic::NativeTraps {
            pv_eoi_waives: false,
        };
        // The twin's two, the injection into the handler and its IRETQ.
        let predicted = native.exits_per_interrupt(&run, &config).expect("handled");
        assert!((predicted - 4.0).abs() < 1e-9, "{predicted}");
        let every = ExitStatistic::EveryExit.exits_per_interrupt(&run, &config);
        assert!((every.expect("handled") - 2.0).abs() < 1e-9);
    }

    #[test]
    fn a_second_run_of_the_same_twin_is_compared_but_not_extrapolated_again() {
        let checks = run_checks(
            &[timer_case(3.0), timer_case(2.5)],
            &CostProfile::did_2015(),
            &host_costs(),
            ExitStatistic::EveryExit,
            1,
            &ProgressBar::hidden(),
        );
        let exit_checks = checks
            .comparisons
            .iter()
            .filter(|c| c.metric == Metric::ExitsPerInterrupt)
            .count();
        assert_eq!(exit_checks, 2);
        assert_eq!(checks.extrapolation.len(), 4);
    }
}
