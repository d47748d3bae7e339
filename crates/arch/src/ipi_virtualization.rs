//! Which guest ICR writes the processor sends itself, without a VM exit:
//! Intel's IPI virtualization (IPIv) and AMD's AVIC. Both post the vector
//! into the target vCPU's interrupt state and signal its core; they differ
//! in which writes they take and in what happens when the target is not
//! running.
//!
//! - IPIv (Intel SDM Vol. 3C, "IPI Virtualization", with the tertiary
//!   processor-based control "IPI virtualization" and the PID-pointer
//!   table): a virtualized x2APIC ICR write with delivery mode fixed, no
//!   shorthand and physical destination mode indexes the PID-pointer table
//!   with the destination and posts the vector to that posted-interrupt
//!   descriptor (ON/SN and NV/NDST as a VT-d post, VT-d 5.2.3); any other
//!   write is an APIC-write VM exit for the hypervisor to emulate.
//! - AVIC (AMD APM Vol. 2, 15.29 "Advanced Virtual Interrupt Controller";
//!   15.29.2.x for the physical and logical APIC ID tables and the IPI
//!   flow; x2AVIC extends it to x2APIC MSR accesses): fixed, edge-triggered
//!   IPIs are accelerated in physical or logical destination mode and with
//!   the self and broadcast shorthands. The processor sets the vector in
//!   each target's backing page IRR, then rings the doorbell of each target
//!   whose physical APIC ID table entry has IsRunning set; if any target is
//!   not running, the write ends in #VMEXIT(AVIC_INCOMPLETE_IPI) so the
//!   hypervisor can wake it. Other message types are
//!   AVIC_INCOMPLETE_IPI with the invalid-interrupt-type cause.

use crate::interrupt::{DeliveryMode, DestinationShorthand};
use crate::lapic::{
    ICR_DELIVERY_MODE_SHIFT, ICR_LOGICAL_DESTINATION, ICR_SHORTHAND_SHIFT, ICR_TRIGGER_LEVEL,
};

/// The fields of an ICR write that decide whether hardware sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct IcrWrite {
    fixed: bool,
    level_triggered: bool,
    logical: bool,
    shorthand: DestinationShorthand,
}

impl IcrWrite {
    /// ICR bits (SDM 10.6.1): delivery mode 10:8, destination mode 11,
    /// trigger mode 15, shorthand 19:18.
    fn decode(icr: u64) -> IcrWrite {
        let field = |shift: u64, mask: u64| u32::try_from((icr >> shift) & mask).unwrap_or(0);
        IcrWrite {
            fixed: DeliveryMode::from_bits(field(ICR_DELIVERY_MODE_SHIFT, 0b111))
                == Some(DeliveryMode::Fixed),
            level_triggered: icr & ICR_TRIGGER_LEVEL != 0,
            logical: icr & ICR_LOGICAL_DESTINATION != 0,
            shorthand: DestinationShorthand::from_bits(field(ICR_SHORTHAND_SHIFT, 0b11)),
        }
    }
}

/// IPIv: whether the processor virtualizes this x2APIC ICR write (fixed,
/// no shorthand, physical destination); otherwise an APIC-write VM exit.
pub fn ipiv_virtualizes(icr: u64) -> bool {
    let write = IcrWrite::decode(icr);
    write.fixed && write.shorthand == DestinationShorthand::NoShorthand && !write.logical
}

/// What an AVIC guest's ICR write ends in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AvicIpi {
    /// Every target's IRR set and every target running: doorbells, no exit.
    Delivered,
    /// Every target's IRR set, but a target is not running:
    /// #VMEXIT(AVIC_INCOMPLETE_IPI), cause "target not running".
    TargetNotRunning,
    /// Not a message type AVIC sends: #VMEXIT(AVIC_INCOMPLETE_IPI), cause
    /// "invalid interrupt type"; nothing was sent.
    InvalidType,
}

impl AvicIpi {
    /// The outcome of writing `icr` when `every_target_running` says
    /// whether each target's physical APIC ID table entry has IsRunning.
    pub fn of(icr: u64, every_target_running: bool) -> AvicIpi {
        let write = IcrWrite::decode(icr);
        match (write.fixed && !write.level_triggered, every_target_running) {
            (false, _) => AvicIpi::InvalidType,
            (true, true) => AvicIpi::Delivered,
            (true, false) => AvicIpi::TargetNotRunning,
        }
    }

    /// Whether the processor set the targets' IRR bits.
    pub fn sent(self) -> bool {
        self != AvicIpi::InvalidType
    }

    /// Whether the write exits.
    pub fn exits(self) -> bool {
        self != AvicIpi::Delivered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interrupt::Destination;
    use crate::lapic::x2apic_icr;

    const VECTOR: u8 = 0xFB;

    fn icr(mode: DeliveryMode, destination: Destination) -> u64 {
        x2apic_icr(VECTOR, mode, destination)
    }

    #[test]
    fn ipiv_takes_fixed_physical_unicasts_only() {
        assert!(ipiv_virtualizes(icr(
            DeliveryMode::Fixed,
            Destination::Physical(3)
        )));
        assert!(!ipiv_virtualizes(icr(
            DeliveryMode::Fixed,
            Destination::Logical(0x1)
        )));
        assert!(!ipiv_virtualizes(icr(
            DeliveryMode::Fixed,
            Destination::AllExcludingSelf { sender: 0 }
        )));
        assert!(!ipiv_virtualizes(icr(
            DeliveryMode::Nmi,
            Destination::Physical(3)
        )));
    }

    #[test]
    fn avic_sends_fixed_ipis_in_any_destination_form_and_exits_for_a_sleeper() {
        for destination in [
            Destination::Physical(3),
            Destination::Logical(0x1),
            Destination::AllExcludingSelf { sender: 0 },
        ] {
            let write = icr(DeliveryMode::Fixed, destination);
            assert_eq!(AvicIpi::of(write, true), AvicIpi::Delivered);
            let incomplete = AvicIpi::of(write, false);
            assert_eq!(incomplete, AvicIpi::TargetNotRunning);
            assert!(incomplete.sent() && incomplete.exits());
        }
        let init = AvicIpi::of(icr(DeliveryMode::Init, Destination::Physical(3)), true);
        assert_eq!(init, AvicIpi::InvalidType);
        assert!(!init.sent() && init.exits());
    }
}
