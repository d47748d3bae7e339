//! APICv (docs/mechanisms.md section 3): posted virtual interrupts and EOI
//! virtualization; an assigned device's MSI without VT-d posting is still a
//! host interrupt (EXTERNAL_INTERRUPT) that the host then posts; timer writes exit.

use dirq_arch::interrupt::DeliveryMode;

use super::{Design, Injection, IrteRule, PolicyKind, TimerPath, VirtualSignal, VmcsControls};

pub const APICV: Design = Design {
    kind: PolicyKind::Apicv,
    vmcs: VmcsControls {
        apicv: true,
        ..VmcsControls::TRAP_EVERYTHING
    },
    vf_irte: IrteRule::ToHost,
    injection: Injection::Posted,
    virtual_signal: VirtualSignal::Posted,
    timer_path: TimerPath::HostHrtimer,
    host_interrupt_mode: DeliveryMode::Fixed,
    injection_mode: None,
    defers_preemption_in_handler: false,
};
