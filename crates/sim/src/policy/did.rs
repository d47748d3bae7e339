//! DID (mechanisms section 5): no external-interrupt exiting; VF IRTEs
//! follow the VM (fixed to its core while it runs, NMI when it does not);
//! virtual-device interrupts are physical IPIs with the guest vector;
//! virtual interrupts are injected as self-IPIs so every guest interrupt
//! passes through the physical LAPIC and the EOI MSR can be passed through;
//! TMICT is passed through; host IPIs are NMIs.

use dirq_arch::iommu::Irte;
use dirq_arch::lapic::DeliveryMode;
use dirq_arch::vmcs::Vmcs;

use super::{
    direct_delivery_vmcs, msrs, Injection, Policy, PolicyKind, TimerPath, VfRoute, VirtualSignal,
};

pub struct Did;

/// The VMCS of DID and of its broken variant: direct delivery, direct EOI,
/// TMICT passed through.
pub(super) fn did_vmcs() -> Vmcs {
    let mut vmcs = direct_delivery_vmcs();
    vmcs.msr_write_bitmap.set_trapped(msrs::TMICT, false);
    vmcs
}

impl Policy for Did {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Did
    }

    fn initial_vmcs(&self) -> Vmcs {
        did_vmcs()
    }

    fn vf_irte(&self, route: &VfRoute) -> Irte {
        route.direct_or_nmi()
    }

    fn injection(&self) -> Injection {
        Injection::SelfIpi
    }

    fn virtual_signal(&self) -> VirtualSignal {
        VirtualSignal::DirectIpi
    }

    fn timer_path(&self) -> TimerPath {
        TimerPath::PassThrough
    }

    fn host_interrupt_mode(&self) -> DeliveryMode {
        DeliveryMode::Nmi
    }

    fn defers_preemption_in_handler(&self) -> bool {
        true
    }
}
