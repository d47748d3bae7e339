//! APICv (docs/mechanisms.md section 3): posted virtual interrupts and EOI
//! virtualization; an assigned device's MSI without VT-d posting is still a
//! host interrupt (EXTERNAL_INTERRUPT) that the host then posts; timer writes exit.

use super::{
    Design, DesignKind, GuestTimer, HostInterrupts, HostTick, Injection, IpiSender, IrteRule,
    Posting, Preemption, PvEoi, VirtualSignal, VmcsControls,
};

pub const APICV: Design = Design {
    kind: DesignKind::Apicv,
    vmcs: VmcsControls {
        apicv: true,
        ..VmcsControls::TRAP_EVERYTHING
    },
    vf_irte: IrteRule::ToHost,
    injection: Injection::Posted,
    virtual_signal: VirtualSignal::Posted,
    guest_timer: GuestTimer::HostHrtimer,
    host_tick: HostTick::GuestCores,
    host_interrupts: HostInterrupts::Vector,
    preemption: Preemption::Anytime,
    posting: Posting::Software,
    ipi_sender: IpiSender::Bitmap,
    pv_eoi: PvEoi::Unavailable,
};
