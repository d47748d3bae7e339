//! Interrupt-delivery policies: what the hypervisor programs into the VMCS
//! and the IOMMU, and how it gets a virtual interrupt into a guest. The
//! engine (`crate::machine`) carries the mechanisms out; a policy only
//! decides. One module per policy; a new policy is one more module and one
//! more `PolicyKind`. The decisions cover what this host's KVM
//! configurations differ in: a userspace irqchip is vanilla's VMCS with
//! costlier exits (a per-policy cost hook would go next to `initial_vmcs`),
//! irqfd is a `VirtualSignal`, PV EOI an EOI that is not trapped in the MSR
//! bitmap, halt polling the scenario's `idle = "halt-poll"`.

mod apicv;
mod bare;
mod did;
mod eli;
mod eli_delivery;
mod naive_direct_eoi;
mod vanilla;

use dirq_arch::iommu::{Irte, SourceValidation};
use dirq_arch::lapic::{DeliveryMode, TriggerMode};
use dirq_arch::vectors::VectorSet;
use dirq_arch::vmcs::Vmcs;
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

    /// The policy object.
    pub fn build(self) -> Box<dyn Policy> {
        match self {
            PolicyKind::Bare => Box::new(bare::Bare),
            PolicyKind::Vanilla => Box::new(vanilla::Vanilla),
            PolicyKind::Apicv => Box::new(apicv::Apicv),
            PolicyKind::EliDelivery => Box::new(eli_delivery::EliDelivery),
            PolicyKind::Eli => Box::new(eli::Eli),
            PolicyKind::Did => Box::new(did::Did),
            PolicyKind::NaiveDirectEoi => Box::new(naive_direct_eoi::NaiveDirectEoi),
        }
    }
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

/// How a sender (backend thread, IPI emulation, host timer) signals a
/// vCPU that is currently scheduled on a core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VirtualSignal {
    /// Queue, then kick the core with a host IPI so that it exits and
    /// injects.
    KickAndInject,
    /// Post to the descriptor; the notification is processed in guest mode.
    Posted,
    /// DID: a physical IPI carrying the guest's own vector.
    DirectIpi,
}

/// Where a vCPU's LAPIC timer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerPath {
    /// TMICT writes exit; KVM emulates the timer with a host hrtimer whose
    /// expiry is a host interrupt on the vCPU's core.
    HostHrtimer,
    /// TMICT passed through: the guest programs the physical LAPIC timer.
    PassThrough,
}

/// Facts the policy needs to write a VF's IRTE.
#[derive(Clone, Copy, Debug)]
pub struct VfRoute {
    /// The APIC ID of the core the VM's vCPU is running on, if it is.
    pub running_on: Option<u32>,
    /// The core the vCPU is pinned to (KVM's host IRQ affinity).
    pub home_core: u32,
    pub guest_vector: u8,
    /// The host vector KVM assigned to this VF's MSI.
    pub host_vector: u8,
    pub requester_id: u16,
}

impl VfRoute {
    fn source(&self) -> SourceValidation {
        SourceValidation::RequesterId {
            source_id: self.requester_id,
            ignore_function_bits: 0,
        }
    }

    /// The host owns the interrupt: its vector, on the vCPU's home core.
    pub fn to_host(&self) -> Irte {
        self.remapped(self.home_core, self.host_vector, DeliveryMode::Fixed)
    }

    /// DID/ELI: straight to the running guest with the guest's vector, or
    /// as an NMI to the home core when the VM is not running (mechanisms
    /// section 5), so the hypervisor sees it.
    pub fn direct_or_nmi(&self) -> Irte {
        match self.running_on {
            Some(core) => self.remapped(core, self.guest_vector, DeliveryMode::Fixed),
            None => self.remapped(self.home_core, self.guest_vector, DeliveryMode::Nmi),
        }
    }

    fn remapped(&self, core: u32, vector: u8, delivery_mode: DeliveryMode) -> Irte {
        Irte::Remapped {
            destination_apic_id: core,
            vector,
            delivery_mode,
            trigger_mode: TriggerMode::Edge,
            source: self.source(),
        }
    }
}

/// One interrupt-delivery design.
pub trait Policy {
    fn kind(&self) -> PolicyKind;

    /// False only for bare metal: no VMCS, no exits, no hypervisor.
    fn virtualized(&self) -> bool {
        true
    }

    /// The VMCS interrupt controls every vCPU starts with.
    fn initial_vmcs(&self) -> Vmcs;

    /// The IRTE for a VM's VF, rewritten at every schedule-in and -out.
    fn vf_irte(&self, route: &VfRoute) -> Irte;

    fn injection(&self) -> Injection;

    fn virtual_signal(&self) -> VirtualSignal;

    fn timer_path(&self) -> TimerPath;

    /// Delivery mode of host IPIs and hypervisor timer ticks sent to a core
    /// that runs a guest: Fixed (they exit as EXTINT, or through ELI's
    /// shadow IDT as an exception) or NMI (DID).
    fn host_interrupt_mode(&self) -> DeliveryMode {
        DeliveryMode::Fixed
    }

    /// Called at VM entry when a virtual interrupt waits in the software
    /// LAPIC. Returns whether it may be injected now; `physical_isr` is the
    /// core's in-service set. ELI switches to injection mode here.
    fn prepare_injection(&self, _vmcs: &mut Vmcs, _physical_isr: &VectorSet, _vector: u8) -> bool {
        true
    }

    /// Called after the hypervisor emulated a guest EOI; `virtual_outstanding`
    /// says whether any virtual interrupt is still pending or in service.
    /// ELI returns to direct mode here.
    fn after_emulated_eoi(&self, _vmcs: &mut Vmcs, _virtual_outstanding: bool) {}

    /// Whether a time slice may end while guest vectors are in service in
    /// the physical LAPIC (their EOI would then reach the wrong VM). Only
    /// policies that deliver to the guest through the physical LAPIC care.
    fn defers_preemption_in_handler(&self) -> bool {
        false
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

/// ELI's check before injecting: a physical interrupt of a higher class in
/// service delays the injection until its EOI (mechanisms section 4).
fn no_higher_physical_in_service(physical_isr: &VectorSet, vector: u8) -> bool {
    physical_isr
        .highest()
        .is_none_or(|in_service| in_service >> 4 < vector >> 4)
}

/// VMCS of a guest that takes physical interrupts directly: no
/// external-interrupt exiting, NMIs still exit, EOI passed through.
fn direct_delivery_vmcs() -> Vmcs {
    let mut vmcs = Vmcs::trap_everything();
    vmcs.set_pin_based(dirq_arch::vmcs::PIN_EXTERNAL_INTERRUPT_EXITING, false);
    vmcs.msr_write_bitmap.set_trapped(msrs::EOI, false);
    vmcs
}
