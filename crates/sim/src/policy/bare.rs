//! Bare metal: the same workload with no hypervisor. Every interrupt goes
//! straight through the core's LAPIC to the OS; nothing exits.

use dirq_arch::iommu::Irte;
use dirq_arch::vmcs::{Vmcs, CPU_HLT_EXITING, PIN_NMI_EXITING};

use super::{
    direct_delivery_vmcs, msrs, Injection, Policy, PolicyKind, TimerPath, VfRoute, VirtualSignal,
};

pub struct Bare;

impl Policy for Bare {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Bare
    }

    fn virtualized(&self) -> bool {
        false
    }

    /// With no hypervisor nothing can exit: the engine consults the same
    /// VMCS queries, so they must all answer "no exit".
    fn initial_vmcs(&self) -> Vmcs {
        let mut vmcs = direct_delivery_vmcs();
        vmcs.set_pin_based(PIN_NMI_EXITING, false);
        vmcs.set_primary(CPU_HLT_EXITING, false);
        for msr in [msrs::TMICT, msrs::ICR] {
            vmcs.msr_write_bitmap.set_trapped(msr, false);
        }
        vmcs
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
}
