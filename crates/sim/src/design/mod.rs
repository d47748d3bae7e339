//! Interrupt-delivery designs, one declarative [`Design`] table each: what
//! the hypervisor (or its absence) programs into the VMCS and the IOMMU,
//! and which mechanism carries each kind of interrupt. Each mechanism is a
//! type in its own file under [`mechanism`]; a design's whole behaviour is
//! its table plus the mechanism files the table names, and the engine
//! (`crate::machine`) calls those mechanisms without branching on the
//! table. A design that reuses existing mechanisms is one more table and
//! one more [`DesignKind`]. The tables cover what this host's KVM
//! configurations differ in: a userspace irqchip is vanilla's table with
//! costlier exits, irqfd is a [`VirtualSignal`], halt polling the
//! scenario's `idle = "halt-poll"`, KVM's PV EOI vanilla's [`PvEoi`] with
//! the scenario's `pv_eoi`. docs/mechanisms.md describes each
//! design.

mod apicv;
mod apicv_pi;
mod avic;
mod bare;
mod did;
mod eli;
pub mod mechanism;
mod vanilla;

use serde::{Deserialize, Serialize};

pub use mechanism::host_interrupt::HostInterrupts;
pub use mechanism::host_tick::HostTick;
pub use mechanism::injection::{Injection, InjectionMode};
pub use mechanism::ipi_sender::IpiSender;
pub use mechanism::irte::{IrteRule, VfRoute};
pub use mechanism::posting::Posting;
pub use mechanism::preemption::Preemption;
pub use mechanism::pv_eoi::PvEoi;
pub use mechanism::signal::VirtualSignal;
pub use mechanism::timer::GuestTimer;
pub use mechanism::vmcs::VmcsControls;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DesignKind {
    Bare,
    Vanilla,
    Apicv,
    ApicvPi,
    ApicvPiIpiv,
    Avic,
    EliDelivery,
    Eli,
    Did,
    NaiveDirectEoi,
}

impl DesignKind {
    pub const ALL: [DesignKind; 10] = [
        DesignKind::Bare,
        DesignKind::Vanilla,
        DesignKind::Apicv,
        DesignKind::ApicvPi,
        DesignKind::ApicvPiIpiv,
        DesignKind::Avic,
        DesignKind::EliDelivery,
        DesignKind::Eli,
        DesignKind::Did,
        DesignKind::NaiveDirectEoi,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DesignKind::Bare => "bare",
            DesignKind::Vanilla => "vanilla",
            DesignKind::Apicv => "apicv",
            DesignKind::ApicvPi => "apicv-pi",
            DesignKind::ApicvPiIpiv => "apicv-pi-ipiv",
            DesignKind::Avic => "avic",
            DesignKind::EliDelivery => "eli-delivery",
            DesignKind::Eli => "eli",
            DesignKind::Did => "did",
            DesignKind::NaiveDirectEoi => "naive-direct-eoi",
        }
    }

    /// The design's table.
    pub fn table(self) -> &'static Design {
        match self {
            DesignKind::Bare => &bare::BARE,
            DesignKind::Vanilla => &vanilla::VANILLA,
            DesignKind::Apicv => &apicv::APICV,
            DesignKind::ApicvPi => &apicv_pi::APICV_PI,
            DesignKind::ApicvPiIpiv => &apicv_pi::APICV_PI_IPIV,
            DesignKind::Avic => &avic::AVIC,
            DesignKind::EliDelivery => &eli::ELI_DELIVERY,
            DesignKind::Eli => &eli::ELI,
            DesignKind::Did => &did::DID,
            DesignKind::NaiveDirectEoi => &did::NAIVE_DIRECT_EOI,
        }
    }
}

impl std::fmt::Display for DesignKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One interrupt-delivery design: every mechanism it uses, by name (each
/// is a type in [`mechanism`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Design {
    pub kind: DesignKind,
    /// The VMCS controls every vCPU starts with.
    pub vmcs: VmcsControls,
    /// How a VM's VF IRTE is written at every schedule-in and -out.
    pub vf_irte: IrteRule,
    pub injection: Injection,
    pub virtual_signal: VirtualSignal,
    pub guest_timer: GuestTimer,
    /// Where the host's scheduler tick runs.
    pub host_tick: HostTick,
    /// How host IPIs and hypervisor ticks reach a core that runs a guest.
    pub host_interrupts: HostInterrupts,
    /// When a time slice may end.
    pub preemption: Preemption,
    /// What a post by the IOMMU or a sending CPU does.
    pub posting: Posting,
    /// Whether a guest's ICR write exits.
    pub ipi_sender: IpiSender,
    /// Whether the host can waive the EOI of a guest that uses KVM's PV
    /// EOI (the run's `pv_eoi` says whether it does).
    pub pv_eoi: PvEoi,
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
        for kind in DesignKind::ALL {
            assert_eq!(kind.table().kind, kind);
        }
    }

    #[test]
    fn bare_metal_vmcs_exits_on_nothing() {
        let vmcs = DesignKind::Bare.table().vmcs.build();
        assert!(!vmcs.external_interrupt_exits() && !vmcs.nmi_exits() && !vmcs.hlt_exits());
        assert!(!vmcs.io_exits() && !vmcs.ept_enabled());
        for msr in [msrs::EOI, msrs::TMICT, msrs::ICR] {
            assert_eq!(vmcs.msr_write(msr), MsrWriteAction::PassThrough);
        }
    }

    #[test]
    fn only_the_apic_virtualizing_designs_virtualize_the_eoi() {
        let apic_virtualizing = [
            DesignKind::Apicv,
            DesignKind::ApicvPi,
            DesignKind::ApicvPiIpiv,
            DesignKind::Avic,
        ];
        for kind in DesignKind::ALL {
            let virtualized = kind.table().vmcs.build().msr_write(msrs::EOI)
                == MsrWriteAction::VirtualizedApicWrite;
            assert_eq!(virtualized, apic_virtualizing.contains(&kind), "{kind:?}");
        }
    }

    /// Hardware posting comes with a posted IRTE, and only today's designs
    /// have either; only they let a CPU send an IPI without an exit.
    #[test]
    fn todays_designs_post_in_hardware_and_the_studies_designs_do_not() {
        for kind in DesignKind::ALL {
            let design = kind.table();
            let today = matches!(
                kind,
                DesignKind::ApicvPi | DesignKind::ApicvPiIpiv | DesignKind::Avic
            );
            assert_eq!(design.posting.hardware_wakes(), today, "{kind}");
            assert_eq!(design.vf_irte == IrteRule::Posted, today, "{kind}");
            let cpu_sends = design.ipi_sender != IpiSender::Bitmap;
            assert_eq!(cpu_sends, today && kind != DesignKind::ApicvPi, "{kind}");
        }
    }

    /// The injection mode `kind`'s table names.
    fn injection_mode(kind: DesignKind) -> InjectionMode {
        match kind.table().injection {
            Injection::Classic { mode: Some(mode) } => mode,
            other => panic!("{kind} has no injection mode: {other:?}"),
        }
    }

    #[test]
    fn eli_injection_mode_traps_and_releases_the_eoi() {
        let mode = injection_mode(DesignKind::Eli);
        let mut vmcs = DesignKind::Eli.table().vmcs.build();
        assert_eq!(vmcs.msr_write(msrs::EOI), MsrWriteAction::PassThrough);
        mode.set(&mut vmcs, true);
        assert!(vmcs.external_interrupt_exits());
        assert_eq!(vmcs.msr_write(msrs::EOI), MsrWriteAction::Exit);
        mode.set(&mut vmcs, false);
        assert_eq!(vmcs.msr_write(msrs::EOI), MsrWriteAction::PassThrough);
    }

    #[test]
    fn eli_delivery_only_keeps_the_eoi_trapped() {
        let design = DesignKind::EliDelivery.table();
        let mut vmcs = design.vmcs.build();
        injection_mode(DesignKind::EliDelivery).set(&mut vmcs, false);
        assert_eq!(vmcs.msr_write(msrs::EOI), MsrWriteAction::Exit);
    }

    /// The host tick stays where the design keeps its host timers: on the
    /// guest cores with KVM's hrtimers, off them with a passed-through
    /// timer (DID moves them to the designated core; bare metal has none).
    #[test]
    fn the_host_tick_runs_where_the_host_timers_live() {
        for kind in DesignKind::ALL {
            let design = kind.table();
            let on_guest_cores = design.host_tick == HostTick::GuestCores;
            assert_eq!(
                on_guest_cores,
                design.guest_timer == GuestTimer::HostHrtimer,
                "{kind}"
            );
        }
    }
}
