//! Sharding: the parts of every built-in scenario's sweep, each through
//! its JSON text, merge into exactly the results one process gives, for
//! n = 1, 2 and 7, one scenario at a time and all of them as `--all`.

use dirq_sim::scenario::{self, Scenario};
use dirq_sim::shard::{merge, run_shard, MergeError, Shard, ShardPart, SweepShape};
use dirq_sim::{run_scenario_on, RunOptions, ScenarioResult};

const BUILD: &str = "test-build";

/// Every built-in scenario, shortened: what is tested is which runs go
/// where, not what they measure.
fn scenarios() -> Vec<Scenario> {
    scenario::builtin_names()
        .into_iter()
        .map(|name| {
            let mut scenario = scenario::builtin(name).expect("built-in");
            scenario.duration_ms = 2;
            scenario
        })
        .collect()
}

fn options(seed: u64) -> RunOptions {
    RunOptions {
        seed,
        profile: None,
        trace: false,
    }
}

/// The JSON one process prints, without the one wall-clock field.
fn text(results: &[ScenarioResult]) -> String {
    let mut results = results.to_vec();
    for run in results.iter_mut().flat_map(|result| result.runs.iter_mut()) {
        run.wall_s = 0.0;
    }
    serde_json::to_string_pretty(&results).expect("serializes")
}

/// Shard `index`/`count` of the sweep, written and read back as JSON.
fn part(scenarios: &[Scenario], shape: SweepShape, shard: Shard, seed: u64) -> ShardPart {
    let part = run_shard(
        scenarios,
        shape,
        shard,
        &options(seed),
        BUILD,
        2,
        |_, _, _| {},
    )
    .expect("shard runs");
    let json = serde_json::to_string(&part).expect("serializes");
    serde_json::from_str(&json).expect("reads back")
}

fn parts(scenarios: &[Scenario], shape: SweepShape, count: u32) -> Vec<(String, ShardPart)> {
    (1..=count)
        .map(|index| {
            let shard = Shard::new(index, count).expect("valid shard");
            (format!("part-{index}"), part(scenarios, shape, shard, 1))
        })
        .collect()
}

#[test]
fn merged_shards_equal_one_process_for_every_builtin() {
    let scenarios = scenarios();
    let single: Vec<ScenarioResult> = scenarios
        .iter()
        .map(|scenario| {
            run_scenario_on(scenario, &options(1), 2, |_, _| {})
                .expect("runs")
                .result
        })
        .collect();
    for count in [1, 2, 7] {
        let merged = merge(parts(&scenarios, SweepShape::All, count)).expect("merges");
        assert_eq!(merged.shape, SweepShape::All);
        assert_eq!(text(&merged.results), text(&single), "--all in {count}");
        for (scenario, alone) in scenarios.iter().zip(&single) {
            let one = std::slice::from_ref(scenario);
            let merged = merge(parts(one, SweepShape::Scenario, count)).expect("merges");
            assert_eq!(
                text(&merged.results),
                text(std::slice::from_ref(alone)),
                "{} in {count}",
                scenario.name
            );
        }
    }
}

#[test]
fn parts_that_do_not_make_one_sweep_are_refused_by_name() {
    let scenarios: Vec<Scenario> = scenarios().into_iter().take(3).collect();
    let shape = SweepShape::All;
    let two = parts(&scenarios, shape, 2);
    let [first, second] = [two[0].clone(), two[1].clone()];
    assert_eq!(merge(Vec::new()), Err(MergeError::NoParts));
    assert!(matches!(
        merge(vec![first.clone()]),
        Err(MergeError::Missing { ref missing, count: 2 }) if missing == &[2]
    ));
    assert!(matches!(
        merge(vec![first.clone(), first.clone(), second.clone()]),
        Err(MergeError::Overlap { .. })
    ));
    let of_three = part(&scenarios, shape, Shard::new(2, 3).expect("valid"), 1);
    assert!(matches!(
        merge(vec![first.clone(), ("three".into(), of_three)]),
        Err(MergeError::ShardCounts { count: 2, .. })
    ));
    let other_seed = part(&scenarios, shape, second.1.shard, 2);
    let refused = merge(vec![first.clone(), ("seed-2".into(), other_seed)]);
    assert!(
        matches!(refused, Err(MergeError::OtherSweep { ref part, .. }) if part == "seed-2"),
        "{refused:?}"
    );
    let mut other_build = second.clone();
    other_build.1.sweep.build = "another".into();
    assert!(matches!(
        merge(vec![first.clone(), other_build]),
        Err(MergeError::OtherSweep { .. })
    ));
    let other_scenarios = part(&scenarios[1..], shape, second.1.shard, 1);
    assert!(matches!(
        merge(vec![first.clone(), ("fewer".into(), other_scenarios)]),
        Err(MergeError::OtherSweep { .. })
    ));
    let mut truncated = second.clone();
    truncated.1.runs.pop();
    assert!(matches!(
        merge(vec![first.clone(), truncated]),
        Err(MergeError::MissingRun { .. })
    ));
    let mut foreign = second.clone();
    foreign.1.runs.push(first.1.runs[0].clone());
    assert!(matches!(
        merge(vec![first.clone(), foreign]),
        Err(MergeError::ForeignRun { .. })
    ));
    let mut doubled = second.clone();
    doubled.1.runs.push(second.1.runs[0].clone());
    assert!(matches!(
        merge(vec![first, doubled]),
        Err(MergeError::RunTwice { .. })
    ));
}
