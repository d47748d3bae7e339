//! What watching a VM costs it, and whether the observer keeps up.
//!
//! `cargo bench -p dirq --bench observe_overhead` runs `dirq run whileloop`
//! through the in-kernel irqchip, alternately alone and watched by `dirq
//! observe`, at a moderate rate and at one that makes KVM write about 100K
//! trace records a second. It prints, per rate, the guest's share of the
//! CPU (the loop's iterations against its unloaded baseline) with and
//! without the observer, their ratio, the records traced per second, the
//! records the kernel lost, and what each record cost the guest. Figures
//! and ratios from one run; nothing here is asserted.

use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// Runs per configuration, alternating watched and alone so drift on a
/// shared host hits both.
const PAIRS: usize = 3;
/// 10K/s: an ordinary device. 40K/s: ~100K records/s on a kvm_pvm host.
const RATES: [u32; 2] = [10_000, 40_000];

fn dirq() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dirq"))
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn whileloop(rate: u32) -> Command {
    let mut command = dirq();
    command.args([
        "run",
        "whileloop",
        "--irqchip",
        "kernel",
        "--rate",
        &rate.to_string(),
        "--json",
    ]);
    command
}

/// One run's `results` and `duration_s`, or why there is none.
fn run_result(output: Output) -> Result<Value, String> {
    if !output.status.success() {
        return Err(format!("dirq run failed: {}", stderr(&output)));
    }
    serde_json::from_slice(&output.stdout).map_err(|err| format!("dirq run's JSON: {err}"))
}

struct Watched {
    run: Value,
    observation: Value,
}

fn watched(rate: u32) -> Result<Watched, String> {
    let child = whileloop(rate)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("dirq run: {err}"))?;
    let observed = dirq()
        .args(["observe", "--pid", &child.id().to_string()])
        .args(["--wait", "30", "--duration", "600", "--json", "--no-probe"])
        .output()
        .map_err(|err| format!("dirq observe: {err}"))?;
    let run = run_result(child.wait_with_output().map_err(|err| err.to_string())?)?;
    if !observed.status.success() {
        return Err(format!("dirq observe failed: {}", stderr(&observed)));
    }
    let observation =
        serde_json::from_slice(&observed.stdout).map_err(|err| format!("observe JSON: {err}"))?;
    Ok(Watched { run, observation })
}

fn number(value: &Value) -> f64 {
    value.as_f64().unwrap_or(f64::NAN)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn measure(rate: u32) -> Result<(), String> {
    let (mut alone, mut with) = (Vec::new(), Vec::new());
    let (mut records_per_s, mut lost, mut cost_ns) = (Vec::new(), 0.0, Vec::new());
    for _ in 0..PAIRS {
        let run = run_result(whileloop(rate).output().map_err(|err| err.to_string())?)?;
        let share_alone = number(&run["results"]["guest_share"]);
        alone.push(share_alone);
        let Watched { run, observation } = watched(rate)?;
        let share = number(&run["results"]["guest_share"]);
        with.push(share);
        let records = number(&observation["sources"]["records"]);
        let seconds = number(&observation["duration_s"]);
        records_per_s.push(records / seconds);
        let lost_here = number(&observation["sources"]["lost"]);
        lost += lost_here;
        // The guest's loss of CPU over its window, spread over the
        // records the window's share of the observation traced.
        let window_s = number(&run["duration_s"]);
        cost_ns.push((share_alone - share) * 1e9 / (records / seconds));
        eprintln!(
            "  {rate}/s: alone {share_alone:.3}, watched {share:.3} ({records:.0} records, {lost_here:.0} lost in {seconds:.1} s, window {window_s:.1} s; turned off: {})",
            observation["sources"]["disabled"]
        );
    }
    let (alone, with) = (median(alone), median(with));
    println!(
        "{rate:>7}/s  guest share alone {alone:.3}  watched {with:.3}  ratio {:.3}  records/s {:>8.0}  lost {lost:.0}  guest ns per record {:.0}",
        with / alone,
        median(records_per_s),
        median(cost_ns),
    );
    Ok(())
}

fn main() {
    if std::fs::metadata("/dev/kvm").is_err() {
        println!("observe_overhead SKIPPED: no /dev/kvm");
        return;
    }
    println!("observe_overhead: whileloop, in-kernel irqchip, {PAIRS} pairs per rate (medians)");
    for rate in RATES {
        if let Err(err) = measure(rate) {
            println!("{rate:>7}/s  not measured: {err}");
        }
    }
}
