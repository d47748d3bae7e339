//! Report sections for the real runs on /dev/kvm: exits per interrupt per
//! delivery path, latency distributions, IPI latency against CPU burned.

use std::collections::BTreeMap;

use super::charts::{
    exit_bars, exit_table, format_percent, format_value, grouped_lines, latency_cdf,
    latency_cpu_scatter,
};
use super::data::{Axis, Figure, Scale, Section, Table, TableRow};
use super::views::RealRun;
use dirq_vmm::config::BenchConfig;

/// KVM's count of guest instructions it emulated: on backends that emulate
/// privileged guest instructions without a VM exit (kvm_pvm), the work an
/// uncounted EOI or timer write causes shows up here.
const INSN_EMULATION: &str = "insn_emulation";

/// whileloop's result: loop time without interrupts over loop time with them.
pub const GUEST_SHARE: &str = "guest_share";

/// One real run and how it was made.
#[derive(Debug, Clone)]
pub struct RealCase {
    /// Short name of the path, e.g. "kernel + irqfd + PV EOI".
    pub label: String,
    /// The equivalent `dirq run ...` command line.
    pub command: String,
    pub config: BenchConfig,
    pub run: RealRun,
    /// Host CPU the vCPU threads burned in the measured window, in cores
    /// (CPU seconds per wall second): what polling costs.
    pub cpu_cores: f64,
}

fn commands(cases: &[&RealCase]) -> String {
    cases
        .iter()
        .map(|case| format!("`{}`", case.command))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Builds the real-VMM section from the runs that succeeded.
pub fn real_section(cases: &[RealCase]) -> Section {
    let mut figures = Vec::new();
    let by_bench = |bench: &str| -> Vec<&RealCase> {
        cases
            .iter()
            .filter(|case| case.run.bench == bench)
            .collect()
    };

    let irq = by_bench("irq-latency");
    if let Some(figure) = exits_per_interrupt_figure(&irq) {
        figures.push(figure);
    }
    for (bench, what) in [
        (
            "irq-latency",
            "MSI round trip, device thread to guest acknowledgement",
        ),
        (
            "timer-latency",
            "how late the guest's LAPIC timer handler runs",
        ),
    ] {
        let runs = by_bench(bench);
        let entries: Vec<_> = runs
            .iter()
            .filter_map(|case| Some((case.label.clone(), case.run.latency_ns?)))
            .collect();
        if entries.is_empty() {
            continue;
        }
        let (chart, table) = latency_cdf(&entries);
        figures.push(Figure {
            id: format!("real-{bench}-latency"),
            title: format!("{bench}: latency distribution per path ({what})"),
            caption: format!(
                "Ran {}. Each line is a run's CDF through its p50, p99 and maximum.",
                commands(&runs)
            ),
            chart,
            table,
        });
    }
    if let Some(figure) = ipi_figure(&by_bench("ipi")) {
        figures.push(figure);
    }
    if let Some(figure) = whileloop_figure(&by_bench("whileloop")) {
        figures.push(figure);
    }

    Section {
        id: "real".into(),
        title: "Real runs on this host's KVM".into(),
        intro: vec![
            "dirq's own guest test kernel on /dev/kvm; every exit counted by reason, from the \
             VMM's run loop (userspace) and KVM's binary stats (kernel)."
                .into(),
        ],
        figures,
        tables: vec![runs_table(cases)],
    }
}

fn exits_per_interrupt_figure(cases: &[&RealCase]) -> Option<Figure> {
    let entries: Vec<(String, BTreeMap<String, f64>)> = cases
        .iter()
        .filter(|case| case.run.interrupts > 0)
        .map(|case| {
            let per_interrupt = case
                .run
                .exits
                .by_category
                .iter()
                .map(|(reason, count)| (reason.clone(), *count as f64 / case.run.interrupts as f64))
                .collect();
            (case.label.clone(), per_interrupt)
        })
        .collect();
    let chart = exit_bars("exits per delivered interrupt", &entries);
    if !chart.has_data() {
        return None;
    }
    Some(Figure {
        id: "real-exits-per-interrupt".into(),
        title: "Exits per interrupt, per real delivery path".into(),
        caption: format!(
            "Ran {}. Exits of the whole run by reason, divided by interrupts delivered.",
            commands(cases)
        ),
        table: exit_table("path", &chart, "exits/interrupt"),
        chart,
    })
}

fn ipi_figure(cases: &[&RealCase]) -> Option<Figure> {
    let measured: Vec<(&RealCase, f64)> = cases
        .iter()
        .filter_map(|case| Some((*case, case.run.latency_ns?.p50)))
        .collect();
    if measured.is_empty() {
        return None;
    }
    let chart = latency_cpu_scatter(
        "host CPU burned (cores)",
        &measured
            .iter()
            .map(|(case, p50)| (case.label.clone(), case.cpu_cores, *p50))
            .collect::<Vec<_>>(),
    );
    let table = Table {
        title: String::new(),
        columns: [
            "halt mode",
            "p50 (ns)",
            "p99 (ns)",
            "CPU burned (cores)",
            "exits/IPI",
        ]
        .map(String::from)
        .to_vec(),
        rows: measured
            .iter()
            .map(|(case, p50)| {
                TableRow::new(vec![
                    case.label.clone(),
                    format_value(*p50),
                    case.run
                        .latency_ns
                        .map_or_else(|| "-".into(), |l| format_value(l.p99)),
                    format!("{:.2}", case.cpu_cores),
                    format_value(case.run.exits_per_interrupt),
                ])
            })
            .collect(),
    };
    Some(Figure {
        id: "real-ipi-cpu".into(),
        title: "IPI latency against host CPU burned".into(),
        caption: format!(
            "Ran {}. vCPU 0 and vCPU 1 ping-pong IPIs; CPU burned is the VMM process's CPU \
             time (all threads, user + system) over the run's wall time.",
            commands(cases)
        ),
        chart,
        table,
    })
}

fn whileloop_figure(cases: &[&RealCase]) -> Option<Figure> {
    let points: Vec<(String, f64, f64)> = cases
        .iter()
        .filter_map(|case| {
            Some((
                case.label.clone(),
                case.run.config_number("rate_hz")?,
                *case.run.results.get(GUEST_SHARE)?,
            ))
        })
        .collect();
    if points.is_empty() {
        return None;
    }
    let (chart, table) = grouped_lines(
        Axis {
            label: "device interrupts per second".into(),
            scale: Scale::Linear,
        },
        Axis {
            label: "time in guest (loop speed vs no interrupts)".into(),
            scale: Scale::Linear,
        },
        &points,
        format_percent,
    );
    Some(Figure {
        id: "real-whileloop-guest-time".into(),
        title: "Time in guest against interrupt rate, per real path".into(),
        caption: format!(
            "Ran {}. The guest times a fixed loop without interrupts, then under the device's \
             interrupt rate; time in guest is the ratio.",
            commands(cases)
        ),
        chart,
        table,
    })
}

fn runs_table(cases: &[RealCase]) -> Table {
    Table {
        title: "All real runs".into(),
        columns: [
            "bench",
            "path",
            "interrupts",
            "exits (user / kernel)",
            "exits per interrupt",
            "KVM instruction emulations per interrupt",
            "p50 (ns)",
            "duration (s)",
            "CPU (cores)",
            "command",
        ]
        .map(String::from)
        .to_vec(),
        rows: cases
            .iter()
            .map(|case| {
                let run = &case.run;
                TableRow::new(vec![
                    run.bench.clone(),
                    case.label.clone(),
                    run.interrupts.to_string(),
                    format!("{} / {}", run.exits.userspace, run.exits.kernel),
                    format_value(run.exits_per_interrupt),
                    run.per_interrupt(INSN_EMULATION)
                        .map_or_else(|| "-".into(), format_value),
                    run.latency_ns
                        .map_or_else(|| "-".into(), |l| format_value(l.p50)),
                    format!("{:.2}", run.duration_s),
                    format!("{:.2}", case.cpu_cores),
                    case.command.clone(),
                ])
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::data::Chart;
    use super::*;
    use dirq_vmm::exits::UNCATEGORIZED;

    fn case(bench: &str, label: &str, interrupts: u64, by_category: serde_json::Value) -> RealCase {
        let run: RealRun = serde_json::from_value(serde_json::json!({
            "bench": bench,
            "config": {},
            "interrupts": interrupts,
            "exits": {"total": 2 * interrupts, "userspace": 0, "kernel": 0, "by_category": by_category},
            "exits_per_interrupt": 2.0,
            "latency_ns": {"mean": 9000.0, "p50": 8000.0, "p99": 20000.0, "max": 50000.0},
            "duration_s": 1.0
        }))
        .expect("contract parses");
        RealCase {
            label: label.into(),
            command: format!("dirq run {bench}"),
            config: BenchConfig::new(bench.parse().expect("bench name")),
            run,
            cpu_cores: 0.5,
        }
    }

    #[test]
    fn real_section_divides_exits_by_interrupts_and_plots_each_bench() {
        let cases = vec![
            case(
                "irq-latency",
                "userspace",
                1000,
                serde_json::json!({"io_exits": 1000, "irq_window_exits": 500, UNCATEGORIZED: 500}),
            ),
            case(
                "irq-latency",
                "kernel",
                1000,
                serde_json::json!({UNCATEGORIZED: 2000}),
            ),
            case(
                "ipi",
                "halt exit",
                100,
                serde_json::json!({"halt_exits": 100, UNCATEGORIZED: 100}),
            ),
            case(
                "ipi",
                "halt none",
                100,
                serde_json::json!({UNCATEGORIZED: 200}),
            ),
        ];
        let section = real_section(&cases);
        let ids: Vec<&str> = section.figures.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "real-exits-per-interrupt",
                "real-irq-latency-latency",
                "real-ipi-cpu"
            ]
        );
        let Chart::Bars {
            categories, stacks, ..
        } = &section.figures[0].chart
        else {
            panic!("exits per interrupt are bars");
        };
        assert_eq!(categories, &["userspace", "kernel"]);
        let stack = |name: &str| {
            stacks
                .iter()
                .find(|s| s.name == name)
                .map(|s| s.values.clone())
                .unwrap_or_else(|| panic!("no {name} stack"))
        };
        assert_eq!(stack("io_exits"), vec![1.0, 0.0]);
        assert_eq!(stack("irq_window_exits"), vec![0.5, 0.0]);
        // What no exit category claims is "other"; non-exit stats are left out.
        assert_eq!(stack(UNCATEGORIZED), vec![0.5, 2.0]);
        assert!(stacks.iter().all(|s| s.name != "insn_emulation"));
        assert_eq!(section.tables[0].rows.len(), 4);
    }
}
