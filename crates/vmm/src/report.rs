//! The result of one run, serialized as `dirq run --json` prints it, and
//! its human-readable form: a `perf kvm stat`-style exit table and a
//! cyclictest-style latency line.

use std::collections::BTreeMap;
use std::fmt;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::config::{BenchConfig, GuestExec};
use crate::exits::{ExitSummary, INSN_EMULATION_STAT};
use crate::machine::MachineFacts;
use crate::placement::Placement;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub samples: u64,
    pub mean: f64,
    pub min: u64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

impl LatencySummary {
    /// None when there are no samples.
    pub fn from_samples_ns(samples: &[u64]) -> Option<Self> {
        let max = *samples.iter().max()?;
        let mut histogram = Histogram::<u64>::new_with_max(max.max(2), 3).ok()?;
        for &sample in samples {
            histogram.record(sample).ok()?;
        }
        Some(LatencySummary {
            samples: histogram.len(),
            mean: histogram.mean(),
            min: histogram.min(),
            p50: histogram.value_at_quantile(0.5),
            p99: histogram.value_at_quantile(0.99),
            max: histogram.max(),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub bench: String,
    pub config: BenchConfig,
    /// Interrupts the guest handled in the measured window (all vCPUs).
    pub interrupts: u64,
    pub exits: ExitSummary,
    /// `exits.total / interrupts`.
    pub exits_per_interrupt: f64,
    /// `exits.userspace / interrupts`.
    pub userspace_exits_per_interrupt: f64,
    /// `exits.kernel / interrupts`.
    pub kernel_exits_per_interrupt: f64,
    /// Null for benches that measure no latency (whileloop, exit-cost).
    pub latency_ns: Option<LatencySummary>,
    pub duration_s: f64,
    /// Bench-specific figures (e.g. whileloop's `guest_share`).
    pub results: BTreeMap<String, f64>,
    /// How the guest executed (native, emulated, hardware).
    pub guest_exec: GuestExec,
    /// Why the guest ran otherwise than asked (native refused), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_warning: Option<String>,
    /// KVM's instruction-emulation count per interrupt and per second of
    /// the window: ~1,000 per interrupt emulated, a few trapped
    /// instructions natively. It proves the execution mode.
    pub insn_emulation_per_interrupt: f64,
    pub insn_emulation_per_s: f64,
    /// Where the vCPU threads ran.
    pub placement: Placement,
    /// io-batch: disk commands completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commands: Option<u64>,
    /// The guest's serial console.
    #[serde(skip)]
    pub console: String,
}

fn per(value: u64, interrupts: u64) -> f64 {
    if interrupts == 0 {
        0.0
    } else {
        value as f64 / interrupts as f64
    }
}

impl RunReport {
    pub fn new(
        config: &BenchConfig,
        interrupts: u64,
        exits: ExitSummary,
        latency_ns: Option<LatencySummary>,
        duration_s: f64,
        results: BTreeMap<String, f64>,
        machine: MachineFacts,
    ) -> Self {
        let insn_emulation = exits
            .by_reason
            .get(INSN_EMULATION_STAT)
            .copied()
            .unwrap_or(0);
        RunReport {
            bench: config.bench.name().to_string(),
            config: config.clone(),
            interrupts,
            exits_per_interrupt: per(exits.total, interrupts),
            userspace_exits_per_interrupt: per(exits.userspace, interrupts),
            kernel_exits_per_interrupt: per(exits.kernel, interrupts),
            exits,
            latency_ns,
            duration_s,
            results,
            guest_exec: machine.exec.guest_exec,
            exec_warning: machine.exec.warning,
            insn_emulation_per_interrupt: per(insn_emulation, interrupts),
            insn_emulation_per_s: if duration_s > 0.0 {
                insn_emulation as f64 / duration_s
            } else {
                0.0
            },
            placement: machine.placement,
            commands: None,
            console: machine.console,
        }
    }

    /// The flags that chose the path, in `dirq run` syntax.
    pub fn path(&self) -> String {
        let c = &self.config;
        format!(
            "--irqchip {} --inject {} --apic {} --halt {} --guest-idle {}{}",
            c.irqchip,
            c.inject,
            c.apic,
            c.halt,
            c.guest_idle,
            if c.pv_eoi { " --pv-eoi" } else { "" }
        )
    }
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}  {}", self.bench, self.path())?;
        writeln!(
            f,
            "guest {}: insn_emulation {:.1} per interrupt, {:.0} per s",
            self.guest_exec, self.insn_emulation_per_interrupt, self.insn_emulation_per_s
        )?;
        if let Some(warning) = &self.exec_warning {
            writeln!(f, "WARNING: {warning}")?;
        }
        if let Some(note) = self.placement.note(self.config.vcpus) {
            writeln!(f, "NOTE: {note}")?;
        }
        writeln!(
            f,
            "interrupts {}  duration {:.3} s  exits {} (userspace {}, kernel {})  exits/interrupt {:.2} (userspace {:.2}, kernel {:.2})",
            self.interrupts,
            self.duration_s,
            self.exits.total,
            self.exits.userspace,
            self.exits.kernel,
            self.exits_per_interrupt,
            self.userspace_exits_per_interrupt,
            self.kernel_exits_per_interrupt,
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "{:>20} {:>10} {:>8} {:>12}",
            "VM-EXIT (in KVM)", "Samples", "Samples%", "per interrupt"
        )?;
        let kernel_total: u64 = self.exits.by_reason.values().sum();
        let mut rows: Vec<_> = self.exits.by_reason.iter().collect();
        rows.sort_by(|a, b| b.1.cmp(a.1));
        for (reason, count) in rows {
            writeln!(
                f,
                "{:>20} {:>10} {:>7.2}% {:>12.3}",
                reason,
                count,
                100.0 * per(*count, kernel_total),
                per(*count, self.interrupts)
            )?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "{:>20} {:>10} {:>8} {:>12}",
            "TO USERSPACE", "Samples", "Samples%", "per interrupt"
        )?;
        let mut rows: Vec<_> = self.exits.userspace_by_reason.iter().collect();
        rows.sort_by(|a, b| b.1.cmp(a.1));
        for (reason, count) in rows {
            writeln!(
                f,
                "{:>20} {:>10} {:>7.2}% {:>12.3}",
                reason,
                count,
                100.0 * per(*count, self.exits.userspace),
                per(*count, self.interrupts)
            )?;
        }
        for vcpu in &self.exits.per_vcpu {
            writeln!(
                f,
                "vCPU {}: exits {} (userspace {}, kernel {})",
                vcpu.cpu, vcpu.total, vcpu.userspace, vcpu.kernel
            )?;
        }
        writeln!(f)?;
        if let Some(latency) = &self.latency_ns {
            writeln!(
                f,
                "latency (us): samples {}  min {:.2}  avg {:.2}  p50 {:.2}  p99 {:.2}  max {:.2}",
                latency.samples,
                latency.min as f64 / 1e3,
                latency.mean / 1e3,
                latency.p50 as f64 / 1e3,
                latency.p99 as f64 / 1e3,
                latency.max as f64 / 1e3,
            )?;
        }
        for (name, value) in &self.results {
            writeln!(f, "{name}: {value:.4}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_summary_reports_percentiles_of_the_samples() {
        let samples: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        let summary = LatencySummary::from_samples_ns(&samples).expect("non-empty");
        assert_eq!(summary.samples, 1000);
        // hdrhistogram with 3 significant digits: within 0.1%.
        assert!(
            (summary.p50 as f64 - 500_000.0).abs() <= 500.0,
            "{summary:?}"
        );
        assert!(
            (summary.p99 as f64 - 990_000.0).abs() <= 990.0,
            "{summary:?}"
        );
        assert!(
            (summary.max as f64 - 1_000_000.0).abs() <= 1000.0,
            "{summary:?}"
        );
        assert!((summary.mean - 500_500.0).abs() <= 500.0, "{summary:?}");
        assert!(LatencySummary::from_samples_ns(&[]).is_none());
    }
}
