//! Chart builders shared by the report's sections: exit-reason bars, latency
//! distributions, one-line-per-group plots, and the tables that go below them.

use std::collections::BTreeMap;

use crate::report::present::data::{
    Axis, Cell, Chart, NamedValues, Scale, Series, SeriesKey, SeriesStyle, Spread, Table, TableRow,
    Unit,
};
use dirq_stats::{f64_of, ratio};
use dirq_vmm::exits::{ExitTime, VmxExit};
use dirq_vmm::report::Bucket;

use crate::common::format::ns_to_us;
use crate::common::views::Latency;

/// Stacked bars of exit reasons, one bar per labelled entry. Reasons are
/// ordered by their largest value so the big ones sit at the left (equal
/// ones by name).
pub fn exit_bars(value_label: &str, entries: &[(String, BTreeMap<VmxExit, f64>)]) -> Chart {
    let mut peak_by_reason: BTreeMap<VmxExit, f64> = BTreeMap::new();
    for (_, by_reason) in entries {
        for (&reason, value) in by_reason {
            let peak = peak_by_reason.entry(reason).or_insert(0.0);
            *peak = peak.max(*value);
        }
    }
    let mut reasons: Vec<(VmxExit, f64)> = peak_by_reason
        .into_iter()
        .filter(|(_, peak)| *peak > 0.0)
        .collect();
    reasons.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.name().cmp(b.0.name())));
    Chart::Bars {
        value_label: value_label.to_string(),
        categories: entries.iter().map(|(label, _)| label.clone()).collect(),
        stacks: reasons
            .iter()
            .map(|&(reason, _)| NamedValues {
                name: reason.to_string(),
                key: SeriesKey::Exit(reason),
                values: entries
                    .iter()
                    .map(|(_, by_reason)| by_reason.get(&reason).copied().unwrap_or(0.0))
                    .collect(),
            })
            .collect(),
    }
}

/// The table beside exit bars: one row per entry, one column per reason.
pub fn exit_table(first_column: &str, chart: &Chart, unit: &str) -> Table {
    let Chart::Bars {
        categories, stacks, ..
    } = chart
    else {
        return Table::default();
    };
    let mut columns = vec![first_column.to_string(), format!("total {unit}")];
    columns.extend(stacks.iter().map(|stack| stack.name.clone()));
    let rows = categories
        .iter()
        .enumerate()
        .map(|(row, label)| {
            let values: Vec<f64> = stacks
                .iter()
                .map(|stack| stack.values.get(row).copied().unwrap_or(0.0))
                .collect();
            let mut cells = vec![
                Cell::text(label.clone()),
                Cell::number(values.iter().sum(), Unit::Count),
            ];
            cells.extend(
                values
                    .into_iter()
                    .map(|value| Cell::number(value, Unit::Count)),
            );
            TableRow::new(cells)
        })
        .collect();
    Table {
        folded: false,
        title: String::new(),
        columns,
        rows,
    }
}

/// HdrHistogram's percentile plot of latency buckets: from the
/// percentile where a bucket's samples start, the latency is the bucket's
/// upper bound (in us), up to the last percentile with `tail` samples
/// beyond it, 1 - tail/samples: past it one or two samples would draw the
/// tail (and 100% lies at infinity on the axis).
pub fn percentile_steps(name: &str, key: SeriesKey, buckets: &[Bucket], tail: u64) -> Series {
    let total: u64 = buckets.iter().map(|b| b.count).sum();
    let last = (1.0 - f64_of(tail.max(1)) / f64_of(total.max(1))).max(0.0);
    let mut below = 0;
    let mut points: Vec<[f64; 2]> = Vec::new();
    for bucket in buckets.iter().filter(|bucket| bucket.count > 0) {
        let from = ratio(below, total);
        if from > last {
            break;
        }
        below += bucket.count;
        points.push([from, ns_to_us(f64_of(bucket.le_ns))]);
    }
    if let Some(&[_, top]) = points.last() {
        points.push([last, top]);
    }
    Series::new(name, SeriesStyle::Steps, points).keyed(key)
}

/// Percentile plots, one line per `(name, key, buckets)`: latency in us
/// (log when it spans decades) against the percentile, each line up to
/// the percentile its samples resolve (`tail` samples beyond it).
pub fn percentile_chart(lines: &[(String, SeriesKey, Vec<Bucket>)], tail: u64) -> Chart {
    let series: Vec<Series> = lines
        .iter()
        .map(|(name, key, buckets)| percentile_steps(name, *key, buckets, tail))
        .collect();
    let latencies = series.iter().flat_map(|s| s.points.iter().map(|p| p[1]));
    Chart::Xy {
        x_axis: Axis {
            label: "percentile".into(),
            scale: Scale::Percentile,
        },
        y_axis: Axis {
            label: "latency (us)".into(),
            scale: auto_scale(latencies),
        },
        series,
        identity_line: false,
    }
}

/// The latency table beside a percentile plot: one row per run, in us.
pub fn latency_table(first_column: &str, rows: &[(String, u64, Latency)]) -> Table {
    let us = |ns: f64| Cell::number(ns_to_us(ns), Unit::Us);
    Table {
        folded: false,
        title: String::new(),
        columns: [
            first_column,
            "samples",
            "min (us)",
            "mean (us)",
            "p50 (us)",
            "p90 (us)",
            "p99 (us)",
            "max (us)",
        ]
        .map(String::from)
        .to_vec(),
        rows: rows
            .iter()
            .map(|(label, samples, l)| {
                TableRow::new(vec![
                    Cell::text(label.clone()),
                    Cell::count(*samples),
                    l.min.map_or_else(|| Cell::text("-"), us),
                    us(l.mean),
                    us(l.p50),
                    l.p90.map_or_else(|| Cell::text("-"), us),
                    us(l.p99),
                    us(l.max),
                ])
            })
            .collect(),
    }
}

/// Log when the values span two decades or more, else linear: a log axis
/// on a narrow range only hides differences.
pub fn auto_scale(values: impl IntoIterator<Item = f64>) -> Scale {
    let (low, high) = values
        .into_iter()
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0_f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if high > 0.0 && high / low >= 100.0 {
        Scale::Log
    } else {
        Scale::Linear
    }
}

/// One point of a line: its group (the line), x, and y over repeated runs.
pub struct LinePoint {
    pub group: String,
    pub x: f64,
    pub y: Spread,
}

/// One line per group through its points, sorted by x, with a whisker
/// where a point ran more than once; and a table of every point, with the
/// points above `ceiling` (values that cannot be true) flagged.
pub fn grouped_lines(
    x_axis: Axis,
    y_axis: Axis,
    points: &[LinePoint],
    y_unit: Unit,
    ceiling: Option<f64>,
) -> (Chart, Table) {
    let mut groups: Vec<(String, Vec<&LinePoint>)> = Vec::new();
    for point in points {
        match groups.iter_mut().find(|(name, _)| *name == point.group) {
            Some((_, line)) => line.push(point),
            None => groups.push((point.group.clone(), vec![point])),
        }
    }
    for (_, line) in &mut groups {
        line.sort_by(|a, b| a.x.total_cmp(&b.x));
    }
    let table = Table {
        folded: false,
        title: String::new(),
        columns: vec!["group".into(), x_axis.label.clone(), y_axis.label.clone()],
        rows: groups
            .iter()
            .flat_map(|(group, line)| {
                line.iter().map(move |point| {
                    TableRow::flagged(
                        vec![
                            Cell::text(group.clone()),
                            Cell::number(point.x, Unit::Count),
                            Cell::spread(Some(point.y), y_unit),
                        ],
                        ceiling.is_some_and(|ceiling| point.y.max > ceiling),
                    )
                })
            })
            .collect(),
    };
    let chart = Chart::Xy {
        x_axis,
        y_axis,
        series: groups
            .into_iter()
            .map(|(name, line)| with_ranges(name, SeriesStyle::Line, &line))
            .collect(),
        identity_line: false,
    };
    (chart, table)
}

/// A series through points measured one or more times: whiskers only when
/// some point has a range.
fn with_ranges(name: String, style: SeriesStyle, points: &[&LinePoint]) -> Series {
    let mut series = Series::new(
        name,
        style,
        points.iter().map(|p| [p.x, p.y.median]).collect(),
    );
    if points.iter().any(|p| p.y.runs > 1) {
        series.y_ranges = points.iter().map(|p| [p.y.min, p.y.max]).collect();
    }
    series
}

/// Latency against CPU burned, one point per labelled `(label, cpu, p50)`:
/// the trade-off of every halt and polling mode.
pub fn latency_cpu_scatter(
    cpu_label: &str,
    latency_label: &str,
    points: &[(String, f64, Spread)],
) -> Chart {
    let latencies = points.iter().flat_map(|(_, _, p50)| [p50.min, p50.max]);
    Chart::Xy {
        x_axis: Axis {
            label: cpu_label.into(),
            scale: Scale::Linear,
        },
        y_axis: Axis {
            label: latency_label.into(),
            scale: auto_scale(latencies),
        },
        series: points
            .iter()
            .map(|(name, cpu, p50)| {
                let point = LinePoint {
                    group: name.clone(),
                    x: *cpu,
                    y: *p50,
                };
                with_ranges(name.clone(), SeriesStyle::Points, &[&point])
            })
            .collect(),
        identity_line: false,
    }
}

/// How long one row's exits took, as far as anyone timed them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PerfTimes {
    /// Every exit timed: the VMM's run loop, the simulator.
    Timed(ExitTime),
    /// Only their total is known (HLT: KVM's `halt_wait_ns`).
    Total { ns: u64 },
    /// Nobody timed them (KVM's counters carry no times).
    Untimed,
}

/// One row of a run, as `perf kvm stat report` sees it: how many exits,
/// and how long they took where that was measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExitStat {
    pub samples: u64,
    pub time: PerfTimes,
}

impl ExitStat {
    /// Two runs' rows of one name, pooled.
    fn pooled(self, other: ExitStat) -> ExitStat {
        let time = match (self.time, other.time) {
            // A run without the row adds nothing to its time.
            (_, time) if self.samples == 0 => time,
            (time, _) if other.samples == 0 => time,
            (PerfTimes::Timed(a), PerfTimes::Timed(b)) => PerfTimes::Timed(a.merge(b)),
            (PerfTimes::Untimed, PerfTimes::Untimed) => PerfTimes::Untimed,
            (a, b) => PerfTimes::Total {
                ns: total_ns(a) + total_ns(b),
            },
        };
        ExitStat {
            samples: self.samples + other.samples,
            time,
        }
    }
}

fn total_ns(time: PerfTimes) -> u64 {
    match time {
        PerfTimes::Timed(time) => time.total_ns,
        PerfTimes::Total { ns } => ns,
        PerfTimes::Untimed => 0,
    }
}

/// `perf kvm stat report`'s table over one or more runs of one
/// configuration, every run pooled: VM-EXIT, Samples, Samples%, then the
/// time columns some row has (Time%, Min Time, Max Time, Avg time), with
/// "( +- x% )" (the standard deviation over the runs relative to their
/// mean) after Avg time, or after Samples where nothing was timed; perf's
/// totals are the last row. Rows are named by `runs`' keys (a VMX reason,
/// or a reason split by KVM's own statistics).
pub fn perf_kvm_stat_table(title: String, runs: &[BTreeMap<String, ExitStat>]) -> Table {
    let mut names: Vec<&String> = runs.iter().flat_map(BTreeMap::keys).collect();
    names.sort();
    names.dedup();
    let none = ExitStat {
        samples: 0,
        time: PerfTimes::Untimed,
    };
    let per_run = |name: &String| -> Vec<ExitStat> {
        runs.iter()
            .map(|run| run.get(name).copied().unwrap_or(none))
            .collect()
    };
    let pooled = |name: &String| per_run(name).into_iter().fold(none, ExitStat::pooled);
    let mut rows_of: Vec<(&String, ExitStat)> = names.iter().map(|n| (*n, pooled(n))).collect();
    rows_of.sort_by(|a, b| b.1.samples.cmp(&a.1.samples).then(a.0.cmp(b.0)));
    let any = |pick: fn(&PerfTimes) -> bool| rows_of.iter().any(|(_, stat)| pick(&stat.time));
    let timed_total = any(|t| !matches!(t, PerfTimes::Untimed));
    let min_max = any(|t| matches!(t, PerfTimes::Timed(_)));
    let all_samples: u64 = rows_of.iter().map(|(_, stat)| stat.samples).sum();
    let all_time: u64 = rows_of.iter().map(|(_, stat)| total_ns(stat.time)).sum();
    // Numbers printed as perf prints them.
    let us = |ns: f64| {
        let us = ns_to_us(ns);
        Cell::number(us, Unit::Us).shown_as(format!("{us:.2}us"))
    };
    let share = |fraction: f64| Cell::number(fraction, Unit::Fraction);
    // The runs' relative standard deviation.
    let spread = |values: Vec<f64>| -> Cell {
        if values.len() < 2 {
            return Cell::text("one run");
        }
        let count = f64_of(u64::try_from(values.len()).unwrap_or(u64::MAX));
        let mean = values.iter().sum::<f64>() / count;
        let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (count - 1.0);
        let relative = if mean == 0.0 {
            0.0
        } else {
            variance.sqrt() / mean
        };
        Cell::number(relative, Unit::Fraction).shown_as(format!("( +- {:.2}% )", relative * 100.0))
    };
    let mut columns: Vec<String> = vec!["VM-EXIT".into(), "Samples".into()];
    if !timed_total {
        columns.push("( +- x% )".into());
    }
    columns.push("Samples%".into());
    if timed_total {
        columns.push("Time%".into());
        if min_max {
            columns.extend(["Min Time".into(), "Max Time".into()]);
        }
        columns.extend(["Avg time".into(), "( +- x% )".into()]);
    }
    let mut rows: Vec<TableRow> = rows_of
        .iter()
        .map(|(name, stat)| {
            let mut cells = vec![Cell::text((*name).clone()), Cell::count(stat.samples)];
            if !timed_total {
                cells.push(spread(
                    per_run(name).iter().map(|s| f64_of(s.samples)).collect(),
                ));
            }
            cells.push(share(ratio(stat.samples, all_samples.max(1))));
            if timed_total {
                let missing = || Cell::text("-");
                let (time_share, min, max, avg) = match stat.time {
                    PerfTimes::Timed(time) => (
                        share(ratio(time.total_ns, all_time.max(1))),
                        us(f64_of(time.min_ns)),
                        us(f64_of(time.max_ns)),
                        us(ratio(time.total_ns, time.samples.max(1))),
                    ),
                    PerfTimes::Total { ns } => (
                        share(ratio(ns, all_time.max(1))),
                        missing(),
                        missing(),
                        us(ratio(ns, stat.samples.max(1))),
                    ),
                    PerfTimes::Untimed => (missing(), missing(), missing(), missing()),
                };
                cells.push(time_share);
                if min_max {
                    cells.extend([min, max]);
                }
                let per_run_avg: Vec<f64> = per_run(name)
                    .iter()
                    .filter(|s| s.samples > 0 && !matches!(s.time, PerfTimes::Untimed))
                    .map(|s| ratio(total_ns(s.time), s.samples))
                    .collect();
                let avg_spread = if per_run_avg.is_empty() {
                    missing()
                } else {
                    spread(per_run_avg)
                };
                cells.extend([avg, avg_spread]);
            }
            TableRow::new(cells)
        })
        .collect();
    let handled = if timed_total {
        format!(
            ", Total events handled time:{:.2}us",
            ns_to_us(f64_of(all_time))
        )
    } else {
        String::new()
    };
    let mut footer = vec![format!("Total Samples:{all_samples}{handled}.")];
    footer.resize(columns.len(), String::new());
    rows.push(TableRow::new(footer));
    Table {
        title,
        columns,
        rows,
        folded: false,
    }
}

/// A latency measured in ns over repeats, in us.
pub fn spread_us(ns: Spread) -> Spread {
    ns.map(ns_to_us)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_bars_keep_every_reason_in_order_of_size_and_every_entry() {
        let entries = vec![
            (
                "vanilla".to_string(),
                BTreeMap::from([
                    (VmxExit::ExternalInterrupt, 14_000.0),
                    (VmxExit::MsrWrite, 15_000.0),
                    (VmxExit::Hlt, 0.0),
                ]),
            ),
            (
                "did".to_string(),
                BTreeMap::from([(VmxExit::IoInstruction, 400.0)]),
            ),
        ];
        let chart = exit_bars("exits/s", &entries);
        let Chart::Bars {
            categories, stacks, ..
        } = &chart
        else {
            panic!("exit bars are bars");
        };
        assert_eq!(categories, &["vanilla", "did"]);
        let names: Vec<&str> = stacks.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["MSR_WRITE", "EXTERNAL_INTERRUPT", "IO_INSTRUCTION"]);
        assert_eq!(stacks[2].values, vec![0.0, 400.0]);
        let table = exit_table("run", &chart, "exits/s");
        assert_eq!(table.rows[0].cells[..2], ["vanilla", "29K"]);
        assert_eq!(table.rows[1].cells, ["did", "400", "0", "0", "400"]);
    }

    #[test]
    fn grouped_lines_sort_each_group_by_x() {
        let point = |group: &str, x: f64, y: &[f64]| LinePoint {
            group: group.into(),
            x,
            y: Spread::of(y.iter().copied()).expect("values"),
        };
        let points = vec![
            point("did", 600.0, &[0.998]),
            point("vanilla", 100.0, &[0.96, 1.01, 0.97]),
            point("did", 100.0, &[0.999]),
        ];
        let axis = |label: &str| Axis {
            label: label.into(),
            scale: Scale::Linear,
        };
        let (chart, table) = grouped_lines(
            axis("rate"),
            axis("share"),
            &points,
            Unit::Fraction,
            Some(1.0),
        );
        let Chart::Xy { series, .. } = chart else {
            panic!("lines are xy");
        };
        assert_eq!(series[0].name, "did");
        assert_eq!(series[0].points, vec![[100.0, 0.999], [600.0, 0.998]]);
        assert!(series[0].y_ranges.is_empty(), "measured once: no whiskers");
        assert_eq!(series[1].y_ranges, vec![[0.96, 1.01]]);
        assert_eq!(table.rows.len(), 3);
        assert_eq!(table.rows[0].cells[2], "99.90%");
        // A time in guest above 100% cannot be true: flagged.
        assert!(table.rows[2].flagged && !table.rows[0].flagged);
    }

    fn timed(samples: u64, total_ns: u64, min_ns: u64, max_ns: u64) -> ExitStat {
        ExitStat {
            samples,
            time: PerfTimes::Timed(ExitTime {
                samples,
                total_ns,
                min_ns,
                max_ns,
            }),
        }
    }

    fn row(name: &str, stat: ExitStat) -> (String, ExitStat) {
        (name.to_string(), stat)
    }

    #[test]
    fn perf_table_pools_samples_and_times_over_runs_with_their_spread_and_totals() {
        let runs = [
            BTreeMap::from([
                row("MSR_WRITE", timed(100, 300_000, 2_000, 9_000)),
                row("HLT", timed(100, 1_000_000, 5_000, 50_000)),
            ]),
            BTreeMap::from([
                row("MSR_WRITE", timed(100, 500_000, 1_000, 8_000)),
                row("HLT", timed(100, 1_000_000, 6_000, 40_000)),
            ]),
        ];
        let table = perf_kvm_stat_table("t".into(), &runs);
        assert_eq!(
            table.columns,
            [
                "VM-EXIT",
                "Samples",
                "Samples%",
                "Time%",
                "Min Time",
                "Max Time",
                "Avg time",
                "( +- x% )"
            ]
        );
        // Samples pooled as the times are: 200 HLT over both runs, which
        // took 2 of the 2.8 ms.
        assert_eq!(
            table.rows[0].cells,
            [
                "HLT",
                "200",
                "50.00%",
                "71.43%",
                "5.00us",
                "50.00us",
                "10.00us",
                "( +- 0.00% )"
            ]
        );
        // Avg 3 us and 5 us in the two runs: mean 4, sd 1.41 -> 35.36%.
        assert_eq!(
            table.rows[1].cells[4..],
            ["1.00us", "9.00us", "4.00us", "( +- 35.36% )"]
        );
        assert_eq!(
            table.rows[2].cells[0],
            "Total Samples:400, Total events handled time:2800.00us."
        );
        assert_eq!(table.rows[2].cells.len(), table.columns.len());
    }

    #[test]
    fn perf_table_shows_only_the_columns_some_row_fills() {
        let count = |samples| ExitStat {
            samples,
            time: PerfTimes::Untimed,
        };
        let runs = [
            BTreeMap::from([row("OTHER", count(90))]),
            BTreeMap::from([row("OTHER", count(110))]),
        ];
        let table = perf_kvm_stat_table("t".into(), &runs);
        assert_eq!(
            table.columns,
            ["VM-EXIT", "Samples", "( +- x% )", "Samples%"]
        );
        assert_eq!(
            table.rows[0].cells,
            ["OTHER", "200", "( +- 14.14% )", "100.00%"]
        );
        assert_eq!(table.rows[1].cells[0], "Total Samples:200.");
        let once = perf_kvm_stat_table("t".into(), &runs[..1]);
        assert_eq!(once.rows[0].cells[2], "one run");
        // HLT's time known only as a total (KVM's halt_wait_ns): Time% and
        // Avg time, no Min or Max columns.
        let halted = [BTreeMap::from([
            row(
                "HLT",
                ExitStat {
                    samples: 4,
                    time: PerfTimes::Total { ns: 400_000 },
                },
            ),
            row("OTHER", count(12)),
        ])];
        let table = perf_kvm_stat_table("t".into(), &halted);
        assert_eq!(
            table.columns,
            [
                "VM-EXIT",
                "Samples",
                "Samples%",
                "Time%",
                "Avg time",
                "( +- x% )"
            ]
        );
        assert_eq!(
            table.rows[1].cells,
            ["HLT", "4", "25.00%", "100.00%", "100.00us", "one run"]
        );
        assert_eq!(table.rows[0].cells[3..], ["-", "-", "-"]);
    }

    #[test]
    fn percentile_steps_stop_where_the_tail_has_too_few_samples() {
        let buckets = [
            Bucket {
                le_ns: 1_000,
                count: 2,
            },
            Bucket {
                le_ns: 1_050,
                count: 0,
            },
            Bucket {
                le_ns: 4_000,
                count: 2,
            },
        ];
        let series = percentile_steps("kvm", SeriesKey::Variant, &buckets, 1);
        assert_eq!(series.style, SeriesStyle::Steps);
        assert_eq!(series.points, vec![[0.0, 1.0], [0.5, 4.0], [0.75, 4.0]]);
        // 100 samples, 10 beyond: up to p90; the bucket starting at p95
        // is past what they resolve.
        let buckets = [
            Bucket {
                le_ns: 1_000,
                count: 50,
            },
            Bucket {
                le_ns: 2_000,
                count: 45,
            },
            Bucket {
                le_ns: 90_000,
                count: 5,
            },
        ];
        let series = percentile_steps("kvm", SeriesKey::Variant, &buckets, 10);
        assert_eq!(series.points, vec![[0.0, 1.0], [0.5, 2.0], [0.9, 2.0]]);
    }

    #[test]
    fn axes_are_logarithmic_only_over_two_decades() {
        assert_eq!(auto_scale([40_000.0, 400_000.0]), Scale::Linear);
        assert_eq!(auto_scale([2_000.0, 400_000.0]), Scale::Log);
        assert_eq!(auto_scale([0.0, 5.0]), Scale::Linear);
    }
}
