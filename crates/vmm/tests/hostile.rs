//! The hostile-guest suite on /dev/kvm: every attack of
//! guest/bench_hostile.c, and every attack mounted through another bench
//! (guest/attack.c), ends as its case declares, within its watchdog plus
//! 5 s, with what the guest controls kept bounded.

mod common;

use std::time::{Duration, Instant};

use common::run;
use dirq_vmm::config::HostileCase;
use dirq_vmm::devices::serial::CONSOLE_LIMIT;
use dirq_vmm::hostile::{Case, Expect};
use dirq_vmm::report::with_causes;
use dirq_vmm::testing::require_kvm;

/// The time a refusal may take beyond the watchdog (issue 12).
const GRACE: Duration = Duration::from_secs(5);
/// What the console may hold beyond its limit: the line saying what was dropped.
const CONSOLE_NOTE: usize = 200;

#[test]
fn every_hostile_case_ends_as_declared() {
    if !require_kvm("every_hostile_case_ends_as_declared") {
        return;
    }
    let mut wrong = Vec::new();
    let resident_before = resident_bytes();
    for case in Case::all() {
        let config = case.config();
        let started = Instant::now();
        let outcome = run(&config);
        let took = started.elapsed();
        let limit = config.watchdog().timeout + GRACE;
        if took > limit {
            wrong.push(format!("{case}: took {took:?}, more than {limit:?}"));
        }
        match (case.expect(), outcome) {
            (Expect::Refuses, Ok(_)) => wrong.push(format!("{case}: completed, must be refused")),
            (Expect::Refuses, Err(err)) => {
                let message = with_causes(&err);
                let causes = case.causes();
                if !causes.iter().any(|cause| message.contains(cause)) {
                    wrong.push(format!(
                        "{case}: refused with \"{message}\", naming none of {causes:?}"
                    ));
                }
            }
            (Expect::Survives, Err(err)) => wrong.push(format!(
                "{case}: must survive, failed: {}",
                with_causes(&err)
            )),
            (Expect::Survives, Ok(report)) => {
                // What it reports is the bench it attacked, every sample asked for.
                if report.bench() != config.bench() {
                    wrong.push(format!("{case}: reported {}", report.bench()));
                }
                let samples = report
                    .latency_ns
                    .as_ref()
                    .map_or(0, |latency| latency.samples);
                let asked = config.params.expected_samples();
                if samples != asked {
                    wrong.push(format!(
                        "{case}: {samples} samples reported, {asked} asked for"
                    ));
                }
                for figure in case.marked_claims() {
                    if !report.is_claim(figure) {
                        wrong.push(format!(
                            "{case}: {figure} not reported as the guest's claim ({:?})",
                            report.guest_claims
                        ));
                    }
                }
                if report.console.len() > CONSOLE_LIMIT + CONSOLE_NOTE {
                    wrong.push(format!(
                        "{case}: console grew to {} bytes",
                        report.console.len()
                    ));
                }
                let flooded = matches!(
                    case,
                    Case::Hostile(
                        HostileCase::SerialFloodLines | HostileCase::SerialFloodNoNewline
                    )
                );
                if flooded && !report.console.contains("bytes more than the") {
                    wrong.push(format!("{case}: the console does not say what it dropped"));
                }
            }
        }
    }
    // Each run's guest RAM is unmapped when it ends; nothing a guest did
    // (a flood, a forged count) may have grown the VMM past that.
    let grown = resident_bytes().saturating_sub(resident_before);
    if grown > RESIDENT_GROWTH_LIMIT {
        wrong.push(format!(
            "the VMM's resident memory grew by {grown} bytes over the suite"
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// More than one run's guest RAM and buffers: something a guest grew.
const RESIDENT_GROWTH_LIMIT: u64 = 64 << 20;

/// This process's resident memory (/proc/self/statm, in pages).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .expect("resident pages");
    // SAFETY: sysconf has no preconditions.
    pages * u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).expect("a page size")
}
