//! Where a run's vCPUs sit: the host's NUMA nodes, each vCPU's home core,
//! and the IPI paper's callees.

use serde::{Deserialize, Serialize};

use super::RunGroup;

/// Whom the IPI paper's caller calls (vCPU 0 is the caller).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IpiTarget {
    /// The first other vCPU homed on vCPU 0's NUMA node.
    #[default]
    SameNode,
    /// The first vCPU homed on another node.
    CrossNode,
    /// Every other vCPU (smp_call_function_many).
    All,
}

impl RunGroup {
    /// The NUMA node of `core`: the cores split into `numa_nodes` equal
    /// runs of consecutive cores.
    pub fn node_of_core(&self, core: u32) -> u32 {
        let node = u64::from(core) * u64::from(self.numa_nodes) / u64::from(self.host.cores.max(1));
        u32::try_from(node).unwrap_or(u32::MAX)
    }

    /// The core vCPU `id` (numbered across the VMs, VM by VM) is pinned
    /// to: round robin over the guest cores (core 0 is housekeeping).
    pub fn home_core(&self, id: u32) -> u32 {
        1 + id % (self.host.cores - 1).max(1)
    }

    /// The ipi-call workload's callees, as vCPU indices in the VM, by
    /// `target` (placed as in the first VM).
    pub fn call_targets(&self) -> Vec<u32> {
        let caller_node = self.node_of_core(self.home_core(0));
        let others = 1..self.host.vcpus_per_vm;
        let on_caller_node = |&index: &u32| self.node_of_core(self.home_core(index)) == caller_node;
        match self.target {
            IpiTarget::SameNode => others.filter(on_caller_node).take(1).collect(),
            IpiTarget::CrossNode => others.filter(|i| !on_caller_node(i)).take(1).collect(),
            IpiTarget::All => others.collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{HostShape, InvalidScenario, WorkloadKind};
    use super::*;
    use crate::design::DesignKind;

    #[test]
    fn call_targets_follow_the_numa_nodes() {
        let mut group = RunGroup::new(WorkloadKind::IpiCall, vec![DesignKind::Apicv]);
        group.host = HostShape {
            cores: 8,
            vms: 1,
            vcpus_per_vm: 6,
        };
        group.numa_nodes = 2;
        // Cores 0-3 are node 0, 4-7 node 1; vCPU i is on core 1 + i.
        assert_eq!((group.node_of_core(3), group.node_of_core(4)), (0, 1));
        assert_eq!(group.call_targets(), [1]);
        group.target = IpiTarget::CrossNode;
        assert_eq!(group.call_targets(), [3]);
        group.target = IpiTarget::All;
        assert_eq!(group.call_targets(), [1, 2, 3, 4, 5]);
        group.target = IpiTarget::CrossNode;
        group.numa_nodes = 1;
        assert_eq!(group.validate(), Err(InvalidScenario::NoCallTarget));
        group.numa_nodes = 9;
        assert_eq!(group.validate(), Err(InvalidScenario::NumaNodes));
    }
}
