//! The source papers' experiments, each drawn in the shape of its paper's
//! table or figure from the simulator's results: DID's UDP exit table,
//! cyclictest latency density, memcached and VoIP tables, ELI's throughput
//! table, the Loongson VIOAPIC levels and the IPI paper. Every number here
//! is a prediction of the simulator (or a declared fitted point); no
//! published outcome is printed. A paper whose scenario did not run, or ran
//! nothing, has no section.

use std::collections::BTreeMap;

use dirq_sim::design::DesignKind;
use dirq_sim::vioapic::VioapicLevel;
use dirq_vmm::exits::VmxExit;

use crate::common::format::compact_number;
use crate::common::format::ns_to_us;
use crate::common::views::{SimRun, SimScenario};
use crate::report::present::charts::{auto_scale, exit_bars, exit_table};
use crate::report::present::data::{
    Axis, Cell, Chart, Figure, NamedValues, Scale, Section, Series, SeriesKey, SeriesStyle, Unit,
};
use crate::report::present::data::{Table, TableRow};
use crate::report::present::scenarios::throughput_cell;
use dirq_stats::{f64_of, ratio};

/// One paper: its scenario, its title, and the builder of its figures.
struct Paper {
    scenario: &'static str,
    title: &'static str,
    /// What the paper's table or figure shows, for the intro.
    shape: &'static str,
    /// The fitted point, when the paper has one (an input, not a prediction).
    fitted: Option<&'static str>,
    figures: fn(&SimScenario, &[String]) -> Vec<Figure>,
}

const PAPERS: [Paper; 7] = [
    Paper {
        scenario: "did-udp-rx",
        title: "DID: exits while receiving UDP",
        shape: "the paper's UDP table: exits per second by reason and time in guest, per packet \
                rate and design",
        fitted: Some(
            "vanilla's column is the calibration table the did-2015 profile's fitted values \
             were fitted to (docs/calibration.md); DID's is a prediction",
        ),
        figures: udp_figures,
    },
    Paper {
        scenario: "did-cyclictest",
        title: "DID: cyclictest latency density",
        shape: "the paper's latency density: how the timer latencies of each design spread",
        fitted: None,
        figures: cyclictest_figures,
    },
    Paper {
        scenario: "did-memcached",
        title: "DID: memcached peak throughput within QoS",
        shape: "the paper's memcached table: the peak requests/s that still meets the QoS, for \
                PV, PV-DID, SR-IOV, SR-IOV-DID, bare metal and each NAPI weight",
        fitted: None,
        figures: memcached_figures,
    },
    Paper {
        scenario: "did-voip",
        title: "DID: VoIP call setup",
        shape: "the paper's VoIP table: calls per setup-latency bucket, call rate and INVITE \
                retransmissions per design",
        fitted: None,
        figures: voip_figures,
    },
    Paper {
        scenario: "eli-2012",
        title: "ELI: throughput against bare metal",
        shape: "the ELI paper's table: each workload's throughput under the baseline, ELI \
                delivery only, full ELI and bare metal, and its share of bare metal",
        fitted: None,
        figures: eli_figures,
    },
    Paper {
        scenario: "loongson-vioapic",
        title: "Loongson VIOAPIC: the cost of an interrupt at each level",
        shape: "the paper's comparison of the four controller levels: cycles per interrupt and \
                seconds per million interrupts",
        fitted: Some(
            "the userspace level is the fitted point: its calibration input is 91,769 cycles \
             per interrupt (76.48 s per million), and the profile's userspace write cost is \
             fitted to it; kernel, ro-page and pv are predictions",
        ),
        figures: vioapic_figures,
    },
    Paper {
        scenario: "ipi-blog",
        title: "IPIs: time and CPU burned per target and idle mode",
        shape: "the IPI paper's table: the benchmark's total time for each target (same node, \
                cross node, all CPUs) and idle mode (HLT, guest polling, host halt polling), \
                with the CPU it burned",
        fitted: None,
        figures: ipi_figures,
    },
];

/// The paper sections for the scenarios in `results`, in the papers'
/// order; `seed` goes into the commands that repeat them.
pub fn paper_sections(results: &[SimScenario], seed: u64) -> Vec<Section> {
    PAPERS
        .iter()
        .filter_map(|paper| {
            let result = results.iter().find(|r| r.scenario == paper.scenario)?;
            let command = format!("dirq sim {} --seed {seed}", paper.scenario);
            let figures = (paper.figures)(result, std::slice::from_ref(&command));
            if figures.is_empty() {
                return None;
            }
            let mut intro = vec![format!(
                "The simulator's predictions (`{command}`), drawn in the shape of {}. These are \
                 not the paper's measurements, and none of its outcomes is shown here.",
                paper.shape
            )];
            intro.extend(
                paper
                    .fitted
                    .map(|fitted| format!("Fitted, not predicted: {fitted}.")),
            );
            Some(Section {
                id: format!("paper-{}", paper.scenario),
                title: format!("Paper: {} ({})", paper.title, paper.scenario),
                intro,
                figures,
                tables: Vec::new(),
            })
        })
        .collect()
}

fn param<'a>(run: &'a SimRun, key: &str) -> Option<&'a str> {
    run.params.get(key)?.as_str()
}

fn number_param(run: &SimRun, key: &str) -> Option<f64> {
    run.params.get(key)?.as_f64()
}

/// What a row of [`group_bars`] stands for: the name its segment takes
/// in the legend, and its colour.
trait BarGroup: PartialEq {
    fn legend(&self) -> String;
    fn key(&self) -> SeriesKey;
}

impl BarGroup for DesignKind {
    fn legend(&self) -> String {
        self.name().to_string()
    }

    fn key(&self) -> SeriesKey {
        SeriesKey::Design(*self)
    }
}

impl BarGroup for VioapicLevel {
    fn legend(&self) -> String {
        self.name().to_string()
    }

    fn key(&self) -> SeriesKey {
        SeriesKey::Variant
    }
}

/// An idle mode, as the scenario names it.
impl BarGroup for String {
    fn legend(&self) -> String {
        self.clone()
    }

    fn key(&self) -> SeriesKey {
        SeriesKey::Variant
    }
}

/// One bar per row, its only segment named by the row's group (a design,
/// a VIOAPIC level, an idle mode), so every group keeps its colour and the
/// legend names the groups.
fn group_bars<G: BarGroup>(value_label: &str, rows: &[(String, G, f64)]) -> Chart {
    let mut groups: Vec<&G> = Vec::new();
    for (_, group, _) in rows {
        if !groups.contains(&group) {
            groups.push(group);
        }
    }
    let stacks = groups
        .into_iter()
        .map(|group| NamedValues {
            name: group.legend(),
            key: group.key(),
            values: rows
                .iter()
                .map(|(_, row_group, value)| if row_group == group { *value } else { 0.0 })
                .collect(),
        })
        .collect();
    Chart::Bars {
        value_label: value_label.to_string(),
        categories: rows.iter().map(|(label, _, _)| label.clone()).collect(),
        stacks,
    }
}

fn table(columns: &[&str], rows: Vec<Vec<Cell>>) -> Table {
    Table {
        title: String::new(),
        columns: columns.iter().map(|c| c.to_string()).collect(),
        rows: rows.into_iter().map(TableRow::new).collect(),
    }
}

fn figure(
    id: &str,
    title: &str,
    caption: &str,
    commands: &[String],
    chart: Chart,
    table: Table,
) -> Figure {
    Figure {
        id: id.to_string(),
        title: title.to_string(),
        caption: caption.to_string(),
        commands: commands.to_vec(),
        chart,
        table,
    }
}

fn rate_text(run: &SimRun) -> String {
    run.rate().map_or_else(String::new, |(_, rate)| {
        format!("{} pps", compact_number(rate))
    })
}

fn udp_figures(result: &SimScenario, commands: &[String]) -> Vec<Figure> {
    let mut runs: Vec<&SimRun> = result.runs.iter().collect();
    runs.sort_by(|a, b| {
        let rate = |run: &SimRun| run.rate().map_or(0.0, |(_, rate)| rate);
        rate(a).total_cmp(&rate(b))
    });
    let entries: Vec<(String, BTreeMap<VmxExit, f64>)> = runs
        .iter()
        .map(|run| {
            let label = format!("{} · {}", rate_text(run), run.design.name());
            (label, run.exits_by_reason_per_s.clone())
        })
        .collect();
    let chart = exit_bars("exits per second", &entries);
    if !chart.has_data() {
        return Vec::new();
    }
    let mut table = exit_table("rate · design", &chart, "exits/s");
    table.columns.push("time in guest".into());
    for (row, run) in table.rows.iter_mut().zip(&runs) {
        row.cells
            .push(Cell::number(run.time_in_guest, Unit::Fraction));
    }
    vec![figure(
        "paper-did-udp-rx-exits",
        "Exits per second by VMX reason, per packet rate and design",
        "One bar per rate and design, its segments the exit reasons, as the paper's table \
         breaks the exits down; the table adds the time in guest.",
        commands,
        chart,
        table,
    )]
}

fn cyclictest_figures(result: &SimScenario, commands: &[String]) -> Vec<Figure> {
    let runs: Vec<(&SimRun, u64)> = result
        .runs
        .iter()
        .map(|run| (run, run.latency_histogram.iter().map(|b| b.count).sum()))
        .filter(|(_, samples)| *samples > 0)
        .collect();
    if runs.is_empty() {
        return Vec::new();
    }
    // One line per design through its buckets' shares: designs whose
    // latencies coincide (DID and bare metal) are meant to overlap.
    let series: Vec<Series> = runs
        .iter()
        .map(|(run, samples)| {
            let points = run
                .latency_histogram
                .iter()
                .filter(|b| b.count > 0)
                .map(|b| [ns_to_us(f64_of(b.le_ns)), ratio(b.count, *samples) * 100.0])
                .collect();
            Series::new(run.design.name(), SeriesStyle::Line, points)
                .keyed(SeriesKey::Design(run.design))
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
    let rows = runs
        .iter()
        .map(|(run, samples)| {
            let latency = |pick: fn(&crate::common::views::Latency) -> f64| {
                Cell::maybe(run.latency_ns.as_ref().map(|l| ns_to_us(pick(l))), Unit::Us)
            };
            vec![
                Cell::text(run.design.name()),
                Cell::count(*samples),
                latency(|l| l.mean),
                latency(|l| l.p50),
                latency(|l| l.p99),
                latency(|l| l.max),
            ]
        })
        .collect();
    vec![figure(
        "paper-did-cyclictest-density",
        "Latency density per design",
        "The density of each design's latencies, timer expiry to the user-level handler: for \
         each logarithmic bucket (5% wide) with samples, the design's share of its samples \
         at the bucket's upper bound.",
        commands,
        chart,
        table(
            &[
                "design",
                "samples",
                "mean (us)",
                "p50 (us)",
                "p99 (us)",
                "max (us)",
            ],
            rows,
        ),
    )]
}

/// The memcached table's row names: the design on its transport.
fn memcached_configuration(run: &SimRun) -> String {
    match (run.design, param(run, "transport")) {
        (DesignKind::Bare, _) => "bare".into(),
        (DesignKind::Vanilla, Some("pv")) => "PV".into(),
        (DesignKind::Did, Some("pv")) => "PV-DID".into(),
        (DesignKind::Vanilla, Some("sriov")) => "SR-IOV".into(),
        (DesignKind::Did, Some("sriov")) => "SR-IOV-DID".into(),
        (design, Some(transport)) => format!("{design} · {transport}"),
        (design, None) => design.name().into(),
    }
}

fn memcached_figures(result: &SimScenario, commands: &[String]) -> Vec<Figure> {
    let weights_vary = result
        .varying_params()
        .iter()
        .any(|key| key == "napi_weight");
    let label = |run: &SimRun| {
        let configuration = memcached_configuration(run);
        match number_param(run, "napi_weight").filter(|_| weights_vary) {
            Some(weight) => format!("{configuration} · NAPI weight {weight}"),
            None => configuration,
        }
    };
    let bare = result
        .runs
        .iter()
        .find(|run| run.design == DesignKind::Bare)
        .and_then(SimRun::throughput_value);
    let rows: Vec<(String, DesignKind, f64, &SimRun)> = result
        .runs
        .iter()
        .filter_map(|run| Some((label(run), run.design, run.throughput_value()?, run)))
        .collect();
    if rows.is_empty() {
        return Vec::new();
    }
    let bars: Vec<(String, DesignKind, f64)> = rows
        .iter()
        .map(|(l, d, v, _)| (l.clone(), *d, *v))
        .collect();
    let cells = rows
        .iter()
        .map(|(label, _, value, run)| {
            vec![
                Cell::text(label.clone()),
                Cell::number(*value, Unit::Count),
                Cell::maybe(bare.map(|bare| value / bare), Unit::Fraction),
                Cell::maybe(run.latency_ns.as_ref().map(|l| ns_to_us(l.p99)), Unit::Us),
            ]
        })
        .collect();
    vec![figure(
        "paper-did-memcached-peak",
        "Peak requests/s meeting the QoS, per configuration",
        "One bar per configuration, coloured by design.",
        commands,
        group_bars("peak requests/s within QoS", &bars),
        table(
            &[
                "configuration",
                "requests/s",
                "of bare metal",
                "latency p99 (us)",
            ],
            cells,
        ),
    )]
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

fn voip_figures(result: &SimScenario, commands: &[String]) -> Vec<Figure> {
    let runs: Vec<(&SimRun, String, &BTreeMap<String, u64>)> = result
        .runs
        .iter()
        .zip(result.labels())
        .filter_map(|(run, label)| Some((run, label, run.paper.setup_ms_buckets.as_ref()?)))
        .collect();
    let mut buckets: Vec<&String> = runs.iter().flat_map(|(_, _, b)| b.keys()).collect();
    buckets.sort_by(|a, b| bucket_start(a).total_cmp(&bucket_start(b)).then(a.cmp(b)));
    buckets.dedup();
    if buckets.is_empty() {
        return Vec::new();
    }
    let chart = Chart::Bars {
        value_label: "calls".into(),
        categories: runs.iter().map(|(_, label, _)| label.clone()).collect(),
        stacks: buckets
            .iter()
            .map(|bucket| NamedValues {
                name: format!("{bucket} ms"),
                key: SeriesKey::Variant,
                values: runs
                    .iter()
                    .map(|(_, _, b)| f64_of(b.get(*bucket).copied().unwrap_or(0)))
                    .collect(),
            })
            .collect(),
    };
    let mut columns: Vec<String> = vec!["design".into()];
    columns.extend(buckets.iter().map(|b| format!("{b} ms")));
    columns.extend([
        "call rate (calls/s)".into(),
        "INVITE retransmissions".into(),
    ]);
    let rows = runs
        .iter()
        .map(|(run, label, b)| {
            let mut cells = vec![Cell::text(label.clone())];
            cells.extend(
                buckets
                    .iter()
                    .map(|bucket| Cell::count(b.get(*bucket).copied().unwrap_or(0))),
            );
            cells.push(Cell::maybe(run.paper.call_rate, Unit::Count));
            cells.push(
                run.paper
                    .invite_retransmissions
                    .map_or_else(|| Cell::text("-"), Cell::count),
            );
            TableRow::new(cells)
        })
        .collect();
    vec![figure(
        "paper-did-voip-setup",
        "Calls per setup-latency bucket, per design",
        "One bar per design, its segments the calls whose setup took that long.",
        commands,
        chart,
        Table {
            title: String::new(),
            columns,
            rows,
        },
    )]
}

/// The ELI table's column names for the designs it compares.
fn eli_design(design: DesignKind) -> String {
    match design {
        DesignKind::Vanilla => "baseline".into(),
        DesignKind::EliDelivery => "ELI delivery only".into(),
        DesignKind::Eli => "ELI".into(),
        DesignKind::Bare => "bare metal".into(),
        other => other.name().into(),
    }
}

fn eli_figures(result: &SimScenario, commands: &[String]) -> Vec<Figure> {
    // The paper's table: each workload at the NIC's own coalescing and no
    // added computation; the sweeps' points have a section of their own.
    let table_runs: Vec<&SimRun> = result
        .runs
        .iter()
        .filter(|run| {
            !run.params.contains_key("itr_us")
                && !run.params.contains_key("compute_cycles_per_byte")
        })
        .collect();
    let mut workloads: Vec<&str> = Vec::new();
    for workload in table_runs.iter().filter_map(|r| param(r, "workload")) {
        if !workloads.contains(&workload) {
            workloads.push(workload);
        }
    }
    let mut bars = Vec::new();
    let mut rows = Vec::new();
    for workload in workloads {
        let runs: Vec<&SimRun> = table_runs
            .iter()
            .copied()
            .filter(|run| param(run, "workload") == Some(workload))
            .collect();
        let bare = runs
            .iter()
            .find(|run| run.design == DesignKind::Bare)
            .and_then(|run| run.throughput_value());
        for run in runs {
            let Some(value) = run.throughput_value() else {
                continue;
            };
            let share = bare.filter(|bare| *bare > 0.0).map(|bare| value / bare);
            let label = format!("{workload} · {}", eli_design(run.design));
            if let Some(share) = share {
                bars.push((label.clone(), run.design, share * 100.0));
            }
            rows.push(vec![
                Cell::text(label),
                throughput_cell(run),
                Cell::maybe(share, Unit::Fraction),
            ]);
        }
    }
    if bars.is_empty() {
        return Vec::new();
    }
    vec![figure(
        "paper-eli-2012-throughput",
        "Throughput as a share of bare metal, per workload and design",
        "One bar per workload and design, coloured by design (baseline is vanilla KVM).",
        commands,
        group_bars("throughput, % of bare metal", &bars),
        table(&["workload · design", "throughput", "of bare metal"], rows),
    )]
}

fn vioapic_figures(result: &SimScenario, commands: &[String]) -> Vec<Figure> {
    let runs: Vec<(&SimRun, VioapicLevel, f64)> = result
        .runs
        .iter()
        .filter_map(|run| Some((run, run.vioapic_level()?, run.paper.cycles_per_interrupt?)))
        .collect();
    if runs.is_empty() {
        return Vec::new();
    }
    let userspace = runs
        .iter()
        .find(|(_, level, _)| *level == VioapicLevel::Userspace)
        .map(|(_, _, cycles)| *cycles);
    let bars: Vec<(String, VioapicLevel, f64)> = runs
        .iter()
        .map(|(_, level, cycles)| (level.name().to_string(), *level, *cycles))
        .collect();
    let rows = runs
        .iter()
        .map(|(run, level, cycles)| {
            let per_interrupt = run.throughput_value().filter(|rate| *rate > 0.0);
            vec![
                Cell::text(level.name()),
                Cell::maybe(
                    per_interrupt.map(|rate| run.exits_per_s / rate),
                    Unit::Count,
                ),
                Cell::number(*cycles, Unit::Count),
                Cell::maybe(run.paper.seconds_per_million, Unit::Seconds),
                Cell::maybe(userspace.map(|u| u / cycles), Unit::Times),
                Cell::text(if *level == VioapicLevel::Userspace {
                    "fitted point"
                } else {
                    "prediction"
                }),
            ]
        })
        .collect();
    vec![figure(
        "paper-loongson-vioapic-levels",
        "Host cycles per interrupt at each controller level",
        "One bar per level: injection, the handler, the device's read and the eight controller \
         accesses, each an exit or a memory access by the level. Seconds per million scale the \
         simulated interrupts to the paper's million.",
        commands,
        group_bars("cycles per interrupt", &bars),
        table(
            &[
                "level",
                "exits per interrupt",
                "cycles per interrupt",
                "seconds per million",
                "speed-up over userspace",
                "status",
            ],
            rows,
        ),
    )]
}

fn ipi_figures(result: &SimScenario, commands: &[String]) -> Vec<Figure> {
    let designs_vary = result
        .runs
        .iter()
        .any(|run| run.design != result.runs[0].design);
    let label = |run: &SimRun| {
        let mut parts = vec![param(run, "target").unwrap_or("?").to_string()];
        if designs_vary {
            parts.push(run.design.name().to_string());
        }
        parts.join(" · ")
    };
    let runs: Vec<(&SimRun, String, f64)> = result
        .runs
        .iter()
        .filter_map(|run| Some((run, param(run, "idle")?.to_string(), run.paper.total_s?)))
        .collect();
    if runs.is_empty() {
        return Vec::new();
    }
    let row_label = |run: &SimRun, idle: &str| format!("{} · {idle}", label(run));
    let time: Vec<(String, String, f64)> = runs
        .iter()
        .map(|(run, idle, total)| (row_label(run, idle), idle.clone(), *total))
        .collect();
    let cpu: Vec<(String, String, f64)> = runs
        .iter()
        .filter_map(|(run, idle, _)| {
            Some((row_label(run, idle), idle.clone(), run.cpu_busy? * 100.0))
        })
        .collect();
    let rows = |value: &dyn Fn(&SimRun, f64) -> Cell| -> Vec<Vec<Cell>> {
        runs.iter()
            .map(|(run, idle, total)| {
                vec![
                    Cell::text(label(run)),
                    Cell::text(idle.clone()),
                    value(run, *total),
                ]
            })
            .collect()
    };
    // The calls' total differ in the third decimal between idle modes.
    let time_rows =
        rows(&|_, total| Cell::number(total, Unit::Seconds).shown_as(format!("{total:.3}")));
    let cpu_rows = rows(&|run, _| Cell::maybe(run.cpu_busy, Unit::Fraction));
    let mut figures = vec![figure(
        "paper-ipi-blog-time",
        "Total time of the benchmark's calls, per target and idle mode",
        "One bar per target and idle mode, coloured by idle mode.",
        commands,
        group_bars("total time (s)", &time),
        table(&["target", "idle", "total (s)"], time_rows),
    )];
    if !cpu.is_empty() {
        figures.push(figure(
            "paper-ipi-blog-cpu",
            "CPU burned, per target and idle mode",
            "The share of the VM's cores' time not asleep: guest, host and host polling all \
             burn the core.",
            commands,
            group_bars("CPU busy (% of the VM's cores)", &cpu),
            table(&["target", "idle", "CPU busy"], cpu_rows),
        ));
    }
    figures
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::present::figures::render_svg;
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

    fn scenario(name: &str, runs: Vec<Value>) -> SimScenario {
        SimScenario::from_raw(&json!({"scenario": name, "runs": runs})).expect("contract parses")
    }

    fn throughput(value: f64, unit: &str) -> Value {
        json!({"throughput": {"value": value, "unit": unit}})
    }

    fn sections(results: &[SimScenario]) -> Vec<Section> {
        let sections = paper_sections(results, 7);
        for figure in sections.iter().flat_map(|s| &s.figures) {
            render_svg(&figure.chart).unwrap_or_else(|err| panic!("{}: {err}", figure.id));
            assert!(
                !figure.table.rows.is_empty(),
                "{}: a table below",
                figure.id
            );
        }
        sections
    }

    fn only(results: &[SimScenario]) -> Section {
        let mut sections = sections(results);
        assert_eq!(sections.len(), 1);
        sections.remove(0)
    }

    #[test]
    fn absent_or_empty_scenarios_have_no_section_and_every_section_says_prediction() {
        assert!(sections(&[]).is_empty());
        assert!(sections(&[scenario("loongson-vioapic", vec![])]).is_empty());
        assert!(
            sections(&[scenario("unknown", vec![run("did", json!({}), json!({}))])]).is_empty()
        );
        let section = only(&[scenario(
            "did-udp-rx",
            vec![run("vanilla", json!({"rate_pps": 100000}), json!({}))],
        )]);
        assert_eq!(section.id, "paper-did-udp-rx");
        assert!(section.intro[0].contains("predictions") && section.intro[0].contains("--seed 7"));
        assert!(section.intro[1].starts_with("Fitted"));
    }

    #[test]
    fn the_udp_table_orders_bars_by_rate_and_adds_time_in_guest() {
        let section = only(&[scenario(
            "did-udp-rx",
            vec![
                run("vanilla", json!({"rate_pps": 250000}), json!({})),
                run("vanilla", json!({"rate_pps": 100000}), json!({})),
                run("did", json!({"rate_pps": 100000}), json!({})),
            ],
        )]);
        let table = &section.figures[0].table;
        let labels: Vec<&str> = table
            .rows
            .iter()
            .map(|r| r.cells[0].text.as_str())
            .collect();
        assert_eq!(
            labels,
            ["100K pps · vanilla", "100K pps · did", "250K pps · vanilla"]
        );
        assert_eq!(
            table.columns.last().map(String::as_str),
            Some("time in guest")
        );
        assert_eq!(
            table.rows[0].cells.last().map(|cell| cell.text.as_str()),
            Some("90.00%")
        );
    }

    #[test]
    fn cyclictest_density_is_each_buckets_share() {
        let histogram = json!({"latency_ns": {"samples": 4, "mean": 3.0, "min": 1, "p50": 2,
            "p90": 4, "p99": 4, "max": 4,
            "histogram": [{"le_ns": 1000, "count": 1}, {"le_ns": 2000, "count": 3}]}});
        let section = only(&[scenario(
            "did-cyclictest",
            vec![
                run("did", json!({}), histogram),
                run("vanilla", json!({}), json!({})),
            ],
        )]);
        let Chart::Xy { series, .. } = &section.figures[0].chart else {
            panic!("a density is a line per design");
        };
        assert_eq!(series.len(), 1, "a run without a histogram draws nothing");
        assert_eq!(series[0].points, vec![[1.0, 25.0], [2.0, 75.0]]);
        assert_eq!(section.figures[0].table.rows[0].cells[1], "4");
    }

    #[test]
    fn memcached_rows_are_named_as_in_the_paper_with_their_share_of_bare_metal() {
        let rps = |v| throughput(v, "requests/s");
        let section = only(&[scenario(
            "did-memcached",
            vec![
                run(
                    "vanilla",
                    json!({"transport": "pv", "napi_weight": 64}),
                    rps(50.0),
                ),
                run(
                    "did",
                    json!({"transport": "sriov", "napi_weight": 64}),
                    rps(90.0),
                ),
                run(
                    "did",
                    json!({"transport": "sriov", "napi_weight": 16}),
                    rps(80.0),
                ),
                run("bare", json!({"napi_weight": 64}), rps(100.0)),
            ],
        )]);
        let rows: Vec<(&str, &str)> = section.figures[0]
            .table
            .rows
            .iter()
            .map(|r| (r.cells[0].text.as_str(), r.cells[2].text.as_str()))
            .collect();
        assert_eq!(
            rows,
            [
                ("PV · NAPI weight 64", "50.00%"),
                ("SR-IOV-DID · NAPI weight 64", "90.00%"),
                ("SR-IOV-DID · NAPI weight 16", "80.00%"),
                ("bare · NAPI weight 64", "100.00%")
            ]
        );
        let Chart::Bars { stacks, .. } = &section.figures[0].chart else {
            panic!("bars");
        };
        let designs: Vec<&str> = stacks.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(designs, ["vanilla", "did", "bare"], "one colour per design");
        assert_eq!(stacks[1].values, vec![0.0, 90.0, 80.0, 0.0]);
    }

    #[test]
    fn voip_buckets_keep_their_latency_order() {
        let voip = |low: u64| {
            json!({"setup_ms_buckets": {">200": 1, "10-100": 2, "<10": low, "100-200": 0},
                   "call_rate": 99.5, "invite_retransmissions": 3})
        };
        let section = only(&[scenario(
            "did-voip",
            vec![
                run("vanilla", json!({}), voip(5)),
                run("did", json!({}), voip(9)),
            ],
        )]);
        let table = &section.figures[0].table;
        assert_eq!(
            table.columns,
            [
                "design",
                "<10 ms",
                "10-100 ms",
                "100-200 ms",
                ">200 ms",
                "call rate (calls/s)",
                "INVITE retransmissions"
            ]
        );
        assert_eq!(
            table.rows[1].cells,
            ["did", "9", "2", "0", "1", "99.5", "3"]
        );
    }

    #[test]
    fn eli_shares_are_of_the_same_workloads_bare_metal() {
        let section = only(&[scenario(
            "eli-2012",
            vec![
                run(
                    "vanilla",
                    json!({"workload": "netperf"}),
                    throughput(4.0, "Gbit/s"),
                ),
                run(
                    "bare",
                    json!({"workload": "netperf"}),
                    throughput(8.0, "Gbit/s"),
                ),
                run(
                    "eli",
                    json!({"workload": "apache"}),
                    throughput(90.0, "requests/s"),
                ),
                run(
                    "bare",
                    json!({"workload": "apache"}),
                    throughput(100.0, "requests/s"),
                ),
                // Sweep points are not rows of the paper's table.
                run(
                    "vanilla",
                    json!({"workload": "netperf", "itr_us": 24}),
                    throughput(1.0, "Gbit/s"),
                ),
                run(
                    "bare",
                    json!({"workload": "netperf", "compute_cycles_per_byte": 60}),
                    throughput(0.5, "Gbit/s"),
                ),
            ],
        )]);
        assert_eq!(section.figures[0].table.rows.len(), 4);
        let rows: Vec<Vec<Cell>> = section.figures[0]
            .table
            .rows
            .iter()
            .map(|r| r.cells.clone())
            .collect();
        assert_eq!(rows[0], ["netperf · baseline", "4.00 Gbit/s", "50.00%"]);
        assert_eq!(rows[2], ["apache · ELI", "90.0 requests/s", "90.00%"]);
    }

    #[test]
    fn vioapic_levels_show_exits_per_interrupt_and_mark_the_fitted_point() {
        let level = |level: &str, cycles: f64, exits: f64| {
            run(
                "vanilla",
                json!({"level": level, "workload": "vioapic"}),
                json!({"cycles_per_interrupt": cycles, "seconds_per_million": cycles / 1200.0,
                       "exits_per_s": exits * 1000.0, "throughput": {"value": 1000.0, "unit": "interrupts/s"}}),
            )
        };
        let section = only(&[scenario(
            "loongson-vioapic",
            vec![level("userspace", 4000.0, 9.0), level("pv", 1000.0, 3.0)],
        )]);
        let rows: Vec<Vec<Cell>> = section.figures[0]
            .table
            .rows
            .iter()
            .map(|r| r.cells.clone())
            .collect();
        assert_eq!(
            rows[0],
            ["userspace", "9.00", "4K", "3.33", "1.00x", "fitted point"]
        );
        assert_eq!(rows[1], ["pv", "3.00", "1K", "0.83", "4.00x", "prediction"]);
    }

    #[test]
    fn ipi_runs_show_time_and_cpu_per_target_and_idle_mode() {
        let ipi = |target: &str, idle: &str, total: f64| {
            run(
                "vanilla",
                json!({"target": target, "idle": idle}),
                json!({"total_s": total}),
            )
        };
        let section = only(&[scenario(
            "ipi-blog",
            vec![
                ipi("same-node", "halt", 1.5),
                ipi("same-node", "poll", 0.5),
                ipi("all", "halt", 9.0),
            ],
        )]);
        assert_eq!(section.figures.len(), 2);
        let time = &section.figures[0].table.rows[2].cells;
        assert_eq!(time, &["all", "halt", "9.000"]);
        assert_eq!(section.figures[1].table.rows[0].cells[2], "50.00%");
        let Chart::Bars { stacks, .. } = &section.figures[0].chart else {
            panic!("bars");
        };
        assert_eq!(
            stacks.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["halt", "poll"]
        );
    }
}
