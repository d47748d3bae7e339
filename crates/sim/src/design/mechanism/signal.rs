//! How a sender outside the vCPU's core (a backend thread, the IPI
//! emulation, a host timer, a device) signals a virtual interrupt: kick
//! and inject (KVM), post (APICv), a physical IPI with the guest's vector
//! (DID), or the core's own LAPIC (bare metal).

use dirq_arch::posted::PostedInterruptDescriptor;

/// How a sender signals a vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VirtualSignal {
    /// Queue, then kick the core with a host IPI so that it exits and
    /// injects.
    KickAndInject,
    /// Post to the descriptor; the notification is processed in guest mode.
    Posted,
    /// DID: a physical IPI carrying the guest's own vector while the vCPU
    /// runs; queued for injection otherwise.
    DirectIpi,
    /// No hypervisor: the interrupt goes to the core's LAPIC as it is.
    Native,
}

/// Where the vCPU is when it is signalled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Whereabouts {
    /// The vCPU is its core's current one and runnable.
    pub(crate) scheduled: bool,
    /// ... and its core is in guest mode.
    pub(crate) in_guest_mode: bool,
}

/// What a signal asks of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    /// The vector goes to the vCPU's core's LAPIC as it is.
    Physical,
    /// Queue the vector for injection (the design's [`Injection`]), then
    /// kick the core out of guest mode if `kick`.
    ///
    /// [`Injection`]: super::injection::Injection
    Queue { kick: bool },
    /// Posted to the descriptor: `merged` if already posted, `notify` if
    /// the notification vector must go to the core; the vCPU wakes.
    Posted { merged: bool, notify: bool },
}

impl VirtualSignal {
    pub(crate) fn signal(
        self,
        pid: &mut PostedInterruptDescriptor,
        vector: u8,
        vcpu: Whereabouts,
    ) -> Signal {
        match self {
            VirtualSignal::Native => Signal::Physical,
            VirtualSignal::KickAndInject => Signal::Queue {
                kick: vcpu.scheduled && vcpu.in_guest_mode,
            },
            VirtualSignal::Posted => {
                let merged = pid.pir.contains(vector);
                let notification = pid.post(vector);
                Signal::Posted {
                    merged,
                    notify: notification.is_some() && vcpu.scheduled,
                }
            }
            VirtualSignal::DirectIpi if vcpu.scheduled => Signal::Physical,
            VirtualSignal::DirectIpi => Signal::Queue { kick: false },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VECTOR: u8 = 0x51;
    const RUNNING: Whereabouts = Whereabouts {
        scheduled: true,
        in_guest_mode: true,
    };
    const IN_AN_EXIT: Whereabouts = Whereabouts {
        scheduled: true,
        in_guest_mode: false,
    };
    const DESCHEDULED: Whereabouts = Whereabouts {
        scheduled: false,
        in_guest_mode: false,
    };

    fn pid() -> PostedInterruptDescriptor {
        PostedInterruptDescriptor::new(0xF2, 0)
    }

    #[test]
    fn kvm_kicks_only_a_vcpu_in_guest_mode() {
        let signal = |at| VirtualSignal::KickAndInject.signal(&mut pid(), VECTOR, at);
        assert_eq!(signal(RUNNING), Signal::Queue { kick: true });
        assert_eq!(signal(IN_AN_EXIT), Signal::Queue { kick: false });
        assert_eq!(signal(DESCHEDULED), Signal::Queue { kick: false });
    }

    #[test]
    fn did_sends_the_guest_vector_to_a_scheduled_vcpu_and_queues_otherwise() {
        let signal = |at| VirtualSignal::DirectIpi.signal(&mut pid(), VECTOR, at);
        assert_eq!(signal(IN_AN_EXIT), Signal::Physical);
        assert_eq!(signal(DESCHEDULED), Signal::Queue { kick: false });
        let native = VirtualSignal::Native.signal(&mut pid(), VECTOR, DESCHEDULED);
        assert_eq!(native, Signal::Physical);
    }

    #[test]
    fn posting_notifies_once_and_merges_a_second_post() {
        let mut pid = pid();
        let first = VirtualSignal::Posted.signal(&mut pid, VECTOR, RUNNING);
        assert_eq!(
            first,
            Signal::Posted {
                merged: false,
                notify: true
            }
        );
        let second = VirtualSignal::Posted.signal(&mut pid, VECTOR, RUNNING);
        assert_eq!(
            second,
            Signal::Posted {
                merged: true,
                notify: false
            }
        );
        assert!(pid.pir.contains(VECTOR));
    }
}
