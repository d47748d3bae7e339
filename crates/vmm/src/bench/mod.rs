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
mod whileloop;

use std::collections::BTreeMap;

use dirq_stats::{f64_of, ratio};

use crate::abi;
use crate::config::{Bench, BenchConfig, BenchParams, ConfigError, FaultKind};
use crate::exits::ExitSummary;
use crate::machine::{self, Extensions, MachineError, MachineOutput};
use crate::report::{LatencySummary, RunReport};

/// The guest's END marker exits once inside the window; it is not the bench's.
const WINDOW_MARKER_EXITS: u64 = 1;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("invalid configuration")]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Machine(#[from] MachineError),
    #[error("{bench}: {raised} interrupts raised but {handled} handled (lost or doubled)")]
    Delivery {
        bench: &'static str,
        raised: u64,
        handled: u64,
    },
    #[error("the fault bench finished without faulting (fault {0})")]
    FaultNotRaised(FaultKind),
    #[error("{bench}: {what}")]
    Invariant { bench: &'static str, what: String },
    #[error(transparent)]
    LapicCheck(#[from] lapic_check::LapicCheckError),
    /// The host cannot run what the bench measures; `why` says what it
    /// measured instead.
    #[error("{bench}: not measurable on this host: {why}")]
    NotMeasurable { bench: &'static str, why: String },
}

/// Runs one benchmark; the guest's console is kept in the report.
pub fn run(config: &BenchConfig) -> Result<RunReport, BenchError> {
    run_with_console(config, false)
}

/// As `run`, also echoing the guest's console lines to stderr when asked.
pub fn run_with_console(config: &BenchConfig, echo_console: bool) -> Result<RunReport, BenchError> {
    config.validate()?;
    match &config.params {
        BenchParams::IrqLatency(params) => irq_latency::run(config, params, echo_console),
        BenchParams::Whileloop(params) => whileloop::run(config, params, echo_console),
        BenchParams::TimerLatency(_) | BenchParams::Ipi(_) | BenchParams::ExitCost(_) => {
            let output = machine::run::<()>(config, echo_console, Extensions::default())?;
            Ok(guest_measured(config, output))
        }
        BenchParams::HaltWakeup(params) => {
            let output = machine::run::<()>(config, echo_console, Extensions::default())?;
            let handled = output.shared.handled[0];
            if handled != params.count {
                return Err(BenchError::Delivery {
                    bench: "halt-wakeup",
                    raised: params.count,
                    handled,
                });
            }
            Ok(guest_measured(config, output))
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
            ExitSummary::between(&window.start.1, end, WINDOW_MARKER_EXITS),
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

/// ipi with a busy unicast target: what a ping takes from the target's
/// spin loop (its exit, injection, handler with the pong and EOI, and
/// return), the median gap in the target's own TSC.
pub const TARGET_GAP_NS: &str = "target_gap_p50_ns";

/// whileloop: what each handled interrupt took from the loaded loop (ns),
/// summed over the loop's chunks during which the handler ran, each less
/// an undisturbed chunk. Unlike the share, well conditioned at any rate:
/// at low rates the lost time is a small difference of two long runs.
pub const LOST_PER_INTERRUPT_NS: &str = "lost_per_interrupt_ns";

/// whileloop: the interrupts the device thread raised (the guest may
/// handle fewer: the rest merged into pending ones).
pub const RAISED: &str = "raised";

/// ipi: the result naming the IPIs vCPU `cpu` handled (vCPU 0: pongs;
/// any other: pings).
pub fn ipis_to_vcpu(cpu: usize) -> String {
    format!("ipis_to_vcpu{cpu}")
}

/// ipi: how long the sender's ICR write (or hypercall) took, median.
pub const SEND_NS: &str = "send_p50_ns";

/// exit-cost: the median of one exit to the VMM (port I/O).
pub const USERSPACE_EXIT_P50_NS: &str = "userspace_exit_p50_ns";

/// exit-cost: the median of one exit handled inside KVM (RDMSR).
pub const KERNEL_EXIT_P50_NS: &str = "kernel_exit_p50_ns";

/// Benches whose figures the guest measures itself with its TSC.
fn guest_measured(config: &BenchConfig, output: MachineOutput<()>) -> RunReport {
    let shared = &output.shared;
    let tsc_khz = output.tsc_khz;
    let samples_ns: Vec<u64> = output
        .samples
        .iter()
        .map(|&c| cycles_to_ns(c, tsc_khz))
        .collect();
    let mut results = BTreeMap::new();
    let interrupts = match config.bench() {
        Bench::ExitCost => {
            let iterations = shared.result[abi::RESULT_EXIT_COST_ITERATIONS].max(1);
            let per_exit = |cycles| ratio(cycles_to_ns(cycles, tsc_khz), iterations);
            results.insert(
                "userspace_exit_ns".into(),
                per_exit(shared.result[abi::RESULT_EXIT_COST_USERSPACE_CYCLES]),
            );
            results.insert(
                "kernel_exit_ns".into(),
                per_exit(shared.result[abi::RESULT_EXIT_COST_KERNEL_CYCLES]),
            );
            let median = |slot| f64_of(cycles_to_ns(shared.result[slot], tsc_khz));
            results.insert(
                USERSPACE_EXIT_P50_NS.into(),
                median(abi::RESULT_EXIT_COST_USERSPACE_P50_CYCLES),
            );
            results.insert(
                KERNEL_EXIT_P50_NS.into(),
                median(abi::RESULT_EXIT_COST_KERNEL_P50_CYCLES),
            );
            0
        }
        Bench::Ipi => {
            for (cpu, handled) in shared
                .handled
                .iter()
                .take(config.common.vcpus as usize)
                .enumerate()
            {
                results.insert(ipis_to_vcpu(cpu), f64_of(*handled));
            }
            let send = shared.result[abi::RESULT_IPI_SEND_CYCLES];
            if send > 0 {
                results.insert(SEND_NS.into(), f64_of(cycles_to_ns(send, tsc_khz)));
            }
            let gap = shared.result[abi::RESULT_IPI_TARGET_GAP_CYCLES];
            if gap > 0 {
                results.insert(TARGET_GAP_NS.into(), f64_of(cycles_to_ns(gap, tsc_khz)));
                results.insert(
                    "target_gaps".into(),
                    f64_of(shared.result[abi::RESULT_IPI_TARGET_GAPS]),
                );
            }
            saturating_sum(&shared.handled)
        }
        _ => saturating_sum(&shared.handled),
    };
    results.insert("pv_eoi_skips".into(), f64_of(shared.pv_eoi_skips));
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

/// KVM's default halt_poll_ns: the best path polls as long as stock KVM would.
pub const BEST_PATH_HALT_POLL_NS: u32 = 200_000;
