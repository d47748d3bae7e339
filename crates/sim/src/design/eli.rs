//! ELI (docs/mechanisms.md section 4) and its delivery-only variant.
//!
//! Both take assigned interrupts directly through the shadow IDT (every
//! non-guest vector not present, so a host interrupt in guest mode is a #NP
//! exit) and inject virtual interrupts the classic way, switching to
//! injection mode meanwhile. Full ELI also completes assigned interrupts
//! with no exit (EOI passed through outside injection mode); delivery-only
//! ELI traps every EOI.

use super::{
    msrs, Design, DesignKind, GuestTimer, HostInterrupts, HostTick, Injection, InjectionMode,
    IpiSender, IrteRule, Posting, Preemption, PvEoi, VirtualSignal, VmcsControls,
};

/// ELI's VMCS: physical interrupts through the guest IDT, the shadow IDT,
/// and `passed_through_msrs`.
const fn eli_vmcs(passed_through_msrs: &'static [u32]) -> VmcsControls {
    VmcsControls {
        external_interrupt_exiting: false,
        shadow_idt: true,
        passed_through_msrs,
        ..VmcsControls::TRAP_EVERYTHING
    }
}

pub const ELI: Design = Design {
    kind: DesignKind::Eli,
    vmcs: eli_vmcs(&[msrs::EOI]),
    vf_irte: IrteRule::DirectOrNmi,
    injection: Injection::Classic {
        mode: Some(InjectionMode { traps_eoi: true }),
    },
    virtual_signal: VirtualSignal::KickAndInject,
    guest_timer: GuestTimer::HostHrtimer,
    host_tick: HostTick::GuestCores,
    host_interrupts: HostInterrupts::Vector,
    preemption: Preemption::AfterGuestHandlers,
    posting: Posting::Software,
    ipi_sender: IpiSender::Bitmap,
    pv_eoi: PvEoi::Unavailable,
};

pub const ELI_DELIVERY: Design = Design {
    kind: DesignKind::EliDelivery,
    vmcs: eli_vmcs(&[]),
    injection: Injection::Classic {
        mode: Some(InjectionMode { traps_eoi: false }),
    },
    ..ELI
};
