//! Independent runs on several threads give what one thread gives.

use dirq_sim::scenario;
use dirq_sim::{run_scenario_on, RunOptions, ScenarioResult};

fn without_wall_time(mut result: ScenarioResult) -> ScenarioResult {
    for run in &mut result.runs {
        run.wall_s = 0.0;
    }
    result
}

#[test]
fn threads_do_not_change_results() {
    let mut scenario = scenario::builtin("eli-2012").expect("built-in");
    scenario.duration_ms = 20;
    let options = RunOptions {
        seed: 3,
        profile: None,
        trace: false,
    };
    let run = |threads| {
        let output = run_scenario_on(&scenario, &options, threads, |_, _| {}).expect("runs");
        without_wall_time(output.result)
    };
    let sequential = run(1);
    assert_eq!(sequential.runs.len(), scenario.expand().len());
    assert_eq!(run(3), sequential);
}
