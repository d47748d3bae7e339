//! The VMCS controls that decide what an interrupt, an EOI or an APIC
//! register write does while a guest runs (Intel SDM Vol. 3, ch. 24-29).
//!
//! Only the interrupt-related controls are modelled. Each query answers one
//! question the processor asks in VMX non-root operation: does this event
//! exit, or is it delivered/virtualized in the guest?

use serde::{Deserialize, Serialize};

use crate::lapic::{x2apic_msr, Lapic, APIC_EOI, APIC_SELF_IPI, APIC_TPR};
use crate::vectors::VectorSet;

/// Pin-based control bit 0: external-interrupt exiting (SDM 24.6.1, table 24-5).
pub const PIN_EXTERNAL_INTERRUPT_EXITING: u32 = 1 << 0;
/// Pin-based control bit 3: NMI exiting.
pub const PIN_NMI_EXITING: u32 = 1 << 3;
/// Pin-based control bit 7: process posted interrupts.
pub const PIN_PROCESS_POSTED_INTERRUPTS: u32 = 1 << 7;
/// Primary processor-based control bit 2: interrupt-window exiting
/// (SDM 24.6.2, table 24-6).
pub const CPU_INTERRUPT_WINDOW_EXITING: u32 = 1 << 2;
/// Primary processor-based control bit 7: HLT exiting.
pub const CPU_HLT_EXITING: u32 = 1 << 7;
/// Primary processor-based control: every I/O instruction exits (SDM 24.6.2).
pub const CPU_UNCONDITIONAL_IO_EXITING: u32 = 1 << 24;
/// Primary processor-based control bit 28: use MSR bitmaps.
pub const CPU_USE_MSR_BITMAPS: u32 = 1 << 28;
/// Primary processor-based control bit 31: activate secondary controls.
pub const CPU_ACTIVATE_SECONDARY: u32 = 1 << 31;
/// Secondary control bit 4: virtualize x2APIC mode (SDM 24.6.2, table 24-7).
pub const SECONDARY_VIRTUALIZE_X2APIC: u32 = 1 << 4;
/// Secondary control: guest-physical addresses go through EPT, whose
/// misses are EPT-violation exits (SDM 24.6.2, 28.2).
pub const SECONDARY_ENABLE_EPT: u32 = 1 << 1;
/// Secondary control bit 8: APIC-register virtualization (SDM 24.6.2).
pub const SECONDARY_APIC_REGISTER_VIRTUALIZATION: u32 = 1 << 8;
/// Secondary control bit 9: virtual-interrupt delivery.
pub const SECONDARY_VIRTUAL_INTERRUPT_DELIVERY: u32 = 1 << 9;

/// The low MSR range the MSR bitmap covers (SDM 24.6.9).
const MSR_BITMAP_LOW_LAST: u32 = 0x1FFF;

/// Write-exiting bits for MSRs 0-0x1FFF (SDM 24.6.9: the write bitmap for
/// low MSRs); high MSRs always exit in this model (none is passed through).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MsrWriteBitmap {
    low: Vec<u64>,
}

impl std::fmt::Debug for MsrWriteBitmap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let trapped = self.low.iter().map(|word| word.count_ones()).sum::<u32>();
        write!(f, "MsrWriteBitmap({trapped} low MSRs trapped)")
    }
}

impl MsrWriteBitmap {
    /// Every write exits.
    pub fn trap_all() -> Self {
        MsrWriteBitmap {
            low: vec![u64::MAX; (MSR_BITMAP_LOW_LAST as usize + 1) / 64],
        }
    }

    pub fn set_trapped(&mut self, msr: u32, trapped: bool) {
        if msr > MSR_BITMAP_LOW_LAST {
            return;
        }
        let (word, bit) = ((msr / 64) as usize, 1u64 << (msr % 64));
        if trapped {
            self.low[word] |= bit;
        } else {
            self.low[word] &= !bit;
        }
    }

    pub fn is_trapped(&self, msr: u32) -> bool {
        if msr > MSR_BITMAP_LOW_LAST {
            return true;
        }
        self.low[(msr / 64) as usize] & (1 << (msr % 64)) != 0
    }
}

/// What the processor does with a guest WRMSR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MsrWriteAction {
    /// VM exit, reason "WRMSR" (SDM 25.1.3).
    Exit,
    /// Virtualized against the virtual-APIC page (SDM 29.5): with
    /// virtualize-x2APIC-mode and virtual-interrupt delivery, writes to
    /// TPR, EOI and SELF IPI are emulated by the processor.
    VirtualizedApicWrite,
    /// The bitmap lets the write through to the real MSR.
    PassThrough,
}

/// The result of a guest EOI handled by EOI virtualization (SDM 29.1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VirtualEoi {
    /// The vector whose VISR bit was cleared, if any.
    pub completed: Option<u8>,
    /// EOI-exit-bitmap bit set for it: EOI-induced VM exit (SDM 29.1.3).
    pub exits: bool,
}

/// The interrupt-related fields of one VMCS.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vmcs {
    pub pin_based: u32,
    pub primary: u32,
    pub secondary: u32,
    /// Bit n set: exception vector n exits (SDM 24.6.3).
    pub exception_bitmap: u32,
    pub msr_write_bitmap: MsrWriteBitmap,
    /// EOI-exit bitmap (SDM 24.6.8): EOIs of these vectors exit even under
    /// EOI virtualization.
    pub eoi_exit_bitmap: VectorSet,
}

impl Vmcs {
    /// The controls of a plain KVM guest without APICv: external-interrupt
    /// and NMI exiting, HLT and I/O exiting, EPT, MSR bitmap trapping every
    /// write.
    pub fn trap_everything() -> Self {
        Vmcs {
            pin_based: PIN_EXTERNAL_INTERRUPT_EXITING | PIN_NMI_EXITING,
            primary: CPU_HLT_EXITING
                | CPU_UNCONDITIONAL_IO_EXITING
                | CPU_USE_MSR_BITMAPS
                | CPU_ACTIVATE_SECONDARY,
            secondary: SECONDARY_ENABLE_EPT,
            exception_bitmap: 0,
            msr_write_bitmap: MsrWriteBitmap::trap_all(),
            eoi_exit_bitmap: VectorSet::EMPTY,
        }
    }

    fn has_secondary(&self, bit: u32) -> bool {
        self.primary & CPU_ACTIVATE_SECONDARY != 0 && self.secondary & bit != 0
    }

    pub fn set_pin_based(&mut self, bit: u32, on: bool) {
        set_bit(&mut self.pin_based, bit, on);
    }

    pub fn set_primary(&mut self, bit: u32, on: bool) {
        set_bit(&mut self.primary, bit, on);
    }

    pub fn set_secondary(&mut self, bit: u32, on: bool) {
        set_bit(&mut self.secondary, bit, on);
    }

    /// An external interrupt arriving in VMX non-root operation exits iff
    /// external-interrupt exiting is set (SDM 25.2); otherwise it is
    /// delivered through the guest IDT (SDM 25.3).
    pub fn external_interrupt_exits(&self) -> bool {
        self.pin_based & PIN_EXTERNAL_INTERRUPT_EXITING != 0
    }

    /// An NMI exits iff NMI exiting is set (SDM 25.2).
    pub fn nmi_exits(&self) -> bool {
        self.pin_based & PIN_NMI_EXITING != 0
    }

    /// The notification vector of posted interrupts is processed without
    /// an exit when posted-interrupt processing is on (SDM 29.6).
    pub fn processes_posted_interrupts(&self) -> bool {
        self.pin_based & PIN_PROCESS_POSTED_INTERRUPTS != 0
    }

    /// An exception exits iff its bit in the exception bitmap is set
    /// (SDM 25.2; #PF's error-code filter is not modelled).
    pub fn exception_exits(&self, vector: u8) -> bool {
        vector < 32 && self.exception_bitmap & (1 << vector) != 0
    }

    /// Interrupt-window exiting: the exit happens at the first instruction
    /// boundary where RFLAGS.IF = 1 and there is no STI/MOV-SS blocking
    /// (SDM 25.2, 26.7.5).
    pub fn interrupt_window_exits(&self, guest_interruptible: bool) -> bool {
        self.primary & CPU_INTERRUPT_WINDOW_EXITING != 0 && guest_interruptible
    }

    /// HLT exits iff HLT exiting is set (SDM 25.1.3).
    pub fn hlt_exits(&self) -> bool {
        self.primary & CPU_HLT_EXITING != 0
    }

    /// I/O instructions exit (SDM 25.1.3; I/O bitmaps are not modelled).
    pub fn io_exits(&self) -> bool {
        self.primary & CPU_UNCONDITIONAL_IO_EXITING != 0
    }

    /// Guest memory is translated by EPT, so EPT violations can exit
    /// (SDM 28.2.3).
    pub fn ept_enabled(&self) -> bool {
        self.has_secondary(SECONDARY_ENABLE_EPT)
    }

    /// Virtual-interrupt delivery is on (SDM 29.2).
    pub fn virtual_interrupt_delivery(&self) -> bool {
        self.has_secondary(SECONDARY_VIRTUAL_INTERRUPT_DELIVERY)
    }

    /// What a guest WRMSR to `msr` does. Without MSR bitmaps every WRMSR
    /// exits (SDM 25.1.3). A write the bitmap traps exits, except that with
    /// virtualize-x2APIC-mode the x2APIC TPR/EOI/SELF-IPI writes are
    /// virtualized when virtual-interrupt delivery is on (SDM 29.5).
    pub fn msr_write(&self, msr: u32) -> MsrWriteAction {
        if self.primary & CPU_USE_MSR_BITMAPS == 0 {
            return MsrWriteAction::Exit;
        }
        let virtualizable = msr == x2apic_msr(APIC_TPR)
            || msr == x2apic_msr(APIC_EOI)
            || msr == x2apic_msr(APIC_SELF_IPI);
        if virtualizable
            && self.has_secondary(SECONDARY_VIRTUALIZE_X2APIC)
            && self.virtual_interrupt_delivery()
        {
            return MsrWriteAction::VirtualizedApicWrite;
        }
        if self.msr_write_bitmap.is_trapped(msr) {
            MsrWriteAction::Exit
        } else {
            MsrWriteAction::PassThrough
        }
    }

    /// Whether a guest RDMSR of `msr` exits. Every RDMSR exits in this
    /// model (no read bitmap is passed through) except an x2APIC register
    /// read with virtualize-x2APIC-mode and APIC-register virtualization,
    /// which reads the virtual-APIC page (SDM 29.5).
    pub fn msr_read_exits(&self, msr: u32) -> bool {
        let apic = (crate::lapic::MSR_X2APIC_FIRST..=crate::lapic::MSR_X2APIC_LAST).contains(&msr);
        !(apic
            && self.has_secondary(SECONDARY_VIRTUALIZE_X2APIC)
            && self.has_secondary(SECONDARY_APIC_REGISTER_VIRTUALIZATION))
    }

    /// RVI: the highest vector in the virtual IRR (SDM 29.1.1, guest
    /// interrupt status low byte); 0 when none.
    pub fn rvi(virtual_apic: &Lapic) -> u8 {
        virtual_apic.irr().highest().unwrap_or(0)
    }

    /// SVI: the highest vector in the virtual ISR (guest interrupt status
    /// high byte); 0 when none.
    pub fn svi(virtual_apic: &Lapic) -> u8 {
        virtual_apic.isr().highest().unwrap_or(0)
    }

    /// Evaluation and delivery of a pending virtual interrupt (SDM 29.2.1,
    /// 29.2.2): when RVI's class is above VPPR's and the guest is
    /// interruptible, the processor delivers RVI without an exit, moving it
    /// from VIRR to VISR. The virtual-APIC page is a [`Lapic`], so the
    /// class comparison is the LAPIC's own (SDM 10.8.3.1 and 29.2.1 state
    /// the same rule).
    pub fn deliver_virtual_interrupt(
        &self,
        virtual_apic: &mut Lapic,
        guest_interruptible: bool,
    ) -> Option<u8> {
        if !self.virtual_interrupt_delivery() || !guest_interruptible {
            return None;
        }
        virtual_apic.acknowledge()
    }

    /// EOI virtualization (SDM 29.1.3): clears the highest VISR bit (SVI);
    /// if that vector's EOI-exit-bitmap bit is set, an EOI-induced exit
    /// follows so the hypervisor can complete it (e.g. for a level-triggered
    /// IOAPIC line).
    pub fn virtualize_eoi(&self, virtual_apic: &mut Lapic) -> VirtualEoi {
        let completed = virtual_apic.eoi().completed;
        VirtualEoi {
            completed,
            exits: completed.is_some_and(|vector| self.eoi_exit_bitmap.contains(vector)),
        }
    }
}

fn set_bit(field: &mut u32, bit: u32, on: bool) {
    if on {
        *field |= bit;
    } else {
        *field &= !bit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lapic::{LapicConfig, TriggerMode, MSR_IA32_TSC_DEADLINE};

    fn enabled_lapic() -> Lapic {
        let mut lapic = Lapic::new(0, LapicConfig::new(100_000_000, 3_400_000_000).unwrap());
        lapic.set_svr(crate::lapic::SVR_APIC_SOFTWARE_ENABLE | 0xFF);
        lapic
    }

    fn apicv() -> Vmcs {
        let mut vmcs = Vmcs::trap_everything();
        vmcs.set_secondary(SECONDARY_VIRTUALIZE_X2APIC, true);
        vmcs.set_secondary(SECONDARY_APIC_REGISTER_VIRTUALIZATION, true);
        vmcs.set_secondary(SECONDARY_VIRTUAL_INTERRUPT_DELIVERY, true);
        vmcs
    }

    #[test]
    fn external_interrupt_exits_only_with_eie() {
        let mut vmcs = Vmcs::trap_everything();
        assert!(vmcs.external_interrupt_exits());
        vmcs.set_pin_based(PIN_EXTERNAL_INTERRUPT_EXITING, false);
        assert!(!vmcs.external_interrupt_exits());
        assert!(vmcs.nmi_exits(), "NMI exiting is a separate control");
    }

    #[test]
    fn msr_bitmap_decides_wrmsr_exits() {
        let mut vmcs = Vmcs::trap_everything();
        let eoi = x2apic_msr(APIC_EOI);
        assert_eq!(vmcs.msr_write(eoi), MsrWriteAction::Exit);
        vmcs.msr_write_bitmap.set_trapped(eoi, false);
        assert_eq!(vmcs.msr_write(eoi), MsrWriteAction::PassThrough);
        assert_eq!(vmcs.msr_write(MSR_IA32_TSC_DEADLINE), MsrWriteAction::Exit);
        vmcs.set_primary(CPU_USE_MSR_BITMAPS, false);
        assert_eq!(vmcs.msr_write(eoi), MsrWriteAction::Exit);
    }

    #[test]
    fn apicv_virtualizes_eoi_but_not_timer_writes() {
        let vmcs = apicv();
        assert_eq!(
            vmcs.msr_write(x2apic_msr(APIC_EOI)),
            MsrWriteAction::VirtualizedApicWrite
        );
        let tmict = x2apic_msr(crate::lapic::APIC_TIMER_INITIAL_COUNT);
        assert_eq!(vmcs.msr_write(tmict), MsrWriteAction::Exit);
    }

    #[test]
    fn apic_register_virtualization_reads_x2apic_registers_without_an_exit() {
        let tpr = x2apic_msr(APIC_TPR);
        assert!(Vmcs::trap_everything().msr_read_exits(tpr));
        assert!(!apicv().msr_read_exits(tpr));
        assert!(
            apicv().msr_read_exits(MSR_IA32_TSC_DEADLINE),
            "not an APIC register"
        );
        let mut without = apicv();
        without.set_secondary(SECONDARY_APIC_REGISTER_VIRTUALIZATION, false);
        assert!(without.msr_read_exits(tpr));
    }

    #[test]
    fn interrupt_window_exit_needs_control_and_open_window() {
        let mut vmcs = Vmcs::trap_everything();
        assert!(!vmcs.interrupt_window_exits(true));
        vmcs.set_primary(CPU_INTERRUPT_WINDOW_EXITING, true);
        assert!(!vmcs.interrupt_window_exits(false));
        assert!(vmcs.interrupt_window_exits(true));
    }

    #[test]
    fn exception_bitmap_selects_exiting_vectors() {
        let mut vmcs = Vmcs::trap_everything();
        const NOT_PRESENT: u8 = 11;
        assert!(!vmcs.exception_exits(NOT_PRESENT));
        vmcs.exception_bitmap |= 1 << NOT_PRESENT;
        assert!(vmcs.exception_exits(NOT_PRESENT));
    }

    #[test]
    fn virtual_interrupt_delivery_moves_rvi_to_svi() {
        let vmcs = apicv();
        let mut vapic = enabled_lapic();
        vapic.accept(0x41, TriggerMode::Edge);
        vapic.accept(0x61, TriggerMode::Edge);
        assert_eq!(Vmcs::rvi(&vapic), 0x61);
        assert_eq!(vmcs.deliver_virtual_interrupt(&mut vapic, false), None);
        assert_eq!(vmcs.deliver_virtual_interrupt(&mut vapic, true), Some(0x61));
        assert_eq!(Vmcs::svi(&vapic), 0x61);
        assert_eq!(Vmcs::rvi(&vapic), 0x41);
        // 0x41's class is below the in-service 0x61's: held.
        assert_eq!(vmcs.deliver_virtual_interrupt(&mut vapic, true), None);
        assert_eq!(
            Vmcs::trap_everything().deliver_virtual_interrupt(&mut vapic, true),
            None,
            "without virtual-interrupt delivery the hypervisor must inject"
        );
    }

    #[test]
    fn eoi_exit_bitmap_forces_eoi_exit() {
        let mut vmcs = apicv();
        let mut vapic = enabled_lapic();
        vapic.accept(0x41, TriggerMode::Edge);
        vmcs.deliver_virtual_interrupt(&mut vapic, true);
        assert_eq!(
            vmcs.virtualize_eoi(&mut vapic),
            VirtualEoi {
                completed: Some(0x41),
                exits: false
            }
        );
        vmcs.eoi_exit_bitmap.set(0x41);
        vapic.accept(0x41, TriggerMode::Edge);
        vmcs.deliver_virtual_interrupt(&mut vapic, true);
        assert!(vmcs.virtualize_eoi(&mut vapic).exits);
    }
}
