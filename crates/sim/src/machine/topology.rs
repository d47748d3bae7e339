//! Where everything of a run is, fixed when the machine is built: each
//! vCPU's VM, home core and queue pair, each VM's vCPUs, each queue
//! pair's owner, and the time a message takes between two cores (NUMA).
//! Every part of the machine reads it; none changes it.

use std::ops::Range;

use crate::profile::NumaNs;
use crate::scenario::RunGroup;

/// One vCPU's place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Place {
    vm: usize,
    home_core: usize,
    /// The queue pair its driver polls: its own, or (if it owns none) its
    /// VM's first.
    pair: usize,
}

#[derive(Clone, Debug)]
pub(super) struct Topology {
    vcpus: Vec<Place>,
    /// Per VM, its vCPUs: consecutive, in APIC-ID order.
    vms: Vec<Range<usize>>,
    /// Per VM, its queue pairs: the first `owners` vCPUs own one each.
    vm_pairs: Vec<Range<usize>>,
    pair_owners: Vec<usize>,
    /// Per core, its NUMA node.
    nodes: Vec<u32>,
    numa_ns: NumaNs,
}

impl Topology {
    /// The run group's host: vCPUs pinned round robin to the guest cores,
    /// VM by VM; the first `queue_owners` vCPUs of each VM own a queue
    /// pair, the others poll their VM's first.
    pub(super) fn new(group: &RunGroup, numa_ns: NumaNs) -> Topology {
        let host = group.host;
        let per_vm = host.vcpus_per_vm as usize;
        let owners = group.queue_owners.per_vm(host.vcpus_per_vm) as usize;
        let mut topology = Topology {
            vcpus: Vec::new(),
            vms: Vec::new(),
            vm_pairs: Vec::new(),
            pair_owners: Vec::new(),
            nodes: (0..host.cores)
                .map(|core| group.node_of_core(core))
                .collect(),
            numa_ns,
        };
        for vm in 0..host.vms as usize {
            let first = topology.vcpus.len();
            let first_pair = topology.pair_owners.len();
            for index in 0..per_vm {
                let id = first + index;
                let pair = if index < owners {
                    topology.pair_owners.push(id);
                    topology.pair_owners.len() - 1
                } else {
                    first_pair
                };
                let home_core = group.home_core(super::index_u32(id)) as usize;
                topology.vcpus.push(Place {
                    vm,
                    home_core,
                    pair,
                });
            }
            topology.vms.push(first..first + per_vm);
            topology
                .vm_pairs
                .push(first_pair..topology.pair_owners.len());
        }
        topology
    }

    pub(super) fn vcpu_count(&self) -> usize {
        self.vcpus.len()
    }

    pub(super) fn vm_count(&self) -> usize {
        self.vms.len()
    }

    pub(super) fn pair_count(&self) -> usize {
        self.pair_owners.len()
    }

    pub(super) fn vm_of(&self, vcpu: usize) -> usize {
        self.vcpus[vcpu].vm
    }

    pub(super) fn home_core(&self, vcpu: usize) -> usize {
        self.vcpus[vcpu].home_core
    }

    /// The queue pair `vcpu`'s driver polls.
    pub(super) fn pair_of(&self, vcpu: usize) -> usize {
        self.vcpus[vcpu].pair
    }

    /// `vm`'s vCPUs, in APIC-ID order.
    pub(super) fn vcpus_of(&self, vm: usize) -> Range<usize> {
        self.vms[vm].clone()
    }

    /// `vm`'s first vCPU: the lead of the workloads that have one.
    pub(super) fn lead(&self, vm: usize) -> usize {
        self.vms[vm].start
    }

    /// The vCPUs of `vm` that own a queue pair.
    pub(super) fn owners(&self, vm: usize) -> impl Iterator<Item = usize> + '_ {
        self.vm_pairs[vm].clone().map(|pair| self.pair_owners[pair])
    }

    /// The queue pair of `vm`'s first vCPU: block requests and a server's
    /// or SIP's traffic.
    pub(super) fn first_pair(&self, vm: usize) -> usize {
        self.pair_of(self.lead(vm))
    }

    pub(super) fn owner(&self, pair: usize) -> usize {
        self.pair_owners[pair]
    }

    /// The VM a queue pair belongs to.
    pub(super) fn vm_of_pair(&self, pair: usize) -> usize {
        self.vm_of(self.owner(pair))
    }

    /// The time one message (an IPI, a cache line another core polls)
    /// takes from core `from` to core `to`: the profile's same-node or
    /// cross-node time.
    pub(super) fn interconnect_ns(&self, from: usize, to: usize) -> u64 {
        if self.nodes[from] == self.nodes[to] {
            self.numa_ns.same_node
        } else {
            self.numa_ns.cross_node
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::design::DesignKind;
    use crate::profile::BuiltinProfile;
    use crate::scenario::{HostShape, QueueOwners, WorkloadKind};

    #[test]
    fn vcpus_go_round_robin_and_non_owners_poll_their_vms_first_pair() {
        let mut group = RunGroup::new(WorkloadKind::UdpRx, vec![DesignKind::Did]);
        group.host = HostShape {
            cores: 3,
            vms: 2,
            vcpus_per_vm: 3,
        };
        let topology = Topology::new(&group, BuiltinProfile::Did2015.profile().numa_ns);
        assert_eq!((topology.vcpu_count(), topology.pair_count()), (6, 2));
        assert_eq!(topology.vcpus_of(1), 3..6);
        assert_eq!(topology.home_core(0), 1);
        assert_eq!(topology.home_core(3), 2);
        assert_eq!(topology.pair_of(4), 1, "vCPU 4 polls VM 1's pair");
        assert_eq!(topology.owner(1), 3);
        assert_eq!(topology.vm_of_pair(1), 1);
        group.queue_owners = QueueOwners::EveryVcpu;
        let every = Topology::new(&group, BuiltinProfile::Did2015.profile().numa_ns);
        assert_eq!(every.pair_count(), 6);
        assert_eq!(every.owners(1).collect::<Vec<_>>(), [3, 4, 5]);
    }

    #[test]
    fn a_cross_node_message_takes_longer_than_a_same_node_one() {
        let mut group = RunGroup::new(WorkloadKind::Ipi, vec![DesignKind::Apicv]);
        group.host = HostShape {
            cores: 8,
            vms: 1,
            vcpus_per_vm: 6,
        };
        group.numa_nodes = 2;
        let topology = Topology::new(&group, BuiltinProfile::Ipi2019.profile().numa_ns);
        // Cores 1-3 are node 0, cores 4-7 node 1.
        let same = topology.interconnect_ns(1, 3);
        let cross = topology.interconnect_ns(1, 4);
        assert!(cross > same, "{cross} > {same}");
        assert_eq!(topology.interconnect_ns(4, 1), cross);
    }
}
