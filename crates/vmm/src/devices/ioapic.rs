//! dirq's IOAPIC model (`dirq_arch::ioapic`) on the MMIO bus, for
//! `--irqchip userspace` and `split`. What it raises goes onto an
//! `ApicBus`: dirq's own LAPICs, or KVM's (as an MSI) in split mode.

use std::sync::{Arc, Mutex, MutexGuard};

use dirq_arch::ioapic::{Ioapic, MMIO_SIZE};
use dirq_arch::lapic::Interrupt;
use dirq_arch::msi::MsiMessage;

use super::interrupt::{signal_msi, InterruptError, InterruptSink};
use super::{check_access_size, fill_le, le_value, DeviceError, Direction, MmioDevice};
use crate::vm::Vm;

/// Where an IOAPIC's redirected interrupts go.
pub trait ApicBus: Send + Sync {
    fn deliver(&self, interrupt: Interrupt) -> Result<(), String>;
}

/// Split mode: KVM's LAPICs, reached by turning the redirection into an MSI
/// (the IOAPIC's messages carry the same fields, SDM 10.11).
pub struct KvmLapics(pub Arc<Vm>);

impl ApicBus for KvmLapics {
    fn deliver(&self, interrupt: Interrupt) -> Result<(), String> {
        let msi = MsiMessage::compose(&interrupt).map_err(|err| err.to_string())?;
        signal_msi(&self.0, msi).map_err(|err| err.to_string())
    }
}

pub struct IoapicDevice {
    ioapic: Mutex<Ioapic>,
    bus: Box<dyn ApicBus>,
}

impl IoapicDevice {
    pub const SIZE: u64 = MMIO_SIZE;

    pub fn new(bus: Box<dyn ApicBus>) -> Self {
        IoapicDevice {
            ioapic: Mutex::new(Ioapic::new(0)),
            bus,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Ioapic> {
        // Every model update is one call: a panic cannot leave it half-done.
        self.ioapic
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn deliver(&self, interrupt: Option<Interrupt>) -> Result<(), String> {
        match interrupt {
            Some(interrupt) => self.bus.deliver(interrupt),
            None => Ok(()),
        }
    }

    /// An edge on `pin`: asserted, then deasserted.
    pub fn pulse(&self, pin: u32) -> Result<(), String> {
        let raised = self
            .lock()
            .set_irq(pin, true)
            .map_err(|err| err.to_string())?;
        self.deliver(raised)?;
        self.lock()
            .set_irq(pin, false)
            .map_err(|err| err.to_string())?;
        Ok(())
    }

    /// A LAPIC completed level-triggered `vector`: clear remote-IRR, and
    /// redeliver lines still asserted (82093AA 3.2.4).
    pub fn end_of_interrupt(&self, vector: u8) -> Result<(), String> {
        let mut redelivered = Vec::new();
        self.lock()
            .end_of_interrupt(vector, |interrupt| redelivered.push(interrupt));
        redelivered
            .into_iter()
            .try_for_each(|interrupt| self.bus.deliver(interrupt))
    }
}

impl MmioDevice for IoapicDevice {
    fn name(&self) -> &'static str {
        "IOAPIC"
    }

    fn read(&self, _cpu: usize, offset: u64, data: &mut [u8]) -> Result<(), DeviceError> {
        check_access_size("an IOAPIC register", Direction::Read, data.len(), 4)?;
        Ioapic::check_access(offset, None)?;
        fill_le(data, u64::from(self.lock().read_mmio(offset)));
        Ok(())
    }

    fn write(&self, _cpu: usize, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        check_access_size("an IOAPIC register", Direction::Write, data.len(), 4)?;
        let value = le_value(data) as u32;
        Ioapic::check_access(offset, Some(value))?;
        let raised = self.lock().write_mmio(offset, value);
        self.deliver(raised).map_err(DeviceError::Device)
    }
}

/// A device wired to an IOAPIC input of dirq's model.
pub struct IoapicPin {
    pub ioapic: Arc<IoapicDevice>,
    pub pin: u32,
}

impl InterruptSink for IoapicPin {
    fn raise(&self) -> Result<(), InterruptError> {
        self.ioapic
            .pulse(self.pin)
            .map_err(InterruptError::Userspace)
    }
}

/// A device wired to an input of KVM's in-kernel IOAPIC (KVM_IRQ_LINE).
pub struct KvmIrqLine {
    pub vm: Arc<Vm>,
    pub pin: u32,
}

impl InterruptSink for KvmIrqLine {
    fn raise(&self) -> Result<(), InterruptError> {
        for level in [true, false] {
            self.vm
                .fd
                .set_irq_line(self.pin, level)
                .map_err(InterruptError::IrqLine)?;
        }
        Ok(())
    }
}
