//! The interrupt vocabulary shared by every model: what an ICR write, an
//! IOAPIC redirection entry, an MSI or an IRTE asks the APIC bus to deliver
//! (SDM 10.6.1, ICR fields; the IOAPIC and MSI formats carry the same
//! fields), and what a LAPIC puts on the bus.

use serde::{Deserialize, Serialize};

/// Delivery mode, encoded as in ICR bits 10:8 (SDM 10.6.1). Encoding 0b011
/// is reserved and has no variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeliveryMode {
    Fixed,
    LowestPriority,
    Smi,
    Nmi,
    Init,
    StartUp,
    ExtInt,
}

impl DeliveryMode {
    /// The 3-bit encoding.
    pub const fn bits(self) -> u32 {
        match self {
            DeliveryMode::Fixed => 0b000,
            DeliveryMode::LowestPriority => 0b001,
            DeliveryMode::Smi => 0b010,
            DeliveryMode::Nmi => 0b100,
            DeliveryMode::Init => 0b101,
            DeliveryMode::StartUp => 0b110,
            DeliveryMode::ExtInt => 0b111,
        }
    }

    /// Decodes the low 3 bits of `bits`; `None` for the reserved 0b011.
    pub const fn from_bits(bits: u32) -> Option<Self> {
        match bits & 0b111 {
            0b000 => Some(DeliveryMode::Fixed),
            0b001 => Some(DeliveryMode::LowestPriority),
            0b010 => Some(DeliveryMode::Smi),
            0b100 => Some(DeliveryMode::Nmi),
            0b101 => Some(DeliveryMode::Init),
            0b110 => Some(DeliveryMode::StartUp),
            0b111 => Some(DeliveryMode::ExtInt),
            _ => None,
        }
    }

    /// Whether the interrupt goes through IRR/ISR (fixed and lowest
    /// priority); the other modes bypass them (SDM 10.6.1).
    pub const fn uses_irr(self) -> bool {
        matches!(self, DeliveryMode::Fixed | DeliveryMode::LowestPriority)
    }
}

/// Trigger mode (ICR bit 15, IOAPIC RTE bit 15, MSI data bit 15).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TriggerMode {
    Edge,
    Level,
}

impl TriggerMode {
    pub const fn from_level_bit(level: bool) -> Self {
        if level {
            TriggerMode::Level
        } else {
            TriggerMode::Edge
        }
    }

    pub const fn is_level(self) -> bool {
        matches!(self, TriggerMode::Level)
    }
}

/// Destination mode (ICR bit 11, IOAPIC RTE bit 11, MSI address bit 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DestinationMode {
    Physical,
    Logical,
}

impl DestinationMode {
    pub const fn from_logical_bit(logical: bool) -> Self {
        if logical {
            DestinationMode::Logical
        } else {
            DestinationMode::Physical
        }
    }
}

/// Destination shorthand, ICR bits 19:18 (SDM 10.6.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DestinationShorthand {
    NoShorthand,
    SelfOnly,
    AllIncludingSelf,
    AllExcludingSelf,
}

impl DestinationShorthand {
    pub const fn bits(self) -> u32 {
        match self {
            DestinationShorthand::NoShorthand => 0b00,
            DestinationShorthand::SelfOnly => 0b01,
            DestinationShorthand::AllIncludingSelf => 0b10,
            DestinationShorthand::AllExcludingSelf => 0b11,
        }
    }

    /// Decodes the low 2 bits of `bits`.
    pub const fn from_bits(bits: u32) -> Self {
        match bits & 0b11 {
            0b00 => DestinationShorthand::NoShorthand,
            0b01 => DestinationShorthand::SelfOnly,
            0b10 => DestinationShorthand::AllIncludingSelf,
            _ => DestinationShorthand::AllExcludingSelf,
        }
    }
}

/// Where a message goes. Shorthands that depend on the sender carry the
/// sender's APIC ID so the bus can resolve them without asking the LAPIC.
/// Test a receiver with [`crate::lapic::Lapic::matches_destination`]; route
/// with [`crate::bus`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Destination {
    /// A physical APIC ID; [`XAPIC_BROADCAST_ID`] (xAPIC) or
    /// [`X2APIC_BROADCAST_ID`] (x2APIC) addresses every LAPIC (SDM 10.6.2.1).
    Physical(u32),
    /// A logical destination (message destination address), matched against
    /// each receiver's LDR (and DFR in xAPIC mode) (SDM 10.6.2.2, 10.12.10.2).
    Logical(u32),
    /// The sending LAPIC only (shorthand 01, or the x2APIC SELF IPI register).
    SelfOnly { sender: u32 },
    /// Every LAPIC (shorthand 10).
    AllIncludingSelf,
    /// Every LAPIC but the sender (shorthand 11).
    AllExcludingSelf { sender: u32 },
}

/// Physical destination that addresses every xAPIC (SDM 10.6.2.1).
pub const XAPIC_BROADCAST_ID: u32 = 0xFF;
/// Physical or logical destination that addresses every x2APIC (SDM 10.12.9).
pub const X2APIC_BROADCAST_ID: u32 = 0xFFFF_FFFF;

/// What an ICR write, an IOAPIC redirection or an MSI asks the bus to deliver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Interrupt {
    /// For StartUp, the start page; ignored for NMI, SMI, INIT and ExtInt.
    pub vector: u8,
    pub delivery_mode: DeliveryMode,
    pub trigger_mode: TriggerMode,
    pub destination: Destination,
}

/// A message the LAPIC puts on the bus as a result of a register write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ApicBusMessage {
    /// An interprocessor interrupt from an ICR or SELF IPI write.
    Ipi(Interrupt),
    /// EOI of a level-triggered vector (its TMR bit was set): the IOAPICs
    /// clear remote-IRR for it (SDM 10.8.5).
    Eoi(u8),
}
