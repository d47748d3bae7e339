//! `dirq sim`: run a simulation scenario and print its results, or a
//! shard of it for a batch engine (`shard`).

mod shard;

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::input::InputKind;
use dirq_sim::scenario::{self, Scenario};
use dirq_sim::shard::{Shard, SweepShape};
use dirq_sim::{CostProfile, RunOptions, RunResult, ScenarioResult};
use dirq_stats::f64_of;

/// Simulate interrupt-delivery designs on a modelled server.
#[derive(clap::Args)]
#[command(
    after_help = "Runs a scenario in the deterministic discrete-event simulator: the same \
workload under several interrupt-delivery designs (bare, vanilla, apicv, apicv-pi, apicv-pi-ipiv, avic, eli-delivery, \
eli, did, naive-direct-eoi), with every interrupt checked for mis-delivery, loss, \
priority inversion and wrong EOIs.\n\n\
Examples:\n  dirq sim --list\n  dirq sim --all                                      (every built-in scenario: the speed benchmark)\n  dirq sim did-udp-rx\n  dirq sim did-udp-rx --json --seed 7\n  \
dirq sim scenarios/eli-2012.toml --trace eli-trace.json   (open in ui.perfetto.dev)\n  \
dirq sim did-fio --profile my-host.toml              (a profile from `dirq calibrate`)\n\n\
A sweep too big for one machine splits into shards for a batch engine's array job \
(docs/scale.md): shard i of n runs every n-th run, starting at the i-th, and prints a part; \
`dirq sim merge` joins the parts into the JSON one process prints:\n  \
dirq sim --all --shard 2/7 > part-2.json            (one of seven parts; i counts from 1)\n  \
dirq sim merge part-*.json > all.json"
)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<SimCommand>,
    /// A built-in scenario name (see --list) or a path to a scenario TOML file.
    #[arg(required_unless_present_any = ["list", "all"], conflicts_with_all = ["list", "all"])]
    scenario: Option<String>,
    /// List the built-in scenarios and exit.
    #[arg(long, conflicts_with = "all")]
    list: bool,
    /// Run every built-in scenario and print events per second and wall
    /// time per scenario and in total (with --json: the list as "results").
    #[arg(long, conflicts_with = "trace")]
    all: bool,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Seed of the random streams (any u64): same seed, same result.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write a Chrome/Perfetto trace (one track per core) to this file.
    #[arg(long, value_name = "OUT.json")]
    trace: Option<PathBuf>,
    /// A cost-profile TOML replacing the scenario's built-in profile.
    #[arg(long, value_name = "FILE.toml")]
    profile: Option<PathBuf>,
    /// Threads running a scenario's independent runs, 1-65535 (default:
    /// every core); the results do not depend on it.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Run a scenario even if its estimated events are over the budget
    /// (2e9 events, about ten minutes of one thread).
    #[arg(long)]
    allow_long: bool,
    /// Run only shard I of N (1 <= I <= N): every N-th run of the sweep,
    /// starting at the I-th; print them as a JSON part for `dirq sim merge`.
    #[arg(long, value_name = "I/N", conflicts_with_all = ["list", "trace"])]
    shard: Option<Shard>,
}

#[derive(clap::Subcommand)]
enum SimCommand {
    /// Merge the parts of a sharded sweep into the JSON one process prints.
    Merge(shard::MergeArgs),
}

pub fn execute(args: Args) -> anyhow::Result<()> {
    if let Some(SimCommand::Merge(merge)) = args.command {
        return shard::execute_merge(merge);
    }
    let started = time::OffsetDateTime::now_utc();
    if args.list {
        let mut listing = String::new();
        for name in scenario::builtin_names() {
            let scenario = scenario::builtin(name)?;
            let summary = scenario.description.lines().next().unwrap_or_default();
            let mut designs: Vec<&str> = Vec::new();
            for design in scenario.runs.iter().flat_map(|group| &group.designs) {
                if !designs.contains(&design.name()) {
                    designs.push(design.name());
                }
            }
            listing += &format!(
                "{name:<16} {summary}\n{:<16} designs: {}\n",
                "",
                designs.join(", ")
            );
        }
        return Ok(crate::output::print(&listing)?);
    }
    let profile = match &args.profile {
        Some(path) => {
            let text = crate::input::read_text(path, InputKind::Profile)?;
            Some(CostProfile::from_toml(&text).with_context(|| format!("in {}", path.display()))?)
        }
        None => None,
    };
    if let Some(path) = &args.trace {
        crate::output::check_writable(path)?;
    }
    let options = RunOptions {
        seed: args.seed,
        profile,
        trace: args.trace.is_some(),
    };
    let threads = args.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, usize::from),
        usize::from,
    );
    if args.all {
        if let Some(part) = args.shard {
            let scenarios = scenario::builtin_names()
                .into_iter()
                .map(scenario::builtin)
                .collect::<Result<Vec<_>, _>>()?;
            return shard::run(&scenarios, SweepShape::All, part, &options, threads);
        }
        return run_all(&options, threads, args.json);
    }
    let name = args
        .scenario
        .context("a scenario name or file is required")?;
    let scenario = resolve(&name)?;
    if !args.allow_long {
        let profile = options
            .profile
            .clone()
            .unwrap_or_else(|| scenario.profile.profile());
        scenario.check_budget(&profile).with_context(|| {
            format!(
                "scenario {} refused (pass --allow-long to run it anyway)",
                scenario.name
            )
        })?;
    }
    if let Some(part) = args.shard {
        let scenarios = std::slice::from_ref(&scenario);
        return shard::run(scenarios, SweepShape::Scenario, part, &options, threads);
    }
    let total = scenario.expand().len();
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} runs")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message(format!("simulating {}", scenario.name));
    // The bar draws only on a terminal; a log gets a line per run instead.
    let log_progress = !std::io::IsTerminal::is_terminal(&std::io::stderr());
    let output = dirq_sim::run_scenario_on(&scenario, &options, threads, |done, _| {
        bar.set_position(done as u64);
        if log_progress {
            diag!("dirq sim: {}: {done}/{total} runs", scenario.name);
        }
    })?;
    bar.finish_and_clear();
    if let (Some(path), Some(trace)) = (&args.trace, &output.trace) {
        crate::output::write_atomic(path, &serde_json::to_vec(trace)?)?;
        diag!("trace written to {}", path.display());
    }
    if args.json {
        crate::common::meta::print_json(&output.result, started, None)?;
    } else {
        crate::output::print(&tables_text(&output.result))?;
    }
    Ok(())
}

/// Every built-in scenario, timed: the simulator's speed benchmark.
fn run_all(options: &RunOptions, threads: usize, json: bool) -> anyhow::Result<()> {
    let started_at = time::OffsetDateTime::now_utc();
    let started = std::time::Instant::now();
    let names = scenario::builtin_names();
    let bar = indicatif::ProgressBar::new(names.len() as u64);
    let mut results = Vec::with_capacity(names.len());
    for name in names {
        bar.set_message(name);
        let scenario = scenario::builtin(name)?;
        results.push(dirq_sim::run_scenario_on(&scenario, options, threads, |_, _| {})?.result);
        bar.inc(1);
    }
    bar.finish_and_clear();
    if json {
        crate::common::meta::print_json(&all_document(&results), started_at, None)?;
        return Ok(());
    }
    let mut text = format!(
        "{:<16} {:>5} {:>12} {:>9} {:>12}\n",
        "scenario", "runs", "events", "wall s", "M events/s"
    );
    for result in &results {
        let (events, wall) = (result.total_events(), result.total_wall_s());
        text += &format!(
            "{:<16} {:>5} {events:>12} {wall:>9.3} {:>12.1}\n",
            result.scenario,
            result.runs.len(),
            f64_of(events) / wall.max(1e-9) / 1e6
        );
    }
    let events: u64 = results.iter().map(ScenarioResult::total_events).sum();
    let wall: f64 = results.iter().map(ScenarioResult::total_wall_s).sum();
    let runs: usize = results.iter().map(|result| result.runs.len()).sum();
    text += &format!(
        "{:<16} {runs:>5} {events:>12} {wall:>9.3} {:>12.1}\n",
        "total",
        f64_of(events) / wall.max(1e-9) / 1e6
    );
    text += &format!(
        "elapsed on {threads} thread(s): {:.3} s (the columns above are per-run time, summed)\n",
        started.elapsed().as_secs_f64()
    );
    Ok(crate::output::print(&text)?)
}

/// What `--all --json` prints beside the metadata.
fn all_document(results: &[ScenarioResult]) -> serde_json::Value {
    serde_json::json!({ "results": results })
}

/// A built-in name, or else a file path.
fn resolve(name: &str) -> anyhow::Result<Scenario> {
    if scenario::builtin_names().contains(&name) {
        return Ok(scenario::builtin(name)?);
    }
    let path = Path::new(name);
    if path.exists() {
        let text = crate::input::read_text(path, InputKind::Scenario)?;
        return Scenario::from_toml(&text).with_context(|| format!("in {}", path.display()));
    }
    anyhow::bail!(
        "{name:?} is neither a built-in scenario ({}) nor an existing file",
        scenario::builtin_names().join(", ")
    )
}

/// A scenario's result as the text `dirq sim` prints.
fn tables_text(result: &ScenarioResult) -> String {
    let mut text = format!(
        "scenario {} (seed {}, profile {})\n",
        result.scenario, result.seed, result.profile
    );
    for run in &result.runs {
        text += &run_text(run);
    }
    let events = result.total_events();
    let wall = result.total_wall_s();
    text += &format!(
        "\n{} runs, {events} events in {wall:.2} s: {:.1} M events/s\n",
        result.runs.len(),
        f64_of(events) / wall.max(1e-9) / 1e6
    );
    text
}

fn run_text(run: &RunResult) -> String {
    let params: Vec<String> = run
        .params
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    let mut text = format!("\n== {} [{}]\n", run.design, params.join(" "));
    text += &format!(
        "  exits/s {:>12.0}   time in guest {:>7.2} %   cpu busy {:>7.2} %\n",
        run.exits_per_s,
        run.time_in_guest * 100.0,
        run.cpu_busy * 100.0
    );
    let reasons: Vec<String> = run
        .exits_by_reason_per_s
        .iter()
        .filter(|(_, rate)| **rate > 0.0)
        .map(|(reason, rate)| format!("{reason} {rate:.0}"))
        .collect();
    if !reasons.is_empty() {
        text += &format!("  by reason: {}\n", reasons.join(", "));
    }
    if let Some(latency) = &run.latency_ns {
        text += &format!(
            "  latency ns: mean {:.0}  p50 {}  p99 {}  max {}  ({} samples)\n",
            latency.mean, latency.p50, latency.p99, latency.max, latency.samples
        );
    }
    if let Some(throughput) = &run.throughput {
        text += &format!(
            "  throughput: {:.4} {}\n",
            throughput.value, throughput.unit
        );
    }
    if let Some(qos) = &run.figures.qos {
        let p95 = qos
            .p95_ns
            .map_or_else(|| "no request answered".into(), |ns| format!("p95 {ns} ns"));
        let verdict = if qos.met {
            "met"
        } else {
            "missed (the closed loop cannot offer less)"
        };
        text += &format!("  QoS: {p95} against {} ms: {verdict}\n", qos.target_ms);
    }
    // The figures of the paper the scenario reproduces, whichever it
    // reports (the QoS check has its line above).
    if let Ok(serde_json::Value::Object(mut paper)) = serde_json::to_value(&run.figures) {
        paper.remove("qos");
        if !paper.is_empty() {
            let figures: Vec<String> = paper
                .iter()
                .map(|(name, value)| format!("{name} {value}"))
                .collect();
            text += &format!("  paper's figures: {}\n", figures.join(", "));
        }
    }
    let violations: Vec<String> = run
        .invariant_violations
        .iter()
        .filter(|(_, count)| **count > 0)
        .map(|(invariant, count)| format!("{invariant:?} {count}"))
        .collect();
    text += &format!(
        "  invariant violations: {}   interrupts raised {} handled {} coalesced {}\n",
        if violations.is_empty() {
            "none".to_string()
        } else {
            violations.join(", ")
        },
        run.interrupts.raised,
        run.interrupts.handled,
        run.interrupts.coalesced
    );
    text += &format!(
        "  events {}  wall {:.3} s  ({:.1} M events/s)\n",
        run.events,
        run.wall_s,
        f64_of(run.events) / run.wall_s.max(1e-9) / 1e6
    );
    text
}
