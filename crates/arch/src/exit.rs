//! VM exit reasons as Intel's SDM names them (volume 3, appendix C, "VMX
//! Basic Exit Reasons") and Linux's `VMX_EXIT_REASONS` prints them (what
//! `perf kvm stat` shows): the one naming of the simulator's, the real
//! runs' and the report's exits.

use serde::{Deserialize, Serialize};

/// The basic exit reasons interrupt delivery produces, in the SDM's order.
/// Named by strum and serde alike (the test below holds them together).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
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
    pub const ALL: &'static [VmxExit] = <VmxExit as strum::VariantArray>::VARIANTS;

    pub fn name(self) -> &'static str {
        self.into()
    }

    pub fn from_name(name: &str) -> Option<VmxExit> {
        name.parse().ok()
    }

    /// The VMX reason an AMD SVM exit counts as, by its exit code's name as
    /// Linux's `SVM_EXIT_REASONS` spells it (what `kvm_exit` prints): the
    /// one naming of exits across both vendors. `write` is EXITINFO1 bit 0
    /// of an MSR intercept (AMD APM vol. 2, 15.11: 0 RDMSR, 1 WRMSR).
    pub fn of_svm(name: &str, write: bool) -> VmxExit {
        match name {
            "interrupt" => VmxExit::ExternalInterrupt,
            "nmi" => VmxExit::ExceptionNmi,
            "vintr" => VmxExit::InterruptWindow,
            "hlt" => VmxExit::Hlt,
            "io" => VmxExit::IoInstruction,
            "msr" if write => VmxExit::MsrWrite,
            "msr" => VmxExit::MsrRead,
            "hypercall" => VmxExit::Vmcall,
            // A nested page fault: an MMIO access or a missing page alike.
            "npf" => VmxExit::EptViolation,
            "avic_unaccelerated_access" => VmxExit::ApicAccess,
            exception if exception.ends_with(" excp") => VmxExit::ExceptionNmi,
            _ => VmxExit::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_serialize_as_the_sdm_spells_them() {
        for &exit in VmxExit::ALL {
            assert_eq!(VmxExit::from_name(exit.name()), Some(exit));
            assert_eq!(
                serde_json::to_value(exit).unwrap(),
                serde_json::Value::from(exit.name())
            );
        }
        assert_eq!(VmxExit::from_name("EXTINT"), None);
        assert_eq!(VmxExit::ExceptionNmi.name(), "EXCEPTION_NMI");
        assert_eq!(VmxExit::IoInstruction.to_string(), "IO_INSTRUCTION");
    }

    #[test]
    fn svm_exits_count_as_their_vmx_counterparts() {
        assert_eq!(VmxExit::of_svm("vintr", false), VmxExit::InterruptWindow);
        assert_eq!(VmxExit::of_svm("msr", true), VmxExit::MsrWrite);
        assert_eq!(VmxExit::of_svm("msr", false), VmxExit::MsrRead);
        assert_eq!(VmxExit::of_svm("GP excp", false), VmxExit::ExceptionNmi);
        assert_eq!(VmxExit::of_svm("cpuid", false), VmxExit::Other);
        assert_eq!(VmxExit::of_svm("avic_incomplete_ipi", true), VmxExit::Other);
    }
}
