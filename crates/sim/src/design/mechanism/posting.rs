//! What a request posted by hardware does: the IOMMU posting an assigned
//! device's interrupt through a posted-format IRTE, or the sending CPU
//! posting a virtualized IPI (docs/mechanisms.md section 3b). Software
//! senders (KVM's own) post through [`super::signal::VirtualSignal`].
//!
//! Per vCPU it acts on the posted-interrupt descriptor: VT-d's ON/SN/NV
//! (VT-d 5.2.3, 9.12; SDM 29.6), or, for AVIC, the backing page's IRR
//! (modelled by the descriptor's PIR: requests the vCPU has not yet
//! evaluated) and the IsRunning bit of its physical APIC ID table entry
//! (AMD APM Vol. 2, 15.29).

use dirq_arch::posted::PostedInterruptDescriptor;

/// Which hardware posts, and how it reaches a vCPU that is not running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Posting {
    /// Only software posts: the descriptor is KVM's, whose sender wakes a
    /// sleeping vCPU itself; its notification vector never changes.
    Software,
    /// VT-d posted interrupts: while the vCPU is preempted SN suppresses
    /// notifications (the request waits in PIR for the next entry); while
    /// it is blocked NV is the wake-up vector and NDST the core it sleeps
    /// on, whose host handler wakes it (Linux's pi_wakeup_handler).
    VtdPid,
    /// AVIC: IsRunning set, a doorbell to the core, processed without an
    /// exit in guest mode (in host mode the IRR is evaluated at VMRUN);
    /// clear, the IOMMU writes a GA log entry and interrupts the host,
    /// whose handler wakes the vCPU, and a sending CPU exits with
    /// AVIC_INCOMPLETE_IPI so that the hypervisor wakes it.
    Avic,
}

/// Who posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PostSource {
    /// The IOMMU, for an assigned device's MSI.
    Iommu,
    /// A CPU sending a virtualized IPI.
    Cpu,
}

/// Where the target vCPU is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PostTarget {
    /// Scheduled on its core and runnable (AVIC's IsRunning).
    pub(crate) running: bool,
    /// ... and its core is in guest mode.
    pub(crate) in_guest_mode: bool,
}

/// What a hardware post asks of the engine, beside the recorded request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PostSignal {
    /// Nothing more: a notification is already outstanding, or AVIC's
    /// IRR is evaluated at the coming VMRUN.
    Recorded,
    /// SN was set: recorded for the vCPU's next entry, no notification.
    Suppressed,
    /// This vector (VT-d's NV, or AVIC's doorbell, modelled as the posted
    /// notification vector) goes to the vCPU's core.
    Notify(u8),
    /// AVIC, from the IOMMU: a GA log interrupt to the host.
    GaLog,
    /// AVIC, from a CPU: the sender exits and the hypervisor wakes the
    /// vCPU.
    WakeBySender,
}

/// A hardware post's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Post {
    /// The request merged with one already recorded.
    pub(crate) merged: bool,
    pub(crate) signal: PostSignal,
}

impl Posting {
    /// Hardware posts `vector` for a vCPU at `target`. AVIC's doorbell is
    /// the descriptor's notification vector.
    pub(crate) fn post(
        self,
        pid: &mut PostedInterruptDescriptor,
        vector: u8,
        target: PostTarget,
        source: PostSource,
    ) -> Post {
        let merged = pid.pir.contains(vector);
        let signal = match self {
            Posting::Software | Posting::VtdPid => match pid.post(vector) {
                Some(notification) => PostSignal::Notify(notification.vector),
                None if pid.suppress => PostSignal::Suppressed,
                None => PostSignal::Recorded,
            },
            Posting::Avic => {
                pid.pir.set(vector);
                match (target.running, target.in_guest_mode, source) {
                    (true, true, _) => PostSignal::Notify(pid.notification_vector),
                    (true, false, _) => PostSignal::Recorded,
                    (false, _, PostSource::Iommu) => PostSignal::GaLog,
                    (false, _, PostSource::Cpu) => PostSignal::WakeBySender,
                }
            }
        };
        Post { merged, signal }
    }

    /// The vCPU blocks (HLT with nothing pending): VT-d's descriptor
    /// switches to the wake-up vector, notifications on.
    pub(crate) fn block(self, pid: &mut PostedInterruptDescriptor, wakeup_vector: u8) {
        if self == Posting::VtdPid {
            pid.notification_vector = wakeup_vector;
            pid.suppress = false;
        }
    }

    /// The vCPU was woken: VT-d's descriptor notifies with
    /// `notification_vector` again, suppressed unless the vCPU is its
    /// core's current one.
    pub(crate) fn unblock(
        self,
        pid: &mut PostedInterruptDescriptor,
        notification_vector: u8,
        current: bool,
    ) {
        if self == Posting::VtdPid {
            pid.notification_vector = notification_vector;
            pid.suppress = !current;
        }
    }

    /// Whether a vCPU scheduled out suppresses notifications: a blocked
    /// one under VT-d posting must not, or its wake-up vector would never
    /// be sent.
    pub(crate) fn suppress_when_descheduled(self, blocked: bool) -> bool {
        !(self == Posting::VtdPid && blocked)
    }

    /// Whether a post that finds the vCPU blocked can leave it asleep
    /// until something else wakes it: hardware posting designs only (KVM's
    /// software senders wake it themselves).
    pub(crate) fn hardware_wakes(self) -> bool {
        self != Posting::Software
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VECTOR: u8 = 0x41;
    const NOTIFICATION: u8 = 0xF2;
    const WAKEUP: u8 = 0xF1;
    const RUNNING: PostTarget = PostTarget {
        running: true,
        in_guest_mode: true,
    };
    const ASLEEP: PostTarget = PostTarget {
        running: false,
        in_guest_mode: false,
    };

    fn pid() -> PostedInterruptDescriptor {
        PostedInterruptDescriptor::new(NOTIFICATION, 1)
    }

    #[test]
    fn vtd_notifies_once_suppresses_while_preempted_and_wakes_a_blocked_vcpu() {
        let posting = Posting::VtdPid;
        let mut pid = pid();
        let first = posting.post(&mut pid, VECTOR, RUNNING, PostSource::Iommu);
        assert_eq!(first.signal, PostSignal::Notify(NOTIFICATION));
        let second = posting.post(&mut pid, VECTOR, RUNNING, PostSource::Iommu);
        assert_eq!(
            second,
            Post {
                merged: true,
                signal: PostSignal::Recorded
            }
        );
        let mut preempted = self::pid();
        preempted.suppress = posting.suppress_when_descheduled(false);
        let post = posting.post(&mut preempted, VECTOR, ASLEEP, PostSource::Iommu);
        assert_eq!(post.signal, PostSignal::Suppressed);
        assert!(preempted.pir.contains(VECTOR), "recorded for the entry");
        let mut blocked = self::pid();
        blocked.suppress = true;
        posting.block(&mut blocked, WAKEUP);
        assert!(!posting.suppress_when_descheduled(true));
        let post = posting.post(&mut blocked, VECTOR, ASLEEP, PostSource::Cpu);
        assert_eq!(post.signal, PostSignal::Notify(WAKEUP));
        posting.unblock(&mut blocked, NOTIFICATION, false);
        assert_eq!(blocked.notification_vector, NOTIFICATION);
        assert!(blocked.suppress, "woken but not yet scheduled in");
    }

    #[test]
    fn avic_rings_a_running_vcpu_and_otherwise_logs_or_exits() {
        let posting = Posting::Avic;
        let mut pid = pid();
        let post = posting.post(&mut pid, VECTOR, RUNNING, PostSource::Cpu);
        assert_eq!(post.signal, PostSignal::Notify(NOTIFICATION));
        let in_host = PostTarget {
            running: true,
            in_guest_mode: false,
        };
        let post = posting.post(&mut pid, VECTOR, in_host, PostSource::Cpu);
        assert_eq!(
            post,
            Post {
                merged: true,
                signal: PostSignal::Recorded
            }
        );
        let from_device = posting.post(&mut pid, 0x51, ASLEEP, PostSource::Iommu);
        assert_eq!(from_device.signal, PostSignal::GaLog);
        let from_cpu = posting.post(&mut pid, 0x61, ASLEEP, PostSource::Cpu);
        assert_eq!(from_cpu.signal, PostSignal::WakeBySender);
        posting.block(&mut pid, WAKEUP);
        assert_eq!(pid.notification_vector, NOTIFICATION, "no wake-up vector");
    }

    #[test]
    fn only_hardware_posting_designs_can_leave_a_sleeper_unwoken() {
        assert!(!Posting::Software.hardware_wakes());
        assert!(Posting::VtdPid.hardware_wakes() && Posting::Avic.hardware_wakes());
        assert!(Posting::Software.suppress_when_descheduled(true));
    }
}
