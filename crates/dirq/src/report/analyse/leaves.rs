//! What each design leaves: for a scenario whose `[figure]` draws
//! `exits-left` (four workloads: a guest timer, an assigned device, IPIs to
//! a running vCPU, IPIs to a halting one), each design's exits per interrupt by VMX reason: the
//! run's exits per second by reason over the interrupts it raised per
//! second. Every exit counts, whatever caused it (the host's tick
//! included): what is left is what a guest on that design pays.

use std::collections::BTreeMap;

use dirq_arch::exit::VmxExit;
use dirq_sim::design::DesignKind;
use dirq_sim::scenario::{IdleMode, WorkloadKind};

use crate::common::views::SimRun;

/// Below this many exits per interrupt a reason is left out of its row.
const NEGLIGIBLE: f64 = 0.005;

/// The interrupt a workload of the scenario is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum InterruptKind {
    Timer,
    Device,
    Ipi,
    Halt,
}

impl InterruptKind {
    pub const ALL: [InterruptKind; 4] = [
        InterruptKind::Timer,
        InterruptKind::Device,
        InterruptKind::Ipi,
        InterruptKind::Halt,
    ];

    pub fn name(self) -> &'static str {
        match self {
            InterruptKind::Timer => "timer (1 kHz guest timer)",
            InterruptKind::Device => "device (SR-IOV VF, 100K packets/s)",
            InterruptKind::Ipi => "IPI (to a polling vCPU)",
            InterruptKind::Halt => "halt (IPI to a halting vCPU)",
        }
    }

    /// The kind a run of the scenario measures, from its workload and
    /// idle mode.
    fn of(run: &SimRun) -> Option<InterruptKind> {
        fn param<T: serde::de::DeserializeOwned>(run: &SimRun, key: &str) -> Option<T> {
            serde_json::from_value(run.params.get(key)?.clone()).ok()
        }
        match (param(run, "workload")?, param(run, "idle")) {
            (WorkloadKind::Cyclictest, _) => Some(InterruptKind::Timer),
            (WorkloadKind::UdpRx, _) => Some(InterruptKind::Device),
            (WorkloadKind::Ipi, Some(IdleMode::Poll)) => Some(InterruptKind::Ipi),
            (WorkloadKind::Ipi, Some(IdleMode::Hlt)) => Some(InterruptKind::Halt),
            _ => None,
        }
    }
}

/// One design's exits per interrupt for one kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExitsPerInterrupt {
    /// By VMX exit reason.
    pub by_reason: BTreeMap<VmxExit, f64>,
    pub total: f64,
}

/// The table's numbers: per kind, per design (in `designs` order).
#[derive(Clone, Debug, PartialEq)]
pub struct DesignLeaves {
    pub designs: Vec<DesignKind>,
    pub kinds: Vec<(InterruptKind, Vec<Option<ExitsPerInterrupt>>)>,
}

impl DesignLeaves {
    /// The reasons any design leaves for `kind`, in the SDM's order.
    pub fn reasons(cells: &[Option<ExitsPerInterrupt>]) -> Vec<VmxExit> {
        let mut reasons: Vec<VmxExit> = cells
            .iter()
            .flatten()
            .flat_map(|cell| cell.by_reason.keys().copied())
            .collect();
        reasons.sort();
        reasons.dedup();
        reasons
    }
}

fn exits_per_interrupt(run: &SimRun) -> Option<ExitsPerInterrupt> {
    if run.interrupts_per_s <= 0.0 {
        return None;
    }
    let by_reason: BTreeMap<VmxExit, f64> = run
        .exits_by_reason_per_s
        .iter()
        .map(|(reason, rate)| (*reason, rate / run.interrupts_per_s))
        .filter(|(_, per_interrupt)| *per_interrupt >= NEGLIGIBLE)
        .collect();
    Some(ExitsPerInterrupt {
        total: run.exits_per_s / run.interrupts_per_s,
        by_reason,
    })
}

/// The table of a scenario's `runs`, designs in the order the simulator
/// lists them.
pub fn what_each_design_leaves(all: &[&SimRun]) -> DesignLeaves {
    let designs: Vec<DesignKind> = DesignKind::ALL
        .into_iter()
        .filter(|design| all.iter().any(|run| run.design == *design))
        .collect();
    let kinds = InterruptKind::ALL
        .into_iter()
        .filter_map(|kind| {
            let runs: Vec<&SimRun> = all
                .iter()
                .copied()
                .filter(|run| InterruptKind::of(run) == Some(kind))
                .collect();
            if runs.is_empty() {
                return None;
            }
            let cells = designs
                .iter()
                .map(|design| {
                    runs.iter()
                        .find(|run| run.design == *design)
                        .and_then(|run| exits_per_interrupt(run))
                })
                .collect();
            Some((kind, cells))
        })
        .collect();
    DesignLeaves { designs, kinds }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::views::SimScenario;

    fn run(
        design: &str,
        workload: WorkloadKind,
        idle: Option<&str>,
        exits: &[(&str, f64)],
    ) -> serde_json::Value {
        let by_reason: serde_json::Map<String, serde_json::Value> = exits
            .iter()
            .map(|(reason, rate)| (reason.to_string(), (*rate).into()))
            .collect();
        let total: f64 = exits.iter().map(|(_, rate)| rate).sum();
        let mut params = serde_json::json!({ "workload": workload });
        if let Some(idle) = idle {
            params["idle"] = idle.into();
        }
        serde_json::json!({
            "design": design,
            "params": params,
            "exits_per_s": total,
            "interrupts_per_s": 1000.0,
            "exits_by_reason_per_s": by_reason,
            "time_in_guest": 0.9,
        })
    }

    #[test]
    fn each_design_gets_its_exits_per_interrupt_by_reason_per_kind() {
        let raw = serde_json::json!({
            "scenario": "gap",
            "runs": [
                run("vanilla", WorkloadKind::Cyclictest, None, &[("MSR_WRITE", 1000.0), ("EXTERNAL_INTERRUPT", 1000.0)]),
                run("did", WorkloadKind::Cyclictest, None, &[("MSR_WRITE", 0.001)]),
                run("apicv-pi-ipiv", WorkloadKind::Ipi, Some("halt"), &[("HLT", 1000.0)]),
                run("avic", WorkloadKind::Ipi, Some("halt"), &[]),
                run("avic", WorkloadKind::Fio, None, &[("IO_INSTRUCTION", 1000.0)]),
            ],
        });
        let result = SimScenario::from_raw(&raw).expect("view");
        let runs: Vec<&SimRun> = result.runs.iter().collect();
        let leaves = what_each_design_leaves(&runs);
        assert_eq!(
            leaves.designs,
            [
                DesignKind::Vanilla,
                DesignKind::ApicvPiIpiv,
                DesignKind::Avic,
                DesignKind::Did
            ]
        );
        assert_eq!(leaves.kinds.len(), 2, "the fio run is no kind");
        let (kind, timer) = &leaves.kinds[0];
        assert_eq!(*kind, InterruptKind::Timer);
        let vanilla = timer[0].as_ref().expect("vanilla ran");
        assert_eq!(vanilla.total, 2.0);
        assert_eq!(vanilla.by_reason[&VmxExit::MsrWrite], 1.0);
        assert!(timer[1].is_none(), "no timer run under apicv-pi-ipiv");
        let did = timer[3].as_ref().expect("did ran");
        assert!(did.by_reason.is_empty(), "negligible reasons are left out");
        assert_eq!(
            DesignLeaves::reasons(timer),
            [VmxExit::ExternalInterrupt, VmxExit::MsrWrite]
        );
        let (kind, halt) = &leaves.kinds[1];
        assert_eq!(*kind, InterruptKind::Halt);
        assert_eq!(halt[1].as_ref().map(|cell| cell.total), Some(1.0));
        assert_eq!(halt[2].as_ref().map(|cell| cell.total), Some(0.0));
        assert!(halt[0].is_none() && halt[3].is_none());
    }
}
