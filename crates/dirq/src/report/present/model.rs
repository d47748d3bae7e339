//! The model-vs-reality and extrapolation sections: the model checks
//! (`analyse::checks`) as figures and tables.

use std::collections::BTreeMap;

use dirq_vmm::exits::VmxExit;

use crate::common::format::ns_to_us;
use crate::report::analyse::checks::ModelChecks;
use crate::report::analyse::model::{scores, Comparison, Metric, TOLERANCE};
use crate::report::collect::twins::TWIN_DURATION_MS;
use crate::report::present::charts::{auto_scale, exit_bars, exit_table};
use crate::report::present::data::{
    Axis, Cell, Chart, Figure, Scale, Section, Series, SeriesKey, SeriesStyle, Table, TableRow,
    Unit,
};
use crate::report::present::page::Part;

impl Metric {
    /// The value as figures and tables show it: latencies in us.
    pub fn shown(self, value: f64) -> f64 {
        match self {
            Metric::LatencyP50Ns | Metric::LostPerInterruptNs => ns_to_us(value),
            Metric::ExitsPerInterrupt | Metric::TimeInGuest | Metric::HostCpuCores => value,
        }
    }

    /// The unit of [`Metric::shown`].
    fn unit(self) -> Unit {
        match self {
            Metric::LatencyP50Ns | Metric::LostPerInterruptNs => Unit::Us,
            Metric::ExitsPerInterrupt => Unit::Count,
            Metric::TimeInGuest => Unit::Fraction,
            Metric::HostCpuCores => Unit::Cores,
        }
    }

    /// A measured or predicted value's cell.
    fn cell(self, value: f64) -> Cell {
        Cell::number(self.shown(value), self.unit())
    }
}

/// The bench of a comparison's configuration ("irq-latency · ...").
fn bench_of(configuration: &str) -> &str {
    configuration.split(" · ").next().unwrap_or(configuration)
}

/// One metric's predictions against its measurements: a point per
/// configuration (a colour per bench), y = x, and the tolerance band
/// either side of it; axes logarithmic only where the values span two
/// decades.
fn metric_figure(metric: Metric, comparisons: &[&Comparison]) -> Figure {
    let values = comparisons
        .iter()
        .flat_map(|c| [metric.shown(c.measured), metric.shown(c.predicted)]);
    let scale = auto_scale(values.clone());
    let (low, high) = values
        .filter(|v| v.is_finite() && (scale == Scale::Linear || *v > 0.0))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    let mut benches: Vec<&str> = Vec::new();
    for c in comparisons {
        if !benches.contains(&bench_of(&c.configuration)) {
            benches.push(bench_of(&c.configuration));
        }
    }
    let mut series: Vec<Series> = benches
        .iter()
        .map(|bench| {
            Series::new(
                *bench,
                SeriesStyle::Points,
                comparisons
                    .iter()
                    .filter(|c| bench_of(&c.configuration) == *bench)
                    .map(|c| [metric.shown(c.measured), metric.shown(c.predicted)])
                    .collect(),
            )
        })
        .collect();
    if low.is_finite() && high > low {
        let (from, to) = (if scale == Scale::Linear { 0.0 } else { low }, high);
        for (name, factor) in [
            ("20% over (y = 1.2 x)", 1.0 + TOLERANCE),
            ("20% under (y = 0.8 x)", 1.0 - TOLERANCE),
        ] {
            series.push(
                Series::new(
                    name,
                    SeriesStyle::Line,
                    vec![[from, from * factor], [to, to * factor]],
                )
                .keyed(SeriesKey::Guide),
            );
        }
    }
    let rows = comparisons
        .iter()
        .map(|c| {
            TableRow::flagged(
                vec![
                    Cell::text(c.configuration.clone()),
                    Cell::spread(
                        Some(c.measured_spread.map(|v| c.metric.shown(v))),
                        c.metric.unit(),
                    ),
                    c.metric.cell(c.predicted),
                    c.relative_error
                        .map_or_else(|| Cell::text("n/a"), |e| Cell::number(e, Unit::Change)),
                    Cell::text(if c.within_tolerance { "yes" } else { "MISS" }),
                ],
                !c.within_tolerance,
            )
        })
        .collect();
    Figure {
        id: format!("model-vs-reality-{}", serde_plain(metric)),
        title: format!("{}: predicted against measured", metric.label()),
        caption: "A point per real configuration, a colour per bench; on the line y = x the \
                  prediction is exact, between the two grey lines it is within 20%. The \
                  measured value is the median of the real runs, the range beside it in the \
                  table."
            .into(),
        commands: Vec::new(),
        chart: Chart::Xy {
            x_axis: Axis {
                label: format!("measured {}", metric.label()),
                scale,
            },
            y_axis: Axis {
                label: format!("predicted {}", metric.label()),
                scale,
            },
            series,
            identity_line: true,
        },
        table: Table {
            title: String::new(),
            columns: [
                "configuration",
                "measured",
                "predicted",
                "error",
                "within 20%",
            ]
            .map(String::from)
            .to_vec(),
            rows,
            folded: false,
        },
        folded: true,
    }
}

/// A metric's id in data.json and the page ("exits_per_interrupt").
fn serde_plain(metric: Metric) -> String {
    serde_json::to_value(metric)
        .ok()
        .and_then(|v| v.as_str().map(|s| s.replace('_', "-")))
        .unwrap_or_default()
}

/// The model-vs-reality section: every comparison, misses flagged, and the
/// real runs the model cannot express.
pub fn model_section(checks: &ModelChecks, profile_file: &str) -> Section {
    let misses = checks
        .comparisons
        .iter()
        .filter(|c| !c.within_tolerance)
        .count();
    let figures = Metric::ALL
        .into_iter()
        .filter_map(|metric| {
            let of_metric: Vec<&Comparison> = checks
                .comparisons
                .iter()
                .filter(|c| c.metric == metric)
                .collect();
            (!of_metric.is_empty()).then(|| metric_figure(metric, &of_metric))
        })
        .collect();
    let unmodelled = Table {
        folded: true,
        title: "Real runs the model does not express".into(),
        columns: vec!["configuration".into(), "why".into()],
        rows: checks
            .unmodelled
            .iter()
            .map(|u| TableRow::new(vec![u.configuration.clone(), u.reason.clone()]))
            .collect(),
    };
    let explained = Table {
        folded: false,
        title: "Every miss, and what the counters of the run and its twin say".into(),
        columns: vec!["configuration".into(), "metric".into(), "why".into()],
        rows: checks
            .misses
            .iter()
            .map(|miss| {
                TableRow::flagged(
                    vec![
                        miss.configuration.clone(),
                        miss.metric.label().into(),
                        miss.why.clone(),
                    ],
                    !miss.explained,
                )
            })
            .collect(),
    };
    let mut tables = Vec::new();
    if !explained.rows.is_empty() {
        tables.push(explained);
    }
    if !unmodelled.rows.is_empty() {
        tables.push(unmodelled);
    }
    let unexplained = checks.misses.iter().filter(|m| !m.explained).count();
    Section {
        given: Vec::new(),
        id: Part::ModelVsReality.id().into(),
        title: "Model against reality".into(),
        intro: vec![
            format!(
                "{} of {} predictions are within 20% of the measurement (by metric: {}); \
                 every miss is listed below, {unexplained} of them with no cause found yet \
                 (shaded). Nothing was tuned to make a prediction match: the costs come from \
                 the calibration and the simulator's mechanisms are unchanged.",
                checks.comparisons.len() - misses,
                checks.comparisons.len(),
                hits_by_metric(&checks.comparisons)
            ),
            format!(
                "Each real run's twin is `dirq sim` on a one-group scenario of the same shape \
                 and device (irq-latency as udp-rx over virtio at the same rate, timer-latency \
                 as cyclictest, ipi as ipi pinging at the rate the real pings went, whileloop \
                 as whileloop under a virtio receive at the same rate), under vanilla (KVM's \
                 emulated LAPIC, what this host runs), {TWIN_DURATION_MS} ms simulated, with \
                 {profile_file} adjusted for the path (userspace-irqchip exits cost a \
                 userspace exit and a kick the userspace path's own; the halt polling window; \
                 no idle-VM exits, which dirq's guest does not make). The IPI bench times a \
                 round trip, halved to compare with the one-way prediction; where KVM counted \
                 HLT exits though HLT was not to exit (kvm_pvm traps every HLT), the twin \
                 halt-polls with the host's default window, as KVM did. Host CPU is the vCPU \
                 threads' CPU time over the run's wall time, against the twin's busy share of \
                 its vCPUs' cores."
            ),
            "Measured exits are KVM's `exits` statistic, and each twin's prediction counts \
             what that statistic counts on this host: every exit on VT-x and SVM; under \
             kvm_pvm's instruction emulator, not the LAPIC writes KVM emulates without an \
             exit; natively under kvm_pvm, also the traps of its delivery into the handler \
             and of the handler's IRETQ (docs/native.md). The extrapolation counts every exit."
                .into(),
        ],
        figures,
        tables,
    }
}

/// "exits per interrupt 6 of 20, latency p50 (ns) 3 of 8, ...".
fn hits_by_metric(comparisons: &[Comparison]) -> String {
    scores(comparisons)
        .iter()
        .map(|score| format!("{} {} of {}", score.metric.label(), score.hits, score.of))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A design and its predicted exits per interrupt by reason.
type ExitsOfDesign = (String, BTreeMap<VmxExit, f64>);

/// Exits per interrupt to two decimals: what a figure can tell apart.
fn rounded(by_reason: &BTreeMap<VmxExit, f64>) -> BTreeMap<VmxExit, f64> {
    by_reason
        .iter()
        .map(|(&reason, value)| (reason, (value * 100.0).round() / 100.0))
        .collect()
}

/// The extrapolation section: the exits each design would take, by
/// reason, per workload (the pivots of every metric open the report).
pub fn extrapolation_section(checks: &ModelChecks, profile_file: &str) -> Option<Section> {
    // Workloads whose designs take the same exits share one figure.
    let mut groups: Vec<(Vec<&str>, Vec<ExitsOfDesign>)> = Vec::new();
    for e in &checks.extrapolation {
        if groups
            .iter()
            .any(|(names, _)| names.contains(&e.workload.as_str()))
        {
            continue;
        }
        let entries: Vec<ExitsOfDesign> = checks
            .extrapolation
            .iter()
            .filter(|other| other.workload == e.workload)
            .map(|other| {
                (
                    other.design.name().to_string(),
                    rounded(&other.exits_per_interrupt_by_reason),
                )
            })
            .collect();
        match groups.iter_mut().find(|(_, same)| *same == entries) {
            Some((names, _)) => names.push(&e.workload),
            None => groups.push((vec![&e.workload], entries)),
        }
    }
    let figures: Vec<Figure> = groups
        .iter()
        .enumerate()
        .filter_map(|(index, (workloads, entries))| {
            let chart = exit_bars("predicted exits per interrupt", entries);
            let names = workloads.join("; ");
            chart.has_data().then(|| Figure {
                folded: true,
                id: format!("extrapolation-exits-{index}"),
                title: format!("{names}: predicted exits per interrupt by VMX reason"),
                caption: format!(
                    "The simulated twin of each real run named in the title (KVM's in-kernel \
                     LAPIC), under each design, with this host's profile {profile_file}; \
                     workloads whose designs take the same exits share a figure."
                ),
                commands: Vec::new(),
                table: exit_table("design", &chart, "exits/interrupt"),
                chart,
            })
        })
        .collect();
    if figures.is_empty() {
        return None;
    }
    Some(Section {
        given: Vec::new(),
        id: Part::Extrapolation.id().into(),
        title: "Extrapolation: APICv, ELI and DID with this host's costs".into(),
        intro: vec![
            "The exits each design would still take, by reason, per real workload's twin: \
             the simulator with the exit costs measured on this host (the page's first line \
             says whether this host could run the design). The conclusions sum up what each \
             saves; the measured-and-predicted pivots give every metric."
                .into(),
        ],
        figures,
        tables: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::spread::Spread;

    #[test]
    fn each_metric_draws_its_points_within_the_tolerance_band_and_flags_every_miss() {
        let once = |v: f64| Spread::of([v]).expect("value");
        let comparisons = [
            Comparison::new("irq · a".into(), Metric::ExitsPerInterrupt, once(2.0), 2.1),
            Comparison::new("irq · b".into(), Metric::ExitsPerInterrupt, once(2.0), 1.0),
            Comparison::new(
                "timer · c".into(),
                Metric::ExitsPerInterrupt,
                once(4.0),
                4.0,
            ),
        ];
        let refs: Vec<&Comparison> = comparisons.iter().collect();
        let figure = metric_figure(Metric::ExitsPerInterrupt, &refs);
        let flags: Vec<bool> = figure.table.rows.iter().map(|r| r.flagged).collect();
        assert_eq!(flags, [false, true, false]);
        assert_eq!(figure.table.rows[1].cells[3], "-50.0%");
        assert!(
            figure.folded,
            "the misses' table carries the point; the scatter folds"
        );
        let Chart::Xy {
            x_axis,
            series,
            identity_line,
            ..
        } = &figure.chart
        else {
            panic!("a scatter");
        };
        assert!(*identity_line);
        // One series per bench, then the band's two lines from zero on a
        // linear axis (the values span less than two decades).
        assert_eq!(x_axis.scale, Scale::Linear);
        let names: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "irq",
                "timer",
                "20% over (y = 1.2 x)",
                "20% under (y = 0.8 x)"
            ]
        );
        assert_eq!(series[2].points, vec![[0.0, 0.0], [4.0, 4.0 * 1.2]]);
        assert!(series[2..].iter().all(|s| s.key == SeriesKey::Guide));
        assert!(figure.chart.has_data());
    }
}
