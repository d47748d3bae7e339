//! Virtual interrupts: how the hypervisor queues, signals and injects them,
//! and how the guest's EOI completes them, per the design's table.

use super::*;

impl Machine {
    /// Virtual interrupts enter at VM entry, as the design injects them.
    pub(super) fn prepare_entry(&mut self, vcpu: usize) {
        let v = &mut self.vcpus[vcpu];
        let merged = self.design.injection.prepare_entry(
            &mut v.injection,
            &mut v.hw,
            &mut self.cores[v.home_core].lapic,
            v.interruptible,
        );
        self.checker.entered(vcpu, &v.hw.pid.pir);
        let vm = v.vm;
        for vector in merged.iter() {
            self.merged(vm, vector);
        }
    }

    /// The host work `vcpu`'s coming entry still has to do, once.
    pub(super) fn entry_work_due(&mut self, vcpu: usize) -> Option<u64> {
        let v = &mut self.vcpus[vcpu];
        let costs = &self.profile.design_work_ns;
        self.design
            .injection
            .entry_work_due(&mut v.injection, &v.hw, costs)
    }

    /// The hypervisor queues a virtual interrupt for `vcpu`.
    pub(super) fn queue_virtual(&mut self, vcpu: usize, vector: u8, fx: &mut Effects) {
        let v = &mut self.vcpus[vcpu];
        if self
            .design
            .injection
            .queue(&mut v.injection, &mut v.hw, vector)
        {
            let vm = v.vm;
            self.merged(vm, vector);
        }
        fx.push(Effect::Wake(vcpu));
    }

    /// A sender outside the vCPU's core signals a virtual interrupt.
    pub(super) fn signal_virtual(&mut self, vcpu: usize, vector: u8, fx: &mut Effects) {
        let core = self.vcpus[vcpu].home_core;
        let scheduled =
            self.cores[core].current == Some(vcpu) && self.vcpus[vcpu].state == VcpuState::Running;
        let whereabouts = Whereabouts {
            scheduled,
            in_guest_mode: self.cores[core].mode == Mode::Guest,
        };
        let pid = &mut self.vcpus[vcpu].hw.pid;
        match self.design.virtual_signal.signal(pid, vector, whereabouts) {
            Signal::Physical => fx.push(Effect::DeliverPhysical { core, vector }),
            Signal::Queue { kick } => {
                fx.push(Effect::QueueVirtual { vcpu, vector });
                if kick {
                    fx.push(Effect::HostInterrupt {
                        core,
                        message: NmiMessage::Kick,
                    });
                }
            }
            Signal::Posted { merged, notify } => {
                if merged {
                    let vm = self.vcpus[vcpu].vm;
                    self.merged(vm, vector);
                }
                if notify {
                    fx.push(Effect::DeliverPhysical {
                        core,
                        vector: POSTED_NOTIFICATION_VECTOR,
                    });
                }
                fx.push(Effect::Wake(vcpu));
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
        let completed = match self.vcpus[vcpu].hw.vmcs.msr_write(msrs::EOI) {
            MsrWriteAction::Exit => {
                let completed = self.emulate_eoi(vcpu);
                // ELI's last virtual EOI switches back to direct mode.
                let switch_ns = self
                    .design
                    .injection
                    .virtual_eoi_done(&mut self.vcpus[vcpu].hw, &self.profile.design_work_ns);
                let eoi_ns = self.profile.exit_cost(ExitReason::MsrWrite);
                fx.exit(vcpu, ExitReason::MsrWrite, eoi_ns + switch_ns);
                completed
            }
            MsrWriteAction::VirtualizedApicWrite => {
                let v = &mut self.vcpus[vcpu];
                let outcome = v.hw.vmcs.virtualize_eoi(&mut v.hw.vlapic);
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
        let virtual_top = self.vcpus[vcpu].hw.vlapic.isr().highest();
        let physical_top = self.cores[core]
            .lapic
            .isr()
            .highest()
            .filter(|&v| is_guest_vector(v));
        if physical_top > virtual_top {
            self.cores[core].lapic.eoi().completed
        } else {
            self.vcpus[vcpu].hw.vlapic.eoi().completed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{exit_of, in_handler, listed, running, single};
    use super::super::guest::HALT_LOOP;
    use super::*;
    use crate::design::DesignKind;
    use crate::metrics::Invariant;

    /// The running vCPU 0 is in the handler of a classically injected
    /// `vector`: in service in its software LAPIC.
    fn in_injected_handler(m: &mut Machine, vector: u8) {
        in_handler(m, 0, HALT_LOOP, 0, vector);
        m.vcpus[0].hw.vlapic.accept(vector, TriggerMode::Edge);
        m.vcpus[0].hw.vlapic.acknowledge();
    }

    #[test]
    fn classic_injection_queues_in_the_software_lapic_and_merges_a_second() {
        let mut m = single(DesignKind::Vanilla);
        m.checker.raise(0, GUEST_VIRTIO_VECTOR);
        m.checker.raise(0, GUEST_VIRTIO_VECTOR);
        let fx = listed(&mut m, |m, fx| {
            m.queue_virtual(0, GUEST_VIRTIO_VECTOR, fx);
            m.queue_virtual(0, GUEST_VIRTIO_VECTOR, fx);
        });
        assert_eq!(fx, [Effect::Wake(0), Effect::Wake(0)]);
        assert!(m.vcpus[0].hw.vlapic.irr().contains(GUEST_VIRTIO_VECTOR));
        assert_eq!(m.checker.coalesced, 1);
    }

    #[test]
    fn did_signals_a_running_vcpu_by_ipi_and_queues_for_a_descheduled_one() {
        let mut m = single(DesignKind::Did);
        running(&mut m, 0);
        let vector = GUEST_IPI_VECTOR;
        let fx = listed(&mut m, |m, fx| m.signal_virtual(0, vector, fx));
        assert_eq!(fx, [Effect::DeliverPhysical { core: 1, vector }]);
        m.cores[1].current = None;
        let fx = listed(&mut m, |m, fx| m.signal_virtual(0, vector, fx));
        assert_eq!(fx, [Effect::QueueVirtual { vcpu: 0, vector }]);
    }

    #[test]
    fn did_injects_queued_interrupts_as_self_ipis_at_entry() {
        let mut m = single(DesignKind::Did);
        listed(&mut m, |m, fx| m.queue_virtual(0, GUEST_TIMER_VECTOR, fx));
        m.prepare_entry(0);
        assert!(!m.vcpus[0].injection.has_queued());
        assert!(m.cores[1].lapic.irr().contains(GUEST_TIMER_VECTOR));
    }

    #[test]
    fn a_trapped_eoi_exits_and_completes_the_software_lapics_interrupt() {
        let mut m = single(DesignKind::Vanilla);
        in_injected_handler(&mut m, GUEST_VF_VECTOR);
        let fx = listed(&mut m, |m, fx| m.guest_eoi(0, fx));
        assert_eq!(
            fx,
            [exit_of(&m, 0, ExitReason::MsrWrite), Effect::TryDeliver(0)]
        );
        assert!(m.vcpus[0].hw.vlapic.isr().is_empty());
        assert!(m.checker.violations.iter().all(|&count| count == 0));
    }

    #[test]
    fn a_passed_through_eoi_for_a_classic_injection_finds_nothing_in_service() {
        let mut m = single(DesignKind::NaiveDirectEoi);
        in_injected_handler(&mut m, GUEST_VF_VECTOR);
        let fx = listed(&mut m, |m, fx| m.guest_eoi(0, fx));
        assert_eq!(fx, [Effect::TryDeliver(0)]);
        assert_eq!(m.checker.violations_of(Invariant::EoiNothingInService), 1);
    }

    #[test]
    fn eli_pays_the_switch_out_of_injection_mode_on_the_last_eoi() {
        let mut m = single(DesignKind::Eli);
        running(&mut m, 0);
        m.vcpus[0]
            .hw
            .vlapic
            .accept(GUEST_VIRTIO_VECTOR, TriggerMode::Edge);
        let switch = m.profile.design_work_ns.injection_mode_switch;
        assert_eq!(m.entry_work_due(0), Some(switch));
        m.prepare_entry(0);
        assert!(m.vcpus[0].hw.vmcs.external_interrupt_exits());
        // The handler's EOI exits, completes it and switches back: the
        // exit's service carries the switch.
        let fx = listed(&mut m, |m, fx| m.guest_eoi(0, fx));
        let eoi = m.profile.exit_cost(ExitReason::MsrWrite);
        assert!(fx.contains(&Effect::Exit {
            vcpu: 0,
            reason: ExitReason::MsrWrite,
            service_ns: eoi + switch
        }));
        assert!(!m.vcpus[0].hw.vmcs.external_interrupt_exits());
    }
}
