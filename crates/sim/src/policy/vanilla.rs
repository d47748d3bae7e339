//! Vanilla KVM without APICv (mechanisms section 2): every interrupt exits,
//! every EOI exits, virtual interrupts are injected through the VMCS.

use dirq_arch::iommu::Irte;
use dirq_arch::vmcs::Vmcs;

use super::{Injection, Policy, PolicyKind, TimerPath, VfRoute, VirtualSignal};

pub struct Vanilla;

impl Policy for Vanilla {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Vanilla
    }

    fn initial_vmcs(&self) -> Vmcs {
        Vmcs::trap_everything()
    }

    fn vf_irte(&self, route: &VfRoute) -> Irte {
        route.to_host()
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
}
