//! What `dirq observe` concludes from an observation: each VM's what-if
//! per design (the simulator's design tables deciding every observed
//! exit's fate), its hot spots named by the guest's symbols, and the
//! rates a simulation of it could take. The same document is printed by
//! `--json`, written by `--record` and read back by `--replay` and
//! `dirq report --observation`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dirq_arch::exit_cause::ExitClass;
use dirq_sim::what_if::{self, ExitCosts, ObservedExits, Saving, VmFacts};
use dirq_vmm::observe::account::SourceKind;
use dirq_vmm::observe::symbols::{SymbolFit, SymbolMap};
use dirq_vmm::observe::{Observation, Sources, VmObservation};
use serde::{Deserialize, Serialize};

/// The observation and what dirq concludes from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub duration_s: f64,
    pub sources: Sources,
    /// What an exit costs on this host, where the trace did not time it.
    pub costs: Option<Costs>,
    pub vms: Vec<ObservedVm>,
}

/// Exit costs and where they came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    #[serde(flatten)]
    pub floors: ExitCosts,
    /// "dirq probe, run after the observation", or the probe file read.
    pub from: String,
}

/// One VM: what was seen, and what follows from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ObservedVm {
    #[serde(flatten)]
    pub seen: VmObservation,
    /// Hot spots' names from the guest's symbol map, by RIP.
    #[serde(deserialize_with = "dirq_vmm::observe::numeric_keys::deserialize")]
    pub symbols: BTreeMap<u64, String>,
    pub symbol_fit: Option<SymbolFit>,
    /// Per design: the exits it removes and the CPU time that gives back.
    pub what_if: Vec<Saving>,
    pub simulator_inputs: SimulatorInputs,
}

/// The observed rates a simulation of this VM could take, and what it
/// cannot (see docs/observe.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimulatorInputs {
    /// Interrupts per second by source (MSI, IOAPIC pin, IPI, timer).
    pub interrupts_per_s: BTreeMap<SourceKind, f64>,
    /// The busiest vector of each source.
    pub vectors: BTreeMap<SourceKind, u8>,
    /// Exits per second by class.
    pub exits_per_s: BTreeMap<ExitClass, f64>,
    pub halts_per_s: f64,
    /// What the observation cannot give a simulation.
    pub missing: Vec<String>,
}

/// The symbols hot spots are named with: the map the user gave, for every
/// VM; else, for a VM dirq's own `run` runs, the guest kernel embedded in
/// this binary (kept only where it names the hot spots: `run --kernel`
/// boots another).
pub struct Symbols {
    pub given: Option<(PathBuf, SymbolMap)>,
    dirq_guest: SymbolMap,
}

/// The label of the embedded guest kernel's map.
const DIRQ_GUEST: &str = "dirq's guest kernel (embedded in this binary)";

impl Symbols {
    pub fn new(given: Option<(PathBuf, SymbolMap)>) -> Symbols {
        Symbols {
            given,
            dirq_guest: SymbolMap::from_elf(dirq_vmm::abi::GUEST_ELF),
        }
    }

    fn for_vm(&self, vmm: &str) -> Option<(&Path, &SymbolMap, bool)> {
        match &self.given {
            Some((path, map)) => Some((path.as_path(), map, false)),
            None if vmm == "dirq" => Some((Path::new(DIRQ_GUEST), &self.dirq_guest, true)),
            None => None,
        }
    }
}

impl Record {
    pub fn from(observation: Observation, costs: Option<Costs>, symbols: &Symbols) -> Record {
        let vms = observation
            .vms
            .into_iter()
            .map(|seen| {
                let symbols = symbols.for_vm(&seen.vmm);
                analyse(seen, costs.as_ref(), symbols)
            })
            .collect();
        Record {
            duration_s: observation.duration_s,
            sources: observation.sources,
            costs,
            vms,
        }
    }

    /// Whether any VM's exits went untimed, so that a saving needs the
    /// probe's floors.
    pub fn needs_costs(observation: &Observation) -> bool {
        observation
            .vms
            .iter()
            .any(|vm| vm.causes.iter().any(|row| row.time.samples < row.count))
    }
}

fn analyse(
    seen: VmObservation,
    costs: Option<&Costs>,
    symbols: Option<(&Path, &SymbolMap, bool)>,
) -> ObservedVm {
    let exits: Vec<ObservedExits> = seen
        .causes
        .iter()
        .map(|row| ObservedExits {
            cause: row.cause,
            count: row.count,
            timed: row.time.samples,
            timed_ns: row.time.total_ns,
            to_userspace: row.to_userspace,
        })
        .collect();
    let facts = VmFacts {
        assigned_devices: seen.assigned_devices,
    };
    let what_if = what_if::savings(&exits, facts, costs.map(|c| c.floors), seen.observed_s);
    let (names, symbol_fit) = match symbols {
        Some((file, map, automatic)) => {
            let names: BTreeMap<u64, String> = seen
                .hot_spots
                .iter()
                .filter_map(|spot| Some((spot.rip, map.name(spot.rip)?)))
                .collect();
            let fit = SymbolFit {
                file: PathBuf::from(file),
                named: names.len(),
                of: seen.hot_spots.len(),
            };
            if automatic && fit.warning().is_some() {
                (BTreeMap::new(), None)
            } else {
                (names, Some(fit))
            }
        }
        None => (BTreeMap::new(), None),
    };
    ObservedVm {
        simulator_inputs: simulator_inputs(&seen),
        symbols: names,
        symbol_fit,
        what_if,
        seen,
    }
}

fn simulator_inputs(seen: &VmObservation) -> SimulatorInputs {
    let per_s = |count: u64| {
        if seen.observed_s > 0.0 {
            dirq_stats::f64_of(count) / seen.observed_s
        } else {
            0.0
        }
    };
    let mut by_source: BTreeMap<SourceKind, u64> = BTreeMap::new();
    let mut busiest: BTreeMap<SourceKind, (u64, u8)> = BTreeMap::new();
    for row in &seen.interrupts {
        for (&source, &count) in &row.sources {
            *by_source.entry(source).or_insert(0) += count;
            let best = busiest.entry(source).or_insert((0, row.vector));
            if count > best.0 {
                *best = (count, row.vector);
            }
        }
    }
    let mut missing = vec![
        "the guest's own work between interrupts (its code runs unseen between exits)".to_string(),
        "the devices' queues and batching (only their interrupts are seen)".to_string(),
    ];
    if seen.causes.iter().all(|row| row.time.samples == 0) {
        missing.push("each exit's time on this host (the backend does not time exits)".to_string());
    }
    SimulatorInputs {
        interrupts_per_s: by_source
            .iter()
            .map(|(source, count)| (*source, per_s(*count)))
            .collect(),
        vectors: busiest
            .into_iter()
            .map(|(source, (_, vector))| (source, vector))
            .collect(),
        exits_per_s: seen
            .classes()
            .into_iter()
            .map(|(class, tally)| (class, per_s(tally.count)))
            .collect(),
        halts_per_s: per_s(seen.halts.traced.halts),
        missing,
    }
}
