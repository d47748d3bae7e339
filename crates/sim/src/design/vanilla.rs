//! Vanilla KVM without APICv (docs/mechanisms.md section 2): every
//! interrupt exits, every EOI exits, virtual interrupts are injected
//! through the VMCS.

use super::{
    Design, DesignKind, GuestTimer, HostInterrupts, HostTick, Injection, IpiSender, IrteRule,
    Posting, Preemption, PvEoi, VirtualSignal, VmcsControls,
};

pub const VANILLA: Design = Design {
    kind: DesignKind::Vanilla,
    vmcs: VmcsControls::TRAP_EVERYTHING,
    vf_irte: IrteRule::ToHost,
    injection: Injection::Classic { mode: None },
    virtual_signal: VirtualSignal::KickAndInject,
    guest_timer: GuestTimer::HostHrtimer,
    host_tick: HostTick::GuestCores,
    host_interrupts: HostInterrupts::Vector,
    preemption: Preemption::Anytime,
    posting: Posting::Software,
    ipi_sender: IpiSender::Bitmap,
    pv_eoi: PvEoi::SoftwareLapic,
};
