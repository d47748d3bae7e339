//! The real runs: which a report makes at each depth, each sized to its
//! time budget on this host, the command line that repeats it, and running
//! them (`dirq calibrate` runs its benches the same way).

use dirq_vmm::config::params::{IpiParams, IrqLatencyParams, TimerLatencyParams, WhileloopParams};
use dirq_vmm::config::{
    BenchConfig, BenchParams, CommonSettings, GuestIdle, HaltMode, Inject, Irqchip,
};
use dirq_vmm::probe::{FloorRun, Floors};
use dirq_vmm::RunReport;
use indicatif::ProgressBar;
use serde::Serialize;

use crate::common::progress::StepFailure;
use crate::common::real::{RealCase, Repeat};
use crate::common::views::RealRun;

/// How much `dirq report` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Depth {
    /// Tiny counts, a few scenarios: for the test suite only.
    Smoke,
    /// A subset of benches and scenarios with small counts (under 3 minutes).
    Quick,
    /// Everything with the default counts (under 15 minutes).
    Full,
}

impl Depth {
    /// How many times each real measurement runs: enough at full depth to
    /// show how much a result moves between runs.
    pub fn repeats(self) -> usize {
        match self {
            Depth::Smoke | Depth::Quick => 1,
            Depth::Full => 3,
        }
    }
}

/// The only timer rate the simulator's cyclictest runs: 1 kHz, so the
/// timer bench runs at it and has a twin.
pub const CYCLICTEST_PERIOD_NS: u64 = 1_000_000;

/// The delivery paths compared, cheapest last.
const PATHS: [(Irqchip, Inject, bool); 5] = [
    (Irqchip::Userspace, Inject::Vcpu, false),
    (Irqchip::Split, Inject::Vcpu, false),
    (Irqchip::Kernel, Inject::Vcpu, false),
    (Irqchip::Kernel, Inject::Irqfd, false),
    (Irqchip::Kernel, Inject::Irqfd, true),
];

/// Where `config`'s interrupt path stands among `PATHS` (the userspace
/// irqchip first), which keeps its colour in every figure.
pub fn path_index(config: &BenchConfig) -> Option<usize> {
    let common = &config.common;
    PATHS
        .iter()
        .position(|&path| path == (common.irqchip, common.inject, common.pv_eoi))
}

/// `params` on one of `PATHS`, the guest waiting as `guest_idle` says.
fn with_path(
    params: BenchParams,
    (irqchip, inject, pv_eoi): (Irqchip, Inject, bool),
    guest_idle: GuestIdle,
) -> BenchConfig {
    BenchConfig {
        common: CommonSettings {
            irqchip,
            inject,
            pv_eoi,
            guest_idle,
            ..CommonSettings::new(params.bench())
        },
        params,
    }
}

/// Per counted run at each depth: the most events (what a fast host runs)
/// and the wall time it may take (ms). Full: 18 counted runs, three times
/// each, in under two minutes however slow the host.
fn count_and_budget_ms(depth: Depth) -> (u64, u64) {
    match depth {
        Depth::Smoke => (200, 300),
        Depth::Quick => (1_000, 1_500),
        Depth::Full => (3_000, 2_000),
    }
}

/// Events of a run whose guest polls instead of halting: emulated under
/// kvm_pvm, or with vCPUs sharing a host CPU, a running vCPU takes an
/// interrupt only at its next exit (milliseconds), so more would outlast
/// the watchdog.
const BUSY_GUEST_EVENTS: u64 = 500;

fn events_for(idle: GuestIdle, events: u64) -> u64 {
    match idle {
        GuestIdle::Busy => events.min(BUSY_GUEST_EVENTS),
        GuestIdle::Halt => events,
    }
}

/// Fewer events than this leave a p90 with too few samples above it.
const MIN_EVENTS: u64 = 200;

/// The VMM exits one delivered interrupt costs besides its delivery: the
/// injection (or the kick) and the EOI, on the irqchip the run uses.
const EXITS_PER_INTERRUPT: f64 = 2.0;

/// The wall time one event of `config` takes on the host `floors` were
/// measured on: an IPI-like delivery (into a busy or a halted vCPU, paced
/// as the probe's runs went), the exits its irqchip adds, and no less than
/// the period its rate or timer sets. None when the probe did not time it.
pub fn event_wall_ns(config: &BenchConfig, floors: &Floors) -> Option<f64> {
    let common = &config.common;
    let delivery = match common.guest_idle {
        GuestIdle::Busy => FloorRun::IpiBusy,
        GuestIdle::Halt => FloorRun::IpiHalted,
    };
    let delivery_ns = *floors.event_wall_ns.get(&delivery)?;
    let exit_ns = match common.irqchip {
        Irqchip::Userspace => floors.userspace_exit_ns,
        Irqchip::Split | Irqchip::Kernel => floors.kernel_exit_ns,
    };
    let work_ns = delivery_ns + EXITS_PER_INTERRUPT * exit_ns;
    let period_ns = match &config.params {
        BenchParams::IrqLatency(params) if params.rate_hz > 0 => {
            1e9 / dirq_stats::f64_of(params.rate_hz)
        }
        BenchParams::TimerLatency(params) => dirq_stats::f64_of(params.period_ns),
        _ => 0.0,
    };
    Some(work_ns.max(period_ns))
}

/// The events a counted run's parameters ask for, to resize them.
fn events_mut(params: &mut BenchParams) -> Option<&mut u64> {
    match params {
        BenchParams::IrqLatency(params) => Some(&mut params.count),
        BenchParams::TimerLatency(params) => Some(&mut params.count),
        BenchParams::Ipi(params) => Some(&mut params.count),
        _ => None,
    }
}

/// Cuts `config`'s events to what fits `budget_ms` at the pace `floors`
/// measured, never below `MIN_EVENTS` (or its own count, if smaller) and
/// never above its count. Without floors for it the count stays.
pub fn fit_to_budget(config: &mut BenchConfig, budget_ms: u64, floors: Option<&Floors>) {
    let Some(event_ns) = floors.and_then(|floors| event_wall_ns(config, floors)) else {
        return;
    };
    let Some(events) = events_mut(&mut config.params) else {
        return;
    };
    *events =
        dirq_vmm::probe::events_fitting(budget_ms, event_ns, MIN_EVENTS.min(*events), *events);
}

/// The real runs of one report, in the order they run, each counted run
/// sized to the depth's budget at the pace of the host `floors` were
/// measured on (the depth's most events without them).
pub fn real_plan(depth: Depth, floors: Option<&Floors>) -> Vec<BenchConfig> {
    let (events, budget_ms) = count_and_budget_ms(depth);
    let mut plan = Vec::new();
    let paths: &[usize] = match depth {
        Depth::Smoke => &[0, 4],
        Depth::Quick => &[0, 2, 4],
        Depth::Full => &[0, 1, 2, 3, 4],
    };
    // irq-latency: every path with the guest busy (injection into a running
    // vCPU) and with the guest halted (injection plus wake-up).
    for idle in [GuestIdle::Busy, GuestIdle::Halt] {
        for &path in paths {
            let params = BenchParams::IrqLatency(IrqLatencyParams {
                count: events_for(idle, events),
                ..IrqLatencyParams::default()
            });
            plan.push(with_path(params, PATHS[path], idle));
        }
    }
    // timer-latency: the timer programmed through the VMM and through KVM,
    // at the simulator's cyclictest rate (1 kHz) so the model can follow.
    for &path in &[0, 2, 4] {
        let params = BenchParams::TimerLatency(TimerLatencyParams {
            count: events / 4,
            period_ns: CYCLICTEST_PERIOD_NS,
            ..TimerLatencyParams::default()
        });
        plan.push(with_path(params, PATHS[path], GuestIdle::Halt));
    }
    // ipi: latency against CPU burned across the halt choices.
    let halts: &[(HaltMode, GuestIdle)] = match depth {
        Depth::Smoke => &[
            (HaltMode::Exit, GuestIdle::Halt),
            (HaltMode::None, GuestIdle::Halt),
        ],
        _ => &[
            (HaltMode::Exit, GuestIdle::Halt),
            (HaltMode::Poll { ns: 50_000 }, GuestIdle::Halt),
            (HaltMode::Poll { ns: 500_000 }, GuestIdle::Halt),
            (HaltMode::None, GuestIdle::Halt),
            (HaltMode::Exit, GuestIdle::Busy),
        ],
    };
    for &(halt, idle) in halts {
        let params = BenchParams::Ipi(IpiParams {
            count: events_for(idle, events),
            ..IpiParams::default()
        });
        // KVM's LAPIC without PV EOI: the path the simulator models.
        let mut config = with_path(params, PATHS[2], idle);
        config.common.halt = halt;
        plan.push(config);
    }
    // whileloop: the share of time the guest keeps as the rate grows.
    let (rates, duration_ms): (&[u64], u64) = match depth {
        Depth::Smoke => (&[5_000], 20),
        Depth::Quick => (&[2_000, 10_000, 20_000], 100),
        Depth::Full => (&[2_000, 5_000, 10_000, 20_000, 40_000], 300),
    };
    for &path in &[0, 2, 4] {
        for &rate_hz in rates {
            let params = BenchParams::Whileloop(WhileloopParams {
                rate_hz,
                duration_ms,
            });
            plan.push(with_path(params, PATHS[path], GuestIdle::Halt));
        }
    }
    for config in &mut plan {
        fit_to_budget(config, budget_ms, floors);
    }
    plan
}

/// "kernel + irqfd + PV EOI · busy": what tells the runs of one bench apart.
pub fn path_label(config: &BenchConfig) -> String {
    let common = &config.common;
    let mut label = common.irqchip.to_string();
    if common.irqchip != Irqchip::Userspace {
        if common.inject == Inject::Irqfd {
            label.push_str(" + irqfd");
        }
        if common.pv_eoi {
            label.push_str(" + PV EOI");
        }
    }
    match &config.params {
        BenchParams::IrqLatency(_) => {
            label.push_str(match common.guest_idle {
                GuestIdle::Busy => " · busy",
                GuestIdle::Halt => " · halted",
            });
        }
        BenchParams::Ipi(_) => {
            label = match (common.guest_idle, common.halt) {
                (GuestIdle::Busy, _) => "guest polls (idle=poll)".to_string(),
                (GuestIdle::Halt, HaltMode::Exit) => "HLT exits".to_string(),
                (GuestIdle::Halt, HaltMode::None) => "HLT does not exit".to_string(),
                (GuestIdle::Halt, HaltMode::Poll { ns }) => {
                    format!("halt polling {} us", ns / 1_000)
                }
            };
        }
        BenchParams::Vioapic(params) => label = format!("VIOAPIC {}", params.vioapic),
        BenchParams::IoBatch(params) => {
            label = if params.io_batch {
                "one doorbell per command"
            } else {
                "port writes"
            }
            .to_string()
        }
        BenchParams::Tick(params) => label = format!("tick scale {}", params.tick_scale),
        BenchParams::TimerLatency(_)
        | BenchParams::Whileloop(_)
        | BenchParams::ExitCost(_)
        | BenchParams::Fault(_)
        | BenchParams::HaltWakeup(_)
        | BenchParams::Hostile(_) => {}
    }
    label
}

/// The `dirq run` command line that repeats a run: the interrupt path,
/// the vCPUs where they are not the default two, the bench's parameters.
pub fn command_line(config: &BenchConfig) -> String {
    let common = &config.common;
    let mut command = format!(
        "dirq run {} --irqchip {} --inject {}{} --halt {} --guest-idle {}",
        config.bench(),
        common.irqchip,
        common.inject,
        if common.pv_eoi { " --pv-eoi" } else { "" },
        common.halt,
        common.guest_idle
    );
    if common.vcpus != CommonSettings::new(config.bench()).vcpus {
        command.push_str(&format!(" --vcpus {}", common.vcpus));
    }
    for param in config.params.params() {
        command.push_str(&format!(" {param}"));
    }
    if let Some(exec) = common.guest_exec {
        command.push_str(&format!(" --guest-exec {exec}"));
    }
    command
}

/// How many of `cases` the report traces again: every irq-latency one.
pub fn traced_count(cases: &[RealCase]) -> u64 {
    let traced = cases
        .iter()
        .filter(|case| matches!(case.config.params, BenchParams::IrqLatency(_)))
        .count();
    u64::try_from(traced).unwrap_or(u64::MAX)
}

/// The watchdog of a report's real run: a run that hangs costs this, times
/// its repeats, instead of the 30 s a `dirq run` waits.
const REPORT_RUN_TIMEOUT_MS: u64 = 10_000;

/// One real run with the host CPU its vCPUs burned. The typed report is
/// kept for data.json next to the view the figures read.
pub fn run_case(config: &BenchConfig) -> anyhow::Result<(Repeat, RunReport)> {
    let report = dirq_vmm::bench::run(config)?;
    let run = RealRun::from(&report);
    let cpu_cores = if report.duration_s > 0.0 {
        report.exits.vcpu_cpu_s / report.duration_s
    } else {
        0.0
    };
    Ok((Repeat { run, cpu_cores }, report))
}

/// Runs every config `repeats` times, round after round so that a slow
/// spell of the host spreads over all configs rather than hitting one;
/// advances `bar` once per run. Failures are returned, one per
/// configuration, so one broken path does not cost the reader the rest of
/// the report.
pub fn run_all(
    plan: &[BenchConfig],
    repeats: usize,
    bar: &ProgressBar,
) -> (Vec<RealCase>, Vec<RunReport>, Vec<StepFailure>) {
    let mut cases: Vec<RealCase> = plan
        .iter()
        .map(|config| RealCase {
            label: path_label(config),
            command: command_line(config),
            config: config.clone(),
            repeats: Vec::new(),
        })
        .collect();
    let mut reports = Vec::new();
    // Per case: how many of its runs failed, and the first error.
    let mut failed: Vec<(usize, Option<String>)> = vec![(0, None); cases.len()];
    for round in 1..=repeats {
        for (case, (count, first)) in cases.iter_mut().zip(&mut failed) {
            crate::common::progress::working_on(
                bar,
                format!(
                    "{} {} (run {round} of {repeats})",
                    case.config.bench(),
                    case.label
                ),
            );
            let mut config = case.config.clone();
            config.common.timeout_ms = Some(
                config
                    .common
                    .timeout_ms
                    .unwrap_or(REPORT_RUN_TIMEOUT_MS)
                    .min(REPORT_RUN_TIMEOUT_MS),
            );
            match run_case(&config) {
                Ok((repeat, report)) => {
                    case.repeats.push(repeat);
                    reports.push(report);
                }
                Err(err) => {
                    *count += 1;
                    first.get_or_insert_with(|| format!("{err:#}"));
                }
            }
            bar.inc(1);
        }
    }
    let failures = cases
        .iter()
        .zip(failed)
        .filter_map(|(case, (count, first))| {
            Some(StepFailure {
                configuration: format!("{} · {}", case.config.bench(), case.label),
                reason: format!("failed in {count} of {repeats} runs: {}", first?),
                command: Some(case.command.clone()),
            })
        })
        .collect();
    cases.retain(|case| !case.repeats.is_empty());
    (cases, reports, failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_planned_run_is_a_valid_configuration() {
        for depth in [Depth::Smoke, Depth::Quick, Depth::Full] {
            let plan = real_plan(depth, None);
            assert!(!plan.is_empty());
            for config in &plan {
                config
                    .validate()
                    .unwrap_or_else(|err| panic!("{}: {err}", command_line(config)));
            }
        }
    }

    #[test]
    fn deeper_reports_run_more() {
        let sizes: Vec<usize> = [Depth::Smoke, Depth::Quick, Depth::Full]
            .map(|d| real_plan(d, None).len())
            .to_vec();
        assert!(sizes[0] < sizes[1] && sizes[1] < sizes[2], "{sizes:?}");
    }

    /// Floors of a host whose every trap costs `scale` times a fast
    /// kvm_pvm host's (port I/O 30 us, RDMSR 2.2 us, IPIs 50 and 100 us a
    /// probe event).
    fn floors(scale: f64) -> Floors {
        Floors {
            userspace_exit_ns: 30_000.0 * scale,
            kernel_exit_ns: 2_200.0 * scale,
            self_ipi_p50_ns: 5_000.0 * scale,
            ipi_busy_p50_ns: 20_000.0 * scale,
            ipi_halted_p50_ns: 45_000.0 * scale,
            ipi_busy_target_ns: 30_000.0 * scale,
            userspace_ipi_busy_target_ns: 100_000.0 * scale,
            userspace_ipi_busy_send_ns: 30_000.0 * scale,
            ipi_busy_send_ns: 10_000.0 * scale,
            placement_note: None,
            spread: Default::default(),
            event_wall_ns: [
                (FloorRun::Exits, 40_000.0 * scale),
                (FloorRun::IpiBusy, 50_000.0 * scale),
                (FloorRun::IpiHalted, 100_000.0 * scale),
            ]
            .into(),
        }
    }

    /// The plan's estimated wall time, all repeats, at `floors`' pace.
    fn planned_s(plan: &[BenchConfig], depth: Depth, floors: &Floors) -> f64 {
        let repeats = dirq_stats::f64_of(depth.repeats() as u64);
        plan.iter()
            .filter_map(|config| {
                let mut params = config.params.clone();
                let events = *events_mut(&mut params)?;
                Some(dirq_stats::f64_of(events) * event_wall_ns(config, floors)? * repeats / 1e9)
            })
            .sum()
    }

    #[test]
    fn counts_follow_the_probes_pace_within_the_budget() {
        let fast = floors(1.0);
        let slow = floors(10.0);
        for depth in [Depth::Quick, Depth::Full] {
            let unsized_plan = real_plan(depth, None);
            let fast_plan = real_plan(depth, Some(&fast));
            let slow_plan = real_plan(depth, Some(&slow));
            let counts = |plan: &[BenchConfig]| -> Vec<u64> {
                plan.iter()
                    .filter_map(|config| events_mut(&mut config.params.clone()).copied())
                    .collect()
            };
            // A slow host runs fewer events of every counted run, never
            // fewer than a p90 needs, and never more than a fast one.
            for ((&most, &fast), &slow) in counts(&unsized_plan)
                .iter()
                .zip(&counts(&fast_plan))
                .zip(&counts(&slow_plan))
            {
                assert!(slow <= fast && fast <= most, "{most} {fast} {slow}");
                assert!(slow >= MIN_EVENTS.min(most), "{slow}");
            }
            assert!(counts(&slow_plan).iter().sum::<u64>() < counts(&fast_plan).iter().sum());
            // Both fit the depth's budget: every run within its share.
            let budget_s = dirq_stats::f64_of(count_and_budget_ms(depth).1) / 1e3
                * dirq_stats::f64_of(counts(&slow_plan).len() as u64)
                * dirq_stats::f64_of(depth.repeats() as u64);
            for (plan, floors) in [(&fast_plan, &fast), (&slow_plan, &slow)] {
                let planned = planned_s(plan, depth, floors);
                assert!(
                    planned <= budget_s * 1.01,
                    "{depth:?}: {planned} s > {budget_s} s"
                );
            }
            // Unsized, some run would outlast its share on the slow host.
            let run_budget_s = dirq_stats::f64_of(count_and_budget_ms(depth).1) / 1e3;
            assert!(unsized_plan.iter().any(|config| planned_s(
                std::slice::from_ref(config),
                Depth::Quick,
                &slow
            ) > run_budget_s));
        }
        // A full report's counted runs on a 10x host: under two minutes.
        assert!(planned_s(&real_plan(Depth::Full, Some(&slow)), Depth::Full, &slow) < 120.0);
    }

    #[test]
    fn a_run_at_a_fixed_rate_is_paced_by_its_rate_on_a_fast_host() {
        let config = with_path(
            BenchParams::IrqLatency(IrqLatencyParams::default()),
            PATHS[4],
            GuestIdle::Halt,
        );
        // 5,000 interrupts/s: 200 us each, slower than the work (104.4 us).
        assert_eq!(event_wall_ns(&config, &floors(1.0)), Some(200_000.0));
        assert_eq!(event_wall_ns(&config, &floors(10.0)), Some(1_044_000.0));
        let mut no_pace = floors(1.0);
        no_pace.event_wall_ns.clear();
        assert_eq!(event_wall_ns(&config, &no_pace), None);
    }

    #[test]
    fn labels_and_commands_name_the_path() {
        let irq = BenchParams::new(dirq_vmm::config::Bench::IrqLatency);
        let config = with_path(irq, PATHS[4], GuestIdle::Busy);
        assert_eq!(path_label(&config), "kernel + irqfd + PV EOI · busy");
        assert_eq!(
            command_line(&config),
            "dirq run irq-latency --irqchip kernel --inject irqfd --pv-eoi --halt exit \
             --guest-idle busy --count 5000 --rate 5000 --source msi"
        );
        let ipi = BenchParams::Ipi(IpiParams {
            ipi: dirq_vmm::config::IpiKind::Broadcast,
            ..IpiParams::default()
        });
        let mut ipi = with_path(ipi, PATHS[2], GuestIdle::Halt);
        ipi.common.halt = HaltMode::Poll { ns: 50_000 };
        ipi.common.vcpus = 4;
        assert_eq!(path_label(&ipi), "halt polling 50 us");
        assert_eq!(
            command_line(&ipi),
            "dirq run ipi --irqchip kernel --inject vcpu --halt poll:50000 --guest-idle halt \
             --vcpus 4 --ipi broadcast --ipi-measure round-trip --count 5000"
        );
    }
}
