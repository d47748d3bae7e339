//! The section linking the real runs' Perfetto traces.

use crate::report::collect::real_trace::{Twins, WrittenTrace};
use crate::report::present::data::{Cell, Section, Table, TableRow};
use crate::report::present::page::Part;

/// The section that links the written traces; none when none was written.
pub fn real_traces_section(traces: &[WrittenTrace]) -> Option<Section> {
    if traces.is_empty() {
        return None;
    }
    let rows = traces
        .iter()
        .map(|trace| {
            TableRow::new(vec![
                Cell::text(trace.case_label.clone()),
                Cell::text(format!("`traces/{}`", trace.file)),
                Cell::count(trace.counts.raises),
                Cell::count(trace.counts.flows),
                Cell::count(trace.counts.exits),
                Cell::count(trace.counts.kvm_exits),
                Cell::count(trace.counts.dropped),
                Cell::text(match &trace.twins {
                    Twins::Traced => "beside the real run".to_string(),
                    Twins::None(why) => format!("none: {why}"),
                }),
            ])
        })
        .collect();
    Some(Section {
        id: Part::RealTraces.id().into(),
        title: "Real runs: timelines beside their twins (Perfetto)".into(),
        intro: vec![
            "One more irq-latency run per configuration (at most 300 round trips), the VMM \
             recording its timeline, in one file with the configuration's simulated twins; \
             open a file in ui.perfetto.dev. Process 0 is the real run, named with the host \
             it ran on; each twin is a process named with its design and the cost profile it \
             ran on. In the real run, track \"device\" holds each round trip from the raise \
             to the acknowledgement the device saw; \"vCPU n\" alternates \"guest\" slices \
             (KVM_RUN) with the exits that returned to the VMM, named by VMX reason; \
             \"vCPU n · in KVM\" holds what KVM's statistics counted between the raise and the \
             acknowledgement: every exit, those KVM handled itself (which no return to the \
             VMM shows) and those that returned. Each round trip's arrow \
             leads from the raise through those exits to the guest's acknowledgement, on \
             every path."
                .into(),
        ],
        tables: vec![Table {
            folded: false,
            title: "Traced configurations".into(),
            columns: [
                "path",
                "trace",
                "raises",
                "raise-to-acknowledgement arrows",
                "KVM_RUN returns",
                "exits KVM counted in round trips",
                "records dropped",
                "twins",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }],
        ..Section::default()
    })
}
