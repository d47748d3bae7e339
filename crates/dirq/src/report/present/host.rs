//! The report's section on this host's KVM: capabilities and exit costs.

use dirq_stats::{f64_of, ratio};
use dirq_vmm::exits::VmxExit;
use dirq_vmm::probe::{EmulationTable, ProbeReport};

use crate::common::format::{format_value, ns_to_us};
use crate::report::analyse::host::{capabilities, probe_runs};
use crate::report::present::data::{Cell, Section, Table, TableRow, Unit};
use crate::report::present::page::Part;

pub fn host_section(probe: &ProbeReport) -> Section {
    let row = |name: &str, value: Cell| TableRow::new(vec![Cell::text(name), value]);
    let words = |name: &str, text: String| row(name, Cell::text(text));
    let capabilities = capabilities(probe);
    let table = Table {
        folded: true,
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
        given: Vec::new(),
        id: Part::Host.id().into(),
        title: "This host's KVM".into(),
        intro: vec![format!(
            "An exit handled by the VMM in userspace costs {} ns here and one handled inside KVM \
             {} ns: every exit a design saves is worth that much. One probe ran: each floor is \
             the median of its {} runs' p50s, each run {} timed events at the fewest.",
            format_value(probe.floors.userspace_exit_ns),
            format_value(probe.floors.kernel_exit_ns),
            probe_runs(probe),
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
                    Cell::number(
                        ratio(
                            run.exits
                                .by_category
                                .get(&VmxExit::InterruptWindow)
                                .copied()
                                .unwrap_or(0),
                            run.interrupts.max(1),
                        ),
                        Unit::Count,
                    ),
                ])
            })
        })
        .collect();
    Section {
        given: Vec::new(),
        id: Part::Emulation.id().into(),
        title: "Emulated against native".into(),
        intro: vec![
            "kvm_pvm runs an ordinary guest through its instruction emulator, or natively once \
             the guest switches (docs/native.md). Every other real figure in this report is \
             native; this table keeps what emulation costs: the same irq-latency runs into a \
             busy guest both ways, each run once. Emulated, KVM emulates about a thousand \
             instructions per interrupt; natively only the trapped ones (the EOI, the IRETQ), \
             and the interrupt's own exits become the cost."
                .into(),
            "These runs go back to back (no pacing: the device raises the next interrupt as \
             soon as the last is acknowledged), so the next interrupt is already pending when \
             the guest's handler ends and is injected at an interrupt-window exit (the last \
             column), where \"Real runs\" pace theirs: their p50s do not compare with these."
                .into(),
        ],
        figures: Vec::new(),
        tables: vec![Table {
            folded: true,
            title: "irq-latency into a busy guest, back to back, emulated and native".into(),
            columns: [
                "path",
                "guest",
                "exits/irq",
                "p50 (us)",
                "insn_emulation/irq",
                "INTERRUPT_WINDOW exits/irq",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }],
    }
}
