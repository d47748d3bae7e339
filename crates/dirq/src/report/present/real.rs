//! Report sections for the real runs on /dev/kvm: exits per interrupt per
//! delivery path, latency distributions, IPI latency against CPU burned.
//! Every measurement may have run several times: tables give the median
//! and the range, figures the median with a whisker over the range.

use std::collections::BTreeMap;

use dirq_stats::{f64_of, ratio};

use dirq_vmm::config::Bench;
use dirq_vmm::exits::VmxExit;

use crate::common::real::RealCase;
use crate::common::views::Latency;
use crate::report::present::charts::{
    exit_bars, exit_table, grouped_lines, latency_cpu_scatter, percentile_chart,
    perf_kvm_stat_table, spread_us, ExitStat, LinePoint,
};
use crate::report::present::data::{
    Axis, Cell, Figure, Scale, Section, SeriesKey, Spread, Table, TableRow, Unit,
};
use dirq_vmm::exits::KvmStat;

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
        |bench: Bench| -> Vec<&RealCase> { cases.iter().filter(|c| c.bench() == bench).collect() };

    let irq = by_bench(Bench::IrqLatency);
    if let Some(figure) = exits_per_interrupt_figure(&irq) {
        figures.push(figure);
    }
    for (bench, what) in [
        (
            Bench::IrqLatency,
            "MSI round trip, device thread to guest acknowledgement",
        ),
        (
            Bench::TimerLatency,
            "how late the guest's LAPIC timer handler runs",
        ),
    ] {
        if let Some(figure) = latency_figure(bench, what, &by_bench(bench)) {
            figures.push(figure);
        }
    }
    if let Some(figure) = ipi_figure(&by_bench(Bench::Ipi)) {
        figures.push(figure);
    }
    if let Some(figure) = whileloop_figure(&by_bench(Bench::Whileloop)) {
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
        tables: std::iter::once(runs_table(cases))
            .chain(irq.iter().flat_map(|case| perf_kvm_stat_tables(case)))
            .collect(),
    }
}

/// The time cells of exits nobody timed.
const UNMEASURED: &str = "not measured";

/// A case's exits as `perf kvm stat report` gives them, over its runs:
/// those KVM counted (by VMX reason, from its binary stats, which carry no
/// times; perf's kvm_exit/kvm_entry tracepoints that would time them record
/// no VM-EXIT samples on kvm_pvm), and those that returned to the VMM,
/// timed by the run loop from KVM_RUN's return to the next KVM_RUN.
fn perf_kvm_stat_tables(case: &RealCase) -> [Table; 2] {
    let counted: Vec<BTreeMap<VmxExit, ExitStat>> = case
        .repeats
        .iter()
        .map(|r| {
            r.run
                .exits
                .by_category
                .iter()
                .map(|(&reason, &samples)| {
                    (
                        reason,
                        ExitStat {
                            samples,
                            time: None,
                        },
                    )
                })
                .collect()
        })
        .collect();
    let returned: Vec<BTreeMap<VmxExit, ExitStat>> = case
        .repeats
        .iter()
        .map(|r| {
            let mut by_reason: BTreeMap<VmxExit, ExitStat> = BTreeMap::new();
            for (reason, time) in &r.run.exits.userspace_time {
                let stat = by_reason.entry(VmxExit::from(*reason)).or_insert(ExitStat {
                    samples: 0,
                    time: None,
                });
                stat.samples += time.samples;
                stat.time = Some(stat.time.map_or(*time, |t| t.merge(*time)));
            }
            by_reason
        })
        .collect();
    [
        perf_kvm_stat_table(
            format!(
                "{} {}: every exit KVM counted (its counters carry no times)",
                case.bench(),
                case.label
            ),
            &counted,
            UNMEASURED,
        ),
        perf_kvm_stat_table(
            format!(
                "{} {}: the exits that returned to the VMM, VMM's time until the next KVM_RUN",
                case.bench(),
                case.label
            ),
            &returned,
            UNMEASURED,
        ),
    ]
}

fn exits_per_interrupt_figure(cases: &[&RealCase]) -> Option<Figure> {
    let entries: Vec<(String, BTreeMap<VmxExit, f64>)> = cases
        .iter()
        .map(|case| {
            let mut reasons: Vec<VmxExit> = case
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

fn latency_figure(bench: Bench, what: &str, cases: &[&RealCase]) -> Option<Figure> {
    let measured: Vec<&RealCase> = cases
        .iter()
        .copied()
        .filter(|c| c.p50().is_some())
        .collect();
    if measured.is_empty() {
        return None;
    }
    let chart = percentile_chart(
        &measured
            .iter()
            .map(|case| {
                (
                    case.label.clone(),
                    SeriesKey::Variant,
                    case.pooled_histogram(),
                )
            })
            .collect::<Vec<_>>(),
    );
    let latency = |figure: fn(&Latency) -> Option<f64>| {
        move |case: &RealCase| case.spread(|r| figure(r.run.latency_ns.as_ref()?))
    };
    let table = Table {
        title: String::new(),
        columns: [
            "path",
            "samples",
            "min (us)",
            "mean (us)",
            "p50 (us)",
            "p99 (us)",
            "max (us)",
        ]
        .map(String::from)
        .to_vec(),
        rows: measured
            .iter()
            .map(|case| {
                let samples: u64 = case.pooled_histogram().iter().map(|b| b.count).sum();
                TableRow::new(vec![
                    Cell::text(case.label.clone()),
                    Cell::count(samples),
                    Cell::spread(latency(|l| l.min)(case).map(spread_us), Unit::Us),
                    Cell::spread(latency(|l| Some(l.mean))(case).map(spread_us), Unit::Us),
                    Cell::spread(latency(|l| Some(l.p50))(case).map(spread_us), Unit::Us),
                    Cell::spread(latency(|l| Some(l.p99))(case).map(spread_us), Unit::Us),
                    Cell::spread(latency(|l| Some(l.max))(case).map(spread_us), Unit::Us),
                ])
            })
            .collect(),
    };
    Some(Figure {
        id: format!("real-{bench}-latency"),
        title: format!("{bench}: latency by percentile, per path ({what})"),
        caption: format!(
            "HdrHistogram's percentile plot: each line is every sample of the path's runs, \
             from their buckets (5% wide); x is the percentile on a log scale of 1/(1 - p), so \
             50%, 90%, 99% and 99.9% are equally spaced and the tail is drawn as wide as the \
             median. The table gives min, mean and max. {}",
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
        "IPI round trip p50 (us)",
        &measured
            .iter()
            .map(|(case, p50, cpu)| (case.label.clone(), cpu.median, spread_us(*p50)))
            .collect::<Vec<_>>(),
    );
    let table = Table {
        title: String::new(),
        columns: [
            "halt mode",
            "p50 (us)",
            "p99 (us)",
            "CPU burned (cores)",
            "exits/IPI",
        ]
        .map(String::from)
        .to_vec(),
        rows: measured
            .iter()
            .map(|(case, p50, cpu)| {
                TableRow::new(vec![
                    Cell::text(case.label.clone()),
                    Cell::spread(Some(spread_us(*p50)), Unit::Us),
                    Cell::spread(case.p99().map(spread_us), Unit::Us),
                    Cell::spread(Some(*cpu), Unit::Cores),
                    Cell::spread(case.exits_per_interrupt(), Unit::Count),
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
        Unit::Fraction,
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
            "p50 (us)",
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
                        Cell::text(case.bench().name()),
                        Cell::text(case.label.clone()),
                        Cell::count(case.repeats.len()),
                        Cell::spread(case.spread(|r| Some(f64_of(r.run.interrupts))), Unit::Count),
                        Cell::spread(case.exits_per_interrupt(), Unit::Count),
                        Cell::spread(
                            case.spread(|r| {
                                (r.run.interrupts > 0)
                                    .then(|| ratio(r.run.exits.userspace, r.run.interrupts))
                            }),
                            Unit::Count,
                        ),
                        Cell::spread(
                            case.spread(|r| r.run.per_interrupt(KvmStat::InsnEmulation)),
                            Unit::Count,
                        ),
                        Cell::spread(case.p50().map(spread_us), Unit::Us),
                        Cell::spread(share, Unit::Fraction),
                        Cell::spread(case.cpu_cores(), Unit::Cores),
                    ],
                    share.is_some_and(|s| impossible_share(&s)),
                )
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::real::Repeat;
    use crate::report::collect::fixtures::{no_figures, real_run};
    use crate::report::present::data::Chart;
    use dirq_vmm::config::{Bench, BenchConfig};
    use dirq_vmm::report::Bucket;
    use dirq_vmm::results::{BenchResult, WhileloopResult};

    fn case(bench: &str, label: &str, interrupts: u64, by_category: serde_json::Value) -> RealCase {
        let bench: Bench = bench.parse().expect("bench name");
        let figures = match bench {
            Bench::Whileloop => BenchResult::Whileloop(WhileloopResult {
                guest_share: 1.02,
                ..WhileloopResult::default()
            }),
            other => no_figures(other),
        };
        let mut run = real_run(
            serde_json::json!({
                "config": {"rate_hz": 5000},
                "interrupts": interrupts,
                "exits": {"total": 2 * interrupts, "userspace": 0, "kernel": 0, "by_category": by_category},
                "exits_per_interrupt": 2.0,
                "latency_ns": {"mean": 9000.0, "p50": 8000.0, "p99": 20000.0, "max": 50000.0},
                "duration_s": 1.0
            }),
            &figures,
        );
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
            config: BenchConfig::new(bench),
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
        // The percentile plot is drawn from the pooled buckets of both
        // runs (100 samples), in us, up to the last sample's percentile.
        let Chart::Xy { series, .. } = &section.figures[1].chart else {
            panic!("latency is xy");
        };
        assert_eq!(
            series[0].points,
            vec![[0.0, 8.0], [0.6, 50.0], [0.99, 50.0]]
        );
        let latency = &section.figures[1].table;
        assert_eq!(latency.columns[2], "min (us)");
        assert_eq!(latency.rows[0].cells[1], "100");
        assert_eq!(latency.rows[0].cells[4], "8.00");
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
