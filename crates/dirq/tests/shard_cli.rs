//! `dirq sim --shard i/n` and `dirq sim merge` on the command line: the
//! merged parts print, byte for byte, what one process prints but for the
//! wall-clock and provenance fields; parts that do not make one sweep are
//! refused with a message naming the file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The built-in ipi scenario, shortened to keep the test quick.
fn scenario_file(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/ipi.toml"),
    )
    .expect("scenarios/ipi.toml");
    let path = dir.join("ipi-short.toml");
    let short = text.replace("duration_ms = 200", "duration_ms = 5");
    assert_ne!(short, text, "the duration line moved");
    std::fs::write(&path, short).expect("written");
    path
}

fn dirq(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dirq"))
        .args(args)
        .output()
        .expect("dirq runs")
}

fn stdout(args: &[&str]) -> String {
    let output = dirq(args);
    assert!(output.status.success(), "{args:?}: {output:?}");
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// A `--json` document without its metadata (every line up to `ended`)
/// and without each run's `wall_s` line.
fn results_text(document: &str) -> String {
    let (_, results) = document
        .split_once("\"ended\":")
        .expect("metadata ends with ended");
    results
        .lines()
        .skip(1)
        .filter(|line| !line.trim_start().starts_with("\"wall_s\":"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dirq-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Writes the parts of shard count `count` and returns their paths.
fn write_parts(dir: &Path, scenario: &str, count: u32, seed: &str) -> Vec<String> {
    (1..=count)
        .map(|index| {
            let shard = format!("{index}/{count}");
            let part = stdout(&["sim", scenario, "--seed", seed, "--shard", &shard]);
            let path = dir.join(format!("part-{seed}-{index}-of-{count}.json"));
            std::fs::write(&path, part).expect("written");
            path.display().to_string()
        })
        .collect()
}

#[test]
fn merged_parts_print_what_one_process_prints() {
    let dir = temp_dir("shard");
    let scenario = scenario_file(&dir);
    let scenario = scenario.to_str().expect("UTF-8 path");
    let single = stdout(&["sim", scenario, "--json"]);
    for count in [1, 2, 7] {
        let parts = write_parts(&dir, scenario, count, "1");
        let mut args = vec!["sim", "merge"];
        args.extend(parts.iter().rev().map(String::as_str));
        let merged = stdout(&args);
        assert_eq!(results_text(&merged), results_text(&single), "n = {count}");
    }
    std::fs::remove_dir_all(&dir).expect("cleaned up");
}

#[test]
fn parts_of_different_sweeps_or_missing_shards_are_refused() {
    let dir = temp_dir("shard-refused");
    let scenario = scenario_file(&dir);
    let scenario = scenario.to_str().expect("UTF-8 path");
    let parts = write_parts(&dir, scenario, 2, "1");
    let other_seed = write_parts(&dir, scenario, 2, "2");
    let refused = |args: &[&str], expected: &str| {
        let output = dirq(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    };
    refused(&["sim", "merge", &parts[0]], "shards missing: 2 of 2");
    refused(
        &["sim", "merge", &parts[0], &parts[0], &parts[1]],
        "given twice",
    );
    refused(&["sim", "merge", &parts[0], &other_seed[1]], "differs from");
    refused(&["sim", "merge", scenario], "is not a part");
    for (shard, expected) in [
        ("3/2", "does not exist"),
        ("0/2", "does not exist"),
        ("1/0", "n = 0"),
        ("1-2", "written i/n"),
    ] {
        let output = dirq(&["sim", scenario, "--shard", shard]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{shard}");
        assert!(stderr.contains(expected), "{shard}: {stderr}");
    }
    std::fs::remove_dir_all(&dir).expect("cleaned up");
}

#[test]
fn sim_help_teaches_sharding_and_merge() {
    let help = stdout(&["sim", "--help"]);
    assert!(help.contains("--shard <I/N>"), "{help}");
    assert!(help.contains("dirq sim merge"), "{help}");
    assert!(stdout(&["sim", "merge", "--help"]).contains("FILE"));
}
