//! The guest's NAPI (Linux net/core/dev.c, `napi_poll`): the receive
//! interrupt masks the queue and schedules a poll; a poll takes at most the
//! device's weight of packets. A poll that takes fewer than its weight
//! drained the ring: the driver completes NAPI and unmasks the interrupt.
//!
//! ASSUMED, as the DID paper reads it (a lower weight, more interrupts): a
//! poll that used its whole weight also completes and unmasks, and the
//! driver re-arms the queue with a software-triggered interrupt for the
//! packets it left (an EICS write, as ixgbe's `ixgbe_irq_rearm_queues`
//! does), which the NIC's throttling does not delay; Linux's own re-poll
//! from the softirq without a new interrupt is not modelled for the VF.
//! virtio-net's poll, whose driver source is the testbed's, does re-poll
//! (the guest's `UnmaskRx` polls again).

/// One queue's NAPI context.
#[derive(Clone, Copy, Debug)]
pub(super) struct Napi {
    pub(super) weight: u32,
    taken: u32,
}

impl Napi {
    pub(super) fn with_weight(weight: u32) -> Napi {
        Napi { weight, taken: 0 }
    }

    /// The interrupt handler schedules a new poll.
    pub(super) fn start_poll(&mut self) {
        self.taken = 0;
    }

    /// Whether the poll may take another packet from a ring of `ring`.
    pub(super) fn may_take(&self, ring: u32) -> bool {
        ring > 0 && self.taken < self.weight
    }

    pub(super) fn took(&mut self) {
        self.taken += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_stops_at_its_weight_or_an_empty_ring() {
        let mut napi = Napi::with_weight(2);
        napi.start_poll();
        assert!(napi.may_take(5));
        napi.took();
        napi.took();
        assert!(!napi.may_take(3));
        napi.start_poll();
        assert!(!napi.may_take(0));
        assert!(napi.may_take(1));
    }
}
