//! The ipi workload: vCPU 0 sends the guest IPI vector to vCPU 1 or to
//! every other vCPU (the group's `ipi_mode`) after each gap, writing the
//! ICR as the real guest does; a target's handler times the IPI at its
//! entry, before the EOI, as IPI benchmarks (dirq's `ipi` among them) time
//! it.

use super::guest::{Step, Work};
use super::workload::SentTimes;
use super::*;
use crate::scenario::IpiMode;

/// vCPU 0's loop: a gap, then the ICR write.
pub(super) const IPI_SENDER: &[Step] = &[Step::Work(Work::IpiGap), Step::SendIpi];
/// A target's handler.
pub(super) const IPI_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::RecordIpiLatency,
    Step::Eoi,
    Step::Iret,
];

/// The ipi workload's own state: the ICR value of its IPI and, per
/// vCPU, when the IPI it waits for was sent.
#[derive(Debug)]
pub(super) struct Ipi {
    icr: u64,
    sent_at: SentTimes,
}

impl Ipi {
    /// The workload sending the group's IPI (`mode`).
    pub(super) fn new(mode: IpiMode) -> Self {
        Ipi {
            icr: mode.icr(GUEST_IPI_VECTOR),
            sent_at: SentTimes::default(),
        }
    }

    /// `vcpu`'s ICR write: a hypervisor traps it or the CPU posts it;
    /// bare metal sends the IPI itself.
    pub(super) fn write_icr(&self, vcpu: usize) -> Effect {
        Effect::WriteIcr {
            vcpu,
            icr: self.icr,
        }
    }

    /// The write left at `now` for the vCPUs the bus routed it to.
    pub(super) fn sent(&mut self, targets: &[usize], now: u64) {
        for &target in targets {
            self.sent_at.replace(target, now);
        }
    }

    /// When the IPI `vcpu` waits for was sent, taken once.
    pub(super) fn take_sent(&mut self, vcpu: usize) -> Option<u64> {
        self.sent_at.take(vcpu)
    }

    /// A target's handler runs at `now`: one IPI's latency.
    pub(super) fn record_latency(&mut self, vcpu: usize, now: u64, counters: &mut Counters) {
        if let Some(sent) = self.take_sent(vcpu) {
            counters.request_done(now - sent);
        }
    }
}
