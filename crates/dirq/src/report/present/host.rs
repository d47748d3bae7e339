//! The report's section on this host's KVM: capabilities and exit costs.

use dirq_stats::f64_of;
use dirq_vmm::probe::{EmulationTable, ProbeReport};

use crate::common::format::{format_value, ns_to_us};
use crate::report::analyse::host::capabilities;
use crate::report::present::data::{Cell, Section, Table, TableRow, Unit};

pub fn host_section(probe: &ProbeReport) -> Section {
    let row = |name: &str, value: Cell| TableRow::new(vec![Cell::text(name), value]);
    let words = |name: &str, text: String| row(name, Cell::text(text));
    let capabilities = capabilities(probe);
    let table = Table {
        title: "`dirq probe`".into(),
        columns: vec!["what".into(), "this host".into()],
        rows: [
            words(
                "KVM backend",
                probe.backend.clone().unwrap_or_else(|| "unknown".into()),
            ),
            words("KVM API version", probe.api_version.to_string()),
            row("vCPUs recommended", Cell::count(probe.recommended_vcpus)),
            row("vCPUs at most", Cell::count(probe.max_vcpus)),
            words("guest execution", probe.guest_exec.to_string()),
        ]
        .into_iter()
        .chain(
            probe
                .floors
                .named()
                .map(|(name, ns)| row(&format!("{name} (ns)"), Cell::number(ns, Unit::Ns))),
        )
        .chain([
            row("events timed per floor", Cell::count(probe.samples)),
            row(
                "default halt_poll_ns",
                probe
                    .default_halt_poll_ns
                    .map_or_else(|| Cell::text("unknown"), Cell::count),
            ),
            words("capabilities", capabilities.available.join(" ")),
            words("capabilities missing", capabilities.missing.join(" ")),
            words("KVM PV features", probe.pv_features.join(" ")),
        ])
        .collect(),
    };
    Section {
        id: "host".into(),
        title: "This host's KVM".into(),
        intro: vec![format!(
            "An exit handled by the VMM in userspace costs {} ns here and one handled inside KVM \
             {} ns: every exit a design saves is worth that much. One probe ran: each floor is \
             the median of its {} timed events, not a median over runs.",
            format_value(probe.floors.userspace_exit_ns),
            format_value(probe.floors.kernel_exit_ns),
            probe.samples
        )],
        figures: Vec::new(),
        tables: vec![table],
    }
}

/// Emulated against native on three irq-latency paths into a busy guest.
pub fn emulation_section(table: &EmulationTable) -> Section {
    let rows = table
        .rows
        .iter()
        .flat_map(|row| {
            [&row.emulated, &row.native].map(|run| {
                TableRow::new(vec![
                    Cell::text(row.path.clone()),
                    Cell::text(run.guest_exec.to_string()),
                    Cell::number(run.exits_per_interrupt, Unit::Count),
                    Cell::maybe(
                        run.latency_ns.as_ref().map(|l| ns_to_us(f64_of(l.p50))),
                        Unit::Us,
                    ),
                    Cell::number(run.insn_emulation_per_interrupt, Unit::Count),
                ])
            })
        })
        .collect();
    Section {
        id: "emulation".into(),
        title: "Emulated against native".into(),
        intro: vec![
            "kvm_pvm runs an ordinary guest through its instruction emulator, or natively once \
             the guest switches (docs/native.md). Every other real figure in this report is \
             native; this table keeps what emulation costs: the same irq-latency runs into a \
             busy guest both ways, each run once. Emulated, KVM emulates about a thousand instructions per \
             interrupt; natively only the trapped ones (the EOI, the IRETQ), and the \
             interrupt's own exits become the cost."
                .into(),
        ],
        figures: Vec::new(),
        tables: vec![Table {
            title: "irq-latency into a busy guest, emulated and native".into(),
            columns: [
                "path",
                "guest",
                "exits/irq",
                "p50 (us)",
                "insn_emulation/irq",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }],
    }
}
