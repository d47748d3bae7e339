//! fio: 4 KB random reads from the VM's virtio-blk ramdisk, one request
//! outstanding, a guard timer armed per request. The completion's handler
//! records the completion latency (clat: submission to the moment fio sees
//! the completion), then submits the next request.

use dirq_stats::f64_of;

use super::{Ctx, Programs, SentTimes, StepOutcome, Workload, WorkloadStep};
use crate::machine::effects::{Effect, Effects};
use crate::machine::guest::{Step, TimerWrite, Work};
use crate::machine::ledger::Counters;
use crate::machine::platform::BackendJob;
use crate::metrics::{Throughput, ThroughputUnit};

/// fio completion: 3 MSR writes per request (EOI, TMICT cancel, TMICT arm).
/// fio's completion latency (clat) ends when fio sees the completion,
/// before its own work for the next request.
const BLOCK_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::WriteTimer(TimerWrite::Cancel),
    Step::Eoi,
    Step::Sti,
    Step::Workload(WorkloadStep::Record),
    Step::Work(Work::Request),
    Step::WriteTimer(TimerWrite::ArmGuard),
    Step::Workload(WorkloadStep::Submit),
    Step::Iret,
];

/// fio's own state: per VM, when its outstanding request was submitted.
#[derive(Debug, Default)]
pub(super) struct Fio {
    submitted_at: SentTimes,
}

impl Fio {
    /// `vm`'s fio submits a read at `now` to the virtio backend of its
    /// first queue pair.
    fn submit(&mut self, vm: usize, ctx: &Ctx, fx: &mut Effects) {
        self.submitted_at.replace(vm, ctx.now);
        fx.push(Effect::BackendStart {
            pair: ctx.topology.first_pair(vm),
            job: BackendJob::BlockRead,
        });
    }
}

impl Workload for Fio {
    fn programs(&self) -> Programs {
        Programs {
            device_handler: Some(BLOCK_HANDLER),
            ..Programs::default()
        }
    }

    fn start(&mut self, vm: usize, _owners: &[usize], ctx: &mut Ctx, fx: &mut Effects) {
        self.submit(vm, ctx, fx);
    }

    fn on_step(
        &mut self,
        vcpu: usize,
        step: WorkloadStep,
        ctx: &mut Ctx,
        fx: &mut Effects,
    ) -> StepOutcome {
        let vm = ctx.topology.vm_of(vcpu);
        match step {
            // fio sees its request complete: its completion latency.
            WorkloadStep::Record => {
                if let Some(submitted) = self.submitted_at.take(vm) {
                    ctx.record.request_done(ctx.now - submitted);
                }
            }
            // The next read, then the virtio notify.
            WorkloadStep::Submit => {
                self.submit(vm, ctx, fx);
                fx.push(Effect::Notify(vcpu));
            }
            _ => {}
        }
        StepOutcome::Next
    }

    fn throughput(&self, record: &Counters, seconds: f64) -> Option<Throughput> {
        Some(Throughput {
            value: f64_of(record.requests_done) / seconds,
            unit: ThroughputUnit::Iops,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{one_vm, Bench};
    use super::*;
    use crate::scenario::WorkloadKind;

    #[test]
    fn a_completion_measures_from_its_submission_once() {
        let mut fio = Fio::default();
        let mut bench = Bench::new(&one_vm(WorkloadKind::Fio, 1));
        let record = |fio: &mut Fio, bench: &mut Bench| {
            bench.listed(|ctx, fx| fio.on_step(0, WorkloadStep::Record, ctx, fx))
        };
        record(&mut fio, &mut bench);
        assert!(bench.record.latencies.is_empty(), "nothing outstanding");
        bench.now = 100;
        let read = Effect::BackendStart {
            pair: 0,
            job: BackendJob::BlockRead,
        };
        let fx = bench.listed(|ctx, fx| fio.start(0, &[0], ctx, fx));
        assert_eq!(fx, [read], "the read goes to the VM's backend");
        bench.now = 400;
        record(&mut fio, &mut bench);
        record(&mut fio, &mut bench);
        assert_eq!(bench.record.latencies, [300], "taken once");
        assert_eq!(bench.record.requests_done, 1);
    }

    #[test]
    fn a_submission_reads_and_notifies_the_device() {
        let mut fio = Fio::default();
        let mut bench = Bench::new(&one_vm(WorkloadKind::Fio, 1));
        let (outcome, fx) = bench.call(|ctx, fx| fio.on_step(0, WorkloadStep::Submit, ctx, fx));
        assert_eq!(outcome, StepOutcome::Next);
        let read = Effect::BackendStart {
            pair: 0,
            job: BackendJob::BlockRead,
        };
        assert_eq!(fx, [read, Effect::Notify(0)]);
    }
}
