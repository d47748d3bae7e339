//! The real runs on /dev/kvm as `dirq report` collected them: each
//! configuration with its repeats and the command that repeats it.

use std::collections::BTreeMap;

use dirq_stats::f64_of;
use dirq_vmm::config::{Bench, BenchConfig};
use dirq_vmm::report::Bucket;

use dirq_vmm::exits::VmxExit;

use crate::common::format::compact_number;
use crate::common::spread::Spread;
use crate::common::views::RealRun;

/// One run of a real case.
#[derive(Debug, Clone)]
pub struct Repeat {
    pub run: RealRun,
    /// Host CPU the vCPU threads burned in the measured window, in cores
    /// (CPU seconds per wall second): what polling costs.
    pub cpu_cores: f64,
}

/// One real configuration, run one or more times, and how it was made.
#[derive(Debug, Clone)]
pub struct RealCase {
    /// Short name of the path, e.g. "kernel + irqfd + PV EOI".
    pub label: String,
    /// The equivalent `dirq run ...` command line.
    pub command: String,
    pub config: BenchConfig,
    /// Never empty.
    pub repeats: Vec<Repeat>,
}

impl RealCase {
    pub fn bench(&self) -> Bench {
        self.config.bench()
    }

    /// "whileloop · kernel · 10K/s": the bench, the path and, where the
    /// bench has one, the interrupt rate.
    pub fn configuration_name(&self) -> String {
        let mut name = format!("{} · {}", self.bench(), self.label);
        if let Some(rate_hz) = self.config.params.rate_hz() {
            name.push_str(&format!(" · {}/s", compact_number(f64_of(rate_hz))));
        }
        name
    }

    /// Every repeat's latency samples in one histogram (all repeats use
    /// the same bucket bounds).
    pub fn pooled_histogram(&self) -> Vec<Bucket> {
        let mut pooled: BTreeMap<u64, u64> = BTreeMap::new();
        for repeat in &self.repeats {
            for bucket in &repeat.run.latency_histogram {
                *pooled.entry(bucket.le_ns).or_insert(0) += bucket.count;
            }
        }
        pooled
            .into_iter()
            .map(|(le_ns, count)| Bucket { le_ns, count })
            .collect()
    }

    /// The median and range of a figure over the repeats that have it.
    pub fn spread(&self, figure: impl Fn(&Repeat) -> Option<f64>) -> Option<Spread> {
        Spread::of(self.repeats.iter().filter_map(figure))
    }

    pub fn exits_per_interrupt(&self) -> Option<Spread> {
        self.spread(|r| (r.run.interrupts > 0).then_some(r.run.exits_per_interrupt))
    }

    pub fn p50(&self) -> Option<Spread> {
        self.spread(|r| Some(r.run.latency_ns.as_ref()?.p50))
    }

    pub fn p99(&self) -> Option<Spread> {
        self.spread(|r| Some(r.run.latency_ns.as_ref()?.p99))
    }

    pub fn guest_share(&self) -> Option<Spread> {
        self.spread(|r| r.run.results.guest_share())
    }

    /// A count of each repeat per second of its measured window.
    pub fn per_s(&self, count: impl Fn(&RealRun) -> Option<f64>) -> Option<Spread> {
        self.spread(|r| {
            let count = count(&r.run)?;
            (r.run.duration_s > 0.0).then(|| count / r.run.duration_s)
        })
    }

    /// Pings vCPU 0 sent a second, for the ipi bench (its pinged vCPU 1
    /// counts them).
    pub fn pings_per_s(&self) -> Option<Spread> {
        self.per_s(|run| Some(f64_of(run.results.ipi().ok()?.handled.to_vcpu(1)?)))
    }

    /// Whether KVM counted an HLT exit in any repeat.
    pub fn saw_hlt_exits(&self) -> bool {
        self.repeats.iter().any(|r| {
            r.run
                .exits
                .by_category
                .get(&VmxExit::Hlt)
                .is_some_and(|&count| count > 0)
        })
    }

    /// The figures (JSON names) some repeat reported as the guest's claim.
    pub fn claims(&self) -> Vec<&str> {
        let mut claims: Vec<&str> = self
            .repeats
            .iter()
            .flat_map(|r| r.run.guest_claims.iter().map(String::as_str))
            .collect();
        claims.sort_unstable();
        claims.dedup();
        claims
    }

    pub fn cpu_cores(&self) -> Option<Spread> {
        self.spread(|r| Some(r.cpu_cores))
    }
}
