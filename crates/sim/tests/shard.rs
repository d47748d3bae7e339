//! Sharding: the parts of every built-in scenario's sweep, each through
//! its JSON text, merge into exactly the results one process gives, for
//! n = 1, 2 and 7, one scenario at a time and all of them as `--all`.

use dirq_sim::metrics::QosCheck;
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
        Err(MergeError::Missing { ref first, missing: 1, count: 2 }) if first == &[2]
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
        Err(MergeError::RunCount { .. })
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

#[test]
fn claims_of_more_runs_or_shards_than_the_parts_hold_are_refused_before_allocating() {
    let scenarios: Vec<Scenario> = scenarios().into_iter().take(2).collect();
    let two = parts(&scenarios, SweepShape::All, 2);
    let held: usize = two.iter().map(|(_, part)| part.runs.len()).sum();
    for claimed in [1_000_000_000, usize::MAX] {
        let mut forged = two.clone();
        for (_, part) in &mut forged {
            part.sweep.scenarios[0].runs = claimed;
        }
        let refused = merge(forged);
        assert!(
            matches!(refused, Err(MergeError::RunCount { given, .. }) if given == held),
            "{refused:?}"
        );
    }
    // A part claiming to be one of u32::MAX shards: refused at once,
    // listing the first missing shards, not all four billion.
    let mut one_of_many = two[0].clone();
    one_of_many.1.shard = Shard::new(1, u32::MAX).expect("valid");
    let refused = merge(vec![one_of_many]).expect_err("missing shards");
    assert_eq!(
        refused.to_string(),
        "shards missing: 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 and 4294967284 more of 4294967295"
    );
}

#[test]
fn a_run_with_a_figure_no_run_can_have_is_refused_naming_it() {
    let scenarios: Vec<Scenario> = scenarios().into_iter().take(2).collect();
    let two = parts(&scenarios, SweepShape::All, 2);
    let forge = |edit: fn(&mut dirq_sim::RunResult)| {
        let mut forged = two.clone();
        edit(&mut forged[1].1.runs[0].run);
        merge(forged).expect_err("refused").to_string()
    };
    let refused = forge(|run| run.time_in_guest = 7.5);
    assert!(
        refused.contains(
            "time_in_guest = 7.5, which no run can have: a share of the time is between 0 and 1"
        ),
        "{refused}"
    );
    assert!(forge(|run| run.exits_per_s = -1e308).contains("exits_per_s = -1e308"));
    assert!(forge(|run| run.interrupts_per_s = f64::NAN).contains("interrupts_per_s = NaN"));
    assert!(forge(|run| run.interrupts.handled = u64::MAX).contains("interrupts.handled"));
    let latency = forge(|run| {
        run.latency_ns = dirq_stats::LatencySummary::from_samples_ns(&[5, 9, 12]);
        if let Some(latency) = &mut run.latency_ns {
            latency.p50 = u64::MAX;
        }
    });
    assert!(
        latency.contains("min <= p50 <= p90 <= p99 <= max"),
        "{latency}"
    );
    let qos = forge(|run| {
        run.figures.qos = Some(QosCheck {
            target_ms: 10,
            p95_ns: Some(50_000_000),
            met: true,
        });
    });
    assert!(
        qos.contains("qos.met = true, which no run can have"),
        "{qos}"
    );
}
