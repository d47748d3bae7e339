//! Full ELI (mechanisms section 4): direct mode delivers and completes
//! assigned interrupts with no exit; to inject a virtual interrupt it
//! switches to injection mode (interrupts and EOIs exit) until that
//! interrupt's EOI, and delays the injection while a higher-priority
//! physical interrupt is in service.

use dirq_arch::iommu::Irte;
use dirq_arch::vectors::VectorSet;
use dirq_arch::vmcs::{Vmcs, PIN_EXTERNAL_INTERRUPT_EXITING};

use super::{
    direct_delivery_vmcs, msrs, no_higher_physical_in_service, Injection, Policy, PolicyKind,
    TimerPath, VfRoute, VirtualSignal, NOT_PRESENT_EXCEPTION,
};

pub struct Eli;

/// Injection mode: physical interrupts and EOIs exit.
fn set_injection_mode(vmcs: &mut Vmcs, on: bool) {
    set_interrupt_exiting(vmcs, on);
    vmcs.msr_write_bitmap.set_trapped(msrs::EOI, on);
}

/// While a virtual interrupt is pending or in service, physical interrupts
/// must exit: the physical LAPIC does not know the virtual one is in
/// service and would dispatch a lower vector inside its handler.
pub(super) fn set_interrupt_exiting(vmcs: &mut Vmcs, on: bool) {
    vmcs.set_pin_based(PIN_EXTERNAL_INTERRUPT_EXITING, on);
}

impl Policy for Eli {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Eli
    }

    fn initial_vmcs(&self) -> Vmcs {
        let mut vmcs = direct_delivery_vmcs();
        vmcs.exception_bitmap |= 1 << NOT_PRESENT_EXCEPTION;
        vmcs
    }

    fn vf_irte(&self, route: &VfRoute) -> Irte {
        route.direct_or_nmi()
    }

    fn injection(&self) -> Injection {
        Injection::Classic
    }

    fn virtual_signal(&self) -> VirtualSignal {
        VirtualSignal::KickAndInject
    }

    fn timer_path(&self) -> TimerPath {
        TimerPath::HostHrtimer
    }

    fn prepare_injection(&self, vmcs: &mut Vmcs, physical_isr: &VectorSet, vector: u8) -> bool {
        set_injection_mode(vmcs, true);
        // Delayed injections go in after the (now exiting) EOI.
        no_higher_physical_in_service(physical_isr, vector)
    }

    fn after_emulated_eoi(&self, vmcs: &mut Vmcs, virtual_outstanding: bool) {
        if !virtual_outstanding {
            set_injection_mode(vmcs, false);
        }
    }

    fn defers_preemption_in_handler(&self) -> bool {
        true
    }
}
