//! Virtual interrupts: how the hypervisor queues, signals and injects them,
//! and how the guest's EOI completes them, per the design's table.

use dirq_arch::lapic::Lapic;
use dirq_arch::vmcs::MsrWriteAction;

use super::{Hypervisor, Mode, NmiMessage, VcpuState};
use crate::design::mechanism::pv_eoi::GuestEoiWrite;
use crate::design::mechanism::signal::{Signal, Whereabouts};
use crate::design::msrs;
use crate::machine::effects::{Effect, Effects};
use crate::machine::ledger::Ledger;
use crate::machine::{is_guest_vector, POSTED_NOTIFICATION_VECTOR};
use crate::metrics::ExitReason;

impl Hypervisor {
    /// Virtual interrupts enter at VM entry, as the design injects them;
    /// `interruptible`: the guest takes interrupts; `lapic` is the core's.
    pub(in crate::machine) fn prepare_entry(
        &mut self,
        vcpu: usize,
        interruptible: bool,
        lapic: &mut Lapic,
        ledger: &mut Ledger,
    ) {
        let v = &mut self.vcpus[vcpu];
        let merged =
            self.design
                .injection
                .prepare_entry(&mut v.injection, &mut v.hw, lapic, interruptible);
        ledger.checker.entered(vcpu, &v.hw.pid.pir);
        for vector in merged.iter() {
            ledger.merged(v.vm, vector);
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
    pub(in crate::machine) fn queue_virtual(
        &mut self,
        vcpu: usize,
        vector: u8,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let v = &mut self.vcpus[vcpu];
        if self
            .design
            .injection
            .queue(&mut v.injection, &mut v.hw, vector)
        {
            ledger.merged(v.vm, vector);
        }
        fx.push(Effect::Wake(vcpu));
    }

    /// A sender outside the vCPU's core signals a virtual interrupt.
    pub(in crate::machine) fn signal_virtual(
        &mut self,
        vcpu: usize,
        vector: u8,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
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
                    ledger.merged(self.vcpus[vcpu].vm, vector);
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

    /// The guest writes the x2APIC EOI MSR for the handler it believes it
    /// completes (`believed`); `lapic` is its core's. The checker hears
    /// what it completed.
    pub(in crate::machine) fn guest_eoi(
        &mut self,
        vcpu: usize,
        believed: Option<u8>,
        lapic: &mut Lapic,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let v = &mut self.vcpus[vcpu];
        if v.pv_eoi.guest_eoi() == GuestEoiWrite::Skipped {
            // KVM completes it at the next exit: what it will complete.
            ledger.counters.pv_eoi_skips += 1;
            ledger.checker.eoi(believed, v.hw.vlapic.isr().highest());
            return;
        }
        let completed = match v.hw.vmcs.msr_write(msrs::EOI) {
            MsrWriteAction::Exit => {
                let completed = self.emulate_eoi(vcpu, lapic);
                self.vcpus[vcpu].pv_eoi.eoi_emulated();
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
            _ => lapic.eoi().completed,
        };
        ledger.checker.eoi(believed, completed);
    }

    /// The hypervisor completes a trapped EOI: the guest completes its
    /// highest-priority in-service interrupt, which is in the software
    /// LAPIC or, for directly delivered ones, in the physical `lapic`.
    pub(super) fn emulate_eoi(&mut self, vcpu: usize, lapic: &mut Lapic) -> Option<u8> {
        let virtual_top = self.vcpus[vcpu].hw.vlapic.isr().highest();
        let physical_top = lapic.isr().highest().filter(|&v| is_guest_vector(v));
        if physical_top > virtual_top {
            lapic.eoi().completed
        } else {
            self.vcpus[vcpu].hw.vlapic.eoi().completed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::design::DesignKind;
    use crate::machine::fixture::{listed, scheduled, Host, Setting};
    use crate::machine::{
        Event, GUEST_IPI_VECTOR, GUEST_TIMER_VECTOR, GUEST_VF_VECTOR, GUEST_VIRTIO_VECTOR,
    };
    use crate::metrics::Invariant;

    /// The host queues `vector` for vCPU 0 after an exit, then enters
    /// with it: the vector the entry injects.
    fn entered_with(host: &mut Host, vector: u8) -> Option<u8> {
        host.ledger.raise(0, vector, 0);
        host.exits(0, ExitReason::ExternalInterrupt);
        host.call(1, |hv, _, ledger, _, fx| {
            hv.queue_virtual(0, vector, ledger, fx)
        });
        host.call(1, |hv, lapic, ledger, _, _| {
            hv.prepare_entry(0, true, lapic, ledger)
        });
        let (_, injected) = host.hypervisor.enter_guest(1, 0, &mut host.ledger)?;
        injected
    }

    fn eoi(host: &mut Host, vector: u8) -> Vec<Effect> {
        host.call(1, |hv, lapic, ledger, _, fx| {
            hv.guest_eoi(0, Some(vector), lapic, ledger, fx)
        })
        .1
    }

    #[test]
    fn classic_injection_queues_in_the_software_lapic_and_merges_a_second() {
        let mut host = Setting::single(DesignKind::Vanilla).host();
        host.ledger.raise(0, GUEST_VIRTIO_VECTOR, 0);
        host.ledger.raise(0, GUEST_VIRTIO_VECTOR, 0);
        let ((), fx) = host.call(1, |hv, _, ledger, _, fx| {
            hv.queue_virtual(0, GUEST_VIRTIO_VECTOR, ledger, fx);
            hv.queue_virtual(0, GUEST_VIRTIO_VECTOR, ledger, fx);
        });
        assert_eq!(fx, [Effect::Wake(0), Effect::Wake(0)]);
        assert_eq!(host.ledger.checker.coalesced, 1);
    }

    #[test]
    fn did_signals_a_running_vcpu_by_ipi() {
        let mut host = Setting::single(DesignKind::Did).host();
        let vector = GUEST_IPI_VECTOR;
        let ((), fx) = host.call(1, |hv, _, ledger, _, fx| {
            hv.signal_virtual(0, vector, ledger, fx)
        });
        assert_eq!(fx, [Effect::DeliverPhysical { core: 1, vector }]);
    }

    #[test]
    fn did_injects_queued_interrupts_as_self_ipis_at_entry() {
        let mut host = Setting::single(DesignKind::Did).host();
        assert_eq!(entered_with(&mut host, GUEST_TIMER_VECTOR), None);
        assert!(host.platform.lapic(1).irr().contains(GUEST_TIMER_VECTOR));
    }

    #[test]
    fn a_trapped_eoi_exits_and_completes_the_injected_interrupt() {
        let mut host = Setting::single(DesignKind::Vanilla).host();
        let vector = GUEST_VF_VECTOR;
        assert_eq!(entered_with(&mut host, vector), Some(vector));
        assert_eq!(
            eoi(&mut host, vector),
            [host.exit_of(0, ExitReason::MsrWrite)]
        );
        let checker = &host.ledger.checker;
        assert!(checker.violations.iter().all(|&count| count == 0));
    }

    #[test]
    fn a_passed_through_eoi_for_a_classic_injection_finds_nothing_in_service() {
        let mut host = Setting::single(DesignKind::NaiveDirectEoi).host();
        let vector = GUEST_VF_VECTOR;
        assert_eq!(entered_with(&mut host, vector), Some(vector));
        assert!(eoi(&mut host, vector).is_empty());
        let checker = &host.ledger.checker;
        assert_eq!(checker.violations_of(Invariant::EoiNothingInService), 1);
    }

    #[test]
    fn eli_pays_the_switch_into_injection_mode_and_back_on_the_last_eoi() {
        let setting = Setting::single(DesignKind::Eli);
        let mut host = setting.host();
        let vector = GUEST_VIRTIO_VECTOR;
        host.exits(0, ExitReason::ExternalInterrupt);
        host.call(1, |hv, _, ledger, _, fx| {
            hv.queue_virtual(0, vector, ledger, fx)
        });
        let (hypervisor, platform, ledger) =
            (&mut host.hypervisor, &mut host.platform, &mut host.ledger);
        let fx = listed(|fx| hypervisor.finish_host_work(1, 0, 0, platform, ledger, fx));
        let switch = setting.profile.design_work_ns.injection_mode_switch;
        assert!(switch > 0);
        assert_eq!(fx, [scheduled(switch, Event::HostDone { core: 1 })]);
        host.call(1, |hv, lapic, ledger, _, _| {
            hv.prepare_entry(0, true, lapic, ledger)
        });
        let entered = host.hypervisor.enter_guest(1, 0, &mut host.ledger);
        assert_eq!(entered, Some((0, Some(vector))));
        // The handler's EOI exits, completes it and switches back: the
        // exit's service carries the switch.
        let eoi_ns = setting.profile.exit_cost(ExitReason::MsrWrite);
        let exit = Effect::Exit {
            vcpu: 0,
            reason: ExitReason::MsrWrite,
            service_ns: eoi_ns + switch,
        };
        assert_eq!(eoi(&mut host, vector), [exit]);
    }
}
