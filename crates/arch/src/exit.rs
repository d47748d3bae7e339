//! VM exit reasons as Intel's SDM names them (volume 3, appendix C, "VMX
//! Basic Exit Reasons") and Linux's `VMX_EXIT_REASONS` prints them (what
//! `perf kvm stat` shows): the one naming of the simulator's, the real
//! runs' and the report's exits.

use serde::{Deserialize, Serialize};

/// The basic exit reasons interrupt delivery produces, in the SDM's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum VmxExit {
    /// Reason 0: an exception or an NMI (the exit's interruption
    /// information tells which).
    ExceptionNmi,
    ExternalInterrupt,
    InterruptWindow,
    NmiWindow,
    Hlt,
    Vmcall,
    IoInstruction,
    MsrRead,
    MsrWrite,
    ApicAccess,
    EoiInduced,
    EptViolation,
    EptMisconfig,
    /// Exits no KVM statistic categorizes (on kvm_pvm: the privileged
    /// instructions it emulates, which VMX would report as their own reasons).
    Other,
}

impl VmxExit {
    pub const ALL: [VmxExit; 14] = [
        VmxExit::ExceptionNmi,
        VmxExit::ExternalInterrupt,
        VmxExit::InterruptWindow,
        VmxExit::NmiWindow,
        VmxExit::Hlt,
        VmxExit::Vmcall,
        VmxExit::IoInstruction,
        VmxExit::MsrRead,
        VmxExit::MsrWrite,
        VmxExit::ApicAccess,
        VmxExit::EoiInduced,
        VmxExit::EptViolation,
        VmxExit::EptMisconfig,
        VmxExit::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            VmxExit::ExceptionNmi => "EXCEPTION_NMI",
            VmxExit::ExternalInterrupt => "EXTERNAL_INTERRUPT",
            VmxExit::InterruptWindow => "INTERRUPT_WINDOW",
            VmxExit::NmiWindow => "NMI_WINDOW",
            VmxExit::Hlt => "HLT",
            VmxExit::Vmcall => "VMCALL",
            VmxExit::IoInstruction => "IO_INSTRUCTION",
            VmxExit::MsrRead => "MSR_READ",
            VmxExit::MsrWrite => "MSR_WRITE",
            VmxExit::ApicAccess => "APIC_ACCESS",
            VmxExit::EoiInduced => "EOI_INDUCED",
            VmxExit::EptViolation => "EPT_VIOLATION",
            VmxExit::EptMisconfig => "EPT_MISCONFIG",
            VmxExit::Other => "OTHER",
        }
    }

    pub fn from_name(name: &str) -> Option<VmxExit> {
        VmxExit::ALL.into_iter().find(|exit| exit.name() == name)
    }
}

impl std::fmt::Display for VmxExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_serialize_as_the_sdm_spells_them() {
        for exit in VmxExit::ALL {
            assert_eq!(VmxExit::from_name(exit.name()), Some(exit));
            assert_eq!(
                serde_json::to_value(exit).unwrap(),
                serde_json::Value::from(exit.name())
            );
        }
        assert_eq!(VmxExit::from_name("EXTINT"), None);
    }
}
