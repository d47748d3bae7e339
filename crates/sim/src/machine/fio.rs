//! fio: 4 KB random reads from the VM's virtio-blk ramdisk, one request
//! outstanding, a guard timer armed per request. The completion's handler
//! records the completion latency (clat: submission to the moment fio sees
//! the completion), then submits the next request.

use super::guest::{Step, TimerWrite, Work};
use super::workload::SentTimes;
use super::*;

/// fio completion: 3 MSR writes per request (EOI, TMICT cancel, TMICT arm).
/// fio's completion latency (clat) ends when fio sees the completion,
/// before its own work for the next request.
pub(super) const BLOCK_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::WriteTimer(TimerWrite::Cancel),
    Step::Eoi,
    Step::Sti,
    Step::RecordRequestLatency,
    Step::Work(Work::Request),
    Step::WriteTimer(TimerWrite::ArmGuard),
    Step::SubmitBlock,
    Step::Iret,
];

/// fio's own state: per VM, when its outstanding request was submitted.
#[derive(Debug, Default)]
pub(super) struct Fio {
    submitted_at: SentTimes,
}

impl Fio {
    /// `vm`'s fio submits a read at `now` to the virtio backend of its
    /// queue pair `queues`.
    pub(super) fn submit(&mut self, vm: usize, pair: usize, now: u64, fx: &mut Effects) {
        self.submitted_at.replace(vm, now);
        fx.push(Effect::BackendStart {
            pair,
            job: BackendJob::BlockRead,
        });
    }

    /// fio sees `vm`'s request complete at `now`: its completion latency,
    /// None when no request was outstanding.
    pub(super) fn completed(&mut self, vm: usize, now: u64) -> Option<u64> {
        self.submitted_at.take(vm).map(|submitted| now - submitted)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::listed_alone;
    use super::*;

    #[test]
    fn a_completion_measures_from_its_submission_once() {
        let mut fio = Fio::default();
        assert_eq!(fio.completed(1, 50), None, "nothing outstanding");
        let fx = listed_alone(|fx| fio.submit(1, 3, 100, fx));
        let read = Effect::BackendStart {
            pair: 3,
            job: BackendJob::BlockRead,
        };
        assert_eq!(fx, [read], "the read goes to the VM's backend");
        assert_eq!(fio.completed(0, 400), None, "another VM's");
        assert_eq!(fio.completed(1, 400), Some(300));
        assert_eq!(fio.completed(1, 500), None, "taken once");
    }
}
