//! The host's NUMA topology: the cores split into nodes (sockets) of
//! consecutive cores (`numa_nodes` in the scenario), and a message between
//! two cores (an IPI, or a cache line another core polls) takes the
//! profile's same-node or cross-node time.

use super::*;

impl Machine {
    /// The time one message takes from core `from` to core `to`.
    pub(super) fn interconnect_ns(&self, from: usize, to: usize) -> u64 {
        let group = &self.spec.group;
        let numa = &self.profile.numa_ns;
        if group.node_of_core(index_u32(from)) == group.node_of_core(index_u32(to)) {
            numa.same_node
        } else {
            numa.cross_node
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{listed, running, shaped};
    use super::*;
    use crate::design::DesignKind;
    use crate::profile::BuiltinProfile;
    use crate::scenario::{HostShape, NicCoalescing, RunGroup};

    #[test]
    fn a_cross_node_ipi_arrives_later_than_a_same_node_one() {
        let mut group = RunGroup::new(WorkloadKind::Ipi, vec![DesignKind::Apicv]);
        group.host = HostShape {
            cores: 8,
            vms: 1,
            vcpus_per_vm: 6,
        };
        group.numa_nodes = 2;
        let mut m = shaped(RunSpec {
            design: DesignKind::Apicv,
            workload: WorkloadKind::Ipi,
            rate_pps: None,
            group,
            nic: NicCoalescing::FITTED,
            duration_ns: 1_000_000,
            offered_per_s: None,
        });
        m.profile.numa_ns = BuiltinProfile::Ipi2019.profile().numa_ns;
        // Cores 1-3 are node 0, cores 4-7 node 1.
        let same = m.interconnect_ns(1, 3);
        let cross = m.interconnect_ns(1, 4);
        assert!(cross > same, "{cross} > {same}");
        assert_eq!(m.interconnect_ns(4, 1), cross);
        // vCPU 0's IPI to vCPU 1 (core 2) crosses nothing.
        running(&mut m, 0);
        let write = m.ipi.write_icr(0);
        let fx = listed(&mut m, |m, fx| m.perform(write, fx));
        let sent = m.profile.exit_service_ns.icr_write + m.profile.host_ns.send_ipi;
        assert!(fx.contains(&Effect::Schedule {
            at: sent + same,
            event: Event::GuestIpi { vcpu: 1 }
        }));
    }
}
