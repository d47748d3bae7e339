//! `dirq-sim`: a deterministic discrete-event simulator of a virtualized
//! server, comparing interrupt-delivery designs (vanilla KVM, APICv, ELI,
//! DID and a broken naive design) on the `dirq_arch` hardware models.
//!
//! ```no_run
//! let scenario = dirq_sim::scenario::builtin("did-udp-rx").unwrap();
//! let options = dirq_sim::RunOptions { seed: 1, profile: None, trace: false };
//! let result = dirq_sim::run_scenario(&scenario, &options).unwrap();
//! println!("{}", serde_json::to_string_pretty(&result.result).unwrap());
//! ```
#![forbid(unsafe_code)]

pub mod design;
mod engine;
mod machine;
pub mod metrics;
pub mod profile;
mod qos;
mod queue;
pub mod rng;
pub mod scenario;
pub mod service;
pub mod shard;
pub mod trace;
pub mod vioapic;
pub mod what_if;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use dirq_arch::exit::VmxExit;
use dirq_stats::{f64_of, LatencySummary};
use thiserror::Error;

pub use metrics::{ExitReason, Invariant, RunResult, ScenarioResult};
pub use profile::CostProfile;
pub use scenario::Scenario;

use machine::{index_u32, Machine};
use metrics::{InterruptCounts, WorkloadFigures};
use scenario::RunSpec;
use trace::{Trace, TraceFile};

#[derive(Debug, Error)]
pub enum SimError {
    #[error("hardware model rejected the setup: {0}")]
    Model(dirq_arch::lapic::LapicError),
    #[error("the scenario's cost profile")]
    Profile(#[from] profile::ProfileError),
}

/// How to run a scenario.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub seed: u64,
    /// Overrides the scenario's built-in profile (x86 scenarios; the
    /// Loongson VIOAPIC paper always runs on `loongson-2019`).
    pub profile: Option<CostProfile>,
    /// Collect a Chrome/Perfetto trace.
    pub trace: bool,
}

/// A scenario's results, plus the trace when asked for.
pub struct ScenarioOutput {
    pub result: ScenarioResult,
    pub trace: Option<serde_json::Value>,
}

/// Runs every run of `scenario`.
pub fn run_scenario(scenario: &Scenario, options: &RunOptions) -> Result<ScenarioOutput, SimError> {
    run_scenario_with_progress(scenario, options, |_, _| {})
}

/// [`run_scenario`], calling `progress(done, total)` after each run.
pub fn run_scenario_with_progress(
    scenario: &Scenario,
    options: &RunOptions,
    progress: impl FnMut(usize, usize),
) -> Result<ScenarioOutput, SimError> {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    run_scenario_on(scenario, options, threads, progress)
}

/// [`run_scenario_with_progress`] on `threads` threads. The runs are
/// independent (each has its own machine and its own seeded stream), so the
/// result is the same for any thread count; only `wall_s` differs.
pub fn run_scenario_on(
    scenario: &Scenario,
    options: &RunOptions,
    threads: usize,
    progress: impl FnMut(usize, usize),
) -> Result<ScenarioOutput, SimError> {
    let every: Vec<usize> = (0..scenario.expand().len()).collect();
    let selected = run_selected(scenario, &every, options, threads, progress)?;
    let result = ScenarioResult {
        scenario: scenario.name.clone(),
        seed: options.seed,
        profile: selected.profile,
        runs: selected.runs.into_iter().map(|(_, run)| run).collect(),
    };
    Ok(ScenarioOutput {
        result,
        trace: selected.trace,
    })
}

/// Some of a scenario's runs, each with its index in `scenario.expand()`.
pub struct SelectedRuns {
    /// The name of the cost profile the runs used.
    pub profile: String,
    /// In the order of their indices.
    pub runs: Vec<(usize, RunResult)>,
    pub trace: Option<serde_json::Value>,
}

/// The runs of `scenario` at the indices `selected` (ascending, into
/// `scenario.expand()`; others are ignored) on `threads` threads, calling
/// `progress(done, total)` after each run.
pub fn run_selected(
    scenario: &Scenario,
    selected: &[usize],
    options: &RunOptions,
    threads: usize,
    mut progress: impl FnMut(usize, usize),
) -> Result<SelectedRuns, SimError> {
    // The Loongson testbed has its own profile: an x86 one does not apply.
    let loongson = vioapic::on_loongson(scenario).then(vioapic::LoongsonProfile::loongson_2019);
    let profile = options
        .profile
        .clone()
        .unwrap_or_else(|| scenario.profile.profile());
    let all_specs = scenario.expand();
    let chosen: Vec<(usize, &RunSpec)> = selected
        .iter()
        .filter_map(|&index| all_specs.get(index).map(|spec| (index, spec)))
        .collect();
    let next = AtomicUsize::new(0);
    let mut finished: Vec<Option<(RunResult, Option<Trace>)>> =
        chosen.iter().map(|_| None).collect();
    std::thread::scope(|scope| -> Result<(), SimError> {
        let (sender, receiver) = mpsc::channel();
        for _ in 0..threads.clamp(1, chosen.len().max(1)) {
            let sender = sender.clone();
            let (chosen, profile, next, loongson) = (&chosen, &profile, &next, &loongson);
            scope.spawn(move || loop {
                let slot = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(_, spec)) = chosen.get(slot) else {
                    break;
                };
                let outcome = match (loongson, spec.group.level) {
                    (Some(loongson), Some(level)) => {
                        Ok(vioapic::simulate(spec, level, loongson, options.trace))
                    }
                    _ => simulate(spec, profile, options),
                };
                if sender.send((slot, outcome)).is_err() {
                    break;
                }
            });
        }
        drop(sender);
        for (done, (slot, outcome)) in receiver.iter().enumerate() {
            finished[slot] = Some(outcome?);
            progress(done + 1, chosen.len());
        }
        Ok(())
    })?;
    let mut runs = Vec::with_capacity(chosen.len());
    let mut trace_file = options.trace.then(TraceFile::default);
    for (&(index, spec), outcome) in chosen.iter().zip(finished) {
        let Some((run, trace)) = outcome else {
            continue;
        };
        if let (Some(file), Some(trace)) = (trace_file.as_mut(), trace) {
            let label = format!("{} {}", run.design, spec_label(spec));
            file.add_run(
                index_u32(index),
                &label,
                spec.group.host.cores as usize,
                trace,
            );
        }
        runs.push((index, run));
    }
    Ok(SelectedRuns {
        profile: loongson.map_or(profile.name, |loongson| loongson.name),
        runs,
        trace: trace_file.map(|file| file.to_json()),
    })
}

/// One run, start to finish.
fn simulate(
    spec: &RunSpec,
    profile: &CostProfile,
    options: &RunOptions,
) -> Result<(RunResult, Option<Trace>), SimError> {
    let started = Instant::now();
    let mut machine = Machine::new(spec, profile, options.seed, options.trace)?;
    machine.run();
    let mut run = summarize(spec, &machine);
    run.wall_s = started.elapsed().as_secs_f64();
    Ok((run, machine.take_trace()))
}

fn spec_label(spec: &RunSpec) -> String {
    match spec.rate_pps {
        Some(rate) => format!("{} {rate} pps", spec.workload.name()),
        None => spec.workload.name().to_string(),
    }
}

fn summarize(spec: &RunSpec, machine: &Machine) -> RunResult {
    let counters = machine.counters();
    let seconds = f64_of(spec.duration_ns) / 1e9;
    let mut exits_by_reason_per_s: BTreeMap<VmxExit, f64> = BTreeMap::new();
    for reason in ExitReason::ALL {
        *exits_by_reason_per_s.entry(reason.vmx()).or_default() +=
            f64_of(counters.exits[reason.index()]) / seconds;
    }
    let total_exits: u64 = counters.exits.iter().sum();
    let invariant_violations = Invariant::ALL
        .iter()
        .map(|&invariant| (invariant, machine.checker().violations_of(invariant)))
        .collect();
    let core_ns = f64_of(counters.guest_core_ns.max(1));
    let time_in_guest = f64_of(counters.guest_ns) / core_ns;
    let cpu_busy = 1.0 - f64_of(counters.asleep_ns) / core_ns;
    let mut params = spec.params();
    let blocked = machine.iommu_blocked();
    if blocked > 0 {
        params.insert("iommu_blocked".into(), blocked.into());
    }
    machine.workload_params(&mut params);
    let dropped = machine.dropped_packets();
    if dropped > 0 {
        params.insert("dropped_packets".into(), dropped.into());
    }
    RunResult {
        design: spec.design,
        params,
        exits_per_s: f64_of(total_exits) / seconds,
        interrupts_per_s: f64_of(machine.checker().raised) / seconds,
        exits_by_reason_per_s,
        time_in_guest,
        cpu_busy,
        latency_ns: LatencySummary::from_samples_ns(&counters.latencies),
        throughput: machine.throughput(),
        invariant_violations,
        figures: WorkloadFigures {
            timer_irqs_in_host_mode: spec
                .has_guest_timer()
                .then_some(counters.timer_irqs_in_host_mode),
            pv_eoi_skips: (!spec.group.pv_eoi.is_off()).then_some(counters.pv_eoi_skips),
            qos: spec
                .group
                .qos_p95_ms
                .map(|target_ms| qos::check(&counters.latencies, target_ms)),
            ..machine.workload_figures()
        },
        interrupts: InterruptCounts {
            raised: machine.checker().raised,
            handled: machine.checker().handled,
            coalesced: machine.checker().coalesced,
            pending_at_end: machine.checker().pending_at_end,
        },
        events: counters.events,
        wall_s: 0.0,
    }
}
