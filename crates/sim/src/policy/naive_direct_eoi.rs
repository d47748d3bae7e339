//! The broken design DID fixes (mechanisms section 5, cases a and b): DID's
//! direct delivery and passed-through EOI, but virtual interrupts injected
//! the classic way. The physical LAPIC never sees them, so the guest's EOI
//! for one clears whatever the physical ISR holds, or nothing.

use dirq_arch::iommu::Irte;
use dirq_arch::lapic::DeliveryMode;
use dirq_arch::vmcs::Vmcs;

use super::{did::did_vmcs, Injection, Policy, PolicyKind, TimerPath, VfRoute, VirtualSignal};

pub struct NaiveDirectEoi;

impl Policy for NaiveDirectEoi {
    fn kind(&self) -> PolicyKind {
        PolicyKind::NaiveDirectEoi
    }

    fn initial_vmcs(&self) -> Vmcs {
        did_vmcs()
    }

    fn vf_irte(&self, route: &VfRoute) -> Irte {
        route.direct_or_nmi()
    }

    fn injection(&self) -> Injection {
        Injection::ClassicUntracked
    }

    fn virtual_signal(&self) -> VirtualSignal {
        VirtualSignal::KickAndInject
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
