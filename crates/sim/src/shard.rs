//! Splitting a sweep for batch engines (Slurm array jobs, Kubernetes
//! Indexed Jobs): shard `i/n` runs every run whose index in the sweep
//! leaves remainder `i - 1` when divided by `n`, so the n shards are
//! disjoint, cover every run and take about as long as each other; [`merge`]
//! puts the parts back into the results one process gives. The runs are
//! independent and seeded per run, so a run's result does not depend on
//! the shard it ran in. docs/scale.md shows the jobs.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::metrics::{QosCheck, ThroughputUnit, WorkloadFigures};
use crate::{run_selected, RunOptions, RunResult, Scenario, ScenarioResult, SimError};

/// One of `count` disjoint parts of a sweep; `index` counts from 1, as
/// `split -n K/N` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "ShardFields", into = "ShardFields")]
pub struct Shard {
    index: u32,
    count: u32,
}

/// A shard as written in a part file, checked on reading.
#[derive(Clone, Copy, Serialize, Deserialize)]
struct ShardFields {
    index: u32,
    count: u32,
}

impl TryFrom<ShardFields> for Shard {
    type Error = ShardError;

    fn try_from(fields: ShardFields) -> Result<Self, ShardError> {
        Shard::new(fields.index, fields.count)
    }
}

impl From<Shard> for ShardFields {
    fn from(shard: Shard) -> Self {
        ShardFields {
            index: shard.index,
            count: shard.count,
        }
    }
}

/// A shard that cannot be.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ShardError {
    #[error("a shard is written i/n, e.g. 2/7 (got {0:?})")]
    Malformed(String),
    #[error("a sweep splits into at least one shard (n = 0)")]
    NoShards,
    #[error("shard {index}/{count} does not exist: i counts from 1 to n")]
    OutOfRange { index: u32, count: u32 },
}

impl Shard {
    /// The whole sweep as one shard.
    pub const WHOLE: Shard = Shard { index: 1, count: 1 };

    pub fn new(index: u32, count: u32) -> Result<Shard, ShardError> {
        if count == 0 {
            return Err(ShardError::NoShards);
        }
        if index == 0 || index > count {
            return Err(ShardError::OutOfRange { index, count });
        }
        Ok(Shard { index, count })
    }

    pub fn index(self) -> u32 {
        self.index
    }

    pub fn count(self) -> u32 {
        self.count
    }

    /// Whether the run at `run` (its index in the whole sweep) is this
    /// shard's: round robin, so that each shard gets some of every
    /// scenario's long and short runs.
    pub fn holds(self, run: usize) -> bool {
        run % self.count as usize == (self.index - 1) as usize
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = ShardError;

    fn from_str(text: &str) -> Result<Shard, ShardError> {
        let malformed = || ShardError::Malformed(text.to_string());
        let (index, count) = text.split_once('/').ok_or_else(malformed)?;
        let number = |part: &str| part.trim().parse::<u32>().map_err(|_| malformed());
        Shard::new(number(index)?, number(count)?)
    }
}

/// What one process's JSON holds: one scenario's result, or `--all`'s list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SweepShape {
    Scenario,
    All,
}

/// One scenario of a sweep, as every part records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepScenario {
    pub name: String,
    /// The cost profile its results name.
    pub profile: String,
    /// Its runs, in every shard together.
    pub runs: usize,
    /// A hash of the scenario and the cost profile it ran on, so that parts
    /// of a changed scenario file or another profile do not merge.
    pub fingerprint: String,
}

/// What a sweep is: every part of one sweep records the same.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepHeader {
    pub shape: SweepShape,
    pub seed: u64,
    /// The program that ran it (version and commit): another build may
    /// give other results.
    pub build: String,
    pub scenarios: Vec<SweepScenario>,
}

/// One run of a part, with its index in the whole sweep. Nothing else:
/// a field no part is written with is refused, not ignored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardRun {
    pub index: usize,
    pub run: RunResult,
}

/// One shard's results: `dirq sim --shard i/n --json` writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardPart {
    pub shard: Shard,
    pub sweep: SweepHeader,
    pub runs: Vec<ShardRun>,
}

/// Runs `shard` of the sweep over `scenarios` (`shape` says whether it is
/// one scenario or `--all`), on `threads` threads, calling `progress(done,
/// total)` after each run of each scenario.
pub fn run_shard(
    scenarios: &[Scenario],
    shape: SweepShape,
    shard: Shard,
    options: &RunOptions,
    build: &str,
    threads: usize,
    mut progress: impl FnMut(&str, usize, usize),
) -> Result<ShardPart, SimError> {
    let mut header = SweepHeader {
        shape,
        seed: options.seed,
        build: build.to_string(),
        scenarios: Vec::with_capacity(scenarios.len()),
    };
    let mut runs = Vec::new();
    let mut offset = 0;
    for scenario in scenarios {
        let total = scenario.expand().len();
        let mine: Vec<usize> = (0..total)
            .filter(|local| shard.holds(offset + local))
            .collect();
        let selected = run_selected(scenario, &mine, options, threads, |done, of| {
            progress(&scenario.name, done, of);
        })?;
        header.scenarios.push(SweepScenario {
            name: scenario.name.clone(),
            profile: selected.profile,
            runs: total,
            fingerprint: fingerprint(scenario, options),
        });
        runs.extend(selected.runs.into_iter().map(|(local, run)| ShardRun {
            index: offset + local,
            run,
        }));
        offset += total;
    }
    Ok(ShardPart {
        shard,
        sweep: header,
        runs,
    })
}

/// The scenario and the profile that overrides its own, hashed.
fn fingerprint(scenario: &Scenario, options: &RunOptions) -> String {
    let text = serde_json::to_string(&(scenario, &options.profile))
        .unwrap_or_else(|_| scenario.name.clone());
    // SipHash with fixed keys: the same text hashes alike in every process
    // of one build, which is all a merge compares.
    let mut hasher = std::hash::DefaultHasher::new();
    text.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Why parts do not merge.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum MergeError {
    #[error("no parts to merge")]
    NoParts,
    #[error("{part} is shard {shard}, but {first} is one of {count} shards")]
    ShardCounts {
        part: String,
        shard: Shard,
        first: String,
        count: u32,
    },
    #[error("{part} differs from {first} in its {field}: parts of one sweep only merge")]
    OtherSweep {
        part: String,
        first: String,
        field: SweepField,
    },
    #[error("shard {shard} given twice: {first} and {second}")]
    Overlap {
        shard: Shard,
        first: String,
        second: String,
    },
    #[error("shards missing: {}{} of {count}", list(first), more_missing(first, *missing))]
    Missing {
        /// The lowest missing shards, at most [`LISTED_MISSING`].
        first: Vec<u32>,
        /// How many are missing in all.
        missing: u32,
        count: u32,
    },
    #[error("{first} says its sweep has {claimed} runs, but its {count} shards hold {given} in all (a part truncated, or a header edited)")]
    RunCount {
        first: String,
        /// The header's runs, summed without overflow.
        claimed: u128,
        count: u32,
        given: usize,
    },
    #[error("{part} holds run {index} with {figure} = {value}, which no run can have: {rule}")]
    Implausible {
        part: String,
        index: usize,
        figure: String,
        value: String,
        rule: &'static str,
    },
    #[error("{part} (shard {shard}) holds run {index}, which is not that shard's")]
    ForeignRun {
        part: String,
        shard: Shard,
        index: usize,
    },
    #[error("{part} holds run {index} twice")]
    RunTwice { part: String, index: usize },
}

/// The part of a sweep's header two parts disagree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepField {
    Shape,
    Seed,
    Build,
    Scenarios,
}

impl fmt::Display for SweepField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SweepField::Shape => "shape (one scenario or --all)",
            SweepField::Seed => "seed",
            SweepField::Build => "dirq build (version and commit)",
            SweepField::Scenarios => "scenarios (names, runs, files or profile)",
        })
    }
}

fn list(numbers: &[u32]) -> String {
    let text: Vec<String> = numbers.iter().map(u32::to_string).collect();
    text.join(", ")
}

/// The missing shards a merge error lists by number.
pub const LISTED_MISSING: usize = 10;

/// How many more are missing than the list shows, in words.
fn more_missing(first: &[u32], missing: u32) -> String {
    match (missing as usize).checked_sub(first.len()) {
        Some(0) | None => String::new(),
        Some(more) => format!(" and {more} more"),
    }
}

/// The whole sweep, put back together.
#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    pub shape: SweepShape,
    /// One per scenario, in the sweep's order, runs in order.
    pub results: Vec<ScenarioResult>,
}

/// Merges the parts of one sweep, each with a label (its file name) for
/// the errors: every shard exactly once, every run of each exactly once.
///
/// Everything a part claims is checked before it is used: its header
/// against the first part's, its shard against the others', the runs the
/// sweep claims against the runs the parts hold (before any allocation
/// sized by a claim), and every run's figures as [`implausible_figure`]
/// checks a run's own output.
pub fn merge(parts: Vec<(String, ShardPart)>) -> Result<Merged, MergeError> {
    let Some((first_label, first)) = parts.first() else {
        return Err(MergeError::NoParts);
    };
    let (count, header) = (first.shard.count(), first.sweep.clone());
    let first_label = first_label.clone();
    let mut seen: BTreeMap<u32, String> = BTreeMap::new();
    for (label, part) in &parts {
        check_same_sweep(label, part, &first_label, count, &header)?;
        if let Some(first) = seen.insert(part.shard.index(), label.clone()) {
            return Err(MergeError::Overlap {
                shard: part.shard,
                first,
                second: label.clone(),
            });
        }
    }
    // Distinct shards of 1..=count: fewer than count means some are
    // missing, and the lowest are found within a few more than seen's.
    if seen.len() < count as usize {
        let first = (1..=count)
            .filter(|index| !seen.contains_key(index))
            .take(LISTED_MISSING)
            .collect();
        return Err(MergeError::Missing {
            first,
            missing: count - u32::try_from(seen.len()).unwrap_or(count),
            count,
        });
    }
    let claimed: u128 = header
        .scenarios
        .iter()
        .map(|scenario| scenario.runs as u128)
        .sum();
    let given: usize = parts.iter().map(|(_, part)| part.runs.len()).sum();
    // More runs given than claimed cannot all find a slot of their own:
    // placing them names the foreign or doubled one.
    if claimed > given as u128 {
        return Err(MergeError::RunCount {
            first: first_label,
            claimed,
            count,
            given,
        });
    }
    let mut runs: Vec<Option<RunResult>> = vec![None; usize::try_from(claimed).unwrap_or(given)];
    for (label, part) in parts {
        place_runs(&label, part, &mut runs)?;
    }
    let mut runs = runs.into_iter();
    let results = header
        .scenarios
        .iter()
        .map(|scenario| ScenarioResult {
            scenario: scenario.name.clone(),
            seed: header.seed,
            profile: scenario.profile.clone(),
            // Every run is present: each shard was checked for all of its own.
            runs: runs.by_ref().take(scenario.runs).flatten().collect(),
        })
        .collect();
    Ok(Merged {
        shape: header.shape,
        results,
    })
}

fn check_same_sweep(
    label: &str,
    part: &ShardPart,
    first: &str,
    count: u32,
    header: &SweepHeader,
) -> Result<(), MergeError> {
    if part.shard.count() != count {
        return Err(MergeError::ShardCounts {
            part: label.to_string(),
            shard: part.shard,
            first: first.to_string(),
            count,
        });
    }
    let sweep = &part.sweep;
    let field = if sweep.shape != header.shape {
        SweepField::Shape
    } else if sweep.seed != header.seed {
        SweepField::Seed
    } else if sweep.build != header.build {
        SweepField::Build
    } else if sweep.scenarios != header.scenarios {
        SweepField::Scenarios
    } else {
        return Ok(());
    };
    Err(MergeError::OtherSweep {
        part: label.to_string(),
        first: first.to_string(),
        field,
    })
}

/// Puts a part's runs in their slots: each one the shard's, each once
/// (with as many runs as the sweep claims, none is then missing).
fn place_runs(
    label: &str,
    part: ShardPart,
    runs: &mut [Option<RunResult>],
) -> Result<(), MergeError> {
    let shard = part.shard;
    for ShardRun { index, run } in part.runs {
        if let Some((figure, value, rule)) = implausible_figure(&run) {
            return Err(MergeError::Implausible {
                part: label.to_string(),
                index,
                figure,
                value,
                rule,
            });
        }
        let slot = runs
            .get_mut(index)
            .filter(|_| shard.holds(index))
            .ok_or_else(|| MergeError::ForeignRun {
                part: label.to_string(),
                shard,
                index,
            })?;
        if slot.replace(run).is_some() {
            return Err(MergeError::RunTwice {
                part: label.to_string(),
                index,
            });
        }
    }
    Ok(())
}

/// A figure no simulated run can report, by its JSON name, with its
/// value and the rule it breaks; `None` for a run whose figures are all
/// possible. The simulator's own runs pass it (a test below holds every
/// run of a built-in scenario to it), so a part that fails it was edited.
pub fn implausible_figure(run: &RunResult) -> Option<(String, String, &'static str)> {
    let refuse = |figure: &str, value: String, rule| Some((figure.to_string(), value, rule));
    let mut rates: Vec<(String, f64)> = vec![
        ("exits_per_s".into(), run.exits_per_s),
        ("interrupts_per_s".into(), run.interrupts_per_s),
        ("wall_s".into(), run.wall_s),
    ];
    rates.extend(
        run.exits_by_reason_per_s
            .iter()
            .map(|(reason, rate)| (format!("exits_by_reason_per_s.{reason}"), *rate)),
    );
    rates.extend(workload_figures(&run.figures));
    if let Some(throughput) = &run.throughput {
        rates.push(("throughput.value".into(), throughput.value));
    }
    for (figure, value) in &rates {
        if !value.is_finite() || *value < 0.0 {
            return refuse(
                figure,
                format!("{value:?}"),
                "a count, rate or time is finite and not negative",
            );
        }
    }
    let shares = [
        ("time_in_guest", run.time_in_guest),
        ("cpu_busy", run.cpu_busy),
    ];
    for (figure, share) in shares {
        if !(0.0..=1.0).contains(&share) {
            return refuse(
                figure,
                format!("{share:?}"),
                "a share of the time is between 0 and 1",
            );
        }
    }
    // Both are rounded from one sum: equal shares may differ in the last digit.
    if run.time_in_guest > run.cpu_busy * (1.0 + 1e-9) {
        return refuse(
            "time_in_guest",
            run.time_in_guest.to_string(),
            "time in the guest is part of the busy time (cpu_busy)",
        );
    }
    // Each reason's rate is rounded; together they are the total.
    let by_reason: f64 = run.exits_by_reason_per_s.values().sum();
    let rounding = dirq_stats::f64_of(run.exits_by_reason_per_s.len() as u64);
    if by_reason > run.exits_per_s * (1.0 + 1e-9) + rounding {
        return refuse(
            "exits_by_reason_per_s",
            by_reason.to_string(),
            "the exits by reason add up to more than exits_per_s",
        );
    }
    if let Some(throughput) = &run.throughput {
        if throughput.unit == ThroughputUnit::LoopShare && throughput.value > 1.0 {
            return refuse(
                "throughput.value",
                throughput.value.to_string(),
                "a share of the core is at most 1",
            );
        }
    }
    let counts = &run.interrupts;
    let accounted = [counts.handled, counts.coalesced, counts.pending_at_end]
        .iter()
        .try_fold(0u64, |sum, &count| sum.checked_add(count));
    if accounted.is_none_or(|accounted| accounted > counts.raised) {
        return refuse(
            "interrupts.handled",
            counts.handled.to_string(),
            "interrupts handled, coalesced and pending add up to more than were raised",
        );
    }
    if let Some(qos) = run.figures.qos {
        if qos.met != QosCheck::meets(qos.p95_ns, qos.target_ms) {
            return refuse(
                "qos.met",
                qos.met.to_string(),
                "a QoS target is met exactly when the p95 is within it",
            );
        }
    }
    if let Some(rule) = run
        .latency_ns
        .as_ref()
        .and_then(|latency| latency.inconsistency())
    {
        return refuse("latency_ns", "(summary)".into(), rule);
    }
    None
}

/// The workload's own figures that are present, by JSON name.
fn workload_figures(figures: &WorkloadFigures) -> Vec<(String, f64)> {
    let named = [
        ("cycles_per_interrupt", figures.cycles_per_interrupt),
        ("seconds_per_million", figures.seconds_per_million),
        ("total_s", figures.total_s),
        ("call_rate", figures.call_rate),
    ];
    named
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_string(), value?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_as_i_of_n_counting_from_one() {
        assert_eq!("2/7".parse(), Shard::new(2, 7));
        assert_eq!("7/7".parse::<Shard>().map(Shard::index), Ok(7));
        assert_eq!(
            "8/7".parse::<Shard>(),
            Err(ShardError::OutOfRange { index: 8, count: 7 })
        );
        assert_eq!(
            "0/7".parse::<Shard>(),
            Err(ShardError::OutOfRange { index: 0, count: 7 })
        );
        assert_eq!("1/0".parse::<Shard>(), Err(ShardError::NoShards));
        for bad in ["", "3", "a/b", "1/2/3", "-1/2"] {
            assert!(
                matches!(bad.parse::<Shard>(), Err(ShardError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_shards_of_a_sweep_hold_each_run_once() {
        for count in [1, 2, 7] {
            for run in 0..50 {
                let holders = (1..=count)
                    .filter(|&index| Shard::new(index, count).is_ok_and(|s| s.holds(run)))
                    .count();
                assert_eq!(holders, 1, "run {run} of {count} shards");
            }
        }
    }

    #[test]
    fn a_part_file_with_an_impossible_shard_does_not_read() {
        let read = |text: &str| serde_json::from_str::<Shard>(text);
        assert!(read(r#"{"index": 3, "count": 2}"#).is_err());
        assert!(read(r#"{"index": 1, "count": 0}"#).is_err());
        assert_eq!(
            read(r#"{"index": 2, "count": 2}"#).ok(),
            Shard::new(2, 2).ok()
        );
    }
}
