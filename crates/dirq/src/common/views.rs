//! The report's views of the other tools' results (`dirq sim --json`,
//! `dirq run --json`): the fields the figures read, converted from the
//! typed results (`From`), never through JSON. They still parse the JSON
//! contracts, whose field names are kept stable, so that tests can
//! fabricate results; fields a tool leaves out stay optional there.

use std::collections::BTreeMap;

use serde::Deserialize;

use dirq_sim::design::DesignKind;
use dirq_sim::metrics::{Throughput, WorkloadFigures};
use dirq_sim::scenario::Scenario;
use dirq_sim::{Invariant, RunResult, ScenarioResult};
use dirq_stats::{f64_of, ratio, LatencySummary};
use dirq_vmm::exits::ExitTime;
use dirq_vmm::exits::{KvmStat, UserspaceExit, VmxExit};
use dirq_vmm::report::{BenchResult, Bucket, RunReport, Target};

use crate::common::format::compact_number;

/// `latency_ns` in both contracts (`dirq_stats::LatencySummary`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Latency {
    #[serde(default)]
    pub min: Option<f64>,
    pub mean: f64,
    pub p50: f64,
    #[serde(default)]
    pub p90: Option<f64>,
    pub p99: f64,
    pub max: f64,
    #[serde(default)]
    pub histogram: Vec<Bucket>,
}

impl From<&LatencySummary> for Latency {
    fn from(latency: &LatencySummary) -> Self {
        Latency {
            min: Some(f64_of(latency.min)),
            mean: latency.mean,
            p50: f64_of(latency.p50),
            p90: Some(f64_of(latency.p90)),
            p99: f64_of(latency.p99),
            max: f64_of(latency.max),
            histogram: latency.histogram.clone(),
        }
    }
}

/// One run of `dirq sim --json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SimRun {
    pub design: DesignKind,
    #[serde(default)]
    pub params: serde_json::Map<String, serde_json::Value>,
    pub exits_per_s: f64,
    /// Interrupts raised per second.
    #[serde(default)]
    pub interrupts_per_s: f64,
    /// By VMX exit reason.
    #[serde(default)]
    pub exits_by_reason_per_s: BTreeMap<VmxExit, f64>,
    pub time_in_guest: f64,
    /// Fraction of the VM's cores' time not asleep.
    #[serde(default)]
    pub cpu_busy: Option<f64>,
    #[serde(default)]
    pub latency_ns: Option<Latency>,
    #[serde(default)]
    pub throughput: Option<Throughput>,
    #[serde(default)]
    pub invariant_violations: BTreeMap<Invariant, u64>,
    #[serde(default)]
    pub interrupts: Option<SimInterrupts>,
    #[serde(default)]
    pub events: u64,
    #[serde(default)]
    pub wall_s: f64,
    /// The figures particular to one paper's experiment (`dirq_sim`'s
    /// `WorkloadFigures`), absent from the other scenarios' runs.
    #[serde(flatten)]
    pub paper: WorkloadFigures,
    /// `latency_ns.histogram`, taken from the typed run or, for a
    /// fabricated one, the JSON by [`SimScenario::from_raw`].
    #[serde(skip)]
    pub latency_histogram: Vec<Bucket>,
}

impl From<&RunResult> for SimRun {
    fn from(run: &RunResult) -> Self {
        SimRun {
            design: run.design,
            params: run
                .params
                .iter()
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
            exits_per_s: run.exits_per_s,
            interrupts_per_s: run.interrupts_per_s,
            exits_by_reason_per_s: run.exits_by_reason_per_s.clone(),
            time_in_guest: run.time_in_guest,
            cpu_busy: Some(run.cpu_busy),
            latency_ns: run.latency_ns.as_ref().map(Latency::from),
            throughput: run.throughput.clone(),
            invariant_violations: run.invariant_violations.clone(),
            interrupts: Some(SimInterrupts {
                handled: run.interrupts.handled,
            }),
            events: run.events,
            wall_s: run.wall_s,
            paper: run.figures.clone(),
            latency_histogram: run
                .latency_ns
                .as_ref()
                .map(|latency| latency.histogram.clone())
                .unwrap_or_default(),
        }
    }
}

/// `interrupts` of a `dirq sim --json` run.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct SimInterrupts {
    pub handled: u64,
}

impl SimRun {
    pub fn interrupts_handled(&self) -> Option<u64> {
        self.interrupts.map(|i| i.handled)
    }

    /// The throughput's number.
    pub fn throughput_value(&self) -> Option<f64> {
        self.throughput.as_ref().map(|throughput| throughput.value)
    }

    /// The run's rate parameter (`rate_pps` or another `rate*` key), if any.
    pub fn rate(&self) -> Option<(String, f64)> {
        self.params
            .iter()
            .find(|(key, value)| key.starts_with("rate") && value.is_number())
            .and_then(|(key, value)| Some((key.clone(), value.as_f64()?)))
    }

    pub fn violations(&self) -> u64 {
        self.invariant_violations.values().sum()
    }

    /// Whether `other` ran the same parameters to the same results, under
    /// whatever design (the simulator's own wall time and event count
    /// aside).
    pub fn same_results(&self, other: &SimRun) -> bool {
        let bare = |run: &SimRun| SimRun {
            design: DesignKind::Bare,
            events: 0,
            wall_s: 0.0,
            ..run.clone()
        };
        bare(self) == bare(other)
    }
}

/// "100K pps", "pv", "message_bytes 64": a parameter's value in a label.
pub fn param_text(key: &str, value: &serde_json::Value) -> String {
    match (key, value.as_f64()) {
        (_, Some(number)) if key.starts_with("rate") => {
            let unit = key
                .rsplit('_')
                .next()
                .filter(|u| *u != "rate")
                .unwrap_or("");
            format!("{} {unit}", compact_number(number))
                .trim()
                .to_string()
        }
        (_, Some(number)) => format!("{key} {}", compact_number(number)),
        _ => match value {
            serde_json::Value::String(text) => text.clone(),
            other => format!("{key} {other}"),
        },
    }
}

/// `dirq sim --json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SimScenario {
    pub scenario: String,
    pub runs: Vec<SimRun>,
    /// The scenario that made the runs (its description, groups and
    /// `[figure]`), where the caller has it.
    #[serde(skip)]
    pub inputs: Option<Scenario>,
}

impl From<&ScenarioResult> for SimScenario {
    fn from(result: &ScenarioResult) -> Self {
        SimScenario {
            scenario: result.scenario.clone(),
            runs: result.runs.iter().map(SimRun::from).collect(),
            inputs: None,
        }
    }
}

impl SimScenario {
    /// The view of fabricated `dirq sim --json` output, latency histograms
    /// included.
    #[cfg(test)]
    pub fn from_raw(raw: &serde_json::Value) -> serde_json::Result<SimScenario> {
        let mut scenario: SimScenario = serde_json::from_value(raw.clone())?;
        let raw_runs = raw["runs"].as_array().map_or(&[][..], Vec::as_slice);
        for (run, raw_run) in scenario.runs.iter_mut().zip(raw_runs) {
            let histogram = &raw_run["latency_ns"]["histogram"];
            if !histogram.is_null() {
                run.latency_histogram = serde_json::from_value(histogram.clone())?;
            }
        }
        Ok(scenario)
    }

    /// The parameters whose value differs between runs (a parameter every
    /// run shares says nothing in a label).
    pub fn varying_params(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .runs
            .iter()
            .flat_map(|run| run.params.keys().cloned())
            .collect();
        keys.sort();
        keys.dedup();
        // A key that some runs leave out but all others give one value
        // tells no runs apart either.
        keys.retain(|key| {
            let mut values = self.runs.iter().filter_map(|run| run.params.get(key));
            let first = values.next();
            values.any(|value| Some(value) != first)
        });
        keys
    }
}

/// `exits` of `dirq run --json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RealExits {
    pub userspace: u64,
    #[serde(default)]
    pub by_reason: BTreeMap<KvmStat, u64>,
    /// The exits by VMX reason, summing to `total`.
    #[serde(default)]
    pub by_category: BTreeMap<VmxExit, u64>,
    /// The VMM's own time on its exits, by the run loop's reason.
    #[serde(default)]
    pub userspace_time: BTreeMap<UserspaceExit, ExitTime>,
    #[serde(default)]
    pub per_vcpu: Vec<RealVcpu>,
    /// Seconds the vCPU threads waited for a host CPU, all together.
    #[serde(default)]
    pub vcpu_waited_s: f64,
}

/// One vCPU of `exits.per_vcpu`: every KVM statistic that moved, by the
/// kernel's name (`halt_wait_ns` among them).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RealVcpu {
    #[serde(default)]
    pub kvm_stats: BTreeMap<String, u64>,
}

/// `dirq run --json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RealRun {
    /// The bench (`bench`) and its own figures (`results`), typed.
    #[serde(flatten)]
    pub results: BenchResult,
    pub interrupts: u64,
    pub exits: RealExits,
    pub exits_per_interrupt: f64,
    /// The measured window.
    #[serde(default)]
    pub duration_s: f64,
    #[serde(default)]
    pub latency_ns: Option<Latency>,
    /// `latency_ns.histogram`, taken from the typed report by whoever ran it.
    #[serde(skip)]
    pub latency_histogram: Vec<Bucket>,
    /// irq-latency: whether its interrupts found the vCPU busy or halted,
    /// and the probe's floor for that state.
    #[serde(default)]
    pub target: Option<Target>,
    /// The figures that are the guest's claim, by their JSON names.
    #[serde(default)]
    pub guest_claims: Vec<String>,
}

impl From<&RunReport> for RealRun {
    fn from(report: &RunReport) -> Self {
        RealRun {
            results: report.results.clone(),
            interrupts: report.interrupts,
            exits: RealExits {
                userspace: report.exits.userspace,
                by_reason: report.exits.by_reason.clone(),
                by_category: report.exits.by_category.clone(),
                userspace_time: report.exits.userspace_time.clone(),
                per_vcpu: report
                    .exits
                    .per_vcpu
                    .iter()
                    .map(|vcpu| RealVcpu {
                        kvm_stats: vcpu.kvm_stats.clone().into(),
                    })
                    .collect(),
                vcpu_waited_s: report.exits.vcpu_waited_s,
            },
            exits_per_interrupt: report.exits_per_interrupt,
            duration_s: report.duration_s,
            latency_ns: report.latency_ns.as_ref().map(Latency::from),
            latency_histogram: report
                .latency_ns
                .as_ref()
                .map(|latency| latency.histogram.clone())
                .unwrap_or_default(),
            target: report.target,
            guest_claims: report.guest_claims.clone(),
        }
    }
}

impl RealRun {
    /// A KVM statistic by the kernel's name, summed over the vCPUs; none
    /// where it did not move.
    pub fn kvm_stat(&self, name: &str) -> Option<u64> {
        self.exits
            .per_vcpu
            .iter()
            .filter_map(|vcpu| vcpu.kvm_stats.get(name).copied())
            .reduce(|a, b| a + b)
    }

    /// A KVM stat of the run per delivered interrupt.
    pub fn per_interrupt(&self, stat: KvmStat) -> Option<f64> {
        let count = self.exits.by_reason.get(&stat)?;
        (self.interrupts > 0).then(|| ratio(*count, self.interrupts))
    }

    /// Exits per delivered interrupt by VMX reason; empty without interrupts.
    pub fn exits_per_interrupt_by_reason(&self) -> BTreeMap<VmxExit, f64> {
        if self.interrupts == 0 {
            return BTreeMap::new();
        }
        self.exits
            .by_category
            .iter()
            .map(|(&reason, count)| (reason, ratio(*count, self.interrupts)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_run_reads_the_documented_contract() {
        let run: SimRun = serde_json::from_value(serde_json::json!({
            "design": "vanilla",
            "params": {"rate_pps": 250000},
            "exits_per_s": 62000.0,
            "exits_by_reason_per_s": {"EXTERNAL_INTERRUPT": 31000.0, "MSR_WRITE": 31000.0, "EXCEPTION_NMI": 3.0},
            "time_in_guest": 0.8748,
            "invariant_violations": {"lost": 0, "priority_inversion": 2},
            "events": 10, "wall_s": 0.1
        }))
        .expect("contract parses");
        assert_eq!(run.rate(), Some(("rate_pps".to_string(), 250_000.0)));
        assert_eq!(run.violations(), 2);
        assert!(run.latency_ns.is_none());
        assert_eq!(
            run.exits_by_reason_per_s.keys().collect::<Vec<_>>(),
            [
                &VmxExit::ExceptionNmi,
                &VmxExit::ExternalInterrupt,
                &VmxExit::MsrWrite
            ]
        );
        assert_eq!(run.exits_by_reason_per_s[&VmxExit::ExceptionNmi], 3.0);
    }

    #[test]
    fn only_the_parameters_that_vary_tell_runs_apart() {
        let scenario: SimScenario = serde_json::from_value(serde_json::json!({
            "scenario": "x",
            "runs": [
                {"design": "vanilla", "params": {"workload": "udp-rx", "rate_pps": 100000},
                 "exits_per_s": 1.0, "time_in_guest": 1.0},
                {"design": "did", "params": {"workload": "udp-rx", "rate_pps": 600000},
                 "exits_per_s": 1.0, "time_in_guest": 1.0},
                {"design": "did", "params": {"rate_pps": 600000},
                 "exits_per_s": 1.0, "time_in_guest": 1.0}
            ]
        }))
        .expect("contract parses");
        assert_eq!(scenario.varying_params(), ["rate_pps"]);
    }

    #[test]
    fn a_simulated_run_converts_as_its_json_contract_reads() {
        let options = dirq_sim::RunOptions {
            seed: 1,
            profile: None,
            trace: false,
        };
        let mut checked = Vec::new();
        // The first two built-in scenarios: a receive and a timer.
        for name in dirq_sim::scenario::builtin_names().into_iter().take(2) {
            let mut scenario = dirq_sim::scenario::builtin(name).expect("builtin");
            scenario.duration_ms = 5;
            let result = dirq_sim::run_scenario(&scenario, &options)
                .expect("runs")
                .result;
            let raw = serde_json::to_value(&result).expect("serializes");
            let parsed = SimScenario::from_raw(&raw).expect("contract parses");
            assert_eq!(SimScenario::from(&result), parsed);
            checked.extend(parsed.runs);
        }
        // Every optional part of a run was compared somewhere.
        assert!(checked.iter().any(|run| !run.latency_histogram.is_empty()));
        assert!(checked.iter().any(|run| run.throughput.is_some()));
    }

    #[test]
    fn a_real_run_converts_as_its_json_contract_reads() {
        use dirq_vmm::config::{Bench, BenchConfig, GuestExec};
        use dirq_vmm::exits::{ExitSummary, UserspaceExit};
        use dirq_vmm::machine::{ExecOutcome, MachineFacts};
        use dirq_vmm::placement::Placement;
        use dirq_vmm::results::{BenchResult, PvEoiCount};

        let exits = ExitSummary {
            total: 30,
            userspace: 10,
            kernel: 20,
            by_reason: BTreeMap::from([(KvmStat::HaltExits, 10), (KvmStat::InsnEmulation, 4)]),
            by_category: BTreeMap::from([(VmxExit::Hlt, 10), (VmxExit::MsrWrite, 20)]),
            userspace_by_reason: BTreeMap::from([(UserspaceExit::Mmio, 10)]),
            userspace_time: BTreeMap::new(),
            vcpu_cpu_s: 0.5,
            vcpu_waited_s: 0.2,
            kicks: 3,
            per_vcpu: Vec::new(),
            outside_window: BTreeMap::new(),
        };
        let report = RunReport::new(
            &BenchConfig::new(Bench::IrqLatency),
            10,
            exits,
            LatencySummary::from_samples_ns(&[8_000, 9_000, 40_000]),
            1.0,
            BenchResult::IrqLatency(PvEoiCount { pv_eoi_skips: 2 }),
            MachineFacts {
                exec: ExecOutcome {
                    guest_exec: GuestExec::Hardware,
                    warning: None,
                    unconfirmed: false,
                },
                placement: Placement {
                    host_cpus: vec![0, 1],
                    vcpu_cpus: vec![1],
                },
                console: String::new(),
                evidence: dirq_vmm::results::Evidence::default(),
            },
        );
        let mut parsed: RealRun =
            serde_json::from_value(serde_json::to_value(&report).expect("serializes"))
                .expect("contract parses");
        parsed.latency_histogram = parsed
            .latency_ns
            .as_ref()
            .map(|latency| latency.histogram.clone())
            .unwrap_or_default();
        assert!(!parsed.latency_histogram.is_empty());
        assert_eq!(RealRun::from(&report), parsed);
    }
}
