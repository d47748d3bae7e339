//! Collected data built by hand, for the tests of every stage.

use dirq_vmm::config::params::TimerLatencyParams;
use dirq_vmm::config::{Bench, BenchConfig, BenchParams, Irqchip};
use dirq_vmm::results::BenchResult;

use crate::calibrate::costs::{derive_costs, HostCosts, Observations};
use crate::common::plan::CYCLICTEST_PERIOD_NS;
use crate::common::real::{RealCase, Repeat};
use crate::common::views::RealRun;

pub fn host_costs() -> HostCosts {
    derive_costs(&Observations {
        userspace_exit_ns: 10_000.0,
        kernel_exit_ns: 4_000.0,
        inject_running_p50_ns: 30_000.0,
        inject_halted_p50_ns: 36_000.0,
        ..Observations::default()
    })
}

pub fn config(bench: Bench, irqchip: Irqchip) -> BenchConfig {
    let mut config = BenchConfig::new(bench);
    config.common.irqchip = irqchip;
    config
}

/// timer-latency at the simulator's cyclictest rate.
pub fn cyclictest(irqchip: Irqchip) -> BenchConfig {
    let mut config = BenchConfig::from(BenchParams::TimerLatency(TimerLatencyParams {
        period_ns: CYCLICTEST_PERIOD_NS,
        ..TimerLatencyParams::default()
    }));
    config.common.irqchip = irqchip;
    config
}

/// The view of a `dirq run --json` object of `fields` whose bench and
/// figures are `results`.
pub fn real_run(mut fields: serde_json::Value, results: &BenchResult) -> RealRun {
    let typed = serde_json::to_value(results).expect("results serialize");
    for part in ["bench", "results"] {
        fields[part] = typed[part].clone();
    }
    serde_json::from_value(fields).expect("contract parses")
}

/// The figures of a run of `bench` that measured nothing.
pub fn no_figures(bench: Bench) -> BenchResult {
    BenchResult::measured_nothing(bench).expect("the bench has figures")
}

/// A real case of `config` with one run that counted `by_category`
/// exits and `results` over one second.
pub fn case_with(
    config: BenchConfig,
    by_category: serde_json::Value,
    results: &BenchResult,
) -> RealCase {
    let run = real_run(
        serde_json::json!({
            "interrupts": 1000,
            "exits": {"userspace": 0, "by_reason": {}, "by_category": by_category},
            "exits_per_interrupt": 1.0,
            "duration_s": 1.0
        }),
        results,
    );
    RealCase {
        label: "kernel".into(),
        command: "dirq run".into(),
        config,
        repeats: vec![Repeat {
            run,
            cpu_cores: 1.0,
        }],
    }
}

pub fn case(config: BenchConfig) -> RealCase {
    let results = no_figures(config.bench());
    case_with(config, serde_json::json!({}), &results)
}

pub fn timer_case(exits_per_interrupt: f64) -> RealCase {
    let config = cyclictest(Irqchip::Kernel);
    let run = real_run(
        serde_json::json!({
            "config": serde_json::to_value(&config).expect("config serializes"),
            "interrupts": 1000,
            "exits": {"total": 3000, "userspace": 0, "kernel": 3000, "by_reason": {}},
            "exits_per_interrupt": exits_per_interrupt,
            "latency_ns": {"mean": 40000.0, "p50": 40000.0, "p99": 60000.0, "max": 90000.0},
            "duration_s": 1.0
        }),
        &no_figures(Bench::TimerLatency),
    );
    RealCase {
        label: "kernel".into(),
        command: "dirq run timer-latency".into(),
        config,
        repeats: vec![Repeat {
            run,
            cpu_cores: 1.0,
        }],
    }
}
