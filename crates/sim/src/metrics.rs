//! What a run measures, and the serialized result shape shared by
//! `dirq sim --json` and the report.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};

use crate::policy::PolicyKind;

/// VM exit reasons, named as KVM reports them. Ordered, hashed and
/// borrowed as their names, so a map keyed by them is looked up by name
/// and serializes in the same order as one keyed by the name strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExitReason {
    #[serde(rename = "EXTINT")]
    ExtInt,
    #[serde(rename = "PENDVINT")]
    PendVInt,
    #[serde(rename = "MSRWR")]
    MsrWr,
    #[serde(rename = "APIC_ACCESS")]
    ApicAccess,
    #[serde(rename = "IOINSR")]
    IoInsr,
    #[serde(rename = "HLT")]
    Hlt,
    #[serde(rename = "EPT_VIOLATION")]
    EptViolation,
    #[serde(rename = "NMI")]
    Nmi,
    #[serde(rename = "EXCEPTION")]
    Exception,
    #[serde(rename = "OTHER")]
    Other,
}

impl ExitReason {
    pub const ALL: [ExitReason; 10] = [
        ExitReason::ExtInt,
        ExitReason::PendVInt,
        ExitReason::MsrWr,
        ExitReason::ApicAccess,
        ExitReason::IoInsr,
        ExitReason::Hlt,
        ExitReason::EptViolation,
        ExitReason::Nmi,
        ExitReason::Exception,
        ExitReason::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ExitReason::ExtInt => "EXTINT",
            ExitReason::PendVInt => "PENDVINT",
            ExitReason::MsrWr => "MSRWR",
            ExitReason::ApicAccess => "APIC_ACCESS",
            ExitReason::IoInsr => "IOINSR",
            ExitReason::Hlt => "HLT",
            ExitReason::EptViolation => "EPT_VIOLATION",
            ExitReason::Nmi => "NMI",
            ExitReason::Exception => "EXCEPTION",
            ExitReason::Other => "OTHER",
        }
    }

    pub fn index(self) -> usize {
        self as usize
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

impl Hash for ExitReason {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl Borrow<str> for ExitReason {
    fn borrow(&self) -> &str {
        self.name()
    }
}

impl std::fmt::Display for ExitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The invariants checked on every event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Invariant {
    /// An interrupt ran in a VM it does not belong to, or a host interrupt
    /// ran guest code.
    MisDelivery,
    /// An interrupt was handled that was not raised (or twice).
    Doubled,
    /// Raised interrupts neither handled, coalesced nor still pending at
    /// the end.
    Lost,
    /// A vector was dispatched while one of the same or higher priority
    /// class was in service.
    PriorityInversion,
    /// A guest EOI found nothing in service.
    EoiNothingInService,
    /// A guest EOI completed a different vector than the one the guest
    /// was completing.
    EoiWrongVector,
    /// DID: a core other than the designated one had its LAPIC timer armed
    /// for a VM not running there.
    TimerOwnership,
}

impl Invariant {
    pub const ALL: [Invariant; 7] = [
        Invariant::MisDelivery,
        Invariant::Doubled,
        Invariant::Lost,
        Invariant::PriorityInversion,
        Invariant::EoiNothingInService,
        Invariant::EoiWrongVector,
        Invariant::TimerOwnership,
    ];
}

/// Latency summary in ns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyNs {
    pub mean: f64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
    pub samples: u64,
}

/// A throughput figure with its unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    pub value: f64,
    pub unit: String,
}

/// One policy run of one scenario point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub policy: PolicyKind,
    pub params: BTreeMap<String, serde_json::Value>,
    pub exits_per_s: f64,
    pub exits_by_reason_per_s: BTreeMap<ExitReason, f64>,
    pub time_in_guest: f64,
    /// Fraction of the VM cores' time not asleep: guest, host, and host
    /// halt-polling all burn the core.
    pub cpu_busy: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<LatencyNs>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throughput: Option<Throughput>,
    pub invariant_violations: BTreeMap<Invariant, u64>,
    /// Interrupts the checker followed: raised, handled, coalesced.
    pub interrupts: InterruptCounts,
    pub events: u64,
    /// Host wall-clock seconds the run took: the only field that differs
    /// between two runs with one seed.
    pub wall_s: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterruptCounts {
    pub raised: u64,
    pub handled: u64,
    pub coalesced: u64,
    pub pending_at_end: u64,
}

/// A whole scenario: the `--json` output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioResult {
    pub scenario: String,
    pub seed: u64,
    pub profile: String,
    pub runs: Vec<RunResult>,
}

impl ScenarioResult {
    pub fn total_events(&self) -> u64 {
        self.runs.iter().map(|run| run.events).sum()
    }

    pub fn total_wall_s(&self) -> f64 {
        self.runs.iter().map(|run| run.wall_s).sum()
    }
}
