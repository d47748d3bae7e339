//! One naming of exit reasons in the report: VMX's (`dirq_vmm::exits::VmxExit`).
//! The simulator's short names and KVM's statistics are mapped here, so a
//! reason keeps its name (and colour) in every figure.

use dirq_sim::ExitReason;
use dirq_vmm::exits::VmxExit;

/// The VMX exit the simulator's reason stands for.
fn of_sim(reason: ExitReason) -> VmxExit {
    match reason {
        ExitReason::ExtInt => VmxExit::ExternalInterrupt,
        ExitReason::PendVInt => VmxExit::InterruptWindow,
        ExitReason::MsrWr => VmxExit::MsrWrite,
        ExitReason::ApicAccess => VmxExit::ApicAccess,
        ExitReason::IoInsr => VmxExit::IoInstruction,
        ExitReason::Hlt => VmxExit::Hlt,
        ExitReason::EptViolation => VmxExit::EptViolation,
        // VMX reports both as exit reason 0.
        ExitReason::Nmi | ExitReason::Exception => VmxExit::ExceptionNmi,
        ExitReason::Other => VmxExit::Other,
    }
}

/// The reason's VMX name; a name no mapping knows is kept as it is.
pub fn vmx_name(reason: &str) -> String {
    VmxExit::from_name(reason)
        .or_else(|| {
            serde_json::from_value::<ExitReason>(serde_json::Value::from(reason))
                .ok()
                .map(of_sim)
        })
        .or_else(|| VmxExit::of_kvm_stat(reason))
        .map_or_else(|| reason.to_string(), |exit| exit.name().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulator_and_kvm_names_map_to_vmx_names() {
        assert_eq!(vmx_name("EXTINT"), "EXTERNAL_INTERRUPT");
        assert_eq!(vmx_name("PENDVINT"), "INTERRUPT_WINDOW");
        assert_eq!(vmx_name("halt_exits"), "HLT");
        assert_eq!(vmx_name("HLT"), "HLT");
        assert_eq!(vmx_name("MSR_WRITE"), "MSR_WRITE");
        assert_eq!(vmx_name("something new"), "something new");
        for reason in ExitReason::ALL {
            assert!(VmxExit::from_name(&vmx_name(reason.name())).is_some());
        }
    }
}
