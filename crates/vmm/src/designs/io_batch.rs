//! `dirq run io-batch`: coalescing consecutive port I/O (mechanisms.md
//! section 8). The guest (guest/bench_io_batch.c) issues disk commands of 11
//! port writes to an ATA task file, one exit each, or records them and
//! rings one doorbell that the VMM's bus replays.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Settings;
use crate::abi;
use crate::bench::{cycles_to_seconds, window_exits, BenchError};
use crate::config::{Bench, BenchConfig};
use crate::devices::task_file::{self, TaskFile};
use crate::machine::{self, Attach, Extensions};
use crate::report::RunReport;

/// Port writes in one disk command (an LBA48 command setup).
pub const WRITES_PER_COMMAND: u64 = 11;

/// Runs the io-batch bench, one way or the other as `config.io_batch` says.
pub fn run(config: &BenchConfig, echo_console: bool) -> Result<RunReport, BenchError> {
    let disk = Arc::new(TaskFile::default());
    let attach = |attach: &mut Attach| {
        attach.bus.add_pio(
            abi::PORT_TASK_FILE..abi::PORT_TASK_FILE + task_file::PORTS,
            disk.clone(),
        );
        if attach.config.io_batch {
            attach
                .bus
                .enable_io_batch(abi::PORT_IO_BATCH, attach.memory.clone());
        }
        Ok(())
    };
    let output = machine::run::<()>(
        config,
        echo_console,
        Extensions {
            attach: Some(&attach),
            device: None,
        },
    )?;
    let state = disk.state();
    if state.commands != config.count {
        return Err(BenchError::Invariant {
            bench: "io-batch",
            what: format!(
                "the disk executed {} of the guest's {} commands",
                state.commands, config.count
            ),
        });
    }
    let commands = state.commands;
    let cycles = output.shared.result[abi::RESULT_IO_BATCH_CYCLES];
    let seconds = cycles_to_seconds(cycles, output.tsc_khz);
    let (exits, duration_s) = window_exits(&output);
    let per_command = |value: u64| value as f64 / commands.max(1) as f64;
    let mut results = BTreeMap::new();
    for (name, value) in [
        (
            "commands_per_s",
            commands as f64 / seconds.max(f64::MIN_POSITIVE),
        ),
        ("exits_per_command", per_command(exits.total)),
        ("userspace_exits_per_command", per_command(exits.userspace)),
        ("device_digest", f64::from(state.digest)),
    ] {
        results.insert(name.to_string(), value);
    }
    let mut report = RunReport::new(config, 0, exits, None, duration_s, results, output.facts);
    report.commands = Some(commands);
    Ok(report)
}

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

pub fn comparison_config(batched: bool, settings: Settings) -> BenchConfig {
    let mut config = settings.config(Bench::IoBatch);
    config.io_batch = batched;
    config.count = settings.pick(1_000, 5_000);
    config
}

pub fn compare(settings: Settings) -> Result<IoBatchTable, BenchError> {
    let runs = [false, true]
        .into_iter()
        .map(|batched| crate::bench::run(&comparison_config(batched, settings)))
        .collect::<Result<Vec<_>, _>>()?;
    let figure = |run: &RunReport, name: &str| run.results.get(name).copied().unwrap_or(0.0);
    let rows: Vec<IoBatchRow> = runs
        .iter()
        .map(|run| IoBatchRow {
            batched: run.config.io_batch,
            commands: run.commands.unwrap_or(0),
            commands_per_s: figure(run, "commands_per_s"),
            exits_per_command: figure(run, "exits_per_command"),
            userspace_exits_per_command: figure(run, "userspace_exits_per_command"),
        })
        .collect();
    let device_state_identical = runs
        .windows(2)
        .all(|pair| figure(&pair[0], "device_digest") == figure(&pair[1], "device_digest"))
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
