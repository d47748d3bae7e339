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
}
