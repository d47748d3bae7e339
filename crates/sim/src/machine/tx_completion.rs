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

use super::devices::Coalescing;
use super::itr::{ItrMode, Throttle};
use super::network::wire_ns;
use super::*;
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
pub(super) enum VfVector {
    Rx,
    Tx,
}

impl VfVector {
    /// The guest vector the guest's driver gave the queue's MSI-X entry.
    pub(super) fn guest_vector(self) -> u8 {
        match self {
            VfVector::Rx => GUEST_VF_VECTOR,
            VfVector::Tx => GUEST_VF_TX_VECTOR,
        }
    }

    /// The queue's IRTE handle: the receive queues' come first, one per
    /// queue pair, then the transmit queues'.
    pub(super) fn irte_handle(self, pair: usize, queue_pairs: usize) -> u32 {
        match self {
            VfVector::Rx => index_u32(pair),
            VfVector::Tx => index_u32(queue_pairs + pair),
        }
    }
}

/// A VF's transmit event queue (be2net's `tx_eq`).
#[derive(Clone, Copy, Debug)]
pub(super) struct TxEq {
    /// The queue's MSI-X vector's host vector on its owner's home core.
    pub(super) host_vector: u8,
    /// Completions posted since the last interrupt or reap.
    unsignalled: u32,
    /// The queue interrupts only while armed: from its interrupt until
    /// the driver's poll re-arms it, it is not.
    armed: bool,
    throttle: Throttle,
}

impl TxEq {
    /// The transmit event queue of `nic`'s driver, if it has one, its
    /// host vector allocated by `host_vector`.
    pub(super) fn of(nic: AdaptiveCoalescing, host_vector: impl FnOnce() -> u8) -> Option<TxEq> {
        match nic {
            AdaptiveCoalescing::Be2netAic => Some(TxEq {
                host_vector: host_vector(),
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

impl Machine {
    /// The guest's driver handed the VF `bytes` to send in one buffer
    /// (its frames are cut by the NIC): its completion is posted when the
    /// last frame has left, the link being free from `start`.
    pub(super) fn vf_sent(&self, pair: usize, start: u64, bytes: u64, fx: &mut Effects) {
        if self.pairs[pair].tx_eq.is_none() {
            return;
        }
        let network = &self.profile.network;
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
    pub(super) fn tx_completed(&mut self, pair: usize, fx: &mut Effects) {
        if let Some(eq) = self.pairs[pair].tx_eq.as_mut() {
            eq.unsignalled += 1;
            self.maybe_fire_tx(pair, fx);
        }
    }

    /// The transmit event queue's decision, carried out.
    pub(super) fn maybe_fire_tx(&mut self, pair: usize, fx: &mut Effects) {
        let timeout = Event::TxCoalesceTimeout {
            pair: index_u32(pair),
        };
        let armed = fx.is_pending(timeout);
        let now = self.now;
        let Some(eq) = self.pairs[pair].tx_eq.as_mut() else {
            return;
        };
        match eq.decide(now, armed) {
            Coalescing::Wait => {}
            Coalescing::ArmTimeout(at) => fx.schedule(at, timeout),
            Coalescing::Fire => {
                eq.fired(now);
                fx.cancel(timeout);
                self.fire_vf_msi(pair, VfVector::Tx, fx);
            }
        }
    }

    /// The guest's poll reaped the completions and re-armed the queue.
    pub(super) fn tx_reaped(&mut self, pair: usize, fx: &mut Effects) {
        if let Some(eq) = self.pairs[pair].tx_eq.as_mut() {
            eq.reaped();
            self.maybe_fire_tx(pair, fx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{listed, running, scheduled, shaped_with};
    use super::*;
    use crate::design::DesignKind;
    use crate::scenario::{NicCoalescing, RunGroup};

    /// A netperf machine whose NIC is be2net's, vCPU 0 running.
    fn be2net(design: DesignKind) -> Machine {
        let spec = RunSpec {
            design,
            workload: WorkloadKind::Netperf,
            rate_pps: None,
            group: RunGroup::new(WorkloadKind::Netperf, vec![design]),
            nic: NicCoalescing::FITTED,
            duration_ns: 10_000_000,
            offered_per_s: None,
        };
        let mut m = shaped_with(spec, |profile| {
            profile.network.adaptive_coalescing = AdaptiveCoalescing::Be2netAic;
        });
        running(&mut m, 0);
        m
    }

    fn be2net_queue() -> TxEq {
        TxEq::of(AdaptiveCoalescing::Be2netAic, || 0x61).expect("be2net has one")
    }

    #[test]
    fn only_be2net_has_a_transmit_event_queue() {
        assert!(TxEq::of(AdaptiveCoalescing::IxgbeItr, || 0x61).is_none());
        assert_eq!(be2net_queue().host_vector, 0x61);
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

    #[test]
    fn a_completion_raises_the_tx_vector_through_the_designs_irte() {
        for design in [DesignKind::Bare, DesignKind::Eli, DesignKind::Vanilla] {
            let mut m = be2net(design);
            let host_vector = m.pairs[0].tx_eq.map(|eq| eq.host_vector);
            assert_ne!(host_vector, Some(m.pairs[0].vf_host_vector));
            let vector = match design {
                DesignKind::Vanilla => host_vector.expect("a TX event queue"),
                _ => GUEST_VF_TX_VECTOR,
            };
            m.now = 5_000;
            let fx = listed(&mut m, |m, fx| m.tx_completed(0, fx));
            let timeout = Event::TxCoalesceTimeout { pair: 0 };
            assert_eq!(
                fx,
                [
                    Effect::Cancel(timeout),
                    Effect::DeliverPhysical { core: 1, vector }
                ],
                "{design}"
            );
            // A second completion waits for the driver's re-arm.
            assert!(listed(&mut m, |m, fx| m.tx_completed(0, fx)).is_empty());
            m.now = 6_000;
            assert!(listed(&mut m, |m, fx| m.tx_reaped(0, fx)).is_empty());
            // The next one waits out the 96 us delay.
            let fx = listed(&mut m, |m, fx| m.tx_completed(0, fx));
            assert_eq!(fx, [scheduled(101_000, timeout)], "{design}");
            assert_eq!(m.checker.raised, 1, "{design}");
        }
    }

    #[test]
    fn be2nets_receive_queue_interrupts_once_until_napi_completes() {
        let mut m = be2net(DesignKind::Bare);
        let deliveries = |fx: &[Effect]| {
            fx.iter()
                .filter(|effect| matches!(effect, Effect::DeliverPhysical { .. }))
                .count()
        };
        let fx = listed(&mut m, |m, fx| m.rx_packet(0, Ring::Vf, fx));
        assert_eq!(deliveries(&fx), 1);
        // A frame before the handler has run adds a completion only.
        let fx = listed(&mut m, |m, fx| m.rx_packet(0, Ring::Vf, fx));
        assert_eq!(deliveries(&fx), 0);
        // NAPI took both and completed: the next frame interrupts.
        m.pairs[0].vf.ring = 0;
        listed(&mut m, |m, fx| m.napi_complete(0, fx));
        let fx = listed(&mut m, |m, fx| m.rx_packet(0, Ring::Vf, fx));
        assert_eq!(deliveries(&fx), 1);
        assert!(!rx_disarms_on_interrupt(AdaptiveCoalescing::IxgbeItr));
    }

    #[test]
    fn a_sent_buffer_completes_when_its_last_frame_has_left() {
        let mut m = be2net(DesignKind::Bare);
        let mss = m.net.mss();
        let fx = listed(&mut m, |m, fx| m.vf_sent(0, 1_000, 2 * mss, fx));
        let network = &m.profile.network;
        let on_wire = wire_ns(2 * mss, 2, network.frame_overhead_bytes, network.link_mbps);
        let completion = Event::TxCompletion { pair: 0 };
        assert_eq!(fx, [scheduled(1_000 + on_wire, completion)]);
        m.pairs[0].tx_eq = None;
        assert!(listed(&mut m, |m, fx| m.vf_sent(0, 0, mss, fx)).is_empty());
    }
}
