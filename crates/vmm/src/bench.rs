//! `dirq run`: boot the guest for one benchmark and turn what the guest,
//! the device thread and KVM counted into a `RunReport`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::abi;
use crate::config::{Bench, BenchConfig, ConfigError};
use crate::devices::msi_device::{self, DeviceEnv};
use crate::exits::ExitSummary;
use crate::machine::{self, DeviceThread, Extensions, MachineOutput};
use crate::report::{LatencySummary, RunReport};

use crate::config::IpiMeasure;
pub use crate::config::{ApicMode, FaultKind, GuestIdle, HaltMode, Inject, Irqchip, TimerMode};
pub use crate::devices::BusError;
pub use crate::machine::MachineError;
pub use crate::vcpu::VcpuError;

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
}

/// Runs one benchmark; the guest's console is kept in the report.
pub fn run(config: &BenchConfig) -> Result<RunReport, BenchError> {
    run_with_console(config, false)
}

/// As `run`, also echoing the guest's console lines to stderr when asked.
pub fn run_with_console(config: &BenchConfig, echo_console: bool) -> Result<RunReport, BenchError> {
    config.validate()?;
    match config.bench {
        Bench::IrqLatency => irq_latency(config, echo_console),
        Bench::Whileloop => whileloop(config, echo_console),
        Bench::TimerLatency | Bench::Ipi | Bench::ExitCost => {
            let output = machine::run::<()>(config, echo_console, Extensions::default())?;
            Ok(guest_measured(config, output))
        }
        Bench::HaltWakeup => {
            let output = machine::run::<()>(config, echo_console, Extensions::default())?;
            let handled = output.shared.handled[0];
            if handled != config.count {
                return Err(BenchError::Delivery {
                    bench: "halt-wakeup",
                    raised: config.count,
                    handled,
                });
            }
            Ok(guest_measured(config, output))
        }
        Bench::Fault => {
            machine::run::<()>(config, echo_console, Extensions::default())?;
            Err(BenchError::FaultNotRaised(config.fault))
        }
        Bench::Vioapic => crate::designs::vioapic::run(config, echo_console),
        Bench::IoBatch => crate::designs::io_batch::run(config, echo_console),
        Bench::Tick => crate::designs::tick::run(config, echo_console),
        Bench::Hostile => crate::hostile::run(config, echo_console),
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
    cycles_to_ns(cycles, tsc_khz) as f64 / 1e9
}

pub(crate) fn cycles_to_ns(cycles: u64, tsc_khz: u64) -> u64 {
    if tsc_khz == 0 {
        return 0;
    }
    (u128::from(cycles) * 1_000_000 / u128::from(tsc_khz)) as u64
}

fn irq_latency(config: &BenchConfig, echo_console: bool) -> Result<RunReport, BenchError> {
    let (count, rate) = (config.count, config.rate_hz);
    let device: DeviceThread<Vec<u64>> =
        Box::new(move |env: &DeviceEnv| msi_device::ping_pong(env, count, rate));
    let output = machine::run(
        config,
        echo_console,
        Extensions {
            device: Some(device),
            ..Extensions::default()
        },
    )?;
    let shared = &output.shared;
    let handled = shared.handled[0];
    // The device raises the next interrupt only once the last was
    // acknowledged (a loss fails the device thread), so a doubled
    // delivery shows as more handled than raised.
    if handled != count {
        return Err(BenchError::Delivery {
            bench: "irq-latency",
            raised: count,
            handled,
        });
    }
    let (exits, duration_s) = window_exits(&output);
    let round_trips = output.device.clone().unwrap_or_default();
    let mut results = BTreeMap::new();
    results.insert("pv_eoi_skips".into(), shared.pv_eoi_skips as f64);
    Ok(RunReport::new(
        config,
        handled,
        exits,
        LatencySummary::from_samples_ns(&round_trips),
        duration_s,
        results,
        output.facts,
    ))
}

fn whileloop(config: &BenchConfig, echo_console: bool) -> Result<RunReport, BenchError> {
    let rate = config.rate_hz;
    let device: DeviceThread<u64> =
        Box::new(move |env: &DeviceEnv| msi_device::periodic(env, rate));
    let output = machine::run(
        config,
        echo_console,
        Extensions {
            device: Some(device),
            ..Extensions::default()
        },
    )?;
    let shared = &output.shared;
    let baseline = shared.result[abi::RESULT_WHILELOOP_BASELINE_CYCLES];
    let loaded = shared.result[abi::RESULT_WHILELOOP_LOADED_CYCLES];
    let iterations = shared.result[abi::RESULT_WHILELOOP_ITERATIONS];
    let loaded_iterations = shared.result[abi::RESULT_WHILELOOP_LOADED_ITERATIONS];
    let mut results = BTreeMap::new();
    results.insert("raised".into(), output.device.unwrap_or(0) as f64);
    results.insert("iterations".into(), iterations as f64);
    // Below `iterations` when the guest gave up at its slowdown cap.
    results.insert("loaded_iterations".into(), loaded_iterations as f64);
    results.insert(
        "baseline_ns".into(),
        cycles_to_ns(baseline, output.tsc_khz) as f64,
    );
    results.insert(
        "loaded_ns".into(),
        cycles_to_ns(loaded, output.tsc_khz) as f64,
    );
    results.insert(
        "guest_share".into(),
        guest_share(iterations, baseline, loaded_iterations, loaded),
    );
    let (exits, duration_s) = window_exits(&output);
    Ok(RunReport::new(
        config,
        shared.handled[0],
        exits,
        None,
        duration_s,
        results,
        output.facts,
    ))
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
    (loaded_iterations as f64 * baseline_cycles as f64) / (iterations as f64 * loaded_cycles as f64)
}

/// The guest's per-CPU counts, added without trusting them to fit.
fn saturating_sum(counts: &[u64]) -> u64 {
    counts
        .iter()
        .fold(0, |sum, &count| sum.saturating_add(count))
}

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
    let interrupts = match config.bench {
        Bench::ExitCost => {
            let iterations = shared.result[abi::RESULT_EXIT_COST_ITERATIONS].max(1);
            let per_exit = |cycles| cycles_to_ns(cycles, tsc_khz) as f64 / iterations as f64;
            results.insert(
                "userspace_exit_ns".into(),
                per_exit(shared.result[abi::RESULT_EXIT_COST_USERSPACE_CYCLES]),
            );
            results.insert(
                "kernel_exit_ns".into(),
                per_exit(shared.result[abi::RESULT_EXIT_COST_KERNEL_CYCLES]),
            );
            0
        }
        Bench::Ipi => {
            for (cpu, handled) in shared
                .handled
                .iter()
                .take(config.vcpus as usize)
                .enumerate()
            {
                results.insert(format!("ipis_to_vcpu{cpu}"), *handled as f64);
            }
            saturating_sum(&shared.handled)
        }
        _ => saturating_sum(&shared.handled),
    };
    results.insert("pv_eoi_skips".into(), shared.pv_eoi_skips as f64);
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

/// The irq-latency baseline (userspace irqchip) against the best in-kernel
/// path (KVM LAPIC, irqfd, PV EOI, halt polling), with this host's exit
/// costs and its floor for a cross-CPU wake-up for scale.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub baseline: RunReport,
    pub best: RunReport,
    pub userspace_exit_ns: f64,
    pub kernel_exit_ns: f64,
    /// One-way IPI into a busy vCPU, p50: the device thread's interrupt
    /// also crosses host CPUs into a running vCPU, so no path beats it.
    pub ipi_busy_p50_ns: f64,
    /// baseline p50 / best p50: how many times faster the best path is.
    pub p50_speedup: f64,
    /// best p50 / one in-kernel exit.
    pub best_p50_in_kernel_exits: f64,
    /// best p50 / the busy-IPI floor.
    pub best_p50_over_ipi_floor: f64,
}

/// Runs `base`'s irq-latency workload (count, rate, APIC mode, idle mode,
/// source) on both paths, whose interrupt-path flags are fixed, and the
/// exit-cost bench.
pub fn compare(base: &BenchConfig) -> Result<Comparison, BenchError> {
    let mut baseline_config = base.clone();
    baseline_config.irqchip = Irqchip::Userspace;
    baseline_config.inject = Inject::Vcpu;
    baseline_config.pv_eoi = false;
    baseline_config.halt = HaltMode::Exit;
    let mut best_config = base.clone();
    best_config.irqchip = Irqchip::Kernel;
    best_config.inject = Inject::Irqfd;
    best_config.pv_eoi = true;
    best_config.halt = HaltMode::Poll {
        ns: BEST_PATH_HALT_POLL_NS,
    };

    let baseline = run(&baseline_config)?;
    let best = run(&best_config)?;
    let mut exit_cost = BenchConfig::new(Bench::ExitCost);
    exit_cost.guest_exec = base.guest_exec;
    let exit_cost = run(&exit_cost)?;
    let mut floor = BenchConfig::new(Bench::Ipi);
    floor.ipi_measure = IpiMeasure::OneWay;
    floor.guest_idle = GuestIdle::Busy;
    floor.guest_exec = base.guest_exec;
    let floor = run(&floor)?;
    let figure = |name: &str| exit_cost.results.get(name).copied().unwrap_or(0.0);
    let p50 = |report: &RunReport| {
        report
            .latency_ns
            .as_ref()
            .map_or(0.0, |latency| latency.p50 as f64)
    };
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    Ok(Comparison {
        p50_speedup: ratio(p50(&baseline), p50(&best)),
        best_p50_in_kernel_exits: ratio(p50(&best), figure("kernel_exit_ns")),
        best_p50_over_ipi_floor: ratio(p50(&best), p50(&floor)),
        ipi_busy_p50_ns: p50(&floor),
        userspace_exit_ns: figure("userspace_exit_ns"),
        kernel_exit_ns: figure("kernel_exit_ns"),
        baseline,
        best,
    })
}
