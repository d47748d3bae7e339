//! The guest's NAPI (Linux 3.6 net/core/dev.c, `net_rx_action`): the
//! receive interrupt masks the queue and schedules a poll; a poll takes at
//! most the device's weight of packets. A poll that takes fewer than its
//! weight drained the ring: the driver completes NAPI and unmasks the
//! interrupt (ixgbevf's `ixgbevf_poll`, be2net's `be_poll_rx`,
//! virtio-net's `virtnet_poll`).
//!
//! A poll that used its whole weight returns it without completing NAPI
//! (ixgbevf: "If all work not completed, return budget and keep polling";
//! be2net: "continue with interrupts disabled"), and `net_rx_action` moves
//! it to the tail of the poll list (`work == weight`) and polls it again:
//! the interrupt stays masked, and no interrupt comes for what it left.
//! A lower weight only cuts the queue's polls into smaller ones.
//! `net_rx_action` also stops after `netdev_budget` (300) packets or two
//! jiffies and raises its softirq again, which `__do_softirq` restarts up
//! to ten times before handing it to ksoftirqd: not modelled, the polls
//! go on until the ring is empty (ASSUMED: a closed loop's ring never
//! holds the 3,000 frames of ten restarts; a flood can starve the guest's
//! task, which ksoftirqd's fair share would not).

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
