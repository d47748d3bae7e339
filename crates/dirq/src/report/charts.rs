//! Chart builders shared by the report's sections: exit-reason bars, latency
//! CDFs, one-line-per-group plots, and the tables that go beside them.

use std::collections::BTreeMap;

use super::data::{Axis, Chart, NamedValues, Scale, Series, SeriesStyle, Table, TableRow};
use super::figures::compact_number;
use super::views::Latency;

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

/// Latency CDFs, one line per entry, on a log latency axis, and the table
/// of their percentiles.
pub fn latency_cdf(entries: &[(String, Latency)]) -> (Chart, Table) {
    let chart = Chart::Xy {
        x_axis: Axis {
            label: "latency (ns, log scale)".into(),
            scale: Scale::Log,
        },
        y_axis: Axis {
            label: "fraction of samples at or below".into(),
            scale: Scale::Linear,
        },
        series: entries
            .iter()
            .map(|(label, latency)| latency.cdf_series(label))
            .collect(),
        identity_line: false,
    };
    let table = Table {
        title: String::new(),
        columns: ["run", "mean (ns)", "p50 (ns)", "p99 (ns)", "max (ns)"]
            .map(String::from)
            .to_vec(),
        rows: entries
            .iter()
            .map(|(label, l)| {
                TableRow::new(vec![
                    label.clone(),
                    format_value(l.mean),
                    format_value(l.p50),
                    format_value(l.p99),
                    format_value(l.max),
                ])
            })
            .collect(),
    };
    (chart, table)
}

/// One line per group through `(x, y)` points, sorted by x, and a table of
/// every point.
pub fn grouped_lines(
    x_axis: Axis,
    y_axis: Axis,
    points: &[(String, f64, f64)],
    format_y: fn(f64) -> String,
) -> (Chart, Table) {
    let mut groups: Vec<(String, Vec<[f64; 2]>)> = Vec::new();
    for (group, x, y) in points {
        match groups.iter_mut().find(|(name, _)| name == group) {
            Some((_, line)) => line.push([*x, *y]),
            None => groups.push((group.clone(), vec![[*x, *y]])),
        }
    }
    for (_, line) in &mut groups {
        line.sort_by(|a, b| a[0].total_cmp(&b[0]));
    }
    let table = Table {
        title: String::new(),
        columns: vec!["group".into(), x_axis.label.clone(), y_axis.label.clone()],
        rows: groups
            .iter()
            .flat_map(|(group, line)| {
                line.iter().map(move |[x, y]| {
                    TableRow::new(vec![group.clone(), format_value(*x), format_y(*y)])
                })
            })
            .collect(),
    };
    let chart = Chart::Xy {
        x_axis,
        y_axis,
        series: groups
            .into_iter()
            .map(|(name, points)| Series {
                name,
                style: SeriesStyle::Line,
                points,
            })
            .collect(),
        identity_line: false,
    };
    (chart, table)
}

/// Latency against CPU burned, one point per labelled `(label, cpu, p50)`:
/// the trade-off of every halt and polling mode.
pub fn latency_cpu_scatter(cpu_label: &str, points: &[(String, f64, f64)]) -> Chart {
    Chart::Xy {
        x_axis: Axis {
            label: cpu_label.into(),
            scale: Scale::Linear,
        },
        y_axis: Axis {
            label: "IPI latency p50 (ns, log scale)".into(),
            scale: Scale::Log,
        },
        series: points
            .iter()
            .map(|(name, cpu, p50)| Series {
                name: name.clone(),
                style: SeriesStyle::Points,
                points: vec![[*cpu, *p50]],
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
                    ("EXTINT".to_string(), 14_000.0),
                    ("MSRWR".to_string(), 15_000.0),
                    ("HLT".to_string(), 0.0),
                ]),
            ),
            (
                "did".to_string(),
                BTreeMap::from([("IOINSR".to_string(), 400.0)]),
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
        assert_eq!(names, ["MSRWR", "EXTINT", "IOINSR"]);
        assert_eq!(stacks[2].values, vec![0.0, 400.0]);
        let table = exit_table("run", &chart, "exits/s");
        assert_eq!(table.rows[0].cells[..2], ["vanilla", "29K"]);
        assert_eq!(table.rows[1].cells, ["did", "400", "0", "0", "400"]);
    }

    #[test]
    fn grouped_lines_sort_each_group_by_x() {
        let points = vec![
            ("did".to_string(), 600.0, 0.998),
            ("vanilla".to_string(), 100.0, 0.96),
            ("did".to_string(), 100.0, 0.999),
        ];
        let axis = |label: &str| Axis {
            label: label.into(),
            scale: Scale::Linear,
        };
        let (chart, table) = grouped_lines(axis("rate"), axis("share"), &points, format_percent);
        let Chart::Xy { series, .. } = chart else {
            panic!("lines are xy");
        };
        assert_eq!(series[0].name, "did");
        assert_eq!(series[0].points, vec![[100.0, 0.999], [600.0, 0.998]]);
        assert_eq!(table.rows.len(), 3);
        assert_eq!(table.rows[0].cells[2], "99.90%");
    }
}
