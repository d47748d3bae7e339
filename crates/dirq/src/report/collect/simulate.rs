//! The simulation half of the report: the built-in scenarios, and one
//! Perfetto trace of every design.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use dirq_sim::design::DesignKind;
use dirq_sim::scenario::{self, NicCoalescing, RunGroup, Scenario, Transport, WorkloadKind};
use dirq_sim::{run_scenario_with_progress, CostProfile, RunOptions};
use dirq_vmm::exits::VmxExit;
use indicatif::ProgressBar;

use serde::Serialize;

use crate::common::plan::Depth;
use crate::common::views::SimScenario;

/// Simulated time per run in a smoke report: enough events to draw every
/// figure, short enough for the test suite.
const SMOKE_DURATION_MS: u64 = 20;

/// The built-in scenarios a report runs. They are cheap (all of them take
/// seconds), so only the smoke test trims them.
pub fn scenarios_for(depth: Depth) -> Result<Vec<Scenario>> {
    let mut names = scenario::builtin_names();
    if depth == Depth::Smoke {
        // The first two: a receive and a timer, every kind of figure.
        names.truncate(2);
    }
    names
        .into_iter()
        .map(|name| {
            let mut scenario = scenario::builtin(name)?;
            if depth == Depth::Smoke {
                scenario.duration_ms = scenario.duration_ms.min(SMOKE_DURATION_MS);
            }
            Ok(scenario)
        })
        .collect()
}

/// One scenario's result: the contract view for the figures, the raw JSON
/// for data.json.
pub struct SimOutcome {
    pub view: SimScenario,
    pub raw: serde_json::Value,
}

/// Runs one scenario, advancing `bar` once per run.
pub fn run(
    scenario: &Scenario,
    seed: u64,
    profile: Option<&CostProfile>,
    bar: &ProgressBar,
) -> Result<SimOutcome> {
    let options = RunOptions {
        seed,
        profile: profile.cloned(),
        trace: false,
    };
    let output = run_scenario_with_progress(scenario, &options, |_, _| bar.inc(1))
        .with_context(|| format!("simulating {}", scenario.name))?;
    let raw = serde_json::to_value(&output.result)?;
    let view = SimScenario::from(&output.result);
    Ok(SimOutcome { view, raw })
}

/// The trace's file in `traces/`.
pub const TRACE_FILE: &str = "designs.json";

/// The workload the trace shows under every design: SR-IOV and virtio
/// traffic plus the guest timer, so device, virtual and timer interrupts
/// all appear; 10 ms holds ten timer ticks, past the start-up.
fn trace_scenario() -> Result<Scenario> {
    let mut traffic = RunGroup::new(WorkloadKind::UdpRx, DesignKind::ALL.to_vec());
    traffic.rates_pps = vec![100_000];
    traffic.transport = Transport::Both;
    traffic.with_timer = true;
    let scenario = Scenario {
        name: "trace".into(),
        description: "10 ms of udp-rx over SR-IOV and virtio at 100K packets/s each, with a 1 kHz guest timer".into(),
        duration_ms: 10,
        nic: NicCoalescing::FITTED,
        profile: Default::default(),
        figure: None,
        runs: vec![traffic],
    };
    scenario.validate()?;
    Ok(scenario)
}

/// One exit reason's samples in a trace: `perf kvm stat report`'s row.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ExitTimes {
    pub samples: u64,
    pub total_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
}

/// The exits of one traced process (one design), by VMX reason.
#[derive(Debug, Clone, Serialize)]
pub struct TracedExits {
    pub process: String,
    pub by_reason: BTreeMap<VmxExit, ExitTimes>,
}

/// The exit slices of a trace, per process in process order.
pub fn traced_exits(trace: &serde_json::Value) -> Vec<TracedExits> {
    let events = trace["traceEvents"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let mut processes: BTreeMap<u64, TracedExits> = BTreeMap::new();
    for event in events {
        let Some(pid) = event["pid"].as_u64() else {
            continue;
        };
        let process = processes.entry(pid).or_insert_with(|| TracedExits {
            process: format!("process {pid}"),
            by_reason: BTreeMap::new(),
        });
        if event["ph"] == "M" && event["name"] == "process_name" {
            if let Some(name) = event["args"]["name"].as_str() {
                process.process = name.to_string();
            }
        }
        if event["cat"] != "exit" {
            continue;
        }
        let (Some(reason), Some(cost)) = (
            event["name"].as_str().and_then(VmxExit::from_name),
            event["args"]["cost_ns"].as_u64(),
        ) else {
            continue;
        };
        let times = process.by_reason.entry(reason).or_default();
        times.min_ns = if times.samples == 0 {
            cost
        } else {
            times.min_ns.min(cost)
        };
        times.max_ns = times.max_ns.max(cost);
        times.samples += 1;
        times.total_ns += cost;
    }
    // A design that took no exit keeps its process: no exit is its result.
    processes.into_values().collect()
}

/// Each process of a simulated `trace` named with the cost profile it
/// ran on, beside the design and workload the simulator names it by.
fn name_with_profile(trace: &mut serde_json::Value, profile: &str) {
    let Some(events) = trace["traceEvents"].as_array_mut() else {
        return;
    };
    for event in events {
        if event["ph"] == "M" && event["name"] == "process_name" {
            let name = event["args"]["name"].as_str().unwrap_or("").to_string();
            event["args"]["name"] =
                serde_json::json!(format!("{name} (simulated, profile {profile})"));
        }
    }
}

/// Writes `traces/designs.json`, one Perfetto process per design; returns
/// the file name and the exits it holds. `bar` advances once per design.
pub fn write_design_trace(
    dir: &Path,
    seed: u64,
    bar: &ProgressBar,
) -> Result<(String, Vec<TracedExits>)> {
    let scenario = trace_scenario()?;
    let options = RunOptions {
        seed,
        profile: None,
        trace: true,
    };
    let output = run_scenario_with_progress(&scenario, &options, |_, _| bar.inc(1))
        .context("tracing the designs")?;
    let mut trace = output.trace.context("the simulator returned no trace")?;
    name_with_profile(&mut trace, &output.result.profile);
    let path = dir.join(TRACE_FILE);
    crate::output::write_atomic(&path, &serde_json::to_vec(&trace)?)?;
    Ok((TRACE_FILE.to_string(), traced_exits(&trace)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_runs_every_design() {
        let scenario = trace_scenario().expect("trace scenario parses");
        let designs: Vec<DesignKind> = scenario.expand().iter().map(|run| run.design).collect();
        assert_eq!(designs, DesignKind::ALL);
    }

    #[test]
    fn exit_times_are_summed_per_process_and_vmx_reason() {
        let trace = serde_json::json!({"traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "did udp-rx"}},
            {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "bare"}},
            {"ph": "X", "cat": "exit", "name": "EXTERNAL_INTERRUPT", "pid": 1, "args": {"cost_ns": 300}},
            {"ph": "X", "cat": "exit", "name": "EXTERNAL_INTERRUPT", "pid": 1, "args": {"cost_ns": 100}},
            {"ph": "X", "cat": "mode", "name": "guest", "pid": 1},
            {"ph": "X", "cat": "exit", "name": "HLT", "pid": 1, "args": {"cost_ns": 50}}
        ]});
        let exits = traced_exits(&trace);
        assert_eq!(exits.len(), 2, "the process without exits keeps its place");
        assert!(exits[0].process == "bare" && exits[0].by_reason.is_empty());
        let exits = &exits[1..];
        assert_eq!(exits[0].process, "did udp-rx");
        let extint = &exits[0].by_reason[&VmxExit::ExternalInterrupt];
        assert_eq!(
            (
                extint.samples,
                extint.total_ns,
                extint.min_ns,
                extint.max_ns
            ),
            (2, 400, 100, 300)
        );
        assert_eq!(exits[0].by_reason[&VmxExit::Hlt].samples, 1);
    }

    #[test]
    fn every_traced_process_names_its_profile() {
        let mut trace = serde_json::json!({"traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "did udp-rx"}},
            {"ph": "X", "cat": "exit", "name": "HLT", "pid": 0, "args": {"cost_ns": 50}}
        ]});
        name_with_profile(&mut trace, "did-2015");
        assert_eq!(
            trace["traceEvents"][0]["args"]["name"],
            "did udp-rx (simulated, profile did-2015)"
        );
        assert_eq!(trace["traceEvents"][1]["name"], "HLT");
    }

    #[test]
    fn smoke_trims_scenarios_and_their_time() {
        let smoke = scenarios_for(Depth::Smoke).expect("builtins load");
        assert!(smoke.iter().all(|s| s.duration_ms <= SMOKE_DURATION_MS));
        let full = scenarios_for(Depth::Full).expect("builtins load");
        assert_eq!(full.len(), scenario::builtin_names().len());
    }
}
