//! Chart builders shared by the report's sections: exit-reason bars, latency
//! distributions, one-line-per-group plots, and the tables that go below them.

use std::collections::BTreeMap;

use super::data::{Axis, Chart, NamedValues, Scale, Series, SeriesStyle, Spread, Table, TableRow};
use super::figures::compact_number;
use super::views::{cdf_steps, Latency};

/// Stacked bars of exit reasons, one bar per labelled entry. Reasons are
/// ordered by their largest value so the big ones sit at the left.
pub fn exit_bars(value_label: &str, entries: &[(String, BTreeMap<String, f64>)]) -> Chart {
    let mut peak_by_reason: BTreeMap<&str, f64> = BTreeMap::new();
    for (_, by_reason) in entries {
        for (reason, value) in by_reason {
            let peak = peak_by_reason.entry(reason.as_str()).or_insert(0.0);
            *peak = peak.max(*value);
        }
    }
    let mut reasons: Vec<(&str, f64)> = peak_by_reason
        .into_iter()
        .filter(|(_, peak)| *peak > 0.0)
        .collect();
    reasons.sort_by(|a, b| b.1.total_cmp(&a.1));
    Chart::Bars {
        value_label: value_label.to_string(),
        categories: entries.iter().map(|(label, _)| label.clone()).collect(),
        stacks: reasons
            .iter()
            .map(|(reason, _)| NamedValues {
                name: reason.to_string(),
                values: entries
                    .iter()
                    .map(|(_, by_reason)| by_reason.get(*reason).copied().unwrap_or(0.0))
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
            let mut cells = vec![label.clone(), format_value(values.iter().sum())];
            cells.extend(values.into_iter().map(format_value));
            TableRow::new(cells)
        })
        .collect();
    Table {
        title: String::new(),
        columns,
        rows,
    }
}

/// Latency CDFs from the histogram buckets, one series per entry, and
/// their percentiles in a table.
pub fn latency_distributions(entries: &[(String, Latency)]) -> (Chart, Table) {
    let chart = latency_chart(
        entries
            .iter()
            .map(|(label, latency)| cdf_steps(label, &latency.histogram))
            .collect(),
    );
    let table = Table {
        title: String::new(),
        columns: [
            "run",
            "mean (ns)",
            "p50 (ns)",
            "p90 (ns)",
            "p99 (ns)",
            "max (ns)",
        ]
        .map(String::from)
        .to_vec(),
        rows: entries
            .iter()
            .map(|(label, l)| {
                TableRow::new(vec![
                    label.clone(),
                    format_value(l.mean),
                    format_value(l.p50),
                    l.p90.map_or_else(|| "-".into(), format_value),
                    format_value(l.p99),
                    format_value(l.max),
                ])
            })
            .collect(),
    };
    (chart, table)
}

/// Latency distributions on a latency axis (log if it spans decades)
/// against the fraction of samples at or below.
pub fn latency_chart(series: Vec<Series>) -> Chart {
    let x_values = series.iter().flat_map(|s| s.points.iter().map(|p| p[0]));
    Chart::Xy {
        x_axis: Axis {
            label: "latency (ns)".into(),
            scale: auto_scale(x_values),
        },
        y_axis: Axis {
            label: "fraction of samples at or below".into(),
            scale: Scale::Linear,
        },
        series,
        identity_line: false,
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
    format_y: fn(f64) -> String,
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
        title: String::new(),
        columns: vec!["group".into(), x_axis.label.clone(), y_axis.label.clone()],
        rows: groups
            .iter()
            .flat_map(|(group, line)| {
                line.iter().map(move |point| {
                    TableRow::flagged(
                        vec![group.clone(), format_value(point.x), point.y.text(format_y)],
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

/// Table cell for a measured or predicted number: three significant digits.
pub fn format_value(value: f64) -> String {
    if !value.is_finite() {
        return "n/a".into();
    }
    let magnitude = value.abs();
    if magnitude >= 1_000.0 {
        compact_number(value)
    } else if magnitude >= 100.0 || value == 0.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

pub fn format_percent(fraction: f64) -> String {
    format!("{:.2}%", fraction * 100.0)
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
                    ("EXTERNAL_INTERRUPT".to_string(), 14_000.0),
                    ("MSR_WRITE".to_string(), 15_000.0),
                    ("HLT".to_string(), 0.0),
                ]),
            ),
            (
                "did".to_string(),
                BTreeMap::from([("IO_INSTRUCTION".to_string(), 400.0)]),
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
            format_percent,
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

    #[test]
    fn axes_are_logarithmic_only_over_two_decades() {
        assert_eq!(auto_scale([40_000.0, 400_000.0]), Scale::Linear);
        assert_eq!(auto_scale([2_000.0, 400_000.0]), Scale::Log);
        assert_eq!(auto_scale([0.0, 5.0]), Scale::Linear);
    }
}
