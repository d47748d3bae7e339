//! The report's first section: what it found, in sentences with their
//! numbers, and the design x workload pivots they come from (measured and
//! predicted side by side).

use dirq_sim::policy::PolicyKind;
use dirq_vmm::config::{GuestIdle, Irqchip};
use dirq_vmm::probe::ProbeReport;

use super::charts::{format_percent, format_value, ns_to_us, spread_us};
use super::checks::{Extrapolated, ModelChecks};
use super::data::{
    Axis, Chart, Figure, GroupedSeries, Scale, Section, SeriesKey, Spread, Table, TableRow,
};
use super::model::Metric;
use super::real::{spread_cell, RealCase};
use super::views::SimScenario;
use crate::designs::DesignTables;

/// Everything the conclusions draw on; each part is absent when its step
/// did not run or failed.
pub struct Findings<'a> {
    pub probe: Option<&'a ProbeReport>,
    pub cases: &'a [RealCase],
    pub checks: Option<&'a ModelChecks>,
    pub designs: Option<&'a DesignTables>,
    pub simulated: &'a [SimScenario],
}

/// The designs the pivots compare, in column order.
const DESIGNS: [PolicyKind; 4] = [
    PolicyKind::Vanilla,
    PolicyKind::Apicv,
    PolicyKind::Eli,
    PolicyKind::Did,
];
/// The column of the real runs.
pub const MEASURED: &str = "measured (KVM LAPIC)";

/// A metric of the pivots: its name, how to read it off a measurement and
/// a prediction, and how to print it.
struct PivotMetric {
    id: &'static str,
    title: &'static str,
    unit: &'static str,
    measured: fn(&Extrapolated) -> Option<Spread>,
    predicted: fn(&Extrapolated) -> Option<f64>,
    format: fn(f64) -> String,
}

const PIVOTS: [PivotMetric; 4] = [
    PivotMetric {
        id: "exits",
        title: "Exits per interrupt",
        unit: "exits per interrupt",
        measured: |e| e.measured.as_ref()?.exits_per_interrupt,
        predicted: |e| e.exits_per_interrupt,
        format: format_value,
    },
    PivotMetric {
        id: "latency",
        title: "Latency p50 (one way)",
        unit: "latency p50 (us)",
        measured: |e| e.measured.as_ref()?.latency_p50_ns.map(spread_us),
        predicted: |e| e.latency_p50_ns.map(ns_to_us),
        format: format_value,
    },
    PivotMetric {
        id: "guest-time",
        title: "Time in guest",
        unit: "time in guest",
        measured: |e| e.measured.as_ref()?.time_in_guest,
        predicted: |e| Some(e.time_in_guest),
        format: format_percent,
    },
    PivotMetric {
        id: "cpu",
        title: "Host CPU burned",
        unit: "host cores busy",
        measured: |e| e.measured.as_ref()?.cpu_cores,
        predicted: |e| e.cpu_cores,
        format: |v| format!("{v:.2}"),
    },
];

/// Workloads in the order they were first extrapolated.
fn workloads(extrapolation: &[Extrapolated]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for e in extrapolation {
        if !names.contains(&e.workload) {
            names.push(e.workload.clone());
        }
    }
    names
}

fn find<'a>(
    extrapolation: &'a [Extrapolated],
    workload: &str,
    design: PolicyKind,
) -> Option<&'a Extrapolated> {
    extrapolation
        .iter()
        .find(|e| e.workload == workload && e.policy == design.name())
}

/// One design x workload pivot: a grouped chart (measured first, then each
/// design's prediction) with its table below. None when nothing has the metric.
fn pivot_figure(metric: &PivotMetric, extrapolation: &[Extrapolated]) -> Option<Figure> {
    let workloads = workloads(extrapolation);
    let mut series = vec![GroupedSeries {
        name: MEASURED.into(),
        key: SeriesKey::Measured,
        values: workloads
            .iter()
            .map(|w| find(extrapolation, w, PolicyKind::Vanilla).and_then(metric.measured))
            .collect(),
    }];
    series.extend(DESIGNS.iter().map(|design| {
        GroupedSeries {
            name: design.name().into(),
            key: SeriesKey::Design(*design),
            values: workloads
                .iter()
                .map(|w| {
                    find(extrapolation, w, *design)
                        .and_then(metric.predicted)
                        .and_then(|v| Spread::of([v]))
                })
                .collect(),
        }
    }));
    // Workloads with no number of this metric would be empty rows.
    let keep: Vec<bool> = (0..workloads.len())
        .map(|row| series.iter().any(|s| s.values[row].is_some()))
        .collect();
    let categories: Vec<String> = workloads
        .into_iter()
        .zip(&keep)
        .filter_map(|(w, keep)| keep.then_some(w))
        .collect();
    for s in &mut series {
        s.values = std::mem::take(&mut s.values)
            .into_iter()
            .zip(&keep)
            .filter_map(|(v, keep)| keep.then_some(v))
            .collect();
    }
    let mut columns = vec!["workload".to_string()];
    columns.extend(series.iter().map(|s| s.name.clone()));
    let rows = categories
        .iter()
        .enumerate()
        .map(|(row, workload)| {
            let mut cells = vec![workload.clone()];
            cells.extend(
                series
                    .iter()
                    .map(|s| spread_cell(s.values[row], metric.format)),
            );
            TableRow::new(cells)
        })
        .collect();
    let chart = Chart::Grouped {
        value_axis: Axis {
            label: metric.unit.into(),
            scale: Scale::Linear,
        },
        categories,
        series,
    };
    chart.has_data().then(|| Figure {
        id: format!("conclusions-{}", metric.id),
        title: format!("{}: measured, and predicted per design", metric.title),
        caption: format!(
            "One group per workload. \"{MEASURED}\" is the real run on this host (median, \
             whisker over the runs); the designs are the simulator's predictions for the same \
             workload with this host's calibrated costs (vanilla is KVM's emulated LAPIC, the \
             path measured)."
        ),
        commands: Vec::new(),
        table: Table {
            title: String::new(),
            columns,
            rows,
        },
        chart,
    })
}

/// "kernel + irqfd + PV EOI" is fastest with the guest halted: the real
/// irq-latency paths compared by median p50.
fn fastest_path_sentences(cases: &[RealCase]) -> Vec<String> {
    let mut sentences = Vec::new();
    for (idle, state) in [(GuestIdle::Busy, "running"), (GuestIdle::Halt, "halted")] {
        let paths: Vec<(&RealCase, Spread)> = cases
            .iter()
            .filter(|c| c.bench() == "irq-latency" && c.config.common.guest_idle == idle)
            .filter_map(|c| Some((c, c.p50()?)))
            .collect();
        let fastest = paths
            .iter()
            .min_by(|a, b| a.1.median.total_cmp(&b.1.median));
        let userspace = paths
            .iter()
            .find(|(c, _)| c.config.common.irqchip == Irqchip::Userspace);
        let name = |case: &RealCase| {
            case.label
                .split(" · ")
                .next()
                .unwrap_or(&case.label)
                .to_string()
        };
        match (fastest, userspace) {
            (Some((best, best_p50)), Some((slow, slow_p50))) if best.label != slow.label => {
                sentences.push(format!(
                    "Fastest interrupt path into a {state} vCPU here: {} with a p50 of {}, \
                     {:.1}x faster than the userspace irqchip ({}).",
                    name(best),
                    us(best_p50.median),
                    slow_p50.median / best_p50.median,
                    us(slow_p50.median)
                ));
            }
            (Some((best, best_p50)), _) => {
                let slowest = paths
                    .iter()
                    .max_by(|a, b| a.1.median.total_cmp(&b.1.median));
                if let Some((slow, slow_p50)) = slowest.filter(|(c, _)| c.label != best.label) {
                    sentences.push(format!(
                        "Fastest interrupt path into a {state} vCPU here: {} with a p50 of {}; \
                         the slowest, {}, takes {}.",
                        name(best),
                        us(best_p50.median),
                        name(slow),
                        us(slow_p50.median)
                    ));
                }
            }
            _ => {}
        }
    }
    sentences
}

/// "31.8 us", "6.68 ms": a latency in the unit that reads best.
fn us(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{} ms", format_value(ns / 1e6))
    } else {
        format!("{} us", format_value(ns / 1e3))
    }
}

/// "-23%": a sentence's percentage, whole.
fn whole_percent(fraction: f64) -> String {
    let percent = (fraction * 100.0).round();
    // -0.4% rounds to "-0%"; it is no change.
    format!("{}%", if percent == 0.0 { 0.0 } else { percent })
}

/// What each design would save against vanilla, over the extrapolated
/// workloads: the range of the exits saved and the median latency change.
fn design_sentences(extrapolation: &[Extrapolated]) -> Vec<String> {
    let workloads = workloads(extrapolation);
    DESIGNS[1..]
        .iter()
        .filter_map(|design| {
            let changes = |pick: fn(&Extrapolated) -> Option<f64>| {
                Spread::of(workloads.iter().filter_map(|w| {
                    let vanilla = pick(find(extrapolation, w, PolicyKind::Vanilla)?)?;
                    let this = pick(find(extrapolation, w, *design)?)?;
                    (vanilla > 0.0).then(|| (vanilla - this) / vanilla)
                }))
            };
            let exits = changes(|e| e.exits_per_interrupt)?;
            let mut sentence = format!(
                "{} would save {} to {} of the exits per interrupt (median {}) across {} workloads",
                design.name(),
                whole_percent(exits.min),
                whole_percent(exits.max),
                whole_percent(exits.median),
                exits.runs
            );
            if let Some(latency) = changes(|e| e.latency_p50_ns) {
                sentence.push_str(&format!(
                    " and change latency p50 by a median {}",
                    whole_percent(-latency.median)
                ));
            }
            sentence.push_str(" on this host, as the model predicts.");
            Some(sentence)
        })
        .collect()
}

/// Where the model can be trusted: per metric, how many predictions fell
/// within 20% of the measurement; trusted where two thirds did.
fn model_sentence(checks: &ModelChecks) -> Option<String> {
    let mut trusted = Vec::new();
    let mut missed = Vec::new();
    for metric in [
        Metric::ExitsPerInterrupt,
        Metric::LatencyP50Ns,
        Metric::TimeInGuest,
    ] {
        let of: Vec<_> = checks
            .comparisons
            .iter()
            .filter(|c| c.metric == metric)
            .collect();
        if of.is_empty() {
            continue;
        }
        let hits = of.iter().filter(|c| c.within_tolerance).count();
        let verdict = format!(
            "{} ({hits} of {} within 20%)",
            metric.label().trim_end_matches(" (us)"),
            of.len()
        );
        if 3 * hits >= 2 * of.len() {
            trusted.push(verdict);
        } else {
            missed.push(verdict);
        }
    }
    let trusted = match trusted.is_empty() {
        true => "The model is trusted for no metric here".to_string(),
        false => format!("The model is trusted for {}", trusted.join(", ")),
    };
    let missed = match missed.is_empty() {
        true => String::new(),
        false => format!(" and misses on {}", missed.join(", ")),
    };
    (!checks.comparisons.is_empty()).then(|| {
        format!("{trusted}{missed}; every miss is listed under \"Model against reality\".")
    })
}

/// The software-only designs' headline numbers.
fn software_design_sentences(designs: &DesignTables) -> Vec<String> {
    let mut sentences = Vec::new();
    if let Some(best) = designs.vioapic.as_ref().and_then(|t| {
        t.rows
            .iter()
            .max_by(|a, b| a.speedup_vs_userspace.total_cmp(&b.speedup_vs_userspace))
    }) {
        sentences.push(format!(
            "VIOAPIC: the {} level handles level-triggered interrupts {:.2}x as fast as the \
             userspace controller, with {} exits per interrupt.",
            best.mode,
            best.speedup_vs_userspace,
            format_value(best.exits_per_interrupt)
        ));
    }
    if let Some(table) = &designs.io_batch {
        let exits = |batched: bool| {
            table
                .rows
                .iter()
                .find(|r| r.batched == batched)
                .map(|r| r.exits_per_command)
        };
        if let (Some(plain), Some(batched)) = (exits(false), exits(true)) {
            sentences.push(format!(
                "Batched port I/O: {} exits per disk command instead of {} ({:.2}x the \
                 commands per second).",
                format_value(batched),
                format_value(plain),
                table.speedup
            ));
        }
    }
    sentences
}

/// On the DID testbed (simulation only): per scenario with a rate, time
/// in guest of each policy at the highest rate.
fn simulated_sentences(simulated: &[SimScenario]) -> Vec<String> {
    simulated
        .iter()
        .filter_map(|scenario| {
            let top = scenario
                .runs
                .iter()
                .filter_map(|run| run.rate())
                .map(|(_, rate)| rate)
                .fold(f64::NEG_INFINITY, f64::max);
            // The first run of each policy at that rate: runs that differ
            // in another parameter would repeat the policy.
            let mut at_top: Vec<String> = Vec::new();
            let mut seen: Vec<&str> = Vec::new();
            for run in &scenario.runs {
                if run.rate().is_some_and(|(_, rate)| rate == top) && !seen.contains(&&*run.policy)
                {
                    seen.push(&run.policy);
                    at_top.push(format!(
                        "{} {}",
                        run.policy,
                        whole_percent(run.time_in_guest)
                    ));
                }
            }
            (at_top.len() > 1).then(|| {
                format!(
                    "{} at {}/s: time in guest {}.",
                    scenario.scenario,
                    format_value(top),
                    at_top.join(", ")
                )
            })
        })
        .collect()
}

/// The section; it always exists, saying so when there is little to say.
pub fn conclusions_section(findings: &Findings) -> Section {
    let mut intro = Vec::new();
    if let Some(probe) = findings.probe {
        intro.push(format!(
            "One exit costs {} when the VMM handles it in userspace and {} when KVM \
             handles it: every exit a design saves is worth that much here.",
            us(probe.floors.userspace_exit_ns),
            us(probe.floors.kernel_exit_ns)
        ));
    }
    intro.extend(fastest_path_sentences(findings.cases));
    let extrapolation = findings
        .checks
        .map_or(&[][..], |c| c.extrapolation.as_slice());
    intro.extend(design_sentences(extrapolation));
    if let Some(sentence) = findings.checks.and_then(model_sentence) {
        intro.push(sentence);
    }
    if let Some(designs) = findings.designs {
        intro.extend(software_design_sentences(designs));
    }
    if let Some(repeats) = findings.cases.iter().map(|c| c.repeats.len()).max() {
        intro.push(if repeats > 1 {
            format!("Every real number is the median of {repeats} runs; tables give the range.")
        } else {
            "Every real number is a single run (--quick): no spread was measured.".into()
        });
    }
    let simulated = simulated_sentences(findings.simulated);
    if !simulated.is_empty() {
        intro.push(format!(
            "On the published DID testbed (did-2015 profile, simulated): {}",
            simulated.join(" ")
        ));
    }
    let figures = PIVOTS
        .iter()
        .filter_map(|metric| pivot_figure(metric, extrapolation))
        .collect();
    Section {
        id: "conclusions".into(),
        title: "Conclusions".into(),
        intro,
        figures,
        tables: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::checks::Measured;
    use super::*;
    use std::collections::BTreeMap;

    fn extrapolated(workload: &str, policy: PolicyKind, exits: f64, p50: f64) -> Extrapolated {
        Extrapolated {
            workload: workload.into(),
            policy: policy.name().into(),
            exits_per_interrupt: Some(exits),
            exits_per_interrupt_by_reason: BTreeMap::new(),
            latency_p50_ns: Some(p50),
            time_in_guest: 0.9,
            cpu_cores: Some(1.0),
            measured: (policy == PolicyKind::Vanilla).then(|| Measured {
                exits_per_interrupt: Spread::of([1.0, 1.2, 1.1]),
                latency_p50_ns: Spread::of([40_000.0]),
                time_in_guest: None,
                cpu_cores: Spread::of([1.0]),
            }),
        }
    }

    fn sample() -> Vec<Extrapolated> {
        [("irq", 2.0, 40_000.0), ("timer", 3.0, 45_000.0)]
            .into_iter()
            .flat_map(|(workload, exits, p50)| {
                [
                    extrapolated(workload, PolicyKind::Vanilla, exits, p50),
                    extrapolated(workload, PolicyKind::Apicv, exits / 2.0, p50 * 0.8),
                    extrapolated(workload, PolicyKind::Eli, exits / 2.0, p50 * 0.8),
                    extrapolated(workload, PolicyKind::Did, 0.0, p50 / 2.0),
                ]
            })
            .collect()
    }

    #[test]
    fn pivots_put_workloads_in_rows_and_measured_beside_each_design() {
        let figure = pivot_figure(&PIVOTS[0], &sample()).expect("exits pivot");
        assert_eq!(
            figure.table.columns,
            ["workload", MEASURED, "vanilla", "apicv", "eli", "did"]
        );
        assert_eq!(figure.table.rows.len(), 2);
        assert_eq!(
            figure.table.rows[0].cells,
            [
                "irq",
                "1.10 (1.00\u{2013}1.20)",
                "2.00",
                "1.00",
                "1.00",
                "0"
            ]
        );
        // Time in guest was not measured: that column stays empty.
        let guest = pivot_figure(&PIVOTS[2], &sample()).expect("guest pivot");
        assert_eq!(guest.table.rows[0].cells[1], "-");
    }

    #[test]
    fn design_sentences_state_the_savings_with_their_numbers() {
        let sentences = design_sentences(&sample());
        assert_eq!(sentences.len(), 3);
        assert!(
            sentences[2].starts_with("did would save 100% to 100% of the exits"),
            "{}",
            sentences[2]
        );
        assert!(sentences[2].contains("change latency p50 by a median -50%"));
        assert!(
            sentences[1]
                .contains("median 50%) across 2 workloads and change latency p50 by a median -20%"),
            "{}",
            sentences[1]
        );
        assert_eq!(whole_percent(-0.001), "0%");
        assert_eq!(us(6_680_000.0), "6.68 ms");
        assert_eq!(us(31_800.0), "31.8 us");
    }

    #[test]
    fn the_section_is_first_class_even_without_kvm() {
        let section = conclusions_section(&Findings {
            probe: None,
            cases: &[],
            checks: None,
            designs: None,
            simulated: &[],
        });
        assert_eq!(section.id, "conclusions");
        assert!(section.figures.is_empty());
    }
}
