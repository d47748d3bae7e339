//! How a guest's ICR write leaves its vCPU (docs/mechanisms.md sections 3b
//! and 7): trapped by the MSR bitmap and emulated (or, on bare metal,
//! passed through), or sent by the processor itself with IPIv or AVIC
//! (the rules are `dirq_arch::ipi_virtualization`'s).

use dirq_arch::ipi_virtualization::{ipiv_virtualizes, AvicIpi};
use dirq_arch::vmcs::{MsrWriteAction, Vmcs};

use crate::design::msrs;

/// Who sends a guest's IPI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpiSender {
    /// The VMCS's MSR bitmap decides: an exit the hypervisor emulates, or
    /// a write straight to the physical ICR.
    Bitmap,
    /// Intel IPI virtualization: fixed physical unicasts are posted by the
    /// CPU without an exit, whether the target runs or not; others exit.
    Ipiv,
    /// AVIC: fixed edge IPIs are posted by the CPU; a target that is not
    /// running makes the write exit (AVIC_INCOMPLETE_IPI) after the post.
    Avic,
}

/// What an ICR write does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IpiSend {
    /// The write exits to the hypervisor.
    pub(crate) exits: bool,
    /// The CPU posted the vector to every target itself.
    pub(crate) posted_by_cpu: bool,
}

impl IpiSender {
    /// The guest writes `icr`; `every_target_running` says whether every
    /// target vCPU is running on its core.
    pub(crate) fn send(self, vmcs: &Vmcs, icr: u64, every_target_running: bool) -> IpiSend {
        let trapped = || IpiSend {
            exits: vmcs.msr_write(msrs::ICR) == MsrWriteAction::Exit,
            posted_by_cpu: false,
        };
        match self {
            IpiSender::Bitmap => trapped(),
            IpiSender::Ipiv if ipiv_virtualizes(icr) => IpiSend {
                exits: false,
                posted_by_cpu: true,
            },
            IpiSender::Ipiv => trapped(),
            IpiSender::Avic => {
                let outcome = AvicIpi::of(icr, every_target_running);
                IpiSend {
                    exits: outcome.exits(),
                    posted_by_cpu: outcome.sent(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dirq_arch::interrupt::{DeliveryMode, Destination};
    use dirq_arch::lapic::x2apic_icr;

    fn icr(destination: Destination) -> u64 {
        x2apic_icr(0xFB, DeliveryMode::Fixed, destination)
    }

    #[test]
    fn a_trapped_icr_exits_and_ipiv_posts_unicasts_without_one() {
        let vmcs = Vmcs::trap_everything();
        let unicast = icr(Destination::Physical(1));
        let broadcast = icr(Destination::AllExcludingSelf { sender: 0 });
        let trapped = IpiSend {
            exits: true,
            posted_by_cpu: false,
        };
        assert_eq!(IpiSender::Bitmap.send(&vmcs, unicast, true), trapped);
        let posted = IpiSend {
            exits: false,
            posted_by_cpu: true,
        };
        assert_eq!(IpiSender::Ipiv.send(&vmcs, unicast, false), posted);
        assert_eq!(IpiSender::Ipiv.send(&vmcs, broadcast, true), trapped);
    }

    #[test]
    fn avic_exits_after_posting_when_a_target_sleeps() {
        let vmcs = Vmcs::trap_everything();
        let broadcast = icr(Destination::AllExcludingSelf { sender: 0 });
        let running = IpiSender::Avic.send(&vmcs, broadcast, true);
        assert_eq!(
            running,
            IpiSend {
                exits: false,
                posted_by_cpu: true
            }
        );
        let incomplete = IpiSender::Avic.send(&vmcs, broadcast, false);
        assert!(incomplete.exits && incomplete.posted_by_cpu);
    }
}
