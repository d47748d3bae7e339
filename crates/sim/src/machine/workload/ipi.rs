//! The ipi workload: vCPU 0 sends the guest IPI vector to vCPU 1 or to
//! every other vCPU (the group's `ipi_mode`) after each gap, writing the
//! ICR as the real guest does; a target's handler times the IPI at its
//! entry, before the EOI, as IPI benchmarks (dirq's `ipi` among them) time
//! it.

use super::{Ctx, Programs, SentTimes, StepOutcome, Workload, WorkloadStep};
use crate::machine::effects::{Effect, Effects};
use crate::machine::guest::{Step, Work};
use crate::machine::GUEST_IPI_VECTOR;
use crate::scenario::RunSpec;

/// vCPU 0's loop: a gap, then the ICR write.
const IPI_SENDER: &[Step] = &[
    Step::Workload(WorkloadStep::Pause),
    Step::Workload(WorkloadStep::Send),
];
/// A target's handler.
const IPI_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::Workload(WorkloadStep::Record),
    Step::Eoi,
    Step::Iret,
];

/// The ipi workload's own state: the ICR value of its IPI, the gap
/// between two, and per vCPU when the IPI it waits for was sent.
#[derive(Debug)]
pub(super) struct Ipi {
    icr: u64,
    gap_ns: u64,
    sent_at: SentTimes,
}

impl Ipi {
    /// The workload sending the group's IPI (`ipi_mode`) at its rate.
    pub(super) fn new(spec: &RunSpec) -> Self {
        let rate = spec.group.ipi_rate_per_s.max(1);
        Ipi {
            icr: spec.group.ipi_mode.icr(GUEST_IPI_VECTOR),
            gap_ns: 1_000_000_000 / rate,
            sent_at: SentTimes::default(),
        }
    }
}

impl Workload for Ipi {
    fn programs(&self) -> Programs {
        Programs {
            lead: Some(IPI_SENDER),
            ipi_handler: Some(IPI_HANDLER),
            ..Programs::default()
        }
    }

    fn on_step(
        &mut self,
        vcpu: usize,
        step: WorkloadStep,
        ctx: &mut Ctx,
        fx: &mut Effects,
    ) -> StepOutcome {
        match step {
            // The gap is the workload's rate, not a service time.
            WorkloadStep::Pause => return StepOutcome::Takes(self.gap_ns),
            // A hypervisor traps the write or the CPU posts it; bare metal
            // sends the IPI itself.
            WorkloadStep::Send => fx.push(Effect::WriteIcr {
                vcpu,
                icr: self.icr,
            }),
            // A target's handler runs: one IPI's latency.
            WorkloadStep::Record => {
                if let Some(sent) = self.sent_at.take(vcpu) {
                    ctx.record.request_done(ctx.now - sent);
                }
            }
            _ => {}
        }
        StepOutcome::Next
    }

    /// The write left at `now` for the vCPUs the bus routed it to.
    fn on_ipi_sent(&mut self, _sender: usize, targets: &[usize], ctx: &mut Ctx) {
        for &target in targets {
            self.sent_at.replace(target, ctx.now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{one_vm, spec, Bench};
    use super::*;
    use crate::scenario::{IpiMode, WorkloadKind};

    fn broadcast() -> (Ipi, Bench) {
        let mut group = one_vm(WorkloadKind::Ipi, 4);
        group.ipi_mode = IpiMode::Broadcast;
        group.ipi_rate_per_s = 20_000;
        let bench = Bench::new(&group);
        (Ipi::new(&spec(WorkloadKind::Ipi, group)), bench)
    }

    #[test]
    fn the_sender_pauses_at_the_rate_then_writes_the_groups_icr() {
        let (mut ipi, mut bench) = broadcast();
        let (pause, fx) = bench.call(|ctx, fx| ipi.on_step(0, WorkloadStep::Pause, ctx, fx));
        assert_eq!(pause, StepOutcome::Takes(50_000));
        assert!(fx.is_empty());
        let fx = bench.listed(|ctx, fx| ipi.on_step(0, WorkloadStep::Send, ctx, fx));
        let icr = IpiMode::Broadcast.icr(GUEST_IPI_VECTOR);
        assert_eq!(fx, [Effect::WriteIcr { vcpu: 0, icr }]);
    }

    #[test]
    fn each_target_the_bus_reached_times_its_ipi_once() {
        let (mut ipi, mut bench) = broadcast();
        bench.now = 1_000;
        bench.call(|ctx, _| ipi.on_ipi_sent(0, &[1, 3], ctx));
        bench.now = 4_000;
        for vcpu in [1, 2, 3, 3] {
            bench.call(|ctx, fx| ipi.on_step(vcpu, WorkloadStep::Record, ctx, fx));
        }
        assert_eq!(bench.record.latencies, [3_000, 3_000], "vCPU 2 not reached");
    }
}
