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
    fn submitted(&mut self, vm: usize, now: u64) {
        self.submitted_at.replace(vm, now);
    }

    /// fio sees `vm`'s request complete at `now`: its completion latency,
    /// None when no request was outstanding.
    fn completed(&mut self, vm: usize, now: u64) -> Option<u64> {
        self.submitted_at.take(vm).map(|submitted| now - submitted)
    }
}

impl Machine {
    /// `vm`'s fio submits a read to the virtio backend.
    pub(super) fn submit_block(&mut self, vm: usize, fx: &mut Effects) {
        self.fio.submitted(vm, self.now);
        self.backend_start(self.first_queues(vm), BackendJob::BlockRead, fx);
    }

    /// fio's submission: the request, then the virtio notify.
    pub(super) fn guest_submit_block(&mut self, vcpu: usize, fx: &mut Effects) {
        self.submit_block(self.vcpus[vcpu].vm, fx);
        self.io_notify(vcpu, fx);
    }

    /// The completion handler reached fio: one request's latency.
    pub(super) fn record_block_latency(&mut self, vcpu: usize) {
        if let Some(latency) = self.fio.completed(self.vcpus[vcpu].vm, self.now) {
            self.counters.latencies.push(latency);
            self.counters.requests_done += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completion_measures_from_its_submission_once() {
        let mut fio = Fio::default();
        assert_eq!(fio.completed(1, 50), None, "nothing outstanding");
        fio.submitted(1, 100);
        assert_eq!(fio.completed(0, 400), None, "another VM's");
        assert_eq!(fio.completed(1, 400), Some(300));
        assert_eq!(fio.completed(1, 500), None, "taken once");
    }
}
