//! Physical delivery: interrupts arriving at a core's LAPIC, and what the
//! core does with them in guest, host and idle mode.

use super::*;

impl Machine {
    /// A fixed interrupt arrives at a core's LAPIC (NMIs go through
    /// [`Self::send_nmi`]).
    pub(super) fn deliver_physical(&mut self, core: usize, vector: u8, fx: &mut Effects) {
        if self.cores[core].lapic.accept(vector, TriggerMode::Edge) == AcceptOutcome::Coalesced {
            if let Some((vm, guest_vector)) = self.physical_owner(core, vector) {
                self.merged(vm, guest_vector);
            }
        }
        self.physical_pending(core, fx);
    }

    /// The VM and guest vector a physical vector on `core` stands for.
    pub(super) fn physical_owner(&self, core: usize, vector: u8) -> Option<(usize, u8)> {
        if let Some((pair, queue)) = self.host_vf_vector(core, vector) {
            return Some((self.vm_of_pair(pair), queue.guest_vector()));
        }
        if is_guest_vector(vector) {
            return self.cores[core]
                .current
                .map(|vcpu| (self.vcpus[vcpu].vm, vector));
        }
        None
    }

    /// Something is pending in the core's IRR.
    pub(super) fn physical_pending(&mut self, core: usize, fx: &mut Effects) {
        match self.cores[core].mode {
            Mode::Guest => {
                let Some(vcpu) = self.cores[core].current else {
                    return;
                };
                if !self.process_posted_notification(vcpu)
                    && self.vcpus[vcpu].hw.vmcs.external_interrupt_exits()
                {
                    self.list_exit(vcpu, ExitReason::ExternalInterrupt, fx);
                } else {
                    self.try_deliver(vcpu, fx);
                }
            }
            Mode::Host => {}
            Mode::Idle => self.wake_core(core, fx),
        }
    }

    /// SDM 29.6: the notification vector arriving in guest mode is
    /// acknowledged, EOIed and PIR merged into the virtual IRR, no exit.
    /// Returns whether there was one to process.
    pub(super) fn process_posted_notification(&mut self, vcpu: usize) -> bool {
        let core = self.vcpus[vcpu].home_core;
        if !self.vcpus[vcpu].hw.vmcs.processes_posted_interrupts()
            || self.cores[core].lapic.pending_vector() != Some(POSTED_NOTIFICATION_VECTOR)
        {
            return false;
        }
        self.cores[core].lapic.acknowledge();
        self.cores[core].lapic.eoi();
        let vm = self.vcpus[vcpu].vm;
        let requests = self.vcpus[vcpu].hw.pid.take_requests();
        for vector in requests.iter() {
            if self.vcpus[vcpu].hw.vlapic.accept(vector, TriggerMode::Edge)
                == AcceptOutcome::Coalesced
            {
                self.merged(vm, vector);
            }
        }
        true
    }

    /// An idle core takes an interrupt: bare metal resumes the OS at once;
    /// a host runs its handler (and wakes a vCPU if it was for one).
    pub(super) fn wake_core(&mut self, core: usize, fx: &mut Effects) {
        // HLT without HLT exiting halts the core in guest mode; an
        // interrupt simply resumes the guest (SDM 25.1.3).
        let halted_in_guest = self.cores[core]
            .current
            .filter(|&vcpu| !self.vcpus[vcpu].hw.vmcs.hlt_exits());
        if let Some(vcpu) = halted_in_guest {
            self.vcpu_woken(vcpu);
            self.vcpus[vcpu].state = VcpuState::Running;
            fx.push(Effect::EnterGuest(core));
            return;
        }
        // The core sleeps with a halted vCPU: its thread must wake to run
        // the host handler and, if the interrupt is the guest's, the vCPU.
        let cost = self.wakeup_cost(core);
        self.set_mode(core, Mode::Host);
        self.cores[core].free_host_irqs = 0;
        self.host_busy(core, cost, fx);
    }

    pub(super) fn send_nmi(&mut self, core: usize, message: NmiMessage, fx: &mut Effects) {
        self.cores[core].nmi_mailbox.push(message);
        if self.cores[core].mode == Mode::Idle {
            self.wake_core(core, fx);
            return;
        }
        if let (Mode::Guest, Some(vcpu)) = (self.cores[core].mode, self.cores[core].current) {
            if self.vcpus[vcpu].hw.vmcs.nmi_exits() {
                self.list_exit(vcpu, ExitReason::Nmi, fx);
            }
        }
    }

    /// A host IPI or hypervisor tick for a core that may be running a guest.
    pub(super) fn host_interrupt(&mut self, core: usize, message: NmiMessage, fx: &mut Effects) {
        if self.design.host_interrupts.as_nmi() {
            self.send_nmi(core, message, fx);
            return;
        }
        let vector = match message {
            NmiMessage::SliceEnd => {
                self.cores[core].slice_due = true;
                HOST_TIMER_VECTOR
            }
            _ => HOST_KICK_VECTOR,
        };
        self.deliver_physical(core, vector, fx);
    }

    /// Delivers what the guest can take now, in guest mode (each
    /// delivery starts a handler, which masks interrupts unless the guest
    /// nests); then the guest runs on.
    pub(super) fn try_deliver(&mut self, vcpu: usize, fx: &mut Effects) {
        if !self.in_guest(vcpu) {
            return;
        }
        let core = self.vcpus[vcpu].home_core;
        while self.vcpus[vcpu].interruptible {
            let direct = !self.vcpus[vcpu].hw.vmcs.external_interrupt_exits();
            if direct {
                if let Some(vector) = self.cores[core].lapic.pending_vector() {
                    if vector == POSTED_NOTIFICATION_VECTOR
                        && self.process_posted_notification(vcpu)
                    {
                        continue;
                    }
                    self.cores[core].lapic.acknowledge();
                    if is_guest_vector(vector) {
                        self.deliver_to_guest(vcpu, vector, fx);
                        continue;
                    }
                    // A host vector reached guest code.
                    self.cores[core].lapic.eoi();
                    if self.vcpus[vcpu]
                        .hw
                        .vmcs
                        .exception_exits(NOT_PRESENT_EXCEPTION)
                    {
                        // ELI's shadow IDT: not present, #NP exits, the host
                        // handles it (it stays in service for the host).
                        self.list_exit(vcpu, ExitReason::Exception, fx);
                        fx.push(Effect::HostVector { core, vector });
                        return;
                    }
                    self.checker.host_vector_in_guest();
                    fx.push(Effect::HostVector { core, vector });
                    fx.push(Effect::TryDeliver(vcpu));
                    return;
                }
            }
            let v = &mut self.vcpus[vcpu];
            match v
                .hw
                .vmcs
                .deliver_virtual_interrupt(&mut v.hw.vlapic, v.interruptible)
            {
                Some(vector) => self.deliver_to_guest(vcpu, vector, fx),
                None => break,
            }
        }
        // A new handler (or nothing new: then this is a no-op) runs.
        fx.push(Effect::RunGuest(vcpu));
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{exit_of, listed, running, scheduled, single};
    use super::*;
    use crate::design::DesignKind;

    #[test]
    fn vanillas_vf_interrupt_in_guest_mode_exits() {
        let mut m = single(DesignKind::Vanilla);
        running(&mut m, 0);
        let vector = m.pairs[0].vf_host_vector;
        let fx = listed(&mut m, |m, fx| m.deliver_physical(1, vector, fx));
        assert_eq!(fx, [exit_of(&m, 0, ExitReason::ExternalInterrupt)]);
        assert!(m.cores[1].lapic.irr().contains(vector));
    }

    #[test]
    fn did_delivers_a_guest_vector_through_the_guest_idt() {
        let mut m = single(DesignKind::Did);
        running(&mut m, 0);
        let fx = listed(&mut m, |m, fx| m.deliver_physical(1, GUEST_VF_VECTOR, fx));
        let step_end = Effect::Cancel(Event::GuestStep { vcpu: 0 });
        assert_eq!(fx, [step_end, Effect::RunGuest(0)]);
        assert!(m.cores[1].lapic.isr().contains(GUEST_VF_VECTOR));
        let handler = m.vcpus[0].frames.last().and_then(|frame| frame.vector);
        assert_eq!(handler, Some(GUEST_VF_VECTOR));
    }

    #[test]
    fn elis_shadow_idt_turns_a_host_vector_into_an_exception_exit() {
        let mut m = single(DesignKind::Eli);
        running(&mut m, 0);
        m.cores[1].lapic.accept(HOST_KICK_VECTOR, TriggerMode::Edge);
        let fx = listed(&mut m, |m, fx| m.try_deliver(0, fx));
        let vector = HOST_KICK_VECTOR;
        assert_eq!(
            fx,
            [
                exit_of(&m, 0, ExitReason::Exception),
                Effect::HostVector { core: 1, vector }
            ]
        );
    }

    #[test]
    fn with_nothing_to_deliver_the_guest_runs_on() {
        let mut m = single(DesignKind::Did);
        running(&mut m, 0);
        assert_eq!(
            listed(&mut m, |m, fx| m.try_deliver(0, fx)),
            [Effect::RunGuest(0)]
        );
        m.cores[1].mode = Mode::Host;
        assert!(listed(&mut m, |m, fx| m.try_deliver(0, fx)).is_empty());
    }

    #[test]
    fn an_idle_core_wakes_its_host_to_handle_an_interrupt() {
        let mut m = single(DesignKind::Vanilla);
        running(&mut m, 0);
        m.cores[1].mode = Mode::Idle;
        m.vcpus[0].state = VcpuState::Halted;
        m.now = 5_000;
        let fx = listed(&mut m, |m, fx| m.deliver_physical(1, HOST_TIMER_VECTOR, fx));
        let at = 5_000 + m.profile.host_ns.wakeup;
        assert_eq!(fx, [scheduled(at, Event::HostDone { core: 1 })]);
        assert_eq!(m.cores[1].mode, Mode::Host);
    }

    #[test]
    fn dids_host_interrupts_are_nmis_that_exit() {
        let mut m = single(DesignKind::Did);
        running(&mut m, 0);
        let message = NmiMessage::SliceEnd;
        let fx = listed(&mut m, |m, fx| m.host_interrupt(1, message, fx));
        assert_eq!(fx, [exit_of(&m, 0, ExitReason::Nmi)]);
        assert_eq!(m.cores[1].nmi_mailbox, [message]);
    }
}
