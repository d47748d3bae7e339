//! Virtual interrupts: how the hypervisor queues, signals and injects them,
//! and how the guest's EOI completes them, per the design's table.

use super::*;

impl Machine {
    /// Virtual interrupts enter at VM entry.
    pub(super) fn prepare_entry(&mut self, vcpu: usize) {
        let core = self.vcpus[vcpu].home_core;
        let vm = self.vcpus[vcpu].vm;
        match self.design.injection {
            Injection::Posted => {
                let requests = self.vcpus[vcpu].pid.take_requests();
                for vector in requests.iter() {
                    if self.vcpus[vcpu].vlapic.accept(vector, TriggerMode::Edge)
                        == AcceptOutcome::Coalesced
                    {
                        self.merged(vm, vector);
                    }
                }
            }
            Injection::SelfIpi => {
                let pending = self.vcpus[vcpu].virtual_pending.take();
                for vector in pending.iter() {
                    // A self-IPI with the guest vector, sent with host
                    // interrupts disabled just before entry.
                    if self.cores[core].lapic.accept(vector, TriggerMode::Edge)
                        == AcceptOutcome::Coalesced
                    {
                        self.merged(vm, vector);
                    }
                }
            }
            Injection::Classic | Injection::ClassicUntracked => {
                let Some(vector) = self.vcpus[vcpu].vlapic.pending_vector() else {
                    return;
                };
                let v = &mut self.vcpus[vcpu];
                if let Some(mode) = self.design.injection_mode {
                    mode.set(&mut v.vmcs, true);
                    // A delayed injection goes in after the (now exiting) EOI.
                    if !InjectionMode::may_inject(self.cores[core].lapic.isr(), vector) {
                        return;
                    }
                }
                if v.interruptible {
                    v.injecting = v.vlapic.acknowledge();
                    if self.design.injection == Injection::ClassicUntracked {
                        v.vlapic.eoi();
                    }
                } else {
                    v.vmcs.set_primary(CPU_INTERRUPT_WINDOW_EXITING, true);
                }
            }
        }
    }

    /// The hypervisor queues a virtual interrupt for `vcpu`.
    pub(super) fn queue_virtual(&mut self, vcpu: usize, vector: u8, fx: &mut Effects) {
        let vm = self.vcpus[vcpu].vm;
        let merged = match self.design.injection {
            Injection::Classic | Injection::ClassicUntracked => {
                self.vcpus[vcpu].vlapic.accept(vector, TriggerMode::Edge)
                    == AcceptOutcome::Coalesced
            }
            Injection::Posted => {
                let already = self.vcpus[vcpu].pid.pir.contains(vector);
                self.vcpus[vcpu].pid.post(vector);
                already
            }
            Injection::SelfIpi => !self.vcpus[vcpu].virtual_pending.set(vector),
        };
        if merged {
            self.merged(vm, vector);
        }
        fx.push(Effect::Wake(vcpu));
    }

    /// A sender outside the vCPU's core signals a virtual interrupt.
    pub(super) fn signal_virtual(&mut self, vcpu: usize, vector: u8, fx: &mut Effects) {
        let core = self.vcpus[vcpu].home_core;
        let scheduled =
            self.cores[core].current == Some(vcpu) && self.vcpus[vcpu].state == VcpuState::Running;
        match self.design.virtual_signal {
            VirtualSignal::Native => fx.push(Effect::DeliverPhysical { core, vector }),
            VirtualSignal::KickAndInject => {
                self.queue_virtual(vcpu, vector, fx);
                if scheduled && self.cores[core].mode == Mode::Guest {
                    fx.push(Effect::HostInterrupt {
                        core,
                        message: NmiMessage::Kick,
                    });
                }
            }
            VirtualSignal::Posted => {
                let vm = self.vcpus[vcpu].vm;
                let already = self.vcpus[vcpu].pid.pir.contains(vector);
                let notification = self.vcpus[vcpu].pid.post(vector);
                if already {
                    self.merged(vm, vector);
                }
                if notification.is_some() && scheduled {
                    fx.push(Effect::DeliverPhysical {
                        core,
                        vector: POSTED_NOTIFICATION_VECTOR,
                    });
                }
                fx.push(Effect::Wake(vcpu));
            }
            VirtualSignal::DirectIpi => {
                if scheduled {
                    fx.push(Effect::DeliverPhysical { core, vector });
                } else {
                    self.queue_virtual(vcpu, vector, fx);
                }
            }
        }
    }

    /// The guest writes the x2APIC EOI MSR for the handler it is in.
    /// Whatever it completed, the guest may then take the next interrupt.
    pub(super) fn guest_eoi(&mut self, vcpu: usize, fx: &mut Effects) {
        let core = self.vcpus[vcpu].home_core;
        let believed = self.vcpus[vcpu]
            .frames
            .iter_mut()
            .rev()
            .find(|frame| !frame.eoi_done)
            .and_then(|frame| {
                frame.eoi_done = true;
                frame.vector
            });
        let completed = match self.vcpus[vcpu].vmcs.msr_write(msrs::EOI) {
            MsrWriteAction::Exit => {
                let injection_mode = self.vcpus[vcpu].vmcs.external_interrupt_exits();
                let completed = self.emulate_eoi(vcpu);
                // ELI's last virtual EOI switches back to direct mode.
                let switched = injection_mode && !self.vcpus[vcpu].vmcs.external_interrupt_exits();
                let switch_ns =
                    u64::from(switched) * self.design_work_ns(DesignWork::InjectionModeSwitch);
                let eoi_ns = self.profile.exit_cost(ExitReason::MsrWrite);
                fx.exit(vcpu, ExitReason::MsrWrite, eoi_ns + switch_ns);
                completed
            }
            MsrWriteAction::VirtualizedApicWrite => {
                let v = &mut self.vcpus[vcpu];
                let outcome = v.vmcs.virtualize_eoi(&mut v.vlapic);
                if outcome.exits {
                    self.list_exit(vcpu, ExitReason::Other, fx);
                }
                outcome.completed
            }
            _ => self.cores[core].lapic.eoi().completed,
        };
        self.checker.eoi(believed, completed);
        fx.push(Effect::TryDeliver(vcpu));
    }

    /// The hypervisor completes a trapped EOI: the guest completes its
    /// highest-priority in-service interrupt, which is in the software
    /// LAPIC or, for directly delivered ones, in the physical LAPIC.
    pub(super) fn emulate_eoi(&mut self, vcpu: usize) -> Option<u8> {
        let core = self.vcpus[vcpu].home_core;
        let virtual_top = self.vcpus[vcpu].vlapic.isr().highest();
        let physical_top = self.cores[core]
            .lapic
            .isr()
            .highest()
            .filter(|&v| is_guest_vector(v));
        let completed = if physical_top > virtual_top {
            self.cores[core].lapic.eoi().completed
        } else {
            self.vcpus[vcpu].vlapic.eoi().completed
        };
        let v = &mut self.vcpus[vcpu];
        let outstanding = !v.vlapic.isr().is_empty() || !v.vlapic.irr().is_empty();
        if let (Some(mode), false) = (self.design.injection_mode, outstanding) {
            // The last virtual interrupt is complete: back to direct mode.
            mode.set(&mut v.vmcs, false);
        }
        completed
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{exit_of, in_handler, listed, running, single};
    use super::*;
    use crate::metrics::Invariant;
    use crate::policy::PolicyKind;

    /// The running vCPU 0 is in the handler of a classically injected
    /// `vector`: in service in its software LAPIC.
    fn in_injected_handler(m: &mut Machine, vector: u8) {
        in_handler(m, 0, HALT_LOOP, 0, vector);
        m.vcpus[0].vlapic.accept(vector, TriggerMode::Edge);
        m.vcpus[0].vlapic.acknowledge();
    }

    #[test]
    fn classic_injection_queues_in_the_software_lapic_and_merges_a_second() {
        let mut m = single(PolicyKind::Vanilla);
        m.checker.raise(0, GUEST_VIRTIO_VECTOR);
        m.checker.raise(0, GUEST_VIRTIO_VECTOR);
        let fx = listed(&mut m, |m, fx| {
            m.queue_virtual(0, GUEST_VIRTIO_VECTOR, fx);
            m.queue_virtual(0, GUEST_VIRTIO_VECTOR, fx);
        });
        assert_eq!(fx, [Effect::Wake(0), Effect::Wake(0)]);
        assert!(m.vcpus[0].vlapic.irr().contains(GUEST_VIRTIO_VECTOR));
        assert_eq!(m.checker.coalesced, 1);
    }

    #[test]
    fn did_signals_a_running_vcpu_by_ipi_and_queues_for_a_descheduled_one() {
        let mut m = single(PolicyKind::Did);
        running(&mut m, 0);
        let vector = GUEST_IPI_VECTOR;
        let fx = listed(&mut m, |m, fx| m.signal_virtual(0, vector, fx));
        assert_eq!(fx, [Effect::DeliverPhysical { core: 1, vector }]);
        m.cores[1].current = None;
        let fx = listed(&mut m, |m, fx| m.signal_virtual(0, vector, fx));
        assert_eq!(fx, [Effect::Wake(0)]);
        assert!(m.vcpus[0].virtual_pending.contains(vector));
    }

    #[test]
    fn did_injects_queued_interrupts_as_self_ipis_at_entry() {
        let mut m = single(PolicyKind::Did);
        m.vcpus[0].virtual_pending.set(GUEST_TIMER_VECTOR);
        m.prepare_entry(0);
        assert!(m.vcpus[0].virtual_pending.is_empty());
        assert!(m.cores[1].lapic.irr().contains(GUEST_TIMER_VECTOR));
    }

    #[test]
    fn a_trapped_eoi_exits_and_completes_the_software_lapics_interrupt() {
        let mut m = single(PolicyKind::Vanilla);
        in_injected_handler(&mut m, GUEST_VF_VECTOR);
        let fx = listed(&mut m, |m, fx| m.guest_eoi(0, fx));
        assert_eq!(
            fx,
            [exit_of(&m, 0, ExitReason::MsrWrite), Effect::TryDeliver(0)]
        );
        assert!(m.vcpus[0].vlapic.isr().is_empty());
        assert!(m.checker.violations.iter().all(|&count| count == 0));
    }

    #[test]
    fn a_passed_through_eoi_for_a_classic_injection_finds_nothing_in_service() {
        let mut m = single(PolicyKind::NaiveDirectEoi);
        in_injected_handler(&mut m, GUEST_VF_VECTOR);
        let fx = listed(&mut m, |m, fx| m.guest_eoi(0, fx));
        assert_eq!(fx, [Effect::TryDeliver(0)]);
        assert_eq!(m.checker.violations_of(Invariant::EoiNothingInService), 1);
    }
}
