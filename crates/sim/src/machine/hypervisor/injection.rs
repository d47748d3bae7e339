//! Virtual interrupts: how the hypervisor queues, signals and injects them,
//! and how the guest's EOI completes them, per the design's table.

use dirq_arch::lapic::Lapic;
use dirq_arch::vmcs::MsrWriteAction;

use super::{Hypervisor, Mode, NmiMessage, VcpuState};
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
        let completed = match self.vcpus[vcpu].hw.vmcs.msr_write(msrs::EOI) {
            MsrWriteAction::Exit => {
                let completed = self.emulate_eoi(vcpu, lapic);
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
