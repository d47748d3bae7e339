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
    Burst { pair: u32 },
}

/// l2fwd's own state: the generator's gap between bursts, and per queue
/// pair the frames its driver took and is forwarding.
#[derive(Debug, Default)]
pub(super) struct L2fwd {
    burst_gap_ns: u64,
    forwarding: Vec<u32>,
}

impl L2fwd {
    /// The driver of queue pair `queues` starts on a link of `link_mbps`:
    /// it keeps its `vf` ring's interrupt masked, and the generator sends
    /// it a burst at once.
    pub(super) fn start(&mut self, pair: usize, link_mbps: u64, vf: &mut RxRing, fx: &mut Effects) {
        self.burst_gap_ns = (u64::from(PMD_BURST) * L2FWD_FRAME_WIRE_BYTES * 8 * 1_000) / link_mbps;
        vf.masked = true;
        fx.schedule(
            0,
            PmdEvent::Burst {
                pair: index_u32(pair),
            },
        );
    }

    /// A burst of 128-byte frames reaches `vf`, queue pair `queues`'s
    /// ring, at `now`; the next follows at line rate. A driver spinning on
    /// its empty ring (`spinning`, its vCPU) is poked to take them at once.
    pub(super) fn burst(
        &self,
        pair: usize,
        now: u64,
        vf: &mut RxRing,
        spinning: Option<usize>,
        fx: &mut Effects,
    ) {
        fx.schedule(
            now + self.burst_gap_ns,
            PmdEvent::Burst {
                pair: index_u32(pair),
            },
        );
        for _ in 0..PMD_BURST {
            vf.receive(now);
        }
        if let Some(driver) = spinning {
            fx.push(Effect::Poke(driver));
        }
    }

    /// The driver takes a burst from `ring`: its work at `per_frame_ns` a
    /// frame, None when the ring is empty.
    pub(super) fn take(
        &mut self,
        pair: usize,
        ring: &mut RxRing,
        per_frame_ns: u64,
    ) -> Option<u64> {
        let burst = ring.ring.min(PMD_BURST);
        if burst == 0 {
            return None;
        }
        ring.ring -= burst;
        if pair >= self.forwarding.len() {
            self.forwarding.resize(pair + 1, 0);
        }
        self.forwarding[pair] = burst;
        Some(u64::from(burst) * per_frame_ns)
    }

    /// The driver's burst left: how many frames it forwarded.
    pub(super) fn forwarded(&mut self, pair: usize) -> u64 {
        self.forwarding
            .get_mut(pair)
            .map_or(0, |burst| u64::from(std::mem::take(burst)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::apps::App;
    use super::super::fixture::{listed, listed_alone, machine, running, scheduled};
    use super::*;
    use crate::design::DesignKind;
    use crate::scenario::HostShape;

    #[test]
    fn the_poll_mode_driver_forwards_bursts_and_is_poked_when_idle() {
        let mut m = machine(DesignKind::Did, WorkloadKind::L2fwd, HostShape::default());
        running(&mut m, 0);
        assert_eq!(m.app_work(0, App::PollMode), None, "an empty ring: spin");
        m.vcpus[0].spin_since = Some(0);
        let burst = PmdEvent::Burst { pair: 0 };
        let fx = listed(&mut m, |m, fx| {
            m.workload_event(WorkloadEvent::Pmd(burst), fx)
        });
        assert!(fx.contains(&Effect::Poke(0)), "{fx:?}");
        let per_packet = m.profile.workloads.l2fwd_packet;
        let work = m.app_work(0, App::PollMode);
        assert_eq!(work, Some(u64::from(PMD_BURST) * per_packet));
        assert_eq!(m.pairs[0].vf.ring, 0);
        assert_eq!(m.counters.packets_processed, 0, "counted once forwarded");
        listed(&mut m, |m, fx| m.app_done(0, App::PollMode, fx));
        assert_eq!(m.counters.packets_processed, u64::from(PMD_BURST));
    }

    #[test]
    fn the_generator_sends_bursts_at_line_rate_and_pokes_only_a_spinning_driver() {
        let mut l2fwd = L2fwd::default();
        let mut vf = RxRing::default();
        let start = listed_alone(|fx| l2fwd.start(4, 10_000, &mut vf, fx));
        assert!(vf.masked, "the driver polls");
        assert_eq!(start, [scheduled(0, PmdEvent::Burst { pair: 4 })]);
        // 32 frames of 148 bytes on the wire at 10 Gb/s.
        let gap = 32 * 148 * 8 / 10;
        let next = scheduled(1_000 + gap, PmdEvent::Burst { pair: 4 });
        let fx = listed_alone(|fx| l2fwd.burst(4, 1_000, &mut vf, None, fx));
        assert_eq!(fx, [next]);
        assert_eq!(vf.ring, PMD_BURST);
        let fx = listed_alone(|fx| l2fwd.burst(4, 1_000, &mut vf, Some(7), fx));
        assert_eq!(fx, [next, Effect::Poke(7)]);
        assert_eq!(l2fwd.take(4, &mut vf, 10), Some(u64::from(PMD_BURST) * 10));
        assert_eq!(vf.ring, PMD_BURST, "one burst at a time");
        assert_eq!(l2fwd.forwarded(4), u64::from(PMD_BURST));
        assert_eq!(l2fwd.forwarded(4), 0, "counted once");
    }
}
