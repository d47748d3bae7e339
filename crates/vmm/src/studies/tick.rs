//! Transparent tick scaling (mechanisms.md section 8): the tick bench
//! (`bench::tick`) at the guest's own 1000 Hz and with the VMM's PIT ten
//! times slower, side by side.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{run_each, Settings};
use crate::bench::BenchError;
use crate::config::params::TickParams;
use crate::config::{BenchConfig, BenchParams};
use crate::report::RunReport;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TickRow {
    /// K: how many times slower the VMM ran the guest's tick.
    pub scale: u32,
    pub timer_interrupts: u64,
    pub timer_interrupts_per_s: f64,
    pub exits_per_s: f64,
    /// The compute loop's share of the CPU under the tick.
    pub guest_share: f64,
    /// The highest channel-0 count the guest read back, and what it programmed.
    pub max_count_read: u64,
    pub guest_reload: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TickTable {
    pub rows: Vec<TickRow>,
    pub runs: Vec<RunReport>,
}

/// The scales the comparison runs: the guest's own tick, and a tenth of it.
pub const COMPARED_SCALES: [u32; 2] = [1, 10];

pub fn comparison_config(scale: u32, settings: Settings) -> BenchConfig {
    settings.config(BenchParams::Tick(TickParams {
        tick_scale: scale,
        duration_ms: settings.pick(300, 1_000),
    }))
}

pub fn compare(settings: Settings) -> Result<TickTable, BenchError> {
    let runs = run_each(&COMPARED_SCALES, |scale| comparison_config(scale, settings))?;
    let rows = COMPARED_SCALES
        .into_iter()
        .zip(&runs)
        .map(|(scale, run)| {
            let tick = run.results.tick()?;
            Ok(TickRow {
                scale,
                timer_interrupts: run.interrupts,
                timer_interrupts_per_s: tick.timer_interrupts_per_s,
                exits_per_s: tick.exits_per_s,
                guest_share: tick.guest_share,
                max_count_read: tick.max_count_read,
                guest_reload: tick.guest_reload,
            })
        })
        .collect::<Result<_, BenchError>>()?;
    Ok(TickTable { rows, runs })
}

impl fmt::Display for TickTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:>4} {:>12} {:>14} {:>10} {:>14} {:>22}",
            "K", "timer irqs", "timer irqs/s", "exits/s", "time in guest", "counts read (max/set)"
        )?;
        for row in &self.rows {
            writeln!(
                f,
                "{:>4} {:>12} {:>14.0} {:>10.0} {:>13.2}% {:>15}/{}",
                row.scale,
                row.timer_interrupts,
                row.timer_interrupts_per_s,
                row.exits_per_s,
                100.0 * row.guest_share,
                row.max_count_read,
                row.guest_reload
            )?;
        }
        Ok(())
    }
}
