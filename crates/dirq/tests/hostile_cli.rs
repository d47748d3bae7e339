//! `dirq run hostile` and bad outputs from the command line: what a
//! person sees, and the exit status.

use std::process::{Command, Output};

use dirq_vmm::config::{AttackCase, HostileCase, Named};
use dirq_vmm::hostile::{Case, Expect};

fn dirq(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dirq"))
        .args(args)
        .output()
        .expect("dirq runs")
}

#[test]
fn list_names_every_case_with_what_the_vmm_must_do() {
    let output = dirq(&["run", "hostile", "--list"]);
    assert!(output.status.success());
    let listed = String::from_utf8(output.stdout).expect("UTF-8");
    for case in Case::all() {
        let line = listed
            .lines()
            .find(|line| line.split_whitespace().next() == Some(case.name()))
            .unwrap_or_else(|| panic!("{case} not listed:\n{listed}"));
        let expect = case.expect().to_string();
        assert_eq!(
            line.split_whitespace().nth(1),
            Some(expect.as_str()),
            "{line}"
        );
        // A refusal is listed with the causes it must name.
        assert!(
            case.causes().iter().all(|cause| line.contains(cause)),
            "{line}"
        );
    }
    let not_hostile = dirq(&["run", "tick", "--case", "forged-guest-share-zero"]);
    assert!(!not_hostile.status.success());
    assert!(String::from_utf8_lossy(&not_hostile.stderr).contains("--case does not apply to tick"));
    let needs_a_case = dirq(&["run", "hostile"]);
    assert!(!needs_a_case.status.success());
    assert!(String::from_utf8_lossy(&needs_a_case.stderr).contains("--list"));
}

#[test]
fn a_refused_case_exits_non_zero_naming_the_cause() {
    if !dirq_vmm::testing::require_kvm("a_refused_case_exits_non_zero_naming_the_cause") {
        return;
    }
    let case = HostileCase::PvLockGarbage;
    assert_eq!(case.expect(), Expect::Refuses);
    let output = dirq(&["run", "hostile", "--case", case.name()]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        case.causes().iter().any(|cause| stderr.contains(cause)),
        "{stderr}"
    );
}

#[test]
fn an_output_that_cannot_be_written_is_refused_before_any_work() {
    let output = dirq(&[
        "sim",
        "did-cyclictest",
        "--trace",
        "/nonexistent-dir/trace.json",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot write /nonexistent-dir/trace.json"),
        "{stderr}"
    );
    assert!(!stderr.contains("simulating"), "{stderr}");
}

#[test]
fn a_run_that_measured_nothing_or_claims_too_much_exits_non_zero() {
    if !dirq_vmm::testing::require_kvm(
        "a_run_that_measured_nothing_or_claims_too_much_exits_non_zero",
    ) {
        return;
    }
    for case in [
        Case::Hostile(HostileCase::EmptyWindow),
        Case::Hostile(HostileCase::ForgedNativeClaim),
        Case::Hostile(HostileCase::SamplesMax),
        // Attacks on real benches, as `dirq run hostile --case` mounts them.
        Case::Attack(AttackCase::DoneFromVcpu1MidRun),
        Case::Attack(AttackCase::ForgedInfRate),
    ] {
        let output = dirq(&["run", "hostile", "--case", case.name(), "--json"]);
        assert_eq!(output.status.code(), Some(1), "{case}");
        assert!(output.stdout.is_empty(), "{case}: printed a report");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            case.causes().iter().any(|cause| stderr.contains(cause)),
            "{case}: {stderr}"
        );
    }
}
