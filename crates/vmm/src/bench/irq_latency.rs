//! `dirq run irq-latency`: a device thread raises interrupts, each once the
//! last was acknowledged, and times each round trip; `--compare` runs the
//! userspace path against the best in-kernel one.

use dirq_stats::f64_of;
use serde::{Deserialize, Serialize};

use super::{window_exits, BenchError, BEST_PATH_HALT_POLL_NS};
use crate::config::params::{IpiParams, IrqLatencyParams};
use crate::config::{
    Bench, BenchConfig, BenchParams, CommonSettings, GuestIdle, HaltMode, Inject, IpiMeasure,
    Irqchip,
};
use crate::devices::msi_device::{self, DeviceEnv};
use crate::machine::{self, DeviceThread, Extensions};
use crate::report::{LatencySummary, RunReport};
use crate::results::{BenchResult, PvEoiCount};
use crate::trace::{RunTrace, Tracing};

pub(super) fn run(
    config: &BenchConfig,
    params: &IrqLatencyParams,
    echo_console: bool,
) -> Result<RunReport, BenchError> {
    run_recording(config, params, echo_console, None).map(|(report, _)| report)
}

/// Runs `config` (whose params are `params`) recording its timeline: each
/// vCPU's KVM_RUN calls and the device's raises.
pub fn run_traced(
    config: &BenchConfig,
    params: &IrqLatencyParams,
    tracing: Tracing,
) -> Result<(RunReport, RunTrace), BenchError> {
    config.validate()?;
    let (report, trace) = run_recording(config, params, false, Some(tracing))?;
    Ok((report, trace.unwrap_or_default()))
}

fn run_recording(
    config: &BenchConfig,
    params: &IrqLatencyParams,
    echo_console: bool,
    trace: Option<Tracing>,
) -> Result<(RunReport, Option<RunTrace>), BenchError> {
    let (count, rate) = (params.count, params.rate_hz);
    let device: DeviceThread<Vec<u64>> =
        Box::new(move |env: &DeviceEnv| msi_device::ping_pong(env, count, rate));
    let output = machine::run(
        config,
        echo_console,
        Extensions {
            device: Some(device),
            trace,
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
            bench: Bench::IrqLatency,
            raised: count,
            handled,
        });
    }
    let (exits, duration_s) = window_exits(&output);
    let round_trips = output.device.clone().unwrap_or_default();
    let results = BenchResult::IrqLatency(PvEoiCount {
        pv_eoi_skips: shared.pv_eoi_skips,
    });
    let report = RunReport::new(
        config,
        handled,
        exits,
        LatencySummary::from_samples_ns(&round_trips),
        duration_s,
        results,
        output.facts,
    );
    Ok((report, output.trace))
}

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
    let path = |irqchip, inject, pv_eoi, halt| BenchConfig {
        params: base.params.clone(),
        common: CommonSettings {
            irqchip,
            inject,
            pv_eoi,
            halt,
            ..base.common.clone()
        },
    };
    let baseline = super::run(&path(
        Irqchip::Userspace,
        Inject::Vcpu,
        false,
        HaltMode::Exit,
    ))?;
    let best = super::run(&path(
        Irqchip::Kernel,
        Inject::Irqfd,
        true,
        HaltMode::Poll {
            ns: BEST_PATH_HALT_POLL_NS,
        },
    ))?;
    let mut exit_cost = BenchConfig::new(Bench::ExitCost);
    exit_cost.common.guest_exec = base.common.guest_exec;
    let exit_cost = super::run(&exit_cost)?;
    let floor = BenchConfig {
        params: BenchParams::Ipi(IpiParams {
            ipi_measure: IpiMeasure::OneWay,
            ..IpiParams::default()
        }),
        common: CommonSettings {
            guest_idle: GuestIdle::Busy,
            guest_exec: base.common.guest_exec,
            ..CommonSettings::new(Bench::Ipi)
        },
    };
    let floor = super::run(&floor)?;
    let cost = exit_cost.results.exit_cost()?;
    let p50 = |report: &RunReport| {
        report
            .latency_ns
            .as_ref()
            .map_or(0.0, |latency| f64_of(latency.p50))
    };
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    Ok(Comparison {
        p50_speedup: ratio(p50(&baseline), p50(&best)),
        best_p50_in_kernel_exits: ratio(p50(&best), cost.kernel_exit_ns),
        best_p50_over_ipi_floor: ratio(p50(&best), p50(&floor)),
        ipi_busy_p50_ns: p50(&floor),
        userspace_exit_ns: cost.userspace_exit_ns,
        kernel_exit_ns: cost.kernel_exit_ns,
        baseline,
        best,
    })
}
