//! What the software-only studies found, as typed findings the page then
//! words: the fastest VIOAPIC level, the levels this host cannot run, what
//! batching port I/O saves, and which studies were measured or failed.

use dirq_vmm::studies::io_batch::{IoBatchRow, IoBatchTable};
use dirq_vmm::studies::vioapic::{VioapicRow, VioapicTable};

use crate::studies::{Study, StudyTables};

/// The VIOAPIC level that handled level-triggered interrupts fastest
/// against the userspace controller.
pub fn fastest_vioapic_level(table: &VioapicTable) -> Option<&VioapicRow> {
    table
        .rows
        .iter()
        .max_by(|a, b| a.speedup_vs_userspace.total_cmp(&b.speedup_vs_userspace))
}

/// The VIOAPIC levels this host cannot run, each with why.
pub fn unmeasurable_vioapic_levels(table: &VioapicTable) -> Vec<(&VioapicRow, &str)> {
    table
        .rows
        .iter()
        .filter_map(|row| Some((row, row.not_measurable.as_deref()?)))
        .collect()
}

/// Exits per disk command with and without the doorbell, and how many
/// times the commands per second batching gave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchingSaves {
    pub plain_exits_per_command: f64,
    pub batched_exits_per_command: f64,
    pub speedup: f64,
}

/// What batching saved; none unless both ways were measured.
pub fn batching_saves(table: &IoBatchTable) -> Option<BatchingSaves> {
    let exits = |batched: bool| {
        table
            .rows
            .iter()
            .find(|row| row.batched == batched)
            .map(|row| row.exits_per_command)
    };
    Some(BatchingSaves {
        plain_exits_per_command: exits(false)?,
        batched_exits_per_command: exits(true)?,
        speedup: table.speedup,
    })
}

/// The exits per disk command that KVM handled itself.
pub fn kernel_exits_per_command(row: &IoBatchRow) -> f64 {
    row.exits_per_command - row.userspace_exits_per_command
}

/// Whether `study`'s table was measured.
pub fn measured(tables: &StudyTables, study: Study) -> bool {
    match study {
        Study::Vioapic => tables.vioapic.is_some(),
        Study::IoBatch => tables.io_batch.is_some(),
        Study::Tick => tables.tick.is_some(),
        Study::Halt => tables.halt.is_some(),
    }
}

/// Each study whose table is missing with the error it failed on; a study
/// that was not asked for has no error and is not listed.
pub fn failed(tables: &StudyTables) -> Vec<(Study, &str)> {
    Study::ALL
        .into_iter()
        .filter(|&study| !measured(tables, study))
        .filter_map(|study| {
            let named = format!("{}: ", study.title());
            let reason = tables
                .failures
                .iter()
                .find_map(|failure| failure.strip_prefix(&named))?;
            Some((study, reason))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dirq_vmm::config::VioapicLevel;
    use std::collections::BTreeMap;

    fn level(mode: VioapicLevel, speedup: f64, not_measurable: Option<&str>) -> VioapicRow {
        VioapicRow {
            mode,
            interrupts: 100,
            interrupts_per_s: 1000.0 * speedup,
            host_cycles_per_interrupt: 1.0,
            register_accesses_per_interrupt: 4.0,
            trapped_accesses_per_interrupt: 0.0,
            exits_per_interrupt: 1.0,
            userspace_exits_per_interrupt: 0.0,
            exits_by_reason_per_interrupt: BTreeMap::new(),
            speedup_vs_userspace: speedup,
            not_measurable: not_measurable.map(String::from),
        }
    }

    #[test]
    fn the_fastest_level_is_the_largest_speedup_and_unmeasurable_ones_say_why() {
        let table = VioapicTable {
            rows: vec![
                level(VioapicLevel::Userspace, 1.0, None),
                level(VioapicLevel::Kernel, 2.5, None),
                level(VioapicLevel::Pv, 0.0, Some("no hypercalls")),
            ],
            runs: Vec::new(),
        };
        let fastest = fastest_vioapic_level(&table).expect("levels");
        assert_eq!(fastest.mode, VioapicLevel::Kernel);
        let unmeasurable = unmeasurable_vioapic_levels(&table);
        assert_eq!(unmeasurable.len(), 1);
        assert_eq!(unmeasurable[0].0.mode, VioapicLevel::Pv);
        assert_eq!(unmeasurable[0].1, "no hypercalls");
        let empty = VioapicTable {
            rows: Vec::new(),
            runs: Vec::new(),
        };
        assert!(fastest_vioapic_level(&empty).is_none());
    }

    fn io_row(batched: bool, exits: f64, userspace: f64) -> IoBatchRow {
        IoBatchRow {
            batched,
            commands: 10,
            commands_per_s: 100.0,
            exits_per_command: exits,
            userspace_exits_per_command: userspace,
        }
    }

    #[test]
    fn batching_needs_both_ways_and_splits_exits_by_who_handled_them() {
        let mut table = IoBatchTable {
            rows: vec![io_row(false, 12.0, 11.0), io_row(true, 2.0, 1.0)],
            device_state_identical: true,
            speedup: 4.5,
            runs: Vec::new(),
        };
        assert_eq!(
            batching_saves(&table),
            Some(BatchingSaves {
                plain_exits_per_command: 12.0,
                batched_exits_per_command: 2.0,
                speedup: 4.5,
            })
        );
        assert_eq!(kernel_exits_per_command(&table.rows[0]), 1.0);
        table.rows.pop();
        assert_eq!(batching_saves(&table), None);
    }

    #[test]
    fn a_study_fails_only_with_its_own_error() {
        let tables = StudyTables {
            failures: vec![
                format!("{}: the guest hung", Study::Vioapic.title()),
                format!("{}: no /dev/kvm", Study::Halt.title()),
            ],
            ..StudyTables::default()
        };
        assert!(!measured(&tables, Study::Tick));
        // Batched I/O and tick scaling were not asked for: no error.
        assert_eq!(
            failed(&tables),
            [
                (Study::Vioapic, "the guest hung"),
                (Study::Halt, "no /dev/kvm")
            ]
        );
    }
}
