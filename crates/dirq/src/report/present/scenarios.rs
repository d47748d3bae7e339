//! One section per built-in scenario: what it was given (its
//! description, testbed and run groups) beside the numbers of the figure
//! its TOML declares (`[figure]`: which published figure it reproduces,
//! if any, and how it is drawn), that figure, and everything else folded
//! away. Runs that another design or an earlier scenario already drew
//! are drawn once.

use dirq_sim::design::DesignKind;
use dirq_sim::scenario::{FigureKind, RunGroup, Scenario, ScenarioFigure};

use crate::common::format::ns_to_us;
use crate::common::views::{param_text, SimRun, SimScenario};
use crate::report::collect::simulate::TracedExits;
use crate::report::present::charts::{
    exit_bars, exit_table, perf_kvm_stat_table, ExitStat, PerfTimes,
};
use crate::report::present::conclusions::and_list;
use crate::report::present::data::{Cell, Figure, Given, Section, Table, TableRow, Unit};
use crate::report::present::draws;
use crate::report::present::page::Part;
use dirq_vmm::exits::ExitTime;

/// A run as a section draws it: the designs it stands for, and the
/// label parts that tell it from the scenario's other runs.
#[derive(Debug, Clone)]
pub struct DrawnRun<'a> {
    pub run: &'a SimRun,
    /// Its design and every design whose runs equal its own here
    /// ("apicv-pi = apicv-pi-ipiv").
    pub design: String,
    /// The parameters that vary and their values in words
    /// (`rate_pps`, "100K pps").
    pub setting: Vec<(String, String)>,
    /// Its label in the paper's words, where the scenario names it
    /// (`[figure] names`); the design and setting otherwise.
    pub label: String,
    /// A fitted point (`[figure] fitted_runs`), not a prediction.
    pub fitted: bool,
}

impl DrawnRun<'_> {
    /// The setting in words, "all" where nothing varies.
    pub fn setting_text(&self) -> String {
        if self.setting.is_empty() {
            "all".into()
        } else {
            let parts: Vec<&str> = self.setting.iter().map(|(_, text)| text.as_str()).collect();
            parts.join(" · ")
        }
    }

    /// The label, marked where the run is a fitted point.
    pub fn marked_label(&self) -> String {
        if self.fitted {
            format!("{} (fitted)", self.label)
        } else {
            self.label.clone()
        }
    }
}

/// A scenario's runs as its section draws them.
pub struct Drawn<'a> {
    pub name: &'a str,
    pub figure: Option<&'a ScenarioFigure>,
    pub runs: Vec<DrawnRun<'a>>,
    /// The parameters whose values tell runs apart, besides the design.
    pub varying: Vec<String>,
    /// Designs folded into another whose runs they equal, with it.
    pub merged: Vec<(DesignKind, DesignKind)>,
    /// The command that repeats every run.
    pub command: String,
}

impl<'a> Drawn<'a> {
    pub fn of(result: &'a SimScenario, command: String) -> Self {
        let figure = result.inputs.as_ref().and_then(|s| s.figure.as_ref());
        let varying = result.varying_params();
        let merged = identical_designs(result);
        let names = figure.map(|f| &f.names);
        let runs = result
            .runs
            .iter()
            .filter(|run| !merged.iter().any(|(gone, _)| *gone == run.design))
            .map(|run| {
                let mut design = run.design.name().to_string();
                for (gone, kept) in &merged {
                    if *kept == run.design {
                        design.push_str(&format!(" = {}", gone.name()));
                    }
                }
                let setting: Vec<(String, String)> = varying
                    .iter()
                    .filter_map(|key| Some((key.clone(), param_text(key, run.params.get(key)?))))
                    .collect();
                let mut parts = vec![run.design.name().to_string()];
                parts.extend(setting.iter().map(|(_, text)| text.clone()));
                let label = names
                    .and_then(|names| renamed(&parts, names, &design))
                    .unwrap_or_else(|| {
                        let mut label = vec![design.clone()];
                        label.extend(setting.iter().map(|(_, text)| text.clone()));
                        label.join(" · ")
                    });
                let fitted = figure.is_some_and(|f| {
                    f.fitted_runs
                        .iter()
                        .any(|entry| holds_every_part(&parts, entry))
                });
                DrawnRun {
                    run,
                    design,
                    setting,
                    label,
                    fitted,
                }
            })
            .collect();
        Drawn {
            name: &result.scenario,
            figure,
            runs,
            varying,
            merged,
            command,
        }
    }

    /// The runs the published figure holds: all but those a `leaves_out`
    /// parameter marks.
    pub fn in_figure(&self) -> Vec<&DrawnRun<'a>> {
        let leaves_out = self.figure.map_or(&[][..], |f| f.leaves_out.as_slice());
        self.runs
            .iter()
            .filter(|r| !leaves_out.iter().any(|key| r.run.params.contains_key(key)))
            .collect()
    }

    pub fn commands(&self) -> Vec<String> {
        vec![self.command.clone()]
    }
}

/// Whether `parts` hold every " · "-separated part of `entry`.
fn holds_every_part(parts: &[String], entry: &str) -> bool {
    entry
        .split(" · ")
        .all(|part| parts.iter().any(|p| p == part))
}

/// The label in the paper's words: the longest name whose parts the run's
/// label holds replaces them, the other parts kept; None without one.
fn renamed(
    parts: &[String],
    names: &std::collections::BTreeMap<String, String>,
    design: &str,
) -> Option<String> {
    let (key, name) = names
        .iter()
        .filter(|(key, _)| holds_every_part(parts, key))
        .max_by_key(|(key, _)| key.split(" · ").count())?;
    let replaced: Vec<&str> = key.split(" · ").collect();
    let mut label = vec![name.clone()];
    // A merged design keeps saying which designs it stands for.
    if design.contains(" = ") {
        label[0] = format!("{name} ({design})");
    }
    label.extend(
        parts
            .iter()
            .filter(|part| !replaced.contains(&part.as_str()))
            .cloned(),
    );
    Some(label.join(" · "))
}

/// Pairs of designs (the later, the earlier) whose runs are equal in every
/// setting of the scenario: the later is drawn as the earlier.
fn identical_designs(result: &SimScenario) -> Vec<(DesignKind, DesignKind)> {
    let mut designs: Vec<DesignKind> = Vec::new();
    for run in &result.runs {
        if !designs.contains(&run.design) {
            designs.push(run.design);
        }
    }
    let runs_of = |design: DesignKind| -> Vec<&SimRun> {
        result.runs.iter().filter(|r| r.design == design).collect()
    };
    let mut merged: Vec<(DesignKind, DesignKind)> = Vec::new();
    for (index, &later) in designs.iter().enumerate() {
        let earlier = designs[..index].iter().copied().find(|&earlier| {
            !merged.iter().any(|(gone, _)| *gone == earlier)
                && same_results(&runs_of(earlier), &runs_of(later))
        });
        if let Some(earlier) = earlier {
            merged.push((later, earlier));
        }
    }
    merged
}

/// Whether two designs' runs ran the same settings with the same results.
fn same_results(a: &[&SimRun], b: &[&SimRun]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.same_results(b))
}

/// The earlier scenario whose runs took exactly the exits and time in
/// guest of `run` (same design and parameters of its workload): it drew
/// them already.
fn drawn_before<'a>(run: &SimRun, earlier: &'a [SimScenario]) -> Option<&'a str> {
    earlier
        .iter()
        .find(|scenario| {
            scenario.runs.iter().any(|other| {
                other.design == run.design
                    && other.exits_by_reason_per_s == run.exits_by_reason_per_s
                    && other.time_in_guest == run.time_in_guest
                    && other.rate() == run.rate()
                    && other.exits_per_s > 0.0
            })
        })
        .map(|scenario| scenario.scenario.as_str())
}

/// The run groups in words: each group's workload, designs and every key
/// it sets away from the default.
fn groups_given(scenario: &Scenario) -> Vec<String> {
    scenario
        .runs
        .iter()
        .map(|group| {
            let defaults = RunGroup::new(group.workload, group.designs.clone());
            let (Ok(serde_json::Value::Object(set)), Ok(serde_json::Value::Object(default))) =
                (serde_json::to_value(group), serde_json::to_value(&defaults))
            else {
                return format!("{:?}", group.workload);
            };
            let keys: Vec<String> = set
                .iter()
                .filter(|(key, value)| {
                    !matches!(key.as_str(), "workload" | "designs")
                        && default.get(*key) != Some(value)
                })
                .map(|(key, value)| format!("{key} = {value}"))
                .collect();
            let designs: Vec<&str> = group.designs.iter().map(|d| d.name()).collect();
            let workload = serde_json::to_value(group.workload)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            let mut text = format!("{workload} under {}", designs.join(", "));
            if !keys.is_empty() {
                text.push_str(&format!("; {}", keys.join(", ")));
            }
            text
        })
        .collect()
}

/// What the scenario was given: its description, testbed, simulated
/// time, groups, and what is fitted.
fn given(scenario: &Scenario, drawn: &Drawn, seed: u64) -> Vec<Given> {
    let row = |what: &str, value: String| Given {
        what: what.into(),
        value,
    };
    let mut given = vec![row(
        "what it models",
        scenario
            .description
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    )];
    if let Some(paper) = drawn.figure.and_then(|f| f.paper.as_ref()) {
        given.push(row("published figure it reproduces", paper.clone()));
    }
    given.push(row(
        "testbed (cost profile)",
        serde_json::to_value(scenario.profile)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_else(|| "did-2015".into()),
    ));
    given.push(row(
        "simulated",
        format!(
            "{} ms per run, seed {seed}, {} runs",
            scenario.duration_ms,
            scenario.expand().len()
        ),
    ));
    for (index, group) in groups_given(scenario).into_iter().enumerate() {
        given.push(row(&format!("group {}", index + 1), group));
    }
    given.push(row(
        "fitted",
        drawn
            .figure
            .and_then(|f| f.fitted.clone())
            .unwrap_or_else(|| {
                "nothing: every figure is a prediction of the model with the testbed's costs".into()
            }),
    ));
    given
}

/// The section of one scenario. `earlier` are the scenarios drawn before
/// it, so that runs they drew are not drawn again.
pub fn scenario_section(result: &SimScenario, seed: u64, earlier: &[SimScenario]) -> Section {
    let command = format!("dirq sim {} --seed {seed}", result.scenario);
    let drawn = Drawn::of(result, command);
    let kind = drawn.figure.map_or(FigureKind::ExitsByReason, |f| f.draw);
    let point = draws::point(kind, &drawn);
    let mut intro = Vec::new();
    if !drawn.merged.is_empty() {
        let pairs: Vec<String> = drawn
            .merged
            .iter()
            .map(|(gone, kept)| format!("{} equals {}", gone.name(), kept.name()))
            .collect();
        intro.push(format!(
            "Here {}: every run of the one took exactly the other's exits, times and \
             latencies, so each is drawn once, named for both.",
            and_list(&pairs)
        ));
    }
    let mut figures = point.figures;
    figures.extend(folded_figures(kind, &drawn, earlier, &mut intro));
    let mut tables = point.tables;
    tables.push(summary_table(&drawn));
    Section {
        id: format!("{}{}", Part::Scenario.id(), result.scenario),
        title: format!(
            "{} \u{2013} {}",
            result.scenario,
            drawn.figure.map_or("exits by reason", |f| f.title.as_str())
        ),
        intro: point.intro.into_iter().chain(intro).collect(),
        given: result
            .inputs
            .as_ref()
            .map(|scenario| given(scenario, &drawn, seed))
            .unwrap_or_default(),
        figures,
        tables,
    }
}

/// The scenario's other figures, folded: exits by reason, time in guest
/// against rate, latency, each where the point figure is another and the
/// runs have it. Exits an earlier scenario drew are said, not drawn.
fn folded_figures(
    kind: FigureKind,
    drawn: &Drawn,
    earlier: &[SimScenario],
    intro: &mut Vec<String>,
) -> Vec<Figure> {
    let mut figures = Vec::new();
    let (before, fresh): (Vec<&DrawnRun>, Vec<&DrawnRun>) = drawn
        .runs
        .iter()
        .partition(|r| drawn_before(r.run, earlier).is_some());
    if let Some(first) = before.first().and_then(|r| drawn_before(r.run, earlier)) {
        intro.push(format!(
            "{} of its {} runs took exactly the exits and time in guest of {first}'s runs of \
             the same design: those are drawn there, not again here.",
            before.len(),
            drawn.runs.len()
        ));
    }
    // What is left to draw says something only where two designs differ.
    let mut designs: Vec<DesignKind> = fresh.iter().map(|r| r.run.design).collect();
    designs.dedup();
    let fresh: Vec<&DrawnRun> = if designs.len() > 1 { fresh } else { Vec::new() };
    if kind != FigureKind::ExitsByReason && kind != FigureKind::ExitsLeft {
        if let Some(mut figure) = draws::exits_by_reason(drawn, &fresh) {
            figure.folded = true;
            figures.push(figure);
        }
    }
    if kind != FigureKind::TimeInGuest {
        if let Some(mut figure) = draws::time_in_guest_lines(drawn, &fresh) {
            figure.folded = true;
            figures.push(figure);
        }
    }
    if !matches!(kind, FigureKind::Latency | FigureKind::LatencyDensity) {
        figures.extend(draws::latency(drawn).into_iter().map(|mut figure| {
            figure.folded = true;
            figure
        }));
    }
    figures
}

/// Every run's headline numbers, with runs that broke an invariant
/// flagged; folded away.
fn summary_table(drawn: &Drawn) -> Table {
    Table {
        title: format!("All {} runs", drawn.runs.len()),
        columns: [
            "run",
            "exits/s",
            "time in guest",
            "CPU busy",
            "latency mean (us)",
            "throughput",
            "invariant violations",
        ]
        .map(String::from)
        .to_vec(),
        rows: drawn
            .runs
            .iter()
            .map(|r| {
                let run = r.run;
                TableRow::flagged(
                    vec![
                        Cell::text(r.marked_label()),
                        Cell::number(run.exits_per_s, Unit::Count),
                        Cell::number(run.time_in_guest, Unit::Fraction),
                        Cell::maybe(run.cpu_busy, Unit::Fraction),
                        Cell::maybe(run.latency_ns.as_ref().map(|l| ns_to_us(l.mean)), Unit::Us),
                        throughput_cell(run),
                        Cell::count(run.violations()),
                    ],
                    run.violations() > 0,
                )
            })
            .collect(),
        folded: true,
    }
}

/// The exits of the traced window, one `perf kvm stat report` table per
/// design (a design that took none says so): the simulator knows how long
/// each exit kept the host busy.
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
                    (
                        reason.to_string(),
                        ExitStat {
                            samples: t.samples,
                            time: PerfTimes::Timed(time),
                        },
                    )
                })
                .collect();
            let mut table = perf_kvm_stat_table(process.process.clone(), &[run]);
            table.folded = true;
            table
        })
        .collect();
    Section {
        id: Part::SimTrace.id().into(),
        title: "Simulation: every exit of the traced window, per design".into(),
        intro: vec![format!(
            "The exits of `traces/{file}` (open it in ui.perfetto.dev: a process per design, a \
             thread per core, each exit a slice named by its VMX reason, arrows from each \
             interrupt's raise to its handler), as `perf kvm stat report` prints them. Time is \
             how long the exit kept the host busy (VM exit to VM entry). One simulated run per \
             design: no spread over runs. A design that took no exit in the window has its \
             table too, with no row but perf's totals."
        )],
        given: Vec::new(),
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

/// The exits of `runs` by reason, one bar per run.
pub fn exit_figure(
    id: String,
    title: String,
    caption: String,
    drawn: &Drawn,
    runs: &[&DrawnRun],
) -> Option<Figure> {
    let entries: Vec<_> = runs
        .iter()
        .map(|r| (r.marked_label(), r.run.exits_by_reason_per_s.clone()))
        .collect();
    let chart = exit_bars("exits per second", &entries);
    chart.has_data().then(|| Figure {
        id,
        title,
        caption,
        commands: drawn.commands(),
        table: exit_table("run", &chart, "exits/s"),
        chart,
        folded: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::present::data::{Chart, SeriesKey};
    use serde_json::{json, Value};

    /// A run of `design` at `rate` packets/s whose exits and time in guest
    /// follow from `exits`.
    fn run(design: &str, rate: u64, exits: f64) -> Value {
        json!({
            "design": design, "params": {"rate_pps": rate},
            "exits_per_s": exits, "exits_by_reason_per_s": {"EXTERNAL_INTERRUPT": exits},
            "time_in_guest": 1.0 - exits / 1e6, "cpu_busy": 0.5,
            "throughput": {"value": rate, "unit": "packets/s"},
            "events": 10, "wall_s": 0.01
        })
    }

    /// The view of `runs` made by a scenario of `figure`.
    fn scenario(name: &str, figure: &str, runs: Vec<Value>) -> SimScenario {
        let text = format!(
            "name = \"{name}\"\ndescription = \"\"\"A test\nof two lines.\"\"\"\n{figure}\n\
             [[runs]]\nworkload = \"udp-rx\"\ndesigns = [\"vanilla\", \"did\"]\n\
             rates_pps = [100000, 200000]\n"
        );
        let mut view =
            SimScenario::from_raw(&json!({"scenario": name, "runs": runs})).expect("contract");
        view.inputs = Some(Scenario::from_toml(&text).expect("scenario parses"));
        view
    }

    const EXITS_FIGURE: &str = "[figure]\ndraw = \"exits-by-reason\"\ntitle = \"Exits\"\n\
         paper = \"A paper, table 2\"\nfitted = \"vanilla's column\"\nfitted_runs = [\"vanilla\"]\n";

    #[test]
    fn equal_designs_are_drawn_once_named_for_both_and_fitted_runs_are_marked() {
        let result = scenario(
            "rx",
            EXITS_FIGURE,
            vec![
                run("vanilla", 100_000, 28_000.0),
                run("did", 100_000, 500.0),
                run("apicv-pi", 100_000, 300.0),
                run("apicv-pi-ipiv", 100_000, 300.0),
            ],
        );
        let drawn = Drawn::of(&result, "dirq sim rx".into());
        assert_eq!(
            drawn.merged,
            [(DesignKind::ApicvPiIpiv, DesignKind::ApicvPi)]
        );
        let labels: Vec<String> = drawn.runs.iter().map(DrawnRun::marked_label).collect();
        assert_eq!(
            labels,
            ["vanilla (fitted)", "did", "apicv-pi = apicv-pi-ipiv"],
            "one rate: no setting in the labels"
        );
    }

    #[test]
    fn a_scenario_s_section_sets_its_inputs_beside_its_declared_figure_and_folds_the_rest() {
        let result = scenario(
            "rx",
            EXITS_FIGURE,
            vec![
                run("vanilla", 100_000, 28_000.0),
                run("did", 100_000, 500.0),
                run("vanilla", 200_000, 50_000.0),
                run("did", 200_000, 600.0),
            ],
        );
        let section = scenario_section(&result, 7, &[]);
        assert_eq!(section.id, "scenario-rx");
        assert_eq!(section.title, "rx \u{2013} Exits");
        let given: Vec<(&str, &str)> = section
            .given
            .iter()
            .map(|g| (g.what.as_str(), g.value.as_str()))
            .collect();
        assert_eq!(given[0], ("what it models", "A test of two lines."));
        assert_eq!(
            given[1],
            ("published figure it reproduces", "A paper, table 2")
        );
        assert!(given.contains(&("simulated", "1000 ms per run, seed 7, 4 runs")));
        assert!(given.contains(&(
            "group 1",
            "udp-rx under vanilla, did; rates_pps = [100000,200000]"
        )));
        assert!(given.contains(&("fitted", "vanilla's column")));
        let figures: Vec<(&str, bool)> = section
            .figures
            .iter()
            .map(|f| (f.id.as_str(), f.folded))
            .collect();
        assert_eq!(
            figures,
            [
                ("scenario-rx-exits", false),
                ("scenario-rx-guest-time", true)
            ]
        );
        // The point's rows run by rate and mark the fitted column.
        let rows: Vec<&str> = section.figures[0]
            .table
            .rows
            .iter()
            .map(|r| r.cells[0].text.as_str())
            .collect();
        assert_eq!(
            rows,
            [
                "vanilla · 100K pps (fitted)",
                "did · 100K pps",
                "vanilla · 200K pps (fitted)",
                "did · 200K pps"
            ]
        );
        // Time in guest: a line per design over the two rates, in its colour.
        let Chart::Xy { series, .. } = &section.figures[1].chart else {
            panic!("lines against the rate");
        };
        let keys: Vec<SeriesKey> = series.iter().map(|s| s.key).collect();
        assert_eq!(
            keys,
            [
                SeriesKey::Design(DesignKind::Vanilla),
                SeriesKey::Design(DesignKind::Did)
            ]
        );
        assert!(series.iter().all(|s| s.points.len() == 2));
        let [all_runs] = section.tables.as_slice() else {
            panic!("one table: all runs");
        };
        assert!(all_runs.folded && all_runs.rows.len() == 4);
    }

    #[test]
    fn runs_an_earlier_scenario_drew_are_said_and_not_drawn_again() {
        let receive = scenario(
            "rx",
            EXITS_FIGURE,
            vec![
                run("vanilla", 100_000, 28_000.0),
                run("did", 100_000, 500.0),
            ],
        );
        let throughput = "[figure]\ndraw = \"throughput\"\ntitle = \"Loop\"\n";
        let mut bare = run("bare", 100_000, 0.0);
        bare["throughput"] =
            json!({"value": 0.97, "unit": "fraction of the core running the loop"});
        let mut runs = vec![bare];
        for (design, exits) in [("vanilla", 28_000.0), ("did", 500.0)] {
            let mut same = run(design, 100_000, exits);
            same["throughput"] =
                json!({"value": 0.9, "unit": "fraction of the core running the loop"});
            runs.push(same);
        }
        let section = scenario_section(&scenario("loop", throughput, runs), 1, &[receive]);
        assert!(
            section.intro.iter().any(|p| p.starts_with(
                "2 of its 3 runs took exactly the exits and time in guest of rx's runs"
            )),
            "{:?}",
            section.intro
        );
        // The bare run alone is left: no exits figure, no guest-time figure.
        let ids: Vec<&str> = section.figures.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, ["scenario-loop-throughput"]);
        // One rate: the throughput is bars per design, never a line of one point.
        assert!(matches!(section.figures[0].chart, Chart::Grouped { .. }));
    }

    #[test]
    fn the_papers_names_replace_the_parts_they_name() {
        let names = std::collections::BTreeMap::from([
            ("vanilla · pv".to_string(), "PV".to_string()),
            ("did".to_string(), "DID".to_string()),
        ]);
        let parts = |text: &str| -> Vec<String> { text.split(" · ").map(String::from).collect() };
        assert_eq!(
            renamed(&parts("vanilla · napi 8 · pv"), &names, "vanilla").as_deref(),
            Some("PV · napi 8")
        );
        assert_eq!(
            renamed(&parts("did · pv"), &names, "did = avic").as_deref(),
            Some("DID (did = avic) · pv")
        );
        assert_eq!(renamed(&parts("vanilla · sriov"), &names, "vanilla"), None);
    }

    #[test]
    fn every_built_in_scenario_declares_how_the_report_draws_it() {
        for name in dirq_sim::scenario::builtin_names() {
            let scenario = dirq_sim::scenario::builtin(name).expect("builtin parses");
            let figure = scenario
                .figure
                .unwrap_or_else(|| panic!("{name} declares no [figure]"));
            assert!(!figure.title.is_empty(), "{name}");
            // A fitted run is named only where the fit is said.
            assert!(
                figure.fitted_runs.is_empty() || figure.fitted.is_some(),
                "{name}"
            );
        }
    }
}
