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

/// One run of a part, with its index in the whole sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    #[error("shards missing: {} of {count}", list(missing))]
    Missing { missing: Vec<u32>, count: u32 },
    #[error("{part} (shard {shard}) holds run {index}, which is not that shard's")]
    ForeignRun {
        part: String,
        shard: Shard,
        index: usize,
    },
    #[error("{part} holds run {index} twice")]
    RunTwice { part: String, index: usize },
    #[error("{part} (shard {shard}) lacks run {index} (truncated?)")]
    MissingRun {
        part: String,
        shard: Shard,
        index: usize,
    },
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

/// The whole sweep, put back together.
#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    pub shape: SweepShape,
    /// One per scenario, in the sweep's order, runs in order.
    pub results: Vec<ScenarioResult>,
}

/// Merges the parts of one sweep, each with a label (its file name) for
/// the errors: every shard exactly once, every run of each exactly once.
pub fn merge(parts: Vec<(String, ShardPart)>) -> Result<Merged, MergeError> {
    let Some((first_label, first)) = parts.first() else {
        return Err(MergeError::NoParts);
    };
    let (count, header) = (first.shard.count(), first.sweep.clone());
    let first_label = first_label.clone();
    let mut seen: BTreeMap<u32, String> = BTreeMap::new();
    let mut runs: Vec<Option<RunResult>> = Vec::new();
    let total: usize = header.scenarios.iter().map(|scenario| scenario.runs).sum();
    runs.resize(total, None);
    for (label, part) in parts {
        check_same_sweep(&label, &part, &first_label, count, &header)?;
        if let Some(first) = seen.insert(part.shard.index(), label.clone()) {
            return Err(MergeError::Overlap {
                shard: part.shard,
                first,
                second: label,
            });
        }
        place_runs(&label, part, &mut runs)?;
    }
    let missing: Vec<u32> = (1..=count).filter(|i| !seen.contains_key(i)).collect();
    if !missing.is_empty() {
        return Err(MergeError::Missing { missing, count });
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

/// Puts a part's runs in their slots: each one the shard's, each once,
/// and none of the shard's missing.
fn place_runs(
    label: &str,
    part: ShardPart,
    runs: &mut [Option<RunResult>],
) -> Result<(), MergeError> {
    let shard = part.shard;
    for ShardRun { index, run } in part.runs {
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
    match (0..runs.len()).find(|&index| shard.holds(index) && runs[index].is_none()) {
        Some(index) => Err(MergeError::MissingRun {
            part: label.to_string(),
            shard,
            index,
        }),
        None => Ok(()),
    }
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
