//! Bare metal (docs/mechanisms.md section 1): the same workload with no
//! hypervisor. Nothing exits, so the VMCS the engine consults answers "no
//! exit" to every query; every interrupt goes straight through the core's
//! LAPIC to the OS, and HLT halts the core itself.

use super::{
    msrs, Design, DesignKind, GuestTimer, HostInterrupts, HostTick, Injection, IpiSender, IrteRule,
    Posting, Preemption, PvEoi, VirtualSignal, VmcsControls,
};

pub const BARE: Design = Design {
    kind: DesignKind::Bare,
    vmcs: VmcsControls {
        external_interrupt_exiting: false,
        nmi_exiting: false,
        hlt_exiting: false,
        io_and_ept_exits: false,
        apicv: false,
        shadow_idt: false,
        passed_through_msrs: &[msrs::EOI, msrs::TMICT, msrs::ICR],
    },
    vf_irte: IrteRule::DirectOrNmi,
    injection: Injection::SelfIpi,
    virtual_signal: VirtualSignal::Native,
    guest_timer: GuestTimer::PassThrough,
    // No host: nothing ticks on the cores the OS runs on.
    host_tick: HostTick::HousekeepingCore,
    host_interrupts: HostInterrupts::Vector,
    preemption: Preemption::Anytime,
    posting: Posting::Software,
    ipi_sender: IpiSender::Bitmap,
    pv_eoi: PvEoi::Unavailable,
};
