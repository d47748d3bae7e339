//! What a run measures, and the serialized result shape shared by
//! `dirq sim --json` and the report.

use std::collections::BTreeMap;

use dirq_arch::exit::VmxExit;
use dirq_stats::LatencySummary;
use serde::{Deserialize, Serialize};

use crate::design::DesignKind;

/// The simulator's exit classes: each is one VMX exit (what the output
/// names it, [`ExitReason::vmx`]) with a service time of its own, so NMI
/// and exception exits, both VMX's `EXCEPTION_NMI`, cost differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitReason {
    ExternalInterrupt,
    InterruptWindow,
    MsrWrite,
    ApicAccess,
    IoInstruction,
    Hlt,
    EptViolation,
    Nmi,
    Exception,
    Other,
}

impl ExitReason {
    pub const ALL: [ExitReason; 10] = [
        ExitReason::ExternalInterrupt,
        ExitReason::InterruptWindow,
        ExitReason::MsrWrite,
        ExitReason::ApicAccess,
        ExitReason::IoInstruction,
        ExitReason::Hlt,
        ExitReason::EptViolation,
        ExitReason::Nmi,
        ExitReason::Exception,
        ExitReason::Other,
    ];

    /// The VMX basic exit reason (SDM volume 3, appendix C).
    pub fn vmx(self) -> VmxExit {
        match self {
            ExitReason::ExternalInterrupt => VmxExit::ExternalInterrupt,
            ExitReason::InterruptWindow => VmxExit::InterruptWindow,
            ExitReason::MsrWrite => VmxExit::MsrWrite,
            ExitReason::ApicAccess => VmxExit::ApicAccess,
            ExitReason::IoInstruction => VmxExit::IoInstruction,
            ExitReason::Hlt => VmxExit::Hlt,
            ExitReason::EptViolation => VmxExit::EptViolation,
            ExitReason::Nmi | ExitReason::Exception => VmxExit::ExceptionNmi,
            ExitReason::Other => VmxExit::Other,
        }
    }

    pub fn index(self) -> usize {
        self as usize
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

/// A throughput figure with its unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    pub value: f64,
    pub unit: ThroughputUnit,
}

/// What a workload's throughput counts; serialized, and printed, as the
/// unit people read ("packets/s").
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(into = "&'static str", try_from = "String")]
pub enum ThroughputUnit {
    #[strum(serialize = "packets/s")]
    PacketsPerS,
    #[strum(serialize = "Gbit/s")]
    GbitPerS,
    #[strum(serialize = "Mbit/s")]
    MbitPerS,
    #[strum(serialize = "IOPS")]
    Iops,
    #[strum(serialize = "calls/s")]
    CallsPerS,
    #[strum(serialize = "transactions/s")]
    TransactionsPerS,
    #[strum(serialize = "requests/s")]
    RequestsPerS,
    #[strum(serialize = "interrupts/s")]
    InterruptsPerS,
    /// Whileloop's: the share of the guest core the loop kept.
    #[strum(serialize = "fraction of the core running the loop")]
    LoopShare,
}

impl TryFrom<String> for ThroughputUnit {
    type Error = strum::ParseError;
    fn try_from(unit: String) -> Result<Self, Self::Error> {
        unit.parse()
    }
}

/// One design run of one scenario point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub design: DesignKind,
    pub params: BTreeMap<String, serde_json::Value>,
    pub exits_per_s: f64,
    /// Interrupts raised per second (the checker's `raised` over the run):
    /// the papers' "interrupts/s". Absent from results written before it
    /// existed, read as 0.
    #[serde(default)]
    pub interrupts_per_s: f64,
    pub exits_by_reason_per_s: BTreeMap<VmxExit, f64>,
    pub time_in_guest: f64,
    /// Fraction of the VM cores' time not asleep: guest, host, and host
    /// halt-polling all burn the core.
    pub cpu_busy: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<LatencySummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throughput: Option<Throughput>,
    pub invariant_violations: BTreeMap<Invariant, u64>,
    /// Results particular to one workload, beside the common fields.
    #[serde(flatten)]
    pub figures: WorkloadFigures,
    /// Interrupts the checker followed: raised, handled, coalesced.
    pub interrupts: InterruptCounts,
    pub events: u64,
    /// Host wall-clock seconds the run took: the only field that differs
    /// between two runs with one seed.
    pub wall_s: f64,
}

/// The figures one workload reports that the others do not; absent from a
/// run's JSON unless its workload measures them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadFigures {
    /// Loongson VIOAPIC: host cycles per delivered interrupt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycles_per_interrupt: Option<f64>,
    /// Loongson VIOAPIC: seconds for one million interrupts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds_per_million: Option<f64>,
    /// Loongson VIOAPIC: the share of the core's time spent in the
    /// controller's register accesses (their exits and the VMM's crossings
    /// they cause).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub register_access_share: Option<f64>,
    /// IPI paper: seconds for the benchmark's 100,000 calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_s: Option<f64>,
    /// VoIP: calls per setup-latency bucket (`<10`, `10-100`, `100-200`,
    /// `>200` ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup_ms_buckets: Option<BTreeMap<String, u64>>,
    /// VoIP: calls completed per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_rate: Option<f64>,
    /// VoIP: INVITEs SIP's timers retransmitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invite_retransmissions: Option<u64>,
    /// Guest timer interrupts that arrived while their core was in host
    /// mode (runs with a guest timer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timer_irqs_in_host_mode: Option<u64>,
    /// Guest EOIs KVM's PV EOI let the guest skip (runs whose guest uses
    /// PV EOI).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pv_eoi_skips: Option<u64>,
    /// Servers with a QoS target: the closed loop's 95th percentile
    /// against it (`crate::qos`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qos: Option<QosCheck>,
}

/// A run's request latencies against a QoS target: 95 % within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosCheck {
    pub target_ms: u64,
    /// None when no request was answered.
    pub p95_ns: Option<u64>,
    pub met: bool,
}

impl QosCheck {
    /// Whether a 95th percentile of `p95_ns` (None: no request answered)
    /// meets a target of `target_ms`.
    pub fn meets(p95_ns: Option<u64>, target_ms: u64) -> bool {
        p95_ns.is_some_and(|p95| p95 <= target_ms.saturating_mul(1_000_000))
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use strum::VariantArray;

    #[test]
    fn throughput_units_round_trip_under_the_names_people_read() {
        for &unit in ThroughputUnit::VARIANTS {
            let json = serde_json::to_value(unit).expect("serializes");
            assert_eq!(json, unit.to_string());
            let back: ThroughputUnit = serde_json::from_value(json).expect("deserializes");
            assert_eq!(back, unit);
        }
        let packets = serde_json::to_string(&ThroughputUnit::PacketsPerS).expect("serializes");
        assert_eq!(packets, "\"packets/s\"");
        assert!(serde_json::from_str::<ThroughputUnit>("\"furlongs/s\"").is_err());
    }
}
