//! `dirq report`: runs probe, calibration, the real benchmarks, the model
//! checks and the built-in simulation scenarios, then writes a self-contained
//! HTML report, `data.json` with every number, and Perfetto traces.

mod calibration;
mod charts;
mod checks;
mod data;
mod designs;
mod figures;
mod host;
mod html;
mod model;
pub mod plan;
mod progress;
mod real;
mod scenarios;
mod simulate;
pub mod views;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use crate::calibrate::Calibration;

use data::{Depth, KvmStatus, ReportData};
use progress::Steps;

/// The calibrated profile, written next to index.html.
const PROFILE_FILE: &str = "host-profile.toml";

#[derive(clap::Args)]
#[command(
    after_help = "Runs everything dirq can measure and model on this machine and writes one \
report a person reads in a browser:\n\n\
  1. probe: what this host's KVM offers, the cost of one userspace and one in-kernel exit\n\
  2. calibrate: this host's costs (exits, injection, EOI paths, HLT wake-up, timer) as a sim profile\n\
  3. real benchmarks on /dev/kvm across irqchip / injection / EOI / halt paths\n\
  4. model vs reality: the simulator, fed the calibrated profile, predicts those same runs\n\
  5. extrapolation: the same workloads under APICv, ELI and DID with this host's costs\n\
  6. the built-in simulation scenarios with the published did-2015 profile\n\n\
Writes DIR/index.html (inline SVG, no network), DIR/data.json and DIR/traces/*.json \
(Perfetto / chrome://tracing). Without /dev/kvm it reports the simulation only and says so at the top.\n\n\
Examples:\n  dirq report                 # full report into ./report (under 15 minutes)\n  \
dirq report --quick --out /tmp/r   # a subset with small counts (under 3 minutes)"
)]
pub struct Args {
    /// Run a subset of benches and scenarios with small counts (under 3 minutes).
    #[arg(long)]
    pub quick: bool,
    /// Directory to write index.html, data.json and traces/ into (created if missing).
    #[arg(long, default_value = "report")]
    pub out: PathBuf,
    /// Seed for every simulation run (same seed, same simulated numbers).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Skip everything that needs /dev/kvm (probe, calibration, real runs, model checks).
    #[arg(long)]
    pub sim_only: bool,
    /// Tiny counts for the test suite: proves the pipeline, not the numbers.
    #[arg(long, hide = true, conflicts_with = "quick")]
    pub smoke: bool,
}

impl Args {
    fn depth(&self) -> Depth {
        if self.smoke {
            Depth::Smoke
        } else if self.quick {
            Depth::Quick
        } else {
            Depth::Full
        }
    }
}

pub fn execute(args: Args) -> Result<()> {
    let depth = args.depth();
    let started_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let traces_dir = args.out.join("traces");
    std::fs::create_dir_all(&traces_dir)
        .with_context(|| format!("cannot create {}", traces_dir.display()))?;

    let mut steps = Steps::new();
    let kvm = if args.sim_only {
        KvmStatus {
            available: false,
            detail: "--sim-only was given".into(),
        }
    } else {
        kvm_status()
    };
    let mut report = ReportData {
        dirq_version: env!("CARGO_PKG_VERSION").to_string(),
        depth,
        started_unix_s,
        kvm,
        notes: Vec::new(),
        steps: Vec::new(),
        sections: Vec::new(),
        raw: serde_json::Map::new(),
    };
    if report.kvm.available {
        run_real_half(&mut report, &mut steps, depth, args.seed, &args.out);
        run_designs(&mut report, &mut steps, depth);
    } else {
        report.notes.push(format!(
            "Simulation only ({}): no probe, calibration, real runs or model checks.",
            report.kvm.detail
        ));
    }
    run_simulations(&mut report, &mut steps, depth, args.seed, &traces_dir);
    report.steps = steps.finish();
    write_report(&report, &args.out)?;
    eprintln!(
        "dirq report: wrote {} and {}",
        args.out.join("index.html").display(),
        args.out.join("data.json").display()
    );
    Ok(())
}

/// Probe and the real benchmarks; each failure becomes a note, not an abort.
fn run_real_half(report: &mut ReportData, steps: &mut Steps, depth: Depth, seed: u64, out: &Path) {
    let probe = steps.run("probe: KVM capabilities and exit costs", 1, |bar| {
        let probe = dirq_vmm::probe::probe(None);
        bar.inc(1);
        probe
    });
    let probe = match probe {
        Ok(probe) => {
            report.kvm.detail = format!(
                "backend {}, KVM API {}",
                probe.backend.as_deref().unwrap_or("unknown"),
                probe.api_version
            );
            report.sections.push(host::host_section(&probe));
            insert_raw(report, "probe", &probe);
            Some(probe)
        }
        Err(err) => {
            report.notes.push(format!("`dirq probe` failed: {err}"));
            None
        }
    };

    let statistic = checks::ExitStatistic::of_backend(
        probe.as_ref().and_then(|probe| probe.backend.as_deref()),
    );
    let calibration = match probe {
        Some(probe) => steps.run(
            "calibrate: this host's costs",
            crate::calibrate::CALIBRATION_RUNS,
            |bar| crate::calibrate::calibrate(probe, depth != Depth::Full, bar),
        ),
        None => Err(anyhow::anyhow!("calibration needs the probe's exit costs")),
    };
    match &calibration {
        Ok(calibration) => record_calibration(report, calibration, out),
        Err(err) => report
            .notes
            .push(format!("`dirq calibrate` failed: {err:#}")),
    }

    let plan = plan::real_plan(depth);
    let (cases, raws, failures) =
        steps.run("real benchmarks on /dev/kvm", plan.len() as u64, |bar| {
            plan::run_all(&plan, bar)
        });
    report.notes.extend(failures);
    report
        .raw
        .insert("real_runs".into(), serde_json::Value::Array(raws));
    if cases.is_empty() {
        return;
    }
    report.sections.push(real::real_section(&cases));

    let Ok(calibration) = &calibration else {
        report
            .notes
            .push("No calibration, so no model checks or extrapolation.".into());
        return;
    };
    let checks = steps.run(
        "model vs reality: simulated twins of the real runs",
        cases.len() as u64,
        |bar| {
            checks::run_checks(
                &cases,
                &calibration.host.profile,
                &calibration.costs,
                statistic,
                seed,
                bar,
            )
        },
    );
    record_checks(report, &checks);
}

/// The calibration section, its data, and the profile file beside the page.
fn record_calibration(report: &mut ReportData, calibration: &Calibration, out: &Path) {
    let profile_path = out.join(PROFILE_FILE);
    let written = calibration
        .host
        .to_toml()
        .map_err(anyhow::Error::from)
        .and_then(|text| Ok(std::fs::write(&profile_path, text)?));
    if let Err(err) = written {
        report.notes.push(format!(
            "the calibrated profile could not be written to {}: {err:#}",
            profile_path.display()
        ));
    }
    report
        .sections
        .push(calibration::calibration_section(calibration, PROFILE_FILE));
    insert_raw(report, "calibration", calibration);
}

/// The model-vs-reality and extrapolation sections, their data, and a note
/// at the top counting the misses.
fn record_checks(report: &mut ReportData, checks: &checks::ModelChecks) {
    report.notes.extend(checks.failures.iter().cloned());
    let misses = checks
        .comparisons
        .iter()
        .filter(|c| !c.within_tolerance)
        .count();
    if misses > 0 {
        report.notes.push(format!(
            "The model missed {misses} of {} measurements by more than 20% (flagged in \"Model against reality\").",
            checks.comparisons.len()
        ));
    }
    report
        .sections
        .push(checks::model_section(checks, PROFILE_FILE));
    if let Some(section) = checks::extrapolation_section(checks, PROFILE_FILE) {
        report.sections.push(section);
    }
    insert_raw(report, "model_checks", checks);
}

/// The software-only designs on this host's KVM, as `dirq designs` measures
/// them; a design that fails is a note, the others still report.
fn run_designs(report: &mut ReportData, steps: &mut Steps, depth: Depth) {
    let all = crate::designs::Design::ALL;
    let (scale, command) = match depth {
        Depth::Full => (dirq_vmm::designs::Scale::Full, "dirq designs"),
        Depth::Quick | Depth::Smoke => (dirq_vmm::designs::Scale::Quick, "dirq designs --quick"),
    };
    let tables = steps.run(
        "software-only designs: VIOAPIC, batched I/O, tick scaling, IPI/HLT",
        all.len() as u64,
        |bar| {
            let settings = dirq_vmm::designs::Settings {
                scale,
                guest_exec: None,
            };
            crate::designs::measure(&all, settings, bar)
        },
    );
    report.notes.extend(
        tables
            .failures
            .iter()
            .map(|failure| format!("`{command}`: {failure}")),
    );
    if let Some(section) = designs::designs_section(&tables, command) {
        report.sections.push(section);
    }
    insert_raw(report, "designs", &tables);
}

/// The built-in scenarios with the published did-2015 profile, and one
/// short trace per policy.
fn run_simulations(
    report: &mut ReportData,
    steps: &mut Steps,
    depth: Depth,
    seed: u64,
    traces_dir: &Path,
) {
    let scenarios = match simulate::scenarios_for(depth) {
        Ok(scenarios) => scenarios,
        Err(err) => {
            report.notes.push(format!(
                "the built-in scenarios could not be loaded: {err:#}"
            ));
            return;
        }
    };
    let total_runs: usize = scenarios.iter().map(|s| s.expand().len()).sum();
    let outcomes = steps.run(
        "simulation: built-in scenarios (did-2015 profile)",
        total_runs as u64,
        |bar| {
            scenarios
                .iter()
                .map(|scenario| {
                    bar.set_message(scenario.name.clone());
                    (scenario, simulate::run(scenario, seed, None, bar))
                })
                .collect::<Vec<_>>()
        },
    );
    let mut raws = Vec::new();
    for (scenario, outcome) in outcomes {
        match outcome {
            Ok(outcome) => {
                let mut section = scenarios::scenario_section(
                    &format!("sim-{}", scenario.name),
                    &format!("Simulation: {}", scenario.name),
                    &scenario.description,
                    &outcome.view,
                    &format!("dirq sim {} --seed {seed}", scenario.name),
                );
                if depth == Depth::Smoke {
                    section.intro.push(format!(
                        "Smoke run: shortened to {} ms of simulated time.",
                        scenario.duration_ms
                    ));
                }
                report.sections.push(section);
                raws.push(outcome.raw);
            }
            Err(err) => report.notes.push(format!("{err:#}")),
        }
    }
    report
        .raw
        .insert("sim_scenarios".into(), serde_json::Value::Array(raws));

    let policies = dirq_sim::policy::PolicyKind::ALL.len() as u64;
    let traces = steps.run(
        "simulation: one Perfetto trace per policy",
        policies,
        |bar| simulate::write_policy_traces(traces_dir, seed, bar),
    );
    match traces {
        Ok(files) => {
            report.raw.insert("traces".into(), serde_json::json!(files));
        }
        Err(err) => report.notes.push(format!("traces not written: {err:#}")),
    }
}

/// Keeps a tool's result in data.json; a result that cannot be serialized
/// is noted rather than silently missing.
fn insert_raw(report: &mut ReportData, key: &str, value: &impl serde::Serialize) {
    match serde_json::to_value(value) {
        Ok(value) => {
            report.raw.insert(key.to_string(), value);
        }
        Err(err) => report
            .notes
            .push(format!("{key} could not be recorded in data.json: {err}")),
    }
}

/// Whether /dev/kvm can be opened for the real half of the report.
fn kvm_status() -> KvmStatus {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        Ok(_) => KvmStatus {
            available: true,
            detail: "/dev/kvm opened".into(),
        },
        Err(err) => KvmStatus {
            available: false,
            detail: format!("no /dev/kvm: {err}"),
        },
    }
}

fn write_report(report: &ReportData, out: &Path) -> Result<()> {
    let json = serde_json::to_string_pretty(report).context("cannot serialize data.json")?;
    let data_path = out.join("data.json");
    std::fs::write(&data_path, json)
        .with_context(|| format!("cannot write {}", data_path.display()))?;
    let page_path = out.join("index.html");
    std::fs::write(&page_path, html::render_page(report))
        .with_context(|| format!("cannot write {}", page_path.display()))?;
    Ok(())
}
