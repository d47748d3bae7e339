//! The figures a scenario's `[figure] draw` names, each drawn from its
//! runs (`scenarios::Drawn`): the point of the scenario's section, and the
//! generic figures its section folds away. Bars and lines of designs take
//! the design's colour, several runs of one design its shades.

use std::collections::BTreeMap;

use dirq_sim::design::DesignKind;
use dirq_sim::metrics::QosCheck;
use dirq_sim::scenario::FigureKind;
use dirq_stats::{f64_of, ratio};

use crate::common::format::ns_to_us;
use crate::common::views::{Latency, SimRun};
use crate::report::analyse::leaves::{what_each_design_leaves, DesignLeaves};
use crate::report::present::charts::{auto_scale, latency_table, percentile_chart, LinePoint};
use crate::report::present::data::{
    Axis, Cell, Chart, Figure, GroupedSeries, NamedValues, Scale, Series, SeriesKey, SeriesStyle,
    Spread, Table, TableRow, Unit,
};
use crate::report::present::scenarios::{exit_figure, throughput_cell, Drawn, DrawnRun};

/// What carries a scenario's point: its figures (the first open) and
/// tables.
#[derive(Default)]
pub struct Point {
    /// How to read it, where its figure is a table.
    pub intro: Vec<String>,
    pub figures: Vec<Figure>,
    pub tables: Vec<Table>,
}

/// The point of a scenario drawn as `kind` declares; the exits by reason
/// where its runs lack what `kind` needs.
pub fn point(kind: FigureKind, drawn: &Drawn) -> Point {
    let runs = drawn.in_figure();
    let figures = match kind {
        FigureKind::ExitsByReason => exits_by_reason(drawn, &runs).into_iter().collect(),
        FigureKind::TimeInGuest => time_in_guest(drawn, &runs).into_iter().collect(),
        FigureKind::Throughput => throughput(drawn, &runs).into_iter().collect(),
        FigureKind::Latency => latency(drawn),
        FigureKind::LatencyDensity => latency_density(drawn, &runs).into_iter().collect(),
        FigureKind::ShareOfBare => share_of_bare(drawn, &runs).into_iter().collect(),
        FigureKind::SetupBuckets => setup_buckets(drawn, &runs).into_iter().collect(),
        FigureKind::CyclesPerLevel => cycles_per_level(drawn, &runs).into_iter().collect(),
        FigureKind::TimeAndCpu => time_and_cpu(drawn, &runs),
        FigureKind::ExitsLeft => {
            let tables: Vec<Table> = exits_left(drawn).into_iter().collect();
            return Point {
                intro: (!tables.is_empty())
                    .then(|| {
                        format!(
                            "Each cell of the table is the run's exits of that reason per second \
                             over the interrupts it raised per second (`{}`); reasons under \
                             0.005 per interrupt are left out, \"all exits\" counts every exit. \
                             What a column keeps above DID's is the gap between that hardware \
                             and DID, exit by exit. AVIC's own exits are counted under the \
                             reason they stand for (AVIC_INCOMPLETE_IPI and AVIC_NOACCEL as \
                             MSR_WRITE).",
                            drawn.command
                        )
                    })
                    .into_iter()
                    .collect(),
                figures: Vec::new(),
                tables,
            };
        }
    };
    let mut figures: Vec<Figure> = figures;
    // Only the first carries the point; a second setting's figure folds.
    for figure in figures.iter_mut().skip(1) {
        figure.folded = true;
    }
    Point {
        figures,
        ..Point::default()
    }
}

fn id(drawn: &Drawn, what: &str) -> String {
    format!("scenario-{}-{what}", drawn.name)
}

/// The caption's note on fitted runs, where the scenario has any.
fn fitted_note(runs: &[&DrawnRun]) -> String {
    if runs.iter().any(|r| r.fitted) {
        " Runs marked (fitted) are fitted points: their numbers were an input of the fit, \
         not a prediction."
            .into()
    } else {
        String::new()
    }
}

/// Stacked bars of exits per second by reason, one per run; the table
/// adds the time in guest.
pub fn exits_by_reason(drawn: &Drawn, runs: &[&DrawnRun]) -> Option<Figure> {
    let mut runs = runs.to_vec();
    runs.sort_by(|a, b| {
        let rate = |r: &DrawnRun| r.run.rate().map_or(0.0, |(_, rate)| rate);
        rate(a).total_cmp(&rate(b))
    });
    let mut figure = exit_figure(
        id(drawn, "exits"),
        format!("{}: exits per second by VMX reason, per run", drawn.name),
        format!(
            "One bar per run, its segments the exit reasons (a palette of their own); the \
             table adds the time in guest.{}",
            fitted_note(&runs)
        ),
        drawn,
        &runs,
    )?;
    figure.table.columns.push("time in guest".into());
    for (row, r) in figure.table.rows.iter_mut().zip(&runs) {
        row.cells
            .push(Cell::number(r.run.time_in_guest, Unit::Fraction));
    }
    Some(figure)
}

/// Grouped bars: one group per setting, one bar per design in its colour,
/// and the same numbers as a table (settings down, designs across).
fn design_bars(value_label: &str, unit: Unit, rows: &[(&DrawnRun, f64)]) -> (Chart, Table) {
    let mut settings: Vec<String> = Vec::new();
    let mut designs: Vec<(String, DesignKind)> = Vec::new();
    for (r, _) in rows {
        let setting = r.setting_text();
        if !settings.contains(&setting) {
            settings.push(setting);
        }
        if !designs.iter().any(|(name, _)| *name == r.design) {
            designs.push((r.design.clone(), r.run.design));
        }
    }
    let value = |setting: &str, design: &str| {
        rows.iter()
            .find(|(r, _)| r.setting_text() == setting && r.design == design)
            .map(|(r, value)| (*r, *value))
    };
    let series = designs
        .iter()
        .map(|(name, design)| GroupedSeries {
            name: name.clone(),
            key: SeriesKey::Design(*design),
            values: settings
                .iter()
                .map(|setting| value(setting, name).and_then(|(_, v)| Spread::of([v])))
                .collect(),
        })
        .collect();
    let mut columns = vec!["setting".to_string()];
    columns.extend(designs.iter().map(|(name, _)| name.clone()));
    let table_rows = settings
        .iter()
        .map(|setting| {
            let mut cells = vec![Cell::text(setting.clone())];
            cells.extend(designs.iter().map(|(name, _)| match value(setting, name) {
                Some((r, v)) if r.fitted => {
                    let cell = Cell::number(v, unit);
                    let text = format!("{} (fitted)", cell.text);
                    cell.shown_as(text)
                }
                Some((_, v)) => Cell::number(v, unit),
                None => Cell::text("-"),
            }));
            TableRow::new(cells)
        })
        .collect();
    let chart = Chart::Grouped {
        value_axis: Axis {
            label: value_label.into(),
            scale: Scale::Linear,
        },
        categories: settings,
        series,
    };
    (
        chart,
        Table {
            title: String::new(),
            columns,
            rows: table_rows,
            folded: false,
        },
    )
}

/// The numeric parameter the runs sweep (a rate, or the swept one): every
/// line it would draw (a design at one setting of the other parameters)
/// has two values of it or more, so no line is a single point.
fn swept_number(drawn: &Drawn, runs: &[&DrawnRun]) -> Option<String> {
    drawn
        .varying
        .iter()
        .find(|key| {
            let number = |r: &DrawnRun| r.run.params.get(*key).and_then(|v| v.as_f64());
            if runs.iter().any(|r| number(r).is_none()) {
                return false;
            }
            let line = |r: &DrawnRun| -> (String, Vec<(String, String)>) {
                let others = r
                    .setting
                    .iter()
                    .filter(|(k, _)| k != *key)
                    .cloned()
                    .collect();
                (r.design.clone(), others)
            };
            runs.iter().all(|r| {
                let mut values: Vec<f64> = runs
                    .iter()
                    .filter(|other| line(other) == line(r))
                    .filter_map(|other| number(other))
                    .collect();
                values.sort_by(f64::total_cmp);
                values.dedup();
                values.len() >= 2
            })
        })
        .cloned()
}

/// Lines through `value` of each run against the swept number, one per
/// design and other setting; each line of a design in its colour (its
/// shades where it has several).
fn lines_against(
    x_key: &str,
    y_axis: Axis,
    unit: Unit,
    runs: &[&DrawnRun],
    value: impl Fn(&SimRun) -> Option<f64>,
) -> (Chart, Table) {
    let x_label = x_key.replace('_', " ");
    // A line per design and the settings besides the swept one.
    let line_of = |r: &DrawnRun| -> (String, DesignKind) {
        let mut name = r.design.clone();
        for (key, part) in &r.setting {
            if key != x_key {
                name.push_str(&format!(" · {part}"));
            }
        }
        (name, r.run.design)
    };
    let mut lines: Vec<(String, DesignKind, Vec<LinePoint>)> = Vec::new();
    for r in runs {
        let (Some(x), Some(y)) = (
            r.run.params.get(x_key).and_then(|v| v.as_f64()),
            value(r.run),
        ) else {
            continue;
        };
        let (name, design) = line_of(r);
        let Some(y) = Spread::of([y]) else { continue };
        let point = LinePoint {
            group: name.clone(),
            x,
            y,
        };
        match lines.iter_mut().find(|(n, _, _)| *n == name) {
            Some((_, _, points)) => points.push(point),
            None => lines.push((name, design, vec![point])),
        }
    }
    let per_design = |design: DesignKind| lines.iter().filter(|(_, d, _)| *d == design).count();
    let mut nth: BTreeMap<DesignKind, usize> = BTreeMap::new();
    let series: Vec<Series> = lines
        .iter()
        .map(|(name, design, points)| {
            let mut points: Vec<[f64; 2]> = points.iter().map(|p| [p.x, p.y.median]).collect();
            points.sort_by(|a, b| a[0].total_cmp(&b[0]));
            let index = nth.entry(*design).or_insert(0);
            let key = SeriesKey::shade(*design, *index, per_design(*design));
            *index += 1;
            Series::new(name.clone(), SeriesStyle::Line, points).keyed(key)
        })
        .collect();
    let table = Table {
        title: String::new(),
        columns: vec!["line".into(), x_label.clone(), y_axis.label.clone()],
        rows: series
            .iter()
            .flat_map(|s| {
                s.points.iter().map(|[x, y]| {
                    TableRow::new(vec![
                        Cell::text(s.name.clone()),
                        Cell::number(*x, Unit::Count),
                        Cell::number(*y, unit),
                    ])
                })
            })
            .collect(),
        folded: false,
    };
    let chart = Chart::Xy {
        x_axis: Axis {
            label: x_label,
            scale: Scale::Linear,
        },
        y_axis,
        series,
        identity_line: false,
    };
    (chart, table)
}

/// Time in guest against the rate, a line per design, where the runs
/// have two rates or more.
pub fn time_in_guest_lines(drawn: &Drawn, runs: &[&DrawnRun]) -> Option<Figure> {
    let (rate_key, _) = runs.iter().find_map(|r| r.run.rate())?;
    let mut rates: Vec<f64> = runs.iter().filter_map(|r| Some(r.run.rate()?.1)).collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    if rates.len() < 2 {
        return None;
    }
    let (chart, table) = lines_against(
        &rate_key,
        Axis {
            label: "time in guest (fraction)".into(),
            scale: Scale::Linear,
        },
        Unit::Fraction,
        runs,
        |run| Some(run.time_in_guest),
    );
    Some(Figure {
        id: id(drawn, "guest-time"),
        title: format!("{}: time in guest against the rate, per design", drawn.name),
        caption: "One line per design (and setting).".into(),
        commands: drawn.commands(),
        chart,
        table,
        folded: false,
    })
}

/// Time in guest: lines against the rate, or one bar per design and
/// setting at a single rate.
fn time_in_guest(drawn: &Drawn, runs: &[&DrawnRun]) -> Option<Figure> {
    if let Some(figure) = time_in_guest_lines(drawn, runs) {
        return Some(figure);
    }
    let rows: Vec<(&DrawnRun, f64)> = runs.iter().map(|r| (*r, r.run.time_in_guest)).collect();
    let (chart, table) = design_bars("time in guest (fraction)", Unit::Fraction, &rows);
    chart.has_data().then(|| Figure {
        id: id(drawn, "guest-time"),
        title: drawn.figure.map_or_else(String::new, |f| f.title.clone()),
        caption: "One bar per design in each setting; the folded table of all runs adds the \
                  invariant violations."
            .into(),
        commands: drawn.commands(),
        chart,
        table,
        folded: false,
    })
}

/// The throughput unit the runs share, if they share one.
fn shared_unit(runs: &[&DrawnRun]) -> Option<Unit> {
    let mut units = runs
        .iter()
        .filter_map(|r| r.run.throughput.as_ref().map(|t| t.unit));
    let first = units.next()?;
    units
        .all(|unit| unit == first)
        .then_some(Unit::Throughput(first))
}

/// Throughput against the swept number, or per design and setting.
fn throughput(drawn: &Drawn, runs: &[&DrawnRun]) -> Option<Figure> {
    let unit = shared_unit(runs)?;
    let unit_name = match unit {
        Unit::Throughput(unit) => unit.to_string(),
        _ => String::new(),
    };
    let title = drawn.figure.map_or_else(String::new, |f| f.title.clone());
    let (chart, table) = match swept_number(drawn, runs) {
        Some(x_key) => lines_against(
            &x_key,
            Axis {
                label: unit_name.clone(),
                scale: Scale::Linear,
            },
            unit,
            runs,
            SimRun::throughput_value,
        ),
        None => {
            let rows: Vec<(&DrawnRun, f64)> = runs
                .iter()
                .filter_map(|r| Some((*r, r.run.throughput_value()?)))
                .collect();
            design_bars(&unit_name, unit, &rows)
        }
    };
    chart.has_data().then(|| Figure {
        id: id(drawn, "throughput"),
        title,
        caption: format!("The throughput in {unit_name}, one colour per design."),
        commands: drawn.commands(),
        chart,
        table,
        folded: false,
    })
}

/// Lines a percentile plot holds before it stops being readable.
const MAX_PERCENTILE_LINES: usize = 8;

/// The latency distributions: one percentile plot over few runs; p50
/// against the swept number where the runs are many (a figure per other
/// setting); p50 per design and setting otherwise.
pub fn latency(drawn: &Drawn) -> Vec<Figure> {
    let runs: Vec<&DrawnRun> = drawn
        .in_figure()
        .into_iter()
        .filter(|r| r.run.latency_ns.is_some())
        .collect();
    if runs.is_empty() {
        return Vec::new();
    }
    if runs.len() <= MAX_PERCENTILE_LINES {
        return vec![percentile_figure(drawn, &runs)];
    }
    if let Some(x_key) = swept_number(drawn, &runs) {
        let x_label = x_key.replace('_', " ");
        // One figure per setting of the other parameters.
        let others = |r: &DrawnRun| -> String {
            r.setting
                .iter()
                .filter(|(key, _)| *key != x_key)
                .map(|(_, part)| part.as_str())
                .collect::<Vec<_>>()
                .join(" · ")
        };
        let mut groups: Vec<String> = Vec::new();
        for r in &runs {
            if !groups.contains(&others(r)) {
                groups.push(others(r));
            }
        }
        return groups
            .iter()
            .enumerate()
            .map(|(index, group)| {
                let members: Vec<&DrawnRun> = runs
                    .iter()
                    .copied()
                    .filter(|r| others(r) == *group)
                    .collect();
                let (chart, table) = lines_against(
                    &x_key,
                    Axis {
                        label: "latency p50 (us)".into(),
                        scale: auto_scale(
                            members
                                .iter()
                                .filter_map(|r| Some(ns_to_us(r.run.latency_ns.as_ref()?.p50))),
                        ),
                    },
                    Unit::Us,
                    &members,
                    |run| Some(ns_to_us(run.latency_ns.as_ref()?.p50)),
                );
                Figure {
                    id: id(drawn, &format!("latency-{}", index + 1)),
                    title: format!(
                        "{}: latency p50 against {x_label}{}, one line per design",
                        drawn.name,
                        if group.is_empty() {
                            String::new()
                        } else {
                            format!(", {group}")
                        }
                    ),
                    caption: "The p50 of each run; the folded table of all runs has the mean."
                        .into(),
                    commands: drawn.commands(),
                    chart,
                    table,
                    folded: false,
                }
            })
            .collect();
    }
    let rows: Vec<(&DrawnRun, f64)> = runs
        .iter()
        .filter_map(|r| Some((*r, ns_to_us(r.run.latency_ns.as_ref()?.p50))))
        .collect();
    let (chart, mut table) = design_bars("latency p50 (us)", Unit::Us, &rows);
    // The tail and the CPU behind each p50, beside it.
    table.columns = vec![
        "run".into(),
        "p50 (us)".into(),
        "p99 (us)".into(),
        "CPU busy".into(),
    ];
    table.rows = runs
        .iter()
        .map(|r| {
            let latency = r.run.latency_ns.as_ref();
            TableRow::new(vec![
                Cell::text(r.marked_label()),
                Cell::maybe(latency.map(|l| ns_to_us(l.p50)), Unit::Us),
                Cell::maybe(latency.map(|l| ns_to_us(l.p99)), Unit::Us),
                Cell::maybe(r.run.cpu_busy, Unit::Fraction),
            ])
        })
        .collect();
    vec![Figure {
        id: id(drawn, "latency"),
        title: format!("{}: latency p50 per setting and design", drawn.name),
        caption: "One bar per design in each setting; the table adds each run's p99 and the \
                  CPU its cores kept busy."
            .into(),
        commands: drawn.commands(),
        chart,
        table,
        folded: false,
    }]
}

/// Samples beyond a percentile for the plot to draw it: fewer leave the
/// tail to one or two samples.
const TAIL_SAMPLES: u64 = 10;

/// HdrHistogram's percentile plot of each run, each line in its design's
/// colour (shades where a design has several runs).
fn percentile_figure(drawn: &Drawn, runs: &[&DrawnRun]) -> Figure {
    let lines: Vec<(String, SeriesKey, Vec<dirq_vmm::report::Bucket>)> = runs
        .iter()
        .map(|r| {
            let of_design = runs.iter().filter(|o| o.run.design == r.run.design);
            let count = of_design.clone().count();
            let index = of_design
                .take_while(|o| !std::ptr::eq(o.run, r.run))
                .count();
            (
                r.marked_label(),
                SeriesKey::shade(r.run.design, index, count),
                r.run.latency_histogram.clone(),
            )
        })
        .collect();
    let rows: Vec<(String, u64, Latency)> = runs
        .iter()
        .filter_map(|r| {
            let samples = r.run.latency_histogram.iter().map(|b| b.count).sum();
            Some((r.marked_label(), samples, r.run.latency_ns.clone()?))
        })
        .collect();
    Figure {
        id: id(drawn, "latency"),
        title: format!("{}: latency by percentile, per run", drawn.name),
        caption: format!(
            "HdrHistogram's percentile plot of every simulated sample of each run, from its \
             buckets (5% wide); x is the percentile on a log scale of 1/(1 - p): 50%, 90%, \
             99%, 99.9% equally spaced. Each line stops where fewer than {TAIL_SAMPLES} of its \
             samples lie beyond: the tail past it is not resolved."
        ),
        commands: drawn.commands(),
        chart: percentile_chart(&lines, TAIL_SAMPLES),
        table: latency_table("run", &rows),
        folded: false,
    }
}

/// Each design's share of its samples per latency bucket.
fn latency_density(drawn: &Drawn, runs: &[&DrawnRun]) -> Option<Figure> {
    let runs: Vec<(&DrawnRun, u64)> = runs
        .iter()
        .map(|r| (*r, r.run.latency_histogram.iter().map(|b| b.count).sum()))
        .filter(|(_, samples)| *samples > 0)
        .collect();
    if runs.is_empty() {
        return None;
    }
    // Designs whose latencies coincide (DID and bare metal) overlap.
    let series: Vec<Series> = runs
        .iter()
        .map(|(r, samples)| {
            let points = r
                .run
                .latency_histogram
                .iter()
                .filter(|b| b.count > 0)
                .map(|b| [ns_to_us(f64_of(b.le_ns)), ratio(b.count, *samples) * 100.0])
                .collect();
            Series::new(r.label.clone(), SeriesStyle::Line, points)
                .keyed(SeriesKey::Design(r.run.design))
        })
        .collect();
    let chart = Chart::Xy {
        x_axis: Axis {
            label: "latency, timer expiry to the user-level handler (us)".into(),
            scale: auto_scale(series.iter().flat_map(|s| s.points.iter().map(|p| p[0]))),
        },
        y_axis: Axis {
            label: "share of the design's samples per 5% bucket (%)".into(),
            scale: Scale::Linear,
        },
        series,
        identity_line: false,
    };
    let us = |r: &DrawnRun, pick: fn(&Latency) -> f64| {
        Cell::maybe(
            r.run.latency_ns.as_ref().map(|l| ns_to_us(pick(l))),
            Unit::Us,
        )
    };
    let rows = runs
        .iter()
        .map(|(r, samples)| {
            TableRow::new(vec![
                Cell::text(r.label.clone()),
                Cell::count(*samples),
                us(r, |l| l.mean),
                us(r, |l| l.p50),
                us(r, |l| l.p99),
                us(r, |l| l.max),
            ])
        })
        .collect();
    Some(Figure {
        id: id(drawn, "density"),
        title: drawn.figure.map_or_else(String::new, |f| f.title.clone()),
        caption: "For each logarithmic bucket (5% wide) with samples, the design's share of its \
                  samples at the bucket's upper bound: where each design's latencies lie."
            .into(),
        commands: drawn.commands(),
        chart,
        table: Table {
            title: String::new(),
            columns: [
                "design",
                "samples",
                "mean (us)",
                "p50 (us)",
                "p99 (us)",
                "max (us)",
            ]
            .map(String::from)
            .to_vec(),
            rows,
            folded: false,
        },
        folded: false,
    })
}

/// One bar per row, its only segment named by the row's group, so that
/// each group keeps one colour and the legend names the groups.
fn group_bars(value_label: &str, rows: &[(String, String, SeriesKey, f64)]) -> Chart {
    let mut groups: Vec<(&str, SeriesKey)> = Vec::new();
    for (_, group, key, _) in rows {
        if !groups.iter().any(|(g, _)| g == group) {
            groups.push((group, *key));
        }
    }
    Chart::Bars {
        value_label: value_label.to_string(),
        categories: rows.iter().map(|(label, ..)| label.clone()).collect(),
        stacks: groups
            .into_iter()
            .map(|(group, key)| NamedValues {
                name: group.to_string(),
                key,
                values: rows
                    .iter()
                    .map(|(_, g, _, value)| if g == group { *value } else { 0.0 })
                    .collect(),
            })
            .collect(),
    }
}

fn table(columns: &[&str], rows: Vec<Vec<Cell>>) -> Table {
    Table {
        title: String::new(),
        columns: columns.iter().map(|c| c.to_string()).collect(),
        rows: rows.into_iter().map(TableRow::new).collect(),
        folded: false,
    }
}

/// Throughput as a share of the same workload's bare metal, one bar per
/// run coloured by design; the table adds the throughput and, where the
/// runs time requests, each one's p99 at its own load, or its p95 where
/// the runs check a QoS target.
fn share_of_bare(drawn: &Drawn, runs: &[&DrawnRun]) -> Option<Figure> {
    let workload = |r: &DrawnRun| -> Option<String> {
        Some(r.run.params.get("workload")?.as_str()?.to_string())
    };
    let bare_of = |r: &DrawnRun| {
        runs.iter()
            .find(|b| b.run.design == DesignKind::Bare && workload(b) == workload(r))
            .and_then(|b| b.run.throughput_value())
            .filter(|bare| *bare > 0.0)
    };
    let timed = runs.iter().any(|r| r.run.latency_ns.is_some());
    let qos: Vec<QosCheck> = runs.iter().filter_map(|r| r.run.paper.qos).collect();
    let mut bars = Vec::new();
    let mut rows = Vec::new();
    for r in runs {
        let Some(value) = r.run.throughput_value() else {
            continue;
        };
        let share = bare_of(r).map(|bare| value / bare);
        if let Some(share) = share {
            bars.push((
                r.marked_label(),
                r.design.clone(),
                SeriesKey::Design(r.run.design),
                share * 100.0,
            ));
        }
        let mut row = vec![
            Cell::text(r.marked_label()),
            throughput_cell(r.run),
            Cell::maybe(share, Unit::Fraction),
        ];
        if !qos.is_empty() {
            let p95 = r.run.paper.qos.and_then(|qos| qos.p95_ns);
            row.push(Cell::maybe(p95.map(|ns| f64_of(ns) / 1e6), Unit::Count));
        } else if timed {
            row.push(Cell::maybe(
                r.run.latency_ns.as_ref().map(|l| ns_to_us(l.p99)),
                Unit::Us,
            ));
        }
        rows.push(row);
    }
    if bars.is_empty() {
        return None;
    }
    let mut columns = vec!["run", "throughput", "of bare metal"];
    if !qos.is_empty() {
        columns.push("p95 (ms)");
    } else if timed {
        columns.push("p99 at its own throughput (us)");
    }
    Some(Figure {
        id: id(drawn, "share"),
        title: drawn.figure.map_or_else(String::new, |f| f.title.clone()),
        caption: format!(
            "One bar per run, coloured by design: its throughput over bare metal's on the same \
             workload.{}{}",
            if !qos.is_empty() {
                qos_note(&qos)
            } else if timed {
                " Each p99 is at that run's own throughput, so the p99s are at different loads \
                 and do not compare as latencies."
                    .into()
            } else {
                String::new()
            },
            fitted_note(runs)
        ),
        commands: drawn.commands(),
        chart: group_bars("throughput, % of bare metal", &bars),
        table: table(&columns, rows),
        folded: false,
    })
}

/// What the QoS checks of a closed loop's runs say: the clients cannot
/// offer less than their loop's rate, so a run's throughput is the QoS
/// figure only where its p95 meets the target.
fn qos_note(checks: &[QosCheck]) -> String {
    let missed = checks.iter().filter(|qos| !qos.met).count();
    let target = checks.first().map_or(0, |qos| qos.target_ms);
    let verdict = if missed == 0 {
        format!("all {} meet it", checks.len())
    } else {
        format!(
            "{missed} of {} miss it, and their throughput is not a QoS figure",
            checks.len()
        )
    };
    format!(
        " The clients are a closed loop that cannot offer less, so each throughput is its \
         loop's rate, and each run's p95 is checked against the {target} ms target: {verdict}."
    )
}

/// A setup bucket's lower bound in ms ("<10" is 0, ">200" is 200), to keep
/// the buckets in order.
fn bucket_start(name: &str) -> f64 {
    let digits: String = name
        .trim_start_matches(['<', '>'])
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    if name.starts_with('<') {
        0.0
    } else {
        digits.parse().unwrap_or(f64::INFINITY)
    }
}

/// Calls per setup-latency bucket, stacked per run in latency order.
fn setup_buckets(drawn: &Drawn, runs: &[&DrawnRun]) -> Option<Figure> {
    let runs: Vec<(&DrawnRun, &BTreeMap<String, u64>)> = runs
        .iter()
        .filter_map(|r| Some((*r, r.run.paper.setup_ms_buckets.as_ref()?)))
        .collect();
    let mut buckets: Vec<&String> = runs.iter().flat_map(|(_, b)| b.keys()).collect();
    buckets.sort_by(|a, b| bucket_start(a).total_cmp(&bucket_start(b)).then(a.cmp(b)));
    buckets.dedup();
    if buckets.is_empty() {
        return None;
    }
    let chart = Chart::Bars {
        value_label: "calls".into(),
        categories: runs.iter().map(|(r, _)| r.marked_label()).collect(),
        stacks: buckets
            .iter()
            .map(|bucket| NamedValues {
                name: format!("{bucket} ms"),
                key: SeriesKey::Variant,
                values: runs
                    .iter()
                    .map(|(_, b)| f64_of(b.get(*bucket).copied().unwrap_or(0)))
                    .collect(),
            })
            .collect(),
    };
    let mut columns: Vec<String> = vec!["run".into()];
    columns.extend(buckets.iter().map(|b| format!("{b} ms")));
    columns.extend([
        "call rate (calls/s)".into(),
        "INVITE retransmissions".into(),
    ]);
    let rows = runs
        .iter()
        .map(|(r, b)| {
            let mut cells = vec![Cell::text(r.marked_label())];
            cells.extend(
                buckets
                    .iter()
                    .map(|bucket| Cell::count(b.get(*bucket).copied().unwrap_or(0))),
            );
            cells.push(Cell::maybe(r.run.paper.call_rate, Unit::Count));
            cells.push(
                r.run
                    .paper
                    .invite_retransmissions
                    .map_or_else(|| Cell::text("-"), Cell::count),
            );
            TableRow::new(cells)
        })
        .collect();
    Some(Figure {
        id: id(drawn, "setup"),
        title: drawn.figure.map_or_else(String::new, |f| f.title.clone()),
        caption: format!(
            "One bar per run, its segments the calls whose setup took that long (buckets in \
             latency order, coloured from the ordered palette).{}",
            fitted_note(&runs.iter().map(|(r, _)| *r).collect::<Vec<_>>())
        ),
        commands: drawn.commands(),
        chart,
        table: Table {
            title: String::new(),
            columns,
            rows,
            folded: false,
        },
        folded: false,
    })
}

/// Host cycles per interrupt per level, with the speed-up over the first
/// (the userspace level) and which level is the fitted point.
fn cycles_per_level(drawn: &Drawn, runs: &[&DrawnRun]) -> Option<Figure> {
    let runs: Vec<(&DrawnRun, f64)> = runs
        .iter()
        .filter_map(|r| Some((*r, r.run.paper.cycles_per_interrupt?)))
        .collect();
    let (_, slowest) = runs.first()?;
    let slowest = *slowest;
    let bars: Vec<(String, String, SeriesKey, f64)> = runs
        .iter()
        .map(|(r, cycles)| {
            let level = r.setting_text();
            (r.marked_label(), level, SeriesKey::Variant, *cycles)
        })
        .collect();
    let rows = runs
        .iter()
        .map(|(r, cycles)| {
            let per_interrupt = r.run.throughput_value().filter(|rate| *rate > 0.0);
            vec![
                Cell::text(r.setting_text()),
                Cell::maybe(
                    per_interrupt.map(|rate| r.run.exits_per_s / rate),
                    Unit::Count,
                ),
                Cell::number(*cycles, Unit::Count),
                Cell::maybe(r.run.paper.seconds_per_million, Unit::Seconds),
                Cell::number(slowest / cycles, Unit::Times),
                Cell::text(if r.fitted {
                    "fitted point"
                } else {
                    "prediction"
                }),
            ]
        })
        .collect();
    let first = runs
        .first()
        .map_or_else(String::new, |(r, _)| r.setting_text());
    Some(Figure {
        id: id(drawn, "levels"),
        title: drawn.figure.map_or_else(String::new, |f| f.title.clone()),
        caption: "One bar per level: injection, the handler, the device's read and the eight \
                  controller accesses, each an exit or a memory access by the level. Seconds \
                  per million scale the simulated interrupts to the paper's million."
            .into(),
        commands: drawn.commands(),
        chart: group_bars("cycles per interrupt", &bars),
        table: table(
            &[
                "level",
                "exits per interrupt",
                "cycles per interrupt",
                "seconds per million",
                &format!("speed-up over {first}"),
                "status",
            ],
            rows,
        ),
        folded: false,
    })
}

/// The IPI study's two figures: the calls' total time and the CPU they
/// burned, one group per target and idle mode, a bar per design.
fn time_and_cpu(drawn: &Drawn, runs: &[&DrawnRun]) -> Vec<Figure> {
    let total: Vec<(&DrawnRun, f64)> = runs
        .iter()
        .filter_map(|r| Some((*r, r.run.paper.total_s?)))
        .collect();
    if total.is_empty() {
        return Vec::new();
    }
    let (time_chart, time_table) =
        design_bars("total time of the calls (s)", Unit::Seconds, &total);
    let cpu: Vec<(&DrawnRun, f64)> = runs
        .iter()
        .filter_map(|r| Some((*r, r.run.cpu_busy?)))
        .collect();
    let mut figures = vec![Figure {
        id: id(drawn, "time"),
        title: drawn.figure.map_or_else(String::new, |f| f.title.clone()),
        caption: "One group per target and idle mode, a bar per design.".into(),
        commands: drawn.commands(),
        chart: time_chart,
        table: time_table,
        folded: false,
    }];
    if !cpu.is_empty() {
        let (chart, table) =
            design_bars("CPU busy (share of the VM's cores)", Unit::Fraction, &cpu);
        figures.push(Figure {
            id: id(drawn, "cpu"),
            title: format!("{}: CPU burned per target and idle mode", drawn.name),
            caption: "The share of the VM's cores' time not asleep: guest, host and host \
                      polling all burn the core."
                .into(),
            commands: drawn.commands(),
            chart,
            table,
            folded: true,
        });
    }
    figures
}

/// Exits per interrupt each design leaves, by interrupt kind and reason:
/// the analysed table (`analyse::leaves`).
fn exits_left(drawn: &Drawn) -> Option<Table> {
    let runs: Vec<&SimRun> = drawn.runs.iter().map(|r| r.run).collect();
    let leaves: DesignLeaves = what_each_design_leaves(&runs);
    if leaves
        .kinds
        .iter()
        .all(|(_, cells)| cells.iter().all(Option::is_none))
    {
        return None;
    }
    let design_name = |design: DesignKind| {
        drawn
            .runs
            .iter()
            .find(|r| r.run.design == design)
            .map_or_else(|| design.name().to_string(), |r| r.design.clone())
    };
    let mut columns = vec!["interrupt".to_string(), "exit reason".to_string()];
    columns.extend(leaves.designs.iter().map(|d| design_name(*d)));
    let mut rows = Vec::new();
    for (kind, cells) in &leaves.kinds {
        let number = |value: Option<f64>| match value {
            Some(value) => Cell::number(value, Unit::Count),
            None => Cell::text("not run"),
        };
        for reason in DesignLeaves::reasons(cells) {
            let mut row = vec![Cell::text(kind.name()), Cell::text(reason.name())];
            row.extend(cells.iter().map(|cell| {
                number(
                    cell.as_ref()
                        .map(|cell| cell.by_reason.get(&reason).copied().unwrap_or(0.0)),
                )
            }));
            rows.push(TableRow::new(row));
        }
        let mut total = vec![Cell::text(kind.name()), Cell::text("all exits")];
        total.extend(
            cells
                .iter()
                .map(|cell| number(cell.as_ref().map(|cell| cell.total))),
        );
        rows.push(TableRow::new(total));
    }
    Some(Table {
        title: "Exits per interrupt, by interrupt kind, exit reason and design".into(),
        columns,
        rows,
        folded: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::views::SimScenario;
    use crate::report::present::figures::render_svg;
    use dirq_sim::scenario::Scenario;
    use serde_json::{json, Value};

    fn run(design: &str, params: Value, extra: Value) -> Value {
        let mut run = json!({
            "design": design, "params": params, "exits_per_s": 1000.0,
            "exits_by_reason_per_s": {"EXTERNAL_INTERRUPT": 600.0, "MSR_WRITE": 400.0},
            "time_in_guest": 0.9, "cpu_busy": 0.5, "events": 10, "wall_s": 0.01
        });
        for (key, value) in extra.as_object().into_iter().flatten() {
            run[key] = value.clone();
        }
        run
    }

    /// The point of a scenario of `runs` whose figure is `figure`.
    fn point_of(figure: &str, runs: Vec<Value>) -> (Point, SimScenario) {
        let text = format!(
            "name = \"t\"\ndescription = \"t\"\n{figure}\n[[runs]]\nworkload = \"udp-rx\"\n\
             designs = [\"vanilla\"]\nrates_pps = [1000]\n"
        );
        let mut view =
            SimScenario::from_raw(&json!({"scenario": "t", "runs": runs})).expect("contract");
        let scenario = Scenario::from_toml(&text).expect("scenario parses");
        let kind = scenario.figure.as_ref().expect("a figure").draw;
        view.inputs = Some(scenario);
        let drawn = Drawn::of(&view, "dirq sim t".into());
        let point = point(kind, &drawn);
        for figure in &point.figures {
            render_svg(&figure.chart).unwrap_or_else(|err| panic!("{}: {err}", figure.id));
            assert!(!figure.table.rows.is_empty(), "{}: a table", figure.id);
        }
        (point, view)
    }

    fn texts(table: &Table, column: usize) -> Vec<String> {
        table
            .rows
            .iter()
            .map(|r| r.cells[column].text.clone())
            .collect()
    }

    #[test]
    fn shares_are_of_the_same_workloads_bare_metal_in_the_papers_names() {
        let throughput = |v: f64| json!({"throughput": {"value": v, "unit": "Gbit/s"}});
        let (point, _) = point_of(
            "[figure]\ndraw = \"share-of-bare\"\ntitle = \"Share\"\n\
             names = { vanilla = \"baseline\", bare = \"bare metal\" }\n\
             fitted_runs = [\"bare · netperf\"]\nleaves_out = [\"itr_us\"]\n",
            vec![
                run("vanilla", json!({"workload": "netperf"}), throughput(4.0)),
                run("bare", json!({"workload": "netperf"}), throughput(8.0)),
                run("did", json!({"workload": "apache"}), throughput(90.0)),
                run("bare", json!({"workload": "apache"}), throughput(100.0)),
                // A sweep point is not a row of the paper's table.
                run(
                    "vanilla",
                    json!({"workload": "netperf", "itr_us": 24}),
                    throughput(1.0),
                ),
            ],
        );
        let table = &point.figures[0].table;
        assert_eq!(
            texts(table, 0),
            [
                "baseline · netperf",
                "bare metal · netperf (fitted)",
                "did · apache",
                "bare metal · apache"
            ]
        );
        assert_eq!(texts(table, 2), ["50.00%", "100.00%", "90.00%", "100.00%"]);
        let Chart::Bars { stacks, .. } = &point.figures[0].chart else {
            panic!("bars");
        };
        let keys: Vec<SeriesKey> = stacks.iter().map(|s| s.key).collect();
        assert_eq!(
            keys,
            [
                SeriesKey::Design(DesignKind::Vanilla),
                SeriesKey::Design(DesignKind::Bare),
                SeriesKey::Design(DesignKind::Did)
            ],
            "one colour per design"
        );
    }

    #[test]
    fn a_closed_loops_qos_check_gives_the_p95_and_names_a_run_that_misses_it() {
        let server = |requests: f64, p95_ns: u64, met: bool| {
            json!({"throughput": {"value": requests, "unit": "requests/s"},
                   "latency_ns": {"samples": 10, "mean": 1e6, "min": 1, "p50": 1_000_000,
                                  "p90": 2_000_000, "p99": 30_000_000, "max": 40_000_000},
                   "qos": {"target_ms": 10, "p95_ns": p95_ns, "met": met}})
        };
        let memcached = json!({"workload": "memcached"});
        let (point, _) = point_of(
            "[figure]\ndraw = \"share-of-bare\"\ntitle = \"Share\"\n",
            vec![
                run("bare", memcached.clone(), server(100.0, 2_000_000, true)),
                run("vanilla", memcached, server(80.0, 12_000_000, false)),
            ],
        );
        let figure = &point.figures[0];
        assert_eq!(figure.table.columns[3], "p95 (ms)");
        assert_eq!(texts(&figure.table, 3), ["2.00", "12.0"]);
        assert!(
            figure
                .caption
                .contains("against the 10 ms target: 1 of 2 miss it"),
            "{}",
            figure.caption
        );
    }

    #[test]
    fn levels_give_their_speed_up_over_the_first_and_say_which_is_fitted() {
        let level = |level: &str, cycles: f64| {
            run(
                "vanilla",
                json!({"level": level}),
                json!({"cycles_per_interrupt": cycles, "seconds_per_million": cycles / 1200.0,
                       "exits_per_s": 9000.0, "throughput": {"value": 1000.0, "unit": "interrupts/s"}}),
            )
        };
        let (point, _) = point_of(
            "[figure]\ndraw = \"cycles-per-level\"\ntitle = \"Levels\"\nfitted_runs = [\"userspace\"]\n",
            vec![level("userspace", 4000.0), level("pv", 1000.0)],
        );
        let rows: Vec<Vec<String>> = point.figures[0]
            .table
            .rows
            .iter()
            .map(|r| r.cells.iter().map(|c| c.text.clone()).collect())
            .collect();
        assert_eq!(
            rows[0],
            ["userspace", "9.00", "4K", "3.33", "1.00x", "fitted point"]
        );
        assert_eq!(rows[1], ["pv", "9.00", "1K", "0.83", "4.00x", "prediction"]);
    }

    #[test]
    fn the_ipi_study_groups_each_target_and_idle_mode_with_a_bar_per_design() {
        let call = |design: &str, target: &str, idle: &str, total: f64| {
            run(
                design,
                json!({"target": target, "idle": idle}),
                json!({"total_s": total}),
            )
        };
        let (point, _) = point_of(
            "[figure]\ndraw = \"time-and-cpu\"\ntitle = \"Calls\"\n",
            vec![
                call("vanilla", "same-node", "halt", 1.5),
                call("did", "same-node", "halt", 1.0),
                call("vanilla", "all", "poll", 9.0),
                call("did", "all", "poll", 8.0),
            ],
        );
        let folded: Vec<bool> = point.figures.iter().map(|f| f.folded).collect();
        assert_eq!(folded, [false, true], "time carries the point, CPU folds");
        let Chart::Grouped {
            categories, series, ..
        } = &point.figures[0].chart
        else {
            panic!("grouped bars");
        };
        assert_eq!(categories, &["halt · same-node", "poll · all"]);
        assert_eq!(series[1].key, SeriesKey::Design(DesignKind::Did));
        assert_eq!(series[1].values[1].map(|s| s.median), Some(8.0));
        let table = &point.figures[0].table;
        assert_eq!(table.columns, ["setting", "vanilla", "did"]);
        assert_eq!(texts(table, 1), ["1.50", "9.00"]);
    }

    #[test]
    fn setup_buckets_keep_their_latency_order() {
        let voip = |low: u64| {
            json!({"setup_ms_buckets": {">200": 1, "10-100": 2, "<10": low, "100-200": 0},
                   "call_rate": 99.5, "invite_retransmissions": 3})
        };
        let (point, _) = point_of(
            "[figure]\ndraw = \"setup-buckets\"\ntitle = \"Calls\"\n",
            vec![
                run("vanilla", json!({}), voip(5)),
                run("did", json!({}), voip(9)),
            ],
        );
        let table = &point.figures[0].table;
        assert_eq!(
            table.columns,
            [
                "run",
                "<10 ms",
                "10-100 ms",
                "100-200 ms",
                ">200 ms",
                "call rate (calls/s)",
                "INVITE retransmissions"
            ]
        );
        let did: Vec<&str> = table.rows[1]
            .cells
            .iter()
            .map(|c| c.text.as_str())
            .collect();
        assert_eq!(did, ["did", "9", "2", "0", "1", "99.5", "3"]);
    }

    #[test]
    fn few_runs_draw_one_percentile_plot_in_their_designs_colours() {
        let latency = json!({"latency_ns": {"mean": 3.0, "p50": 2000, "p99": 4000, "max": 4000,
            "histogram": [{"le_ns": 1000, "count": 50}, {"le_ns": 2000, "count": 150}]}});
        let (point, _) = point_of(
            "[figure]\ndraw = \"latency\"\ntitle = \"Latency\"\n",
            vec![
                run("vanilla", json!({"size": 1}), latency.clone()),
                run("vanilla", json!({"size": 2}), latency.clone()),
                run("did", json!({"size": 1}), latency),
            ],
        );
        let Chart::Xy { series, .. } = &point.figures[0].chart else {
            panic!("a percentile plot");
        };
        let keys: Vec<SeriesKey> = series.iter().map(|s| s.key).collect();
        assert_eq!(
            keys,
            [
                SeriesKey::DesignRun {
                    design: DesignKind::Vanilla,
                    run: 0,
                    runs: 2
                },
                SeriesKey::DesignRun {
                    design: DesignKind::Vanilla,
                    run: 1,
                    runs: 2
                },
                SeriesKey::Design(DesignKind::Did)
            ]
        );
        // 200 samples, 10 of them beyond p95: the line stops there.
        assert_eq!(series[0].points.last().map(|p| p[0]), Some(0.95));
    }

    #[test]
    fn a_density_is_each_buckets_share_of_its_designs_samples() {
        let histogram = json!({"latency_ns": {"mean": 3.0, "p50": 2, "p99": 4, "max": 4,
            "histogram": [{"le_ns": 1000, "count": 1}, {"le_ns": 2000, "count": 3}]}});
        let (point, _) = point_of(
            "[figure]\ndraw = \"latency-density\"\ntitle = \"Density\"\n",
            vec![
                run("did", json!({}), histogram),
                run("vanilla", json!({}), json!({})),
            ],
        );
        let Chart::Xy { series, .. } = &point.figures[0].chart else {
            panic!("a line per design");
        };
        assert_eq!(series.len(), 1, "a run without samples draws nothing");
        assert_eq!(series[0].points, vec![[1.0, 25.0], [2.0, 75.0]]);
    }

    #[test]
    fn a_number_no_line_sweeps_draws_bars_not_lines_of_one_point() {
        // Five designs, each at two settings whose vCPU count follows the
        // mode: no design has two counts at one mode.
        let mut runs = Vec::new();
        for (index, design) in ["vanilla", "apicv", "did", "avic", "bare"]
            .iter()
            .enumerate()
        {
            // Each design its own latency, so none is drawn as another.
            let p50 = 1000 * (index + 1);
            let latency = json!({"latency_ns": {"mean": 3.0, "p50": p50, "p99": 4000,
                "max": 4000, "histogram": [{"le_ns": p50, "count": 10}]}});
            for (mode, vcpus) in [("unicast", 2), ("broadcast", 4)] {
                runs.push(run(
                    design,
                    json!({"ipi_mode": mode, "vcpus_per_vm": vcpus}),
                    latency.clone(),
                ));
            }
        }
        let (point, _) = point_of("[figure]\ndraw = \"latency\"\ntitle = \"IPIs\"\n", runs);
        let [figure] = point.figures.as_slice() else {
            panic!("one figure");
        };
        let Chart::Grouped { categories, .. } = &figure.chart else {
            panic!("bars per setting and design, not lines");
        };
        assert_eq!(
            categories,
            &["unicast · vcpus_per_vm 2", "broadcast · vcpus_per_vm 4"]
        );
    }
}
