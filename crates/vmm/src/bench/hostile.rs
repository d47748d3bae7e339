//! `dirq run hostile --case <name>`: the host side of each attack (the
//! cases and what the VMM must do with each are in `crate::hostile`).

use super::vioapic::{attach_controller, start_back_to_back, Controller, KernelLine};
use super::{exit_cost_figures, window_exits, BenchError};
use crate::abi;
use crate::bus::Bus;
use crate::config::params::{HostileParams, VioapicParams};
use crate::config::Bench;
use crate::config::{BenchConfig, HostileCase, VioapicLevel};
use crate::devices::io_batch::IoBatchDoorbell;
use crate::devices::msi_device::{self, DeviceEnv};
use crate::hostile::{Expect, Target};
use crate::machine::{self, Attach, DeviceThread, Extensions};
use crate::report::RunReport;
use crate::results::{BenchResult, NoFigures, Observed};

/// Runs `params.hostile` and judges what the VMM did with it.
pub(super) fn run(
    config: &BenchConfig,
    params: &HostileParams,
    echo_console: bool,
) -> Result<RunReport, BenchError> {
    let (case, count) = (params.hostile, params.count);
    // The PV lock and page attacks face the paravirtual level.
    let vioapic = VioapicParams {
        count,
        vioapic: VioapicLevel::Pv,
        ..VioapicParams::default()
    };
    let controller = Controller::new();
    let kernel_line = KernelLine::new();
    let attach = |attach: &mut Attach| match case.target() {
        // Every batch the cases ring is refused before any write replays.
        Target::Doorbell => {
            IoBatchDoorbell::new(abi::PORT_IO_BATCH, attach.memory.clone(), Bus::default())
                .attach(attach.bus);
            Ok(())
        }
        Target::PvVioapic => attach_controller(attach, &vioapic, &controller, &kernel_line),
        Target::Machine | Target::Device => Ok(()),
    };
    let device: DeviceThread<()> = Box::new(|env: &DeviceEnv| match case.target() {
        Target::Device => msi_device::ping_pong(env, count, 0).map(drop),
        Target::PvVioapic => match controller.get() {
            Some(controller) => start_back_to_back(env, controller),
            None => Ok(()),
        },
        Target::Machine | Target::Doorbell => Ok(()),
    });
    let output = machine::run(config, echo_console, Extensions::attached(&attach, device))?;
    let invariant = |what: String| {
        Err(BenchError::Invariant {
            bench: Bench::Hostile,
            what,
        })
    };
    let (exits, duration_s) = window_exits(&output);
    // The forged figures are read as exit-cost's, and held to its rules.
    if case == HostileCase::ForgedExitCost {
        let (_, forged) = exit_cost_figures(&output);
        forged.check(&Observed {
            evidence: &output.facts.evidence,
            config,
            interrupts: 0,
        })?;
    }
    if case.expect() == Expect::Refuses {
        return invariant(format!(
            "the VMM let case {case} complete; it must refuse it"
        ));
    }
    let handled = output.shared.handled[0];
    let want = match case {
        // After the storm the guest's self-IPIs must all still arrive.
        HostileCase::EoiStormX2apic | HostileCase::EoiStormMmio => Some(count),
        _ => None,
    };
    if want.is_some_and(|want| want != handled) {
        return Err(BenchError::Delivery {
            bench: Bench::Hostile,
            raised: count,
            handled,
        });
    }
    if case == HostileCase::PeriodicTimerCount1 && handled == 0 {
        return invariant("the periodic timer never fired".into());
    }
    Ok(RunReport::new(
        config,
        handled,
        exits,
        None,
        duration_s,
        BenchResult::Hostile(NoFigures {}),
        output.facts,
    ))
}
