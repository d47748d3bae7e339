//! fio: 4 KB random reads from the VM's virtio-blk ramdisk, one request
//! outstanding, a guard timer armed per request. The read goes down the
//! guest's block layer to virtio-blk, whose back end is QEMU's user space
//! (`platform::virtio_blk`); its completion interrupt's handler runs the
//! block layer's completion up to fio, records the completion latency
//! (clat), and fio submits the next read.
//!
//! ASSUMED: fio's synchronous engine (its default, `psync`), whose clat
//! spans the whole read system call: the way down the guest's block
//! layer, the notify, the device, the interrupt and the way back up.

use super::{requests_per_s, Ctx, Programs, SentTimes, StepOutcome, Workload, WorkloadStep};
use crate::machine::effects::{Effect, Effects};
use crate::machine::guest::{Step, TimerWrite, Work};
use crate::machine::ledger::Counters;
use crate::metrics::{Throughput, ThroughputUnit};

/// fio completion: 3 MSR writes per request (EOI, TMICT cancel, TMICT arm).
/// fio's completion latency (clat) ends when fio sees the completion,
/// before its own work for the next request, and starts again when it
/// issues the next read.
const BLOCK_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::WriteTimer(TimerWrite::Cancel),
    Step::Eoi,
    Step::Sti,
    Step::Work(Work::BlockComplete),
    Step::Workload(WorkloadStep::Record),
    Step::Work(Work::Request),
    Step::WriteTimer(TimerWrite::ArmGuard),
    Step::Workload(WorkloadStep::Submit),
    Step::Work(Work::BlockSubmit),
    Step::Workload(WorkloadStep::Notify),
    Step::Iret,
];

/// fio's own state: per VM, when its outstanding request was submitted.
#[derive(Debug, Default)]
pub(super) struct Fio {
    submitted_at: SentTimes,
}

impl Workload for Fio {
    fn programs(&self) -> Programs {
        Programs {
            device_handler: Some(BLOCK_HANDLER),
            ..Programs::default()
        }
    }

    /// The first read, issued at once.
    fn start(&mut self, vm: usize, _owners: &[usize], ctx: &mut Ctx, fx: &mut Effects) {
        self.submitted_at.replace(vm, ctx.now);
        fx.push(Effect::BlockRead {
            pair: ctx.topology.first_pair(vm),
        });
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
            // fio issues the next read: its clock starts.
            WorkloadStep::Submit => {
                self.submitted_at.replace(vm, ctx.now);
            }
            // The read reaches virtio-blk, which notifies QEMU.
            WorkloadStep::Notify => {
                fx.push(Effect::BlockRead {
                    pair: ctx.topology.first_pair(vm),
                });
                fx.push(Effect::Notify(vcpu));
            }
            _ => {}
        }
        StepOutcome::Next
    }

    fn throughput(&self, record: &Counters, seconds: f64) -> Option<Throughput> {
        requests_per_s(record, seconds, ThroughputUnit::Iops)
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
        let fx = bench.listed(|ctx, fx| fio.start(0, &[0], ctx, fx));
        assert_eq!(fx, [Effect::BlockRead { pair: 0 }], "the first read");
        bench.now = 400;
        record(&mut fio, &mut bench);
        record(&mut fio, &mut bench);
        assert_eq!(bench.record.latencies, [300], "taken once");
        assert_eq!(bench.record.requests_done, 1);
    }

    #[test]
    fn the_clock_starts_at_the_submission_and_the_device_hears_of_it_after() {
        let mut fio = Fio::default();
        let mut bench = Bench::new(&one_vm(WorkloadKind::Fio, 1));
        bench.now = 1_000;
        let (outcome, fx) = bench.call(|ctx, fx| fio.on_step(0, WorkloadStep::Submit, ctx, fx));
        assert_eq!(outcome, StepOutcome::Next);
        assert!(fx.is_empty(), "the block layer first: {fx:?}");
        bench.now = 3_000;
        let fx = bench.listed(|ctx, fx| fio.on_step(0, WorkloadStep::Notify, ctx, fx));
        assert_eq!(fx, [Effect::BlockRead { pair: 0 }, Effect::Notify(0)]);
        bench.now = 40_000;
        bench.listed(|ctx, fx| fio.on_step(0, WorkloadStep::Record, ctx, fx));
        assert_eq!(bench.record.latencies, [39_000], "from the submission");
    }
}
