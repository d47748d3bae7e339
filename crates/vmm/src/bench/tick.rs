//! `dirq run tick`: transparent timer-frequency reduction (mechanisms.md
//! section 8). The guest (guest/bench_tick.c) programs the PIT for 1000 Hz
//! and times a compute loop under the tick; the VMM's PIT can run K times
//! slower (`--tick-scale K`) while the guest reads back only counts it
//! programmed.

use std::sync::{Arc, OnceLock};

use dirq_stats::f64_of;

use super::{cycles_to_seconds, guest_share, window_exits, BenchError};
use crate::abi;
use crate::config::params::TickParams;
use crate::config::Bench;
use crate::config::BenchConfig;
use crate::devices::msi_device::{DeviceEnv, MsiDeviceError};
use crate::devices::pit::{self, PitDevice};
use crate::interrupt::IoapicDevice;
use crate::machine::{self, Attach, DeviceThread, Extensions, MachineError};
use crate::report::RunReport;
use crate::results::{BenchResult, TickResult};

/// Runs the tick bench with the PIT slowed `params.tick_scale` times.
pub(super) fn run(
    config: &BenchConfig,
    params: &TickParams,
    echo_console: bool,
) -> Result<RunReport, BenchError> {
    let pit =
        Arc::new(
            PitDevice::new(params.tick_scale).map_err(|err| MachineError::DeviceSetup {
                device: "PIT",
                source: err.into(),
            })?,
        );
    let ioapic = OnceLock::<Arc<IoapicDevice>>::new();
    let attach = |attach: &mut Attach| {
        attach.bus.add_pio(
            dirq_arch::pit::PORT_CHANNEL0..dirq_arch::pit::PORT_CHANNEL0 + pit::PORTS,
            pit.clone(),
        );
        let split_ioapic = attach
            .interrupts
            .ioapic()
            .ok_or(MachineError::NoVmmIoapic(config.common.irqchip))?;
        let _ = ioapic.set(split_ioapic.clone());
        Ok(())
    };
    let device: DeviceThread<()> = Box::new(|env: &DeviceEnv| {
        let Some(ioapic) = ioapic.get() else {
            return Ok(());
        };
        pit.run_timer(env.control, || ioapic.pulse(abi::PIT_IOAPIC_PIN))
            .map_err(MsiDeviceError::Raise)
    });
    let output = machine::run(config, echo_console, Extensions::attached(&attach, device))?;

    let result = |index: usize| output.shared.result[index];
    let (ticks, reload, max_read) = (
        result(abi::RESULT_TICK_TICKS),
        result(abi::RESULT_TICK_RELOAD),
        result(abi::RESULT_TICK_MAX_COUNT_READ),
    );
    // The guest reports the reload it programmed; the PIT holds what was
    // written last, from whichever vCPU.
    let programmed = u64::from(pit.reload_count());
    if reload != programmed {
        let writers: Vec<String> = pit
            .writers()
            .iter()
            .map(|cpu| format!("vCPU {cpu}"))
            .collect();
        let held = if writers.is_empty() {
            format!("the PIT holds {programmed}, never programmed by any vCPU")
        } else {
            format!(
                "the PIT was last programmed with {programmed} (written by {})",
                writers.join(", ")
            )
        };
        return Err(BenchError::Invariant {
            bench: Bench::Tick,
            what: format!(
                "the guest reports reload {reload}, but {held}: the guest's report does not match the device"
            ),
        });
    }
    if max_read > reload {
        return Err(BenchError::Invariant {
            bench: Bench::Tick,
            what: format!(
                "the guest read back count {max_read}, beyond the {reload} it programmed: the scaling showed"
            ),
        });
    }
    let loaded = result(abi::RESULT_TICK_LOADED_CYCLES);
    let loaded_s = cycles_to_seconds(loaded, output.tsc_khz);
    let (exits, duration_s) = window_exits(&output);
    let results = BenchResult::Tick(TickResult {
        timer_interrupts: ticks,
        timer_interrupts_per_s: f64_of(ticks) / loaded_s.max(f64::MIN_POSITIVE),
        exits_per_s: f64_of(exits.total) / duration_s.max(f64::MIN_POSITIVE),
        guest_share: guest_share(
            result(abi::RESULT_TICK_ITERATIONS),
            result(abi::RESULT_TICK_BASELINE_CYCLES),
            result(abi::RESULT_TICK_LOADED_ITERATIONS),
            loaded,
        ),
        guest_reload: reload,
        max_count_read: max_read,
        effective_reload: u64::from(pit.reload_count()) * u64::from(params.tick_scale),
    });
    let mut report = RunReport::new(
        config,
        ticks,
        exits,
        None,
        duration_s,
        results,
        output.facts,
    );
    report.evidence.pit = Some(pit.evidence(params.tick_scale));
    Ok(report)
}
