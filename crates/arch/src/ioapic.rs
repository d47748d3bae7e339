//! I/O APIC model (Intel 82093AA datasheet): 24 pins, indirect register
//! access through IOREGSEL/IOWIN, redirection entries with mask and, for
//! level-triggered pins, remote-IRR. Deliveries are returned as
//! [`Interrupt`]s for the caller's bus (or, through
//! [`crate::msi::MsiMessage::compose`], as MSIs for a split irqchip).
//!
//! Line levels given to [`Ioapic::set_irq`] are logical (asserted or not);
//! the polarity bit is stored for the guest to read back.

use serde::{Deserialize, Serialize};

use crate::bits::{high_u32, low_u32};
use crate::interrupt::{DeliveryMode, Destination, DestinationMode, Interrupt, TriggerMode};

/// Default physical base of the IOAPIC's MMIO window.
pub const DEFAULT_MMIO_BASE: u64 = 0xFEC0_0000;
/// Size of the MMIO window.
pub const MMIO_SIZE: u64 = 0x20;
/// Register select (82093AA 3.1).
pub const IOREGSEL: u64 = 0x00;
/// Register data window (82093AA 3.1).
pub const IOWIN: u64 = 0x10;

/// Indirect registers (82093AA 3.2).
pub const IOAPICID: u32 = 0x00;
pub const IOAPICVER: u32 = 0x01;
pub const IOAPICARB: u32 = 0x02;
/// Redirection entry `n` occupies registers 0x10 + 2n (low) and 0x11 + 2n
/// (high).
pub const IOREDTBL_BASE: u32 = 0x10;

/// The highest pin: 23 (82093AA 3.2.2, IOAPICVER bits 23:16).
pub const MAX_REDIRECTION_ENTRY: u32 = 23;
pub const NUM_PINS: usize = MAX_REDIRECTION_ENTRY as usize + 1;
/// Version 0x11, maximum redirection entry 23 (82093AA 3.2.2).
pub const IOAPIC_VERSION_VALUE: u32 = (MAX_REDIRECTION_ENTRY << 16) | 0x11;
const IOAPIC_ID_MASK: u32 = 0x0F00_0000;

/// Redirection entry fields (82093AA 3.2.4).
pub const RTE_DESTINATION_LOGICAL: u64 = 1 << 11;
pub const RTE_DELIVERY_STATUS: u64 = 1 << 12;
pub const RTE_POLARITY_LOW: u64 = 1 << 13;
pub const RTE_REMOTE_IRR: u64 = 1 << 14;
pub const RTE_TRIGGER_LEVEL: u64 = 1 << 15;
pub const RTE_MASKED: u64 = 1 << 16;
const RTE_VECTOR_MASK: u64 = 0xFF;
const RTE_DELIVERY_MODE_SHIFT: u64 = 8;
const RTE_DESTINATION_SHIFT: u64 = 56;
/// Software-writable bits of the low dword: all but delivery status and
/// remote-IRR.
const RTE_LOW_WRITABLE: u64 = 0x0001_AFFF;
/// Software-writable bits of the high dword: the destination field.
const RTE_HIGH_WRITABLE: u64 = 0xFF00_0000_0000_0000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IoapicError {
    #[error("IOAPIC pin {pin} does not exist (the IOAPIC has {NUM_PINS} pins)")]
    InvalidPin { pin: u32 },
    #[error("IOAPIC offset {offset:#x} is not a register (IOREGSEL is at {IOREGSEL:#x}, IOWIN at {IOWIN:#x})")]
    NoRegister { offset: u64 },
    #[error("IOAPIC register select {select:#x} names no register (IOAPICID to IOAPICARB, or {IOREDTBL_BASE:#x} to {:#x})", IOREDTBL_BASE + 2 * MAX_REDIRECTION_ENTRY + 1)]
    InvalidSelect { select: u32 },
}

/// One 64-bit redirection table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RedirectionEntry(pub u64);

impl RedirectionEntry {
    /// Reset value: masked, everything else 0 (82093AA 3.2.4).
    pub const RESET: RedirectionEntry = RedirectionEntry(RTE_MASKED);

    pub fn vector(self) -> u8 {
        (self.0 & RTE_VECTOR_MASK) as u8
    }

    /// `None` for the reserved encoding 0b011.
    pub fn delivery_mode(self) -> Option<DeliveryMode> {
        DeliveryMode::from_bits(low_u32(self.0 >> RTE_DELIVERY_MODE_SHIFT))
    }

    pub fn destination_mode(self) -> DestinationMode {
        DestinationMode::from_logical_bit(self.0 & RTE_DESTINATION_LOGICAL != 0)
    }

    pub fn trigger_mode(self) -> TriggerMode {
        TriggerMode::from_level_bit(self.0 & RTE_TRIGGER_LEVEL != 0)
    }

    pub fn masked(self) -> bool {
        self.0 & RTE_MASKED != 0
    }

    pub fn remote_irr(self) -> bool {
        self.0 & RTE_REMOTE_IRR != 0
    }

    /// The 8-bit destination field (bits 63:56).
    pub fn destination(self) -> u8 {
        (self.0 >> RTE_DESTINATION_SHIFT) as u8
    }

    /// The message this entry sends; `None` with the reserved delivery mode.
    pub fn interrupt(self) -> Option<Interrupt> {
        let id = u32::from(self.destination());
        Some(Interrupt {
            vector: self.vector(),
            delivery_mode: self.delivery_mode()?,
            trigger_mode: self.trigger_mode(),
            destination: match self.destination_mode() {
                DestinationMode::Physical => Destination::Physical(id),
                DestinationMode::Logical => Destination::Logical(id),
            },
        })
    }
}

/// One I/O APIC.
#[derive(Clone, Debug)]
pub struct Ioapic {
    /// IOAPICID register value (ID in bits 27:24).
    id: u32,
    ioregsel: u32,
    entries: [RedirectionEntry; NUM_PINS],
    /// Bit n: pin n's input line is asserted.
    asserted_lines: u32,
}

impl Default for Ioapic {
    fn default() -> Self {
        Ioapic::new(0)
    }
}

impl Ioapic {
    /// An IOAPIC in its reset state (all pins masked) with IOAPIC ID `id`
    /// (4 bits).
    pub fn new(id: u8) -> Ioapic {
        Ioapic {
            id: (u32::from(id) << 24) & IOAPIC_ID_MASK,
            ioregsel: 0,
            entries: [RedirectionEntry::RESET; NUM_PINS],
            asserted_lines: 0,
        }
    }

    /// Refuses what the hardware would silently ignore: an access at an
    /// offset that is no register, or an IOREGSEL `written` that selects
    /// none. A VMM checks before `read_mmio` or `write_mmio`.
    pub fn check_access(offset: u64, written: Option<u32>) -> Result<(), IoapicError> {
        match (offset, written) {
            (IOREGSEL, Some(select)) => {
                let exists = select <= IOAPICARB || Self::redirection_register(select).is_some();
                if exists {
                    Ok(())
                } else {
                    Err(IoapicError::InvalidSelect { select })
                }
            }
            (IOREGSEL | IOWIN, _) => Ok(()),
            _ => Err(IoapicError::NoRegister { offset }),
        }
    }

    /// A 32-bit read in the MMIO window; offsets other than IOREGSEL and
    /// IOWIN read 0.
    pub fn read_mmio(&self, offset: u64) -> u32 {
        match offset {
            IOREGSEL => self.ioregsel,
            IOWIN => self.read_register(self.ioregsel),
            _ => 0,
        }
    }

    /// A 32-bit write in the MMIO window. Returns the interrupt delivered
    /// when the write unmasks (or re-programs) a level-triggered pin whose
    /// line is asserted and whose remote-IRR is clear.
    pub fn write_mmio(&mut self, offset: u64, value: u32) -> Option<Interrupt> {
        match offset {
            IOREGSEL => {
                self.ioregsel = value & 0xFF;
                None
            }
            IOWIN => self.write_register(self.ioregsel, value),
            _ => None,
        }
    }

    fn read_register(&self, register: u32) -> u32 {
        match register {
            IOAPICID => self.id,
            IOAPICVER => IOAPIC_VERSION_VALUE,
            // The arbitration ID mirrors the APIC ID after reset (82093AA 3.2.3).
            IOAPICARB => self.id,
            _ => match Self::redirection_register(register) {
                Some((pin, true)) => high_u32(self.entries[pin].0),
                Some((pin, false)) => low_u32(self.entries[pin].0),
                None => 0,
            },
        }
    }

    fn write_register(&mut self, register: u32, value: u32) -> Option<Interrupt> {
        if register == IOAPICID {
            self.id = value & IOAPIC_ID_MASK;
            return None;
        }
        let (pin, high) = Self::redirection_register(register)?;
        let entry = &mut self.entries[pin].0;
        if high {
            *entry = (*entry & !RTE_HIGH_WRITABLE) | ((u64::from(value) << 32) & RTE_HIGH_WRITABLE);
            return None;
        }
        *entry = (*entry & !RTE_LOW_WRITABLE) | (u64::from(value) & RTE_LOW_WRITABLE);
        if *entry & RTE_TRIGGER_LEVEL == 0 {
            // Remote-IRR is only defined for level-triggered pins.
            *entry &= !RTE_REMOTE_IRR;
        }
        self.deliver_level(pin)
    }

    /// Pin and half (true = high dword) of a redirection-table register.
    fn redirection_register(register: u32) -> Option<(usize, bool)> {
        let index = usize::try_from(register.checked_sub(IOREDTBL_BASE)?).ok()?;
        (index < 2 * NUM_PINS).then_some((index / 2, index % 2 == 1))
    }

    /// Drives pin `pin`'s input line. Edge-triggered pins deliver on the
    /// rising edge; level-triggered pins deliver while asserted with
    /// remote-IRR clear, and set remote-IRR. Masked pins deliver nothing and
    /// an edge arriving while masked is lost (82093AA 3.2.4, mask bit).
    pub fn set_irq(&mut self, pin: u32, asserted: bool) -> Result<Option<Interrupt>, IoapicError> {
        let index = Self::pin_index(pin)?;
        let bit = 1u32 << index;
        let was_asserted = self.asserted_lines & bit != 0;
        if asserted {
            self.asserted_lines |= bit;
        } else {
            self.asserted_lines &= !bit;
        }
        let entry = self.entries[index];
        Ok(match entry.trigger_mode() {
            TriggerMode::Edge if asserted && !was_asserted && !entry.masked() => entry.interrupt(),
            TriggerMode::Edge => None,
            TriggerMode::Level => self.deliver_level(index),
        })
    }

    /// An EOI broadcast for `vector` (SDM 10.8.5): clears remote-IRR of every
    /// level-triggered pin with that vector and calls `deliver` for each
    /// whose line is still asserted, which is delivered again.
    pub fn end_of_interrupt(&mut self, vector: u8, mut deliver: impl FnMut(Interrupt)) {
        for pin in 0..NUM_PINS {
            let entry = &mut self.entries[pin];
            if entry.remote_irr() && entry.vector() == vector {
                entry.0 &= !RTE_REMOTE_IRR;
                if let Some(interrupt) = self.deliver_level(pin) {
                    deliver(interrupt);
                }
            }
        }
    }

    /// Delivers a level-triggered pin if its line is asserted, it is unmasked
    /// and remote-IRR is clear, and sets remote-IRR until the EOI.
    fn deliver_level(&mut self, pin: usize) -> Option<Interrupt> {
        let entry = self.entries[pin];
        let ready = entry.trigger_mode().is_level()
            && self.asserted_lines & (1 << pin) != 0
            && !entry.masked()
            && !entry.remote_irr();
        if !ready {
            return None;
        }
        let interrupt = entry.interrupt()?;
        self.entries[pin].0 |= RTE_REMOTE_IRR;
        Some(interrupt)
    }

    pub fn redirection_entry(&self, pin: u32) -> Result<RedirectionEntry, IoapicError> {
        Ok(self.entries[Self::pin_index(pin)?])
    }

    /// Whether pin `pin`'s input line is asserted.
    pub fn line_asserted(&self, pin: u32) -> Result<bool, IoapicError> {
        Ok(self.asserted_lines & (1 << Self::pin_index(pin)?) != 0)
    }

    fn pin_index(pin: u32) -> Result<usize, IoapicError> {
        usize::try_from(pin)
            .ok()
            .filter(|&index| index < NUM_PINS)
            .ok_or(IoapicError::InvalidPin { pin })
    }
}
