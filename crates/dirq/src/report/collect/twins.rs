//! The simulated twins of the real runs. Each real run the simulator can
//! express gets a twin: the same workload shape, the vanilla
//! (emulated-LAPIC) design, and this host's calibrated costs for the path
//! the real run took. Twins of KVM's in-kernel LAPIC also run under
//! APICv, ELI and DID with the same costs. This module only runs them;
//! `analyse::checks` compares and extrapolates.

use anyhow::{Context, Result};
use dirq_sim::design::DesignKind;
use dirq_sim::scenario::{
    Arrivals, HostShape, IdleMode, IpiMode, PvEoiSetting, RunGroup, RxHandler, Scenario, Transport,
    WorkloadKind, MAX_IPI_RATE_PER_S,
};
use dirq_sim::CostProfile;
use dirq_stats::round_u64;
use dirq_vmm::config::{BenchConfig, BenchParams, GuestIdle, HaltMode, Irqchip};
use indicatif::ProgressBar;

use crate::calibrate::costs::HostCosts;
use crate::common::plan::CYCLICTEST_PERIOD_NS;
use crate::common::real::RealCase;
use crate::common::views::SimRun;

/// The designs a twin of KVM's in-kernel LAPIC also runs under.
const EXTRAPOLATED: [DesignKind; 3] = [DesignKind::Apicv, DesignKind::Eli, DesignKind::Did];

/// Simulated time per twin run: long enough for thousands of interrupts at
/// the rates the real benches use.
pub const TWIN_DURATION_MS: u64 = 500;

/// Why a real run has no simulated twin.
#[derive(Debug, thiserror::Error)]
pub enum NoTwin {
    #[error("no simulated workload of this shape")]
    Shape,
}

/// A real run's simulated twin: a one-group scenario and the path's costs.
struct Twin {
    /// The scenario's one group, without `designs`.
    group: RunGroup,
    profile: CostProfile,
}

/// The costs of one real path. Our guest test kernel has no background
/// device or paging activity, so the idle VM's exits (a property of the
/// guest OS in did-2015) are zero, and no periodic tick of its own (its
/// timer fires only when a bench arms it), so no guest tick. With the userspace irqchip every
/// interrupt-controller exit is served by the VMM: a userspace exit; a
/// kick (the VMM's signal to a running vCPU) costs what the probe's
/// userspace-LAPIC IPI floors say it takes from a busy vCPU, and a halted
/// vCPU waits in the VMM, waking at the userspace path's own cost.
fn path_profile(base: &CostProfile, costs: &HostCosts, config: &BenchConfig) -> CostProfile {
    let mut profile = base.clone();
    profile.idle_exits_per_s.io_instruction = 0.0;
    profile.idle_exits_per_s.ept_violation = 0.0;
    profile.guest_tick.hz = 0;
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

/// Whether the real run's guest used KVM's PV EOI, and whether this host
/// ever set its flag (`host_flags_pv_eoi`: some real PV EOI run skipped
/// an EOI). A host that never did gets a twin that skips none.
fn pv_eoi_setting(config: &BenchConfig, host_flags_pv_eoi: bool) -> PvEoiSetting {
    match (config.common.pv_eoi, host_flags_pv_eoi) {
        (false, _) => PvEoiSetting::Off,
        (true, true) => PvEoiSetting::On,
        (true, false) => PvEoiSetting::NeverFlagged,
    }
}

/// The simulated twin of a real run, or why there is none.
fn twin(
    case: &RealCase,
    base: &CostProfile,
    costs: &HostCosts,
    host_flags_pv_eoi: bool,
) -> Result<Twin, NoTwin> {
    let config = &case.config;
    let idle = idle_mode(case);
    let mut group = match &config.params {
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
    group.pv_eoi = pv_eoi_setting(config, host_flags_pv_eoi);
    Ok(Twin {
        group,
        profile: path_profile(base, costs, config),
    })
}

/// A twin of dirq's device thread: `rate_hz` virtual-device events a
/// second. The thread paces its raises 1/`rate_hz` apart, so the twin's
/// source is paced too (a Poisson one sends some back to back, which
/// merge). dirq's guest has no NAPI: its handler acknowledges the event
/// and never polls for more, so a raise during the handler waits in the
/// IRR as the next interrupt; NAPI would mask the queue and take it in a
/// re-poll, without the interrupt's exits.
fn device_events(workload: WorkloadKind, rate_hz: u64) -> RunGroup {
    let mut group = RunGroup::new(workload, Vec::new());
    group.transport = Transport::Pv;
    group.rates_pps = vec![rate_hz];
    group.arrivals = Arrivals::Paced;
    group.rx_handler = RxHandler::PerInterrupt;
    group
}

/// The vCPUs of a twin: two for the IPI ping-pong, one for every other
/// workload (the scenarios' default).
pub fn twin_vcpus(config: &BenchConfig) -> u32 {
    match config.params {
        BenchParams::Ipi(_) => 2,
        _ => 1,
    }
}

/// The one-run scenario of a twin under one design.
fn twin_scenario(twin: &Twin, design: DesignKind) -> Result<Scenario> {
    let mut group = twin.group.clone();
    group.designs = vec![design];
    let scenario = Scenario {
        name: "twin".into(),
        description: "simulated twin of a real run".into(),
        duration_ms: TWIN_DURATION_MS,
        nic: Default::default(),
        profile: Default::default(),
        figure: None,
        runs: vec![group],
    };
    scenario.validate().context("twin scenario")?;
    Ok(scenario)
}

/// One simulated twin run under one design.
fn simulate(twin: &Twin, design: DesignKind, seed: u64) -> Result<SimRun> {
    let scenario = twin_scenario(twin, design)?;
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

/// The trace of `case`'s twin under vanilla and, for KVM's in-kernel
/// LAPIC, the designs it is extrapolated to: `duration_ms` simulated, one
/// process per design; why there is none where the simulator cannot
/// express the case.
pub fn trace_twins(
    case: &RealCase,
    base: &CostProfile,
    costs: &HostCosts,
    host_flags_pv_eoi: bool,
    seed: u64,
    duration_ms: u64,
) -> Result<Result<serde_json::Value, NoTwin>> {
    let twin = match twin(case, base, costs, host_flags_pv_eoi) {
        Ok(twin) => twin,
        Err(why) => return Ok(Err(why)),
    };
    let mut scenario = twin_scenario(&twin, DesignKind::Vanilla)?;
    scenario.duration_ms = duration_ms;
    if case.config.common.irqchip == Irqchip::Kernel {
        scenario.runs[0].designs.extend(EXTRAPOLATED);
    }
    let options = dirq_sim::RunOptions {
        seed,
        profile: Some(twin.profile.clone()),
        trace: true,
    };
    let output = dirq_sim::run_scenario(&scenario, &options)?;
    Ok(Ok(output
        .trace
        .context("the simulator returned no trace")?))
}

/// One twin run under one design, or why the simulator could not run it.
pub struct TwinRun {
    pub design: DesignKind,
    pub outcome: Result<SimRun>,
}

/// What the twin of one real case ran.
pub enum CaseTwin {
    /// The simulator cannot express the real run.
    Unmodelled(NoTwin),
    Simulated {
        /// Vanilla first, then the extrapolated designs if `extrapolated`.
        runs: Vec<TwinRun>,
        /// Whether this twin also ran under the other designs: only twins
        /// of KVM's in-kernel LAPIC (the one the designs replace), once
        /// per distinct twin.
        extrapolated: bool,
    },
}

/// Runs each real case's twin under vanilla and, where it stands for KVM's
/// in-kernel LAPIC, under the extrapolated designs; one entry per case,
/// in order. `host_flags_pv_eoi`: some real run with PV EOI had an EOI
/// skipped (KVM set the flag on this host). `bar` advances once per real
/// case.
pub fn run_twins(
    cases: &[RealCase],
    base: &CostProfile,
    costs: &HostCosts,
    host_flags_pv_eoi: bool,
    seed: u64,
    bar: &ProgressBar,
) -> Vec<CaseTwin> {
    // Twins already extrapolated: paths that differ only where APICv, ELI
    // and DID would replace them (how the VMM injects, PV EOI) share a twin.
    let mut extrapolated: Vec<(RunGroup, u64)> = Vec::new();
    cases
        .iter()
        .map(|case| {
            crate::common::progress::working_on(bar, case.configuration_name());
            let outcome = match twin(case, base, costs, host_flags_pv_eoi) {
                Err(reason) => CaseTwin::Unmodelled(reason),
                Ok(twin) => {
                    // The extrapolated designs have no PV EOI to waive.
                    let group = RunGroup {
                        pv_eoi: PvEoiSetting::Off,
                        ..twin.group.clone()
                    };
                    let key = (group, twin.profile.host_ns.halt_poll);
                    let extrapolate = case.config.common.irqchip == Irqchip::Kernel
                        && !extrapolated.contains(&key);
                    if extrapolate {
                        extrapolated.push(key);
                    }
                    let others: &[DesignKind] = if extrapolate { &EXTRAPOLATED } else { &[] };
                    let runs = std::iter::once(&DesignKind::Vanilla)
                        .chain(others)
                        .map(|&design| TwinRun {
                            design,
                            outcome: simulate(&twin, design, seed),
                        })
                        .collect();
                    CaseTwin::Simulated {
                        runs,
                        extrapolated: extrapolate,
                    }
                }
            };
            bar.inc(1);
            outcome
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::collect::fixtures::{case, case_with, config, cyclictest, host_costs};
    use dirq_vmm::config::Bench;
    use dirq_vmm::results::{BenchResult, IpiResult, IpisByVcpu};

    #[test]
    fn each_real_bench_gets_the_twin_of_its_shape() {
        let base = CostProfile::did_2015();
        let costs = host_costs();
        let irq = twin(
            &case(config(Bench::IrqLatency, Irqchip::Kernel)),
            &base,
            &costs,
            false,
        )
        .expect("irq-latency has a twin");
        assert_eq!(irq.group.workload, WorkloadKind::UdpRx);
        assert_eq!(irq.group.rates_pps, [5000]);
        assert_eq!(irq.profile.idle_exits_per_s.io_instruction, 0.0);

        let timer = config(Bench::TimerLatency, Irqchip::Userspace);
        assert!(
            matches!(twin(&case(timer), &base, &costs, false), Err(NoTwin::Shape)),
            "only 1 kHz timers have a twin"
        );
        let timer = cyclictest(Irqchip::Userspace);
        let timer_twin = twin(&case(timer), &base, &costs, false).expect("1 kHz timer has a twin");
        assert_eq!(timer_twin.group.workload, WorkloadKind::Cyclictest);
        // The userspace irqchip serves every interrupt-controller exit in the VMM.
        assert_eq!(timer_twin.profile.exit_service_ns.eoi_write, 10_000);
        assert_eq!(timer_twin.profile.exit_service_ns.timer_write, 10_000);

        let mut ipi = config(Bench::Ipi, Irqchip::Kernel);
        ipi.common.halt = HaltMode::Poll { ns: 50_000 };
        let ipi_twin = twin(&case(ipi), &base, &costs, false).expect("ipi has a twin");
        assert_eq!(ipi_twin.group.idle, IdleMode::HaltPoll);
        assert_eq!(ipi_twin.profile.host_ns.halt_poll, 50_000);

        // PV EOI runs have twins: skipping EOIs where this host's KVM set
        // the flag in some real run, and none where it never did.
        let mut pv = config(Bench::IrqLatency, Irqchip::Kernel);
        pv.common.pv_eoi = true;
        for (flags, setting) in [
            (true, PvEoiSetting::On),
            (false, PvEoiSetting::NeverFlagged),
        ] {
            let pv_twin = twin(&case(pv.clone()), &base, &costs, flags).expect("PV EOI twin");
            assert_eq!(pv_twin.group.pv_eoi, setting);
            assert_eq!(pv_twin.group.rates_pps, irq.group.rates_pps);
        }
        assert_eq!(irq.group.pv_eoi, PvEoiSetting::Off);
    }

    #[test]
    fn twin_scenarios_are_the_groups_the_scenario_files_spell() {
        let base = CostProfile::did_2015();
        let costs = host_costs();
        let mut ipi = config(Bench::Ipi, Irqchip::Kernel);
        ipi.common.halt = HaltMode::Poll { ns: 50_000 };
        let whileloop = config(Bench::Whileloop, Irqchip::Kernel);
        let whileloop_group = format!(
            "workload = \"whileloop\"\ntransport = \"pv\"\nrates_pps = [{}]\narrivals = \"paced\"\n\
             rx_handler = \"per-interrupt\"\n",
            whileloop.params.rate_hz().expect("whileloop has a rate")
        );
        let cases = [
            (whileloop, whileloop_group.as_str()),
            (
                config(Bench::IrqLatency, Irqchip::Kernel),
                "workload = \"udp-rx\"\ntransport = \"pv\"\nrates_pps = [5000]\nidle = \"halt\"\n\
                 arrivals = \"paced\"\nrx_handler = \"per-interrupt\"\n",
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
            let twin = twin(&case(config), &base, &costs, false).expect("has a twin");
            let text = format!(
                "name = \"twin\"\ndescription = \"simulated twin of a real run\"\n\
                 duration_ms = {TWIN_DURATION_MS}\n[[runs]]\ndesigns = [\"did\"]\n{group}"
            );
            assert_eq!(
                twin_scenario(&twin, DesignKind::Did).expect("valid"),
                Scenario::from_toml(&text).expect("parses"),
                "{group}"
            );
        }
    }

    #[test]
    fn an_ipi_twin_pings_at_the_real_rate_and_polls_where_kvm_halted() {
        let base = CostProfile::did_2015();
        let costs = host_costs();
        let mut config = config(Bench::Ipi, Irqchip::Kernel);
        config.common.halt = HaltMode::None;
        let in_guest = twin(&case(config.clone()), &base, &costs, false).expect("ipi has a twin");
        assert_eq!(in_guest.group.idle, IdleMode::Poll);
        let pinged = BenchResult::Ipi(IpiResult {
            handled: IpisByVcpu(vec![3000, 3000]),
            ..IpiResult::default()
        });
        let trapped = case_with(config, serde_json::json!({"HLT": 3000}), &pinged);
        let trapped = twin(&trapped, &base, &costs, false).expect("ipi has a twin");
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
            false,
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
            false,
        )
        .expect("whileloop has a twin");
        assert_eq!(
            kernel.profile.exit_service_ns.external_interrupt,
            CostProfile::did_2015().exit_service_ns.external_interrupt
        );
    }
}
