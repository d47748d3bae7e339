//! Vanilla KVM without APICv (docs/mechanisms.md section 2): every
//! interrupt exits, every EOI exits, virtual interrupts are injected
//! through the VMCS.

use dirq_arch::interrupt::DeliveryMode;

use super::{Design, Injection, IrteRule, PolicyKind, TimerPath, VirtualSignal, VmcsControls};

pub const VANILLA: Design = Design {
    kind: PolicyKind::Vanilla,
    vmcs: VmcsControls::TRAP_EVERYTHING,
    vf_irte: IrteRule::ToHost,
    injection: Injection::Classic,
    virtual_signal: VirtualSignal::KickAndInject,
    timer_path: TimerPath::HostHrtimer,
    host_interrupt_mode: DeliveryMode::Fixed,
    injection_mode: None,
    defers_preemption_in_handler: false,
};
