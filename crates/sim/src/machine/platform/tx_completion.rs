//! Transmit completions and the VF's transmit event queue. A NIC reports
//! each packet the guest sent, once it is on the wire, as a completion
//! the driver reaps to free the buffer. How that is signalled is the
//! driver's choice:
//! - be2net of the ELI paper's time (Linux 3.1's `drivers/net/benet/`):
//!   `be_tx_queues_create` gives the transmit completion queues an event
//!   queue of their own, `tx_eq`, created with a fixed delay
//!   (`cur_eqd = 96`, `enable_aic = false`: `be_rx_eqd_update` adapts the
//!   receive event queues only), and `be_msix_register` gives it its own
//!   MSI-X vector ("tx", handler `be_msix_tx_mcc`), whose NAPI poll
//!   `be_poll_tx_mcc` reaps every completion (`be_tx_compl_get`,
//!   `be_tx_compl_process`, no budget) and re-arms the queue
//!   (`be_eq_notify`). The event queue interrupts once per event batch
//!   and stays unarmed until that re-arm; its delay spaces its interrupts
//!   as the receive queue's does (`itr::Throttle`). Later be2net (Linux
//!   3.5 on: `be_evt_queues_create`, `be_poll`, `be_process_tx`) puts a
//!   queue pair's transmit and receive completions on one event queue.
//! - ixgbe/ixgbevf (the DID testbed): transmit cleanup runs in the queue
//!   pair's one vector's poll; no interrupt of its own is modelled.
//!
//! The completion interrupt takes the same path as the receive one
//! (`Machine::fire_vf_msi`: the IOMMU's IRTE, then the design's delivery),
//! on its own guest vector and IRTE.

use super::itr::{ItrMode, Throttle};
use super::nic::Coalescing;
use super::Platform;
use crate::machine::effects::Effects;
use crate::machine::ledger::Ledger;
use crate::machine::network::wire_ns;
use crate::machine::{index_u32, Event, GUEST_VF_TX_VECTOR, GUEST_VF_VECTOR};
use crate::profile::AdaptiveCoalescing;

/// be2net's transmit event-queue delay (`be_tx_queues_create`'s
/// `tx_eq.cur_eqd`, microseconds).
const BE2NET_TX_EQD_US: u64 = 96;

/// Whether the VF's receive queue stops interrupting from the moment it
/// interrupts until the driver's NAPI poll completes.
/// - be2net (Linux 3.1): a completion queue posts an event to its event
///   queue only while armed, and posting disarms it. The interrupt
///   handler (`event_handle`) re-arms the event queue only; `be_poll_rx`
///   re-arms the receive completion queue (`be_cq_notify(.., true, ..)`)
///   when its poll completes, and otherwise "continue[s] with
///   interrupts disabled". Frames that land in between add completions
///   and no interrupt.
/// - ixgbe/ixgbevf: the queue interrupts until the handler masks it
///   (the guest's `MaskRx` step).
pub(super) fn rx_disarms_on_interrupt(nic: AdaptiveCoalescing) -> bool {
    nic == AdaptiveCoalescing::Be2netAic
}

/// A VF's event queues, each with its MSI-X vector and IRTE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum VfVector {
    Rx,
    Tx,
}

impl VfVector {
    /// The guest vector the guest's driver gave the queue's MSI-X entry.
    pub(in crate::machine) fn guest_vector(self) -> u8 {
        match self {
            VfVector::Rx => GUEST_VF_VECTOR,
            VfVector::Tx => GUEST_VF_TX_VECTOR,
        }
    }

    /// The queue's IRTE handle: the receive queues' come first, one per
    /// queue pair, then the transmit queues'.
    pub(in crate::machine) fn irte_handle(self, pair: usize, queue_pairs: usize) -> u32 {
        match self {
            VfVector::Rx => index_u32(pair),
            VfVector::Tx => index_u32(queue_pairs + pair),
        }
    }
}

/// A VF's transmit event queue (be2net's `tx_eq`).
#[derive(Clone, Copy, Debug)]
pub(super) struct TxEq {
    /// Completions posted since the last interrupt or reap.
    unsignalled: u32,
    /// The queue interrupts only while armed: from its interrupt until
    /// the driver's poll re-arms it, it is not.
    armed: bool,
    throttle: Throttle,
}

impl TxEq {
    /// The transmit event queue of `nic`'s driver, if it has one.
    pub(super) fn of(nic: AdaptiveCoalescing) -> Option<TxEq> {
        match nic {
            AdaptiveCoalescing::Be2netAic => Some(TxEq {
                unsignalled: 0,
                armed: true,
                throttle: Throttle::new(ItrMode::Fixed {
                    interval_ns: BE2NET_TX_EQD_US * 1_000,
                }),
            }),
            AdaptiveCoalescing::IxgbeItr => None,
        }
    }

    /// Whether the queue may interrupt at `now`, or when.
    fn decide(&self, now: u64, timeout_armed: bool) -> Coalescing {
        if !self.armed || self.unsignalled == 0 {
            Coalescing::Wait
        } else {
            self.throttle.decide(now, timeout_armed)
        }
    }

    fn fired(&mut self, now: u64) {
        self.unsignalled = 0;
        self.armed = false;
        self.throttle.fired(now);
    }

    /// `be_poll_tx_mcc`: every completion reaped, the queue re-armed.
    fn reaped(&mut self) {
        self.unsignalled = 0;
        self.armed = true;
    }
}

impl Platform {
    /// The guest's driver handed the VF `bytes` to send in one buffer
    /// (its frames are cut by the NIC): its completion is posted when the
    /// last frame has left, the link being free from `start`.
    pub(in crate::machine) fn vf_sent(
        &self,
        pair: usize,
        start: u64,
        bytes: u64,
        fx: &mut Effects,
    ) {
        if self.pairs[pair].tx_eq.is_none() {
            return;
        }
        let network = &self.net.costs;
        let frames = bytes.div_ceil(self.net.mss()).max(1);
        let on_wire = wire_ns(
            bytes,
            frames,
            network.frame_overhead_bytes,
            network.link_mbps,
        );
        fx.schedule(
            start + on_wire,
            Event::TxCompletion {
                pair: index_u32(pair),
            },
        );
    }

    /// A completion lands in the transmit completion queue.
    pub(in crate::machine) fn tx_completed(
        &mut self,
        pair: usize,
        now: u64,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        if let Some(eq) = self.pairs[pair].tx_eq.as_mut() {
            eq.unsignalled += 1;
            self.maybe_fire_tx(pair, now, ledger, fx);
        }
    }

    /// The transmit event queue's decision, carried out.
    pub(in crate::machine) fn maybe_fire_tx(
        &mut self,
        pair: usize,
        now: u64,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let timeout = Event::TxCoalesceTimeout {
            pair: index_u32(pair),
        };
        let armed = fx.is_pending(timeout);
        let Some(eq) = self.pairs[pair].tx_eq.as_mut() else {
            return;
        };
        match eq.decide(now, armed) {
            Coalescing::Wait => {}
            Coalescing::ArmTimeout(at) => fx.schedule(at, timeout),
            Coalescing::Fire => {
                eq.fired(now);
                fx.cancel(timeout);
                self.fire_vf_msi(pair, VfVector::Tx, now, ledger, fx);
            }
        }
    }

    /// The guest's poll reaped the completions and re-armed the queue.
    pub(in crate::machine) fn tx_reaped(
        &mut self,
        pair: usize,
        now: u64,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        if let Some(eq) = self.pairs[pair].tx_eq.as_mut() {
            eq.reaped();
            self.maybe_fire_tx(pair, now, ledger, fx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be2net_queue() -> TxEq {
        TxEq::of(AdaptiveCoalescing::Be2netAic).expect("be2net has one")
    }

    #[test]
    fn only_be2net_has_a_transmit_event_queue() {
        assert!(TxEq::of(AdaptiveCoalescing::IxgbeItr).is_none());
        assert!(TxEq::of(AdaptiveCoalescing::Be2netAic).is_some());
    }

    #[test]
    fn the_queue_interrupts_once_per_arming_at_most_every_96_us() {
        let mut eq = be2net_queue();
        assert_eq!(eq.decide(0, false), Coalescing::Wait, "nothing posted");
        eq.unsignalled = 1;
        assert_eq!(eq.decide(1_000, false), Coalescing::Fire);
        eq.fired(1_000);
        eq.unsignalled = 3;
        assert_eq!(eq.decide(200_000, false), Coalescing::Wait, "unarmed");
        eq.reaped();
        assert_eq!(eq.decide(2_000, false), Coalescing::Wait, "all reaped");
        eq.unsignalled = 1;
        assert_eq!(eq.decide(2_000, false), Coalescing::ArmTimeout(97_000));
        assert_eq!(eq.decide(2_000, true), Coalescing::Wait);
        assert_eq!(eq.decide(97_000, true), Coalescing::Fire);
    }
}
