//! The simulation half of the report: the built-in scenarios, and one short
//! Perfetto trace per policy.

use std::path::Path;

use anyhow::{Context, Result};
use dirq_sim::policy::PolicyKind;
use dirq_sim::scenario::{self, NicCoalescing, RunGroup, Scenario, Transport, WorkloadKind};
use dirq_sim::{run_scenario, run_scenario_with_progress, CostProfile, RunOptions};
use indicatif::ProgressBar;

use super::data::Depth;
use super::views::SimScenario;

/// Simulated time per run in a smoke report: enough events to draw every
/// figure, short enough for the test suite.
const SMOKE_DURATION_MS: u64 = 20;

/// The built-in scenarios a report runs. They are cheap (all of them take
/// seconds), so only the smoke test trims them.
pub fn scenarios_for(depth: Depth) -> Result<Vec<Scenario>> {
    let names = match depth {
        Depth::Smoke => vec!["did-udp-rx", "did-cyclictest"],
        Depth::Quick | Depth::Full => scenario::builtin_names(),
    };
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
    let view = serde_json::from_value(raw.clone())?;
    Ok(SimOutcome { view, raw })
}

/// The workload every policy's trace shows: SR-IOV and virtio traffic plus
/// the guest timer, so device, virtual and timer interrupts all appear.
fn trace_scenario(policy: PolicyKind) -> Result<Scenario> {
    let mut traffic = RunGroup::new(WorkloadKind::UdpRx, vec![policy]);
    traffic.rates_pps = vec![250_000];
    traffic.transport = Transport::Both;
    traffic.with_timer = true;
    let scenario = Scenario {
        name: format!("trace-{policy}"),
        description: format!(
            "2 ms of udp-rx over SR-IOV and virtio at 250K packets/s each, with a 1 kHz guest timer, under {policy}"
        ),
        duration_ms: 2,
        nic: NicCoalescing::FITTED,
        runs: vec![traffic],
    };
    scenario.validate()?;
    Ok(scenario)
}

/// Writes `traces/<policy>.json` for every policy; returns the file names.
pub fn write_policy_traces(dir: &Path, seed: u64, bar: &ProgressBar) -> Result<Vec<String>> {
    let mut written = Vec::new();
    for policy in PolicyKind::ALL {
        bar.set_message(policy.name());
        let scenario = trace_scenario(policy)?;
        let options = RunOptions {
            seed,
            profile: None,
            trace: true,
        };
        let output = run_scenario(&scenario, &options)
            .with_context(|| format!("tracing {}", policy.name()))?;
        let trace = output
            .trace
            .with_context(|| format!("the simulator returned no trace for {}", policy.name()))?;
        let file = format!("{}.json", policy.name());
        let path = dir.join(&file);
        std::fs::write(&path, serde_json::to_vec(&trace)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        written.push(file);
        bar.inc(1);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_has_a_valid_trace_scenario() {
        for policy in PolicyKind::ALL {
            let scenario = trace_scenario(policy).expect("trace scenario parses");
            let runs = scenario.expand();
            assert_eq!(runs.len(), 1);
            assert_eq!(runs[0].policy, policy);
        }
    }

    #[test]
    fn smoke_trims_scenarios_and_their_time() {
        let smoke = scenarios_for(Depth::Smoke).expect("builtins load");
        assert!(smoke.iter().all(|s| s.duration_ms <= SMOKE_DURATION_MS));
        let full = scenarios_for(Depth::Full).expect("builtins load");
        assert_eq!(full.len(), scenario::builtin_names().len());
    }
}
