//! The report reads the other tools' results through their documented JSON
//! contracts (`dirq sim --json`, `dirq run --json`), whose field names are
//! kept stable, rather than through their Rust types, which may grow. Fields
//! a tool leaves out stay optional here.

use std::collections::BTreeMap;

use serde::Deserialize;

use dirq_stats::{f64_of, ratio};
use dirq_vmm::report::Bucket;

use super::data::Series;
use super::data::SeriesStyle;
use super::exit_names::vmx_name;
use super::figures::compact_number;

/// `latency_ns` in both contracts (`dirq_stats::LatencySummary`).
#[derive(Debug, Clone, Deserialize)]
pub struct Latency {
    pub mean: f64,
    pub p50: f64,
    #[serde(default)]
    pub p90: Option<f64>,
    pub p99: f64,
    pub max: f64,
    #[serde(default)]
    pub histogram: Vec<Bucket>,
}

/// The empirical CDF of histogram buckets (ascending): at each bucket's
/// upper bound, the fraction of samples at or below it.
pub fn cdf_steps(name: &str, buckets: &[Bucket]) -> Series {
    let total: u64 = buckets.iter().map(|b| b.count).sum();
    let mut below = 0;
    let points = buckets
        .iter()
        .map(|bucket| {
            below += bucket.count;
            [f64_of(bucket.le_ns), ratio(below, total.max(1))]
        })
        .collect();
    Series::new(name, SeriesStyle::Steps, points)
}

/// One run of `dirq sim --json`.
#[derive(Debug, Clone, Deserialize)]
pub struct SimRun {
    pub policy: String,
    #[serde(default)]
    pub params: serde_json::Map<String, serde_json::Value>,
    pub exits_per_s: f64,
    /// By VMX exit reason.
    #[serde(default)]
    pub exits_by_reason_per_s: BTreeMap<String, f64>,
    pub time_in_guest: f64,
    /// Fraction of the VM's cores' time not asleep.
    #[serde(default)]
    pub cpu_busy: Option<f64>,
    #[serde(default)]
    pub latency_ns: Option<Latency>,
    #[serde(default)]
    pub throughput: Option<serde_json::Value>,
    #[serde(default)]
    pub invariant_violations: BTreeMap<String, u64>,
    #[serde(default)]
    pub interrupts: Option<SimInterrupts>,
    #[serde(default)]
    pub events: u64,
    #[serde(default)]
    pub wall_s: f64,
    /// The figures particular to one study, absent from the others' runs.
    #[serde(flatten)]
    pub study: SimStudy,
    /// `latency_ns.histogram`, taken from the raw JSON by
    /// [`SimScenario::from_raw`].
    #[serde(skip)]
    pub latency_histogram: Vec<Bucket>,
}

/// The study-specific fields of a `dirq sim --json` run (`StudyResults`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SimStudy {
    #[serde(default)]
    pub cycles_per_interrupt: Option<f64>,
    #[serde(default)]
    pub seconds_per_million: Option<f64>,
    #[serde(default)]
    pub total_s: Option<f64>,
    /// Calls per setup-latency bucket, by the bucket's name.
    #[serde(default)]
    pub setup_ms_buckets: Option<BTreeMap<String, u64>>,
    #[serde(default)]
    pub call_rate: Option<f64>,
    #[serde(default)]
    pub invite_retransmissions: Option<u64>,
}

/// `interrupts` of a `dirq sim --json` run.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct SimInterrupts {
    pub handled: u64,
}

impl SimRun {
    pub fn interrupts_handled(&self) -> Option<u64> {
        self.interrupts.map(|i| i.handled)
    }

    /// The throughput's number, whether given bare or as `{value, unit}`.
    pub fn throughput_value(&self) -> Option<f64> {
        match self.throughput.as_ref()? {
            serde_json::Value::Object(fields) => fields.get("value")?.as_f64(),
            other => other.as_f64(),
        }
    }

    /// "vanilla · 100K pps": the policy and the parameters named in `keys`
    /// (those that tell the runs of one scenario apart).
    pub fn label(&self, keys: &[String]) -> String {
        let mut parts = vec![self.policy.clone()];
        for key in keys {
            if let Some(value) = self.params.get(key) {
                parts.push(param_text(key, value));
            }
        }
        parts.join(" · ")
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
}

fn param_text(key: &str, value: &serde_json::Value) -> String {
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
#[derive(Debug, Clone, Deserialize)]
pub struct SimScenario {
    pub scenario: String,
    pub runs: Vec<SimRun>,
}

impl SimScenario {
    /// The view of `dirq sim --json`'s output, latency histograms included.
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

    /// Every run's label, in run order.
    pub fn labels(&self) -> Vec<String> {
        let keys = self.varying_params();
        self.runs.iter().map(|run| run.label(&keys)).collect()
    }
}

/// `exits` of `dirq run --json`.
#[derive(Debug, Clone, Deserialize)]
pub struct RealExits {
    pub userspace: u64,
    #[serde(default)]
    pub by_reason: BTreeMap<String, u64>,
    /// The exits by VMX reason, summing to `total`.
    #[serde(default)]
    pub by_category: BTreeMap<String, u64>,
}

/// `dirq run --json`.
#[derive(Debug, Clone, Deserialize)]
pub struct RealRun {
    pub bench: String,
    #[serde(default)]
    pub config: serde_json::Map<String, serde_json::Value>,
    pub interrupts: u64,
    pub exits: RealExits,
    pub exits_per_interrupt: f64,
    #[serde(default)]
    pub latency_ns: Option<Latency>,
    /// Bench-specific figures, e.g. whileloop's `guest_share`.
    #[serde(default)]
    pub results: BTreeMap<String, f64>,
    /// `latency_ns.histogram`, taken from the typed report by whoever ran it.
    #[serde(skip)]
    pub latency_histogram: Vec<Bucket>,
}

impl RealRun {
    /// A numeric field of the run's configuration, e.g. `rate_hz`.
    pub fn config_number(&self, key: &str) -> Option<f64> {
        self.config.get(key).and_then(serde_json::Value::as_f64)
    }

    /// A KVM stat of the run per delivered interrupt.
    pub fn per_interrupt(&self, stat: &str) -> Option<f64> {
        let count = self.exits.by_reason.get(stat)?;
        (self.interrupts > 0).then(|| ratio(*count, self.interrupts))
    }

    /// Exits per delivered interrupt by VMX reason; empty without interrupts.
    pub fn exits_per_interrupt_by_reason(&self) -> BTreeMap<String, f64> {
        if self.interrupts == 0 {
            return BTreeMap::new();
        }
        self.exits
            .by_category
            .iter()
            .map(|(reason, count)| (vmx_name(reason), ratio(*count, self.interrupts)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_run_reads_the_documented_contract_and_labels_itself() {
        let run: SimRun = serde_json::from_value(serde_json::json!({
            "policy": "vanilla",
            "params": {"rate_pps": 250000},
            "exits_per_s": 62000.0,
            "exits_by_reason_per_s": {"EXTERNAL_INTERRUPT": 31000.0, "MSR_WRITE": 31000.0, "EXCEPTION_NMI": 3.0},
            "time_in_guest": 0.8748,
            "invariant_violations": {"lost": 0, "priority": 2},
            "events": 10, "wall_s": 0.1
        }))
        .expect("contract parses");
        assert_eq!(run.label(&["rate_pps".to_string()]), "vanilla · 250K pps");
        assert_eq!(run.label(&[]), "vanilla");
        assert_eq!(run.rate(), Some(("rate_pps".to_string(), 250_000.0)));
        assert_eq!(run.violations(), 2);
        assert!(run.latency_ns.is_none());
        assert_eq!(
            run.exits_by_reason_per_s.keys().collect::<Vec<_>>(),
            ["EXCEPTION_NMI", "EXTERNAL_INTERRUPT", "MSR_WRITE"]
        );
        assert_eq!(run.exits_by_reason_per_s["EXCEPTION_NMI"], 3.0);
    }

    #[test]
    fn labels_name_only_the_parameters_that_vary() {
        let scenario: SimScenario = serde_json::from_value(serde_json::json!({
            "scenario": "x",
            "runs": [
                {"policy": "vanilla", "params": {"workload": "udp-rx", "rate_pps": 100000},
                 "exits_per_s": 1.0, "time_in_guest": 1.0},
                {"policy": "did", "params": {"workload": "udp-rx", "rate_pps": 600000},
                 "exits_per_s": 1.0, "time_in_guest": 1.0},
                {"policy": "did", "params": {"rate_pps": 600000},
                 "exits_per_s": 1.0, "time_in_guest": 1.0}
            ]
        }))
        .expect("contract parses");
        assert_eq!(scenario.varying_params(), ["rate_pps"]);
        assert_eq!(
            scenario.labels(),
            ["vanilla · 100K pps", "did · 600K pps", "did · 600K pps"]
        );
    }

    #[test]
    fn cdfs_come_from_buckets() {
        let buckets = [
            Bucket {
                le_ns: 100,
                count: 1,
            },
            Bucket {
                le_ns: 200,
                count: 2,
            },
            Bucket {
                le_ns: 400,
                count: 1,
            },
        ];
        let cdf = cdf_steps("kvm", &buckets);
        assert_eq!(cdf.style, SeriesStyle::Steps);
        assert_eq!(cdf.points, vec![[100.0, 0.25], [200.0, 0.75], [400.0, 1.0]]);
    }
}
