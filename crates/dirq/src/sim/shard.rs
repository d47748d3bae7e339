//! `dirq sim --shard i/n` and `dirq sim merge`: a sweep split for a batch
//! engine's array job, and its parts put back into the JSON one process
//! prints (docs/scale.md).

use std::path::PathBuf;

use anyhow::Context;
use dirq_sim::scenario::Scenario;
use dirq_sim::shard::{merge, run_shard, Shard, ShardPart, SweepShape};
use dirq_sim::RunOptions;
use serde::Deserialize;
use time::OffsetDateTime;

use crate::common::meta::{self, SOURCE_COMMIT};
use crate::input::InputKind;

/// Merge the parts of a sharded sweep into the JSON one process prints.
#[derive(clap::Args)]
#[command(
    after_help = "Each FILE is what one `dirq sim ... --shard i/n` printed. Every shard \
1..n of one sweep (same scenario or --all, seed, profile, dirq build) must be given once; \
the result is byte for byte what `dirq sim ... --json` prints in one process, but for the \
wall-clock and provenance fields (started, ended, command_line, host, each run's wall_s).\n\n\
Example:\n  for i in 1 2 3; do dirq sim --all --shard $i/3 > part-$i.json; done\n  \
dirq sim merge part-*.json > all.json"
)]
pub struct MergeArgs {
    /// The parts, in any order.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
}

/// What `--shard` prints: the metadata, then the part.
#[derive(Deserialize)]
struct PartFile {
    /// A part of another schema names its fields otherwise.
    schema_version: u32,
    #[serde(with = "time::serde::rfc3339")]
    started: OffsetDateTime,
    #[serde(flatten)]
    part: ShardPart,
}

/// The program a part was run by: parts of other builds do not merge.
fn build() -> String {
    format!("dirq {} ({SOURCE_COMMIT})", env!("CARGO_PKG_VERSION"))
}

/// Runs `shard` of the sweep over `scenarios` and prints its part.
pub fn run(
    scenarios: &[Scenario],
    shape: SweepShape,
    shard: Shard,
    options: &RunOptions,
    threads: usize,
) -> anyhow::Result<()> {
    let started = OffsetDateTime::now_utc();
    let part = run_shard(
        scenarios,
        shape,
        shard,
        options,
        &build(),
        threads,
        |scenario, done, total| diag!("dirq sim: shard {shard}: {scenario}: {done}/{total} runs"),
    )?;
    meta::print_json(&part, started, None)
}

pub fn execute_merge(args: MergeArgs) -> anyhow::Result<()> {
    let mut parts = Vec::with_capacity(args.files.len());
    let mut started: Option<OffsetDateTime> = None;
    for path in &args.files {
        let text = crate::input::read_text(path, InputKind::ShardPart)?;
        let file: PartFile = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a part written by `dirq sim --shard`",
                path.display()
            )
        })?;
        if file.schema_version != meta::SCHEMA_VERSION {
            anyhow::bail!(
                "{} is a part of schema version {}; this dirq reads version {}",
                path.display(),
                file.schema_version,
                meta::SCHEMA_VERSION
            );
        }
        started = Some(started.map_or(file.started, |earliest| earliest.min(file.started)));
        parts.push((path.display().to_string(), file.part));
    }
    let merged = merge(parts)?;
    // The merged sweep started when its first part did.
    let started = started.unwrap_or_else(OffsetDateTime::now_utc);
    match (merged.shape, merged.results.as_slice()) {
        (SweepShape::Scenario, [result]) => meta::print_json(result, started, None),
        (SweepShape::All, results) => {
            meta::print_json(&super::all_document(results), started, None)
        }
        (SweepShape::Scenario, results) => {
            anyhow::bail!("a one-scenario sweep holds {} scenarios", results.len())
        }
    }
}
