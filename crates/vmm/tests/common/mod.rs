//! What the KVM test binaries share: one VM at a time, and exit lookups.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard};

use dirq_vmm::bench::{self, BenchError};
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

pub fn userspace_exits(report: &RunReport, reason: &str) -> u64 {
    report
        .exits
        .userspace_by_reason
        .get(reason)
        .copied()
        .unwrap_or(0)
}
