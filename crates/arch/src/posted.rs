//! Posted-interrupt descriptor (Intel SDM Vol. 3, 29.6; VT-d spec 9.11-9.12).
//!
//! A sender (another core's hypervisor code, or the IOMMU for a posted-format
//! IRTE) records a vector in the 256-bit PIR and, unless a notification is
//! already outstanding (ON) or notifications are suppressed (SN), sets ON and
//! sends the notification vector NV to the physical APIC NDST. The core
//! running the vCPU then merges PIR into the virtual IRR without a VM exit.

use serde::{Deserialize, Serialize};

use crate::interrupt::{DeliveryMode, Destination, Interrupt, TriggerMode};
use crate::vectors::VectorSet;

/// One posted-interrupt descriptor (SDM 29.6, VT-d 9.12 figure 9-32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostedInterruptDescriptor {
    /// Posted-interrupt requests, one bit per vector.
    pub pir: VectorSet,
    /// Outstanding notification: a notification has been sent and not yet
    /// processed.
    pub outstanding: bool,
    /// Suppress notification: set by the hypervisor while the vCPU is not
    /// running so that posting only records the vector (VT-d 9.12).
    pub suppress: bool,
    /// Notification vector.
    pub notification_vector: u8,
    /// Notification destination: the physical APIC ID of the core running
    /// the vCPU.
    pub notification_destination: u32,
}

impl PostedInterruptDescriptor {
    pub fn new(notification_vector: u8, notification_destination: u32) -> Self {
        PostedInterruptDescriptor {
            notification_vector,
            notification_destination,
            ..Self::default()
        }
    }

    /// Posts `vector` (VT-d 5.2.3 steps for a posted IRTE; SDM 29.6 for a
    /// software sender): sets PIR[vector]; if ON and SN are both clear, sets
    /// ON and returns the notification interrupt to put on the bus.
    pub fn post(&mut self, vector: u8) -> Option<Interrupt> {
        self.pir.set(vector);
        if self.outstanding || self.suppress {
            return None;
        }
        self.outstanding = true;
        Some(self.notification())
    }

    /// The notification interrupt: fixed, edge, physical destination NDST.
    pub fn notification(&self) -> Interrupt {
        Interrupt {
            vector: self.notification_vector,
            delivery_mode: DeliveryMode::Fixed,
            trigger_mode: TriggerMode::Edge,
            destination: Destination::Physical(self.notification_destination),
        }
    }

    /// Posted-interrupt processing by the CPU (SDM 29.6 steps 3-5): clears
    /// ON and hands back PIR, cleared, for merging into the virtual IRR.
    /// The hypervisor does the same on VM entry for requests posted while
    /// the vCPU was not running.
    pub fn take_requests(&mut self) -> VectorSet {
        self.outstanding = false;
        self.pir.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_post_notifies_ndst_with_nv() {
        let mut pid = PostedInterruptDescriptor::new(0xF2, 3);
        let notification = pid.post(0x41).expect("ON was clear");
        assert_eq!(notification.vector, 0xF2);
        assert_eq!(notification.destination, Destination::Physical(3));
        assert!(pid.outstanding);
        assert!(pid.pir.contains(0x41));
    }

    #[test]
    fn post_while_outstanding_only_records() {
        let mut pid = PostedInterruptDescriptor::new(0xF2, 3);
        pid.post(0x41);
        assert_eq!(pid.post(0x51), None);
        assert!(pid.pir.contains(0x51));
    }

    #[test]
    fn suppressed_notification_still_records_request() {
        let mut pid = PostedInterruptDescriptor::new(0xF2, 3);
        pid.suppress = true;
        assert_eq!(pid.post(0x41), None);
        assert!(!pid.outstanding);
        assert!(pid.pir.contains(0x41));
    }

    #[test]
    fn processing_clears_on_and_pir() {
        let mut pid = PostedInterruptDescriptor::new(0xF2, 3);
        pid.post(0x41);
        pid.post(0x61);
        let requests = pid.take_requests();
        assert_eq!(requests.iter().collect::<Vec<_>>(), vec![0x41, 0x61]);
        assert!(!pid.outstanding);
        assert!(pid.pir.is_empty());
        assert!(pid.post(0x41).is_some(), "a new post notifies again");
    }
}
