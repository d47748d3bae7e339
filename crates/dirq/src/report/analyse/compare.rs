//! What the conclusions compare, as typed findings the page then words:
//! which real interrupt path into a vCPU is fastest and which tie with it,
//! and how a design's predicted change against vanilla groups over the
//! workloads of one bench.

use dirq_sim::design::DesignKind;
use dirq_vmm::config::{Bench, GuestIdle, HaltMode, Irqchip};

use crate::common::real::RealCase;
use crate::common::spread::Spread;
use crate::common::views::SimScenario;
use crate::report::analyse::checks::Extrapolated;

/// Beyond its range, a single run's p50 within this share of the fastest
/// cannot be told from it: one run measures no spread.
pub const SINGLE_RUN_TIE_BAND: f64 = 0.10;

/// Whether a path's p50 is indistinguishable from the fastest's: their
/// ranges over the runs overlap, or, measured once, the two lie within
/// [`SINGLE_RUN_TIE_BAND`].
pub fn ties(fastest: &Spread, other: &Spread) -> bool {
    let overlap = other.min <= fastest.max && fastest.min <= other.max;
    let single_run = fastest.runs.min(other.runs) <= 1;
    overlap || (single_run && other.median <= fastest.median * (1.0 + SINGLE_RUN_TIE_BAND))
}

/// One real irq-latency path into a vCPU and its p50 over the runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Path {
    /// The path's irqchip and injection ("kernel + irqfd").
    pub name: String,
    /// Whether it is the userspace irqchip, the path the others beat.
    pub userspace: bool,
    pub p50: Spread,
}

/// The paths into a vCPU in one state, by their p50.
#[derive(Debug, PartialEq)]
pub struct PathRanking<'a> {
    /// The fastest path, then every path that ties with it, fastest first.
    pub tied: Vec<&'a Path>,
    /// The fastest path that does not tie.
    pub next: Option<&'a Path>,
    /// The userspace irqchip, when it does not tie.
    pub userspace: Option<&'a Path>,
    /// The fewest runs behind a tied path's p50.
    pub runs: usize,
}

impl PathRanking<'_> {
    pub fn fastest(&self) -> &Path {
        self.tied[0]
    }
}

/// The ranking of `paths`; none with fewer than two to compare.
pub fn rank_paths(paths: &[Path]) -> Option<PathRanking<'_>> {
    if paths.len() < 2 {
        return None;
    }
    let mut sorted: Vec<&Path> = paths.iter().collect();
    sorted.sort_by(|a, b| a.p50.median.total_cmp(&b.p50.median));
    let best = sorted[0].p50;
    let (tied, rest): (Vec<&Path>, Vec<&Path>) =
        sorted.into_iter().partition(|path| ties(&best, &path.p50));
    Some(PathRanking {
        runs: tied.iter().map(|path| path.p50.runs).min().unwrap_or(1),
        next: rest.first().copied(),
        userspace: rest.iter().copied().find(|path| path.userspace),
        tied,
    })
}

/// The measured irq-latency paths into a vCPU that is `idle` between
/// interrupts, each named by its label's first part.
pub fn irq_latency_paths(cases: &[RealCase], idle: GuestIdle) -> Vec<Path> {
    cases
        .iter()
        .filter(|c| c.bench() == Bench::IrqLatency && c.config.common.guest_idle == idle)
        .filter_map(|c| {
            Some(Path {
                name: c.label.split(" · ").next().unwrap_or(&c.label).to_string(),
                userspace: c.config.common.irqchip == Irqchip::Userspace,
                p50: c.p50()?,
            })
        })
        .collect()
}

/// Workloads of one bench whose changes lie close together: stated as one
/// range, never merged with another bench's or a far-off neighbour's.
#[derive(Debug, PartialEq)]
pub struct Cluster<'a> {
    pub bench: &'a str,
    pub workloads: Vec<&'a str>,
    pub min: f64,
    pub max: f64,
}

/// Two changes of one bench this far apart (in fractions) are stated apart.
pub const CLUSTER_GAP: f64 = 0.10;

/// One workload's predicted change against vanilla.
pub type Change<'a> = (&'a str, &'a str, f64);

/// `changes` (bench, workload, change) grouped per bench in first-seen
/// order, each bench split where consecutive changes differ by more than
/// [`CLUSTER_GAP`].
pub fn clusters<'a>(changes: &[Change<'a>]) -> Vec<Cluster<'a>> {
    let mut benches: Vec<&str> = Vec::new();
    for (bench, _, _) in changes {
        if !benches.contains(bench) {
            benches.push(bench);
        }
    }
    let mut clusters: Vec<Cluster> = Vec::new();
    for bench in benches {
        let mut of_bench: Vec<(&str, f64)> = changes
            .iter()
            .filter(|(b, _, _)| *b == bench)
            .map(|(_, workload, change)| (*workload, *change))
            .collect();
        of_bench.sort_by(|a, b| a.1.total_cmp(&b.1));
        for (workload, change) in of_bench {
            match clusters.last_mut() {
                Some(last) if last.bench == bench && change - last.max <= CLUSTER_GAP => {
                    last.workloads.push(workload);
                    last.max = change;
                }
                _ => clusters.push(Cluster {
                    bench,
                    workloads: vec![workload],
                    min: change,
                    max: change,
                }),
            }
        }
    }
    clusters
}

/// Workloads in the order they were first extrapolated.
pub fn workloads(extrapolation: &[Extrapolated]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for e in extrapolation {
        if !names.contains(&e.workload) {
            names.push(e.workload.clone());
        }
    }
    names
}

/// The twin of `workload` under `design`.
pub fn find<'a>(
    extrapolation: &'a [Extrapolated],
    workload: &str,
    design: DesignKind,
) -> Option<&'a Extrapolated> {
    extrapolation
        .iter()
        .find(|e| e.workload == workload && e.design == design)
}

/// `design`'s relative change against vanilla in what `pick` reads, per
/// workload where both have it and vanilla's is positive.
pub fn changes_against_vanilla(
    extrapolation: &[Extrapolated],
    design: DesignKind,
    pick: fn(&Extrapolated) -> Option<f64>,
) -> Vec<Change<'_>> {
    let mut changes = Vec::new();
    for workload in workloads(extrapolation) {
        let Some(vanilla) = find(extrapolation, &workload, DesignKind::Vanilla) else {
            continue;
        };
        let Some(this) = find(extrapolation, &workload, design).and_then(pick) else {
            continue;
        };
        let Some(before) = pick(vanilla).filter(|&v| v > 0.0) else {
            continue;
        };
        changes.push((
            vanilla.bench.as_str(),
            vanilla.workload.as_str(),
            (this - before) / before,
        ));
    }
    changes
}

/// `design`'s prediction against vanilla's in what `pick` reads, per
/// workload where both have it: (workload, vanilla's, the design's).
pub fn against_vanilla(
    extrapolation: &[Extrapolated],
    design: DesignKind,
    pick: fn(&Extrapolated) -> Option<f64>,
) -> Vec<(&str, f64, f64)> {
    workloads(extrapolation)
        .iter()
        .filter_map(|workload| {
            let vanilla = find(extrapolation, workload, DesignKind::Vanilla)?;
            let this = find(extrapolation, workload, design).and_then(pick)?;
            Some((vanilla.workload.as_str(), pick(vanilla)?, this))
        })
        .collect()
}

/// The smallest and largest of `values`; none without any.
pub fn range(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    values.into_iter().fold(None, |range, value| match range {
        None => Some((value, value)),
        Some((low, high)) => Some((low.min(value), high.max(value))),
    })
}

/// A real ipi run that halted in KVM's halt polling, against the same
/// ping-pong with plain HLT exits: what the window bought and what it
/// burned.
#[derive(Debug, Clone, PartialEq)]
pub struct PollingWindow {
    pub window_ns: u32,
    /// IPI round trip p50 (ns) with the window and without it.
    pub p50: Spread,
    pub hlt_p50: Spread,
    /// Host cores the vCPU threads kept busy, with the window and without.
    pub cpu: Spread,
    pub hlt_cpu: Spread,
}

impl PollingWindow {
    /// Whether the window's round trip is shorter than HLT's beyond both
    /// ranges (or, measured once, by more than the single-run tie band).
    pub fn faster(&self) -> bool {
        self.p50.median < self.hlt_p50.median && !ties(&self.p50, &self.hlt_p50)
    }
}

/// Every halt-polling window of the real ipi runs against its HLT-exit
/// run, in window order.
pub fn polling_windows(cases: &[RealCase]) -> Vec<PollingWindow> {
    let ipi = |halt: HaltMode| {
        cases.iter().find(|c| {
            c.bench() == Bench::Ipi
                && c.config.common.guest_idle == GuestIdle::Halt
                && c.config.common.halt == halt
        })
    };
    let Some(hlt) = ipi(HaltMode::Exit) else {
        return Vec::new();
    };
    let (Some(hlt_p50), Some(hlt_cpu)) = (hlt.p50(), hlt.cpu_cores()) else {
        return Vec::new();
    };
    let mut windows: Vec<PollingWindow> = cases
        .iter()
        .filter(|c| c.bench() == Bench::Ipi && c.config.common.guest_idle == GuestIdle::Halt)
        .filter_map(|c| {
            let HaltMode::Poll { ns } = c.config.common.halt else {
                return None;
            };
            Some(PollingWindow {
                window_ns: ns,
                p50: c.p50()?,
                hlt_p50,
                cpu: c.cpu_cores()?,
                hlt_cpu,
            })
        })
        .collect();
    windows.sort_by_key(|w| w.window_ns);
    windows
}

/// A simulated scenario's designs side by side at its highest rate.
#[derive(Debug, Clone, PartialEq)]
pub struct AtTopRate<'a> {
    pub scenario: &'a str,
    pub rate: f64,
    /// Each design's time in guest there, in run order.
    pub time_in_guest: Vec<(DesignKind, f64)>,
}

/// `scenario`'s designs at the highest rate it ran, each design's first run
/// there (runs that differ in another parameter would repeat a design);
/// none unless two or more designs ran at it.
pub fn at_top_rate(scenario: &SimScenario) -> Option<AtTopRate<'_>> {
    let top = scenario
        .runs
        .iter()
        .filter_map(|run| run.rate())
        .map(|(_, rate)| rate)
        .fold(f64::NEG_INFINITY, f64::max);
    let mut time_in_guest: Vec<(DesignKind, f64)> = Vec::new();
    for run in &scenario.runs {
        let at_top = run.rate().is_some_and(|(_, rate)| rate == top);
        if at_top
            && !time_in_guest
                .iter()
                .any(|(design, _)| *design == run.design)
        {
            time_in_guest.push((run.design, run.time_in_guest));
        }
    }
    (time_in_guest.len() > 1).then_some(AtTopRate {
        scenario: &scenario.scenario,
        rate: top,
        time_in_guest,
    })
}

/// The most repeats behind any real case; none without real cases.
pub fn most_repeats(cases: &[RealCase]) -> Option<usize> {
    cases.iter().map(|case| case.repeats.len()).max()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(values: &[f64]) -> Spread {
        Spread::of(values.iter().copied()).expect("values")
    }

    fn path(name: &str, userspace: bool, p50: &[f64]) -> Path {
        Path {
            name: name.into(),
            userspace,
            p50: spread(p50),
        }
    }

    #[test]
    fn overlapping_ranges_tie_and_the_userspace_irqchip_is_kept_apart() {
        let paths = [
            path("kernel + irqfd", false, &[51_600.0, 50_400.0, 54_600.0]),
            path("kernel + vcpu", false, &[52_500.0, 51_000.0, 53_900.0]),
            path("split + irqfd", false, &[52_000.0, 50_900.0, 54_000.0]),
            path("userspace", true, &[110_000.0, 108_000.0, 113_000.0]),
        ];
        let ranking = rank_paths(&paths).expect("four paths");
        let tied: Vec<&str> = ranking.tied.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(tied, ["kernel + irqfd", "split + irqfd", "kernel + vcpu"]);
        assert_eq!(ranking.fastest().name, "kernel + irqfd");
        assert_eq!(ranking.next.map(|p| p.name.as_str()), Some("userspace"));
        assert_eq!(
            ranking.userspace.map(|p| p.name.as_str()),
            Some("userspace")
        );
        assert_eq!(ranking.runs, 3);
    }

    #[test]
    fn a_path_apart_wins_alone_and_one_path_is_no_comparison() {
        let paths = [
            path("kernel + vcpu", false, &[52_500.0, 51_000.0, 53_900.0]),
            path("kernel + irqfd", false, &[40_000.0, 39_000.0, 41_000.0]),
        ];
        let ranking = rank_paths(&paths).expect("two paths");
        assert_eq!(ranking.tied, [&paths[1]]);
        assert_eq!(ranking.next, Some(&paths[0]));
        assert_eq!(ranking.userspace, None);
        assert_eq!(rank_paths(&paths[..1]), None);
    }

    #[test]
    fn single_runs_within_the_band_tie_and_beyond_it_do_not() {
        let once = |ns: f64| spread(&[ns]);
        assert!(ties(&once(50_000.0), &once(54_000.0)));
        assert!(!ties(&once(50_000.0), &once(56_000.0)));
        // Three runs each: only overlapping ranges tie.
        assert!(!ties(
            &spread(&[50_000.0, 49_000.0, 51_000.0]),
            &spread(&[52_000.0, 51_500.0, 53_000.0])
        ));
        let paths = [
            path("kernel + irqfd", false, &[50_000.0]),
            path("kernel + vcpu", false, &[54_000.0]),
        ];
        let ranking = rank_paths(&paths).expect("two paths");
        assert_eq!((ranking.tied.len(), ranking.runs), (2, 1));
    }

    #[test]
    fn changes_cluster_per_bench_and_split_at_the_gap() {
        let changes = [
            ("halt", "a", -0.02),
            ("timer", "1 kHz", -1.0),
            ("halt", "b", -0.01),
            ("halt", "c", -0.30),
            ("halt", "d", -0.03),
        ];
        let clusters = clusters(&changes);
        let shape: Vec<(&str, Vec<&str>, f64, f64)> = clusters
            .iter()
            .map(|c| (c.bench, c.workloads.clone(), c.min, c.max))
            .collect();
        assert_eq!(
            shape,
            [
                ("halt", vec!["c"], -0.30, -0.30),
                ("halt", vec!["d", "a", "b"], -0.03, -0.01),
                ("timer", vec!["1 kHz"], -1.0, -1.0),
            ]
        );
    }

    #[test]
    fn the_top_rate_keeps_each_designs_first_run_there() {
        let run = |design: &str, rate: u64, share: f64| {
            serde_json::json!({"design": design, "params": {"rate_pps": rate},
                               "exits_per_s": 1.0, "time_in_guest": share})
        };
        let scenario: SimScenario = serde_json::from_value(serde_json::json!({
            "scenario": "udp",
            "runs": [run("vanilla", 100, 0.9), run("vanilla", 600, 0.2), run("did", 600, 0.8),
                     run("did", 600, 0.7), run("did", 100, 0.95)]
        }))
        .expect("contract parses");
        assert_eq!(
            at_top_rate(&scenario),
            Some(AtTopRate {
                scenario: "udp",
                rate: 600.0,
                time_in_guest: vec![(DesignKind::Vanilla, 0.2), (DesignKind::Did, 0.8)],
            })
        );
        let alone = SimScenario {
            scenario: "one".into(),
            runs: scenario.runs[..2].to_vec(),
            inputs: None,
        };
        assert_eq!(at_top_rate(&alone), None);
    }
}
