//! The report's first section: what it found, in sentences with their
//! numbers, and the design x workload pivots they come from (measured and
//! predicted side by side).

use dirq_sim::design::DesignKind;
use dirq_vmm::config::{BenchParams, GuestIdle};
use dirq_vmm::probe::ProbeReport;

use crate::calibrate::Calibration;
use crate::common::format::{format_value, ns_to_us};
use crate::common::real::RealCase;
use crate::common::views::SimScenario;
use crate::report::analyse::checks::{Extrapolated, ModelChecks};
use crate::report::analyse::compare::{
    against_vanilla, at_top_rate, changes_against_vanilla, clusters, find, irq_latency_paths,
    most_repeats, polling_windows, range, rank_paths, workloads, Cluster, PathRanking,
    SINGLE_RUN_TIE_BAND,
};
use crate::report::analyse::host::probe_runs;
use crate::report::analyse::model::{verdict, Score};
use crate::report::analyse::studies::{
    batching_saves, fastest_vioapic_level, unmeasurable_vioapic_levels,
};
use crate::report::present::charts::spread_us;
use crate::report::present::data::{
    Axis, Cell, Chart, Figure, GroupedSeries, Scale, Section, SeriesKey, Spread, Table, TableRow,
    Unit,
};
use crate::report::present::page::Part;
use crate::studies::StudyTables;

/// Everything the conclusions draw on; each part is absent when its step
/// did not run or failed.
pub struct Findings<'a> {
    pub probe: Option<&'a ProbeReport>,
    pub calibration: Option<&'a Calibration>,
    pub cases: &'a [RealCase],
    pub checks: Option<&'a ModelChecks>,
    /// The software-only studies on this host's KVM.
    pub studies: Option<&'a StudyTables>,
    pub simulated: &'a [SimScenario],
}

/// The designs the pivots compare, in column order.
const DESIGNS: [DesignKind; 4] = [
    DesignKind::Vanilla,
    DesignKind::Apicv,
    DesignKind::Eli,
    DesignKind::Did,
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
    /// The vanilla prediction as this host's KVM counts it, where that
    /// differs from every exit counted (kvm_pvm's own traps).
    counted_here: Option<fn(&Extrapolated) -> Option<f64>>,
    /// How its table prints it.
    shown_as: Unit,
}

/// The column of the vanilla twin as this host counts (the model check's
/// prediction).
const COUNTED_HERE: &str = "vanilla as this host counts (model check)";

const PIVOTS: [PivotMetric; 4] = [
    PivotMetric {
        id: "exits",
        title: "Exits per interrupt",
        unit: "exits per interrupt",
        measured: |e| e.measured.as_ref()?.exits_per_interrupt,
        predicted: |e| e.exits_per_interrupt,
        counted_here: Some(|e| e.exits_per_interrupt_counted_here),
        shown_as: Unit::Count,
    },
    PivotMetric {
        id: "latency",
        title: "Latency p50 (one way)",
        unit: "latency p50 (us)",
        measured: |e| e.measured.as_ref()?.latency_p50_ns.map(spread_us),
        predicted: |e| e.latency_p50_ns.map(ns_to_us),
        counted_here: None,
        shown_as: Unit::Us,
    },
    PivotMetric {
        id: "guest-time",
        title: "Time in guest",
        unit: "time in guest",
        measured: |e| e.measured.as_ref()?.time_in_guest,
        predicted: |e| Some(e.time_in_guest),
        counted_here: None,
        shown_as: Unit::Fraction,
    },
    PivotMetric {
        id: "cpu",
        title: "Host CPU burned",
        unit: "host cores busy",
        measured: |e| e.measured.as_ref()?.cpu_cores,
        predicted: |e| e.cpu_cores,
        counted_here: None,
        shown_as: Unit::Cores,
    },
];

/// One design x workload pivot: a grouped chart (measured first, then each
/// design's prediction) with its table below. None when nothing has the metric.
fn pivot_figure(metric: &PivotMetric, extrapolation: &[Extrapolated]) -> Option<Figure> {
    let workloads = workloads(extrapolation);
    let vanilla = |pick: fn(&Extrapolated) -> Option<f64>| -> Vec<Option<f64>> {
        workloads
            .iter()
            .map(|w| find(extrapolation, w, DesignKind::Vanilla).and_then(pick))
            .collect()
    };
    let mut series = vec![GroupedSeries {
        name: MEASURED.into(),
        key: SeriesKey::Measured,
        values: workloads
            .iter()
            .map(|w| find(extrapolation, w, DesignKind::Vanilla).and_then(metric.measured))
            .collect(),
    }];
    // Only where this host counts other than every exit (kvm_pvm).
    let counted_here = metric
        .counted_here
        .map(vanilla)
        .filter(|here| *here != vanilla(metric.predicted));
    let with_traps = counted_here.is_some();
    series.extend(counted_here.map(|values| {
        GroupedSeries {
            name: COUNTED_HERE.into(),
            key: SeriesKey::Twin,
            values: values
                .into_iter()
                .map(|v| v.and_then(|v| Spread::of([v])))
                .collect(),
        }
    }));
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
            let mut cells = vec![Cell::text(workload.clone())];
            cells.extend(
                series
                    .iter()
                    .map(|s| Cell::spread(s.values[row], metric.shown_as)),
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
        folded: false,
        id: format!("conclusions-{}", metric.id),
        title: format!("{}: measured, and predicted per design", metric.title),
        caption: format!(
            "One group per workload. \"{MEASURED}\" is the real run on this host (median, \
             whisker over the runs); the designs are the simulator's predictions for the same \
             workload on a VT-x host with this host's calibrated costs, every exit counted \
             (vanilla is KVM's emulated LAPIC, the path measured).{}",
            if with_traps {
                format!(
                    " \"{COUNTED_HERE}\" is the vanilla prediction as this host's KVM counts \
                     exits (natively kvm_pvm adds its injection into the handler and the \
                     handler's IRETQ; emulated it leaves out the LAPIC writes it emulates): the \
                     number the model check compares with the measurement."
                )
            } else {
                String::new()
            }
        ),
        commands: Vec::new(),
        table: Table {
            folded: false,
            title: String::new(),
            columns,
            rows,
        },
        chart,
    })
}

/// How many runs stand behind a comparison of paths, and what counted
/// as a tie: (for ties, for a clear winner).
fn runs_each(runs: usize) -> (String, String) {
    match runs {
        0 | 1 => {
            let band = SINGLE_RUN_TIE_BAND * 100.0;
            (
                format!("one run each, so within {band:.0}% counts as a tie"),
                format!("one run each; no other path within {band:.0}%"),
            )
        }
        n => (
            format!("{n} runs each"),
            format!("{n} runs each; no other path's range overlaps"),
        ),
    }
}

/// The real paths into a vCPU in one state, in words: the fastest, or
/// every path that ties with it, and how much slower the userspace
/// irqchip is.
fn fastest_path_sentence(state: &str, ranking: &PathRanking) -> String {
    let best = ranking.fastest().p50.median;
    let (runs_tied, runs_apart) = runs_each(ranking.runs);
    let mut sentence = match (ranking.tied.as_slice(), ranking.next) {
        ([only], Some(next)) => format!(
            "into a {state} vCPU, {} is the fastest path, p50 {} ({runs_apart}), {:.2}x \
             faster than the next, {} ({})",
            only.name,
            us(best),
            next.p50.median / best,
            next.name,
            us(next.p50.median)
        ),
        (tied, _) => {
            let names: Vec<&str> = tied.iter().map(|path| path.name.as_str()).collect();
            let slowest_tied = tied.last().map_or(best, |path| path.p50.median);
            format!(
                "into a {state} vCPU, {} paths are indistinguishable ({}), p50 {} ({runs_tied})",
                tied.len(),
                names.join(", "),
                us_range(best, slowest_tied)
            )
        }
    };
    if let Some(slow) = ranking.userspace {
        sentence.push_str(&format!(
            "; the userspace irqchip is {:.1}x slower ({})",
            slow.p50.median / best,
            us(slow.p50.median)
        ));
    }
    sentence.push('.');
    sentence
}

/// The real irq-latency paths compared by p50, per state of the vCPU,
/// after the configuration they ran in.
fn fastest_path_sentences(cases: &[RealCase]) -> Vec<String> {
    let sentences: Vec<String> = [(GuestIdle::Busy, "running"), (GuestIdle::Halt, "halted")]
        .into_iter()
        .filter_map(|(idle, state)| {
            let paths = irq_latency_paths(cases, idle);
            Some(fastest_path_sentence(state, &rank_paths(&paths)?))
        })
        .collect();
    if sentences.is_empty() {
        return sentences;
    }
    // One sentence: the states' clauses joined.
    let clauses: Vec<&str> = sentences
        .iter()
        .map(|sentence| sentence.trim_end_matches('.'))
        .collect();
    let rate = cases.iter().find_map(|case| match &case.config.params {
        BenchParams::IrqLatency(params) => Some(params.rate_hz),
        _ => None,
    });
    let paced = match rate {
        Some(0) | None => "back to back".to_string(),
        Some(rate) => format!("paced at {}/s", format_value(dirq_stats::f64_of(rate))),
    };
    vec![format!(
        "Real irq-latency ({paced}; p50 of the MSI's round trip from the device thread's \
         raise to the guest's acknowledgement): {}",
        clauses.join("; ")
    )]
}

/// "31.8 us", "6.68 ms": a latency in the unit that reads best.
fn us(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{} ms", format_value(ns / 1e6))
    } else {
        format!("{} us", format_value(ns / 1e3))
    }
}

/// "51.6-52.5 us": two latencies in the unit that reads best for the
/// larger.
fn us_range(low_ns: f64, high_ns: f64) -> String {
    let text = us(high_ns);
    let (high, unit) = text.split_once(' ').unwrap_or((&text, ""));
    let scale = if unit == "ms" { 1e6 } else { 1e3 };
    format!("{}\u{2013}{high} {unit}", format_value(low_ns / scale))
}

/// "a, b and c": items of a sentence.
pub fn and_list<T: AsRef<str>>(items: &[T]) -> String {
    match items {
        [] => String::new(),
        [one] => one.as_ref().to_string(),
        [init @ .., last] => {
            let init: Vec<&str> = init.iter().map(AsRef::as_ref).collect();
            format!("{} and {}", init.join(", "), last.as_ref())
        }
    }
}

/// "-23%": a sentence's percentage, whole.
fn whole_percent(fraction: f64) -> String {
    let percent = (fraction * 100.0).round();
    // -0.4% rounds to "-0%"; it is no change.
    format!("{}%", if percent == 0.0 { 0.0 } else { percent })
}

/// "+6%", "-23%", "0%": a sentence's change, whole and signed.
fn change_percent(fraction: f64) -> String {
    let text = whole_percent(fraction);
    if fraction > 0.0 && text != "0%" {
        format!("+{text}")
    } else {
        text
    }
}

/// "-100% on timer-latency · 1 kHz, -1% to -3% on 4 ipi workloads".
fn clusters_text(clusters: &[Cluster]) -> String {
    clusters
        .iter()
        .map(|cluster| {
            let change = if change_percent(cluster.min) == change_percent(cluster.max) {
                change_percent(cluster.min)
            } else {
                format!(
                    "{} to {}",
                    change_percent(cluster.min),
                    change_percent(cluster.max)
                )
            };
            match cluster.workloads.as_slice() {
                [one] => format!("{change} on {one}"),
                many => format!("{change} on {} {} workloads", many.len(), cluster.bench),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a design changes nothing on the twins, where the reason is the
/// design's reach: what it delivers without exits and the twins lack.
fn reach(design: DesignKind) -> Option<&'static str> {
    match design {
        DesignKind::Eli | DesignKind::EliDelivery => Some(
            "ELI delivers only an assigned device's interrupts (an SR-IOV VF) without exits, \
             and these twins have none: their interrupts come from a virtio device (standing for \
             the real runs' device thread), the timer or IPIs",
        ),
        _ => None,
    }
}

/// "1.0-2.0" of a range, or one number where both ends print alike.
fn range_text((low, high): (f64, f64), unit: &str) -> String {
    let (low_text, high_text) = (format_value(low), format_value(high));
    if low_text == high_text {
        format!("{low_text}{unit}")
    } else {
        format!("{low_text}\u{2013}{high_text}{unit}")
    }
}

/// What each design would save against vanilla on these workloads, both
/// predicted for a VT-x host with this host's costs: exits per interrupt
/// and the host time they cost here, host CPU, and the latency changes
/// beyond 5%; a design that changes nothing says why where it can.
fn design_sentences(extrapolation: &[Extrapolated], kernel_exit_ns: Option<f64>) -> Vec<String> {
    DESIGNS[1..]
        .iter()
        .filter_map(|design| {
            let exits = against_vanilla(extrapolation, *design, |e| e.exits_per_interrupt);
            let saved = range(exits.iter().map(|(_, vanilla, this)| vanilla - this))?;
            if saved.1.abs() < 0.01 {
                return Some(match reach(*design) {
                    Some(why) => format!(
                        "{}: no exit saved on any of these {} workloads: {why}.",
                        design.name(),
                        exits.len()
                    ),
                    None => format!(
                        "{}: no exit saved on any of these {} workloads.",
                        design.name(),
                        exits.len()
                    ),
                });
            }
            let mut parts = vec![format!(
                "{} exits per interrupt fewer than vanilla",
                range_text(saved, "")
            )];
            if let Some(exit_ns) = kernel_exit_ns {
                parts[0].push_str(&format!(
                    " ({} of host time per interrupt at this host's {} per in-KVM exit)",
                    range_text((saved.0 * exit_ns / 1e3, saved.1 * exit_ns / 1e3), " us"),
                    us(exit_ns)
                ));
            }
            let cpu = against_vanilla(extrapolation, *design, |e| e.cpu_cores);
            let cpu_saved = range(cpu.iter().map(|(_, vanilla, this)| vanilla - this))
                .filter(|(low, high)| low.abs().max(high.abs()) >= 0.005);
            if let Some(cpu_saved) = cpu_saved {
                parts.push(format!("host CPU {} cores less", range_text(cpu_saved, "")));
            }
            let latency = changes_against_vanilla(extrapolation, *design, |e| e.latency_p50_ns);
            let moved: Vec<_> = latency
                .into_iter()
                .filter(|(_, _, change)| change.abs() >= 0.05)
                .collect();
            if !moved.is_empty() {
                parts.push(format!("latency p50 {}", clusters_text(&clusters(&moved))));
            }
            Some(format!(
                "{} on these {} workloads: {}.",
                design.name(),
                exits.len(),
                parts.join("; ")
            ))
        })
        .collect()
}

/// The halt-polling windows of the real ipi runs: what each bought
/// against plain HLT exits, and what it burned.
fn polling_sentence(cases: &[RealCase], calibration: Option<&Calibration>) -> Option<String> {
    let windows = polling_windows(cases);
    let first = windows.first()?;
    let window = |ns: u32| format!("{} us", ns / 1_000);
    let each: Vec<String> = windows
        .iter()
        .map(|w| {
            if w.faster() {
                format!(
                    "{} cuts it to {} for {} cores instead of {}",
                    window(w.window_ns),
                    us(w.p50.median),
                    format_value(w.cpu.median),
                    format_value(w.hlt_cpu.median)
                )
            } else {
                format!(
                    "{} gives nothing ({}, {} cores)",
                    window(w.window_ns),
                    us(w.p50.median),
                    format_value(w.cpu.median)
                )
            }
        })
        .collect();
    let mut sentence = format!(
        "Halt polling, real ipi ping-pong (round trip p50 {} with HLT exits, {} cores): {}",
        us(first.hlt_p50.median),
        format_value(first.hlt_cpu.median),
        and_list(&each)
    );
    // A window shorter than the wake-up it waits for cannot catch it.
    let wakeup = calibration
        .map(|c| &c.costs.hlt_wakeup)
        .filter(|m| m.not_derivable.is_none());
    if let Some(wakeup) = wakeup {
        let short: Vec<String> = windows
            .iter()
            .filter(|w| !w.faster() && f64::from(w.window_ns) < wakeup.ns)
            .map(|w| window(w.window_ns))
            .collect();
        if !short.is_empty() {
            sentence.push_str(&format!(
                "; {} is shorter than this host's HLT wake-up ({}, calibration), so it polls \
                 past the window's end",
                and_list(&short),
                us(wakeup.ns)
            ));
        }
    }
    sentence.push('.');
    Some(sentence)
}

/// How far the model is trusted: its score against the real runs, per
/// metric (`Score::trusted`).
fn model_sentence(checks: &ModelChecks) -> Option<String> {
    let verdict = verdict(&checks.comparisons)?;
    let scores = |scores: &[Score]| {
        scores
            .iter()
            .map(|score| {
                format!(
                    "{} ({} of {})",
                    score.metric.label().trim_end_matches(" (us)"),
                    score.hits,
                    score.of
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut sentence = format!(
        "Model against reality: {} of {} predictions within 20% of this host's \
         measurements. Trusted for {}",
        verdict.hits,
        verdict.of,
        match verdict.trusted.is_empty() {
            true => "no metric".to_string(),
            false => scores(&verdict.trusted),
        }
    );
    if !verdict.not_trusted.is_empty() {
        sentence.push_str(&format!("; not for {}", scores(&verdict.not_trusted)));
    }
    sentence.push('.');
    if verdict.compares_lost_time {
        sentence.push_str(
            " Time in guest is ill-conditioned near saturation (a share near zero turns a \
             small error into a large relative one), so whileloop is also compared as the \
             loop time lost per handled interrupt.",
        );
    }
    sentence.push_str(
        " Every check compares a real run with its vanilla twin (KVM's emulated LAPIC): the \
         APICv, ELI and DID figures above rest on the same mechanisms and costs, and on no \
         measurement.",
    );
    let explained = checks.misses.iter().filter(|m| m.explained).count();
    let unexplained = checks.misses.len() - explained;
    if !checks.misses.is_empty() {
        sentence.push_str(&format!(
            " Of the {} misses, {explained} have a cause in the runs' counters and {unexplained} \
             no cause found yet (each listed under \"Model against reality\").",
            checks.misses.len()
        ));
    }
    Some(sentence)
}

/// The software-only studies' headline numbers.
fn study_sentences(studies: &StudyTables) -> Vec<String> {
    let mut sentences = Vec::new();
    if let Some(vioapic) = &studies.vioapic {
        if let Some(best) = fastest_vioapic_level(vioapic) {
            sentences.push(format!(
                "VIOAPIC: the {} level handles level-triggered interrupts {:.2}x as fast as the \
                 userspace controller, with {} exits per interrupt.",
                best.mode,
                best.speedup_vs_userspace,
                format_value(best.exits_per_interrupt)
            ));
        }
        sentences.extend(
            unmeasurable_vioapic_levels(vioapic)
                .into_iter()
                .map(|(row, why)| {
                    format!(
                        "VIOAPIC's {} level is not measurable here: {why}.",
                        row.mode
                    )
                }),
        );
    }
    if let Some(saves) = studies.io_batch.as_ref().and_then(batching_saves) {
        sentences.push(format!(
            "Batched port I/O: {} exits per disk command instead of {} ({:.2}x the \
             commands per second).",
            format_value(saves.batched_exits_per_command),
            format_value(saves.plain_exits_per_command),
            saves.speedup
        ));
    }
    sentences
}

/// The simulated scenarios with a rate, time in guest of each design at
/// the highest rate; a scenario whose figures there repeat an earlier
/// one's is left out, and a fitted point is marked.
fn simulated_sentences(simulated: &[SimScenario]) -> Vec<String> {
    let mut said: Vec<Vec<(DesignKind, f64)>> = Vec::new();
    simulated
        .iter()
        .filter_map(|scenario| {
            let top = at_top_rate(scenario)?;
            let repeated = said.iter().any(|before| {
                top.time_in_guest
                    .iter()
                    .filter(|(design, _)| *design != DesignKind::Bare)
                    .all(|shared| before.contains(shared))
            });
            said.push(top.time_in_guest.clone());
            if repeated {
                return None;
            }
            let fitted = |design: DesignKind| {
                scenario
                    .inputs
                    .as_ref()
                    .and_then(|s| s.figure.as_ref())
                    .is_some_and(|f| f.fitted_runs.iter().any(|run| run == design.name()))
            };
            // Designs with one share print once, together.
            let mut shares: Vec<(Vec<&str>, f64)> = Vec::new();
            for (design, share) in &top.time_in_guest {
                let text = whole_percent(*share);
                match shares
                    .iter_mut()
                    .find(|(_, other)| whole_percent(*other) == text && !fitted(*design))
                {
                    Some((designs, _)) => designs.push(design.name()),
                    None => shares.push((vec![design.name()], *share)),
                }
            }
            let shares: Vec<String> = shares
                .iter()
                .map(|(designs, share)| {
                    let mark = if designs.len() == 1
                        && top
                            .time_in_guest
                            .iter()
                            .any(|(d, _)| d.name() == designs[0] && fitted(*d))
                    {
                        " (fitted, not predicted)"
                    } else {
                        ""
                    };
                    format!("{} {}{mark}", designs.join(", "), whole_percent(*share))
                })
                .collect();
            Some(format!(
                "{} at {}/s: time in guest {}.",
                top.scenario,
                format_value(top.rate),
                shares.join("; ")
            ))
        })
        .collect()
}

/// How many runs stand behind each kind of number: the median of several
/// only where several ran.
fn runs_sentence(findings: &Findings) -> Option<String> {
    let repeats = most_repeats(findings.cases)?;
    let real = match repeats {
        1 => "each real benchmark is a single run (no spread was measured)".to_string(),
        n => format!(
            "each real benchmark number is the median of {n} runs, with their range in the tables"
        ),
    };
    let mut once = Vec::new();
    if let Some(probe) = findings.probe {
        once.push(format!(
            "the probe (each floor the median of its {} runs' p50s, each run {} events at \
             the fewest)",
            probe_runs(probe),
            probe.samples
        ));
    }
    once.push("the emulated-against-native table".to_string());
    if findings.studies.is_some() {
        once.push("the software-only studies".into());
    }
    Some(format!(
        "Runs: {real}; {} ran once; the simulations are one deterministic run per seed.",
        and_list(&once)
    ))
}

/// The conclusions (sentences, first on the page; the section always
/// exists) and, where there are any, the pivots they come from.
pub fn conclusions_sections(findings: &Findings) -> Vec<Section> {
    let mut intro = Vec::new();
    if let Some(probe) = findings.probe {
        intro.push(format!(
            "One exit costs {} when the VMM handles it in userspace and {} when KVM \
             handles it (the probe's port write and RDMSR round trips): every exit a design \
             saves is worth that much here.",
            us(probe.floors.userspace_exit_ns),
            us(probe.floors.kernel_exit_ns)
        ));
    }
    intro.extend(fastest_path_sentences(findings.cases));
    let extrapolation = findings
        .checks
        .map_or(&[][..], |c| c.extrapolation.as_slice());
    let designs = design_sentences(
        extrapolation,
        findings.probe.map(|p| p.floors.kernel_exit_ns),
    );
    if !designs.is_empty() {
        intro.push(format!(
            "What each design would save, predicted by the model for a VT-x host with this \
             host's exit costs: {}",
            designs.join(" ")
        ));
    }
    if let Some(sentence) = findings.checks.and_then(model_sentence) {
        intro.push(sentence);
    }
    intro.extend(polling_sentence(findings.cases, findings.calibration));
    if let Some(studies) = findings.studies {
        intro.extend(study_sentences(studies));
    }
    intro.extend(runs_sentence(findings));
    let simulated = simulated_sentences(findings.simulated);
    if !simulated.is_empty() {
        intro.push(format!(
            "Simulated, each scenario on its own testbed's costs: {}",
            simulated.join(" ")
        ));
    }
    let conclusions = Section {
        id: Part::Conclusions.id().into(),
        title: "Conclusions".into(),
        intro,
        ..Section::default()
    };
    let mut figures: Vec<Figure> = PIVOTS
        .iter()
        .filter_map(|metric| pivot_figure(metric, extrapolation))
        .collect();
    for figure in figures.iter_mut().skip(1) {
        figure.folded = true;
    }
    let pivots = (!figures.is_empty()).then(|| Section {
        id: Part::Pivots.id().into(),
        title: "Measured and predicted, per design and workload".into(),
        intro: vec![
            "The numbers behind the design savings: per metric, each workload's real run \
             beside the simulator's prediction for every design."
                .into(),
        ],
        figures,
        ..Section::default()
    });
    std::iter::once(conclusions).chain(pivots).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::analyse::checks::Measured;
    use std::collections::BTreeMap;

    fn extrapolated(workload: &str, design: DesignKind, exits: f64, p50: f64) -> Extrapolated {
        let vanilla = design == DesignKind::Vanilla;
        Extrapolated {
            workload: workload.into(),
            bench: workload.split(' ').next().unwrap_or(workload).into(),
            design,
            exits_per_interrupt: Some(exits),
            // kvm_pvm's two traps on top, as the model check counts.
            exits_per_interrupt_counted_here: vanilla.then_some(exits + 2.0),
            exits_per_interrupt_by_reason: BTreeMap::new(),
            latency_p50_ns: Some(p50),
            time_in_guest: 0.9,
            cpu_cores: Some(1.0),
            measured: vanilla.then(|| Measured {
                exits_per_interrupt: Spread::of([1.0, 1.2, 1.1]),
                latency_p50_ns: Spread::of([40_000.0]),
                time_in_guest: None,
                cpu_cores: Spread::of([1.0]),
            }),
        }
    }

    /// Per workload: vanilla's exits and p50, and what did does to them.
    fn designs_on(rows: &[(&str, f64, f64, f64)]) -> Vec<Extrapolated> {
        rows.iter()
            .flat_map(|&(workload, exits, p50, did_p50)| {
                [
                    extrapolated(workload, DesignKind::Vanilla, exits, p50),
                    extrapolated(workload, DesignKind::Apicv, exits / 2.0, p50 * 0.8),
                    extrapolated(workload, DesignKind::Eli, exits / 2.0, p50 * 0.8),
                    extrapolated(workload, DesignKind::Did, 0.0, did_p50),
                ]
            })
            .collect()
    }

    fn sample() -> Vec<Extrapolated> {
        designs_on(&[
            ("irq · 5K/s", 2.0, 40_000.0, 20_000.0),
            ("timer · 1 kHz", 3.0, 45_000.0, 22_500.0),
        ])
    }

    #[test]
    fn pivots_put_workloads_in_rows_and_measured_beside_each_design() {
        let figure = pivot_figure(&PIVOTS[0], &sample()).expect("exits pivot");
        assert_eq!(
            figure.table.columns,
            [
                "workload",
                MEASURED,
                COUNTED_HERE,
                "vanilla",
                "apicv",
                "eli",
                "did"
            ]
        );
        assert_eq!(figure.table.rows.len(), 2);
        // The measured exits sit beside the prediction as this host counts
        // them (kvm_pvm's traps included), then every design's.
        assert_eq!(
            figure.table.rows[0].cells,
            [
                "irq · 5K/s",
                "1.10 (1.00\u{2013}1.20)",
                "4.00",
                "2.00",
                "1.00",
                "1.00",
                "0"
            ]
        );
        // Time in guest was not measured: that column stays empty; and it
        // has no "as counted here" column.
        let guest = pivot_figure(&PIVOTS[2], &sample()).expect("guest pivot");
        assert_eq!(guest.table.rows[0].cells[1], "-");
        assert!(!guest.table.columns.iter().any(|c| c == COUNTED_HERE));
    }

    #[test]
    fn where_this_host_counts_every_exit_the_pivot_has_no_extra_column() {
        let mut rows = sample();
        for e in &mut rows {
            e.exits_per_interrupt_counted_here = e
                .measured
                .is_some()
                .then_some(e.exits_per_interrupt)
                .flatten();
        }
        let figure = pivot_figure(&PIVOTS[0], &rows).expect("exits pivot");
        assert!(!figure.table.columns.iter().any(|c| c == COUNTED_HERE));
    }

    #[test]
    fn design_savings_are_stated_per_workload_never_as_a_median_over_unlike_ones() {
        // One timer and five IPI workloads: did halves the timer's p50 and
        // changes four IPI waits by 1-3%, one by -69%.
        let rows = designs_on(&[
            ("timer · 1 kHz", 3.0, 40_000.0, 18_800.0),
            ("ipi · halt", 4.0, 50_000.0, 49_500.0),
            ("ipi · halt-poll", 4.0, 50_000.0, 49_000.0),
            ("ipi · no HLT exit", 4.0, 50_000.0, 48_500.0),
            ("ipi · poll 50 us", 4.0, 50_000.0, 48_600.0),
            ("ipi · idle=poll", 4.0, 50_000.0, 15_500.0),
        ]);
        let sentences = design_sentences(&rows, Some(4_000.0));
        assert_eq!(sentences.len(), 3);
        let did = &sentences[2];
        assert!(
            did.starts_with(
                "did on these 6 workloads: 3.00\u{2013}4.00 exits per interrupt fewer than \
                 vanilla (12.0\u{2013}16.0 us of host time per interrupt at this host's 4.00 us \
                 per in-KVM exit)"
            ),
            "{did}"
        );
        // Changes under 5% are not news; the rest per workload, never a
        // median over unlike ones.
        assert!(
            did.ends_with("latency p50 -53% on timer · 1 kHz, -69% on ipi · idle=poll."),
            "{did}"
        );
        assert!(!did.contains("host CPU"), "no CPU saved, none said: {did}");
        assert!(!did.contains("median"), "{did}");
        // A design that saves nothing says why, where its reach says.
        let same: Vec<Extrapolated> = rows
            .iter()
            .cloned()
            .map(|mut e| {
                if e.design == DesignKind::Eli {
                    let vanilla = find(&rows, &e.workload, DesignKind::Vanilla).expect("vanilla");
                    e.exits_per_interrupt = vanilla.exits_per_interrupt;
                }
                e
            })
            .collect();
        let eli = &design_sentences(&same, None)[1];
        assert!(
            eli.starts_with("eli: no exit saved on any of these 6 workloads: ELI delivers only")
                && eli.contains("virtio"),
            "{eli}"
        );
        assert_eq!(whole_percent(-0.001), "0%");
        assert_eq!(change_percent(0.06), "+6%");
        assert_eq!(change_percent(0.001), "0%");
        assert_eq!(and_list(&["a", "b", "c"]), "a, b and c");
        assert_eq!(and_list(&["a"]), "a");
        assert_eq!(us(6_680_000.0), "6.68 ms");
        assert_eq!(us(31_800.0), "31.8 us");
    }

    fn spread(values: &[f64]) -> Spread {
        Spread::of(values.iter().copied()).expect("values")
    }

    use crate::report::analyse::compare::Path;

    fn path(name: &str, userspace: bool, p50: Spread) -> Path {
        Path {
            name: name.into(),
            userspace,
            p50,
        }
    }

    #[test]
    fn overlapping_ranges_are_a_tie_and_the_userspace_irqchip_is_measured_against_them() {
        let paths = [
            path(
                "kernel + irqfd",
                false,
                spread(&[51_600.0, 50_400.0, 54_600.0]),
            ),
            path(
                "kernel + vcpu",
                false,
                spread(&[52_500.0, 51_000.0, 53_900.0]),
            ),
            path(
                "split + irqfd",
                false,
                spread(&[52_000.0, 50_900.0, 54_000.0]),
            ),
            path(
                "userspace",
                true,
                spread(&[110_000.0, 108_000.0, 113_000.0]),
            ),
        ];
        let sentence = fastest_path_sentence("halted", &rank_paths(&paths).expect("paths"));
        assert_eq!(
            sentence,
            "into a halted vCPU, 3 paths are indistinguishable (kernel + irqfd, split + irqfd, \
             kernel + vcpu), p50 51.6\u{2013}52.5 us (3 runs each); the userspace irqchip is \
             2.1x slower (110 us)."
        );
    }

    #[test]
    fn a_path_whose_range_stands_apart_is_named_fastest() {
        let paths = [
            path(
                "kernel + irqfd",
                false,
                spread(&[40_000.0, 39_000.0, 41_000.0]),
            ),
            path(
                "kernel + vcpu",
                false,
                spread(&[52_500.0, 51_000.0, 53_900.0]),
            ),
        ];
        let sentence = fastest_path_sentence("running", &rank_paths(&paths).expect("paths"));
        assert!(
            sentence.starts_with(
                "into a running vCPU, kernel + irqfd is the fastest path, p50 40.0 us (3 runs \
                 each; no other path's range overlaps), 1.31x faster than the next, \
                 kernel + vcpu (52.5 us)"
            ),
            "{sentence}"
        );
    }

    #[test]
    fn single_runs_that_tie_say_what_counted_as_a_tie() {
        let once = |ns: f64| spread(&[ns]);
        let paths = [
            path("kernel + irqfd", false, once(50_000.0)),
            path("kernel + vcpu", false, once(54_000.0)),
        ];
        let sentence = fastest_path_sentence("halted", &rank_paths(&paths).expect("paths"));
        assert!(
            sentence.contains("2 paths are indistinguishable")
                && sentence.contains("one run each, so within 10% counts as a tie"),
            "{sentence}"
        );
    }

    #[test]
    fn the_section_is_first_class_even_without_kvm() {
        let sections = conclusions_sections(&Findings {
            probe: None,
            calibration: None,
            cases: &[],
            checks: None,
            studies: None,
            simulated: &[],
        });
        assert_eq!(sections.len(), 1);
        assert_eq!(sections[0].id, "conclusions");
        // No real runs: no claim about them, nor about how many runs a
        // number is.
        assert!(sections[0].intro.is_empty(), "{:?}", sections[0].intro);
    }
}
