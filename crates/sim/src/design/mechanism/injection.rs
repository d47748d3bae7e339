//! Injection: how a virtual interrupt the hypervisor queued for a vCPU
//! enters the guest at VM entry, the host work that costs, and (for ELI)
//! the injection mode around it (docs/mechanisms.md sections 2 to 5).
//!
//! Per vCPU it owns DID's queue of self-IPIs, the vector acknowledged for
//! event injection, and whether the coming entry's work is paid.

use dirq_arch::interrupt::TriggerMode;
use dirq_arch::lapic::{AcceptOutcome, Lapic};
use dirq_arch::vectors::VectorSet;
use dirq_arch::vmcs::{Vmcs, CPU_INTERRUPT_WINDOW_EXITING, PIN_EXTERNAL_INTERRUPT_EXITING};

use super::VcpuHardware;
use crate::design::msrs;
use crate::profile::DesignWorkNs;

/// How a virtual interrupt queued for a vCPU enters the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Injection {
    /// KVM's software LAPIC and VMCS event injection at VM entry, with an
    /// interrupt-window exit when the guest has interrupts disabled; ELI
    /// switches to its injection `mode` meanwhile.
    Classic { mode: Option<InjectionMode> },
    /// Event injection with no software ISR: the guest's EOI goes to the
    /// physical LAPIC, the hypervisor never sees it, so it must treat an
    /// injected interrupt as complete at once.
    ClassicUntracked,
    /// Posted-interrupt descriptor merged into the virtual-APIC page;
    /// APICv delivers it without an exit (SDM 29.6, 29.2).
    Posted,
    /// DID: a self-IPI with the guest vector just before VM entry, so the
    /// physical LAPIC delivers it and its EOI can go straight to hardware.
    SelfIpi,
}

/// ELI's injection mode (docs/mechanisms.md section 4): while a virtual
/// interrupt is pending or in service, physical interrupts exit (the
/// physical LAPIC does not know the virtual one is in service and would
/// dispatch a lower vector inside its handler), and an injection waits
/// while a physical interrupt of a higher class is in service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InjectionMode {
    /// Full ELI also traps the EOI in injection mode (delivery-only ELI
    /// traps it always).
    pub traps_eoi: bool,
}

impl InjectionMode {
    /// Switches injection mode on or off.
    pub fn set(&self, vmcs: &mut Vmcs, on: bool) {
        vmcs.set_pin_based(PIN_EXTERNAL_INTERRUPT_EXITING, on);
        if self.traps_eoi {
            vmcs.msr_write_bitmap.set_trapped(msrs::EOI, on);
        }
    }

    /// Whether `vector` may be injected now: no physical interrupt of a
    /// higher class is in service.
    pub fn may_inject(physical_isr: &VectorSet, vector: u8) -> bool {
        physical_isr
            .highest()
            .is_none_or(|in_service| in_service >> 4 < vector >> 4)
    }
}

/// One vCPU's injection state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct InjectionState {
    /// DID's virtual interrupts awaiting their self-IPI at entry.
    self_ipis: VectorSet,
    /// A vector acknowledged from the software LAPIC, injected at entry.
    injecting: Option<u8>,
    /// The host has spent the coming entry's work.
    entry_work_paid: bool,
}

impl InjectionState {
    /// Whether a queued interrupt waits for the next entry.
    pub(crate) fn has_queued(&self) -> bool {
        !self.self_ipis.is_empty()
    }

    /// Whether `vector` is held here (queued or about to be injected).
    pub(crate) fn holds(&self, vector: u8) -> bool {
        self.self_ipis.contains(vector) || self.injecting == Some(vector)
    }

    /// The vCPU entered: the next entry's work is still to pay, and the
    /// vector to inject now, if any.
    pub(crate) fn entered(&mut self) -> Option<u8> {
        self.entry_work_paid = false;
        self.injecting.take()
    }
}

impl Injection {
    /// The hypervisor queues `vector`. Returns whether it merged with one
    /// already queued (the structure holds one instance per vector).
    pub(crate) fn queue(
        self,
        state: &mut InjectionState,
        hw: &mut VcpuHardware,
        vector: u8,
    ) -> bool {
        match self {
            Injection::Classic { .. } | Injection::ClassicUntracked => {
                hw.vlapic.accept(vector, TriggerMode::Edge) == AcceptOutcome::Coalesced
            }
            Injection::Posted => {
                let already = hw.pid.pir.contains(vector);
                hw.pid.post(vector);
                already
            }
            Injection::SelfIpi => !state.self_ipis.set(vector),
        }
    }

    /// Just before VM entry: moves what is queued where the guest takes
    /// it (the virtual-APIC page, the physical LAPIC's IRR, or the VMCS's
    /// event injection). Returns the vectors that merged on the way.
    pub(crate) fn prepare_entry(
        self,
        state: &mut InjectionState,
        hw: &mut VcpuHardware,
        physical: &mut Lapic,
        interruptible: bool,
    ) -> VectorSet {
        let mut merged = VectorSet::EMPTY;
        match self {
            Injection::Posted => {
                for vector in hw.pid.take_requests().iter() {
                    if hw.vlapic.accept(vector, TriggerMode::Edge) == AcceptOutcome::Coalesced {
                        merged.set(vector);
                    }
                }
            }
            Injection::SelfIpi => {
                // Self-IPIs with the guest vectors, sent with host
                // interrupts disabled just before entry.
                for vector in state.self_ipis.take().iter() {
                    if physical.accept(vector, TriggerMode::Edge) == AcceptOutcome::Coalesced {
                        merged.set(vector);
                    }
                }
            }
            Injection::Classic { mode } => {
                Self::inject_classic(state, hw, physical, interruptible, mode, false)
            }
            Injection::ClassicUntracked => {
                Self::inject_classic(state, hw, physical, interruptible, None, true)
            }
        }
        merged
    }

    fn inject_classic(
        state: &mut InjectionState,
        hw: &mut VcpuHardware,
        physical: &Lapic,
        interruptible: bool,
        mode: Option<InjectionMode>,
        untracked: bool,
    ) {
        let Some(vector) = hw.vlapic.pending_vector() else {
            return;
        };
        if let Some(mode) = mode {
            mode.set(&mut hw.vmcs, true);
            // A delayed injection goes in after the (now exiting) EOI.
            if !InjectionMode::may_inject(physical.isr(), vector) {
                return;
            }
        }
        if interruptible {
            state.injecting = hw.vlapic.acknowledge();
            if untracked {
                hw.vlapic.eoi();
            }
        } else {
            hw.vmcs.set_primary(CPU_INTERRUPT_WINDOW_EXITING, true);
        }
    }

    /// The host work the coming entry does before it enters: one self-IPI
    /// per virtual interrupt DID injects, or ELI's switch to injection
    /// mode for a virtual interrupt to inject.
    pub(crate) fn entry_work_ns(
        self,
        state: &InjectionState,
        hw: &VcpuHardware,
        costs: &DesignWorkNs,
    ) -> u64 {
        match self {
            Injection::SelfIpi => u64::from(state.self_ipis.len()) * costs.self_ipi,
            Injection::Classic { mode: Some(_) } => {
                let switches =
                    hw.vlapic.pending_vector().is_some() && !hw.vmcs.external_interrupt_exits();
                u64::from(switches) * costs.injection_mode_switch
            }
            _ => 0,
        }
    }

    /// Whether the host must still do the coming entry's work before
    /// entering; the first call with work to do says so and marks it paid,
    /// so the host is busy for it once and then enters.
    pub(crate) fn entry_work_due(
        self,
        state: &mut InjectionState,
        hw: &VcpuHardware,
        costs: &DesignWorkNs,
    ) -> Option<u64> {
        if state.entry_work_paid {
            return None;
        }
        let ns = self.entry_work_ns(state, hw, costs);
        if ns == 0 {
            return None;
        }
        state.entry_work_paid = true;
        Some(ns)
    }

    /// After the hypervisor completed a virtual EOI: ELI's last one
    /// switches back to direct mode. Returns the host work that costs.
    pub(crate) fn virtual_eoi_done(self, hw: &mut VcpuHardware, costs: &DesignWorkNs) -> u64 {
        let Injection::Classic { mode: Some(mode) } = self else {
            return 0;
        };
        let outstanding = !hw.vlapic.isr().is_empty() || !hw.vlapic.irr().is_empty();
        if outstanding || !hw.vmcs.external_interrupt_exits() {
            return 0;
        }
        mode.set(&mut hw.vmcs, false);
        costs.injection_mode_switch
    }
}

#[cfg(test)]
mod tests {
    use super::super::enabled_lapic;
    use super::*;
    use dirq_arch::posted::PostedInterruptDescriptor;

    const VECTOR: u8 = 0x51;

    fn hardware() -> VcpuHardware {
        VcpuHardware {
            vlapic: enabled_lapic(),
            vmcs: Vmcs::trap_everything(),
            pid: PostedInterruptDescriptor::new(0xF2, 0),
        }
    }

    fn costs() -> DesignWorkNs {
        DesignWorkNs {
            irte_rewrite: 1,
            self_ipi: 10,
            timer_migration: 100,
            injection_mode_switch: 1000,
            hrtimer_callback: 0,
            vcpu_kick: 0,
            timer_injection: 0,
        }
    }

    const ELI: Injection = Injection::Classic {
        mode: Some(InjectionMode { traps_eoi: true }),
    };

    #[test]
    fn an_injection_waits_below_a_higher_physical_class() {
        let isr: VectorSet = [0x61].into_iter().collect();
        assert!(!InjectionMode::may_inject(&isr, 0x51));
        assert!(!InjectionMode::may_inject(&isr, 0x6F));
        assert!(InjectionMode::may_inject(&isr, 0x71));
        assert!(InjectionMode::may_inject(&VectorSet::EMPTY, 0x20));
    }

    #[test]
    fn self_ipis_queue_once_per_vector_and_cost_one_ipi_each() {
        let (mut state, mut hw) = (InjectionState::default(), hardware());
        assert!(!Injection::SelfIpi.queue(&mut state, &mut hw, VECTOR));
        assert!(
            Injection::SelfIpi.queue(&mut state, &mut hw, VECTOR),
            "merged"
        );
        assert!(!Injection::SelfIpi.queue(&mut state, &mut hw, 0xEC));
        assert_eq!(Injection::SelfIpi.entry_work_ns(&state, &hw, &costs()), 20);
        let due = Injection::SelfIpi.entry_work_due(&mut state, &hw, &costs());
        assert_eq!(due, Some(20));
        assert_eq!(
            Injection::SelfIpi.entry_work_due(&mut state, &hw, &costs()),
            None,
            "paid"
        );
        let mut lapic = enabled_lapic();
        let merged = Injection::SelfIpi.prepare_entry(&mut state, &mut hw, &mut lapic, true);
        assert!(merged.is_empty());
        assert!(lapic.irr().contains(VECTOR) && lapic.irr().contains(0xEC));
        assert!(!state.has_queued());
        assert_eq!(state.entered(), None);
        assert!(!state.entry_work_paid);
    }

    #[test]
    fn posted_requests_merge_into_the_virtual_apic_page_at_entry() {
        let (mut state, mut hw) = (InjectionState::default(), hardware());
        hw.vlapic.accept(VECTOR, TriggerMode::Edge);
        assert!(!Injection::Posted.queue(&mut state, &mut hw, VECTOR));
        assert!(Injection::Posted.queue(&mut state, &mut hw, VECTOR));
        let merged =
            Injection::Posted.prepare_entry(&mut state, &mut hw, &mut enabled_lapic(), true);
        assert_eq!(
            merged.iter().collect::<Vec<_>>(),
            [VECTOR],
            "already in the IRR"
        );
        assert!(hw.pid.pir.is_empty());
    }

    #[test]
    fn classic_injection_acknowledges_or_asks_for_an_interrupt_window() {
        let vanilla = Injection::Classic { mode: None };
        let (mut state, mut hw) = (InjectionState::default(), hardware());
        vanilla.queue(&mut state, &mut hw, VECTOR);
        vanilla.prepare_entry(&mut state, &mut hw, &mut enabled_lapic(), false);
        assert!(hw.vmcs.primary & CPU_INTERRUPT_WINDOW_EXITING != 0);
        assert!(!state.holds(VECTOR));
        vanilla.prepare_entry(&mut state, &mut hw, &mut enabled_lapic(), true);
        assert!(state.holds(VECTOR));
        assert_eq!(state.entered(), Some(VECTOR));
        assert!(hw.vlapic.isr().contains(VECTOR), "tracked until the EOI");
    }

    #[test]
    fn an_untracked_injection_completes_in_the_software_lapic_at_once() {
        let (mut state, mut hw) = (InjectionState::default(), hardware());
        let naive = Injection::ClassicUntracked;
        naive.queue(&mut state, &mut hw, VECTOR);
        naive.prepare_entry(&mut state, &mut hw, &mut enabled_lapic(), true);
        assert_eq!(state.entered(), Some(VECTOR));
        assert!(hw.vlapic.isr().is_empty());
    }

    #[test]
    fn eli_pays_the_switch_in_and_out_of_injection_mode_once_each() {
        let (mut state, mut hw) = (InjectionState::default(), hardware());
        hw.vmcs.set_pin_based(PIN_EXTERNAL_INTERRUPT_EXITING, false);
        ELI.queue(&mut state, &mut hw, VECTOR);
        assert_eq!(ELI.entry_work_ns(&state, &hw, &costs()), 1000);
        ELI.prepare_entry(&mut state, &mut hw, &mut enabled_lapic(), true);
        assert!(hw.vmcs.external_interrupt_exits());
        assert_eq!(
            ELI.entry_work_ns(&state, &hw, &costs()),
            0,
            "already in the mode"
        );
        assert_eq!(
            ELI.virtual_eoi_done(&mut hw, &costs()),
            0,
            "still in service"
        );
        hw.vlapic.eoi();
        assert_eq!(ELI.virtual_eoi_done(&mut hw, &costs()), 1000);
        assert!(!hw.vmcs.external_interrupt_exits());
    }

    #[test]
    fn an_eli_injection_waits_for_a_higher_physical_handler() {
        let (mut state, mut hw) = (InjectionState::default(), hardware());
        let mut lapic = enabled_lapic();
        lapic.accept(0x61, TriggerMode::Edge);
        lapic.acknowledge();
        ELI.queue(&mut state, &mut hw, VECTOR);
        ELI.prepare_entry(&mut state, &mut hw, &mut lapic, true);
        assert!(hw.vmcs.external_interrupt_exits(), "in injection mode");
        assert!(!state.holds(VECTOR), "not injected below 0x61's class");
    }
}
