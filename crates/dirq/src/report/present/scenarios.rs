//! Report sections for simulation scenarios: exits by reason per run, time
//! in guest against rate, latency distributions, invariant checks.

use crate::common::views::{Latency, SimRun, SimScenario};
use crate::report::collect::simulate::TracedExits;
use dirq_sim::design::DesignKind;

use crate::common::format::ns_to_us;
use crate::report::present::charts::{
    auto_scale, exit_bars, exit_table, grouped_lines, latency_table, percentile_chart,
    perf_kvm_stat_table, ExitStat, LinePoint,
};
use crate::report::present::data::{
    Axis, Cell, Chart, Figure, Scale, Section, Series, SeriesKey, SeriesStyle, Spread, Table,
    TableRow, Unit,
};
use dirq_vmm::exits::ExitTime;

/// Builds the section of one simulated scenario. `command` is the
/// equivalent command line, quoted in every caption.
pub fn scenario_section(
    id: &str,
    title: &str,
    description: &str,
    result: &SimScenario,
    command: &str,
) -> Section {
    let runs = &result.runs;
    let labels = result.labels();
    let commands = vec![command.to_string()];
    let mut figures = Vec::new();

    let entries: Vec<_> = runs
        .iter()
        .zip(&labels)
        .map(|(run, label)| (label.clone(), run.exits_by_reason_per_s.clone()))
        .collect();
    let chart = exit_bars("exits per second", &entries);
    if chart.has_data() {
        figures.push(Figure {
            id: format!("{id}-exits"),
            title: format!("{}: exits per second by VMX reason", result.scenario),
            caption: format!(
                "Each bar is one of the {} runs; segments are exit reasons.",
                runs.len()
            ),
            commands: commands.clone(),
            table: exit_table("run", &chart, "exits/s"),
            chart,
        });
    }

    let rated: Vec<LinePoint> = runs
        .iter()
        .filter_map(|run| {
            Some(LinePoint {
                group: run.design.name().to_string(),
                x: run.rate()?.1,
                y: Spread::of([run.time_in_guest])?,
            })
        })
        .collect();
    let mut rates: Vec<f64> = rated.iter().map(|point| point.x).collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    if let Some((rate_key, _)) = runs.iter().find_map(SimRun::rate) {
        // A line needs at least two rates to say anything about the rate.
        if rates.len() >= 2 {
            let (chart, table) = grouped_lines(
                Axis {
                    label: rate_key.replace('_', " "),
                    scale: Scale::Linear,
                },
                Axis {
                    label: "time in guest (fraction)".into(),
                    scale: Scale::Linear,
                },
                &rated,
                Unit::Fraction,
                Some(1.0),
            );
            figures.push(Figure {
                id: format!("{id}-guest-time"),
                title: format!("{}: time in guest against interrupt rate", result.scenario),
                caption: "One line per design.".into(),
                commands: commands.clone(),
                chart,
                table,
            });
        }
    }

    figures.extend(latency_figures(id, result, &labels, &commands));

    Section {
        id: id.to_string(),
        title: title.to_string(),
        intro: description
            .split("\n\n")
            .map(|paragraph| paragraph.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|paragraph| !paragraph.is_empty())
            .collect(),
        figures,
        tables: vec![summary_table(runs, &labels)],
    }
}

/// Lines a percentile plot holds before it stops being readable.
const MAX_PERCENTILE_LINES: usize = 8;

/// The scenario's latency distributions. One percentile plot when every
/// design has one run (or the runs are few); when designs repeat over a
/// numeric parameter (did-netpipe's message sizes), one figure per value
/// of the other varying parameters: p50 against that parameter, a line
/// per design, a whisker up to p99.
fn latency_figures(
    id: &str,
    result: &SimScenario,
    labels: &[String],
    commands: &[String],
) -> Vec<Figure> {
    let measured: Vec<(&SimRun, &String, &Latency)> = result
        .runs
        .iter()
        .zip(labels)
        .filter_map(|(run, label)| Some((run, label, run.latency_ns.as_ref()?)))
        .collect();
    if measured.is_empty() {
        return Vec::new();
    }
    let mut designs: Vec<DesignKind> = measured.iter().map(|(r, _, _)| r.design).collect();
    designs.sort_unstable();
    designs.dedup();
    let one_run_per_design = designs.len() == measured.len();
    let varying = result.varying_params();
    let numeric = varying.iter().find(|key| {
        measured.iter().all(|(run, _, _)| {
            run.params
                .get(*key)
                .is_some_and(serde_json::Value::is_number)
        })
    });
    match numeric {
        Some(x_key) if !one_run_per_design && measured.len() > MAX_PERCENTILE_LINES => {
            let others: Vec<&String> = varying.iter().filter(|key| *key != x_key).collect();
            let group_of = |run: &SimRun| -> String {
                others
                    .iter()
                    .filter_map(|key| {
                        let value = run.params.get(*key)?;
                        let text = value
                            .as_str()
                            .map_or_else(|| value.to_string(), String::from);
                        Some(format!("{} {text}", key.replace('_', " ")))
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let mut groups: Vec<String> = Vec::new();
            for (run, _, _) in &measured {
                let group = group_of(run);
                if !groups.contains(&group) {
                    groups.push(group);
                }
            }
            groups
                .iter()
                .enumerate()
                .map(|(index, group)| {
                    let members: Vec<_> = measured
                        .iter()
                        .filter(|(run, _, _)| group_of(run) == *group)
                        .copied()
                        .collect();
                    latency_against(id, index, group, x_key, &members, commands)
                })
                .collect()
        }
        _ => {
            let chart = percentile_chart(
                &measured
                    .iter()
                    .map(|(run, label, latency)| {
                        let key = if one_run_per_design {
                            SeriesKey::Design(run.design)
                        } else {
                            SeriesKey::Variant
                        };
                        ((*label).clone(), key, latency.histogram.clone())
                    })
                    .collect::<Vec<_>>(),
            );
            vec![Figure {
                id: format!("{id}-latency"),
                title: format!("{}: latency by percentile per run", result.scenario),
                caption: "HdrHistogram's percentile plot of every simulated sample of each run, \
                          from its buckets (5% wide); x is the percentile on a log scale of \
                          1/(1 - p): 50%, 90%, 99%, 99.9% equally spaced."
                    .into(),
                commands: commands.to_vec(),
                chart,
                table: latency_table("run", &latency_rows(&measured)),
            }]
        }
    }
}

fn latency_rows(runs: &[(&SimRun, &String, &Latency)]) -> Vec<(String, u64, Latency)> {
    runs.iter()
        .map(|(run, label, latency)| {
            let samples = run.latency_histogram.iter().map(|b| b.count).sum();
            ((*label).clone(), samples, (*latency).clone())
        })
        .collect()
}

/// One small multiple: p50 against `x_key`, a line per design, whiskers
/// up to p99.
fn latency_against(
    id: &str,
    index: usize,
    group: &str,
    x_key: &str,
    runs: &[(&SimRun, &String, &Latency)],
    commands: &[String],
) -> Figure {
    let mut series: Vec<Series> = Vec::new();
    for (run, _, latency) in runs {
        let Some(x) = run.params.get(x_key).and_then(serde_json::Value::as_f64) else {
            continue;
        };
        let position = match series.iter().position(|s| s.name == run.design.name()) {
            Some(position) => position,
            None => {
                series.push(
                    Series::new(run.design.name(), SeriesStyle::Line, Vec::new())
                        .keyed(SeriesKey::Design(run.design)),
                );
                series.len() - 1
            }
        };
        let line = &mut series[position];
        line.points.push([x, ns_to_us(latency.p50)]);
        line.y_ranges
            .push([ns_to_us(latency.p50), ns_to_us(latency.p99)]);
    }
    let latencies = series
        .iter()
        .flat_map(|s| s.y_ranges.iter().flatten().copied());
    let x_label = x_key.replace('_', " ");
    let chart = Chart::Xy {
        x_axis: Axis {
            label: x_label.clone(),
            scale: Scale::Linear,
        },
        y_axis: Axis {
            label: "latency p50 (us), whisker to p99".into(),
            scale: auto_scale(latencies),
        },
        series,
        identity_line: false,
    };
    Figure {
        id: format!("{id}-latency-{}", index + 1),
        title: format!("Latency against {x_label}, {group}: one line per design"),
        caption: "The point is the p50, the whisker reaches the p99. Every run has a \
                  distribution; there are too many runs for one percentile plot, so each \
                  design is a line across the sweep, one figure per setting. A design not \
                  seen lies under another with the same numbers (see the table)."
            .into(),
        commands: commands.to_vec(),
        chart,
        table: latency_table("run", &latency_rows(runs)),
    }
}

/// Every run's headline numbers, with runs that broke an invariant flagged.
fn summary_table(runs: &[SimRun], labels: &[String]) -> Table {
    Table {
        title: "All runs".into(),
        columns: [
            "run",
            "exits/s",
            "time in guest",
            "latency mean (us)",
            "throughput",
            "invariant violations",
            "events",
            "wall (s)",
        ]
        .map(String::from)
        .to_vec(),
        rows: runs
            .iter()
            .zip(labels)
            .map(|(run, label)| {
                TableRow::flagged(
                    vec![
                        Cell::text(label.clone()),
                        Cell::number(run.exits_per_s, Unit::Count),
                        Cell::number(run.time_in_guest, Unit::Fraction),
                        run.latency_ns.as_ref().map_or_else(
                            || Cell::text("-"),
                            |l| Cell::number(ns_to_us(l.mean), Unit::Us),
                        ),
                        throughput_cell(run),
                        Cell::count(run.violations()),
                        Cell::count(run.events),
                        Cell::number(run.wall_s, Unit::Seconds),
                    ],
                    run.violations() > 0,
                )
            })
            .collect(),
    }
}

/// The exits of the traced window, one `perf kvm stat report` table per
/// design: the simulator knows how long each exit kept the host busy.
pub fn traced_exits_section(exits: &[TracedExits], file: &str) -> Section {
    let tables = exits
        .iter()
        .map(|process| {
            let run = process
                .by_reason
                .iter()
                .map(|(&reason, t)| {
                    let time = ExitTime {
                        samples: t.samples,
                        total_ns: t.total_ns,
                        min_ns: t.min_ns,
                        max_ns: t.max_ns,
                    };
                    let stat = ExitStat {
                        samples: t.samples,
                        time: Some(time),
                    };
                    (reason, stat)
                })
                .collect();
            perf_kvm_stat_table(process.process.clone(), &[run], "not simulated")
        })
        .collect();
    Section {
        id: "sim-trace-exits".into(),
        title: "Simulation: every exit of the traced window, per design".into(),
        intro: vec![format!(
            "The exits of `traces/{file}` (open it in ui.perfetto.dev: a process per design, a \
             thread per core, each exit a slice named by its VMX reason, arrows from each \
             interrupt's raise to its handler), as `perf kvm stat report` prints them. Time is \
             how long the exit kept the host busy (VM exit to VM entry). One simulated run per \
             design: no spread over runs. The real runs' tables are in the same form."
        )],
        figures: Vec::new(),
        tables,
    }
}

/// "99.8K packets/s": the throughput in its own unit; "-" without one.
pub fn throughput_cell(run: &SimRun) -> Cell {
    run.throughput.as_ref().map_or_else(
        || Cell::text("-"),
        |throughput| Cell::number(throughput.value, Unit::Throughput(throughput.unit)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::present::data::Chart;

    fn run(design: &str, rate: f64, extint: f64, guest: f64, latency: bool) -> serde_json::Value {
        let mut value = serde_json::json!({
            "design": design,
            "params": {"rate_pps": rate},
            "exits_per_s": extint,
            "exits_by_reason_per_s": {"EXTERNAL_INTERRUPT": extint},
            "time_in_guest": guest,
            "invariant_violations": {"priority_inversion": 0},
            "events": 1000, "wall_s": 0.01,
            "throughput": {"value": rate, "unit": "packets/s"}
        });
        if latency {
            value["latency_ns"] = serde_json::json!({"mean": 3000.0, "p50": 2500.0, "p99": 9000.0, "max": 20000.0,
                    "histogram": [{"le_ns": 2500, "count": 50}, {"le_ns": 20000, "count": 50}]});
        }
        value
    }

    #[test]
    fn rated_scenario_gets_exits_guest_time_and_latency_figures() {
        let result: SimScenario = serde_json::from_value(serde_json::json!({
            "scenario": "did-udp-rx",
            "runs": [
                run("vanilla", 100000.0, 14000.0, 0.96, true),
                run("vanilla", 250000.0, 31000.0, 0.87, true),
                run("did", 100000.0, 0.0, 0.998, true),
                run("did", 250000.0, 0.0, 0.998, false),
            ]
        }))
        .expect("contract parses");
        let section = scenario_section(
            "sim-did-udp-rx",
            "did-udp-rx",
            "First.\n\nSecond\nparagraph.",
            &result,
            "dirq sim did-udp-rx",
        );
        let ids: Vec<&str> = section.figures.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "sim-did-udp-rx-exits",
                "sim-did-udp-rx-guest-time",
                "sim-did-udp-rx-latency"
            ]
        );
        let Chart::Xy { series, .. } = &section.figures[1].chart else {
            panic!("guest time is a line chart");
        };
        assert_eq!(series.len(), 2);
        assert_eq!(series[1].points, vec![[100000.0, 0.998], [250000.0, 0.998]]);
        // The run without latency is left out of the CDF, not drawn at zero;
        // the others are steps through their buckets.
        assert_eq!(section.figures[2].table.rows.len(), 3);
        let Chart::Xy { series, .. } = &section.figures[2].chart else {
            panic!("latency is a percentile plot");
        };
        assert_eq!(
            series[0].points,
            vec![[0.0, 2.5], [0.5, 20.0], [0.99, 20.0]]
        );
        // Two runs per design: no line may pass for a design's only one.
        assert!(series.iter().all(|s| s.key == SeriesKey::Variant));
        assert!(section.figures.iter().all(|f| f.chart.has_data()));
        assert!(section
            .figures
            .iter()
            .all(|f| f.commands == ["dirq sim did-udp-rx"]));
        assert_eq!(section.intro, ["First.", "Second paragraph."]);
    }

    #[test]
    fn many_runs_of_few_designs_become_one_small_multiple_per_setting() {
        let sized = |design: &str, transport: &str, bytes: f64, p50: f64| {
            let mut value = run(design, 1000.0, 0.0, 0.9, true);
            value["params"] = serde_json::json!({"transport": transport, "message_bytes": bytes});
            value["latency_ns"]["p50"] = serde_json::json!(p50);
            value
        };
        let mut runs = Vec::new();
        for bytes in [32.0, 64.0, 128.0] {
            for (design, transport) in [("vanilla", "sriov"), ("did", "sriov"), ("vanilla", "pv")] {
                runs.push(sized(design, transport, bytes, bytes * 100.0));
            }
        }
        let result: SimScenario =
            serde_json::from_value(serde_json::json!({"scenario": "did-netpipe", "runs": runs}))
                .expect("contract parses");
        let section = scenario_section("sim-n", "n", "", &result, "dirq sim did-netpipe");
        let latency: Vec<_> = section
            .figures
            .iter()
            .filter(|f| f.id.starts_with("sim-n-latency"))
            .collect();
        assert_eq!(latency.len(), 2, "one figure per transport");
        assert!(latency[0].title.contains("transport sriov"));
        let Chart::Xy { x_axis, series, .. } = &latency[0].chart else {
            panic!("latency against size is xy");
        };
        assert_eq!(x_axis.label, "message bytes");
        let keys: Vec<SeriesKey> = series.iter().map(|s| s.key).collect();
        assert_eq!(
            keys,
            [
                SeriesKey::Design(DesignKind::Vanilla),
                SeriesKey::Design(DesignKind::Did)
            ]
        );
        assert_eq!(
            series[0].points,
            vec![[32.0, 3.2], [64.0, 6.4], [128.0, 12.8]]
        );
        assert_eq!(series[0].y_ranges[0], [3.2, 9.0]);
        assert_eq!(latency[1].table.rows.len(), 3);
    }

    #[test]
    fn one_rate_draws_no_rate_line() {
        let result: SimScenario = serde_json::from_value(serde_json::json!({
            "scenario": "x",
            "runs": [run("vanilla", 20000.0, 10.0, 0.9, false), run("did", 20000.0, 1.0, 0.99, false)]
        }))
        .expect("contract parses");
        let section = scenario_section("sim-x", "x", "", &result, "dirq sim x");
        assert!(section.figures.iter().all(|f| f.id != "sim-x-guest-time"));
    }

    #[test]
    fn invariant_violations_are_flagged_in_the_summary() {
        let mut broken = run("naive-direct-eoi", 1000.0, 10.0, 0.9, false);
        broken["invariant_violations"]["priority_inversion"] = serde_json::json!(3);
        let result: SimScenario = serde_json::from_value(serde_json::json!({
            "scenario": "x", "runs": [broken, run("did", 1000.0, 0.0, 0.99, false)]
        }))
        .expect("contract parses");
        let section = scenario_section("sim-x", "x", "", &result, "dirq sim x");
        let flags: Vec<bool> = section.tables[0].rows.iter().map(|r| r.flagged).collect();
        assert_eq!(flags, [true, false]);
        assert_eq!(section.tables[0].rows[0].cells[4], "1K packets/s");
        // The summary's numbers keep their values for data.json.
        let guest = &section.tables[0].rows[1].cells[2];
        assert_eq!(guest, &"99.00%");
        assert_eq!(
            (guest.value, guest.unit),
            (Some(0.99), Some(Unit::Fraction))
        );
        assert_eq!(section.tables[0].rows[0].cells[5].value, Some(3.0));
    }
}
