//! What the KVM test binaries share: one VM at a time, and exit lookups.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard};

use dirq_vmm::bench::lapic_check::{self, LapicInService};
use dirq_vmm::bench::{self, BenchError};
use dirq_vmm::config::params::VioapicParams;
use dirq_vmm::config::{BenchParams, VioapicLevel};
use dirq_vmm::exits::UserspaceExit;
use dirq_vmm::{BenchConfig, RunReport};

/// Concurrent VMs on a small host would only make each other slower.
static KVM: Mutex<()> = Mutex::new(());

pub fn one_vm_at_a_time() -> MutexGuard<'static, ()> {
    KVM.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub fn run(config: &BenchConfig) -> Result<RunReport, BenchError> {
    let _serial = one_vm_at_a_time();
    bench::run(config)
}

pub fn userspace_exits(report: &RunReport, reason: UserspaceExit) -> u64 {
    report
        .exits
        .userspace_by_reason
        .get(&reason)
        .copied()
        .unwrap_or(0)
}

/// vioapic's kernel level with `count` events, changed by `adjust`: its
/// report where this host's LAPIC holds interrupts in service; where it
/// does not (`lapic_check`), asserts that the run said so instead of
/// measuring a storm, and gives `None`.
pub fn vioapic_kernel_level(count: u64, adjust: fn(&mut BenchConfig)) -> Option<RunReport> {
    let in_service = {
        let _serial = one_vm_at_a_time();
        lapic_check::check(None).expect("the LAPIC check gives a consistent answer")
    };
    let mut config = BenchConfig::from(BenchParams::Vioapic(VioapicParams {
        vioapic: VioapicLevel::Kernel,
        count,
        ..VioapicParams::default()
    }));
    adjust(&mut config);
    let result = run(&config);
    if in_service == LapicInService::Held {
        return Some(result.unwrap_or_else(|err| panic!("vioapic kernel: {err}")));
    }
    assert_not_measurable_for_the_lapic(result);
    None
}

/// Asserts a vioapic run said its LAPIC holds nothing in service; gives
/// what it said.
pub fn assert_not_measurable_for_the_lapic(result: Result<RunReport, BenchError>) -> String {
    match result {
        Err(BenchError::NotMeasurable { why, .. }) => {
            assert!(why.contains("holds no interrupt in service"), "{why}");
            why
        }
        other => panic!(
            "expected not measurable, got {:?}",
            other.map(|r| r.results)
        ),
    }
}
