//! The section linking the real runs' Perfetto traces.

use crate::report::collect::real_trace::WrittenTrace;
use crate::report::present::data::{Cell, Section, Table, TableRow};

/// The section that links the written traces; none when none was written.
pub fn real_traces_section(traces: &[WrittenTrace]) -> Option<Section> {
    if traces.is_empty() {
        return None;
    }
    let rows = traces
        .iter()
        .map(|trace| {
            TableRow::new(vec![
                Cell::text(trace.case.label.clone()),
                Cell::text(format!("`traces/{}`", trace.file)),
                Cell::count(trace.counts.raises),
                Cell::count(trace.counts.exits),
                Cell::count(trace.counts.flows),
                Cell::count(trace.counts.dropped),
                Cell::text(format!("`{}`", trace.case.command)),
            ])
        })
        .collect();
    let section = Section {
        id: "real-traces".into(),
        title: "Real runs: timelines (Perfetto)".into(),
        intro: vec![
            "One more irq-latency run per path below, with the VMM recording its timeline; \
             open a file in ui.perfetto.dev (or chrome://tracing). Tracks \"vCPU 0\", \
             \"vCPU 1\": \"guest\" slices are KVM_RUN (the guest, and every exit KVM handled \
             itself, which this backend cannot time); the slices between them are the exits \
             that returned to the VMM, named by VMX reason, lasting until the next KVM_RUN. \
             Track \"device\": each raise; on the userspace path an arrow leads from it to \
             the first KVM_RUN entry after it, where the VMM's LAPIC injects it. On in-kernel \
             paths KVM delivers without returning to the VMM: no arrows, and few slices."
                .into(),
        ],
        figures: Vec::new(),
        tables: vec![Table {
            title: "Traced runs".into(),
            columns: [
                "path",
                "trace",
                "raises",
                "KVM_RUN returns",
                "raises with an arrow",
                "records dropped",
                "the run it repeats",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }],
    };
    Some(section)
}
