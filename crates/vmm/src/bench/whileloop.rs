//! `dirq run whileloop`: a compute loop's slowdown under a device thread
//! raising interrupts at a fixed rate.

use dirq_stats::f64_of;
use serde::{Deserialize, Serialize};

use super::{cycles_to_ns, guest_share, window_exits, BenchError};
use crate::abi;
use crate::config::params::WhileloopParams;
use crate::config::{Bench, BenchConfig, BenchParams, CommonSettings};
use crate::devices::msi_device::{self, DeviceEnv};
use crate::machine::{self, DeviceThread, Extensions};
use crate::report::RunReport;
use crate::results::{BenchResult, WhileloopResult};

pub(super) fn run(
    config: &BenchConfig,
    params: &WhileloopParams,
    echo_console: bool,
) -> Result<RunReport, BenchError> {
    let rate = params.rate_hz;
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
    let interrupt_lost = shared.result[abi::RESULT_WHILELOOP_INTERRUPT_LOST_CYCLES];
    let interrupts_seen = shared.result[abi::RESULT_WHILELOOP_INTERRUPTS_SEEN];
    // Claims to check: the loop cannot lose more than it ran, nor see more
    // interrupts than its handler counted.
    if interrupt_lost > loaded || interrupts_seen > shared.handled[0] {
        return Err(BenchError::Invariant {
            bench: Bench::Whileloop,
            what: format!(
                "the guest claims {interrupt_lost} cycles lost to {interrupts_seen} interrupts \
                 in a loaded loop of {loaded} cycles that handled {}",
                shared.handled[0]
            ),
        });
    }
    let results = BenchResult::Whileloop(WhileloopResult {
        raised: output.device.unwrap_or(0),
        iterations,
        loaded_iterations,
        baseline_ns: cycles_to_ns(baseline, output.tsc_khz),
        loaded_ns: cycles_to_ns(loaded, output.tsc_khz),
        guest_share: guest_share(iterations, baseline, loaded_iterations, loaded),
        lost_per_interrupt_ns: (interrupts_seen > 0).then(|| {
            f64_of(cycles_to_ns(interrupt_lost, output.tsc_khz)) / f64_of(interrupts_seen)
        }),
    });
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

/// The offered rates `dirq run whileloop --sweep` tries, from well within
/// a path's capacity to far beyond it.
pub const SWEEP_RATES_HZ: [u64; 5] = [2_000, 5_000, 10_000, 20_000, 40_000];

/// A whileloop run at each of several offered rates, one path: where the
/// path peaks, and whether it holds its peak beyond it (a path that
/// livelocks handles less the more it is offered).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sweep {
    /// One run per offered rate, in the order given.
    pub runs: Vec<RunReport>,
}

impl Sweep {
    /// Interrupts the guest handled per second of `run`'s window.
    pub fn handled_per_s(run: &RunReport) -> f64 {
        if run.duration_s > 0.0 {
            f64_of(run.interrupts) / run.duration_s
        } else {
            0.0
        }
    }

    /// The highest handled rate of the sweep.
    pub fn peak_per_s(&self) -> f64 {
        self.runs
            .iter()
            .map(Self::handled_per_s)
            .fold(0.0, f64::max)
    }

    /// `run`'s handled rate as a share of the sweep's peak.
    pub fn share_of_peak(&self, run: &RunReport) -> f64 {
        let peak = self.peak_per_s();
        if peak > 0.0 {
            Self::handled_per_s(run) / peak
        } else {
            0.0
        }
    }
}

/// Runs whileloop with `params` and `common` once at each of `rates_hz`.
pub fn sweep(
    common: &CommonSettings,
    params: &WhileloopParams,
    rates_hz: &[u64],
) -> Result<Sweep, BenchError> {
    let runs = rates_hz
        .iter()
        .map(|&rate_hz| {
            super::run(&BenchConfig {
                params: BenchParams::Whileloop(WhileloopParams {
                    rate_hz,
                    ..params.clone()
                }),
                common: common.clone(),
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Sweep { runs })
}
