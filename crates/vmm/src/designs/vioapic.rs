//! The four VIOAPIC levels (mechanisms.md section 6): the vioapic bench
//! (`bench::vioapic`) with its controller in userspace, in the kernel,
//! behind a read-only page and paravirtual, side by side.

use std::collections::BTreeMap;
use std::fmt;

use dirq_stats::f64_of;
use serde::{Deserialize, Serialize};

use super::{per_interrupt_by_category, Settings};
use crate::bench::{BenchError, BEST_PATH_HALT_POLL_NS};
use crate::config::params::VioapicParams;
use crate::config::{BenchConfig, BenchParams, HaltMode, VioapicMode};
use crate::report::RunReport;

/// One level's row of the comparison.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VioapicRow {
    pub mode: VioapicMode,
    pub interrupts: u64,
    pub interrupts_per_s: f64,
    pub host_cycles_per_interrupt: f64,
    pub register_accesses_per_interrupt: f64,
    /// Register accesses that exited to the VMM, per interrupt.
    pub trapped_accesses_per_interrupt: f64,
    pub exits_per_interrupt: f64,
    pub userspace_exits_per_interrupt: f64,
    /// Exits by KVM category (`mmio_exits`, `halt_exits`, ...), per interrupt.
    pub exits_by_reason_per_interrupt: BTreeMap<String, f64>,
    /// interrupts/s over the userspace level's.
    pub speedup_vs_userspace: f64,
}

/// The four levels side by side.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VioapicTable {
    pub rows: Vec<VioapicRow>,
    pub runs: Vec<RunReport>,
}

/// The vioapic run at `mode` for the comparison: halt polling at KVM's
/// default, so that the kernel level's device thread can re-assert without
/// a sleeping vCPU in between.
pub fn comparison_config(mode: VioapicMode, settings: Settings) -> BenchConfig {
    let mut config = settings.config(BenchParams::Vioapic(VioapicParams {
        vioapic: mode,
        count: settings.pick(2_000, 20_000),
        ..VioapicParams::default()
    }));
    config.common.halt = HaltMode::Poll {
        ns: BEST_PATH_HALT_POLL_NS,
    };
    config
}

/// Runs every level, userspace first.
pub fn compare(settings: Settings) -> Result<VioapicTable, BenchError> {
    let runs = VioapicMode::ALL
        .iter()
        .map(|&mode| crate::bench::run(&comparison_config(mode, settings)))
        .collect::<Result<Vec<_>, _>>()?;
    let figure = |run: &RunReport, name: &str| run.results.get(name).copied().unwrap_or(0.0);
    let baseline = figure(&runs[0], "interrupts_per_s");
    let rows = VioapicMode::ALL
        .iter()
        .zip(&runs)
        .map(|(&mode, run)| VioapicRow {
            mode,
            interrupts: run.interrupts,
            interrupts_per_s: figure(run, "interrupts_per_s"),
            host_cycles_per_interrupt: figure(run, "host_cycles_per_interrupt"),
            register_accesses_per_interrupt: figure(run, "register_reads_per_interrupt")
                + figure(run, "register_writes_per_interrupt"),
            trapped_accesses_per_interrupt: (figure(run, "trapped_reads")
                + figure(run, "trapped_writes"))
                / f64_of(run.interrupts.max(1)),
            exits_per_interrupt: run.exits_per_interrupt,
            userspace_exits_per_interrupt: run.userspace_exits_per_interrupt,
            exits_by_reason_per_interrupt: per_interrupt_by_category(run),
            speedup_vs_userspace: if baseline > 0.0 {
                figure(run, "interrupts_per_s") / baseline
            } else {
                0.0
            },
        })
        .collect();
    Ok(VioapicTable { rows, runs })
}

impl fmt::Display for VioapicTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<10} {:>11} {:>14} {:>10} {:>10} {:>10} {:>12} {:>9}",
            "vioapic",
            "irqs/s",
            "host cyc/irq",
            "accesses",
            "trapped",
            "exits/irq",
            "userspace/irq",
            "speedup"
        )?;
        for row in &self.rows {
            writeln!(
                f,
                "{:<10} {:>11.0} {:>14.0} {:>10.2} {:>10.2} {:>10.2} {:>12.2} {:>8.2}x",
                row.mode.name(),
                row.interrupts_per_s,
                row.host_cycles_per_interrupt,
                row.register_accesses_per_interrupt,
                row.trapped_accesses_per_interrupt,
                row.exits_per_interrupt,
                row.userspace_exits_per_interrupt,
                row.speedup_vs_userspace
            )?;
        }
        writeln!(f, "exits per interrupt by reason:")?;
        for row in &self.rows {
            let reasons: Vec<String> = row
                .exits_by_reason_per_interrupt
                .iter()
                .map(|(reason, value)| format!("{reason} {value:.2}"))
                .collect();
            writeln!(f, "  {:<10} {}", row.mode.name(), reasons.join(", "))?;
        }
        Ok(())
    }
}
