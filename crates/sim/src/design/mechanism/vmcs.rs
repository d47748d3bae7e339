//! The VMCS interrupt controls a design programs: what exits. Through the
//! MSR-write bitmap this also decides which EOIs and TMICT writes trap; the
//! engine asks the built `Vmcs`, as the CPU would.

use dirq_arch::vmcs::{
    Vmcs, CPU_HLT_EXITING, CPU_UNCONDITIONAL_IO_EXITING, PIN_EXTERNAL_INTERRUPT_EXITING,
    PIN_NMI_EXITING, PIN_PROCESS_POSTED_INTERRUPTS, SECONDARY_APIC_REGISTER_VIRTUALIZATION,
    SECONDARY_ENABLE_EPT, SECONDARY_VIRTUALIZE_X2APIC, SECONDARY_VIRTUAL_INTERRUPT_DELIVERY,
};

use crate::design::NOT_PRESENT_EXCEPTION;

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
        vmcs.set_secondary(SECONDARY_APIC_REGISTER_VIRTUALIZATION, self.apicv);
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
