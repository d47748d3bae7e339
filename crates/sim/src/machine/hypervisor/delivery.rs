//! Physical delivery at a core: what it does with what is pending in its
//! LAPIC in guest, host and idle mode, the host's NMIs and interrupts to
//! a core that may run a guest, and the CPU's delivery to a guest that
//! takes interrupts, one at a time.

use dirq_arch::interrupt::TriggerMode;
use dirq_arch::lapic::{AcceptOutcome, Lapic};

use super::{Hypervisor, Mode, NmiMessage, VcpuState};
use crate::design::NOT_PRESENT_EXCEPTION;
use crate::machine::effects::{Effect, Effects};
use crate::machine::ledger::Ledger;
use crate::machine::{
    is_guest_vector, HOST_KICK_VECTOR, HOST_TIMER_VECTOR, POSTED_NOTIFICATION_VECTOR,
};
use crate::metrics::ExitReason;

/// One step of the CPU's delivery to a guest that takes interrupts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum Delivery {
    /// The guest starts the handler of this vector.
    Handler(u8),
    /// A posted notification was processed: look again.
    Again,
    /// A host vector reached guest code: what follows is listed.
    Stop,
    /// Nothing to deliver: the guest runs on.
    Nothing,
}

impl Hypervisor {
    /// Something is pending in `core`'s IRR (`lapic`): the vCPU that takes
    /// it in guest mode, unless it exits or the core wakes instead.
    pub(in crate::machine) fn physical_pending(
        &mut self,
        core: usize,
        now: u64,
        lapic: &mut Lapic,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) -> Option<usize> {
        match self.cores[core].mode {
            Mode::Guest => {
                let vcpu = self.cores[core].current?;
                if !self.process_posted_notification(vcpu, lapic, ledger)
                    && self.vcpus[vcpu].hw.vmcs.external_interrupt_exits()
                {
                    self.list_exit(vcpu, ExitReason::ExternalInterrupt, fx);
                    return None;
                }
                Some(vcpu)
            }
            Mode::Host => None,
            Mode::Idle => {
                self.wake_core(core, now, ledger, fx);
                None
            }
        }
    }

    /// SDM 29.6: the notification vector arriving in guest mode is
    /// acknowledged, EOIed and PIR merged into the virtual IRR, no exit.
    /// Returns whether there was one to process.
    pub(super) fn process_posted_notification(
        &mut self,
        vcpu: usize,
        lapic: &mut Lapic,
        ledger: &mut Ledger,
    ) -> bool {
        if !self.vcpus[vcpu].hw.vmcs.processes_posted_interrupts()
            || lapic.pending_vector() != Some(POSTED_NOTIFICATION_VECTOR)
        {
            return false;
        }
        lapic.acknowledge();
        lapic.eoi();
        let v = &mut self.vcpus[vcpu];
        let requests = v.hw.pid.take_requests();
        for vector in requests.iter() {
            if v.hw.vlapic.accept(vector, TriggerMode::Edge) == AcceptOutcome::Coalesced {
                ledger.merged(v.vm, vector);
            }
        }
        true
    }

    /// An idle core takes an interrupt at `now`: bare metal resumes the OS
    /// at once; a host runs its handler (and wakes a vCPU if it was for
    /// one).
    pub(super) fn wake_core(
        &mut self,
        core: usize,
        now: u64,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        // HLT without HLT exiting halts the core in guest mode; an
        // interrupt simply resumes the guest (SDM 25.1.3).
        let halted_in_guest = self.cores[core]
            .current
            .filter(|&vcpu| !self.vcpus[vcpu].hw.vmcs.hlt_exits());
        if let Some(vcpu) = halted_in_guest {
            self.vcpu_woken(vcpu, ledger);
            self.vcpus[vcpu].state = VcpuState::Running;
            fx.push(Effect::EnterGuest(core));
            return;
        }
        // The core sleeps with a halted vCPU: its thread must wake to run
        // the host handler and, if the interrupt is the guest's, the vCPU.
        let cost = self.wakeup_cost(core, now);
        self.set_mode(core, Mode::Host, now, ledger);
        self.cores[core].free_host_irqs = 0;
        self.host_busy(core, now, cost, fx);
    }

    /// The host sends `core` an NMI carrying `message`.
    pub(in crate::machine) fn send_nmi(
        &mut self,
        core: usize,
        message: NmiMessage,
        now: u64,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        self.cores[core].nmi_mailbox.push(message);
        if self.cores[core].mode == Mode::Idle {
            self.wake_core(core, now, ledger, fx);
            return;
        }
        if let (Mode::Guest, Some(vcpu)) = (self.cores[core].mode, self.cores[core].current) {
            if self.vcpus[vcpu].hw.vmcs.nmi_exits() {
                self.list_exit(vcpu, ExitReason::Nmi, fx);
            }
        }
    }

    /// A host IPI or hypervisor tick for a core that may be running a
    /// guest: as the design sends host interrupts, an NMI, or the fixed
    /// vector it returns for the core's LAPIC.
    pub(in crate::machine) fn host_interrupt(
        &mut self,
        core: usize,
        message: NmiMessage,
        now: u64,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) -> Option<u8> {
        if self.design.host_interrupts.as_nmi() {
            self.send_nmi(core, message, now, ledger, fx);
            return None;
        }
        Some(match message {
            NmiMessage::SliceEnd => {
                self.cores[core].slice_due = true;
                HOST_TIMER_VECTOR
            }
            _ => HOST_KICK_VECTOR,
        })
    }

    /// The CPU's next delivery to `vcpu`'s guest, which takes interrupts:
    /// from its core's `lapic` directly when physical interrupts do not
    /// exit, else the virtual LAPIC's (each delivery starts a handler,
    /// which masks interrupts unless the guest nests).
    pub(in crate::machine) fn next_delivery(
        &mut self,
        vcpu: usize,
        lapic: &mut Lapic,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) -> Delivery {
        let core = self.vcpus[vcpu].home_core;
        let direct = !self.vcpus[vcpu].hw.vmcs.external_interrupt_exits();
        if direct {
            if let Some(vector) = lapic.pending_vector() {
                if vector == POSTED_NOTIFICATION_VECTOR
                    && self.process_posted_notification(vcpu, lapic, ledger)
                {
                    return Delivery::Again;
                }
                lapic.acknowledge();
                if is_guest_vector(vector) {
                    return Delivery::Handler(vector);
                }
                // A host vector reached guest code.
                lapic.eoi();
                if self.vcpus[vcpu]
                    .hw
                    .vmcs
                    .exception_exits(NOT_PRESENT_EXCEPTION)
                {
                    // ELI's shadow IDT: not present, #NP exits, the host
                    // handles it (it stays in service for the host).
                    self.list_exit(vcpu, ExitReason::Exception, fx);
                    fx.push(Effect::HostVector { core, vector });
                    return Delivery::Stop;
                }
                ledger.checker.host_vector_in_guest();
                fx.push(Effect::HostVector { core, vector });
                fx.push(Effect::TryDeliver(vcpu));
                return Delivery::Stop;
            }
        }
        let v = &mut self.vcpus[vcpu];
        match v.hw.vmcs.deliver_virtual_interrupt(&mut v.hw.vlapic, true) {
            Some(vector) => Delivery::Handler(vector),
            None => Delivery::Nothing,
        }
    }

    /// The guest enabled interrupts (STI, IRET): an interrupt window the
    /// hypervisor asked for exits; otherwise the guest may take what is
    /// pending. Returns whether it exits.
    pub(in crate::machine) fn interrupts_on(&mut self, vcpu: usize, fx: &mut Effects) -> bool {
        let vmcs = &mut self.vcpus[vcpu].hw.vmcs;
        if !vmcs.interrupt_window_exits(true) {
            return false;
        }
        vmcs.set_primary(dirq_arch::vmcs::CPU_INTERRUPT_WINDOW_EXITING, false);
        self.list_exit(vcpu, ExitReason::InterruptWindow, fx);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::design::DesignKind;
    use crate::machine::fixture::Setting;
    use crate::machine::GUEST_VF_VECTOR;
    use crate::metrics::Invariant;

    #[test]
    fn vanillas_interrupt_in_guest_mode_exits() {
        let mut host = Setting::single(DesignKind::Vanilla).host();
        host.raise(1, HOST_KICK_VECTOR);
        let (taker, fx) = host.call(1, |hv, lapic, ledger, now, fx| {
            hv.physical_pending(1, now, lapic, ledger, fx)
        });
        assert_eq!(taker, None);
        assert_eq!(fx, [host.exit_of(0, ExitReason::ExternalInterrupt)]);
        assert!(host.platform.lapic(1).irr().contains(HOST_KICK_VECTOR));
    }

    #[test]
    fn did_delivers_a_guest_vector_through_the_guest_idt() {
        let mut host = Setting::single(DesignKind::Did).host();
        host.raise(1, GUEST_VF_VECTOR);
        let (taker, fx) = host.call(1, |hv, lapic, ledger, now, fx| {
            hv.physical_pending(1, now, lapic, ledger, fx)
        });
        assert_eq!((taker, fx), (Some(0), vec![]));
        let (delivery, fx) = host.call(1, |hv, lapic, ledger, _, fx| {
            hv.next_delivery(0, lapic, ledger, fx)
        });
        assert_eq!((delivery, fx), (Delivery::Handler(GUEST_VF_VECTOR), vec![]));
        assert!(host.platform.lapic(1).isr().contains(GUEST_VF_VECTOR));
    }

    #[test]
    fn elis_shadow_idt_turns_a_host_vector_into_an_exception_exit() {
        let mut host = Setting::single(DesignKind::Eli).host();
        host.raise(1, HOST_KICK_VECTOR);
        let (delivery, fx) = host.call(1, |hv, lapic, ledger, _, fx| {
            hv.next_delivery(0, lapic, ledger, fx)
        });
        assert_eq!(delivery, Delivery::Stop);
        let vector = HOST_KICK_VECTOR;
        assert_eq!(
            fx,
            [
                host.exit_of(0, ExitReason::Exception),
                Effect::HostVector { core: 1, vector }
            ]
        );
        let misdelivered = host.ledger.checker.violations_of(Invariant::MisDelivery);
        assert_eq!(misdelivered, 0);
    }

    #[test]
    fn with_nothing_pending_the_guest_gets_nothing() {
        let mut host = Setting::single(DesignKind::Did).host();
        let (delivery, fx) = host.call(1, |hv, lapic, ledger, _, fx| {
            hv.next_delivery(0, lapic, ledger, fx)
        });
        assert_eq!((delivery, fx), (Delivery::Nothing, vec![]));
    }

    #[test]
    fn an_interrupt_in_host_mode_waits_for_the_host() {
        let mut host = Setting::single(DesignKind::Vanilla).host();
        host.exits(0, ExitReason::Hlt);
        assert!(!host.hypervisor.in_guest(0));
        host.raise(1, HOST_KICK_VECTOR);
        let (taker, fx) = host.call(1, |hv, lapic, ledger, now, fx| {
            hv.physical_pending(1, now, lapic, ledger, fx)
        });
        assert_eq!((taker, fx), (None, vec![]));
    }

    #[test]
    fn dids_host_interrupts_are_nmis_that_exit() {
        let mut host = Setting::single(DesignKind::Did).host();
        let (vector, fx) = host.call(1, |hv, _, ledger, now, fx| {
            hv.host_interrupt(1, NmiMessage::SliceEnd, now, ledger, fx)
        });
        assert_eq!(vector, None);
        assert_eq!(fx, [host.exit_of(0, ExitReason::Nmi)]);
    }

    #[test]
    fn vanillas_slice_end_is_the_host_timer_vector() {
        let mut host = Setting::single(DesignKind::Vanilla).host();
        let (vector, fx) = host.call(1, |hv, _, ledger, now, fx| {
            hv.host_interrupt(1, NmiMessage::SliceEnd, now, ledger, fx)
        });
        assert_eq!((vector, fx), (Some(HOST_TIMER_VECTOR), vec![]));
    }
}
