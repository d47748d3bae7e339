//! `dirq run vioapic`: the four levels of the Loongson VIOAPIC study
//! (mechanisms.md section 6) on x86 KVM. A device with back-to-back
//! level-triggered events interrupts the guest through an I/O interrupt
//! controller that lives in the VMM (every access exits), in the kernel
//! (KVM's IOAPIC), in the VMM behind a read-only mirror page, or in the VMM
//! with a paravirtual MASK. The guest's side is guest/bench_vioapic.c.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use dirq_stats::{f64_of, ratio};
use vmm_sys_util::eventfd::EventFd;

use super::lapic_check::{self, LapicInService};
use super::{cycles_to_seconds, window_exits, BenchError};
use crate::abi::{self, SharedPage};
use crate::config::params::VioapicParams;
use crate::config::Bench;
use crate::config::{BenchConfig, VioapicLevel};
use crate::devices::event_source::{BackToBack, LineSource, PendingEvents};
use crate::devices::msi_device::{DeviceEnv, MsiDeviceError};
use crate::devices::vioapic::{Registers, VioapicDevice, POSTED_MASK};
use crate::interrupt::InterruptError;
use crate::machine::{self, Attach, DeviceThread, Extensions, MachineError, MachineOutput};
use crate::memory;
use crate::report::RunReport;
use crate::results::{BenchResult, VioapicResult};
use dirq_arch::vioapic::REG_MASK;

/// The slot after guest RAM's.
const MIRROR_SLOT: u32 = 1;
/// Race test: the device's longest pause between two events, about twice
/// the time the guest needs to service one at the cheapest level.
const RACE_MAX_GAP: Duration = Duration::from_micros(200);

/// The controller dirq runs for the guest, once the machine has attached it.
pub(super) type Controller = OnceLock<Arc<VioapicDevice>>;
/// Kernel level: the level-triggered irqfd and its resample eventfd.
pub(super) type KernelLine = OnceLock<(EventFd, EventFd)>;

/// What one boot of the vioapic bench gave.
pub(super) struct Measured {
    output: MachineOutput<()>,
    /// Register reads and writes that exited to dirq's controller.
    trapped: (u64, u64),
    /// The guest's LAPIC check, found consistent.
    pub(super) in_service: LapicInService,
}

/// Boots the vioapic bench at `params.vioapic`'s level.
pub(super) fn measure(
    config: &BenchConfig,
    params: &VioapicParams,
    echo_console: bool,
) -> Result<Measured, BenchError> {
    let controller = Controller::new();
    let kernel_line = KernelLine::new();
    let attach = |attach: &mut Attach| attach_controller(attach, params, &controller, &kernel_line);
    let (count, race) = (params.count, params.vioapic_race);
    // Attaching set exactly one of the two before this thread starts.
    let device: DeviceThread<()> =
        Box::new(
            |env: &DeviceEnv| match (kernel_line.get(), controller.get()) {
                (Some((trigger, resample)), _) => resample_loop(env, count, trigger, resample),
                (None, Some(controller)) if race => raise_at_random(env, count, controller),
                (None, Some(controller)) => start_back_to_back(env, controller),
                (None, None) => Ok(()),
            },
        );
    let output = machine::run(config, echo_console, Extensions::attached(&attach, device))?;
    let in_service = lapic_check::from_guest(&output.shared)?;
    Ok(Measured {
        output,
        trapped: controller.get().map_or((0, 0), |device| device.exits()),
        in_service,
    })
}

/// Runs the vioapic bench at `params.vioapic`'s level.
pub(super) fn run(
    config: &BenchConfig,
    params: &VioapicParams,
    echo_console: bool,
) -> Result<RunReport, BenchError> {
    let Measured {
        output,
        trapped: (vmm_reads, vmm_writes),
        in_service,
    } = measure(config, params, echo_console)?;
    let count = params.count;
    let result = |index: usize| output.shared.result[index];
    let serviced = output.shared.handled[0];
    let events = result(abi::RESULT_VIOAPIC_EVENTS);
    let spurious = result(abi::RESULT_VIOAPIC_SPURIOUS);
    let ending = Ending::from_guest(&output.shared)?;
    if let Some(why) = not_measurable(params, in_service, ending, events, spurious) {
        return Err(BenchError::NotMeasurable {
            bench: Bench::Vioapic,
            why,
        });
    }
    if events != count {
        return Err(BenchError::Delivery {
            bench: Bench::Vioapic,
            raised: count,
            handled: events,
        });
    }
    let violation = |what: String| {
        Err(BenchError::Invariant {
            bench: Bench::Vioapic,
            what,
        })
    };
    let masked_arrivals = result(abi::RESULT_VIOAPIC_MASKED_ARRIVALS);
    // A posted mask (ro-page) completes without waiting for a send already
    // under way, which may then arrive: the guest finds nothing in service
    // and counts it spurious. Only the synchronous levels promise none.
    if masked_arrivals > 0 && params.vioapic != VioapicLevel::RoPage {
        return violation(format!(
            "{masked_arrivals} interrupts arrived while the guest had the line masked"
        ));
    }
    let misordered = result(abi::RESULT_VIOAPIC_MISORDERED);
    if misordered > 0 {
        return violation(format!(
            "{misordered} of {count} back-to-back events were consumed out of order"
        ));
    }

    // Throughput counts device events serviced: a spurious interrupt (a
    // duplicate delivery, or a race-test toggle getting there first) does
    // no work, though its cycles count against the rest.
    let cycles = result(abi::RESULT_VIOAPIC_CYCLES);
    let seconds = cycles_to_seconds(cycles, output.tsc_khz);
    let results = BenchResult::Vioapic(VioapicResult {
        events,
        interrupts_per_s: f64_of(events) / seconds.max(f64::MIN_POSITIVE),
        host_cycles_per_interrupt: ratio(cycles, events.max(1)),
        register_reads_per_interrupt: result(abi::RESULT_VIOAPIC_READS),
        register_writes_per_interrupt: result(abi::RESULT_VIOAPIC_WRITES),
        trapped_reads: vmm_reads,
        trapped_writes: vmm_writes,
        spurious,
        mask_toggles: result(abi::RESULT_VIOAPIC_MASK_TOGGLES),
    });
    let (exits, duration_s) = window_exits(&output);
    Ok(RunReport::new(
        config,
        serviced,
        exits,
        None,
        duration_s,
        results,
        output.facts,
    ))
}

/// How the guest's loop ended, as it said (`enum dirq_vioapic_gave_up`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Finished,
    /// `abi::VIOAPIC_SPURIOUS_STREAK` wake-ups in a row found nothing.
    SpuriousStreak,
    /// Time was up (half the watchdog).
    Deadline {
        after_ms: u32,
    },
}

impl Ending {
    fn from_guest(shared: &SharedPage) -> Result<Self, BenchError> {
        match shared.result[abi::RESULT_VIOAPIC_GAVE_UP] {
            abi::VIOAPIC_FINISHED => Ok(Ending::Finished),
            abi::VIOAPIC_GAVE_UP_SPURIOUS => Ok(Ending::SpuriousStreak),
            abi::VIOAPIC_GAVE_UP_DEADLINE => Ok(Ending::Deadline {
                after_ms: shared.give_up_ms,
            }),
            code => Err(BenchError::Invariant {
                bench: Bench::Vioapic,
                what: format!("the guest ended its loop with unknown code {code}"),
            }),
        }
    }
}

/// Why a run measured nothing the level-triggered sequence costs, with
/// what it did measure; `None` for a run that did. The kernel level needs
/// a LAPIC that holds the interrupt in service (its remote IRR is the
/// status the guest reads), whatever the guest managed.
fn not_measurable(
    params: &VioapicParams,
    in_service: LapicInService,
    ending: Ending,
    events: u64,
    spurious: u64,
) -> Option<String> {
    let why = if params.vioapic == VioapicLevel::Kernel && in_service == LapicInService::NotHeld {
        "KVM's LAPIC holds no interrupt in service (after a self-IPI left without EOI, ISR \
         and PPR read 0 and a second one was taken at once), so the IOAPIC's \
         level-triggered line re-fires before the guest can read its remote IRR"
            .to_string()
    } else {
        match ending {
            Ending::SpuriousStreak => format!(
                "{} wake-ups in a row found nothing to service: the level-triggered line storms, \
                 or the device stopped raising it and the guest's halt does not wait",
                abi::VIOAPIC_SPURIOUS_STREAK
            ),
            Ending::Deadline { after_ms } => format!(
                "the guest gave up after {after_ms} ms, half the watchdog (--timeout gives more)"
            ),
            Ending::Finished => return None,
        }
    };
    Some(format!(
        "{why}; measured: {events} of {} events consumed, {spurious} interrupts with nothing to service",
        params.count
    ))
}

/// Puts the controller at `params.vioapic`'s level on the bus, or binds
/// the kernel level's line.
pub(super) fn attach_controller(
    attach: &mut Attach,
    params: &VioapicParams,
    controller: &Controller,
    kernel_line: &KernelLine,
) -> Result<(), MachineError> {
    if params.vioapic == VioapicLevel::Kernel {
        let line = attach.vm.level_irqfd(abi::DEVICE_IOAPIC_PIN)?;
        // Set once per run, by this one call.
        let _ = kernel_line.set(line);
        return Ok(());
    }
    let memory = attach.memory.clone();
    let registers = match params.vioapic {
        VioapicLevel::RoPage => {
            let mirror = memory::create_page(abi::VIOAPIC_GPA)?;
            attach.vm.map_readonly(MIRROR_SLOT, &mirror)?;
            let posted_mask = attach
                .vm
                .mmio_ioeventfd(abi::VIOAPIC_GPA + REG_MASK, POSTED_MASK)?;
            Registers::ReadOnlyMirror {
                mirror,
                posted_mask,
            }
        }
        VioapicLevel::Pv => Registers::Paravirtual,
        _ => Registers::Trapped,
    };
    let events = PendingEvents {
        memory: memory.clone(),
    };
    let line: Box<dyn LineSource> = if params.vioapic_race {
        Box::new(events)
    } else {
        Box::new(BackToBack {
            events,
            count: params.count,
        })
    };
    let device = VioapicDevice::new(
        registers,
        memory,
        line,
        attach.vm.clone(),
        attach.control.clone(),
    )
    .map_err(|source| MachineError::DeviceSetup {
        device: "VIOAPIC",
        source,
    })?;
    let device = Arc::new(device);
    attach.bus.add_mmio(
        abi::VIOAPIC_GPA..abi::VIOAPIC_GPA + VioapicDevice::SIZE,
        device.clone(),
    );
    let _ = controller.set(device);
    Ok(())
}

/// The first event; the controller samples the rest as the guest unmasks.
pub(super) fn start_back_to_back(
    env: &DeviceEnv,
    controller: &VioapicDevice,
) -> Result<(), MsiDeviceError> {
    if env.control.wait_for_window() {
        controller.sample()?;
    }
    Ok(())
}

/// Race test: `count` events at random gaps, each sampled at once.
fn raise_at_random(
    env: &DeviceEnv,
    count: u64,
    controller: &VioapicDevice,
) -> Result<(), MsiDeviceError> {
    if !env.control.wait_for_window() {
        return Ok(());
    }
    let events = PendingEvents {
        memory: env.memory.clone(),
    };
    // xorshift64: a fixed sequence of gaps, not a reproducible interleaving.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..count {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let gap = RACE_MAX_GAP.mul_f64(ratio(state % 1000, 1000));
        let until = Instant::now() + gap;
        while Instant::now() < until {
            if env.control.should_stop() {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        events.raise()?;
        controller.sample()?;
    }
    Ok(())
}

/// Kernel level: KVM's IOAPIC deasserts the line at the guest's EOI and
/// signals `resample`; the device asserts it again when it has an event.
fn resample_loop(
    env: &DeviceEnv,
    count: u64,
    trigger: &EventFd,
    resample: &EventFd,
) -> Result<(), MsiDeviceError> {
    if !env.control.wait_for_window() {
        return Ok(());
    }
    let device = BackToBack {
        events: PendingEvents {
            memory: env.memory.clone(),
        },
        count,
    };
    loop {
        if device.level()? {
            trigger
                .write(1)
                .map_err(|err| MsiDeviceError::Raise(InterruptError::Irqfd(err)))?;
        }
        // Spin: a sleeping device would add a host wake-up to every interrupt.
        while resample.read().is_err() {
            if env.control.window_closed() || env.control.should_stop() {
                return Ok(());
            }
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(vioapic: VioapicLevel) -> VioapicParams {
        VioapicParams {
            vioapic,
            count: 10,
            ..VioapicParams::default()
        }
    }

    #[test]
    fn only_the_kernel_level_needs_a_lapic_that_holds_in_service() {
        let why = not_measurable(
            &at(VioapicLevel::Kernel),
            LapicInService::NotHeld,
            Ending::Finished,
            10,
            900,
        )
        .expect("a storm's figures are not the sequence's");
        assert!(why.contains("holds no interrupt in service"), "{why}");
        assert!(
            why.contains("10 of 10 events consumed, 900 interrupts"),
            "{why}"
        );
        for mode in [
            VioapicLevel::Userspace,
            VioapicLevel::RoPage,
            VioapicLevel::Pv,
        ] {
            assert_eq!(
                not_measurable(&at(mode), LapicInService::NotHeld, Ending::Finished, 10, 0),
                None,
                "{mode}"
            );
        }
    }

    #[test]
    fn a_loop_that_gave_up_says_why() {
        let held = LapicInService::Held;
        let params = at(VioapicLevel::Userspace);
        let storm = not_measurable(&params, held, Ending::SpuriousStreak, 3, 300).expect("storm");
        assert!(storm.contains("256 wake-ups in a row"), "{storm}");
        let late = not_measurable(&params, held, Ending::Deadline { after_ms: 15_000 }, 3, 0)
            .expect("late");
        assert!(late.contains("after 15000 ms"), "{late}");
    }
}
