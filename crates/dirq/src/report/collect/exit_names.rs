//! One naming of exit reasons in the report: VMX's (`dirq_arch::exit::VmxExit`),
//! which the simulator and the real runs' exit tables already use. KVM's
//! statistics are mapped here, so a reason keeps its name (and colour) in
//! every figure.

use dirq_vmm::exits::{exit_of_kvm_stat, UserspaceExit, VmxExit};

/// The reason's VMX name (from a VMX name, a KVM statistic or the run
/// loop's `KVM_EXIT_*` name); a name no mapping knows is kept as it is.
pub fn vmx_name(reason: &str) -> String {
    VmxExit::from_name(reason)
        .or_else(|| exit_of_kvm_stat(reason))
        .or_else(|| reason.parse::<UserspaceExit>().ok().map(VmxExit::from))
        .map_or_else(|| reason.to_string(), |exit| exit.name().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kvm_statistics_map_to_vmx_names_and_vmx_names_stay() {
        assert_eq!(vmx_name("halt_exits"), "HLT");
        assert_eq!(vmx_name("irq_window_exits"), "INTERRUPT_WINDOW");
        assert_eq!(vmx_name("HLT"), "HLT");
        assert_eq!(vmx_name("MSR_WRITE"), "MSR_WRITE");
        assert_eq!(vmx_name("intr"), "EXTERNAL_INTERRUPT");
        assert_eq!(vmx_name("msr_write"), "MSR_WRITE");
        assert_eq!(vmx_name("something new"), "something new");
    }
}
