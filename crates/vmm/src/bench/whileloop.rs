//! `dirq run whileloop`: a compute loop's slowdown under a device thread
//! raising interrupts at a fixed rate.

use dirq_stats::f64_of;

use super::{cycles_to_ns, guest_share, window_exits, BenchError};
use crate::abi;
use crate::config::params::WhileloopParams;
use crate::config::Bench;
use crate::config::BenchConfig;
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
