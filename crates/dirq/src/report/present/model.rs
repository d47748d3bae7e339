//! The model-vs-reality and extrapolation sections: the model checks
//! (`analyse::checks`) as figures and tables.

use std::collections::BTreeMap;

use dirq_vmm::exits::VmxExit;

use crate::common::format::ns_to_us;
use crate::report::analyse::checks::ModelChecks;
use crate::report::analyse::model::{scores, Comparison, Metric};
use crate::report::collect::twins::TWIN_DURATION_MS;
use crate::report::present::charts::{exit_bars, exit_table};
use crate::report::present::data::{
    Axis, Cell, Chart, Figure, Scale, Section, Series, SeriesStyle, Table, TableRow, Unit,
};

impl Metric {
    /// The value as figures and tables show it: latencies in us.
    pub fn shown(self, value: f64) -> f64 {
        match self {
            Metric::LatencyP50Ns | Metric::LostPerInterruptNs => ns_to_us(value),
            Metric::ExitsPerInterrupt | Metric::TimeInGuest => value,
        }
    }

    /// The unit of [`Metric::shown`].
    fn unit(self) -> Unit {
        match self {
            Metric::LatencyP50Ns | Metric::LostPerInterruptNs => Unit::Us,
            Metric::ExitsPerInterrupt => Unit::Count,
            Metric::TimeInGuest => Unit::Fraction,
        }
    }

    /// A measured or predicted value's cell.
    fn cell(self, value: f64) -> Cell {
        Cell::number(self.shown(value), self.unit())
    }
}

/// Measured against predicted on log-log axes with the y = x line, one
/// colour per metric, and the full table with every miss flagged.
pub fn comparison_figure(
    comparisons: &[Comparison],
    caption: String,
    commands: Vec<String>,
) -> Figure {
    let metrics = Metric::ALL;
    let chart = Chart::Xy {
        x_axis: Axis {
            label: "measured".into(),
            scale: Scale::Log,
        },
        y_axis: Axis {
            label: "predicted".into(),
            scale: Scale::Log,
        },
        series: metrics
            .iter()
            .map(|metric| {
                Series::new(
                    metric.label(),
                    SeriesStyle::Points,
                    comparisons
                        .iter()
                        .filter(|c| c.metric == *metric)
                        .map(|c| [metric.shown(c.measured), metric.shown(c.predicted)])
                        .collect(),
                )
            })
            .filter(|series| !series.points.is_empty())
            .collect(),
        identity_line: true,
    };
    let table = Table {
        title: String::new(),
        columns: [
            "configuration",
            "metric",
            "measured",
            "predicted",
            "error",
            "within 20%",
        ]
        .map(String::from)
        .to_vec(),
        rows: comparisons
            .iter()
            .map(|c| {
                TableRow::flagged(
                    vec![
                        Cell::text(c.configuration.clone()),
                        Cell::text(c.metric.label()),
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
            .collect(),
    };
    Figure {
        id: "model-vs-reality".into(),
        title: "Measured against predicted".into(),
        caption,
        commands,
        chart,
        table,
    }
}

/// The model-vs-reality section: every comparison, misses flagged, and the
/// real runs the model cannot express.
pub fn model_section(checks: &ModelChecks, profile_file: &str) -> Section {
    let misses = checks
        .comparisons
        .iter()
        .filter(|c| !c.within_tolerance)
        .count();
    let mut figures = Vec::new();
    if !checks.comparisons.is_empty() {
        figures.push(comparison_figure(
            &checks.comparisons,
            format!(
                "Every real run above against its simulated twin: `dirq sim` on \
                 a one-group scenario of the same shape and device (irq-latency as udp-rx over \
                 virtio at the same rate, timer-latency as cyclictest, ipi as ipi, whileloop as \
                 whileloop under a virtio receive at the same rate), \
                 vanilla design, {TWIN_DURATION_MS} ms simulated, with {profile_file} adjusted \
                 for the path (userspace-irqchip exits cost a userspace exit, and a kicked \
                 one the kick's host interrupt too; halt polling window; no idle-VM exits, \
                 which dirq's guest does not make). The IPI bench is a ping-pong measuring a \
                 round trip: its p50 is halved to compare with the one-way prediction, and \
                 the twin sends its pings at the rate the real ones went; where KVM counted \
                 HLT exits although HLT was not to exit (kvm_pvm traps every HLT), the twin \
                 halt-polls with the host's default window, as KVM did. Whileloop's time in \
                 guest is the loop's share of the core; beside it, the time the loop lost per \
                 handled interrupt, which stays well-conditioned where the share nears zero \
                 at saturation. \
                 The measured value is the median of the real runs, the range beside it."
            ),
            Vec::new(),
        ));
    }
    let unmodelled = Table {
        title: "Real runs the model does not express".into(),
        columns: vec!["configuration".into(), "why".into()],
        rows: checks
            .unmodelled
            .iter()
            .map(|u| TableRow::new(vec![u.configuration.clone(), u.reason.clone()]))
            .collect(),
    };
    let explained = Table {
        title: "Every miss, and what the counters of the run and its twin say".into(),
        columns: vec!["configuration".into(), "metric".into(), "why".into()],
        rows: checks
            .misses
            .iter()
            .map(|miss| {
                TableRow::new(vec![
                    miss.configuration.clone(),
                    miss.metric.label().into(),
                    miss.why.clone(),
                ])
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
    Section {
        id: "model-vs-reality".into(),
        title: "Model against reality".into(),
        intro: vec![
            format!(
                "{} of {} predictions are within 20% of the measurement; every miss is flagged \
                 in the table, none is hidden. Nothing was tuned to make a prediction match: \
                 the costs come from the calibration above and the simulator's mechanisms are \
                 unchanged.",
                checks.comparisons.len() - misses,
                checks.comparisons.len()
            ),
            format!(
                "Within 20%, by metric: {}.",
                hits_by_metric(&checks.comparisons)
            ),
            "Measured exits are KVM's `exits` statistic. The model counts every EOI and timer \
             write as an exit, as VMX does; kvm_pvm serves writes to KVM's own LAPIC by \
             emulating the trapped instruction and leaves them out of `exits` (see the \
             instruction emulations per interrupt in the real runs table), so on a kvm_pvm host \
             the predictions for KVM's LAPIC leave out the model's MSR-write and APIC-access \
             exits. The extrapolation below counts every exit."
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
        id: "extrapolation".into(),
        title: "Extrapolation: APICv, ELI and DID with this host's costs".into(),
        intro: vec![
            "This host has no VT-x, so none of these designs can run here; the simulator \
             predicts what each would save with the exit costs measured on this host. The \
             conclusions at the top compare every metric per design and workload; here are \
             the exits each design would still take, by reason."
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
    fn the_comparison_table_flags_every_miss() {
        let once = |v: f64| Spread::of([v]).expect("value");
        let comparisons = [
            Comparison::new("a".into(), Metric::LatencyP50Ns, once(10_000.0), 11_500.0),
            Comparison::new("b".into(), Metric::ExitsPerInterrupt, once(2.0), 1.0),
            Comparison::new("c".into(), Metric::ExitsPerInterrupt, once(0.0), 0.0),
            Comparison::new("d".into(), Metric::ExitsPerInterrupt, once(0.0), 0.3),
        ];
        let figure = comparison_figure(&comparisons, "x".into(), Vec::new());
        let flags: Vec<bool> = figure.table.rows.iter().map(|r| r.flagged).collect();
        assert_eq!(flags, [false, true, false, true]);
        assert_eq!(figure.table.rows[1].cells[4], "-50.0%");
        assert!(figure.chart.has_data());
    }
}
