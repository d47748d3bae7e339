//! The host work DID and ELI do that vanilla KVM does not, each charged
//! by the mechanism that does it ([design_work_ns] in the profile): IRTE
//! rewrites at schedule-in and -out (DID's VF follows its VM, VT-d 5.1),
//! timer migration to and from the designated core (DID), the self-IPIs
//! sent just before entry (DID's injection) and ELI's injection-mode
//! switches (docs/mechanisms.md sections 4 and 5).

use super::*;

/// One kind of the designs' own work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DesignWork {
    IrteRewrite,
    TimerMigration,
    SelfIpi,
    InjectionModeSwitch,
}

impl Machine {
    pub(super) fn design_work_ns(&self, work: DesignWork) -> u64 {
        let costs = &self.profile.design_work_ns;
        match work {
            DesignWork::IrteRewrite => costs.irte_rewrite,
            DesignWork::TimerMigration => costs.timer_migration,
            DesignWork::SelfIpi => costs.self_ipi,
            DesignWork::InjectionModeSwitch => costs.injection_mode_switch,
        }
    }

    /// The host work the coming entry of `vcpu` does before it enters:
    /// one self-IPI per virtual interrupt DID injects, or ELI's switch to
    /// injection mode for a virtual interrupt to inject.
    pub(super) fn entry_work_ns(&self, vcpu: usize) -> u64 {
        let v = &self.vcpus[vcpu];
        let self_ipis = match self.design.injection {
            Injection::SelfIpi => u64::from(v.virtual_pending.len()),
            _ => 0,
        };
        let mode_switch = self.design.injection_mode.is_some()
            && v.vlapic.pending_vector().is_some()
            && !v.vmcs.external_interrupt_exits();
        self_ipis * self.design_work_ns(DesignWork::SelfIpi)
            + u64::from(mode_switch) * self.design_work_ns(DesignWork::InjectionModeSwitch)
    }

    /// Whether the host must still do `vcpu`'s entry work before entering;
    /// the first call with work to do says so and marks it paid, so the
    /// host is busy for it once and then enters.
    pub(super) fn entry_work_due(&mut self, vcpu: usize) -> Option<u64> {
        if self.vcpus[vcpu].entry_work_paid {
            return None;
        }
        let ns = self.entry_work_ns(vcpu);
        if ns == 0 {
            return None;
        }
        self.vcpus[vcpu].entry_work_paid = true;
        Some(ns)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{listed, running, scheduled, single};
    use super::*;
    use crate::policy::PolicyKind;

    #[test]
    fn did_pays_one_self_ipi_per_pending_virtual_interrupt_once() {
        let mut m = single(PolicyKind::Did);
        running(&mut m, 0);
        m.cores[1].mode = Mode::Host;
        m.vcpus[0].virtual_pending.set(GUEST_VIRTIO_VECTOR);
        m.vcpus[0].virtual_pending.set(GUEST_TIMER_VECTOR);
        let self_ipi = m.profile.design_work_ns.self_ipi;
        assert!(self_ipi > 0);
        m.now = 100;
        let fx = listed(&mut m, |m, fx| m.finish_host_work(1, 0, fx));
        assert_eq!(
            fx,
            [scheduled(100 + 2 * self_ipi, Event::HostDone { core: 1 })]
        );
        // Paid: the next pass sends them and enters.
        listed(&mut m, |m, fx| m.finish_host_work(1, 0, fx));
        assert_eq!(m.cores[1].mode, Mode::Guest);
        assert!(m.vcpus[0].virtual_pending.is_empty());
        assert!(!m.vcpus[0].entry_work_paid);
    }

    #[test]
    fn vanilla_enters_with_no_design_work() {
        let mut m = single(PolicyKind::Vanilla);
        running(&mut m, 0);
        m.vcpus[0].vlapic.accept(GUEST_VF_VECTOR, TriggerMode::Edge);
        assert_eq!(m.entry_work_ns(0), 0);
    }

    #[test]
    fn eli_pays_the_switch_into_injection_mode_and_out_on_the_eoi() {
        let mut m = single(PolicyKind::Eli);
        running(&mut m, 0);
        m.vcpus[0]
            .vlapic
            .accept(GUEST_VIRTIO_VECTOR, TriggerMode::Edge);
        let switch = m.design_work_ns(DesignWork::InjectionModeSwitch);
        assert_eq!(m.entry_work_ns(0), switch);
        m.prepare_entry(0);
        assert!(m.vcpus[0].vmcs.external_interrupt_exits());
        assert_eq!(m.entry_work_ns(0), 0, "already in injection mode");
        // The handler's EOI exits, completes it and switches back: the
        // exit's service carries the switch.
        let fx = listed(&mut m, |m, fx| m.guest_eoi(0, fx));
        let eoi = m.profile.exit_cost(ExitReason::MsrWrite);
        assert!(fx.contains(&Effect::Exit {
            vcpu: 0,
            reason: ExitReason::MsrWrite,
            service_ns: eoi + switch
        }));
        assert!(!m.vcpus[0].vmcs.external_interrupt_exits());
    }

    #[test]
    fn a_did_reschedule_pays_the_irte_rewrites_and_the_timer_migration() {
        let host = crate::scenario::HostShape {
            cores: 2,
            vms: 2,
            vcpus_per_vm: 1,
        };
        let mut m = super::super::fixture::machine(PolicyKind::Did, WorkloadKind::UdpRx, host);
        running(&mut m, 0);
        m.vcpus[1].state = VcpuState::Runnable;
        m.cores[1].mode = Mode::Host;
        listed(&mut m, |m, fx| m.program_guest_timer(0, 50_000, fx));
        let mut cost = 0;
        listed(&mut m, |m, fx| cost = m.end_slice(1, fx));
        let rewrite = m.design_work_ns(DesignWork::IrteRewrite);
        let migration = m.design_work_ns(DesignWork::TimerMigration);
        // Out: vCPU 0's IRTE to NMI mode and its timer parked; in: vCPU
        // 1's IRTE to this core (it has no timer to install).
        assert_eq!(
            cost,
            m.profile.host_ns.context_switch + 2 * rewrite + migration
        );
        let mut vanilla =
            super::super::fixture::machine(PolicyKind::Vanilla, WorkloadKind::UdpRx, host);
        running(&mut vanilla, 0);
        vanilla.vcpus[1].state = VcpuState::Runnable;
        let mut cost = 0;
        listed(&mut vanilla, |m, fx| cost = m.end_slice(1, fx));
        assert_eq!(
            cost, vanilla.profile.host_ns.context_switch,
            "KVM's IRTE stays"
        );
    }
}
