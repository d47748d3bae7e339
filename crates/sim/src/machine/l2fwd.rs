//! DPDK l2fwd: a generator sends bursts of 128-byte frames to the VF at
//! line rate; the guest's poll-mode driver never enables the VF's
//! interrupt, spins on the ring and forwards what it finds, a burst of up
//! to 32 frames at a time, through the VF's doorbell (no exit). No design
//! raises an interrupt, so only the background exits differ.

use super::*;

/// DPDK's receive burst (l2fwd's MAX_PKT_BURST).
const PMD_BURST: u32 = 32;
/// 128-byte frames with their preamble and gap on the wire.
const L2FWD_FRAME_WIRE_BYTES: u64 = 128 + 20;

/// l2fwd's event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PmdEvent {
    /// A burst of frames for the poll-mode driver.
    Burst { queues: u32 },
}

/// l2fwd's own state: per queue pair, the frames its driver took and is
/// forwarding.
#[derive(Debug, Default)]
pub(super) struct L2fwd {
    forwarding: Vec<u32>,
}

impl L2fwd {
    /// The driver takes a burst from `ring`: its work at `per_frame_ns` a
    /// frame, None when the ring is empty.
    pub(super) fn take(
        &mut self,
        queues: usize,
        ring: &mut RxQueue,
        per_frame_ns: u64,
    ) -> Option<u64> {
        let burst = ring.ring.min(PMD_BURST);
        if burst == 0 {
            return None;
        }
        ring.ring -= burst;
        if queues >= self.forwarding.len() {
            self.forwarding.resize(queues + 1, 0);
        }
        self.forwarding[queues] = burst;
        Some(u64::from(burst) * per_frame_ns)
    }

    /// The driver's burst left: how many frames it forwarded.
    pub(super) fn forwarded(&mut self, queues: usize) -> u64 {
        self.forwarding
            .get_mut(queues)
            .map_or(0, |burst| u64::from(std::mem::take(burst)))
    }
}

impl Machine {
    /// l2fwd starts on `owners`: each driver keeps its VF's interrupt
    /// masked, and the generator sends to each queue pair.
    pub(super) fn start_l2fwd(&mut self, owners: &[usize], fx: &mut Effects) {
        for &owner in owners {
            let queues = self.vcpus[owner].queues;
            self.queues[queues].vf.masked = true;
            fx.schedule(
                0,
                PmdEvent::Burst {
                    queues: index_u32(queues),
                },
            );
        }
    }

    pub(super) fn pmd_event(&mut self, event: PmdEvent, fx: &mut Effects) {
        let PmdEvent::Burst { queues } = event;
        self.pmd_burst(queues as usize, fx);
    }

    /// A burst of 128-byte frames reaches the poll-mode driver's ring at
    /// line rate; a driver spinning on an empty ring takes them at once.
    pub(super) fn pmd_burst(&mut self, queues: usize, fx: &mut Effects) {
        let link_mbps = self.profile.network.link_mbps;
        let burst_ns = (u64::from(PMD_BURST) * L2FWD_FRAME_WIRE_BYTES * 8 * 1_000) / link_mbps;
        fx.schedule(
            self.now + burst_ns,
            PmdEvent::Burst {
                queues: index_u32(queues),
            },
        );
        let now = self.now;
        for _ in 0..PMD_BURST {
            self.queues[queues].vf.receive(now);
        }
        let owner = self.queues[queues].owner;
        if self.vcpus[owner].spin_since.is_some() {
            fx.push(Effect::Poke(owner));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::apps::App;
    use super::super::fixture::{listed, machine, running};
    use super::*;
    use crate::policy::DesignKind;
    use crate::scenario::HostShape;

    #[test]
    fn the_poll_mode_driver_forwards_bursts_and_is_poked_when_idle() {
        let mut m = machine(DesignKind::Did, WorkloadKind::L2fwd, HostShape::default());
        running(&mut m, 0);
        assert_eq!(m.app_work(0, App::PollMode), None, "an empty ring: spin");
        m.vcpus[0].spin_since = Some(0);
        let fx = listed(&mut m, |m, fx| m.pmd_burst(0, fx));
        assert!(fx.contains(&Effect::Poke(0)), "{fx:?}");
        let per_packet = m.profile.workloads.l2fwd_packet;
        let work = m.app_work(0, App::PollMode);
        assert_eq!(work, Some(u64::from(PMD_BURST) * per_packet));
        assert_eq!(m.queues[0].vf.ring, 0);
        assert_eq!(m.counters.packets_processed, 0, "counted once forwarded");
        listed(&mut m, |m, fx| m.app_done(0, App::PollMode, fx));
        assert_eq!(m.counters.packets_processed, u64::from(PMD_BURST));
    }
}
