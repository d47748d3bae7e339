//! DID (docs/mechanisms.md section 5) and the broken design it fixes.
//!
//! DID: no external-interrupt exiting; VF IRTEs follow the VM (fixed to its
//! core while it runs, NMI when it does not); virtual-device interrupts are
//! physical IPIs with the guest vector; virtual interrupts are injected as
//! self-IPIs so every guest interrupt passes through the physical LAPIC and
//! the EOI MSR can be passed through; TMICT is passed through; host IPIs
//! are NMIs.
//!
//! Naive direct EOI (section 5, cases a and b): DID's direct delivery and
//! passed-through EOI, but virtual interrupts injected the classic way. The
//! physical LAPIC never sees them, so the guest's EOI for one clears
//! whatever the physical ISR holds, or nothing.

use super::{
    msrs, Design, DesignKind, GuestTimer, HostInterrupts, HostTick, Injection, IpiSender, IrteRule,
    Posting, Preemption, PvEoi, VirtualSignal, VmcsControls,
};

pub const DID: Design = Design {
    kind: DesignKind::Did,
    vmcs: VmcsControls {
        external_interrupt_exiting: false,
        passed_through_msrs: &[msrs::EOI, msrs::TMICT],
        ..VmcsControls::TRAP_EVERYTHING
    },
    vf_irte: IrteRule::DirectOrNmi,
    injection: Injection::SelfIpi,
    virtual_signal: VirtualSignal::DirectIpi,
    guest_timer: GuestTimer::PassThrough,
    host_tick: HostTick::HousekeepingCore,
    host_interrupts: HostInterrupts::Nmi,
    preemption: Preemption::AfterGuestHandlers,
    posting: Posting::Software,
    ipi_sender: IpiSender::Bitmap,
    pv_eoi: PvEoi::Unavailable,
};

pub const NAIVE_DIRECT_EOI: Design = Design {
    kind: DesignKind::NaiveDirectEoi,
    injection: Injection::ClassicUntracked,
    virtual_signal: VirtualSignal::KickAndInject,
    ..DID
};
