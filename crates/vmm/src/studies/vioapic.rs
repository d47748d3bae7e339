//! The four VIOAPIC levels (mechanisms.md section 6): the vioapic bench
//! (`bench::vioapic`) with its controller in userspace, in the kernel,
//! behind a read-only page and paravirtual, side by side.

use std::collections::BTreeMap;
use std::fmt;

use dirq_stats::{f64_of, ratio};
use serde::{Deserialize, Serialize};

use super::{per_interrupt_by_category, Settings};
use crate::bench::{BenchError, BEST_PATH_HALT_POLL_NS};
use crate::config::params::VioapicParams;
use crate::config::{BenchConfig, BenchParams, HaltMode, VioapicLevel};
use crate::exits::VmxExit;
use crate::report::RunReport;
use crate::results::ResultMismatch;

/// One level's row of the comparison.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VioapicRow {
    pub mode: VioapicLevel,
    pub interrupts: u64,
    pub interrupts_per_s: f64,
    pub host_cycles_per_interrupt: f64,
    pub register_accesses_per_interrupt: f64,
    /// Register accesses that exited to the VMM, per interrupt.
    pub trapped_accesses_per_interrupt: f64,
    pub exits_per_interrupt: f64,
    pub userspace_exits_per_interrupt: f64,
    /// Exits by KVM category (`mmio_exits`, `halt_exits`, ...), per interrupt.
    pub exits_by_reason_per_interrupt: BTreeMap<VmxExit, f64>,
    /// interrupts/s over the userspace level's.
    pub speedup_vs_userspace: f64,
    /// Why this host cannot run this level, with what it measured instead;
    /// the figures above are then 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_measurable: Option<String>,
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
pub fn comparison_config(mode: VioapicLevel, settings: Settings) -> BenchConfig {
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

/// Runs every level, userspace first. A level this host cannot run
/// (`BenchError::NotMeasurable`) gets a row that says why.
pub fn compare(settings: Settings) -> Result<VioapicTable, BenchError> {
    let mut runs = Vec::new();
    let mut rows = Vec::new();
    for mode in VioapicLevel::ALL {
        match crate::bench::run(&comparison_config(mode, settings)) {
            Ok(run) => {
                rows.push(measured_row(mode, &run)?);
                runs.push(run);
            }
            Err(BenchError::NotMeasurable { why, .. }) => rows.push(VioapicRow {
                mode,
                interrupts: 0,
                interrupts_per_s: 0.0,
                host_cycles_per_interrupt: 0.0,
                register_accesses_per_interrupt: 0.0,
                trapped_accesses_per_interrupt: 0.0,
                exits_per_interrupt: 0.0,
                userspace_exits_per_interrupt: 0.0,
                exits_by_reason_per_interrupt: BTreeMap::new(),
                speedup_vs_userspace: 0.0,
                not_measurable: Some(why),
            }),
            Err(err) => return Err(err),
        }
    }
    let baseline = rows[0].interrupts_per_s;
    for row in &mut rows {
        row.speedup_vs_userspace = if baseline > 0.0 {
            row.interrupts_per_s / baseline
        } else {
            0.0
        };
    }
    Ok(VioapicTable { rows, runs })
}

/// A level's row from its run; the speedup is filled in beside the others.
fn measured_row(mode: VioapicLevel, run: &RunReport) -> Result<VioapicRow, ResultMismatch> {
    let vioapic = run.results.vioapic()?;
    Ok(VioapicRow {
        mode,
        interrupts: run.interrupts,
        interrupts_per_s: vioapic.interrupts_per_s,
        host_cycles_per_interrupt: vioapic.host_cycles_per_interrupt,
        register_accesses_per_interrupt: f64_of(
            vioapic.register_reads_per_interrupt + vioapic.register_writes_per_interrupt,
        ),
        trapped_accesses_per_interrupt: ratio(
            vioapic.trapped_reads + vioapic.trapped_writes,
            run.interrupts.max(1),
        ),
        exits_per_interrupt: run.exits_per_interrupt,
        userspace_exits_per_interrupt: run.userspace_exits_per_interrupt,
        exits_by_reason_per_interrupt: per_interrupt_by_category(run),
        speedup_vs_userspace: 0.0,
        not_measurable: None,
    })
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
            if let Some(why) = &row.not_measurable {
                writeln!(
                    f,
                    "{:<10} not measurable on this host: {why}",
                    row.mode.name()
                )?;
                continue;
            }
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
        for row in self.rows.iter().filter(|row| row.not_measurable.is_none()) {
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
