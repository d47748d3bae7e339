//! Report sections for the real runs on /dev/kvm: the interrupt paths'
//! latency into a running and a halted vCPU (the point), and folded away
//! the exits per interrupt, the latency distributions, IPI latency against
//! CPU burned, the whileloop, every run and its `perf kvm stat` tables.
//! Every measurement may have run several times: tables give the median
//! and the range, figures the median with a whisker over the range.

use std::collections::BTreeMap;

use dirq_stats::{f64_of, ratio};

use dirq_vmm::config::{Bench, BenchParams, GuestIdle, Named};
use dirq_vmm::exits::{KvmStat, VmxExit};
use dirq_vmm::probe::Floors;

use crate::common::format::compact_number;
use crate::common::plan::path_index;
use crate::common::real::RealCase;
use crate::common::views::Latency;
use crate::report::present::charts::{
    exit_bars, exit_table, grouped_lines, latency_cpu_scatter, percentile_chart,
    perf_kvm_stat_table, spread_us, ExitStat, LinePoint, PerfTimes,
};
use crate::report::present::data::{
    Axis, Cell, Chart, Figure, GroupedSeries, Scale, Section, SeriesKey, Spread, Table, TableRow,
    Unit,
};
use crate::report::present::page::Part;
use dirq_vmm::report::LATENCY_NS;

/// `guest_share`'s JSON name, as the guest's claims list it.
const GUEST_SHARE: &str = "guest_share";

/// Time in guest above 100% cannot be true.
fn impossible_share(spread: &Spread) -> bool {
    spread.max > 1.0
}

/// A caption's sentence naming the paths whose `figure` (a JSON name) is
/// the guest's claim, or nothing where none is.
fn claim_note(cases: &[&RealCase], figure: &str, what: &str) -> String {
    let claimed: Vec<&str> = cases
        .iter()
        .filter(|case| case.claims().contains(&figure))
        .map(|case| case.label.as_str())
        .collect();
    if claimed.is_empty() {
        return String::new();
    }
    format!(
        " The {what} of {} are the guest's claim: timed by the guest alone, and held to what \
         the VMM saw on one side at most (docs/hostile.md).",
        claimed.join(", ")
    )
}

/// A figure of the real runs `cases`, shown open, listing the commands
/// that repeat them.
fn cases_figure(
    id: String,
    title: String,
    caption: String,
    cases: &[&RealCase],
    chart: Chart,
    table: Table,
) -> Figure {
    Figure {
        id,
        title,
        caption,
        commands: cases.iter().map(|case| case.command.clone()).collect(),
        chart,
        table,
        folded: false,
    }
}

/// "3 runs each" or "one run each": how often the numbers were measured.
fn repeats_text(cases: &[&RealCase]) -> String {
    match cases.iter().map(|c| c.repeats.len()).max().unwrap_or(0) {
        0 | 1 => "One run each (--quick: no spread).".into(),
        n => format!("{n} runs each: the median, with the range over the runs."),
    }
}

/// A real path's colour: its place in the report's plan.
fn path_key(case: &RealCase) -> SeriesKey {
    path_index(&case.config)
        .and_then(|index| u8::try_from(index).ok())
        .map_or(SeriesKey::Variant, SeriesKey::Path)
}

/// "kernel + irqfd": the path of a label that also names the state.
fn path_name(case: &RealCase) -> &str {
    case.label.split(" · ").next().unwrap_or(&case.label)
}

/// "5K/s, 500 interrupts": how an irq-latency case was paced, which every
/// figure of it quotes.
fn pacing(cases: &[&RealCase]) -> String {
    let Some(BenchParams::IrqLatency(params)) = cases.first().map(|c| &c.config.params) else {
        return String::new();
    };
    if params.rate_hz == 0 {
        "back to back".into()
    } else {
        format!("paced at {}/s", compact_number(f64_of(params.rate_hz)))
    }
}

/// Builds the real-VMM section from the runs that succeeded; `floors`
/// (the probe's, when it ran) sets each latency beside the floor for the
/// state its interrupts found the vCPU in.
pub fn real_section(cases: &[RealCase], floors: Option<&Floors>) -> Section {
    let by_bench =
        |bench: Bench| -> Vec<&RealCase> { cases.iter().filter(|c| c.bench() == bench).collect() };
    let irq = by_bench(Bench::IrqLatency);
    let mut figures: Vec<Figure> = Vec::new();
    figures.extend(paths_figure(&irq, floors));
    let mut folded: Vec<Figure> = Vec::new();
    folded.extend(exits_per_interrupt_figure(&irq));
    for (idle, state) in [(GuestIdle::Busy, "busy"), (GuestIdle::Halt, "halted")] {
        let of_state: Vec<&RealCase> = irq
            .iter()
            .copied()
            .filter(|c| c.config.common.guest_idle == idle)
            .collect();
        folded.extend(latency_figure(
            &format!("real-irq-latency-{state}-latency"),
            &format!(
                "irq-latency, guest {state}: latency by percentile, per path (MSI raised by the \
                 device thread to the guest's acknowledgement)"
            ),
            &of_state,
        ));
    }
    folded.extend(latency_figure(
        "real-timer-latency-latency",
        "timer-latency: latency by percentile, per path (how late the guest's LAPIC timer \
         handler runs)",
        &by_bench(Bench::TimerLatency),
    ));
    folded.extend(ipi_figure(&by_bench(Bench::Ipi)));
    folded.extend(whileloop_figure(&by_bench(Bench::Whileloop)));
    for figure in &mut folded {
        figure.folded = true;
    }
    figures.extend(folded);
    let all: Vec<&RealCase> = cases.iter().collect();
    let mut tables = vec![runs_table(cases)];
    tables.extend(irq.iter().flat_map(|case| perf_kvm_stat_tables(case)));
    for table in &mut tables {
        table.folded = true;
    }
    Section {
        id: Part::Real.id().into(),
        title: "Real runs on this host's KVM".into(),
        intro: vec![format!(
            "dirq's own guest test kernel on /dev/kvm; every exit counted by VMX reason, from \
             the VMM's run loop (userspace) and KVM's binary stats (kernel). {}",
            repeats_text(&all)
        )],
        given: Vec::new(),
        figures,
        tables,
    }
}

/// The share of a case's interrupts that found the vCPU halted, and the
/// probe's floor (us) for the state the case asked for: like against like.
fn target_cells(case: &RealCase, floors: Option<&Floors>) -> [Cell; 2] {
    let halted = case.spread(|r| r.run.target?.halted_share);
    let floor = case
        .repeats
        .iter()
        .find_map(|r| r.run.target)
        .zip(floors)
        .map(|(target, floors)| floors.get(target.floor) / 1e3)
        .filter(|&us| us > 0.0);
    [
        Cell::spread(halted, Unit::Fraction),
        Cell::maybe(floor, Unit::Us),
    ]
}

/// The point: irq-latency's p50 per path, into a running and into a
/// halted vCPU, each path in its colour, with the exits and CPU behind it
/// and the floor for the state the interrupts found.
fn paths_figure(cases: &[&RealCase], floors: Option<&Floors>) -> Option<Figure> {
    let measured: Vec<&RealCase> = cases
        .iter()
        .copied()
        .filter(|c| c.p50().is_some())
        .collect();
    if measured.is_empty() {
        return None;
    }
    let states = [
        (GuestIdle::Busy, "into a running vCPU (guest busy)"),
        (GuestIdle::Halt, "into a halted vCPU (guest halted)"),
    ];
    let mut paths: Vec<(&str, SeriesKey)> = Vec::new();
    for case in &measured {
        if !paths.iter().any(|(name, _)| *name == path_name(case)) {
            paths.push((path_name(case), path_key(case)));
        }
    }
    let find = |path: &str, idle: GuestIdle| {
        measured
            .iter()
            .find(|c| path_name(c) == path && c.config.common.guest_idle == idle)
    };
    let series = paths
        .iter()
        .map(|(path, key)| GroupedSeries {
            name: (*path).to_string(),
            key: *key,
            values: states
                .iter()
                .map(|(idle, _)| find(path, *idle).and_then(|c| c.p50()).map(spread_us))
                .collect(),
        })
        .collect();
    let rows = measured
        .iter()
        .map(|case| {
            let samples: u64 = case.pooled_histogram().iter().map(|b| b.count).sum();
            let [halted, floor] = target_cells(case, floors);
            TableRow::new(vec![
                Cell::text(case.label.clone()),
                Cell::spread(case.p50().map(spread_us), Unit::Us),
                floor,
                halted,
                Cell::spread(case.exits_per_interrupt(), Unit::Count),
                Cell::spread(case.cpu_cores(), Unit::Cores),
                Cell::count(samples),
            ])
        })
        .collect();
    let chart = Chart::Grouped {
        value_axis: Axis {
            label: "latency p50 (us), raise to the guest's acknowledgement".into(),
            scale: Scale::Linear,
        },
        categories: states
            .iter()
            .map(|(_, state)| (*state).to_string())
            .collect(),
        series,
    };
    Some(cases_figure(
        "real-irq-latency-paths".into(),
        format!(
            "irq-latency ({}): p50 per interrupt path, into a running and a halted vCPU",
            pacing(cases)
        ),
        format!(
            "The device thread raises an MSI once the last was acknowledged ({}) and times \
             the round trip to the guest's acknowledgement; one colour per path in every \
             figure. Each row stands beside the probe's floor for the state it asked for (an IPI \
             into a busy or a halted vCPU, one way) and says how many of its interrupts found the \
             vCPU halted (KVM's HLT exits per interrupt). {}",
            pacing(cases),
            repeats_text(cases)
        ),
        cases,
        chart,
        Table {
            title: String::new(),
            columns: [
                "path",
                "p50 (us)",
                "floor (us)",
                "found halted",
                "exits per interrupt",
                "host CPU (cores)",
                "samples",
            ]
            .map(String::from)
            .to_vec(),
            rows,
            folded: false,
        },
    ))
}

/// The KVM statistic a row of OTHER exits splits off: instructions KVM
/// emulated, each one a trapped instruction.
const OTHER_EMULATED: &str = "OTHER · insn_emulation";
/// What of OTHER no KVM statistic names.
const OTHER_UNNAMED: &str = "OTHER · no KVM statistic";

/// A run's exits as KVM counted them, by VMX reason, OTHER split by KVM's
/// own statistics and HLT timed by its `halt_wait_ns`.
fn counted_exits(run: &crate::common::views::RealRun) -> BTreeMap<String, ExitStat> {
    let untimed = |samples| ExitStat {
        samples,
        time: PerfTimes::Untimed,
    };
    let mut rows = BTreeMap::new();
    for (&reason, &samples) in &run.exits.by_category {
        match reason {
            VmxExit::Other => {
                let emulated = run
                    .exits
                    .by_reason
                    .get(&KvmStat::InsnEmulation)
                    .copied()
                    .unwrap_or(0)
                    .min(samples);
                if emulated > 0 {
                    rows.insert(OTHER_EMULATED.to_string(), untimed(emulated));
                }
                if samples > emulated {
                    rows.insert(OTHER_UNNAMED.to_string(), untimed(samples - emulated));
                }
            }
            VmxExit::Hlt => {
                let time = run
                    .kvm_stat("halt_wait_ns")
                    .map_or(PerfTimes::Untimed, |ns| PerfTimes::Total { ns });
                rows.insert(reason.to_string(), ExitStat { samples, time });
            }
            _ => {
                rows.insert(reason.to_string(), untimed(samples));
            }
        }
    }
    rows
}

/// A case's exits as `perf kvm stat report` gives them, every run pooled:
/// those KVM counted (its counters carry no times but HLT's wait), and
/// those that returned to the VMM, timed by the run loop from KVM_RUN's
/// return to the next KVM_RUN.
fn perf_kvm_stat_tables(case: &RealCase) -> [Table; 2] {
    let runs = case.repeats.len();
    let counted: Vec<BTreeMap<String, ExitStat>> =
        case.repeats.iter().map(|r| counted_exits(&r.run)).collect();
    let returned: Vec<BTreeMap<String, ExitStat>> = case
        .repeats
        .iter()
        .map(|r| {
            let mut by_reason: BTreeMap<String, ExitStat> = BTreeMap::new();
            for (reason, time) in &r.run.exits.userspace_time {
                let stat = by_reason
                    .entry(VmxExit::from(*reason).to_string())
                    .or_insert(ExitStat {
                        samples: 0,
                        time: PerfTimes::Untimed,
                    });
                stat.samples += time.samples;
                stat.time = match stat.time {
                    PerfTimes::Timed(t) => PerfTimes::Timed(t.merge(*time)),
                    _ => PerfTimes::Timed(*time),
                };
            }
            by_reason
        })
        .collect();
    [
        perf_kvm_stat_table(
            format!(
                "{} {}: every exit KVM counted, {runs} run(s) pooled (OTHER split by KVM's \
                 insn_emulation; HLT's time is KVM's halt_wait_ns, the rest untimed)",
                case.bench(),
                case.label
            ),
            &counted,
        ),
        perf_kvm_stat_table(
            format!(
                "{} {}: the exits that returned to the VMM, {runs} run(s) pooled, the VMM's \
                 time until the next KVM_RUN",
                case.bench(),
                case.label
            ),
            &returned,
        ),
    ]
}

fn exits_per_interrupt_figure(cases: &[&RealCase]) -> Option<Figure> {
    let entries: Vec<(String, BTreeMap<VmxExit, f64>)> = cases
        .iter()
        .map(|case| {
            let mut reasons: Vec<VmxExit> = case
                .repeats
                .iter()
                .flat_map(|r| r.run.exits_per_interrupt_by_reason().into_keys())
                .collect();
            reasons.sort();
            reasons.dedup();
            let medians = reasons
                .into_iter()
                .filter_map(|reason| {
                    let spread = case.spread(|r| {
                        Some(
                            r.run
                                .exits_per_interrupt_by_reason()
                                .get(&reason)
                                .copied()
                                .unwrap_or(0.0),
                        )
                    })?;
                    Some((reason, spread.median))
                })
                .collect();
            (case.label.clone(), medians)
        })
        .collect();
    let chart = exit_bars("exits per delivered interrupt (median)", &entries);
    if !chart.has_data() {
        return None;
    }
    let table = exit_table("path", &chart, "exits/interrupt");
    Some(cases_figure(
        "real-exits-per-interrupt".into(),
        format!(
            "irq-latency ({}): exits per interrupt by VMX reason, per path",
            pacing(cases)
        ),
        format!(
            "The exits of each run by reason, divided by the interrupts it delivered. {}",
            repeats_text(cases)
        ),
        cases,
        chart,
        table,
    ))
}

/// Samples a percentile plot needs beyond a percentile to draw it.
const TAIL_SAMPLES: u64 = 10;

fn latency_figure(id: &str, title: &str, cases: &[&RealCase]) -> Option<Figure> {
    let measured: Vec<&RealCase> = cases
        .iter()
        .copied()
        .filter(|c| c.p50().is_some())
        .collect();
    if measured.is_empty() {
        return None;
    }
    let chart = percentile_chart(
        &measured
            .iter()
            .map(|case| (case.label.clone(), path_key(case), case.pooled_histogram()))
            .collect::<Vec<_>>(),
        TAIL_SAMPLES,
    );
    let latency = |figure: fn(&Latency) -> Option<f64>| {
        move |case: &RealCase| case.spread(|r| figure(r.run.latency_ns.as_ref()?))
    };
    let table = Table {
        title: String::new(),
        columns: [
            "path",
            "samples",
            "min (us)",
            "mean (us)",
            "p50 (us)",
            "p99 (us)",
            "max (us)",
        ]
        .map(String::from)
        .to_vec(),
        rows: measured
            .iter()
            .map(|case| {
                let samples: u64 = case.pooled_histogram().iter().map(|b| b.count).sum();
                TableRow::new(vec![
                    Cell::text(case.label.clone()),
                    Cell::count(samples),
                    Cell::spread(latency(|l| l.min)(case).map(spread_us), Unit::Us),
                    Cell::spread(latency(|l| Some(l.mean))(case).map(spread_us), Unit::Us),
                    Cell::spread(latency(|l| Some(l.p50))(case).map(spread_us), Unit::Us),
                    Cell::spread(latency(|l| Some(l.p99))(case).map(spread_us), Unit::Us),
                    Cell::spread(latency(|l| Some(l.max))(case).map(spread_us), Unit::Us),
                ])
            })
            .collect(),
        folded: false,
    };
    Some(cases_figure(
        id.into(),
        title.into(),
        format!(
            "HdrHistogram's percentile plot: each line is every sample of the path's runs, \
             from their buckets (5% wide); x is the percentile on a log scale of 1/(1 - p), so \
             50%, 90%, 99% and 99.9% are equally spaced. Each line stops where fewer than \
             {TAIL_SAMPLES} of its samples lie beyond: the tail past it is not resolved (the \
             table's max is one sample). {}{}",
            repeats_text(cases),
            claim_note(cases, LATENCY_NS, "latencies")
        ),
        cases,
        chart,
        table,
    ))
}

fn ipi_figure(cases: &[&RealCase]) -> Option<Figure> {
    let measured: Vec<(&RealCase, Spread, Spread)> = cases
        .iter()
        .filter_map(|case| Some((*case, case.p50()?, case.cpu_cores()?)))
        .collect();
    if measured.is_empty() {
        return None;
    }
    let chart = latency_cpu_scatter(
        "host CPU burned (cores)",
        "IPI round trip p50 (us)",
        &measured
            .iter()
            .map(|(case, p50, cpu)| (case.label.clone(), cpu.median, spread_us(*p50)))
            .collect::<Vec<_>>(),
    );
    let table = Table {
        title: String::new(),
        columns: [
            "halt mode",
            "p50 (us)",
            "p99 (us)",
            "CPU burned (cores)",
            "exits/IPI",
        ]
        .map(String::from)
        .to_vec(),
        rows: measured
            .iter()
            .map(|(case, p50, cpu)| {
                TableRow::new(vec![
                    Cell::text(case.label.clone()),
                    Cell::spread(Some(spread_us(*p50)), Unit::Us),
                    Cell::spread(case.p99().map(spread_us), Unit::Us),
                    Cell::spread(Some(*cpu), Unit::Cores),
                    Cell::spread(case.exits_per_interrupt(), Unit::Count),
                ])
            })
            .collect(),
        folded: false,
    };
    Some(cases_figure(
        "real-ipi-cpu".into(),
        "ipi: round-trip latency against host CPU burned, per halt mode".into(),
        format!(
            "vCPU 0 and vCPU 1 ping-pong IPIs; CPU burned is the vCPU threads' CPU time \
             (user + system) over the run's wall time. {}{}",
            repeats_text(cases),
            claim_note(cases, LATENCY_NS, "round trips")
        ),
        cases,
        chart,
        table,
    ))
}

fn whileloop_figure(cases: &[&RealCase]) -> Option<Figure> {
    let points: Vec<LinePoint> = cases
        .iter()
        .filter_map(|case| {
            Some(LinePoint {
                group: case.label.clone(),
                x: case.config_rate()?,
                y: case.guest_share()?,
            })
        })
        .collect();
    if points.is_empty() {
        return None;
    }
    let impossible = points.iter().filter(|p| impossible_share(&p.y)).count();
    let (mut chart, table) = grouped_lines(
        Axis {
            label: "device interrupts per second".into(),
            scale: Scale::Linear,
        },
        Axis {
            label: "time in guest (loop speed vs no interrupts)".into(),
            scale: Scale::Linear,
        },
        &points,
        Unit::Fraction,
        Some(1.0),
    );
    if let Chart::Xy { series, .. } = &mut chart {
        for series in series.iter_mut() {
            let case = cases.iter().find(|c| c.label == series.name);
            series.key = case.map_or(SeriesKey::Variant, |c| path_key(c));
        }
    }
    let mut caption = format!(
        "The guest times a fixed loop without interrupts, then under the device's interrupt \
         rate; time in guest is the ratio. {}{}",
        repeats_text(cases),
        claim_note(cases, GUEST_SHARE, "times in guest")
    );
    if impossible > 0 {
        caption.push_str(&format!(
            " {impossible} point(s) reach above 100% (flagged): no interrupt can speed the loop \
             up, so that is the noise of the unloaded baseline (how fast the same loop ran \
             alone), which is as large as the interrupts' cost at that rate."
        ));
    }
    Some(cases_figure(
        "real-whileloop-guest-time".into(),
        "whileloop: time in guest against interrupt rate, per path".into(),
        caption,
        cases,
        chart,
        table,
    ))
}

impl RealCase {
    fn config_rate(&self) -> Option<f64> {
        self.config.params.rate_hz().map(f64_of)
    }
}

fn runs_table(cases: &[RealCase]) -> Table {
    Table {
        title: "All real runs".into(),
        columns: [
            "bench",
            "path",
            "runs",
            "interrupts",
            "exits per interrupt",
            "of them to userspace",
            "KVM instruction emulations per interrupt",
            "p50 (us)",
            "time in guest",
            "CPU (cores)",
            "the guest's claims",
        ]
        .map(String::from)
        .to_vec(),
        rows: cases
            .iter()
            .map(|case| {
                let share = case.guest_share();
                TableRow::flagged(
                    vec![
                        Cell::text(case.bench().name()),
                        Cell::text(case.label.clone()),
                        Cell::count(case.repeats.len()),
                        Cell::spread(case.spread(|r| Some(f64_of(r.run.interrupts))), Unit::Count),
                        Cell::spread(case.exits_per_interrupt(), Unit::Count),
                        Cell::spread(
                            case.spread(|r| {
                                (r.run.interrupts > 0)
                                    .then(|| ratio(r.run.exits.userspace, r.run.interrupts))
                            }),
                            Unit::Count,
                        ),
                        Cell::spread(
                            case.spread(|r| r.run.per_interrupt(KvmStat::InsnEmulation)),
                            Unit::Count,
                        ),
                        Cell::spread(case.p50().map(spread_us), Unit::Us),
                        Cell::spread(share, Unit::Fraction),
                        Cell::spread(case.cpu_cores(), Unit::Cores),
                        Cell::text(case.claims().join(", ")),
                    ],
                    share.is_some_and(|s| impossible_share(&s)),
                )
            })
            .collect(),
        folded: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::real::Repeat;
    use crate::report::collect::fixtures::{no_figures, real_run};
    use crate::report::present::data::Chart;
    use dirq_vmm::config::{Bench, BenchConfig};
    use dirq_vmm::probe::Floor;
    use dirq_vmm::report::{Bucket, Target};
    use dirq_vmm::results::{BenchResult, WhileloopResult};

    fn case(bench: &str, label: &str, interrupts: u64, by_category: serde_json::Value) -> RealCase {
        let bench: Bench = bench.parse().expect("bench name");
        let figures = match bench {
            Bench::Whileloop => BenchResult::Whileloop(WhileloopResult {
                guest_share: 1.02,
                ..WhileloopResult::default()
            }),
            other => no_figures(other),
        };
        let mut run = real_run(
            serde_json::json!({
                "config": {"rate_hz": 5000},
                "interrupts": interrupts,
                "exits": {"total": 2 * interrupts, "userspace": 0, "kernel": 0, "by_category": by_category},
                "exits_per_interrupt": 2.0,
                "latency_ns": {"mean": 9000.0, "p50": 8000.0, "p99": 20000.0, "max": 50000.0},
                "duration_s": 1.0
            }),
            &figures,
        );
        run.latency_histogram = vec![
            Bucket {
                le_ns: 8000,
                count: 30,
            },
            Bucket {
                le_ns: 50000,
                count: 20,
            },
        ];
        let mut slower = run.clone();
        slower.exits_per_interrupt = 3.0;
        RealCase {
            label: label.into(),
            command: format!("dirq run {bench}"),
            config: BenchConfig::new(bench),
            repeats: vec![
                Repeat {
                    run,
                    cpu_cores: 0.5,
                },
                Repeat {
                    run: slower,
                    cpu_cores: 0.7,
                },
            ],
        }
    }

    #[test]
    fn real_section_divides_exits_by_interrupts_and_plots_each_bench() {
        let cases = vec![
            case(
                "irq-latency",
                "userspace",
                1000,
                serde_json::json!({"IO_INSTRUCTION": 1000, "INTERRUPT_WINDOW": 500, "OTHER": 500}),
            ),
            case(
                "irq-latency",
                "kernel",
                1000,
                serde_json::json!({"OTHER": 2000}),
            ),
            case(
                Bench::Ipi.name(),
                "halt exit",
                100,
                serde_json::json!({"HLT": 100, "OTHER": 100}),
            ),
            case(
                "whileloop",
                "kernel",
                100,
                serde_json::json!({"OTHER": 200}),
            ),
        ];
        let section = real_section(&cases, None);
        let ids: Vec<&str> = section.figures.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "real-irq-latency-paths",
                "real-exits-per-interrupt",
                "real-irq-latency-halted-latency",
                "real-ipi-cpu",
                "real-whileloop-guest-time"
            ]
        );
        // The paths' p50s carry the point; the rest fold away.
        let open: Vec<bool> = section.figures.iter().map(|f| !f.folded).collect();
        assert_eq!(open, [true, false, false, false, false]);
        let Chart::Grouped { series, .. } = &section.figures[0].chart else {
            panic!("the paths' p50s are grouped bars");
        };
        // Each path in its own colour: its place in the plan.
        let keys: Vec<SeriesKey> = series.iter().map(|s| s.key).collect();
        assert_eq!(keys, [SeriesKey::Path(2), SeriesKey::Path(2)]);
        let Chart::Bars {
            categories, stacks, ..
        } = &section.figures[1].chart
        else {
            panic!("exits per interrupt are bars");
        };
        assert_eq!(categories, &["userspace", "kernel"]);
        let stack = |name: &str| {
            stacks
                .iter()
                .find(|s| s.name == name)
                .map(|s| s.values.clone())
                .unwrap_or_else(|| panic!("no {name} stack"))
        };
        assert_eq!(stack("IO_INSTRUCTION"), vec![1.0, 0.0]);
        assert_eq!(stack("INTERRUPT_WINDOW"), vec![0.5, 0.0]);
        assert_eq!(stack("OTHER"), vec![0.5, 2.0]);
        // The percentile plot is drawn from the pooled buckets of both
        // runs (100 samples), in us, up to the percentile ten samples
        // still resolve.
        let Chart::Xy { series, .. } = &section.figures[2].chart else {
            panic!("latency is xy");
        };
        assert_eq!(series[0].points, vec![[0.0, 8.0], [0.6, 50.0], [0.9, 50.0]]);
        let latency = &section.figures[2].table;
        assert_eq!(latency.columns[2], "min (us)");
        assert_eq!(latency.rows[0].cells[1], "100");
        assert_eq!(latency.rows[0].cells[4], "8.00");
        // Two runs: the median and the range of each measurement.
        let table = &section.tables[0];
        assert_eq!(table.rows[0].cells[2], "2");
        assert_eq!(table.rows[0].cells[4], "2.50 (2.00\u{2013}3.00)");
        // Time in guest above 100% is flagged, in the table and the caption.
        assert!(table.rows[3].flagged);
        assert!(!table.rows[0].flagged);
        assert!(section.figures[4].caption.contains("above 100%"));
        // No run reported a figure as the guest's claim: nothing says so.
        assert!(section
            .figures
            .iter()
            .all(|figure| !figure.caption.contains("the guest's claim")));
        assert_eq!(table.rows[0].cells[10], "");
    }

    #[test]
    fn a_figure_that_is_the_guests_claim_is_marked_where_it_is_shown() {
        let mut timer = case(
            "timer-latency",
            "lapic",
            100,
            serde_json::json!({"OTHER": 200}),
        );
        let mut whileloop = case(
            "whileloop",
            "kernel",
            100,
            serde_json::json!({"OTHER": 200}),
        );
        timer.repeats[0].run.guest_claims = vec![LATENCY_NS.into()];
        whileloop.repeats[1].run.guest_claims = vec![GUEST_SHARE.into(), "iterations".into()];
        let section = real_section(&[timer, whileloop], None);
        let says = |text: &str| section.figures.iter().any(|f| f.caption.contains(text));
        assert!(says("The latencies of lapic are the guest's claim"));
        assert!(says("The times in guest of kernel are the guest's claim"));
        let table = &section.tables[0];
        assert_eq!(table.columns[10], "the guest's claims");
        assert_eq!(table.rows[0].cells[10], LATENCY_NS);
        assert_eq!(table.rows[1].cells[10], "guest_share, iterations");
    }

    #[test]
    fn each_path_stands_beside_the_floor_of_the_state_its_interrupts_found() {
        let mut halted = case(
            "irq-latency",
            "kernel · halted",
            1000,
            serde_json::json!({"HLT": 1000}),
        );
        for (repeat, share) in halted.repeats.iter_mut().zip([0.96, 0.5]) {
            repeat.run.target = Some(Target {
                asked: GuestIdle::Halt,
                halted_share: Some(share),
                floor: Floor::IpiHalted,
            });
        }
        let mut busy = case(
            "irq-latency",
            "kernel",
            1000,
            serde_json::json!({"OTHER": 2000}),
        );
        for repeat in &mut busy.repeats {
            repeat.run.target = Some(Target {
                asked: GuestIdle::Busy,
                halted_share: None,
                floor: Floor::IpiBusy,
            });
        }
        let floors = Floors {
            ipi_busy_p50_ns: 3_000.0,
            ipi_halted_p50_ns: 40_000.0,
            ..Floors::default()
        };
        let section = real_section(&[halted, busy], Some(&floors));
        let table = &section.figures[0].table;
        assert_eq!(table.columns[2..4], ["floor (us)", "found halted"]);
        // The halted run beside the halted floor, with the share of its
        // interrupts that found the vCPU in HLT over its two runs.
        assert_eq!(table.rows[0].cells[2], "40.0");
        assert_eq!(table.rows[0].cells[3], "73.00% (50.00%\u{2013}96.00%)");
        // The busy run beside the busy floor; its halts are not counted.
        assert_eq!(table.rows[1].cells[2], "3.00");
        assert_eq!(table.rows[1].cells[3], "-");
        // Without a probe there is no floor to stand beside.
        let without = real_section(&[case("irq-latency", "k", 10, serde_json::json!({}))], None);
        assert_eq!(without.figures[0].table.rows[0].cells[2], "-");
    }

    #[test]
    fn kvm_s_exits_split_other_by_its_own_statistics_and_time_hlt_by_its_wait() {
        let run = real_run(
            serde_json::json!({
                "interrupts": 2,
                "exits": {"userspace": 0,
                          "by_reason": {"insn_emulation": 4},
                          "by_category": {"OTHER": 10, "HLT": 2},
                          "per_vcpu": [{"kvm_stats": {"halt_wait_ns": 1000}},
                                       {"kvm_stats": {"halt_wait_ns": 500}}]},
                "exits_per_interrupt": 6.0,
                "duration_s": 1.0
            }),
            &no_figures(Bench::IrqLatency),
        );
        let rows = counted_exits(&run);
        let samples = |name: &str| rows.get(name).map(|stat| stat.samples);
        assert_eq!(samples(OTHER_EMULATED), Some(4));
        assert_eq!(samples(OTHER_UNNAMED), Some(6));
        assert_eq!(samples("OTHER"), None, "OTHER is split, not repeated");
        assert_eq!(
            rows.get("HLT").map(|stat| stat.time),
            Some(PerfTimes::Total { ns: 1_500 })
        );
    }
}
