//! How a VM's VF interrupt-remapping entry is written at every schedule-in
//! and -out (VT-d 5.1): KVM's stays on the host; DID's and ELI's follow the
//! VM; with VT-d posted interrupts it is in posted format for good (VT-d
//! 9.11), naming the owning vCPU's descriptor, whose NDST/SN/NV follow the
//! vCPU instead. Each rewrite is host work the engine charges
//! (`DesignWorkNs::irte_rewrite`).

use dirq_arch::interrupt::{DeliveryMode, TriggerMode};
use dirq_arch::iommu::{Irte, SourceValidation};

/// How a VM's VF IRTE is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrteRule {
    /// The host owns the interrupt: its vector, on the vCPU's home core.
    ToHost,
    /// Straight to the running guest with the guest's vector, or as an NMI
    /// to the home core when the VM is not running (docs/mechanisms.md
    /// section 5), so the hypervisor sees it.
    DirectOrNmi,
    /// Posted format (VT-d 9.11; AMD's IOMMU in guest virtual APIC mode
    /// likewise): the IOMMU posts the guest vector to the owning vCPU's
    /// descriptor (`dirq_arch::posted`, VT-d 5.2.3).
    Posted,
}

/// Facts a design needs to write a VF's IRTE.
#[derive(Clone, Copy, Debug)]
pub struct VfRoute {
    /// The APIC ID of the core the VM's vCPU is running on, if it is.
    pub running_on: Option<u32>,
    /// The core the vCPU is pinned to (KVM's host IRQ affinity).
    pub home_core: u32,
    pub guest_vector: u8,
    /// The owning vCPU, whose posted-interrupt descriptor a posted IRTE
    /// names.
    pub descriptor: u32,
    /// The host vector KVM assigned to this VF's MSI on the home core.
    pub host_vector: u8,
    pub requester_id: u16,
}

impl IrteRule {
    pub fn irte(self, route: &VfRoute) -> Irte {
        match (self, route.running_on) {
            (IrteRule::ToHost, _) => {
                route.remapped(route.home_core, route.host_vector, DeliveryMode::Fixed)
            }
            (IrteRule::DirectOrNmi, Some(core)) => {
                route.remapped(core, route.guest_vector, DeliveryMode::Fixed)
            }
            (IrteRule::DirectOrNmi, None) => {
                route.remapped(route.home_core, route.guest_vector, DeliveryMode::Nmi)
            }
            (IrteRule::Posted, _) => Irte::Posted {
                descriptor: route.descriptor,
                vector: route.guest_vector,
                source: route.source(),
            },
        }
    }
}

impl VfRoute {
    fn remapped(&self, core: u32, vector: u8, delivery_mode: DeliveryMode) -> Irte {
        Irte::Remapped {
            destination_apic_id: core,
            vector,
            delivery_mode,
            trigger_mode: TriggerMode::Edge,
            source: self.source(),
        }
    }

    /// Only the VF's own requester ID passes.
    fn source(&self) -> SourceValidation {
        SourceValidation::RequesterId {
            source_id: self.requester_id,
            ignore_function_bits: 0,
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_irte_follows_the_vm_and_falls_back_to_nmi() {
        let route = VfRoute {
            running_on: Some(3),
            home_core: 3,
            guest_vector: 0x41,
            descriptor: 0,
            host_vector: 0x60,
            requester_id: 0x100,
        };
        let running = IrteRule::DirectOrNmi.irte(&route);
        let stopped = IrteRule::DirectOrNmi.irte(&VfRoute {
            running_on: None,
            ..route
        });
        assert!(matches!(
            running,
            Irte::Remapped {
                vector: 0x41,
                delivery_mode: DeliveryMode::Fixed,
                ..
            }
        ));
        assert!(matches!(
            stopped,
            Irte::Remapped {
                delivery_mode: DeliveryMode::Nmi,
                ..
            }
        ));
        let to_host = IrteRule::ToHost.irte(&route);
        assert!(matches!(
            to_host,
            Irte::Remapped {
                vector: 0x60,
                destination_apic_id: 3,
                ..
            }
        ));
        for running_on in [Some(3), None] {
            let posted = IrteRule::Posted.irte(&VfRoute {
                running_on,
                ..route
            });
            assert!(matches!(
                posted,
                Irte::Posted {
                    descriptor: 0,
                    vector: 0x41,
                    ..
                }
            ));
        }
    }
}
