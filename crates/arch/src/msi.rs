//! MSI address/data (Intel SDM Vol. 3, 10.11) and the VT-d remappable MSI
//! format (VT-d spec 5.1.2.2).

use serde::{Deserialize, Serialize};

use crate::interrupt::{DeliveryMode, Destination, DestinationMode, Interrupt, TriggerMode};

/// Address bits 31:20 of every MSI: the 0xFEEx_xxxx window (SDM 10.11.1).
pub const MSI_ADDRESS_BASE: u64 = 0xFEE0_0000;
const ADDRESS_WINDOW_MASK: u64 = 0xFFF0_0000;
const ADDRESS_DESTINATION_SHIFT: u64 = 12;
const ADDRESS_DESTINATION_MASK: u64 = 0xFF;
/// Compatibility format: redirection hint (SDM 10.11.1).
pub const ADDRESS_REDIRECTION_HINT: u64 = 1 << 3;
/// Compatibility format: logical destination mode (SDM 10.11.1).
pub const ADDRESS_DESTINATION_LOGICAL: u64 = 1 << 2;
/// Set for the remappable ("interrupt format") MSI (VT-d 5.1.2.2).
pub const ADDRESS_REMAPPABLE_FORMAT: u64 = 1 << 4;
/// Remappable format: the subhandle in data bits 15:0 is valid.
pub const ADDRESS_SUBHANDLE_VALID: u64 = 1 << 3;
const ADDRESS_HANDLE_LOW_SHIFT: u64 = 5;
const ADDRESS_HANDLE_LOW_MASK: u64 = 0x7FFF;
const ADDRESS_HANDLE_BIT15: u64 = 1 << 2;
/// Bits that must be zero in a compatibility-format address: 63:32 and 11:4.
const COMPATIBILITY_RESERVED: u64 = 0xFFFF_FFFF_0000_0FF0;
/// Bits that must be zero in a remappable-format address: 63:32, 1:0.
const REMAPPABLE_RESERVED: u64 = 0xFFFF_FFFF_0000_0003;

const DATA_VECTOR_MASK: u32 = 0xFF;
const DATA_DELIVERY_MODE_SHIFT: u32 = 8;
const DATA_LEVEL_ASSERT: u32 = 1 << 14;
const DATA_TRIGGER_LEVEL: u32 = 1 << 15;
/// Bits that must be zero in compatibility-format data: 31:16, 13:11.
const DATA_RESERVED: u32 = 0xFFFF_3800;
const DATA_SUBHANDLE_MASK: u32 = 0xFFFF;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MsiError {
    #[error("MSI address {address:#x} is outside the 0xFEEx_xxxx interrupt window")]
    NotInterruptAddress { address: u64 },
    #[error("MSI address {address:#x} sets reserved bits")]
    ReservedAddressBits { address: u64 },
    #[error("MSI data {data:#x} sets reserved bits")]
    ReservedDataBits { data: u32 },
    #[error("MSI data {data:#x} uses the reserved delivery mode 0b011")]
    ReservedDeliveryMode { data: u32 },
    #[error("destination {destination:?} cannot be expressed in a compatibility-format MSI")]
    UnrepresentableDestination { destination: Destination },
}

/// A message-signalled interrupt: the device's memory write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MsiMessage {
    pub address: u64,
    pub data: u32,
}

/// The index of a remappable MSI into the interrupt-remapping table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RemappableMsi {
    pub handle: u16,
    /// Data bits 15:0 when the address's SHV bit is set.
    pub subhandle: Option<u16>,
}

impl RemappableMsi {
    /// IRTE index: handle, plus subhandle when valid (VT-d 5.1.2.2). It can
    /// exceed 16 bits; the IOMMU checks it against its table size.
    pub fn interrupt_index(&self) -> u32 {
        u32::from(self.handle) + u32::from(self.subhandle.unwrap_or(0))
    }
}

/// The two MSI formats an IOMMU distinguishes by address bit 4.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MsiFormat {
    /// Delivered straight to the LAPICs (or blocked, under remapping).
    Compatibility(Interrupt),
    /// Translated through an IRTE.
    Remappable(RemappableMsi),
}

impl MsiMessage {
    /// Encodes `interrupt` in the compatibility format (SDM 10.11.1/10.11.2),
    /// redirection hint clear. Only 8-bit physical IDs and logical
    /// destinations fit; shorthands do not.
    pub fn compose(interrupt: &Interrupt) -> Result<MsiMessage, MsiError> {
        let unrepresentable = MsiError::UnrepresentableDestination {
            destination: interrupt.destination,
        };
        let (mode, id) = match interrupt.destination {
            Destination::Physical(id) => (DestinationMode::Physical, id),
            Destination::Logical(id) => (DestinationMode::Logical, id),
            _ => return Err(unrepresentable),
        };
        let id = u64::from(id);
        if id > ADDRESS_DESTINATION_MASK {
            return Err(unrepresentable);
        }
        let logical = if mode == DestinationMode::Logical {
            ADDRESS_DESTINATION_LOGICAL
        } else {
            0
        };
        let trigger = if interrupt.trigger_mode.is_level() {
            DATA_TRIGGER_LEVEL | DATA_LEVEL_ASSERT
        } else {
            0
        };
        Ok(MsiMessage {
            address: MSI_ADDRESS_BASE | (id << ADDRESS_DESTINATION_SHIFT) | logical,
            data: u32::from(interrupt.vector)
                | (interrupt.delivery_mode.bits() << DATA_DELIVERY_MODE_SHIFT)
                | trigger,
        })
    }

    /// Encodes a remappable-format MSI (VT-d 5.1.2.2) for `msi`.
    pub fn compose_remappable(msi: &RemappableMsi) -> MsiMessage {
        let handle = u64::from(msi.handle);
        let handle_bit15 = if handle & 0x8000 != 0 {
            ADDRESS_HANDLE_BIT15
        } else {
            0
        };
        let subhandle_valid = if msi.subhandle.is_some() {
            ADDRESS_SUBHANDLE_VALID
        } else {
            0
        };
        MsiMessage {
            address: MSI_ADDRESS_BASE
                | ((handle & ADDRESS_HANDLE_LOW_MASK) << ADDRESS_HANDLE_LOW_SHIFT)
                | ADDRESS_REMAPPABLE_FORMAT
                | subhandle_valid
                | handle_bit15,
            data: msi.subhandle.map_or(0, u32::from),
        }
    }

    /// Decodes the message. The destination mode bit is honoured whatever
    /// the redirection hint, as Linux and KVM do.
    pub fn decode(&self) -> Result<MsiFormat, MsiError> {
        let MsiMessage { address, data } = *self;
        if address & ADDRESS_WINDOW_MASK != MSI_ADDRESS_BASE || address >> 32 != 0 {
            return Err(MsiError::NotInterruptAddress { address });
        }
        if address & ADDRESS_REMAPPABLE_FORMAT != 0 {
            return Self::decode_remappable(address, data);
        }
        if address & COMPATIBILITY_RESERVED != 0 {
            return Err(MsiError::ReservedAddressBits { address });
        }
        if data & DATA_RESERVED != 0 {
            return Err(MsiError::ReservedDataBits { data });
        }
        let delivery_mode = DeliveryMode::from_bits(data >> DATA_DELIVERY_MODE_SHIFT)
            .ok_or(MsiError::ReservedDeliveryMode { data })?;
        // address & mask fits 8 bits.
        let id = ((address >> ADDRESS_DESTINATION_SHIFT) & ADDRESS_DESTINATION_MASK) as u32;
        let destination =
            match DestinationMode::from_logical_bit(address & ADDRESS_DESTINATION_LOGICAL != 0) {
                DestinationMode::Physical => Destination::Physical(id),
                DestinationMode::Logical => Destination::Logical(id),
            };
        Ok(MsiFormat::Compatibility(Interrupt {
            vector: (data & DATA_VECTOR_MASK) as u8,
            delivery_mode,
            trigger_mode: TriggerMode::from_level_bit(data & DATA_TRIGGER_LEVEL != 0),
            destination,
        }))
    }

    /// VT-d 5.1.2.2: handle[14:0] = address[19:5], handle[15] = address[2],
    /// SHV = address[3], subhandle = data[15:0]; data bits 31:16 are reserved.
    fn decode_remappable(address: u64, data: u32) -> Result<MsiFormat, MsiError> {
        if address & REMAPPABLE_RESERVED != 0 {
            return Err(MsiError::ReservedAddressBits { address });
        }
        let low = (address >> ADDRESS_HANDLE_LOW_SHIFT) & ADDRESS_HANDLE_LOW_MASK;
        let bit15 = if address & ADDRESS_HANDLE_BIT15 != 0 {
            0x8000
        } else {
            0
        };
        let subhandle_valid = address & ADDRESS_SUBHANDLE_VALID != 0;
        if data & !DATA_SUBHANDLE_MASK != 0 {
            return Err(MsiError::ReservedDataBits { data });
        }
        Ok(MsiFormat::Remappable(RemappableMsi {
            // low is masked to 15 bits.
            handle: low as u16 | bit15,
            subhandle: subhandle_valid.then_some((data & DATA_SUBHANDLE_MASK) as u16),
        }))
    }
}
