//! A workload tested alone: the context a machine would hand it, built
//! from a run group's topology, with the live facts a test sets.

use std::collections::{BTreeMap, BTreeSet};

use super::{Ctx, MachineState};
use crate::design::DesignKind;
use crate::machine::effects::{Effect, Effects};
use crate::machine::ledger::Counters;
use crate::machine::topology::Topology;
use crate::machine::Ring;
use crate::profile::CostProfile;
use crate::rng::Rng;
use crate::scenario::{NicCoalescing, RunGroup, RunSpec, WorkloadKind};

/// The live facts a test gives a workload.
#[derive(Debug, Default)]
pub(in crate::machine) struct Facts {
    pub(in crate::machine) in_guest: Vec<usize>,
    pub(in crate::machine) spinning: Vec<usize>,
    pub(in crate::machine) rings: BTreeMap<(usize, Ring), u32>,
    /// The rings whose interrupt a driver masked.
    pub(in crate::machine) masked: BTreeSet<(usize, Ring)>,
}

impl MachineState for Facts {
    fn in_guest(&self, vcpu: usize) -> bool {
        self.in_guest.contains(&vcpu)
    }

    fn spinning(&self, vcpu: usize) -> bool {
        self.spinning.contains(&vcpu)
    }

    fn ring_level(&self, pair: usize, ring: Ring) -> u32 {
        self.rings.get(&(pair, ring)).copied().unwrap_or(0)
    }
}

/// What a workload is handed, owned by the test.
pub(in crate::machine) struct Bench {
    pub(in crate::machine) now: u64,
    pub(in crate::machine) rng: Rng,
    pub(in crate::machine) record: Counters,
    pub(in crate::machine) topology: Topology,
    pub(in crate::machine) facts: Facts,
}

impl Bench {
    /// The bench of `group`'s host, on the did-2015 profile.
    pub(in crate::machine) fn new(group: &RunGroup) -> Bench {
        Bench {
            now: 0,
            rng: Rng::new(1),
            record: Counters::default(),
            topology: Topology::new(group, CostProfile::did_2015().numa_ns),
            facts: Facts::default(),
        }
    }

    /// Calls `call` with the context and an effect list of its own; what
    /// it returned and the effects it listed.
    pub(in crate::machine) fn call<R>(
        &mut self,
        call: impl FnOnce(&mut Ctx, &mut Effects) -> R,
    ) -> (R, Vec<Effect>) {
        let mut ctx = Ctx {
            now: self.now,
            rng: &mut self.rng,
            record: &mut self.record,
            topology: &self.topology,
            state: &self.facts,
        };
        let mut fx = Effects {
            listed_from: Effects::LIST_ALL,
            ..Effects::default()
        };
        let result = call(&mut ctx, &mut fx);
        (result, fx.stack)
    }

    /// The effects `call` lists.
    pub(in crate::machine) fn listed<R>(
        &mut self,
        call: impl FnOnce(&mut Ctx, &mut Effects) -> R,
    ) -> Vec<Effect> {
        self.call(call).1
    }
}

/// A run of `workload` under DID on `group`, for a workload's constructor.
pub(in crate::machine) fn spec(workload: WorkloadKind, group: RunGroup) -> RunSpec {
    RunSpec {
        design: DesignKind::Did,
        workload,
        rate_pps: group.rates_pps.first().copied(),
        group,
        nic: NicCoalescing::FITTED,
        duration_ns: 10_000_000,
    }
}

/// A group of one VM of `vcpus` vCPUs, each on its own core.
pub(in crate::machine) fn one_vm(workload: WorkloadKind, vcpus: u32) -> RunGroup {
    let mut group = RunGroup::new(workload, vec![DesignKind::Did]);
    group.host = crate::scenario::HostShape {
        cores: vcpus + 1,
        vms: 1,
        vcpus_per_vm: vcpus,
    };
    group
}
