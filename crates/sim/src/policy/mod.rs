//! Interrupt-delivery designs, one declarative [`Design`] table each: what
//! the hypervisor (or its absence) programs into the VMCS and the IOMMU,
//! and which mechanism carries each kind of interrupt. The engine
//! (`crate::machine`) reads the table; a design that reuses existing
//! mechanisms is one more table and one more [`PolicyKind`]. The tables
//! cover what this host's KVM configurations differ in: a userspace irqchip
//! is vanilla's table with costlier exits, irqfd is a [`VirtualSignal`], PV
//! EOI an EOI left out of the MSR bitmap, halt polling the scenario's
//! `idle = "halt-poll"`. docs/mechanisms.md describes each design.

mod apicv;
mod bare;
mod did;
mod eli;
mod vanilla;

use dirq_arch::interrupt::{DeliveryMode, TriggerMode};
use dirq_arch::iommu::{Irte, SourceValidation};
use dirq_arch::vectors::VectorSet;
use dirq_arch::vmcs::{
    Vmcs, CPU_HLT_EXITING, CPU_UNCONDITIONAL_IO_EXITING, PIN_EXTERNAL_INTERRUPT_EXITING,
    PIN_NMI_EXITING, PIN_PROCESS_POSTED_INTERRUPTS, SECONDARY_ENABLE_EPT,
    SECONDARY_VIRTUALIZE_X2APIC, SECONDARY_VIRTUAL_INTERRUPT_DELIVERY,
};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    Bare,
    Vanilla,
    Apicv,
    EliDelivery,
    Eli,
    Did,
    NaiveDirectEoi,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 7] = [
        PolicyKind::Bare,
        PolicyKind::Vanilla,
        PolicyKind::Apicv,
        PolicyKind::EliDelivery,
        PolicyKind::Eli,
        PolicyKind::Did,
        PolicyKind::NaiveDirectEoi,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Bare => "bare",
            PolicyKind::Vanilla => "vanilla",
            PolicyKind::Apicv => "apicv",
            PolicyKind::EliDelivery => "eli-delivery",
            PolicyKind::Eli => "eli",
            PolicyKind::Did => "did",
            PolicyKind::NaiveDirectEoi => "naive-direct-eoi",
        }
    }

    /// The design's table.
    pub fn design(self) -> &'static Design {
        match self {
            PolicyKind::Bare => &bare::BARE,
            PolicyKind::Vanilla => &vanilla::VANILLA,
            PolicyKind::Apicv => &apicv::APICV,
            PolicyKind::EliDelivery => &eli::ELI_DELIVERY,
            PolicyKind::Eli => &eli::ELI,
            PolicyKind::Did => &did::DID,
            PolicyKind::NaiveDirectEoi => &did::NAIVE_DIRECT_EOI,
        }
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One interrupt-delivery design: every mechanism it uses, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Design {
    pub kind: PolicyKind,
    /// The VMCS interrupt controls every vCPU starts with.
    pub vmcs: VmcsControls,
    /// How a VM's VF IRTE is written at every schedule-in and -out.
    pub vf_irte: IrteRule,
    pub injection: Injection,
    pub virtual_signal: VirtualSignal,
    pub timer_path: TimerPath,
    /// Delivery mode of host IPIs and hypervisor ticks sent to a core that
    /// runs a guest: Fixed (they exit as EXTERNAL_INTERRUPT, or through ELI's shadow IDT
    /// as an exception) or NMI (DID).
    pub host_interrupt_mode: DeliveryMode,
    /// ELI's injection mode, switched on to inject a virtual interrupt.
    pub injection_mode: Option<InjectionMode>,
    /// Whether a time slice may not end while guest vectors are in service
    /// in the physical LAPIC (their EOI would then reach the wrong VM):
    /// designs that deliver to the guest through the physical LAPIC.
    pub defers_preemption_in_handler: bool,
}

/// The VMCS controls a design sets, as named facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmcsControls {
    /// External interrupts exit (SDM 25.2); off: they go through the guest
    /// IDT.
    pub external_interrupt_exiting: bool,
    pub nmi_exiting: bool,
    pub hlt_exiting: bool,
    /// I/O instructions and EPT misses exit: any hypervisor.
    pub io_and_ept_exits: bool,
    /// APICv: posted interrupts, virtualized x2APIC, virtual-interrupt
    /// delivery (SDM 29).
    pub apicv: bool,
    /// ELI's shadow IDT: non-guest vectors are not present, #NP exits.
    pub shadow_idt: bool,
    /// x2APIC MSRs a guest write does not exit on.
    pub passed_through_msrs: &'static [u32],
}

impl VmcsControls {
    /// Vanilla KVM: everything exits.
    pub const TRAP_EVERYTHING: VmcsControls = VmcsControls {
        external_interrupt_exiting: true,
        nmi_exiting: true,
        hlt_exiting: true,
        io_and_ept_exits: true,
        apicv: false,
        shadow_idt: false,
        passed_through_msrs: &[],
    };

    pub fn build(&self) -> Vmcs {
        let mut vmcs = Vmcs::trap_everything();
        vmcs.set_pin_based(
            PIN_EXTERNAL_INTERRUPT_EXITING,
            self.external_interrupt_exiting,
        );
        vmcs.set_pin_based(PIN_NMI_EXITING, self.nmi_exiting);
        vmcs.set_primary(CPU_HLT_EXITING, self.hlt_exiting);
        vmcs.set_primary(CPU_UNCONDITIONAL_IO_EXITING, self.io_and_ept_exits);
        vmcs.set_secondary(SECONDARY_ENABLE_EPT, self.io_and_ept_exits);
        vmcs.set_pin_based(PIN_PROCESS_POSTED_INTERRUPTS, self.apicv);
        vmcs.set_secondary(SECONDARY_VIRTUALIZE_X2APIC, self.apicv);
        vmcs.set_secondary(SECONDARY_VIRTUAL_INTERRUPT_DELIVERY, self.apicv);
        if self.shadow_idt {
            vmcs.exception_bitmap |= 1 << NOT_PRESENT_EXCEPTION;
        }
        for &msr in self.passed_through_msrs {
            vmcs.msr_write_bitmap.set_trapped(msr, false);
        }
        vmcs
    }
}

/// How a VM's VF IRTE is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrteRule {
    /// The host owns the interrupt: its vector, on the vCPU's home core.
    ToHost,
    /// Straight to the running guest with the guest's vector, or as an NMI
    /// to the home core when the VM is not running (docs/mechanisms.md
    /// section 5), so the hypervisor sees it.
    DirectOrNmi,
}

/// How a virtual interrupt queued for a vCPU enters the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Injection {
    /// KVM's software LAPIC and VMCS event injection at VM entry, with an
    /// interrupt-window exit when the guest has interrupts disabled.
    Classic,
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

/// How a sender (backend thread, IPI emulation, host timer, device)
/// signals a vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VirtualSignal {
    /// Queue, then kick the core with a host IPI so that it exits and
    /// injects.
    KickAndInject,
    /// Post to the descriptor; the notification is processed in guest mode.
    Posted,
    /// DID: a physical IPI carrying the guest's own vector while the vCPU
    /// runs; queued for injection otherwise.
    DirectIpi,
    /// No hypervisor: the interrupt goes to the core's LAPIC as it is.
    Native,
}

/// Where a vCPU's LAPIC timer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerPath {
    /// TMICT writes exit; KVM emulates the timer with a host hrtimer whose
    /// expiry is a host interrupt on the vCPU's core.
    HostHrtimer,
    /// TMICT passed through: the guest programs the physical LAPIC timer;
    /// while the vCPU is descheduled its timer is parked on the
    /// housekeeping core (DID).
    PassThrough,
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

/// Facts a design needs to write a VF's IRTE.
#[derive(Clone, Copy, Debug)]
pub struct VfRoute {
    /// The APIC ID of the core the VM's vCPU is running on, if it is.
    pub running_on: Option<u32>,
    /// The core the vCPU is pinned to (KVM's host IRQ affinity).
    pub home_core: u32,
    pub guest_vector: u8,
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
            source: SourceValidation::RequesterId {
                source_id: self.requester_id,
                ignore_function_bits: 0,
            },
        }
    }
}

/// The x2APIC EOI, TMICT and ICR MSRs.
pub mod msrs {
    use dirq_arch::lapic::{x2apic_msr, APIC_EOI, APIC_ICR_LOW, APIC_TIMER_INITIAL_COUNT};

    pub const EOI: u32 = x2apic_msr(APIC_EOI);
    pub const TMICT: u32 = x2apic_msr(APIC_TIMER_INITIAL_COUNT);
    pub const ICR: u32 = x2apic_msr(APIC_ICR_LOW);
}

/// ELI's shadow IDT marks every non-guest vector not-present; #NP exits.
pub const NOT_PRESENT_EXCEPTION: u8 = 11;

#[cfg(test)]
mod tests {
    use super::*;
    use dirq_arch::vmcs::MsrWriteAction;

    #[test]
    fn every_kind_names_its_own_table() {
        for kind in PolicyKind::ALL {
            assert_eq!(kind.design().kind, kind);
        }
    }

    #[test]
    fn bare_metal_vmcs_exits_on_nothing() {
        let vmcs = PolicyKind::Bare.design().vmcs.build();
        assert!(!vmcs.external_interrupt_exits() && !vmcs.nmi_exits() && !vmcs.hlt_exits());
        assert!(!vmcs.io_exits() && !vmcs.ept_enabled());
        for msr in [msrs::EOI, msrs::TMICT, msrs::ICR] {
            assert_eq!(vmcs.msr_write(msr), MsrWriteAction::PassThrough);
        }
    }

    #[test]
    fn only_apicv_virtualizes_the_eoi() {
        for kind in PolicyKind::ALL {
            let virtualized = kind.design().vmcs.build().msr_write(msrs::EOI)
                == MsrWriteAction::VirtualizedApicWrite;
            assert_eq!(virtualized, kind == PolicyKind::Apicv, "{kind:?}");
        }
    }

    #[test]
    fn eli_injection_mode_traps_and_releases_the_eoi() {
        let mode = PolicyKind::Eli
            .design()
            .injection_mode
            .expect("ELI switches modes");
        let mut vmcs = PolicyKind::Eli.design().vmcs.build();
        assert_eq!(vmcs.msr_write(msrs::EOI), MsrWriteAction::PassThrough);
        mode.set(&mut vmcs, true);
        assert!(vmcs.external_interrupt_exits());
        assert_eq!(vmcs.msr_write(msrs::EOI), MsrWriteAction::Exit);
        mode.set(&mut vmcs, false);
        assert_eq!(vmcs.msr_write(msrs::EOI), MsrWriteAction::PassThrough);
    }

    #[test]
    fn eli_delivery_only_keeps_the_eoi_trapped() {
        let design = PolicyKind::EliDelivery.design();
        let mut vmcs = design.vmcs.build();
        design
            .injection_mode
            .expect("switches modes")
            .set(&mut vmcs, false);
        assert_eq!(vmcs.msr_write(msrs::EOI), MsrWriteAction::Exit);
    }

    #[test]
    fn an_injection_waits_below_a_higher_physical_class() {
        let isr: VectorSet = [0x61].into_iter().collect();
        assert!(!InjectionMode::may_inject(&isr, 0x51));
        assert!(!InjectionMode::may_inject(&isr, 0x6F));
        assert!(InjectionMode::may_inject(&isr, 0x71));
        assert!(InjectionMode::may_inject(&VectorSet::EMPTY, 0x20));
    }

    #[test]
    fn direct_irte_follows_the_vm_and_falls_back_to_nmi() {
        let route = VfRoute {
            running_on: Some(3),
            home_core: 3,
            guest_vector: 0x41,
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
    }
}
