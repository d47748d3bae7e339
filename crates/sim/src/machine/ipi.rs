//! The ipi workload: vCPU 0 sends the guest IPI vector to vCPU 1 or to
//! every other vCPU (the group's `ipi_mode`) after each gap, writing the
//! ICR as the real guest does; a target's handler times the IPI at its
//! entry, before the EOI, as IPI benchmarks (dirq's `ipi` among them) time
//! it.

use super::guest::{Step, Work};
use super::workload::SentTimes;
use super::*;

/// vCPU 0's loop: a gap, then the ICR write.
pub(super) const IPI_SENDER: &[Step] = &[Step::Work(Work::IpiGap), Step::SendIpi];
/// A target's handler.
pub(super) const IPI_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::RecordIpiLatency,
    Step::Eoi,
    Step::Iret,
];

/// The ipi workload's own state: per vCPU, when the IPI it waits for was
/// sent.
#[derive(Debug, Default)]
pub(super) struct Ipi {
    sent_at: SentTimes,
}

impl Ipi {
    fn sent(&mut self, vcpu: usize, now: u64) {
        self.sent_at.replace(vcpu, now);
    }

    /// When the IPI `vcpu` waits for was sent, taken once.
    pub(super) fn take_sent(&mut self, vcpu: usize) -> Option<u64> {
        self.sent_at.take(vcpu)
    }
}

impl Machine {
    /// The guest writes the ICR: a hypervisor traps it or the CPU posts
    /// it (`Self::send_guest_ipis`); bare metal sends the IPI itself.
    pub(super) fn guest_send_ipi(&mut self, vcpu: usize, fx: &mut Effects) {
        let icr = self.spec.group.ipi_mode.icr(GUEST_IPI_VECTOR);
        let targets = self.route_guest_ipi(vcpu, icr);
        for &target in &targets {
            self.ipi.sent(target, self.now);
        }
        self.send_guest_ipis(vcpu, icr, &targets, fx);
    }

    /// A target's handler runs: one IPI's latency.
    pub(super) fn record_ipi_latency(&mut self, vcpu: usize) {
        if let Some(sent) = self.ipi.take_sent(vcpu) {
            self.counters.latencies.push(self.now - sent);
            self.counters.requests_done += 1;
        }
    }
}
