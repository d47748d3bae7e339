//! ELI delivery-only (mechanisms section 4): assigned interrupts reach the
//! guest directly through the shadow IDT, but every EOI still exits. Like
//! full ELI it makes physical interrupts exit while a virtual interrupt is
//! outstanding, and holds a virtual interrupt back below an in-service
//! physical one.

use dirq_arch::iommu::Irte;
use dirq_arch::vectors::VectorSet;
use dirq_arch::vmcs::Vmcs;

use super::eli::set_interrupt_exiting;
use super::{
    direct_delivery_vmcs, msrs, no_higher_physical_in_service, Injection, Policy, PolicyKind,
    TimerPath, VfRoute, VirtualSignal, NOT_PRESENT_EXCEPTION,
};

pub struct EliDelivery;

impl Policy for EliDelivery {
    fn kind(&self) -> PolicyKind {
        PolicyKind::EliDelivery
    }

    fn initial_vmcs(&self) -> Vmcs {
        let mut vmcs = direct_delivery_vmcs();
        vmcs.exception_bitmap |= 1 << NOT_PRESENT_EXCEPTION;
        vmcs.msr_write_bitmap.set_trapped(msrs::EOI, true);
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
        set_interrupt_exiting(vmcs, true);
        no_higher_physical_in_service(physical_isr, vector)
    }

    fn after_emulated_eoi(&self, vmcs: &mut Vmcs, virtual_outstanding: bool) {
        if !virtual_outstanding {
            set_interrupt_exiting(vmcs, false);
        }
    }

    fn defers_preemption_in_handler(&self) -> bool {
        true
    }
}
