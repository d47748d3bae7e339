//! `dirq report`: runs probe, calibration, the real benchmarks, the model
//! checks and the built-in simulation scenarios, then writes a self-contained
//! HTML report, `data.json` with every number, and Perfetto traces.

mod calibration;
mod charts;
mod checks;
mod conclusions;
mod data;
mod designs;
mod exit_names;
mod figures;
mod host;
mod html;
pub mod meta;
mod misses;
mod model;
pub mod plan;
pub mod progress;
mod real;
mod real_trace;
mod scenarios;
mod simulate;
mod studies;
pub mod views;

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{Context, Result};
use dirq_vmm::config::GuestExec;
use dirq_vmm::probe::ProbeReport;
use dirq_vmm::RunReport;

use crate::calibrate::Calibration;
use crate::designs::DesignTables;

use conclusions::{conclusions_section, Findings};
use data::{Depth, KvmStatus, ReportData};
use meta::Meta;
use progress::Steps;
use real::RealCase;
use views::SimScenario;

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
The page opens with its conclusions. Real measurements run 3 times (once with --quick); \
tables give the median and range. Writes DIR/index.html (inline SVG, no network), DIR/data.json \
and DIR/traces/designs.json (one Perfetto trace, a process per design). Without /dev/kvm it \
reports the simulation only and says so at the top.\n\n\
Examples:\n  dirq report                 # full report into ./report (under 5 minutes)\n  \
dirq report --quick --out /tmp/r   # a subset, each run once (under 1 minute)"
)]
pub struct Args {
    /// Run a subset of benches with small counts, each once (under 1 minute).
    #[arg(long)]
    pub quick: bool,
    /// Directory to write index.html, data.json and traces/ into (created if missing).
    #[arg(long, default_value = "report")]
    pub out: PathBuf,
    /// Seed for every simulation run, any u64 (same seed, same simulated numbers).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Skip everything that needs /dev/kvm (probe, calibration, real runs, model checks).
    #[arg(long)]
    pub sim_only: bool,
    /// How the guest executes in every real run: native or emulated (kvm_pvm hosts;
    /// default: native where offered). Where the host offers both, the report also
    /// puts them side by side on three interrupt paths.
    #[arg(long, value_parser = GuestExec::from_str)]
    pub guest_exec: Option<GuestExec>,
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
    let started = time::OffsetDateTime::now_utc();
    let traces_dir = args.out.join("traces");
    std::fs::create_dir_all(&traces_dir)
        .with_context(|| format!("cannot create {}", traces_dir.display()))?;
    // Before any work: a report that cannot be written is not worth measuring.
    crate::output::check_writable(&args.out.join("data.json"))?;

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
        depth,
        repeats: depth.repeats(),
        kvm,
        notes: Vec::new(),
        steps: Vec::new(),
        sections: Vec::new(),
        raw: serde_json::Map::new(),
    };
    let mut real = RealHalf::default();
    let mut designs = None;
    if report.kvm.available {
        real = run_real_half(&mut report, &mut steps, &args);
        designs = Some(run_designs(&mut report, &mut steps, depth, args.guest_exec));
    } else if args.sim_only {
        report.notes.push(format!(
            "Simulation only ({}): no probe, calibration, real runs or model checks.",
            report.kvm.detail
        ));
    } else {
        let warning = format!(
            "WARNING: no access to /dev/kvm ({}): this report has the simulation half only, no probe, calibration, real runs or model checks.",
            report.kvm.detail
        );
        eprintln!("dirq report: {warning}");
        report.notes.insert(0, warning);
    }
    let simulated = run_simulations(&mut report, &mut steps, depth, args.seed, &traces_dir);
    report.sections.insert(
        0,
        conclusions_section(&Findings {
            probe: real.probe.as_ref(),
            cases: &real.cases,
            checks: real.checks.as_ref(),
            designs: designs.as_ref(),
            simulated: &simulated,
        }),
    );
    let failures = steps.failures().to_vec();
    if !failures.is_empty() {
        report.notes.insert(
            0,
            format!(
                "PARTIAL REPORT: {} step(s) failed: {}",
                failures.len(),
                failures.join("; ")
            ),
        );
    }
    report.steps = steps.finish();
    let guest_exec = real.guest_exec.map(|exec| exec.name().to_string());
    write_report(&report, &Meta::since(started, guest_exec), &args.out)?;
    eprintln!(
        "dirq report: wrote {} and {}",
        args.out.join("index.html").display(),
        args.out.join("data.json").display()
    );
    anyhow::ensure!(
        failures.is_empty(),
        "{} step(s) failed, so the report is partial:\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
    Ok(())
}

/// What the real half measured, for the conclusions.
#[derive(Default)]
struct RealHalf {
    probe: Option<ProbeReport>,
    cases: Vec<RealCase>,
    checks: Option<checks::ModelChecks>,
    /// How the guest ran in the first real run.
    guest_exec: Option<GuestExec>,
}

/// Probe and the real benchmarks; each failure becomes a note, not an abort.
fn run_real_half(report: &mut ReportData, steps: &mut Steps, args: &Args) -> RealHalf {
    let (depth, seed, out) = (args.depth(), args.seed, args.out.as_path());
    let mut half = RealHalf::default();
    let probe = steps.run("probe: KVM capabilities and platform floors", 1, |bar| {
        let probe = dirq_vmm::probe::probe(args.guest_exec);
        bar.inc(1);
        probe
    });
    match probe {
        Ok(probe) => {
            report.kvm.detail = format!(
                "backend {}, KVM API {}",
                probe.backend.as_deref().unwrap_or("unknown"),
                probe.api_version
            );
            report.sections.push(host::host_section(&probe));
            insert_raw(report, "probe", &probe);
            let offered = &probe.offered_exec;
            if offered.contains(&GuestExec::Native) && offered.contains(&GuestExec::Emulated) {
                run_emulation_table(report, steps);
            }
            half.probe = Some(probe);
        }
        Err(err) => {
            let reason = format!("{:#}", anyhow::Error::from(err));
            steps.fail("probe", &reason);
            report.notes.push(format!("`dirq probe` failed: {reason}"));
        }
    }

    let calibration = match &half.probe {
        Some(probe) => steps.run(
            "calibrate: this host's costs",
            crate::calibrate::CALIBRATION_RUNS,
            |bar| crate::calibrate::calibrate(probe.clone(), depth != Depth::Full, bar),
        ),
        None => Err(anyhow::anyhow!("calibration needs the probe's exit costs")),
    };
    match &calibration {
        Ok(calibration) => record_calibration(report, steps, calibration, out),
        Err(err) => {
            steps.fail("calibrate", &format!("{err:#}"));
            report
                .notes
                .push(format!("`dirq calibrate` failed: {err:#}"));
        }
    }

    let mut plan = plan::real_plan(depth);
    for config in &mut plan {
        config.common.guest_exec = args.guest_exec;
    }
    let repeats = depth.repeats();
    let (cases, reports, failures) = steps.run(
        &format!("real benchmarks on /dev/kvm, {repeats} run(s) each"),
        (plan.len() * repeats) as u64,
        |bar| plan::run_all(&plan, repeats, bar),
    );
    for failure in &failures {
        steps.fail("real benchmarks", failure);
    }
    report.notes.extend(failures);
    report.notes.extend(exec_warnings(&reports));
    insert_raw(report, "real_runs", &reports);
    half.guest_exec = reports.first().map(|run| run.guest_exec);
    half.cases = cases;
    if half.cases.is_empty() {
        return half;
    }
    report.sections.push(real::real_section(&half.cases));
    let (traces, failures) = steps.run(
        "real-run traces: irq-latency, userspace and best in-kernel path",
        2,
        |bar| {
            let traced = real_trace::real_traces_section(&out.join("traces"), &half.cases);
            bar.inc(2);
            traced
        },
    );
    for failure in &failures {
        steps.fail("real-run traces", failure);
    }
    report.notes.extend(failures);
    report.sections.extend(traces);

    let Ok(calibration) = &calibration else {
        report
            .notes
            .push("No calibration, so no model checks or extrapolation.".into());
        return half;
    };
    let pv_eoi_waives = half.cases.iter().any(|case| {
        case.repeats.iter().any(|repeat| {
            repeat
                .run
                .results
                .get("pv_eoi_skips")
                .is_some_and(|&skips| skips > 0.0)
        })
    });
    let statistic = checks::ExitStatistic::of_host(half.probe.as_ref(), pv_eoi_waives);
    let checks = steps.run(
        "model vs reality: simulated twins of the real runs",
        half.cases.len() as u64,
        |bar| {
            checks::run_checks(
                &half.cases,
                &calibration.host.profile,
                &calibration.costs,
                statistic,
                seed,
                bar,
            )
        },
    );
    for failure in &checks.failures {
        steps.fail("model vs reality", failure);
    }
    record_checks(report, &checks);
    half.checks = Some(checks);
    half
}

/// The calibration section, its data, and the profile file beside the page.
fn record_calibration(
    report: &mut ReportData,
    steps: &mut Steps,
    calibration: &Calibration,
    out: &Path,
) {
    let profile_path = out.join(PROFILE_FILE);
    let written = calibration
        .host
        .to_toml()
        .map_err(anyhow::Error::from)
        .and_then(|text| Ok(crate::output::write_atomic(&profile_path, text.as_bytes())?));
    if let Err(err) = written {
        let reason = format!(
            "the calibrated profile could not be written to {}: {err:#}",
            profile_path.display()
        );
        steps.fail("calibrate", &reason);
        report.notes.push(reason);
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
/// Native mode refused by kvm_pvm on some run: it fell back to emulation.
fn exec_warnings(reports: &[RunReport]) -> Vec<String> {
    let mut warnings: Vec<String> = reports
        .iter()
        .filter_map(|run| run.exec_warning.as_deref())
        .map(|warning| format!("Execution mode: {warning}."))
        .collect();
    warnings.dedup();
    warnings
}

/// The same irq-latency runs emulated and natively: what kvm_pvm's
/// instruction emulator costs, kept as a finding of its own.
fn run_emulation_table(report: &mut ReportData, steps: &mut Steps) {
    let table = steps.run(
        "emulated against native: irq-latency on three paths",
        1,
        |bar| {
            let table = dirq_vmm::probe::emulation_table();
            bar.inc(1);
            table
        },
    );
    match table {
        Ok(table) => {
            report.sections.push(host::emulation_section(&table));
            insert_raw(report, "emulation", &table);
        }
        Err(err) => report
            .notes
            .push(format!("the emulated/native comparison failed: {err:#}")),
    }
}

fn run_designs(
    report: &mut ReportData,
    steps: &mut Steps,
    depth: Depth,
    guest_exec: Option<GuestExec>,
) -> DesignTables {
    let all = crate::designs::Design::ALL;
    let (scale, command) = match depth {
        Depth::Full => (dirq_vmm::designs::Scale::Full, "dirq designs"),
        Depth::Quick | Depth::Smoke => (dirq_vmm::designs::Scale::Quick, "dirq designs --quick"),
    };
    let tables = steps.run(
        "software-only designs: VIOAPIC, batched I/O, tick scaling, IPI/HLT",
        all.len() as u64,
        |bar| {
            let settings = dirq_vmm::designs::Settings { scale, guest_exec };
            crate::designs::measure(&all, settings, bar)
        },
    );
    for failure in &tables.failures {
        steps.fail("software-only designs", failure);
        report.notes.push(format!("`{command}`: {failure}"));
    }
    if let Some(section) = designs::designs_section(&tables, command) {
        report.sections.push(section);
    }
    insert_raw(report, "designs", &tables);
    tables
}

/// The built-in scenarios with the published did-2015 profile, and the
/// trace of every policy; returns the scenarios' results.
fn run_simulations(
    report: &mut ReportData,
    steps: &mut Steps,
    depth: Depth,
    seed: u64,
    traces_dir: &Path,
) -> Vec<SimScenario> {
    let scenarios = match simulate::scenarios_for(depth) {
        Ok(scenarios) => scenarios,
        Err(err) => {
            let reason = format!("the built-in scenarios could not be loaded: {err:#}");
            steps.fail("simulation", &reason);
            report.notes.push(reason);
            return Vec::new();
        }
    };
    let total_runs: usize = scenarios.iter().map(|s| s.expand().len()).sum();
    let outcomes = steps.run(
        "simulation: built-in scenarios (published profiles)",
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
    let mut views = Vec::new();
    // The studies in their papers' shapes come before the scenarios' own
    // sections, which follow in the built-in order.
    let first_simulation = report.sections.len();
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
                views.push(outcome.view);
            }
            Err(err) => {
                steps.fail("simulation", &format!("{err:#}"));
                report.notes.push(format!("{err:#}"));
            }
        }
    }
    let studies = studies::study_sections(&views, seed);
    report
        .sections
        .splice(first_simulation..first_simulation, studies);
    report
        .raw
        .insert("sim_scenarios".into(), serde_json::Value::Array(raws));

    let policies = dirq_sim::policy::PolicyKind::ALL.len() as u64;
    let trace = steps.run(
        "simulation: one Perfetto trace, a process per design",
        policies,
        |bar| simulate::write_design_trace(traces_dir, seed, bar),
    );
    match trace {
        Ok((file, exits)) => {
            report
                .raw
                .insert("traces".into(), serde_json::json!([file]));
            report
                .sections
                .push(scenarios::traced_exits_section(&exits, &file));
            insert_raw(report, "traced_exits", &exits);
        }
        Err(err) => {
            steps.fail("simulation trace", &format!("{err:#}"));
            report.notes.push(format!("trace not written: {err:#}"));
        }
    }
    views
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

fn write_report(report: &ReportData, meta: &Meta, out: &Path) -> Result<()> {
    let document = meta::Document {
        meta: meta.clone(),
        result: report,
    };
    let json = serde_json::to_string_pretty(&document).context("cannot serialize data.json")?;
    crate::output::write_atomic(&out.join("data.json"), json.as_bytes())?;
    crate::output::write_atomic(
        &out.join("index.html"),
        html::render_page(report, meta).as_bytes(),
    )?;
    Ok(())
}
