//! Model against reality, and extrapolation: each real run against its
//! simulated twin (`collect::twins`), and the twins under the other
//! designs. Pure functions of the collected runs.

use std::collections::BTreeMap;

use dirq_sim::design::DesignKind;
use dirq_stats::f64_of;
use dirq_vmm::config::{BenchConfig, BenchParams, GuestExec, GuestIdle, Irqchip, Named};
use dirq_vmm::exits::VmxExit;
use dirq_vmm::probe::{Floors, ProbeReport};
use serde::Serialize;

use super::misses::{explain, MissExplained, TwinRates};
use super::model::{Comparison, Metric};
use crate::calibrate::costs::HostCosts;
use crate::common::format::compact_number;
use crate::common::plan::path_label;
use crate::common::progress::StepFailure;
use crate::common::real::RealCase;
use crate::common::spread::Spread;
use crate::common::views::SimRun;
use crate::report::collect::twins::{twin_vcpus, CaseTwin, TWIN_DURATION_MS};

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
fn exits_per_interrupt_by_reason(run: &SimRun) -> BTreeMap<VmxExit, f64> {
    seconds_per_interrupt(run)
        .map(|per| {
            run.exits_by_reason_per_s
                .iter()
                .map(|(&reason, rate)| (reason, rate * per))
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
    /// guest code) and its handler's IRETQ: `dirq run` counts three OTHER
    /// exits per interrupt on every in-kernel path (timer-latency exactly
    /// HLT + arm + EOI + IRETQ + injection), the EOI among the twin's own
    /// (a PV EOI twin skips it only where this host's KVM set the flag).
    NativeTraps,
}

/// Every handler of dirq's guest returns with one IRETQ, and kvm_pvm
/// enters the guest's handler with one more trap: both count natively
/// (docs/native.md).
const NATIVE_TRAPS_PER_INTERRUPT: f64 = 2.0;

/// The exit reasons of LAPIC register writes.
const LAPIC_WRITE_REASONS: [VmxExit; 2] = [VmxExit::MsrWrite, VmxExit::ApicAccess];

impl ExitStatistic {
    /// The statistic of the host `probe` describes.
    pub fn of_host(probe: Option<&ProbeReport>) -> Self {
        match probe.map(|probe| probe.guest_exec) {
            Some(GuestExec::Native) => ExitStatistic::NativeTraps,
            Some(GuestExec::Emulated) => ExitStatistic::WithoutEmulatedLapicWrites,
            Some(GuestExec::Hardware) | None => ExitStatistic::EveryExit,
        }
    }

    /// A twin's exits per interrupt as this statistic counts them. With
    /// the userspace irqchip every LAPIC write is a userspace exit, counted
    /// on every backend.
    fn exits_per_interrupt(self, run: &SimRun, config: &BenchConfig) -> Option<f64> {
        if self == ExitStatistic::NativeTraps {
            let exits = per_handled_interrupt(run, run.exits_per_s)?;
            return Some(exits + NATIVE_TRAPS_PER_INTERRUPT);
        }
        let emulated = self == ExitStatistic::WithoutEmulatedLapicWrites
            && config.common.irqchip != Irqchip::Userspace;
        let uncounted: f64 = if emulated {
            LAPIC_WRITE_REASONS
                .iter()
                .filter_map(|reason| run.exits_by_reason_per_s.get(reason))
                .sum()
        } else {
            0.0
        };
        per_handled_interrupt(run, run.exits_per_s - uncounted)
    }
}

/// A real case's latency p50 as the simulator predicts it: one way (the
/// real IPI bench times a round trip).
fn one_way_p50(case: &RealCase) -> Option<Spread> {
    let p50 = case.p50()?;
    Some(match case.config.params {
        BenchParams::Ipi(_) => p50.map(|ns| ns / 2.0),
        _ => p50,
    })
}

/// The numbers a real run and its twin are compared on.
fn compare(case: &RealCase, predicted: &SimRun, statistic: ExitStatistic) -> Vec<Comparison> {
    let name = case.configuration_name();
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
    if let (Some(measured), Some(busy)) = (case.cpu_cores(), predicted.cpu_busy) {
        comparisons.push(Comparison::new(
            name.clone(),
            Metric::HostCpuCores,
            measured,
            busy * f64::from(twin_vcpus(&case.config)),
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
    case.spread(|r| r.run.results.whileloop().ok()?.lost_per_interrupt_ns)
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

/// One twin under one design, for the extrapolation.
#[derive(Debug, Clone, Serialize)]
pub struct Extrapolated {
    pub workload: String,
    /// The real bench the workload's twin stands for.
    pub bench: String,
    pub design: DesignKind,
    /// Every exit counted, as on a VT-x host with this host's costs.
    pub exits_per_interrupt: Option<f64>,
    /// As this host's KVM counts them (kvm_pvm's own traps included): the
    /// prediction the model check compares; on the vanilla twin only.
    pub exits_per_interrupt_counted_here: Option<f64>,
    /// Empty when the run handled no interrupt.
    pub exits_per_interrupt_by_reason: BTreeMap<VmxExit, f64>,
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
        design: DesignKind,
        run: &SimRun,
        case: &RealCase,
        statistic: ExitStatistic,
    ) -> Self {
        let vanilla = design == DesignKind::Vanilla;
        Self {
            workload,
            bench: case.config.bench().name().to_string(),
            design,
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

/// Compares each real case with its vanilla twin, explains every miss,
/// and keeps the extrapolated twins' figures; `twins` holds one entry per
/// case, in order.
pub fn check(
    cases: &[RealCase],
    twins: &[CaseTwin],
    statistic: ExitStatistic,
    floors: Option<&Floors>,
    costs: Option<&HostCosts>,
) -> ModelChecks {
    let mut checks = ModelChecks {
        comparisons: Vec::new(),
        unmodelled: Vec::new(),
        extrapolation: Vec::new(),
        misses: Vec::new(),
        failures: Vec::new(),
    };
    for (case, twin) in cases.iter().zip(twins) {
        let configuration = case.configuration_name();
        let (runs, extrapolated) = match twin {
            CaseTwin::Unmodelled(reason) => {
                checks.unmodelled.push(Unmodelled {
                    configuration,
                    reason: reason.to_string(),
                });
                continue;
            }
            CaseTwin::Simulated { runs, extrapolated } => (runs, *extrapolated),
        };
        for twin_run in runs {
            let design = twin_run.design;
            let run = match &twin_run.outcome {
                Ok(run) => run,
                Err(err) => {
                    checks.failures.push(StepFailure {
                        configuration: format!(
                            "the twin of {configuration} under {}",
                            design.name()
                        ),
                        reason: format!("{err:#}"),
                        command: Some(case.command.clone()),
                    });
                    continue;
                }
            };
            if design == DesignKind::Vanilla {
                let comparisons = compare(case, run, statistic);
                let predicted = TwinRates {
                    seconds_per_interrupt: seconds_per_interrupt(run),
                    exits_per_interrupt_by_reason: exits_per_interrupt_by_reason(run),
                };
                checks.misses.extend(
                    comparisons
                        .iter()
                        .filter(|c| !c.within_tolerance)
                        .map(|c| explain(case, &predicted, c, floors, costs)),
                );
                checks.comparisons.extend(comparisons);
            }
            if extrapolated {
                checks.extrapolation.push(Extrapolated::new(
                    workload_name(&case.config),
                    design,
                    run,
                    case,
                    statistic,
                ));
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::collect::fixtures::{config, host_costs, timer_case};
    use crate::report::collect::twins::{run_twins, NoTwin, TwinRun};
    use dirq_sim::CostProfile;
    use dirq_vmm::config::Bench;
    use indicatif::ProgressBar;

    /// The twins of `cases`, simulated, and their checks.
    fn run_checks(cases: &[RealCase], statistic: ExitStatistic) -> ModelChecks {
        let profile = CostProfile::did_2015();
        let twins = run_twins(
            cases,
            &profile,
            &host_costs(),
            false,
            1,
            &ProgressBar::hidden(),
        );
        check(cases, &twins, statistic, None, None)
    }

    #[test]
    fn checks_compare_real_runs_with_their_twins_and_extrapolate() {
        let checks = run_checks(&[timer_case(3.0)], ExitStatistic::EveryExit);
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
        let designs: Vec<DesignKind> = checks.extrapolation.iter().map(|e| e.design).collect();
        assert_eq!(
            designs,
            [
                DesignKind::Vanilla,
                DesignKind::Apicv,
                DesignKind::Eli,
                DesignKind::Did
            ]
        );
        let exits_of = |design: DesignKind| {
            checks
                .extrapolation
                .iter()
                .find(|e| e.design == design)
                .and_then(|e| e.exits_per_interrupt)
                .expect("predicted")
        };
        assert!(exits_of(DesignKind::Did) < exits_of(DesignKind::Vanilla));
    }

    #[test]
    fn a_pv_eoi_run_is_compared_with_a_twin_that_skips_its_eoi_only_where_kvm_flagged() {
        let mut case = timer_case(3.0);
        case.config.common.pv_eoi = true;
        let predicted = |host_flags_pv_eoi| {
            let twins = run_twins(
                std::slice::from_ref(&case),
                &CostProfile::did_2015(),
                &host_costs(),
                host_flags_pv_eoi,
                1,
                &ProgressBar::hidden(),
            );
            let checks = check(
                std::slice::from_ref(&case),
                &twins,
                ExitStatistic::EveryExit,
                None,
                None,
            );
            assert!(checks.unmodelled.is_empty());
            checks
                .comparisons
                .iter()
                .find(|c| c.metric == Metric::ExitsPerInterrupt)
                .map(|c| c.predicted)
                .expect("exits compared")
        };
        // HLT, EOI and the TSC-deadline write where KVM never set the
        // flag; the EOI skipped (completed at the next HLT) where it did.
        let never = predicted(false);
        assert!((never - 3.0).abs() < 0.05, "{never}");
        let flagged = predicted(true);
        assert!((flagged - 2.0).abs() < 0.05, "{flagged}");
    }

    #[test]
    fn on_kvm_pvm_the_twin_counts_what_the_execution_mode_traps() {
        let checks_with = |statistic, irqchip| {
            let mut case = timer_case(1.0);
            case.config.common.irqchip = irqchip;
            let checks = run_checks(&[case], statistic);
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
        let native = ExitStatistic::NativeTraps;
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
            "design": "vanilla",
            "exits_per_s": 2_000.0,
            "exits_by_reason_per_s": {"EXTERNAL_INTERRUPT": 1_000.0, "MSR_WRITE": 1_000.0},
            "time_in_guest": 0.99,
            "interrupts": {"raised": handled, "handled": handled, "coalesced": 0, "pending_at_end": 0}
        }))
        .expect("contract parses");
        let config = config(Bench::IrqLatency, Irqchip::Kernel);
        let native = ExitStatistic::NativeTraps;
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
            ExitStatistic::EveryExit,
        );
        let exit_checks = checks
            .comparisons
            .iter()
            .filter(|c| c.metric == Metric::ExitsPerInterrupt)
            .count();
        assert_eq!(exit_checks, 2);
        assert_eq!(checks.extrapolation.len(), 4);
    }

    /// The checks of one timer-latency case measured at 3 exits per interrupt.
    fn timer_checks(twins: &[CaseTwin]) -> ModelChecks {
        check(
            &[timer_case(3.0)],
            twins,
            ExitStatistic::EveryExit,
            None,
            None,
        )
    }

    /// A vanilla twin handling 1 kHz over the twin's duration, taking
    /// `exits_per_interrupt` exits per interrupt (HLT and MSR writes).
    fn vanilla_twin(exits_per_interrupt: f64) -> SimRun {
        let handled = TWIN_DURATION_MS;
        serde_json::from_value(serde_json::json!({
            "design": "vanilla",
            "exits_per_s": exits_per_interrupt * 1_000.0,
            "exits_by_reason_per_s": {
                "HLT": 1_000.0,
                "MSR_WRITE": (exits_per_interrupt - 1.0) * 1_000.0
            },
            "time_in_guest": 0.9,
            "interrupts": {"handled": handled}
        }))
        .expect("contract parses")
    }

    #[test]
    fn checks_read_only_the_collected_twins() {
        // Measured 3 exits per interrupt, predicted 1.5: a miss, explained;
        // the DID twin could not run: a failure naming it, no extrapolation.
        let twins = [CaseTwin::Simulated {
            runs: vec![
                TwinRun {
                    design: DesignKind::Vanilla,
                    outcome: Ok(vanilla_twin(1.5)),
                },
                TwinRun {
                    design: DesignKind::Did,
                    outcome: Err(anyhow::anyhow!("the simulator refused")),
                },
            ],
            extrapolated: true,
        }];
        let checks = timer_checks(&twins);
        let [exits] = checks.comparisons.as_slice() else {
            panic!("only exits are compared: {:?}", checks.comparisons);
        };
        assert_eq!(exits.metric, Metric::ExitsPerInterrupt);
        assert!((exits.predicted - 1.5).abs() < 1e-9, "{}", exits.predicted);
        assert!(!exits.within_tolerance);
        assert_eq!(checks.misses.len(), 1);
        assert_eq!(checks.misses[0].metric, Metric::ExitsPerInterrupt);
        let [failure] = checks.failures.as_slice() else {
            panic!("one failure: {:?}", checks.failures);
        };
        assert!(failure.configuration.ends_with("under did"), "{failure:?}");
        assert!(failure.reason.contains("refused"), "{failure:?}");
        let designs: Vec<DesignKind> = checks.extrapolation.iter().map(|e| e.design).collect();
        assert_eq!(designs, [DesignKind::Vanilla]);
        assert!(checks.extrapolation[0].measured.is_some());

        // Within 20%, nothing to explain; not extrapolated, nothing kept.
        let twins = [CaseTwin::Simulated {
            runs: vec![TwinRun {
                design: DesignKind::Vanilla,
                outcome: Ok(vanilla_twin(2.8)),
            }],
            extrapolated: false,
        }];
        let checks = timer_checks(&twins);
        assert!(checks.comparisons[0].within_tolerance);
        assert!(checks.misses.is_empty() && checks.extrapolation.is_empty());

        let unmodelled = timer_checks(&[CaseTwin::Unmodelled(NoTwin::Shape)]);
        assert!(unmodelled.comparisons.is_empty());
        assert!(unmodelled.unmodelled[0].reason.contains("shape"));
    }
}
