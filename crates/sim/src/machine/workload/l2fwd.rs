//! DPDK l2fwd: a generator sends bursts of 128-byte frames to the VF at
//! line rate; the guest's poll-mode driver never enables the VF's
//! interrupt, spins on the ring and forwards what it finds, a burst of up
//! to 32 frames at a time, through the VF's doorbell (no exit). No design
//! raises an interrupt, so only the background exits differ.

use dirq_stats::f64_of;

use super::{Ctx, Programs, StepOutcome, Traffic, Workload, WorkloadEvent, WorkloadStep};
use crate::machine::effects::{Effect, Effects};
use crate::machine::guest::Step;
use crate::machine::ledger::Counters;
use crate::machine::{index_u32, Ring};
use crate::metrics::{Throughput, ThroughputUnit};
use crate::profile::CostProfile;

/// The poll-mode driver, the guest's background task.
const POLL_MODE_DRIVER: &[Step] = &[Step::Workload(WorkloadStep::App)];
/// DPDK's receive burst (l2fwd's MAX_PKT_BURST).
const PMD_BURST: u32 = 32;
/// 128-byte frames with their preamble and gap on the wire.
const L2FWD_FRAME_WIRE_BYTES: u64 = 128 + 20;

/// l2fwd's event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum PmdEvent {
    /// A burst of frames for the poll-mode driver.
    Burst { pair: u32 },
}

/// l2fwd's own state: the generator's gap between bursts, the driver's
/// work per frame, and per queue pair the frames its driver took and is
/// forwarding.
#[derive(Debug, Default)]
pub(super) struct L2fwd {
    burst_gap_ns: u64,
    per_frame_ns: u64,
    forwarding: Vec<u32>,
}

impl L2fwd {
    /// The generator on a link of the profile's speed.
    pub(super) fn new(profile: &CostProfile) -> L2fwd {
        L2fwd {
            burst_gap_ns: (u64::from(PMD_BURST) * L2FWD_FRAME_WIRE_BYTES * 8 * 1_000)
                / profile.network.link_mbps,
            per_frame_ns: profile.workloads.l2fwd_packet,
            forwarding: Vec::new(),
        }
    }
}

impl Workload for L2fwd {
    fn programs(&self) -> Programs {
        Programs {
            background: Some(POLL_MODE_DRIVER),
            ..Programs::default()
        }
    }

    fn traffic(&self) -> Traffic {
        Traffic {
            polled_vf: true,
            ..Traffic::default()
        }
    }

    /// The generator sends each owner's driver a burst at once.
    fn start(&mut self, _vm: usize, owners: &[usize], ctx: &mut Ctx, fx: &mut Effects) {
        for &owner in owners {
            let pair = index_u32(ctx.topology.pair_of(owner));
            fx.schedule(0, PmdEvent::Burst { pair });
        }
    }

    /// A burst of frames reaches the VF's ring; the next follows at line
    /// rate. A driver spinning on its empty ring is poked to take them at
    /// once.
    fn on_event(&mut self, event: WorkloadEvent, ctx: &mut Ctx, fx: &mut Effects) {
        let WorkloadEvent::Pmd(PmdEvent::Burst { pair }) = event else {
            return;
        };
        fx.schedule(ctx.now + self.burst_gap_ns, PmdEvent::Burst { pair });
        let pair = pair as usize;
        fx.push(Effect::RxBurst {
            pair,
            frames: PMD_BURST,
        });
        let driver = ctx.topology.owner(pair);
        if ctx.state.spinning(driver) {
            fx.push(Effect::Poke(driver));
        }
    }

    /// The driver takes a burst from its ring: its work per frame; a spin
    /// while the ring is empty.
    fn on_step(
        &mut self,
        vcpu: usize,
        _step: WorkloadStep,
        ctx: &mut Ctx,
        fx: &mut Effects,
    ) -> StepOutcome {
        let pair = ctx.topology.pair_of(vcpu);
        let burst = ctx.state.ring_level(pair, Ring::Vf).min(PMD_BURST);
        if burst == 0 {
            return StepOutcome::Spin;
        }
        fx.push(Effect::RingTaken {
            pair,
            ring: Ring::Vf,
            frames: burst,
        });
        if pair >= self.forwarding.len() {
            self.forwarding.resize(pair + 1, 0);
        }
        self.forwarding[pair] = burst;
        StepOutcome::Takes(u64::from(burst) * self.per_frame_ns)
    }

    /// The driver's burst left: its frames are forwarded.
    fn step_done(&mut self, vcpu: usize, _step: WorkloadStep, ctx: &mut Ctx, _fx: &mut Effects) {
        let pair = ctx.topology.pair_of(vcpu);
        if let Some(burst) = self.forwarding.get_mut(pair) {
            ctx.record.packets_processed += u64::from(std::mem::take(burst));
        }
    }

    fn throughput(&self, record: &Counters, seconds: f64) -> Option<Throughput> {
        Some(Throughput {
            value: f64_of(record.packets_processed) / seconds,
            unit: ThroughputUnit::PacketsPerS,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{one_vm, Bench};
    use super::*;
    use crate::machine::fixture::scheduled;
    use crate::scenario::WorkloadKind;

    #[test]
    fn the_generator_sends_bursts_at_line_rate_and_pokes_only_a_spinning_driver() {
        let mut profile = CostProfile::did_2015();
        profile.network.link_mbps = 10_000;
        let mut l2fwd = L2fwd::new(&profile);
        let mut bench = Bench::new(&one_vm(WorkloadKind::L2fwd, 1));
        assert!(l2fwd.traffic().polled_vf, "the driver polls");
        let start = bench.listed(|ctx, fx| l2fwd.start(0, &[0], ctx, fx));
        assert_eq!(start, [scheduled(0, PmdEvent::Burst { pair: 0 })]);
        // 32 frames of 148 bytes on the wire at 10 Gb/s.
        let gap = 32 * 148 * 8 / 10;
        bench.now = 1_000;
        let next = scheduled(1_000 + gap, PmdEvent::Burst { pair: 0 });
        let burst = WorkloadEvent::Pmd(PmdEvent::Burst { pair: 0 });
        let frames = Effect::RxBurst {
            pair: 0,
            frames: PMD_BURST,
        };
        let fx = bench.listed(|ctx, fx| l2fwd.on_event(burst, ctx, fx));
        assert_eq!(fx, [next, frames]);
        bench.facts.spinning = vec![0];
        let fx = bench.listed(|ctx, fx| l2fwd.on_event(burst, ctx, fx));
        assert_eq!(fx, [next, frames, Effect::Poke(0)]);
    }

    #[test]
    fn the_driver_forwards_a_burst_at_a_time_and_counts_it_once_forwarded() {
        let mut l2fwd = L2fwd::new(&CostProfile::did_2015());
        let per_frame = l2fwd.per_frame_ns;
        let mut bench = Bench::new(&one_vm(WorkloadKind::L2fwd, 1));
        let app = |l2fwd: &mut L2fwd, bench: &mut Bench| {
            bench.call(|ctx, fx| l2fwd.on_step(0, WorkloadStep::App, ctx, fx))
        };
        assert_eq!(
            app(&mut l2fwd, &mut bench).0,
            StepOutcome::Spin,
            "an empty ring"
        );
        bench.facts.rings.insert((0, Ring::Vf), 40);
        let (outcome, fx) = app(&mut l2fwd, &mut bench);
        assert_eq!(
            outcome,
            StepOutcome::Takes(u64::from(PMD_BURST) * per_frame)
        );
        let taken = Effect::RingTaken {
            pair: 0,
            ring: Ring::Vf,
            frames: PMD_BURST,
        };
        assert_eq!(fx, [taken], "one burst at a time");
        assert_eq!(bench.record.packets_processed, 0, "counted once forwarded");
        bench.call(|ctx, fx| l2fwd.step_done(0, WorkloadStep::App, ctx, fx));
        bench.call(|ctx, fx| l2fwd.step_done(0, WorkloadStep::App, ctx, fx));
        assert_eq!(bench.record.packets_processed, u64::from(PMD_BURST), "once");
    }
}
