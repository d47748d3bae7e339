//! One naming of exit reasons in the report: VMX's (`dirq_arch::exit::VmxExit`),
//! which the simulator and the real runs' exit tables already use. KVM's
//! statistics are mapped here, so a reason keeps its name (and colour) in
//! every figure.

use std::cmp::Ordering;
use std::fmt;

use serde::{Serialize, Serializer};

use dirq_vmm::exits::{exit_of_kvm_stat, UserspaceExit, VmxExit};

/// An exit reason as the report keys it: a VMX reason, or a name no
/// mapping knows, kept as it came. Ordered, and serialized, by its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitReason {
    Vmx(VmxExit),
    Unmapped(String),
}

impl ExitReason {
    /// The reason a name stands for: a VMX name, a KVM statistic or the
    /// run loop's `KVM_EXIT_*` name.
    pub fn of(name: &str) -> ExitReason {
        VmxExit::from_name(name)
            .or_else(|| exit_of_kvm_stat(name))
            .or_else(|| name.parse::<UserspaceExit>().ok().map(VmxExit::from))
            .map_or_else(|| ExitReason::Unmapped(name.to_string()), ExitReason::Vmx)
    }

    pub fn name(&self) -> &str {
        match self {
            ExitReason::Vmx(exit) => exit.name(),
            ExitReason::Unmapped(name) => name,
        }
    }
}

impl From<VmxExit> for ExitReason {
    fn from(exit: VmxExit) -> Self {
        ExitReason::Vmx(exit)
    }
}

impl fmt::Display for ExitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Ord for ExitReason {
    fn cmp(&self, other: &Self) -> Ordering {
        self.name().cmp(other.name())
    }
}

impl PartialOrd for ExitReason {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Serialize for ExitReason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kvm_statistics_map_to_vmx_reasons_and_vmx_names_stay() {
        let vmx = |name| ExitReason::of(name);
        assert_eq!(vmx("halt_exits"), ExitReason::Vmx(VmxExit::Hlt));
        assert_eq!(vmx("irq_window_exits"), VmxExit::InterruptWindow.into());
        assert_eq!(vmx("HLT"), VmxExit::Hlt.into());
        assert_eq!(vmx("MSR_WRITE"), VmxExit::MsrWrite.into());
        assert_eq!(vmx("intr"), VmxExit::ExternalInterrupt.into());
        assert_eq!(vmx("msr_write"), VmxExit::MsrWrite.into());
        let new = vmx("something new");
        assert_eq!(new, ExitReason::Unmapped("something new".into()));
        assert_eq!(new.to_string(), "something new");
        // By name, as the page lists them, whether VMX's or not.
        let mut reasons = [vmx("MSR_WRITE"), new.clone(), vmx("EXTERNAL_INTERRUPT")];
        reasons.sort();
        assert_eq!(
            reasons.clone().map(|r| r.to_string()),
            ["EXTERNAL_INTERRUPT", "MSR_WRITE", "something new"]
        );
        assert_eq!(
            serde_json::to_value(&reasons[0]).expect("serializes"),
            "EXTERNAL_INTERRUPT"
        );
    }
}
