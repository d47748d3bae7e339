//! dirq's IOAPIC model (`dirq_arch::ioapic`) on the MMIO bus, for the
//! split and userspace modes. What it raises goes onto an `ApicBus`:
//! KVM's LAPICs (split) or dirq's (userspace).

use std::sync::{Arc, Mutex, MutexGuard};

use dirq_arch::ioapic::{Ioapic, RedirectionEntry, IOWIN, MAX_REDIRECTION_ENTRY, MMIO_SIZE};
use dirq_arch::lapic::Interrupt;

use super::{InterruptError, InterruptSink};
use crate::bus::{check_access_size, fill_le, le_u32, DeviceError, Direction, MmioDevice};

/// Where an IOAPIC's redirected interrupts go.
pub trait ApicBus: Send + Sync {
    fn deliver(&self, interrupt: Interrupt) -> Result<(), InterruptError>;

    /// The guest wrote the IOAPIC's data window: `entries` is the
    /// redirection table now, by pin. For a bus that must mirror it.
    fn redirections_written(&self, _entries: &[RedirectionEntry]) -> Result<(), InterruptError> {
        Ok(())
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

    fn deliver(&self, interrupt: Option<Interrupt>) -> Result<(), InterruptError> {
        match interrupt {
            Some(interrupt) => self.bus.deliver(interrupt),
            None => Ok(()),
        }
    }

    /// An edge on `pin`: asserted, then deasserted.
    pub fn pulse(&self, pin: u32) -> Result<(), InterruptError> {
        let raised = self.lock().set_irq(pin, true)?;
        self.deliver(raised)?;
        self.lock().set_irq(pin, false)?;
        Ok(())
    }

    /// Drives `pin` to `level` and leaves it there (a level-triggered
    /// device's line, pc-testdev's IRQ ports): a rising edge, or an
    /// asserted level input with remote-IRR clear, raises an interrupt.
    pub fn set_line(&self, pin: u32, level: bool) -> Result<(), InterruptError> {
        let raised = self.lock().set_irq(pin, level)?;
        self.deliver(raised)
    }

    /// A LAPIC completed level-triggered `vector`: clear remote-IRR, and
    /// redeliver lines still asserted (82093AA 3.2.4).
    pub fn end_of_interrupt(&self, vector: u8) -> Result<(), InterruptError> {
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
        let value = le_u32(data);
        Ioapic::check_access(offset, Some(value))?;
        let (raised, entries) = {
            let mut ioapic = self.lock();
            let raised = ioapic.write_mmio(offset, value);
            let entries: Vec<RedirectionEntry> = (0..=MAX_REDIRECTION_ENTRY)
                .filter_map(|pin| ioapic.redirection_entry(pin).ok())
                .collect();
            (raised, entries)
        };
        if offset == IOWIN {
            self.bus.redirections_written(&entries)?;
        }
        self.deliver(raised).map_err(DeviceError::from)
    }
}

/// A device wired to an input of dirq's IOAPIC.
pub struct IoapicPin {
    pub ioapic: Arc<IoapicDevice>,
    pub pin: u32,
}

impl InterruptSink for IoapicPin {
    fn raise(&self) -> Result<(), InterruptError> {
        self.ioapic.pulse(self.pin)
    }
}
