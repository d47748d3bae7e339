//! IOMMU interrupt remapping (VT-d spec ch. 5 and 9.10-9.11).
//!
//! With remapping enabled a device's MSI does not name its destination: a
//! remappable-format MSI carries an index into the interrupt-remapping table
//! (IRT) whose entry (IRTE) holds the real destination, vector and delivery
//! mode, and a source-id check. A posted-format IRTE names a posted-interrupt
//! descriptor instead. Blocked requests are counted, not delivered.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::interrupt::{DeliveryMode, Destination, Interrupt, TriggerMode};
use crate::msi::{MsiFormat, MsiMessage};

/// How an IRTE validates the requester (VT-d 9.10, fields SVT and SQ).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SourceValidation {
    /// SVT = 00b: no check.
    None,
    /// SVT = 01b: the requester id must equal `source_id` in the bits the
    /// source-id qualifier keeps. `ignore_function_bits` is SQ: 0 compares
    /// all 16 bits, 1/2/3 ignore the low 1/2/3 function bits (VT-d 9.10
    /// table 9-30 lists them as bit 2, bits 2:1, bits 2:0).
    RequesterId {
        source_id: u16,
        ignore_function_bits: u8,
    },
}

impl SourceValidation {
    /// Whether `requester` passes the check (VT-d 9.10, SID/SQ/SVT).
    pub fn accepts(self, requester: u16) -> bool {
        match self {
            SourceValidation::None => true,
            SourceValidation::RequesterId {
                source_id,
                ignore_function_bits,
            } => {
                let ignored: u16 = match ignore_function_bits.min(3) {
                    0 => 0,
                    1 => 0b100,
                    2 => 0b110,
                    _ => 0b111,
                };
                requester & !ignored == source_id & !ignored
            }
        }
    }
}

/// One interrupt-remapping table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Irte {
    /// Present bit clear (VT-d 9.10 field P): requests through it fault.
    NotPresent,
    /// Remapped format (VT-d 9.10): the entry supplies the interrupt.
    Remapped {
        destination_apic_id: u32,
        vector: u8,
        delivery_mode: DeliveryMode,
        trigger_mode: TriggerMode,
        source: SourceValidation,
    },
    /// Posted format (VT-d 9.11, IM = 1): the request is posted into the
    /// descriptor `descriptor` (an index the caller resolves; the hardware
    /// holds its address) as `vector`.
    Posted {
        descriptor: u32,
        vector: u8,
        source: SourceValidation,
    },
}

/// What a request turns into after remapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Remapped {
    /// Deliver to the LAPICs.
    Interrupt(Interrupt),
    /// Post `vector` to descriptor `descriptor` (see
    /// [`crate::posted::PostedInterruptDescriptor::post`]).
    Post { descriptor: u32, vector: u8 },
}

/// Why the IOMMU blocked a request (VT-d 5.1.4.1, table 5-2 fault reasons).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RemapFault {
    #[error("MSI is not an interrupt request: {0}")]
    Malformed(#[from] crate::msi::MsiError),
    #[error("compatibility-format MSI blocked (fault 0x25)")]
    CompatibilityBlocked,
    #[error("interrupt index {index} beyond the table (fault 0x21)")]
    IndexOutOfRange { index: u32 },
    #[error("IRTE {index} not present (fault 0x22)")]
    NotPresent { index: u32 },
    #[error("requester {requester:#06x} fails IRTE {index}'s source-id check (fault 0x26)")]
    SourceIdMismatch { index: u32, requester: u16 },
}

/// The table plus the global remapping controls and a count of blocked
/// requests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterruptRemappingTable {
    entries: Vec<Irte>,
    /// GCMD.CFI (VT-d 10.4.4): let compatibility-format MSIs bypass
    /// remapping. Off by default, as in x2APIC mode.
    pub allow_compatibility_format: bool,
    blocked: u64,
}

impl InterruptRemappingTable {
    /// A table of `size` not-present entries (VT-d 10.4.29 IRTA.S bounds
    /// the size; 65536 entries at most).
    pub fn new(size: u32) -> Self {
        InterruptRemappingTable {
            entries: vec![Irte::NotPresent; size.min(1 << 16) as usize],
            allow_compatibility_format: false,
            blocked: 0,
        }
    }

    pub fn len(&self) -> u32 {
        u32::try_from(self.entries.len()).expect("at most 1 << 16 entries (see `new`)")
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Requests blocked so far.
    pub fn blocked(&self) -> u64 {
        self.blocked
    }

    pub fn entry(&self, index: u32) -> Option<&Irte> {
        self.entries.get(index as usize)
    }

    /// Software writes an entry (followed on hardware by an interrupt-entry
    /// cache invalidation, VT-d 6.5.2.7, which this model needs no more).
    pub fn set_entry(&mut self, index: u32, entry: Irte) -> Result<(), RemapFault> {
        let slot = self
            .entries
            .get_mut(index as usize)
            .ok_or(RemapFault::IndexOutOfRange { index })?;
        *slot = entry;
        Ok(())
    }

    /// Remaps one MSI from `requester` (VT-d 5.1.4). Any fault is counted
    /// as a blocked request.
    pub fn remap(&mut self, msi: &MsiMessage, requester: u16) -> Result<Remapped, RemapFault> {
        let result = self.translate(msi, requester);
        if result.is_err() {
            self.blocked += 1;
        }
        result
    }

    fn translate(&self, msi: &MsiMessage, requester: u16) -> Result<Remapped, RemapFault> {
        let index = match msi.decode()? {
            // VT-d 5.1.2.1: compatibility format bypasses remapping only
            // when software allowed it.
            MsiFormat::Compatibility(interrupt) if self.allow_compatibility_format => {
                return Ok(Remapped::Interrupt(interrupt));
            }
            MsiFormat::Compatibility(_) => return Err(RemapFault::CompatibilityBlocked),
            MsiFormat::Remappable(remappable) => remappable.interrupt_index(),
        };
        let entry = self
            .entries
            .get(index as usize)
            .ok_or(RemapFault::IndexOutOfRange { index })?;
        let source = match *entry {
            Irte::NotPresent => return Err(RemapFault::NotPresent { index }),
            Irte::Remapped { source, .. } | Irte::Posted { source, .. } => source,
        };
        if !source.accepts(requester) {
            return Err(RemapFault::SourceIdMismatch { index, requester });
        }
        Ok(match *entry {
            Irte::Remapped {
                destination_apic_id,
                vector,
                delivery_mode,
                trigger_mode,
                ..
            } => Remapped::Interrupt(Interrupt {
                vector,
                delivery_mode,
                trigger_mode,
                destination: Destination::Physical(destination_apic_id),
            }),
            Irte::Posted {
                descriptor, vector, ..
            } => Remapped::Post { descriptor, vector },
            Irte::NotPresent => return Err(RemapFault::NotPresent { index }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msi::RemappableMsi;

    const VF_SID: u16 = 0x0310;

    fn msi(handle: u16) -> MsiMessage {
        MsiMessage::compose_remappable(&RemappableMsi {
            handle,
            subhandle: None,
        })
    }

    fn remapped(vector: u8, delivery_mode: DeliveryMode) -> Irte {
        Irte::Remapped {
            destination_apic_id: 2,
            vector,
            delivery_mode,
            trigger_mode: TriggerMode::Edge,
            source: SourceValidation::RequesterId {
                source_id: VF_SID,
                ignore_function_bits: 0,
            },
        }
    }

    #[test]
    fn remapped_entry_supplies_destination_vector_and_mode() {
        let mut irt = InterruptRemappingTable::new(8);
        irt.set_entry(5, remapped(0x41, DeliveryMode::Nmi)).unwrap();
        let Remapped::Interrupt(interrupt) = irt.remap(&msi(5), VF_SID).unwrap() else {
            panic!("remapped entry must yield an interrupt");
        };
        assert_eq!(interrupt.vector, 0x41);
        assert_eq!(interrupt.delivery_mode, DeliveryMode::Nmi);
        assert_eq!(interrupt.destination, Destination::Physical(2));
        assert_eq!(irt.blocked(), 0);
    }

    #[test]
    fn posted_entry_names_descriptor() {
        let mut irt = InterruptRemappingTable::new(8);
        let entry = Irte::Posted {
            descriptor: 7,
            vector: 0x51,
            source: SourceValidation::None,
        };
        irt.set_entry(1, entry).unwrap();
        assert_eq!(
            irt.remap(&msi(1), 0xFFFF),
            Ok(Remapped::Post {
                descriptor: 7,
                vector: 0x51
            })
        );
    }

    #[test]
    fn source_id_mismatch_is_blocked_and_counted() {
        let mut irt = InterruptRemappingTable::new(8);
        irt.set_entry(0, remapped(0x41, DeliveryMode::Fixed))
            .unwrap();
        assert_eq!(
            irt.remap(&msi(0), VF_SID + 1),
            Err(RemapFault::SourceIdMismatch {
                index: 0,
                requester: VF_SID + 1
            })
        );
        assert_eq!(irt.blocked(), 1);
    }

    #[test]
    fn source_qualifier_ignores_function_bits() {
        let check = SourceValidation::RequesterId {
            source_id: 0x0310,
            ignore_function_bits: 3,
        };
        assert!(check.accepts(0x0317));
        assert!(!check.accepts(0x0318));
    }

    #[test]
    fn not_present_and_out_of_range_entries_block() {
        let mut irt = InterruptRemappingTable::new(4);
        assert_eq!(
            irt.remap(&msi(2), VF_SID),
            Err(RemapFault::NotPresent { index: 2 })
        );
        assert_eq!(
            irt.remap(&msi(9), VF_SID),
            Err(RemapFault::IndexOutOfRange { index: 9 })
        );
        assert_eq!(irt.blocked(), 2);
    }

    #[test]
    fn compatibility_format_blocked_unless_allowed() {
        let interrupt = Interrupt {
            vector: 0x30,
            delivery_mode: DeliveryMode::Fixed,
            trigger_mode: TriggerMode::Edge,
            destination: Destination::Physical(1),
        };
        let message = MsiMessage::compose(&interrupt).unwrap();
        let mut irt = InterruptRemappingTable::new(4);
        assert_eq!(
            irt.remap(&message, VF_SID),
            Err(RemapFault::CompatibilityBlocked)
        );
        irt.allow_compatibility_format = true;
        assert_eq!(
            irt.remap(&message, VF_SID),
            Ok(Remapped::Interrupt(interrupt))
        );
        assert_eq!(irt.blocked(), 1);
    }
}
