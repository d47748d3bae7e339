//! The SR-IOV NIC's queue pairs: per vCPU that owns one, a VF receive
//! ring with its interrupt coalescing (the 82599-style threshold and
//! timeout the UDP receivers were fitted on, or the driver's throttle,
//! `itr`), a virtio receive ring that vhost fills, and a transmit event
//! queue where the driver has one (`tx_completion`). The rings' descriptors
//! and interrupt masks are what the guest's driver reads and writes
//! (`Platform::ring_level`, `take`, `mask`, `unmask`).

use super::itr::{ItrMode, Throttle};
use super::tx_completion::{rx_disarms_on_interrupt, TxEq};
use super::{Platform, VfVector};
use crate::machine::effects::{Effect, Effects};
use crate::machine::ledger::Ledger;
use crate::machine::topology::Topology;
use crate::machine::workload::Traffic;
use crate::machine::{index_u32, Event, GUEST_VIRTIO_VECTOR};
use crate::profile::CostProfile;
use crate::rng::Rng;
use crate::scenario::NicCoalescing;

/// Descriptors per receive ring; packets beyond are dropped.
pub(in crate::machine) const RX_RING_SIZE: u32 = 1024;

/// A queue pair's receive ring: the VF's, or virtio's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(in crate::machine) enum Ring {
    #[default]
    Vf,
    Virtio,
}

/// One receive ring: its descriptors in use, and its interrupt state.
#[derive(Clone, Debug, Default)]
pub(super) struct RxRing {
    pub(super) ring: u32,
    pub(super) since_interrupt: u32,
    pub(super) first_unsignalled: Option<u64>,
    /// The driver has the ring's interrupt masked (NAPI polls it).
    pub(super) masked: bool,
    /// vhost signalled the guest and waits for the driver to re-enable
    /// callbacks (`used_event`).
    pub(super) signalled: bool,
    pub(super) dropped: u64,
}

/// A vCPU's receive queues: an SR-IOV VF queue with its own MSI-X vector
/// and IRTE (the pair's index is the IRTE handle), and a virtio queue.
pub(in crate::machine) struct QueuePair {
    pub(super) owner: usize,
    pub(super) vm: usize,
    pub(super) vf: RxRing,
    pub(super) virtio: RxRing,
    /// The VF's interrupt throttling (all but the UDP receive workloads).
    pub(super) throttle: Throttle,
    /// The VF's transmit event queue, if its driver gives it one.
    pub(super) tx_eq: Option<TxEq>,
}

impl QueuePair {
    pub(super) fn new(
        profile: &CostProfile,
        topology: &Topology,
        traffic: Traffic,
        itr: ItrMode,
        pair: usize,
    ) -> QueuePair {
        let owner = topology.owner(pair);
        QueuePair {
            owner,
            vm: topology.vm_of(owner),
            vf: RxRing {
                // A poll-mode driver never enables the VF's interrupt.
                masked: traffic.polled_vf,
                ..RxRing::default()
            },
            virtio: RxRing::default(),
            throttle: Throttle::new(itr),
            tx_eq: TxEq::of(profile.network.adaptive_coalescing),
        }
    }

    pub(super) fn rx(&mut self, kind: Ring) -> &mut RxRing {
        match kind {
            Ring::Vf => &mut self.vf,
            Ring::Virtio => &mut self.virtio,
        }
    }

    pub(super) fn ring(&self, kind: Ring) -> &RxRing {
        match kind {
            Ring::Vf => &self.vf,
            Ring::Virtio => &self.virtio,
        }
    }
}

/// What the VF's coalescing logic asks for after a packet or a timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum Coalescing {
    /// Nothing to signal, or the timeout already runs.
    Wait,
    /// Arm the timeout to fire at this time.
    ArmTimeout(u64),
    /// Write the MSI-X message (and drop a pending timeout).
    Fire,
}

impl RxRing {
    /// A packet lands in the ring at `now`: false if the ring is full and
    /// the packet is dropped.
    pub(super) fn receive(&mut self, now: u64) -> bool {
        if self.ring >= RX_RING_SIZE {
            self.dropped += 1;
            return false;
        }
        self.ring += 1;
        self.since_interrupt += 1;
        self.first_unsignalled.get_or_insert(now);
        true
    }

    /// The 82599-style coalescing logic: fire at the packet threshold, or
    /// when the timeout armed at the first unsignalled packet runs out,
    /// and only while the driver has the interrupt unmasked.
    pub(super) fn coalesce(
        &mut self,
        now: u64,
        nic: NicCoalescing,
        timed_out: bool,
        timeout_armed: bool,
    ) -> Coalescing {
        if self.masked || self.ring == 0 || self.since_interrupt == 0 {
            return Coalescing::Wait;
        }
        let threshold = self.since_interrupt >= nic.packets_per_interrupt;
        if !threshold && !timed_out {
            if timeout_armed {
                return Coalescing::Wait;
            }
            let at = self.first_unsignalled.unwrap_or(now) + nic.interrupt_timeout_ns;
            return Coalescing::ArmTimeout(at.max(now));
        }
        self.since_interrupt = 0;
        self.first_unsignalled = None;
        Coalescing::Fire
    }

    /// The driver re-enables the queue's interrupt after its poll.
    pub(super) fn unmask(&mut self) {
        self.masked = false;
        self.signalled = false;
        self.since_interrupt = 0;
        self.first_unsignalled = None;
    }
}

impl Platform {
    /// Frames waiting in `pair`'s `ring`.
    pub(in crate::machine) fn ring_level(&self, pair: usize, ring: Ring) -> u32 {
        self.pairs[pair].ring(ring).ring
    }

    /// The driver masks `pair`'s `ring`'s interrupt for its poll.
    pub(in crate::machine) fn mask(&mut self, pair: usize, ring: Ring) {
        self.pairs[pair].rx(ring).masked = true;
    }

    /// The driver re-enables `pair`'s `ring`'s interrupt after its poll.
    pub(in crate::machine) fn unmask(&mut self, pair: usize, ring: Ring) {
        self.pairs[pair].rx(ring).unmask();
    }

    /// A driver took `frames` frames from `pair`'s `ring`: what is left.
    pub(in crate::machine) fn take(&mut self, pair: usize, ring: Ring, frames: u32) -> u32 {
        let rx = self.pairs[pair].rx(ring);
        rx.ring = rx.ring.saturating_sub(frames);
        rx.ring
    }

    /// A frame from the workload's peer reaches `pair`'s `ring`: the VF's
    /// ring, or virtio's through vhost, and through the host's NIC first
    /// when the peer is on the wire.
    pub(in crate::machine) fn packet_arrival(
        &mut self,
        pair: usize,
        kind: Ring,
        now: u64,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        match kind {
            Ring::Vf => self.rx_packet(pair, Ring::Vf, now, ledger, fx),
            Ring::Virtio if self.traffic.pv_peer_on_wire => {
                self.host_nic_receive(self.pairs[pair].vm, now, fx)
            }
            Ring::Virtio => self.backend_start(pair, super::BackendJob::RxPacket, now, fx),
        }
    }

    /// A frame of the packet source arrives at `pair`'s `ring`; the gap to
    /// the next one is drawn from `rng` (a Poisson source) or fixed.
    pub(in crate::machine) fn source_arrival(
        &mut self,
        pair: usize,
        ring: Ring,
        now: u64,
        rng: &mut Rng,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let rate = self.traffic.arrivals_per_s;
        if rate > 0.0 {
            let gap = self.traffic.arrivals.gap_ns(rate, rng);
            let next = Event::PacketArrival {
                pair: index_u32(pair),
                ring,
            };
            fx.schedule(now + gap, next);
        }
        self.packet_arrival(pair, ring, now, ledger, fx);
    }

    /// `frames` frames land in `pair`'s VF ring at once; the VF's
    /// coalescing decides once.
    pub(in crate::machine) fn rx_burst(
        &mut self,
        pair: usize,
        frames: u32,
        now: u64,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let bytes = self.traffic.frame_bytes;
        for _ in 0..frames {
            if self.pairs[pair].vf.receive(now) {
                self.pairs[pair].throttle.received(now, bytes);
            }
        }
        self.maybe_fire_vf(pair, false, now, ledger, fx);
    }

    /// A packet lands in a receive ring.
    pub(super) fn rx_packet(
        &mut self,
        pair: usize,
        kind: Ring,
        now: u64,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        if !self.pairs[pair].rx(kind).receive(now) {
            return;
        }
        match kind {
            Ring::Vf => {
                let bytes = self.traffic.frame_bytes;
                self.pairs[pair].throttle.received(now, bytes);
                self.maybe_fire_vf(pair, false, now, ledger, fx);
            }
            Ring::Virtio => self.signal_virtio(pair, now, ledger, fx),
        }
    }

    /// vhost signals the guest for a virtio queue it has not yet signalled
    /// and the driver has unmasked.
    fn signal_virtio(&mut self, pair: usize, now: u64, ledger: &mut Ledger, fx: &mut Effects) {
        let queue_pair = &mut self.pairs[pair];
        let rx = &mut queue_pair.virtio;
        if !rx.masked && !rx.signalled {
            rx.signalled = true;
            ledger.raise(queue_pair.vm, GUEST_VIRTIO_VECTOR, now);
            fx.push(Effect::SignalVirtual {
                vcpu: queue_pair.owner,
                vector: GUEST_VIRTIO_VECTOR,
            });
        }
    }

    /// The VF queue's coalescing decision, carried out (`timed_out`: its
    /// timeout ran out).
    pub(in crate::machine) fn maybe_fire_vf(
        &mut self,
        pair: usize,
        timed_out: bool,
        now: u64,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let timeout = Event::CoalesceTimeout {
            pair: index_u32(pair),
        };
        let armed = fx.is_pending(timeout);
        let decision = if self.traffic.datagrams {
            self.pairs[pair]
                .vf
                .coalesce(now, self.nic, timed_out, armed)
        } else {
            let queue_pair = &mut self.pairs[pair];
            let rx = &queue_pair.vf;
            if rx.masked || rx.ring == 0 || rx.since_interrupt == 0 {
                Coalescing::Wait
            } else {
                queue_pair.throttle.decide(now, armed)
            }
        };
        match decision {
            Coalescing::Wait => {}
            Coalescing::ArmTimeout(at) => fx.schedule(at, timeout),
            Coalescing::Fire => self.fire_vf_now(pair, now, ledger, fx),
        }
    }

    /// The VF interrupts now: the waiting packets are signalled, the
    /// throttle restarts, a pending timeout is dropped; be2net's
    /// completion queue disarms until NAPI completes
    /// ([`rx_disarms_on_interrupt`]).
    fn fire_vf_now(&mut self, pair: usize, now: u64, ledger: &mut Ledger, fx: &mut Effects) {
        let disarms = rx_disarms_on_interrupt(self.net.costs.adaptive_coalescing);
        let queue_pair = &mut self.pairs[pair];
        queue_pair.vf.since_interrupt = 0;
        queue_pair.vf.first_unsignalled = None;
        queue_pair.vf.masked |= disarms;
        queue_pair.throttle.fired(now);
        fx.cancel(Event::CoalesceTimeout {
            pair: index_u32(pair),
        });
        self.fire_vf_msi(pair, VfVector::Rx, now, ledger, fx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::design::DesignKind;
    use crate::machine::fixture::{listed, scheduled, Setting};
    use crate::machine::GUEST_VF_VECTOR;

    const NIC: NicCoalescing = NicCoalescing {
        packets_per_interrupt: 3,
        interrupt_timeout_ns: 1_000,
    };

    #[test]
    fn coalescing_arms_once_fires_at_the_threshold_and_stays_quiet_masked() {
        let mut rx = RxRing::default();
        assert!(rx.receive(100));
        assert_eq!(
            rx.coalesce(100, NIC, false, false),
            Coalescing::ArmTimeout(1_100)
        );
        assert!(rx.receive(200));
        assert_eq!(rx.coalesce(200, NIC, false, true), Coalescing::Wait);
        assert!(rx.receive(300));
        assert_eq!(rx.coalesce(300, NIC, false, true), Coalescing::Fire);
        assert_eq!((rx.since_interrupt, rx.first_unsignalled), (0, None));
        rx.masked = true;
        assert!(rx.receive(400));
        assert_eq!(rx.coalesce(1_400, NIC, true, false), Coalescing::Wait);
    }

    #[test]
    fn a_timeout_fires_below_the_threshold_and_late_arming_is_now() {
        let mut rx = RxRing::default();
        assert!(rx.receive(100));
        assert_eq!(rx.coalesce(1_100, NIC, true, false), Coalescing::Fire);
        assert!(rx.receive(2_000));
        assert_eq!(
            rx.coalesce(5_000, NIC, false, false),
            Coalescing::ArmTimeout(5_000)
        );
    }

    #[test]
    fn a_packet_below_the_threshold_arms_the_coalescing_timeout() {
        let setting = Setting::single(DesignKind::Vanilla);
        let mut host = setting.host();
        let (platform, ledger) = (&mut host.platform, &mut host.ledger);
        let fx = listed(|fx| platform.packet_arrival(0, Ring::Vf, 1_000, ledger, fx));
        let at = 1_000 + setting.spec.nic.interrupt_timeout_ns;
        assert_eq!(fx, [scheduled(at, Event::CoalesceTimeout { pair: 0 })]);
        assert_eq!(host.platform.ring_level(0, Ring::Vf), 1);
    }

    #[test]
    fn dids_threshold_packet_fires_the_guest_vector_at_the_vcpus_core() {
        let setting = Setting::single(DesignKind::Did);
        let mut host = setting.host();
        let (platform, ledger) = (&mut host.platform, &mut host.ledger);
        let threshold = setting.spec.nic.packets_per_interrupt;
        let fx = listed(|fx| platform.rx_burst(0, threshold, 0, ledger, fx));
        let vector = GUEST_VF_VECTOR;
        assert_eq!(
            fx.last(),
            Some(&Effect::DeliverPhysical { core: 1, vector })
        );
    }

    #[test]
    fn a_full_ring_drops_what_it_cannot_hold() {
        let mut host = Setting::single(DesignKind::Vanilla).host();
        let (platform, ledger) = (&mut host.platform, &mut host.ledger);
        platform.mask(0, Ring::Vf);
        let fx = listed(|fx| platform.rx_burst(0, RX_RING_SIZE + 2, 0, ledger, fx));
        assert!(fx.is_empty());
        assert_eq!(host.platform.ring_level(0, Ring::Vf), RX_RING_SIZE);
        assert_eq!(host.platform.dropped_packets(), 2);
    }
}
