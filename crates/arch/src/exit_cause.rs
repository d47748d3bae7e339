//! Why a VM exit happened, in the terms interrupt delivery is argued in:
//! an EOI write, a timer programmed, an IPI sent, a host interrupt that
//! stopped the guest, an interrupt window... The classes every design's
//! rules are stated over (what `dirq observe` sees a running VM do, and
//! what the simulator's design tables decide about it).
//!
//! An APIC register reached through the xAPIC page or an x2APIC MSR is one
//! register (SDM 10.12.1.2 maps offset to MSR); APIC-write virtualization
//! treats the EOI, TPR and ICR the same way through either interface
//! (SDM 29.4.3, 29.5), so a cause names the register by its x2APIC MSR.

use serde::{Deserialize, Serialize};

use crate::interrupt::TriggerMode;
use crate::lapic::{
    x2apic_msr, APIC_EOI, APIC_ICR_LOW, APIC_LVT_TIMER, APIC_TIMER_DIVIDE_CONFIG,
    APIC_TIMER_INITIAL_COUNT, MSR_IA32_TSC_DEADLINE, MSR_X2APIC_FIRST, MSR_X2APIC_LAST,
};

/// Where an interrupt the guest completes came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InterruptSource {
    /// A device assigned to the VM (VFIO): its MSIs reach the host first.
    AssignedDevice,
    /// A device the VMM or KVM emulates (virtio, e1000, the IOAPIC's pins).
    EmulatedDevice,
    /// The LAPIC timer (or another LVT entry).
    Timer,
    /// An IPI from another vCPU (or the vCPU itself).
    Ipi,
    /// Not known: e.g. an MSI on a VM that has an assigned device.
    Unknown,
}

/// Why one exit happened. The class (the variant) is [`ExitClass`]; the
/// fields carry what a design's rules need to decide the exit's fate.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, strum::EnumDiscriminants,
)]
#[strum_discriminants(
    name(ExitClass),
    derive(
        Hash,
        PartialOrd,
        Ord,
        Serialize,
        Deserialize,
        strum::Display,
        strum::IntoStaticStr,
        strum::VariantArray
    ),
    serde(rename_all = "kebab-case"),
    strum(serialize_all = "kebab-case")
)]
#[serde(rename_all = "kebab-case", tag = "class")]
pub enum ExitCause {
    /// A write to the EOI register (x2APIC MSR 0x80B or xAPIC offset 0xB0).
    EoiWrite {
        completes: InterruptSource,
        /// The completed vector's trigger mode, where the observer saw it
        /// accepted: a level-triggered EOI must reach the hypervisor (the
        /// EOI-exit bitmap, SDM 29.1.3).
        trigger: Option<TriggerMode>,
    },
    /// A write that arms the LAPIC timer: TMICT, TSC_DEADLINE, the LVT
    /// timer entry or the divide register.
    TimerProgramming {
        msr: u32,
    },
    /// The guest's timer fired while it ran (VMX-preemption-timer exits
    /// that KVM uses to emulate the LAPIC timer).
    TimerExpiry,
    /// A write to the ICR: the guest sends an IPI.
    IpiSend {
        icr: u64,
        /// Whether every target vCPU was in guest mode when it was sent
        /// (decides AVIC's incomplete-IPI exit); `None` when not known.
        every_target_running: Option<bool>,
    },
    /// Another APIC register read or written (TPR, SVR, LVT, ...).
    ApicAccess {
        msr: u32,
        write: bool,
    },
    /// An MSR outside the APIC.
    OtherMsr {
        msr: u32,
        write: bool,
    },
    /// An RDMSR or WRMSR whose MSR was not seen (KVM handed it to the VMM,
    /// which no tracepoint follows).
    UntracedMsr {
        write: bool,
    },
    /// A host interrupt that made a running vCPU exit so that a virtual
    /// interrupt could be injected: KVM's kick (the reschedule IPI).
    InterruptDelivery,
    /// The host's timer interrupt (its tick or an hrtimer, which also
    /// carries the guest's emulated LAPIC timer).
    HostTimer,
    /// A host device's interrupt (an assigned device's MSI reaches the host
    /// this way unless it is posted or delivered directly).
    HostDeviceInterrupt,
    /// Another host IPI (function call, IRQ work).
    HostIpi,
    /// A host interrupt whose vector the backend does not report.
    ExternalInterrupt,
    /// The guest opened its interrupt window for a pending injection.
    InterruptWindow,
    Hlt,
    PortIo {
        port: u16,
        write: bool,
    },
    Mmio {
        write: bool,
    },
    /// Anything else (CPUID, control registers, page faults, ...).
    Other,
}

impl ExitCause {
    pub fn class(&self) -> ExitClass {
        ExitClass::from(self)
    }

    /// The cause of an APIC register access at x2APIC `msr` (or the xAPIC
    /// page offset it maps to); `value` is what a write wrote (the full
    /// 64-bit ICR for x2APIC, the low half for xAPIC).
    pub fn apic_access(
        msr: u32,
        write: bool,
        value: u64,
        eoi: InterruptSource,
        trigger: Option<TriggerMode>,
    ) -> Self {
        match (msr, write) {
            (EOI_MSR, true) => ExitCause::EoiWrite {
                completes: eoi,
                trigger,
            },
            (ICR_MSR, true) => ExitCause::IpiSend {
                icr: value,
                every_target_running: None,
            },
            (msr, true) if is_timer_register(msr) => ExitCause::TimerProgramming { msr },
            (msr, write) => ExitCause::ApicAccess { msr, write },
        }
    }

    /// The cause of an MSR access (RDMSR/WRMSR of `msr`).
    pub fn msr_access(
        msr: u32,
        write: bool,
        value: u64,
        eoi: InterruptSource,
        trigger: Option<TriggerMode>,
    ) -> Self {
        if is_apic_msr(msr) {
            ExitCause::apic_access(msr, write, value, eoi, trigger)
        } else if write && msr == MSR_IA32_TSC_DEADLINE {
            ExitCause::TimerProgramming { msr }
        } else {
            ExitCause::OtherMsr { msr, write }
        }
    }
}

const EOI_MSR: u32 = x2apic_msr(APIC_EOI);
const ICR_MSR: u32 = x2apic_msr(APIC_ICR_LOW);

/// Whether `msr` is an x2APIC register (SDM 10.12.1.2).
pub fn is_apic_msr(msr: u32) -> bool {
    (MSR_X2APIC_FIRST..=MSR_X2APIC_LAST).contains(&msr)
}

/// The registers whose writes arm or re-arm the LAPIC timer (SDM 10.5.4).
fn is_timer_register(msr: u32) -> bool {
    msr == x2apic_msr(APIC_TIMER_INITIAL_COUNT)
        || msr == x2apic_msr(APIC_LVT_TIMER)
        || msr == x2apic_msr(APIC_TIMER_DIVIDE_CONFIG)
        || msr == MSR_IA32_TSC_DEADLINE
}

impl ExitClass {
    pub const ALL: &'static [ExitClass] = <ExitClass as strum::VariantArray>::VARIANTS;

    pub fn name(self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lapic::{APIC_SELF_IPI, APIC_TPR};

    #[test]
    fn an_apic_register_is_classed_by_what_its_write_does() {
        let cause = |offset, write| {
            ExitCause::apic_access(
                x2apic_msr(offset),
                write,
                0x41,
                InterruptSource::Timer,
                None,
            )
            .class()
        };
        assert_eq!(cause(APIC_EOI, true), ExitClass::EoiWrite);
        assert_eq!(cause(APIC_ICR_LOW, true), ExitClass::IpiSend);
        assert_eq!(
            cause(APIC_TIMER_INITIAL_COUNT, true),
            ExitClass::TimerProgramming
        );
        assert_eq!(cause(APIC_LVT_TIMER, true), ExitClass::TimerProgramming);
        assert_eq!(cause(APIC_TPR, true), ExitClass::ApicAccess);
        assert_eq!(cause(APIC_SELF_IPI, true), ExitClass::ApicAccess);
        // A read of the EOI or ICR register sends and completes nothing.
        assert_eq!(cause(APIC_EOI, false), ExitClass::ApicAccess);
        assert_eq!(cause(APIC_ICR_LOW, false), ExitClass::ApicAccess);
    }

    #[test]
    fn an_msr_outside_the_apic_is_timer_programming_only_for_tsc_deadline_writes() {
        let class = |msr, write| {
            ExitCause::msr_access(msr, write, 1, InterruptSource::Unknown, None).class()
        };
        assert_eq!(
            class(MSR_IA32_TSC_DEADLINE, true),
            ExitClass::TimerProgramming
        );
        assert_eq!(class(MSR_IA32_TSC_DEADLINE, false), ExitClass::OtherMsr);
        assert_eq!(class(0x1B, true), ExitClass::OtherMsr);
        assert_eq!(class(x2apic_msr(APIC_EOI), true), ExitClass::EoiWrite);
        let icr =
            ExitCause::msr_access(ICR_MSR, true, 0x3_0000_00FB, InterruptSource::Unknown, None);
        assert_eq!(
            icr,
            ExitCause::IpiSend {
                icr: 0x3_0000_00FB,
                every_target_running: None
            }
        );
    }

    #[test]
    fn classes_are_named_in_kebab_case_alike_by_strum_and_serde() {
        for &class in ExitClass::ALL {
            assert_eq!(
                serde_json::to_value(class).unwrap(),
                serde_json::Value::from(class.name())
            );
        }
        assert_eq!(ExitClass::EoiWrite.name(), "eoi-write");
        let cause = serde_json::to_value(ExitCause::PortIo {
            port: 0xf4,
            write: true,
        })
        .unwrap();
        assert_eq!(cause["class"], "port-io");
    }
}
