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
//! (`machine::virtio`).

use super::*;

/// One queue's NAPI context.
#[derive(Clone, Copy, Debug)]
pub(super) struct Napi {
    pub(super) weight: u32,
    taken: u32,
}

impl Default for Napi {
    /// No weight limit until the machine sets the profile's.
    fn default() -> Napi {
        Napi {
            weight: u32::MAX,
            taken: 0,
        }
    }
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

impl Machine {
    /// The VF queue's poll is over: unmask the queue, and signal at once
    /// for what the poll left behind. (virtio-net's poll never completes
    /// with packets left: `PollRx` goes on, see `machine::virtio`.)
    pub(super) fn napi_complete(&mut self, pair: usize, fx: &mut Effects) {
        let rx = &mut self.pairs[pair].vf;
        rx.unmask();
        if rx.ring > 0 {
            self.fire_vf_now(pair, fx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{listed, running, single};
    use super::*;
    use crate::design::DesignKind;

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

    #[test]
    fn completing_with_packets_left_interrupts_again() {
        let mut m = single(DesignKind::Did);
        running(&mut m, 0);
        let rx = &mut m.pairs[0].vf;
        rx.masked = true;
        rx.ring = 3;
        let fx = listed(&mut m, |m, fx| m.napi_complete(0, fx));
        assert!(!m.pairs[0].vf.masked);
        let timeout = Event::CoalesceTimeout { pair: 0 };
        let vector = GUEST_VF_VECTOR;
        assert_eq!(
            fx,
            [
                Effect::Cancel(timeout),
                Effect::DeliverPhysical { core: 1, vector }
            ],
            "the leftovers are signalled at once"
        );
        // An empty ring: unmasked, nothing to signal.
        m.pairs[0].vf.ring = 0;
        m.pairs[0].vf.masked = true;
        let fx = listed(&mut m, |m, fx| m.napi_complete(0, fx));
        assert!(fx.is_empty());
    }
}
