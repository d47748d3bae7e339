//! `dirq run`: boot the guest for one benchmark and turn what the guest,
//! the device thread and KVM counted into a `RunReport`. The benches the
//! guest measures alone are here; each other bench's host side (its
//! devices, its device thread, its checks) is a module of its own.

mod hostile;
pub mod io_batch;
pub mod irq_latency;
pub mod lapic_check;
mod tick;
mod vioapic;
pub mod whileloop;

use dirq_stats::{f64_of, ratio};

use crate::abi;
use crate::config::Bench;
use crate::config::{BenchConfig, BenchParams, ConfigError, FaultKind};
use crate::exits::ExitSummary;
use crate::machine::{self, Extensions, MachineError, MachineOutput};
use crate::report::{LatencySummary, RunReport};
use crate::results::{
    BenchResult, ExitCostResult, Implausible, IpiResult, IpisByVcpu, Observed, PvEoiCount,
};

/// The guest's END marker exits once inside the window; it is not the bench's.
pub(crate) const WINDOW_MARKER_EXITS: u64 = 1;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("invalid configuration")]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Machine(#[from] MachineError),
    #[error("{bench}: {raised} interrupts raised but {handled} handled (lost or doubled)")]
    Delivery {
        bench: Bench,
        raised: u64,
        handled: u64,
    },
    #[error("the fault bench finished without faulting (fault {0})")]
    FaultNotRaised(FaultKind),
    #[error("{bench}: {what}")]
    Invariant { bench: Bench, what: String },
    #[error(transparent)]
    ResultMismatch(#[from] crate::results::ResultMismatch),
    #[error(transparent)]
    Implausible(#[from] Implausible),
    #[error("{bench}: the run measured nothing: {what}")]
    MeasuredNothing { bench: Bench, what: &'static str },
    #[error(transparent)]
    LapicCheck(#[from] lapic_check::LapicCheckError),
    /// The host cannot run what the bench measures; `why` says what it
    /// measured instead.
    #[error("{bench}: not measurable on this host: {why}")]
    NotMeasurable { bench: Bench, why: String },
}

/// Runs one benchmark; the guest's console is kept in the report.
pub fn run(config: &BenchConfig) -> Result<RunReport, BenchError> {
    run_with_console(config, false)
}

/// As `run`, also echoing the guest's console lines to stderr when asked.
/// What the guest reports is checked against what the VMM observed.
pub fn run_with_console(config: &BenchConfig, echo_console: bool) -> Result<RunReport, BenchError> {
    config.validate()?;
    let report = run_bench(config, echo_console)?;
    check_report(&report)?;
    Ok(report)
}

/// Refuses a report that measured nothing, or whose figures cannot be true
/// of the window the VMM timed.
fn check_report(report: &RunReport) -> Result<(), BenchError> {
    let bench = report.bench();
    if bench.handles_interrupts() && report.interrupts == 0 {
        return Err(BenchError::MeasuredNothing {
            bench,
            what: "no interrupt was handled in the measured window",
        });
    }
    report.results.check(&Observed {
        evidence: &report.evidence,
        config: &report.config,
        interrupts: report.interrupts,
    })?;
    Ok(())
}

fn run_bench(config: &BenchConfig, echo_console: bool) -> Result<RunReport, BenchError> {
    match &config.params {
        BenchParams::IrqLatency(params) => irq_latency::run(config, params, echo_console),
        BenchParams::Whileloop(params) => whileloop::run(config, params, echo_console),
        BenchParams::TimerLatency(_) => {
            let output = machine::run::<()>(config, echo_console, Extensions::default())?;
            Ok(guest_measured(config, output, |output| {
                handled_and_skips(output, BenchResult::TimerLatency)
            }))
        }
        BenchParams::Ipi(_) => {
            let output = machine::run::<()>(config, echo_console, Extensions::default())?;
            Ok(guest_measured(config, output, |output| {
                ipi_figures(config, output)
            }))
        }
        BenchParams::ExitCost(_) => {
            let output = machine::run::<()>(config, echo_console, Extensions::default())?;
            Ok(guest_measured(config, output, exit_cost_figures))
        }
        BenchParams::HaltWakeup(params) => {
            let output = machine::run::<()>(config, echo_console, Extensions::default())?;
            let handled = output.shared.handled[0];
            if handled != params.count {
                return Err(BenchError::Delivery {
                    bench: Bench::HaltWakeup,
                    raised: params.count,
                    handled,
                });
            }
            Ok(guest_measured(config, output, |output| {
                handled_and_skips(output, BenchResult::HaltWakeup)
            }))
        }
        BenchParams::Fault(params) => {
            machine::run::<()>(config, echo_console, Extensions::default())?;
            Err(BenchError::FaultNotRaised(params.fault))
        }
        BenchParams::Vioapic(params) => vioapic::run(config, params, echo_console),
        BenchParams::IoBatch(params) => io_batch::run(config, params, echo_console),
        BenchParams::Tick(params) => tick::run(config, params, echo_console),
        BenchParams::Hostile(params) => hostile::run(config, params, echo_console),
    }
}

pub(crate) fn window_exits<T>(output: &MachineOutput<T>) -> (ExitSummary, f64) {
    let window = &output.window;
    match &window.end {
        Some((end_time, end)) => (
            ExitSummary::between(&window.start.1, end, WINDOW_MARKER_EXITS)
                .with_lifetime(&output.lifetime),
            (*end_time - window.start.0).as_secs_f64(),
        ),
        None => (
            ExitSummary::between(&window.start.1, &window.start.1, 0),
            0.0,
        ),
    }
}

pub(crate) fn cycles_to_seconds(cycles: u64, tsc_khz: u64) -> f64 {
    f64_of(cycles_to_ns(cycles, tsc_khz)) / 1e9
}

pub(crate) fn cycles_to_ns(cycles: u64, tsc_khz: u64) -> u64 {
    if tsc_khz == 0 {
        return 0;
    }
    u64::try_from(u128::from(cycles) * 1_000_000 / u128::from(tsc_khz)).unwrap_or(u64::MAX)
}

/// The share of the CPU a compute loop kept under a load: iterations per
/// cycle loaded, against iterations per cycle unloaded.
pub(crate) fn guest_share(
    iterations: u64,
    baseline_cycles: u64,
    loaded_iterations: u64,
    loaded_cycles: u64,
) -> f64 {
    if loaded_cycles == 0 || iterations == 0 {
        return 0.0;
    }
    (f64_of(loaded_iterations) * f64_of(baseline_cycles))
        / (f64_of(iterations) * f64_of(loaded_cycles))
}

/// The guest's per-CPU counts, added without trusting them to fit.
fn saturating_sum(counts: &[u64]) -> u64 {
    counts
        .iter()
        .fold(0, |sum, &count| sum.saturating_add(count))
}

/// Benches whose figures the guest measures itself with its TSC;
/// `figures` reads the bench's own, with the interrupts it counts.
fn guest_measured(
    config: &BenchConfig,
    output: MachineOutput<()>,
    figures: impl FnOnce(&MachineOutput<()>) -> (u64, BenchResult),
) -> RunReport {
    let samples_ns: Vec<u64> = output
        .samples
        .iter()
        .map(|&c| cycles_to_ns(c, output.tsc_khz))
        .collect();
    let (interrupts, results) = figures(&output);
    let (exits, duration_s) = window_exits(&output);
    RunReport::new(
        config,
        interrupts,
        exits,
        LatencySummary::from_samples_ns(&samples_ns),
        duration_s,
        results,
        output.facts,
    )
}

/// Every interrupt the guest handled, and its skipped EOIs as `bench`'s figures.
fn handled_and_skips(
    output: &MachineOutput<()>,
    bench: fn(PvEoiCount) -> BenchResult,
) -> (u64, BenchResult) {
    let counts = PvEoiCount {
        pv_eoi_skips: output.shared.pv_eoi_skips,
    };
    (saturating_sum(&output.shared.handled), bench(counts))
}

/// exit-cost's two exits, timed; it counts no interrupts.
pub(crate) fn exit_cost_figures(output: &MachineOutput<()>) -> (u64, BenchResult) {
    let result = &output.shared.result;
    let ns = |slot: usize| cycles_to_ns(result[slot], output.tsc_khz);
    let iterations = result[abi::RESULT_EXIT_COST_ITERATIONS].max(1);
    let cost = ExitCostResult {
        userspace_exit_ns: ratio(ns(abi::RESULT_EXIT_COST_USERSPACE_CYCLES), iterations),
        kernel_exit_ns: ratio(ns(abi::RESULT_EXIT_COST_KERNEL_CYCLES), iterations),
        userspace_exit_p50_ns: ns(abi::RESULT_EXIT_COST_USERSPACE_P50_CYCLES),
        kernel_exit_p50_ns: ns(abi::RESULT_EXIT_COST_KERNEL_P50_CYCLES),
        pv_eoi_skips: output.shared.pv_eoi_skips,
    };
    (0, BenchResult::ExitCost(cost))
}

/// ipi: the IPIs each booted vCPU handled, and the costs the guest timed.
fn ipi_figures(config: &BenchConfig, output: &MachineOutput<()>) -> (u64, BenchResult) {
    let shared = &output.shared;
    let vcpus = usize::try_from(config.common.vcpus).unwrap_or(usize::MAX);
    // The guest leaves a figure it did not measure at 0.
    let measured = |slot: usize| Some(shared.result[slot]).filter(|&cycles| cycles > 0);
    let ns = |cycles| cycles_to_ns(cycles, output.tsc_khz);
    let gap = measured(abi::RESULT_IPI_TARGET_GAP_CYCLES);
    let ipi = IpiResult {
        handled: IpisByVcpu(shared.handled.iter().take(vcpus).copied().collect()),
        send_p50_ns: measured(abi::RESULT_IPI_SEND_CYCLES).map(ns),
        target_gap_p50_ns: gap.map(ns),
        target_gaps: gap.map(|_| shared.result[abi::RESULT_IPI_TARGET_GAPS]),
        pv_eoi_skips: shared.pv_eoi_skips,
    };
    (saturating_sum(&shared.handled), BenchResult::Ipi(ipi))
}

/// KVM's default halt_poll_ns: the best path polls as long as stock KVM would.
pub const BEST_PATH_HALT_POLL_NS: u32 = 200_000;
