//! APICv (mechanisms section 3): posted virtual interrupts and EOI
//! virtualization; an assigned device's MSI without VT-d posting is still a
//! host interrupt (EXTINT) that the host then posts; timer writes exit.

use dirq_arch::iommu::Irte;
use dirq_arch::vmcs::{
    Vmcs, PIN_PROCESS_POSTED_INTERRUPTS, SECONDARY_VIRTUALIZE_X2APIC,
    SECONDARY_VIRTUAL_INTERRUPT_DELIVERY,
};

use super::{Injection, Policy, PolicyKind, TimerPath, VfRoute, VirtualSignal};

pub struct Apicv;

impl Policy for Apicv {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Apicv
    }

    fn initial_vmcs(&self) -> Vmcs {
        let mut vmcs = Vmcs::trap_everything();
        vmcs.set_pin_based(PIN_PROCESS_POSTED_INTERRUPTS, true);
        vmcs.set_secondary(SECONDARY_VIRTUALIZE_X2APIC, true);
        vmcs.set_secondary(SECONDARY_VIRTUAL_INTERRUPT_DELIVERY, true);
        vmcs
    }

    fn vf_irte(&self, route: &VfRoute) -> Irte {
        route.to_host()
    }

    fn injection(&self) -> Injection {
        Injection::Posted
    }

    fn virtual_signal(&self) -> VirtualSignal {
        VirtualSignal::Posted
    }

    fn timer_path(&self) -> TimerPath {
        TimerPath::HostHrtimer
    }
}
