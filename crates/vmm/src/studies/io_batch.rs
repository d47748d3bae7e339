//! Batched port I/O (mechanisms.md section 8): the io-batch bench
//! (`bench::io_batch`) with 11 port writes per disk command and with one
//! doorbell, side by side.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{run_each, Settings};
use crate::bench::BenchError;
use crate::config::params::IoBatchParams;
use crate::config::{BenchConfig, BenchParams};
use crate::report::RunReport;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IoBatchRow {
    pub batched: bool,
    pub commands: u64,
    pub commands_per_s: f64,
    pub exits_per_command: f64,
    pub userspace_exits_per_command: f64,
}

/// Both ways side by side.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IoBatchTable {
    pub rows: Vec<IoBatchRow>,
    /// Whether the disk ended in the same state (digest and count) both ways.
    pub device_state_identical: bool,
    /// batched commands/s over unbatched.
    pub speedup: f64,
    pub runs: Vec<RunReport>,
}

/// The two ways the comparison runs: 11 port writes, then one doorbell.
const BATCHED: [bool; 2] = [false, true];

pub fn comparison_config(batched: bool, settings: Settings) -> BenchConfig {
    settings.config(BenchParams::IoBatch(IoBatchParams {
        io_batch: batched,
        count: settings.pick(1_000, 5_000),
    }))
}

pub fn compare(settings: Settings) -> Result<IoBatchTable, BenchError> {
    let runs = run_each(&BATCHED, |batched| comparison_config(batched, settings))?;
    let results = runs
        .iter()
        .map(|run| run.results.io_batch())
        .collect::<Result<Vec<_>, _>>()?;
    let rows: Vec<IoBatchRow> = BATCHED
        .into_iter()
        .zip(runs.iter().zip(&results))
        .map(|(batched, (run, result))| IoBatchRow {
            batched,
            commands: run.commands.unwrap_or(0),
            commands_per_s: result.commands_per_s,
            exits_per_command: result.exits_per_command,
            userspace_exits_per_command: result.userspace_exits_per_command,
        })
        .collect();
    let device_state_identical = results
        .windows(2)
        .all(|pair| pair[0].device_digest == pair[1].device_digest)
        && rows
            .windows(2)
            .all(|pair| pair[0].commands == pair[1].commands);
    let speedup = if rows[0].commands_per_s > 0.0 {
        rows[1].commands_per_s / rows[0].commands_per_s
    } else {
        0.0
    };
    Ok(IoBatchTable {
        rows,
        device_state_identical,
        speedup,
        runs,
    })
}

impl fmt::Display for IoBatchTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<24} {:>9} {:>12} {:>14} {:>18}",
            "guest", "commands", "commands/s", "exits/command", "userspace/command"
        )?;
        for row in &self.rows {
            writeln!(
                f,
                "{:<24} {:>9} {:>12.0} {:>14.2} {:>18.2}",
                if row.batched {
                    "one doorbell (--io-batch)"
                } else {
                    "11 port writes"
                },
                row.commands,
                row.commands_per_s,
                row.exits_per_command,
                row.userspace_exits_per_command
            )?;
        }
        writeln!(
            f,
            "speedup {:.2}x; disk state identical both ways: {}",
            self.speedup,
            if self.device_state_identical {
                "yes"
            } else {
                "NO"
            }
        )
    }
}
