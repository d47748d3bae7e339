//! The software-only studies (docs/studies.md) as a report section: what
//! `dirq studies` prints, as figures with their tables.

use std::collections::BTreeMap;

use dirq_stats::f64_of;
use dirq_vmm::exits::VmxExit;
use dirq_vmm::studies::vioapic::VioapicTable;
use dirq_vmm::studies::{halt::HaltTable, io_batch::IoBatchTable, tick::TickTable};

use dirq_vmm::report::LatencySummary;

use crate::common::format::ns_to_us;
use crate::common::progress::StepFailure;
use crate::report::analyse::studies::{failed, kernel_exits_per_command, measured};
use crate::report::present::charts::{exit_bars, latency_cpu_scatter};
use crate::report::present::conclusions::and_list;
use crate::report::present::data::{
    Cell, Chart, Figure, NamedValues, Section, SeriesKey, Spread, Table, TableRow, Unit,
};
use crate::report::present::page::Part;
use crate::studies::{Study, StudyTables};

fn columns(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| name.to_string()).collect()
}

fn vioapic_figure(table: &VioapicTable, command: &str) -> Figure {
    let entries: Vec<(String, BTreeMap<VmxExit, f64>)> = table
        .rows
        .iter()
        .map(|row| {
            (
                row.mode.to_string(),
                row.exits_by_reason_per_interrupt.clone(),
            )
        })
        .collect();
    let chart = exit_bars("exits per interrupt", &entries);
    let rows = table
        .rows
        .iter()
        .map(|row| {
            if let Some(why) = &row.not_measurable {
                let cell = format!("not measurable on this host: {why}");
                return TableRow::new(vec![
                    row.mode.to_string(),
                    cell,
                    "".into(),
                    "".into(),
                    "".into(),
                    "".into(),
                ]);
            }
            TableRow::new(vec![
                Cell::text(row.mode.to_string()),
                Cell::number(row.interrupts_per_s, Unit::Count),
                Cell::number(row.host_cycles_per_interrupt, Unit::Count),
                Cell::number(row.exits_per_interrupt, Unit::Count),
                Cell::number(row.userspace_exits_per_interrupt, Unit::Count),
                Cell::number(row.speedup_vs_userspace, Unit::Times),
            ])
        })
        .collect();
    Figure {
        folded: false,
        id: "studies-vioapic".into(),
        title: "VIOAPIC: exits per level-triggered interrupt, per controller level".into(),
        caption: "The guest handles back-to-back level-triggered device interrupts with the \
                  same register sequence at every level; only where the registers live differs."
            .into(),
        commands: vec![
            format!("{command} --only vioapic"),
            "dirq run vioapic --vioapic <level>".into(),
        ],
        chart,
        table: Table {
            folded: false,
            title: String::new(),
            columns: columns(&[
                "controller",
                "interrupts/s",
                "host cycles/interrupt",
                "exits/interrupt",
                "userspace exits/interrupt",
                "speedup vs userspace",
            ]),
            rows,
        },
    }
}

fn io_batch_figure(table: &IoBatchTable, command: &str) -> Figure {
    let label = |batched: bool| {
        if batched {
            "one doorbell"
        } else {
            "port writes"
        }
    };
    let chart = Chart::Bars {
        value_label: "exits per disk command".into(),
        categories: table
            .rows
            .iter()
            .map(|row| label(row.batched).into())
            .collect(),
        stacks: vec![
            NamedValues {
                name: "userspace".into(),
                key: SeriesKey::Variant,
                values: table
                    .rows
                    .iter()
                    .map(|row| row.userspace_exits_per_command)
                    .collect(),
            },
            NamedValues {
                name: "in KVM".into(),
                key: SeriesKey::Variant,
                values: table.rows.iter().map(kernel_exits_per_command).collect(),
            },
        ],
    };
    let rows = table
        .rows
        .iter()
        .map(|row| {
            TableRow::new(vec![
                Cell::text(label(row.batched)),
                Cell::count(row.commands),
                Cell::number(row.commands_per_s, Unit::Count),
                Cell::number(row.exits_per_command, Unit::Count),
                Cell::number(row.userspace_exits_per_command, Unit::Count),
            ])
        })
        .collect();
    Figure {
        folded: false,
        id: "studies-io-batch".into(),
        title: "Batched port I/O: exits per disk command".into(),
        commands: vec![
            format!("{command} --only io-batch"),
            "dirq run io-batch".into(),
            "dirq run io-batch --io-batch".into(),
        ],
        caption: format!(
            "Each disk command is 11 port writes to a task-file device, or the same writes \
             recorded in an array and replayed by the VMM after one doorbell. Device state \
             identical both ways: {}.",
            if table.device_state_identical {
                "yes"
            } else {
                "NO"
            }
        ),
        chart,
        table: Table {
            folded: false,
            title: String::new(),
            columns: columns(&[
                "guest",
                "commands",
                "commands/s",
                "exits/command",
                "userspace exits/command",
            ]),
            rows,
        },
    }
}

fn tick_figure(table: &TickTable, command: &str) -> Figure {
    let chart = Chart::Bars {
        value_label: "timer interrupts per second".into(),
        categories: table
            .rows
            .iter()
            .map(|row| format!("K = {}", row.scale))
            .collect(),
        stacks: vec![NamedValues {
            name: "timer interrupts".into(),
            key: SeriesKey::Variant,
            values: table
                .rows
                .iter()
                .map(|row| row.timer_interrupts_per_s)
                .collect(),
        }],
    };
    let rows = table
        .rows
        .iter()
        .map(|row| {
            TableRow::new(vec![
                Cell::count(row.scale),
                Cell::number(row.timer_interrupts_per_s, Unit::Count),
                Cell::number(row.exits_per_s, Unit::Count),
                Cell::number(row.guest_share, Unit::Fraction),
                Cell::count(row.max_count_read),
                Cell::count(row.guest_reload),
            ])
        })
        .collect();
    Figure {
        folded: false,
        id: "studies-tick".into(),
        title: "Tick scaling: timer interrupts per second".into(),
        caption: "The guest programs the PIT for 1000 Hz; the VMM's PIT counts K times slower, \
                  and the guest still reads back only counts up to the one it wrote (last column)."
            .into(),
        commands: vec![
            format!("{command} --only tick"),
            "dirq run tick --tick-scale K".into(),
        ],
        chart,
        table: Table {
            folded: false,
            title: String::new(),
            columns: columns(&[
                "K",
                "timer interrupts/s",
                "exits/s",
                "time in guest",
                "highest count read",
                "count written",
            ]),
            rows,
        },
    }
}

fn halt_figure(table: &HaltTable, command: &str) -> Figure {
    let measured: Vec<_> = table
        .rows
        .iter()
        .filter(|row| row.unavailable.is_none())
        .collect();
    let label = |row: &dirq_vmm::studies::halt::HaltRow| format!("{} · {}", row.ipi, row.label);
    let chart = latency_cpu_scatter(
        "host CPU burned by the vCPU threads (cores)",
        "IPI round trip p50 (us)",
        &measured
            .iter()
            .filter_map(|row| {
                Some((
                    label(row),
                    row.host_cpu_per_s,
                    Spread::of([ns_to_us(f64_of(row.latency_ns.as_ref()?.p50))])?,
                ))
            })
            .collect::<Vec<_>>(),
    );
    let rows = table
        .rows
        .iter()
        .map(|row| match &row.unavailable {
            Some(reason) => TableRow::flagged(
                vec![
                    Cell::text(label(row)),
                    Cell::count(row.vcpus),
                    Cell::text(format!("unavailable: {reason}")),
                ],
                true,
            ),
            None => {
                let vcpus = Cell::count(row.vcpus);
                let latency_us = |pick: fn(&LatencySummary) -> u64| {
                    Cell::maybe(
                        row.latency_ns.as_ref().map(|l| ns_to_us(f64_of(pick(l)))),
                        Unit::Us,
                    )
                };
                TableRow::new(vec![
                    Cell::text(label(row)),
                    // "*": the vCPUs shared host CPUs (the caption's note).
                    match row.cpus_shared {
                        Some(_) => vcpus.clone().shown_as(format!("{} *", vcpus.text)),
                        None => vcpus,
                    },
                    latency_us(|l| l.p50),
                    latency_us(|l| l.p99),
                    Cell::number(row.host_cpu_per_s, Unit::Cores),
                    Cell::number(row.exits_per_round_trip, Unit::Count),
                ])
            }
        })
        .collect();
    Figure {
        folded: false,
        id: "studies-halt".into(),
        title: "IPIs and HLT: latency against host CPU burned".into(),
        caption: match table.shared_cpus_note() {
            Some(note) => format!(
                "CPU burned is the vCPU threads' CPU time over the measured window's wall time. * {note}."
            ),
            None => "CPU burned is the vCPU threads' CPU time over the measured window's wall time."
                .into(),
        },
        commands: vec![
            format!("{command} --only halt"),
            "dirq run ipi --halt exit | --halt poll:<ns> | --guest-idle busy | --halt none | --pv-send-ipi"
                .into(),
        ],
        chart,
        table: Table {
            folded: false,
            title: String::new(),
            columns: columns(&[
                "IPI · waiting",
                "vCPUs",
                "p50 (us)",
                "p99 (us)",
                "CPU (cores)",
                "exits/round trip",
            ]),
            rows,
        },
    }
}

/// What each study's table measures, for the section's first words.
fn measures(study: Study) -> &'static str {
    match study {
        Study::Vioapic => "the four VIOAPIC levels",
        Study::IoBatch => "batched port I/O",
        Study::Tick => "transparent tick scaling",
        Study::Halt => "the IPI/HLT trade-off",
    }
}

/// The `--only` name of a study.
fn only_name(study: Study) -> String {
    clap::ValueEnum::to_possible_value(&study).map_or_else(
        || format!("{study:?}"),
        |value| value.get_name().to_string(),
    )
}

/// Each study whose table is missing, with its error and the command
/// that measures it alone.
pub fn failures(tables: &StudyTables, command: &str) -> Vec<StepFailure> {
    failed(tables)
        .into_iter()
        .map(|(study, reason)| StepFailure {
            configuration: measures(study).into(),
            reason: reason.to_string(),
            command: Some(format!("{command} --only {}", only_name(study))),
        })
        .collect()
}

/// The section, or `None` when no study could be measured.
pub fn studies_section(tables: &StudyTables, command: &str) -> Option<Section> {
    let mut figures = Vec::new();
    if let Some(table) = &tables.vioapic {
        figures.push(vioapic_figure(table, command));
    }
    if let Some(table) = &tables.io_batch {
        figures.push(io_batch_figure(table, command));
    }
    if let Some(table) = &tables.tick {
        figures.push(tick_figure(table, command));
    }
    if let Some(table) = &tables.halt {
        figures.push(halt_figure(table, command));
    }
    if figures.is_empty() {
        return None;
    }
    // What failed is said by the report (an "Incomplete" line above this).
    let names: Vec<&str> = Study::ALL
        .into_iter()
        .filter(|&study| measured(tables, study))
        .map(measures)
        .collect();
    let intro = vec![
        format!(
            "The studies of docs/studies.md that need no special hardware, run on dirq's VMM \
             and guest and measured exit by exit, each once: {}.",
            and_list(&names)
        ),
        "Where kvm_pvm emulates dirq's guest, every instruction costs about a tenth of a \
         userspace exit, so the work every path shares weighs more than on hardware and the \
         savings look smaller, and a running vCPU takes interrupts only at its next exit; \
         docs/studies.md explains both."
            .into(),
    ];
    for figure in figures.iter_mut().skip(1) {
        figure.folded = true;
    }
    Some(Section {
        given: Vec::new(),
        id: Part::Studies.id().into(),
        title: "Software-only studies, for real on this host's KVM".into(),
        intro,
        figures,
        tables: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_study_names_what_it_measures_and_the_command_that_retries_it() {
        let tables = StudyTables {
            failures: vec![format!("{}: the guest hung", Study::Tick.title())],
            ..StudyTables::default()
        };
        let failures = failures(&tables, "dirq studies");
        assert_eq!(failures.len(), 1);
        assert_eq!(failures[0].configuration, "transparent tick scaling");
        assert_eq!(failures[0].reason, "the guest hung");
        assert_eq!(
            failures[0].command.as_deref(),
            Some("dirq studies --only tick")
        );
    }
}
