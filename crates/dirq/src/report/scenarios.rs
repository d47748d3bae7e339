//! Report sections for simulation scenarios: exits by reason per run, time
//! in guest against rate, latency distributions, invariant checks.

use dirq_stats::{f64_of, ratio};

use super::charts::{
    exit_bars, exit_table, format_percent, format_value, grouped_lines, latency_distributions,
    LinePoint,
};
use super::data::{Axis, Figure, Scale, Section, Spread, Table, TableRow};
use super::simulate::TracedExits;
use super::views::{SimRun, SimScenario};

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
                group: run.policy.clone(),
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
                format_percent,
                Some(1.0),
            );
            figures.push(Figure {
                id: format!("{id}-guest-time"),
                title: format!("{}: time in guest against interrupt rate", result.scenario),
                caption: "One line per policy.".into(),
                commands: commands.clone(),
                chart,
                table,
            });
        }
    }

    let latencies: Vec<_> = runs
        .iter()
        .zip(&labels)
        .filter_map(|(run, label)| Some((label.clone(), run.latency_ns.clone()?)))
        .collect();
    if !latencies.is_empty() {
        let (chart, table) = latency_distributions(&latencies);
        figures.push(Figure {
            id: format!("{id}-latency"),
            title: format!("{}: latency CDF per policy", result.scenario),
            caption: "Each line is the CDF of every simulated sample of the run, from its \
                      histogram buckets (5% wide)."
                .into(),
            commands,
            chart,
            table,
        });
    }

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

/// Every run's headline numbers, with runs that broke an invariant flagged.
fn summary_table(runs: &[SimRun], labels: &[String]) -> Table {
    Table {
        title: "All runs".into(),
        columns: [
            "run",
            "exits/s",
            "time in guest",
            "latency mean (ns)",
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
                        label.clone(),
                        format_value(run.exits_per_s),
                        format_percent(run.time_in_guest),
                        run.latency_ns
                            .as_ref()
                            .map_or_else(|| "-".into(), |l| format_value(l.mean)),
                        throughput_text(run),
                        run.violations().to_string(),
                        run.events.to_string(),
                        format!("{:.2}", run.wall_s),
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
            let samples: u64 = process.by_reason.values().map(|t| t.samples).sum();
            let time: u64 = process.by_reason.values().map(|t| t.total_ns).sum();
            let mut rows: Vec<_> = process.by_reason.iter().collect();
            rows.sort_by(|a, b| b.1.samples.cmp(&a.1.samples).then(a.0.cmp(b.0)));
            let us = |ns: f64| format!("{:.2}us", ns / 1e3);
            Table {
                title: process.process.clone(),
                columns: [
                    "VM-EXIT", "Samples", "Samples%", "Time%", "Min Time", "Max Time", "Avg time",
                ]
                .map(String::from)
                .to_vec(),
                rows: rows
                    .into_iter()
                    .map(|(reason, t)| {
                        TableRow::new(vec![
                            reason.clone(),
                            t.samples.to_string(),
                            format_percent(ratio(t.samples, samples.max(1))),
                            format_percent(ratio(t.total_ns, time.max(1))),
                            us(f64_of(t.min_ns)),
                            us(f64_of(t.max_ns)),
                            us(ratio(t.total_ns, t.samples.max(1))),
                        ])
                    })
                    .collect(),
            }
        })
        .collect();
    Section {
        id: "sim-trace-exits".into(),
        title: "Simulation: every exit of the traced window, per design".into(),
        intro: vec![format!(
            "The exits of `traces/{file}` (open it in ui.perfetto.dev: a process per design, a \
             thread per core, each exit a slice named by its VMX reason, arrows from each \
             interrupt's raise to its handler), as `perf kvm stat report` prints them. Time is \
             how long the exit kept the host busy (VM exit to VM entry)."
        )],
        figures: Vec::new(),
        tables,
    }
}

/// "99.8K packets/s": the throughput's number with its unit, if it has one.
fn throughput_text(run: &SimRun) -> String {
    let Some(value) = run.throughput_value() else {
        return "-".into();
    };
    let unit = run.throughput_unit();
    format!("{} {unit}", format_value(value))
        .trim_end()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::super::data::Chart;
    use super::*;

    fn run(policy: &str, rate: f64, extint: f64, guest: f64, latency: bool) -> serde_json::Value {
        let mut value = serde_json::json!({
            "policy": policy,
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
            panic!("latency is a CDF");
        };
        assert_eq!(series[0].points, vec![[2500.0, 0.5], [20000.0, 1.0]]);
        assert!(section.figures.iter().all(|f| f.chart.has_data()));
        assert!(section
            .figures
            .iter()
            .all(|f| f.commands == ["dirq sim did-udp-rx"]));
        assert_eq!(section.intro, ["First.", "Second paragraph."]);
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
    }
}
