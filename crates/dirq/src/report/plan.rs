//! Which real runs `dirq report` makes at each depth, and running them.

use dirq_vmm::config::params::{IpiParams, IrqLatencyParams, TimerLatencyParams, WhileloopParams};
use dirq_vmm::config::{
    BenchConfig, BenchParams, CommonSettings, GuestIdle, HaltMode, Inject, Irqchip,
};
use dirq_vmm::RunReport;
use indicatif::ProgressBar;

use super::checks::CYCLICTEST_PERIOD_NS;
use super::data::Depth;
use super::progress::StepFailure;
use super::real::{RealCase, Repeat};
use super::views::RealRun;

/// The delivery paths compared, cheapest last.
const PATHS: [(Irqchip, Inject, bool); 5] = [
    (Irqchip::Userspace, Inject::Vcpu, false),
    (Irqchip::Split, Inject::Vcpu, false),
    (Irqchip::Kernel, Inject::Vcpu, false),
    (Irqchip::Kernel, Inject::Irqfd, false),
    (Irqchip::Kernel, Inject::Irqfd, true),
];

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

/// Events per counted run at each depth.
fn count(depth: Depth) -> u64 {
    match depth {
        Depth::Smoke => 200,
        Depth::Quick => 1_000,
        // Three repeats of every run must fit the report's five minutes.
        Depth::Full => 3_000,
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

/// The real runs of one report, in the order they run.
pub fn real_plan(depth: Depth) -> Vec<BenchConfig> {
    let events = count(depth);
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
            super::progress::working_on(
                bar,
                format!(
                    "{} {} (run {round} of {repeats})",
                    case.config.bench(),
                    case.label
                ),
            );
            let mut config = case.config.clone();
            config.common.timeout_ms = config.common.timeout_ms.min(REPORT_RUN_TIMEOUT_MS);
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
            let plan = real_plan(depth);
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
            .map(|d| real_plan(d).len())
            .to_vec();
        assert!(sizes[0] < sizes[1] && sizes[1] < sizes[2], "{sizes:?}");
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
