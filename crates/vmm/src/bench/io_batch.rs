//! `dirq run io-batch`: coalescing consecutive port I/O (mechanisms.md
//! section 8). The guest (guest/bench_io_batch.c) issues disk commands of 11
//! port writes to an ATA task file, one exit each, or records them and
//! rings one doorbell that the VMM's doorbell device replays
//! (`devices::io_batch`).

use std::sync::Arc;

use dirq_stats::{f64_of, ratio};

use super::{cycles_to_seconds, window_exits, BenchError};
use crate::abi;
use crate::bus::Bus;
use crate::config::params::IoBatchParams;
use crate::config::Bench;
use crate::config::BenchConfig;
use crate::devices::io_batch::IoBatchDoorbell;
use crate::devices::task_file::{self, TaskFile};
use crate::machine::{self, Attach, Extensions};
use crate::report::RunReport;
use crate::results::{BenchResult, IoBatchResult};

/// Port writes in one disk command (an LBA48 command setup).
pub const WRITES_PER_COMMAND: u64 = 11;

/// Runs the io-batch bench, one way or the other as `params.io_batch` says.
pub(super) fn run(
    config: &BenchConfig,
    params: &IoBatchParams,
    echo_console: bool,
) -> Result<RunReport, BenchError> {
    let disk = Arc::new(TaskFile::default());
    let disk_ports = abi::PORT_TASK_FILE..abi::PORT_TASK_FILE + task_file::PORTS;
    let attach = |attach: &mut Attach| {
        attach.bus.add_pio(disk_ports.clone(), disk.clone());
        if params.io_batch {
            // The batches replay to the disk, the only device they write.
            let mut disk_only = Bus::default();
            disk_only.add_pio(disk_ports.clone(), disk.clone());
            IoBatchDoorbell::new(abi::PORT_IO_BATCH, attach.memory.clone(), disk_only)
                .attach(attach.bus);
        }
        Ok(())
    };
    let output = machine::run::<()>(
        config,
        echo_console,
        Extensions {
            attach: Some(&attach),
            ..Extensions::default()
        },
    )?;
    let state = disk.state();
    if state.commands != params.count {
        return Err(BenchError::Invariant {
            bench: Bench::IoBatch,
            what: format!(
                "the disk executed {} of the guest's {} commands",
                state.commands, params.count
            ),
        });
    }
    let commands = state.commands;
    let cycles = output.shared.result[abi::RESULT_IO_BATCH_CYCLES];
    let seconds = cycles_to_seconds(cycles, output.tsc_khz);
    let (exits, duration_s) = window_exits(&output);
    let per_command = |value: u64| ratio(value, commands.max(1));
    let results = BenchResult::IoBatch(IoBatchResult {
        commands_per_s: f64_of(commands) / seconds.max(f64::MIN_POSITIVE),
        exits_per_command: per_command(exits.total),
        userspace_exits_per_command: per_command(exits.userspace),
        device_digest: state.digest,
    });
    let mut report = RunReport::new(config, 0, exits, None, duration_s, results, output.facts);
    report.commands = Some(commands);
    Ok(report)
}
