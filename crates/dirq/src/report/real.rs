//! Report sections for the real runs on /dev/kvm: exits per interrupt per
//! delivery path, latency distributions, IPI latency against CPU burned.
//! Every measurement may have run several times: tables give the median
//! and the range, figures the median with a whisker over the range.

use std::collections::BTreeMap;

use dirq_stats::{f64_of, ratio};
use dirq_vmm::exits::VmxExit;
use dirq_vmm::report::Bucket;

use super::charts::{
    exit_bars, exit_table, format_percent, format_value, grouped_lines, latency_chart,
    latency_cpu_scatter, LinePoint,
};
use super::data::{Axis, Figure, Scale, Section, Spread, Table, TableRow};
use super::views::{cdf_steps, RealRun};
use dirq_vmm::config::BenchConfig;

/// KVM's count of guest instructions it emulated: on backends that emulate
/// privileged guest instructions without a VM exit (kvm_pvm), the work an
/// uncounted EOI or timer write causes shows up here.
const INSN_EMULATION: &str = "insn_emulation";

/// whileloop's result: loop time without interrupts over loop time with them.
pub const GUEST_SHARE: &str = "guest_share";

/// One run of a real case.
#[derive(Debug, Clone)]
pub struct Repeat {
    pub run: RealRun,
    /// Host CPU the vCPU threads burned in the measured window, in cores
    /// (CPU seconds per wall second): what polling costs.
    pub cpu_cores: f64,
}

/// One real configuration, run one or more times, and how it was made.
#[derive(Debug, Clone)]
pub struct RealCase {
    /// Short name of the path, e.g. "kernel + irqfd + PV EOI".
    pub label: String,
    /// The equivalent `dirq run ...` command line.
    pub command: String,
    pub config: BenchConfig,
    /// Never empty.
    pub repeats: Vec<Repeat>,
}

impl RealCase {
    pub fn bench(&self) -> &str {
        self.repeats
            .first()
            .map_or_else(|| self.config.bench().name(), |r| r.run.bench.as_str())
    }

    /// The median and range of a figure over the repeats that have it.
    pub fn spread(&self, figure: impl Fn(&Repeat) -> Option<f64>) -> Option<Spread> {
        Spread::of(self.repeats.iter().filter_map(figure))
    }

    pub fn exits_per_interrupt(&self) -> Option<Spread> {
        self.spread(|r| (r.run.interrupts > 0).then_some(r.run.exits_per_interrupt))
    }

    pub fn p50(&self) -> Option<Spread> {
        self.spread(|r| Some(r.run.latency_ns.as_ref()?.p50))
    }

    pub fn p99(&self) -> Option<Spread> {
        self.spread(|r| Some(r.run.latency_ns.as_ref()?.p99))
    }

    pub fn guest_share(&self) -> Option<Spread> {
        self.spread(|r| r.run.results.get(GUEST_SHARE).copied())
    }

    /// A count of each repeat per second of its measured window.
    pub fn per_s(&self, count: impl Fn(&RealRun) -> Option<f64>) -> Option<Spread> {
        self.spread(|r| {
            let count = count(&r.run)?;
            (r.run.duration_s > 0.0).then(|| count / r.run.duration_s)
        })
    }

    /// Pings vCPU 0 sent a second, for the ipi bench (its pinged vCPU 1
    /// counts them).
    pub fn pings_per_s(&self) -> Option<Spread> {
        self.per_s(|run| run.results.get(&dirq_vmm::bench::ipis_to_vcpu(1)).copied())
    }

    /// Whether KVM counted an HLT exit in any repeat.
    pub fn saw_hlt_exits(&self) -> bool {
        self.repeats.iter().any(|r| {
            r.run
                .exits
                .by_category
                .get(VmxExit::Hlt.name())
                .is_some_and(|&count| count > 0)
        })
    }

    pub fn cpu_cores(&self) -> Option<Spread> {
        self.spread(|r| Some(r.cpu_cores))
    }

    /// Every repeat's latency samples in one histogram (all repeats use
    /// the same bucket bounds).
    pub fn pooled_histogram(&self) -> Vec<Bucket> {
        let mut pooled: BTreeMap<u64, u64> = BTreeMap::new();
        for repeat in &self.repeats {
            for bucket in &repeat.run.latency_histogram {
                *pooled.entry(bucket.le_ns).or_insert(0) += bucket.count;
            }
        }
        pooled
            .into_iter()
            .map(|(le_ns, count)| Bucket { le_ns, count })
            .collect()
    }
}

/// A table cell: the median and range, or "-" when not measured.
pub fn spread_cell(spread: Option<Spread>, format: fn(f64) -> String) -> String {
    spread.map_or_else(|| "-".into(), |s| s.text(format))
}

/// Time in guest above 100% cannot be true.
fn impossible_share(spread: &Spread) -> bool {
    spread.max > 1.0
}

fn commands(cases: &[&RealCase]) -> Vec<String> {
    cases.iter().map(|case| case.command.clone()).collect()
}

/// "3 runs each" or "one run each": how often the numbers were measured.
fn repeats_text(cases: &[&RealCase]) -> String {
    match cases.iter().map(|c| c.repeats.len()).max().unwrap_or(0) {
        0 | 1 => "One run each (--quick: no spread).".into(),
        n => format!("{n} runs each: the median, with the range over the runs."),
    }
}

/// Builds the real-VMM section from the runs that succeeded.
pub fn real_section(cases: &[RealCase]) -> Section {
    let mut figures = Vec::new();
    let by_bench =
        |bench: &str| -> Vec<&RealCase> { cases.iter().filter(|c| c.bench() == bench).collect() };

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
        if let Some(figure) = latency_figure(bench, what, &by_bench(bench)) {
            figures.push(figure);
        }
    }
    if let Some(figure) = ipi_figure(&by_bench("ipi")) {
        figures.push(figure);
    }
    if let Some(figure) = whileloop_figure(&by_bench("whileloop")) {
        figures.push(figure);
    }
    let all: Vec<&RealCase> = cases.iter().collect();
    Section {
        id: "real".into(),
        title: "Real runs on this host's KVM".into(),
        intro: vec![format!(
            "dirq's own guest test kernel on /dev/kvm; every exit counted by VMX reason, from \
                 the VMM's run loop (userspace) and KVM's binary stats (kernel). {}",
            repeats_text(&all)
        )],
        figures,
        tables: vec![runs_table(cases)],
    }
}

fn exits_per_interrupt_figure(cases: &[&RealCase]) -> Option<Figure> {
    let entries: Vec<(String, BTreeMap<String, f64>)> = cases
        .iter()
        .map(|case| {
            let mut reasons: Vec<String> = case
                .repeats
                .iter()
                .flat_map(|r| r.run.exits_per_interrupt_by_reason().into_keys())
                .collect();
            reasons.sort();
            reasons.dedup();
            let medians = reasons
                .into_iter()
                .filter_map(|reason| {
                    let spread = case.spread(|r| {
                        Some(
                            r.run
                                .exits_per_interrupt_by_reason()
                                .get(&reason)
                                .copied()
                                .unwrap_or(0.0),
                        )
                    })?;
                    Some((reason, spread.median))
                })
                .collect();
            (case.label.clone(), medians)
        })
        .collect();
    let chart = exit_bars("exits per delivered interrupt (median)", &entries);
    if !chart.has_data() {
        return None;
    }
    Some(Figure {
        id: "real-exits-per-interrupt".into(),
        title: "irq-latency: exits per interrupt by VMX reason, per delivery path".into(),
        caption: format!(
            "The exits of each run by reason, divided by the interrupts it delivered. {}",
            repeats_text(cases)
        ),
        commands: commands(cases),
        table: exit_table("path", &chart, "exits/interrupt"),
        chart,
    })
}

fn latency_figure(bench: &str, what: &str, cases: &[&RealCase]) -> Option<Figure> {
    let measured: Vec<&RealCase> = cases
        .iter()
        .copied()
        .filter(|c| c.p50().is_some())
        .collect();
    if measured.is_empty() {
        return None;
    }
    let chart = latency_chart(
        measured
            .iter()
            .map(|case| cdf_steps(&case.label, &case.pooled_histogram()))
            .collect(),
    );
    let table = Table {
        title: String::new(),
        columns: ["path", "p50 (ns)", "p99 (ns)", "max (ns)", "samples"]
            .map(String::from)
            .to_vec(),
        rows: measured
            .iter()
            .map(|case| {
                TableRow::new(vec![
                    case.label.clone(),
                    spread_cell(case.p50(), format_value),
                    spread_cell(case.p99(), format_value),
                    spread_cell(
                        case.spread(|r| Some(r.run.latency_ns.as_ref()?.max)),
                        format_value,
                    ),
                    case.pooled_histogram()
                        .iter()
                        .map(|b| b.count)
                        .sum::<u64>()
                        .to_string(),
                ])
            })
            .collect(),
    };
    Some(Figure {
        id: format!("real-{bench}-latency"),
        title: format!("{bench}: latency CDF per path ({what})"),
        caption: format!(
            "Each line is the CDF of every sample of the path's runs, from the runs' \
             HdrHistogram buckets (5% wide). {}",
            repeats_text(cases)
        ),
        commands: commands(cases),
        chart,
        table,
    })
}

fn ipi_figure(cases: &[&RealCase]) -> Option<Figure> {
    let measured: Vec<(&RealCase, Spread, Spread)> = cases
        .iter()
        .filter_map(|case| Some((*case, case.p50()?, case.cpu_cores()?)))
        .collect();
    if measured.is_empty() {
        return None;
    }
    let chart = latency_cpu_scatter(
        "host CPU burned (cores)",
        "IPI round trip p50 (ns)",
        &measured
            .iter()
            .map(|(case, p50, cpu)| (case.label.clone(), cpu.median, *p50))
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
            .map(|(case, p50, cpu)| {
                TableRow::new(vec![
                    case.label.clone(),
                    p50.text(format_value),
                    spread_cell(case.p99(), format_value),
                    cpu.text(|v| format!("{v:.2}")),
                    spread_cell(case.exits_per_interrupt(), format_value),
                ])
            })
            .collect(),
    };
    Some(Figure {
        id: "real-ipi-cpu".into(),
        title: "IPI latency against host CPU burned".into(),
        caption: format!(
            "vCPU 0 and vCPU 1 ping-pong IPIs; CPU burned is the vCPU threads' CPU time \
             (user + system) over the run's wall time. {}",
            repeats_text(cases)
        ),
        commands: commands(cases),
        chart,
        table,
    })
}

fn whileloop_figure(cases: &[&RealCase]) -> Option<Figure> {
    let points: Vec<LinePoint> = cases
        .iter()
        .filter_map(|case| {
            Some(LinePoint {
                group: case.label.clone(),
                x: case.config_rate()?,
                y: case.guest_share()?,
            })
        })
        .collect();
    if points.is_empty() {
        return None;
    }
    let impossible = points.iter().filter(|p| impossible_share(&p.y)).count();
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
        Some(1.0),
    );
    let mut caption = format!(
        "The guest times a fixed loop without interrupts, then under the device's interrupt \
         rate; time in guest is the ratio. {}",
        repeats_text(cases)
    );
    if impossible > 0 {
        caption.push_str(&format!(
            " {impossible} point(s) reach above 100% (flagged): no interrupt can speed the loop \
             up, so that is the noise of the unloaded baseline (how fast the same loop ran \
             alone), which is as large as the interrupts' cost at that rate."
        ));
    }
    Some(Figure {
        id: "real-whileloop-guest-time".into(),
        title: "whileloop: time in guest against interrupt rate, per path".into(),
        caption,
        commands: commands(cases),
        chart,
        table,
    })
}

impl RealCase {
    fn config_rate(&self) -> Option<f64> {
        self.config.params.rate_hz().map(f64_of)
    }
}

fn runs_table(cases: &[RealCase]) -> Table {
    Table {
        title: "All real runs (the figures above fold away the commands that repeat them)".into(),
        columns: [
            "bench",
            "path",
            "runs",
            "interrupts",
            "exits per interrupt",
            "of them to userspace",
            "KVM instruction emulations per interrupt",
            "p50 (ns)",
            "time in guest",
            "CPU (cores)",
        ]
        .map(String::from)
        .to_vec(),
        rows: cases
            .iter()
            .map(|case| {
                let share = case.guest_share();
                TableRow::flagged(
                    vec![
                        case.bench().to_string(),
                        case.label.clone(),
                        case.repeats.len().to_string(),
                        spread_cell(
                            case.spread(|r| Some(f64_of(r.run.interrupts))),
                            format_value,
                        ),
                        spread_cell(case.exits_per_interrupt(), format_value),
                        spread_cell(
                            case.spread(|r| {
                                (r.run.interrupts > 0)
                                    .then(|| ratio(r.run.exits.userspace, r.run.interrupts))
                            }),
                            format_value,
                        ),
                        spread_cell(
                            case.spread(|r| r.run.per_interrupt(INSN_EMULATION)),
                            format_value,
                        ),
                        spread_cell(case.p50(), format_value),
                        spread_cell(share, format_percent),
                        spread_cell(case.cpu_cores(), |v| format!("{v:.2}")),
                    ],
                    share.is_some_and(|s| impossible_share(&s)),
                )
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::data::Chart;
    use super::*;

    fn case(bench: &str, label: &str, interrupts: u64, by_category: serde_json::Value) -> RealCase {
        let run: RealRun = serde_json::from_value(serde_json::json!({
            "bench": bench,
            "config": {"rate_hz": 5000},
            "interrupts": interrupts,
            "exits": {"total": 2 * interrupts, "userspace": 0, "kernel": 0, "by_category": by_category},
            "exits_per_interrupt": 2.0,
            "latency_ns": {"mean": 9000.0, "p50": 8000.0, "p99": 20000.0, "max": 50000.0},
            "duration_s": 1.0,
            "results": if bench == "whileloop" {
                serde_json::json!({"guest_share": 1.02})
            } else {
                serde_json::json!({})
            }
        }))
        .expect("contract parses");
        let mut run = run;
        run.latency_histogram = vec![
            Bucket {
                le_ns: 8000,
                count: 30,
            },
            Bucket {
                le_ns: 50000,
                count: 20,
            },
        ];
        let mut slower = run.clone();
        slower.exits_per_interrupt = 3.0;
        RealCase {
            label: label.into(),
            command: format!("dirq run {bench}"),
            config: BenchConfig::new(bench.parse().expect("bench name")),
            repeats: vec![
                Repeat {
                    run,
                    cpu_cores: 0.5,
                },
                Repeat {
                    run: slower,
                    cpu_cores: 0.7,
                },
            ],
        }
    }

    #[test]
    fn real_section_divides_exits_by_interrupts_and_plots_each_bench() {
        let cases = vec![
            case(
                "irq-latency",
                "userspace",
                1000,
                serde_json::json!({"IO_INSTRUCTION": 1000, "INTERRUPT_WINDOW": 500, "OTHER": 500}),
            ),
            case(
                "irq-latency",
                "kernel",
                1000,
                serde_json::json!({"OTHER": 2000}),
            ),
            case(
                "ipi",
                "halt exit",
                100,
                serde_json::json!({"HLT": 100, "OTHER": 100}),
            ),
            case(
                "whileloop",
                "kernel",
                100,
                serde_json::json!({"OTHER": 200}),
            ),
        ];
        let section = real_section(&cases);
        let ids: Vec<&str> = section.figures.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "real-exits-per-interrupt",
                "real-irq-latency-latency",
                "real-ipi-cpu",
                "real-whileloop-guest-time"
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
        assert_eq!(stack("IO_INSTRUCTION"), vec![1.0, 0.0]);
        assert_eq!(stack("INTERRUPT_WINDOW"), vec![0.5, 0.0]);
        assert_eq!(stack("OTHER"), vec![0.5, 2.0]);
        // The CDF is drawn from the pooled buckets of both runs.
        let Chart::Xy { series, .. } = &section.figures[1].chart else {
            panic!("latency is xy");
        };
        assert_eq!(series[0].points, vec![[8000.0, 0.6], [50000.0, 1.0]]);
        // Two runs: the median and the range of each measurement.
        let table = &section.tables[0];
        assert_eq!(table.rows[0].cells[2], "2");
        assert_eq!(table.rows[0].cells[4], "2.50 (2.00\u{2013}3.00)");
        // Time in guest above 100% is flagged, in the table and the caption.
        assert!(table.rows[3].flagged);
        assert!(!table.rows[0].flagged);
        assert!(section.figures[3].caption.contains("above 100%"));
    }
}
