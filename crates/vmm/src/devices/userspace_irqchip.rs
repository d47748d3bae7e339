//! `--irqchip userspace`: dirq's LAPIC models (`dirq_arch::lapic`) stand in
//! for KVM's. Every xAPIC MMIO and x2APIC MSR access exits to this process;
//! interrupts go in through KVM_INTERRUPT when the vCPU can take them (the
//! run loop asks `UserspaceInterruptController`), halted vCPUs sleep here,
//! and a timer thread fires the LAPIC timers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use dirq_arch::bus;
use dirq_arch::clock::Clock;
use dirq_arch::interrupt::{ApicBusMessage, Interrupt};
use dirq_arch::lapic::{
    Lapic, LapicConfig, MMIO_SIZE, MSR_IA32_APIC_BASE, MSR_IA32_TSC_DEADLINE, MSR_X2APIC_FIRST,
    MSR_X2APIC_LAST,
};
use dirq_arch::msi::{MsiFormat, MsiMessage};

use super::control::RunControl;
use super::interrupt::{InterruptError, InterruptSink};
use super::ioapic::{ApicBus, IoapicDevice};
use super::{check_access_size, fill_le, le_value, DeviceError, Direction, MmioDevice, MsrDevice};
use crate::vcpu::{Kicker, UserspaceInterruptController};

/// SDM 10.4.1: APIC registers are accessed as aligned 32-bit quantities.
const XAPIC_REGISTER_BYTES: usize = 4;
/// Longest a halted vCPU or the timer thread sleeps before re-checking for a stop.
const STOP_POLL: Duration = Duration::from_millis(20);

/// The guest's TSC as a clock: the LAPIC models convert TSC-deadline values
/// with it, so it must tick with the guest's TSC.
pub struct GuestTscClock {
    /// guest TSC - host TSC, sampled at boot.
    offset: i64,
    tsc_khz: u64,
}

impl GuestTscClock {
    pub fn new(guest_tsc: u64, host_tsc: u64, tsc_khz: u64) -> Self {
        GuestTscClock {
            offset: guest_tsc.wrapping_sub(host_tsc) as i64,
            tsc_khz: tsc_khz.max(1),
        }
    }

    pub fn host_tsc() -> u64 {
        // SAFETY: RDTSC has no memory effects; every x86-64 CPU has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
}

impl Clock for GuestTscClock {
    fn now_ns(&self) -> u64 {
        let guest_tsc = Self::host_tsc().wrapping_add(self.offset as u64);
        (u128::from(guest_tsc) * 1_000_000 / u128::from(self.tsc_khz)) as u64
    }
}

struct CpuApic {
    lapic: Mutex<Lapic>,
    /// Signalled when an interrupt arrives for a halted vCPU.
    wake: Condvar,
    /// The vCPU sleeps in `wait_for_interrupt` (changed only under `lapic`'s
    /// lock): waking it needs the condvar, not a kick out of KVM_RUN.
    halted: AtomicBool,
}

#[derive(Debug, thiserror::Error)]
pub enum IrqchipError {
    #[error("invalid LAPIC configuration")]
    Config(#[from] dirq_arch::lapic::LapicError),
}

pub struct UserspaceIrqchip {
    cpus: Vec<CpuApic>,
    clock: GuestTscClock,
    kicker: Arc<Kicker>,
    /// Bumped on every LAPIC register write, so the timer thread re-plans.
    timer_generation: Mutex<u64>,
    timer_changed: Condvar,
    /// Receives the EOIs of level-triggered vectors.
    ioapic: OnceLock<Arc<IoapicDevice>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Model state stays consistent across a panic: each update is one call.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl UserspaceIrqchip {
    /// One LAPIC per vCPU, APIC ID = vCPU index, timer bus at `bus_hz`.
    pub fn new(
        vcpus: usize,
        bus_hz: u64,
        clock: GuestTscClock,
        kicker: Arc<Kicker>,
    ) -> Result<Self, IrqchipError> {
        let config = LapicConfig::new(bus_hz, clock.tsc_khz * 1000)?;
        let cpus = (0..vcpus)
            .map(|cpu| CpuApic {
                lapic: Mutex::new(Lapic::new(cpu as u32, config)),
                wake: Condvar::new(),
                halted: AtomicBool::new(false),
            })
            .collect();
        Ok(UserspaceIrqchip {
            cpus,
            clock,
            kicker,
            timer_generation: Mutex::new(0),
            timer_changed: Condvar::new(),
            ioapic: OnceLock::new(),
        })
    }

    /// Adds dirq's IOAPIC, delivering into these LAPICs.
    pub fn attach_ioapic(self: &Arc<Self>) -> Arc<IoapicDevice> {
        self.ioapic
            .get_or_init(|| {
                Arc::new(IoapicDevice::new(Box::new(UserspaceLapics(
                    Arc::downgrade(self),
                ))))
            })
            .clone()
    }

    fn cpu(&self, cpu: usize) -> Result<&CpuApic, String> {
        self.cpus
            .get(cpu)
            .ok_or_else(|| format!("no LAPIC for vCPU {cpu}"))
    }

    /// Puts `interrupt` on the APIC bus: every LAPIC it addresses latches it
    /// and its vCPU is woken (halted) or kicked out of KVM_RUN (running).
    /// `sender` is the vCPU whose own run loop is delivering, if any: it
    /// injects before its next entry without a kick.
    pub fn deliver(&self, interrupt: Interrupt, sender: Option<usize>) -> Result<(), String> {
        if !interrupt.delivery_mode.uses_irr() {
            return Err(format!(
                "delivery mode {:?} is not modelled by the userspace irqchip",
                interrupt.delivery_mode
            ));
        }
        // Every LAPIC is locked, in vCPU order, so that lowest-priority
        // arbitration sees one consistent set of priorities.
        let mut lapics: Vec<MutexGuard<'_, Lapic>> =
            self.cpus.iter().map(|apic| lock(&apic.lapic)).collect();
        let views: Vec<&Lapic> = lapics.iter().map(|lapic| &**lapic).collect();
        let targets = bus::route(&interrupt, &views).map_err(|err| err.to_string())?;
        for cpu in targets.iter() {
            lapics[cpu].accept(interrupt.vector, interrupt.trigger_mode);
            self.wake(cpu, &self.cpus[cpu], sender);
        }
        Ok(())
    }

    /// Gets a newly pending interrupt seen: a halted vCPU is woken, a
    /// running one kicked out of KVM_RUN, unless it is `sender`, which
    /// injects before its next entry anyway. Call with `apic.lapic` locked.
    fn wake(&self, cpu: usize, apic: &CpuApic, sender: Option<usize>) {
        if apic.halted.load(Ordering::Relaxed) {
            apic.wake.notify_all();
        } else if sender != Some(cpu) {
            self.kicker.kick(cpu);
        }
    }

    fn handle_bus_message(
        &self,
        message: Option<ApicBusMessage>,
        cpu: usize,
    ) -> Result<(), DeviceError> {
        self.timer_may_have_changed();
        match message {
            Some(ApicBusMessage::Ipi(interrupt)) => self
                .deliver(interrupt, Some(cpu))
                .map_err(DeviceError::Device),
            Some(ApicBusMessage::Eoi(vector)) => match self.ioapic.get() {
                Some(ioapic) => ioapic.end_of_interrupt(vector).map_err(DeviceError::Device),
                None => Ok(()),
            },
            None => Ok(()),
        }
    }

    fn timer_may_have_changed(&self) {
        *lock(&self.timer_generation) += 1;
        self.timer_changed.notify_all();
    }

    /// Fires due LAPIC timers until the run stops; run it on its own thread.
    pub fn run_timers(&self, control: &RunControl) {
        while !control.should_stop() {
            let mut generation = lock(&self.timer_generation);
            let seen = *generation;
            let next_deadline = self
                .cpus
                .iter()
                .filter_map(|apic| lock(&apic.lapic).timer_deadline_ns())
                .min();
            let now = self.clock.now_ns();
            let sleep = match next_deadline {
                Some(deadline) if deadline <= now => Duration::ZERO,
                Some(deadline) => Duration::from_nanos(deadline - now).min(STOP_POLL),
                None => STOP_POLL,
            };
            if !sleep.is_zero() {
                while *generation == seen && !control.should_stop() {
                    let (guard, timeout) = self
                        .timer_changed
                        .wait_timeout(generation, sleep)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                    generation = guard;
                    if timeout.timed_out() {
                        break;
                    }
                }
            }
            drop(generation);
            for (cpu, apic) in self.cpus.iter().enumerate() {
                let mut lapic = lock(&apic.lapic);
                if lapic.expire_timer(&self.clock) {
                    self.wake(cpu, apic, None);
                }
            }
        }
    }
}

/// The IOAPIC's view of these LAPICs; weak, as the irqchip owns the IOAPIC.
struct UserspaceLapics(Weak<UserspaceIrqchip>);

impl ApicBus for UserspaceLapics {
    fn deliver(&self, interrupt: Interrupt) -> Result<(), String> {
        let chip = self.0.upgrade().ok_or("the userspace irqchip is gone")?;
        chip.deliver(interrupt, None)
    }
}

impl UserspaceInterruptController for UserspaceIrqchip {
    fn pending_vector(&self, cpu: usize) -> Result<Option<u8>, String> {
        Ok(lock(&self.cpu(cpu)?.lapic).pending_vector())
    }

    fn acknowledge(&self, cpu: usize, vector: u8) -> Result<(), String> {
        match lock(&self.cpu(cpu)?.lapic).acknowledge() {
            Some(acked) if acked == vector => Ok(()),
            other => Err(format!(
                "vCPU {cpu}: injected vector {vector} but the LAPIC acknowledged {other:?}"
            )),
        }
    }

    fn wait_for_interrupt(&self, cpu: usize, control: &RunControl) -> Result<(), String> {
        let apic = self.cpu(cpu)?;
        let mut lapic = lock(&apic.lapic);
        apic.halted.store(true, Ordering::Relaxed);
        while lapic.pending_vector().is_none() && !control.should_stop() {
            lapic = apic
                .wake
                .wait_timeout(lapic, STOP_POLL)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        apic.halted.store(false, Ordering::Relaxed);
        Ok(())
    }
}

/// The xAPIC MMIO page, shared by all vCPUs: each access goes to the
/// accessing vCPU's LAPIC (SDM 10.4.1).
pub struct LapicMmio(pub Arc<UserspaceIrqchip>);

impl LapicMmio {
    pub const SIZE: u64 = MMIO_SIZE;
}

impl MmioDevice for LapicMmio {
    fn name(&self) -> &'static str {
        "LAPIC (xAPIC MMIO)"
    }

    fn read(&self, cpu: usize, offset: u64, data: &mut [u8]) -> Result<(), DeviceError> {
        check_access_size(
            "an xAPIC register",
            Direction::Read,
            data.len(),
            XAPIC_REGISTER_BYTES,
        )?;
        let chip = &self.0;
        let value =
            lock(&chip.cpu(cpu).map_err(DeviceError::Device)?.lapic).read_mmio(offset, &chip.clock);
        fill_le(data, u64::from(value));
        Ok(())
    }

    fn write(&self, cpu: usize, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        check_access_size(
            "an xAPIC register",
            Direction::Write,
            data.len(),
            XAPIC_REGISTER_BYTES,
        )?;
        let chip = &self.0;
        let message = lock(&chip.cpu(cpu).map_err(DeviceError::Device)?.lapic).write_mmio(
            offset,
            le_value(data) as u32,
            &chip.clock,
        );
        chip.handle_bus_message(message, cpu)
    }
}

/// The x2APIC MSRs, IA32_APIC_BASE and IA32_TSC_DEADLINE of every vCPU.
pub struct LapicMsrs(pub Arc<UserspaceIrqchip>);

impl LapicMsrs {
    /// The MSR ranges this device owns.
    pub const RANGES: [std::ops::Range<u32>; 3] = [
        MSR_IA32_APIC_BASE..MSR_IA32_APIC_BASE + 1,
        MSR_IA32_TSC_DEADLINE..MSR_IA32_TSC_DEADLINE + 1,
        MSR_X2APIC_FIRST..MSR_X2APIC_LAST + 1,
    ];
}

impl MsrDevice for LapicMsrs {
    fn name(&self) -> &'static str {
        "LAPIC (MSRs)"
    }

    fn read(&self, cpu: usize, msr: u32) -> Result<u64, DeviceError> {
        let chip = &self.0;
        lock(&chip.cpu(cpu).map_err(DeviceError::Device)?.lapic)
            .read_msr(msr, &chip.clock)
            .map_err(|err| DeviceError::Device(err.to_string()))
    }

    fn write(&self, cpu: usize, msr: u32, value: u64) -> Result<(), DeviceError> {
        let chip = &self.0;
        let message = lock(&chip.cpu(cpu).map_err(DeviceError::Device)?.lapic)
            .write_msr(msr, value, &chip.clock)
            .map_err(|err| DeviceError::Device(err.to_string()))?;
        chip.handle_bus_message(message, cpu)
    }
}

/// `--inject vcpu` with the userspace irqchip: the VMM decodes the MSI and
/// puts it on its own APIC bus.
pub struct UserspaceMsi {
    pub chip: Arc<UserspaceIrqchip>,
    pub msi: MsiMessage,
}

impl InterruptSink for UserspaceMsi {
    fn raise(&self) -> Result<(), InterruptError> {
        match self.msi.decode() {
            Ok(MsiFormat::Compatibility(interrupt)) => self
                .chip
                .deliver(interrupt, None)
                .map_err(InterruptError::Userspace),
            Ok(MsiFormat::Remappable(_)) => Err(InterruptError::Userspace(
                "a remappable-format MSI needs an IOMMU, which this VM has none of".into(),
            )),
            Err(err) => Err(InterruptError::Userspace(err.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::interrupt::fixed_msi;
    use crate::devices::ioapic::IoapicPin;
    use dirq_arch::lapic::{APIC_EOI, APIC_SVR, MSR_X2APIC_FIRST};

    const VECTOR: u8 = 0x40;
    const SVR_ENABLED: u64 = 0x1ff;

    /// Two LAPICs, software-enabled through the xAPIC page (no vCPU threads).
    fn chip() -> Arc<UserspaceIrqchip> {
        let kicker = Arc::new(Kicker::new(2).expect("signal handler installs"));
        let chip = Arc::new(
            UserspaceIrqchip::new(
                2,
                1_000_000_000,
                GuestTscClock::new(0, 0, 1_000_000),
                kicker,
            )
            .expect("valid LAPIC config"),
        );
        let mmio = LapicMmio(chip.clone());
        for cpu in 0..2 {
            mmio.write(cpu, APIC_SVR, &(SVR_ENABLED as u32).to_le_bytes())
                .expect("SVR write");
        }
        chip
    }

    #[test]
    fn an_msi_reaches_only_its_destination_and_is_injected_once() {
        let chip = chip();
        UserspaceMsi {
            chip: chip.clone(),
            msi: fixed_msi(1, VECTOR),
        }
        .raise()
        .expect("MSI decodes");
        assert_eq!(chip.pending_vector(0), Ok(None));
        assert_eq!(chip.pending_vector(1), Ok(Some(VECTOR)));
        chip.acknowledge(1, VECTOR).expect("IRR -> ISR");
        // In service, not pending: the run loop will not inject it again.
        assert_eq!(chip.pending_vector(1), Ok(None));
        assert!(chip.acknowledge(1, VECTOR).is_err());
    }

    #[test]
    fn an_eoi_through_the_xapic_page_lets_the_next_interrupt_in() {
        let chip = chip();
        let msi = UserspaceMsi {
            chip: chip.clone(),
            msi: fixed_msi(0, VECTOR),
        };
        msi.raise().expect("MSI decodes");
        chip.acknowledge(0, VECTOR).expect("dispatched");
        msi.raise().expect("MSI decodes");
        // Same priority class as the one in service: held back (SDM 10.8.3.1).
        assert_eq!(chip.pending_vector(0), Ok(None));
        LapicMmio(chip.clone())
            .write(0, APIC_EOI, &0u32.to_le_bytes())
            .expect("EOI write");
        assert_eq!(chip.pending_vector(0), Ok(Some(VECTOR)));
    }

    #[test]
    fn an_x2apic_icr_write_sends_an_ipi_to_the_other_vcpu() {
        let chip = chip();
        let msrs = LapicMsrs(chip.clone());
        for cpu in 0..2 {
            let base = msrs.read(cpu, MSR_IA32_APIC_BASE).expect("APIC base reads");
            msrs.write(cpu, MSR_IA32_APIC_BASE, base | (1 << 10))
                .expect("x2APIC mode");
        }
        let icr = MSR_X2APIC_FIRST + 0x30;
        msrs.write(0, icr, (1u64 << 32) | u64::from(VECTOR))
            .expect("ICR write");
        assert_eq!(chip.pending_vector(1), Ok(Some(VECTOR)));
        assert_eq!(chip.pending_vector(0), Ok(None));
    }

    #[test]
    fn the_ioapic_routes_a_pin_to_a_lapic() {
        let chip = chip();
        let ioapic = chip.attach_ioapic();
        let pin = 10u32;
        let write = |register: u32, value: u32| {
            ioapic
                .write(0, 0x00, &register.to_le_bytes())
                .expect("IOREGSEL");
            ioapic.write(0, 0x10, &value.to_le_bytes()).expect("IOWIN");
        };
        write(0x10 + 2 * pin + 1, 1 << 24); // destination APIC ID 1
        write(0x10 + 2 * pin, u32::from(VECTOR)); // fixed, edge, unmasked
        IoapicPin {
            ioapic: ioapic.clone(),
            pin,
        }
        .raise()
        .expect("pin pulses");
        assert_eq!(chip.pending_vector(1), Ok(Some(VECTOR)));
        assert_eq!(chip.pending_vector(0), Ok(None));
    }
}
