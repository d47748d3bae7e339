//! `dirq report`: runs probe, calibration, the real benchmarks, the model
//! checks and the built-in simulation scenarios, then writes a self-contained
//! HTML report, `data.json` with every number, and Perfetto traces.

mod analyse;
mod collect;
mod present;

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{Context, Result};
use dirq_vmm::config::{GuestExec, Named};
use dirq_vmm::probe::ProbeReport;
use dirq_vmm::RunReport;

use crate::calibrate::Calibration;
use crate::studies::StudyTables;

use crate::common::meta::{self, Meta};
use crate::common::plan::{self, Depth};
use crate::common::progress::{Step, StepFailure, Steps};
use crate::common::real::RealCase;
use crate::common::views::SimScenario;
use analyse::checks::{self, ExitStatistic, ModelChecks};
use analyse::host::kvm_backend;
use collect::{real_trace, simulate, twins};
use dirq_vmm::host_load::{HostLoad, HostNoise, LoadMonitor, NoiseReason};
use present::conclusions::{self, conclusions_sections, Findings};
use present::data::{KvmStatus, ReportData};
use present::{calibration, host, html, real, scenarios, studies};

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
    /// A VM watched by `dirq observe --record FILE`: its tables, hot spots and
    /// what-if go beside dirq's own runs (repeat for several).
    #[arg(long, value_name = "FILE")]
    pub observation: Vec<PathBuf>,
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
    // The load average and steal over the whole report; the probe counts
    // other runnable tasks between its own runs, where it can tell them apart.
    let load = LoadMonitor::start();
    let traces_dir = args.out.join("traces");
    std::fs::create_dir_all(&traces_dir)
        .with_context(|| format!("cannot create {}", traces_dir.display()))?;
    // Before any work: a report that cannot be written is not worth measuring.
    // (The real-run traces are named after the runs; their step reports a
    // failed write without losing the rest.)
    for path in [
        args.out.join("index.html"),
        args.out.join("data.json"),
        args.out.join(PROFILE_FILE),
        traces_dir.join(simulate::TRACE_FILE),
    ] {
        crate::output::check_writable(&path)?;
    }

    // Read before any work: a bad record is the user's to fix first.
    let observations = args
        .observation
        .iter()
        .map(|path| Ok((path.clone(), crate::observe::replay(path)?)))
        .collect::<Result<Vec<_>, crate::observe::Error>>()?;

    let mut steps = Steps::new();
    let kvm = if args.sim_only {
        KvmStatus {
            available: false,
            detail: "--sim-only was given".into(),
            backend: None,
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
        host_load: None,
        host_noise: HostNoise::Quiet,
        sections: Vec::new(),
        raw: serde_json::Map::new(),
    };
    let mut real = RealHalf::default();
    let mut studies = None;
    if report.kvm.available {
        real = run_real_half(&mut report, &mut steps, &args);
        studies = Some(run_studies(&mut report, &mut steps, depth, args.guest_exec));
    } else {
        let why = format!("no real half: {}", report.kvm.detail);
        for step in [
            Step::Probe,
            Step::Calibrate,
            Step::RealBenchmarks,
            Step::ModelChecks,
            Step::Studies,
        ] {
            steps.skip(step, why.clone());
        }
        if !args.sim_only {
            diag!(
                "dirq report: WARNING: no access to /dev/kvm ({}): the report has the \
                 simulation half only",
                report.kvm.detail
            );
        }
    }
    let simulated = run_simulations(&mut report, &mut steps, depth, args.seed, &traces_dir);
    let guest_exec = real.guest_exec.map(|exec| exec.name().to_string());
    let host_load = load.finish();
    report.sections.extend(conclusions_sections(&Findings {
        probe: real.probe.as_ref(),
        calibration: real.calibration.as_ref(),
        cases: &real.cases,
        checks: real.checks.as_ref(),
        studies: studies.as_ref(),
        simulated: &simulated,
    }));
    if !observations.is_empty() {
        let records: Vec<_> = observations.iter().map(|(_, record)| record).collect();
        insert_raw(&mut report, "observations", &records);
        report
            .sections
            .push(present::observed::observed_section(&observations));
    }
    present::page::in_page_order(&mut report.sections);
    let host = meta::Host::this(guest_exec.clone());
    report.kvm.backend = kvm_backend(&host, real.probe.as_ref()).map(String::from);
    report.host_noise = host_noise(&host_load, real.probe.as_ref().map(|p| &p.host_noise));
    if let Some(warning) = html::noise_warning(&report.host_noise) {
        diag!("dirq report: {warning}");
    }
    report.host_load = Some(host_load);
    mark_incomplete_sections(&mut report, &steps);
    let failed: Vec<String> = steps
        .failed()
        .flat_map(|record| {
            record
                .failures
                .iter()
                .map(move |failure| format!("{}: {}", record.title, failure.line()))
        })
        .collect();
    report.steps = steps.finish();
    write_report(&report, &Meta::since(started, guest_exec), &args.out)?;
    diag!(
        "dirq report: wrote {} and {}",
        args.out.join("index.html").display(),
        args.out.join("data.json").display()
    );
    anyhow::ensure!(
        failed.is_empty(),
        "{} failure(s), so the report is PARTIAL:\n  {}",
        failed.len(),
        failed.join("\n  ")
    );
    Ok(())
}

/// Every section a failed step fills opens by saying it is incomplete,
/// and what failed.
fn mark_incomplete_sections(report: &mut ReportData, steps: &Steps) {
    for record in steps.failed() {
        let what: Vec<&str> = record
            .failures
            .iter()
            .map(|failure| failure.configuration.as_str())
            .collect();
        let paragraph = format!(
            "Incomplete: {} failed (step \"{}\"; see the failures at the top), so this \
             section has only what ran.",
            conclusions::and_list(&what),
            record.title
        );
        for section in &mut report.sections {
            if record.step.sections().contains(&section.id.as_str()) {
                section.intro.insert(0, paragraph.clone());
            }
        }
    }
}

/// What the real half measured, for the conclusions.
#[derive(Default)]
struct RealHalf {
    probe: Option<ProbeReport>,
    calibration: Option<Calibration>,
    cases: Vec<RealCase>,
    checks: Option<ModelChecks>,
    /// How the guest ran in the first real run.
    guest_exec: Option<GuestExec>,
}

/// Probe and the real benchmarks; each failure becomes a note, not an abort.
fn run_real_half(report: &mut ReportData, steps: &mut Steps, args: &Args) -> RealHalf {
    let (depth, seed, out) = (args.depth(), args.seed, args.out.as_path());
    let mut half = RealHalf::default();
    let probe = steps.run(Step::Probe, 1, |bar| {
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
        Err(err) => steps.fail(
            Step::Probe,
            StepFailure {
                configuration: "the probe".into(),
                reason: format!("{:#}", anyhow::Error::from(err)),
                command: Some("dirq probe".into()),
            },
        ),
    }

    let calibration = match &half.probe {
        Some(probe) => {
            let calibration =
                steps.run(Step::Calibrate, crate::calibrate::CALIBRATION_RUNS, |bar| {
                    crate::calibrate::calibrate(probe.clone(), depth != Depth::Full, bar)
                });
            if let Err(err) = &calibration {
                steps.fail(
                    Step::Calibrate,
                    StepFailure {
                        configuration: "the calibration".into(),
                        reason: format!("{err:#}"),
                        command: Some("dirq calibrate".into()),
                    },
                );
            }
            calibration.ok()
        }
        None => {
            steps.skip(Step::Calibrate, "it needs the probe's exit costs");
            None
        }
    };
    if let Some(calibration) = &calibration {
        record_calibration(report, steps, calibration, out);
    }
    half.calibration = calibration;

    let mut plan = plan::real_plan(depth, half.probe.as_ref().map(|probe| &probe.floors));
    for config in &mut plan {
        config.common.guest_exec = args.guest_exec;
    }
    let repeats = depth.repeats();
    let (cases, reports, failures) =
        steps.run(Step::RealBenchmarks, (plan.len() * repeats) as u64, |bar| {
            plan::run_all(&plan, repeats, bar)
        });
    for failure in failures {
        steps.fail(Step::RealBenchmarks, failure);
    }
    report.notes.extend(exec_warnings(&reports));
    insert_raw(report, "real_runs", &reports);
    half.guest_exec = reports.first().map(|run| run.guest_exec);
    half.cases = cases;
    if half.cases.is_empty() {
        return half;
    }
    report.sections.push(real::real_section(
        &half.cases,
        half.probe.as_ref().map(|probe| &probe.floors),
    ));
    let host_flags_pv_eoi = half.cases.iter().any(|case| {
        case.repeats.iter().any(|repeat| {
            repeat
                .run
                .results
                .pv_eoi_skips()
                .is_some_and(|skips| skips > 0)
        })
    });
    let inputs = real_trace::TraceInputs {
        host: [
            half.probe.as_ref().and_then(|p| p.backend.clone()),
            half.guest_exec.map(|exec| exec.to_string()),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", "),
        twins: half
            .calibration
            .as_ref()
            .map(|c| (&c.host.profile, &c.costs, PROFILE_FILE)),
        host_flags_pv_eoi,
        seed,
    };
    let traced = plan::traced_count(&half.cases);
    let (traces, failures) = steps.run(Step::RealTraces, traced, |bar| {
        let written = real_trace::write_real_traces(&out.join("traces"), &half.cases, &inputs);
        bar.inc(traced);
        written
    });
    for failure in failures {
        steps.fail(Step::RealTraces, failure);
    }
    report
        .sections
        .extend(present::real_trace::real_traces_section(&traces));

    let Some(calibration) = &half.calibration else {
        steps.skip(
            Step::ModelChecks,
            "no calibration, so no model checks or extrapolation",
        );
        return half;
    };
    let statistic = ExitStatistic::of_host(half.probe.as_ref());
    let twins = steps.run(Step::ModelChecks, half.cases.len() as u64, |bar| {
        twins::run_twins(
            &half.cases,
            &calibration.host.profile,
            &calibration.costs,
            host_flags_pv_eoi,
            seed,
            bar,
        )
    });
    let checks = checks::check(
        &half.cases,
        &twins,
        statistic,
        half.probe.as_ref().map(|probe| &probe.floors),
        Some(&calibration.costs),
    );
    for failure in &checks.failures {
        steps.fail(Step::ModelChecks, failure.clone());
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
        steps.fail(
            Step::Calibrate,
            StepFailure {
                configuration: format!("writing {}", profile_path.display()),
                reason: format!("{err:#}"),
                command: Some(format!("dirq calibrate --out {}", profile_path.display())),
            },
        );
    }
    report
        .sections
        .push(calibration::calibration_section(calibration, PROFILE_FILE));
    insert_raw(report, "calibration", calibration);
}

/// The model-vs-reality and extrapolation sections, their data, and a note
/// at the top counting the misses.
fn record_checks(report: &mut ReportData, checks: &ModelChecks) {
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
        .push(present::model::model_section(checks, PROFILE_FILE));
    if let Some(section) = present::model::extrapolation_section(checks, PROFILE_FILE) {
        report.sections.push(section);
    }
    insert_raw(report, "model_checks", checks);
}

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
    let table = steps.run(Step::EmulatedVsNative, 1, |bar| {
        let table = dirq_vmm::probe::emulation_table();
        bar.inc(1);
        table
    });
    match table {
        Ok(table) => {
            report.sections.push(host::emulation_section(&table));
            insert_raw(report, "emulation", &table);
        }
        Err(err) => steps.fail(
            Step::EmulatedVsNative,
            StepFailure {
                configuration: "irq-latency emulated and native".into(),
                reason: format!("{err:#}"),
                command: Some("dirq probe".into()),
            },
        ),
    }
}

/// The software-only studies on this host's KVM, as `dirq studies`
/// measures them; a study that fails is a failure of the step, the others
/// still report.
fn run_studies(
    report: &mut ReportData,
    steps: &mut Steps,
    depth: Depth,
    guest_exec: Option<GuestExec>,
) -> StudyTables {
    let all = crate::studies::Study::ALL;
    let (scale, command) = match depth {
        Depth::Full => (dirq_vmm::studies::Scale::Full, "dirq studies"),
        Depth::Quick | Depth::Smoke => (dirq_vmm::studies::Scale::Quick, "dirq studies --quick"),
    };
    let tables = steps.run(Step::Studies, all.len() as u64, |bar| {
        let settings = dirq_vmm::studies::Settings { scale, guest_exec };
        crate::studies::measure(&all, settings, bar)
    });
    for failure in studies::failures(&tables, command) {
        steps.fail(Step::Studies, failure);
    }
    if let Some(section) = studies::studies_section(&tables, command) {
        report.sections.push(section);
    }
    insert_raw(report, "studies", &tables);
    tables
}

/// The built-in scenarios with the published did-2015 profile, and the
/// trace of every design; returns the scenarios' results.
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
            steps.fail(
                Step::Simulation,
                StepFailure {
                    configuration: "the built-in scenarios".into(),
                    reason: format!("could not be loaded: {err:#}"),
                    command: Some("dirq sim --list".into()),
                },
            );
            return Vec::new();
        }
    };
    let total_runs: usize = scenarios.iter().map(|s| s.expand().len()).sum();
    let outcomes = steps.run(Step::Simulation, total_runs as u64, |bar| {
        scenarios
            .iter()
            .map(|scenario| {
                bar.set_message(scenario.name.clone());
                (scenario, simulate::run(scenario, seed, None, bar))
            })
            .collect::<Vec<_>>()
    });
    let mut raws = Vec::new();
    let mut views: Vec<SimScenario> = Vec::new();
    for (scenario, outcome) in outcomes {
        match outcome {
            Ok(outcome) => {
                let mut view = outcome.view;
                view.inputs = Some(scenario.clone());
                let mut section = scenarios::scenario_section(&view, seed, &views);
                if depth == Depth::Smoke {
                    section.intro.push(format!(
                        "Smoke run: shortened to {} ms of simulated time.",
                        scenario.duration_ms
                    ));
                }
                report.sections.push(section);
                raws.push(outcome.raw);
                views.push(view);
            }
            Err(err) => steps.fail(
                Step::Simulation,
                StepFailure {
                    configuration: scenario.name.clone(),
                    reason: format!("{err:#}"),
                    command: Some(format!("dirq sim {} --seed {seed}", scenario.name)),
                },
            ),
        }
    }
    report
        .raw
        .insert("sim_scenarios".into(), serde_json::Value::Array(raws));

    let designs = dirq_sim::design::DesignKind::ALL.len() as u64;
    let trace = steps.run(Step::Trace, designs, |bar| {
        simulate::write_design_trace(traces_dir, seed, bar)
    });
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
        Err(err) => steps.fail(
            Step::Trace,
            StepFailure {
                configuration: "traces/designs.json".into(),
                reason: format!("not written: {err:#}"),
                command: None,
            },
        ),
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
            backend: None,
        },
        Err(err) => KvmStatus {
            available: false,
            detail: format!("no /dev/kvm: {err}"),
            backend: None,
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

/// Whether the report's timings can be taken as this host's: the host's
/// load over the whole report, and what the probe saw while it measured
/// the floors every derived cost rests on (steal, other tasks, the floors'
/// spread between runs, a shared core).
fn host_noise(load: &HostLoad, probe: Option<&HostNoise>) -> HostNoise {
    let mut reasons = load.noise_reasons();
    if let Some(HostNoise::Noisy(probe_reasons)) = probe {
        // The load average is one /proc reading, the report's own at its
        // start; the rest are the probe's few seconds, said so beside the
        // report's own readings over the whole run.
        reasons.extend(
            probe_reasons
                .iter()
                .filter(|reason| !matches!(reason, NoiseReason::LoadAverage { .. }))
                .map(|reason| NoiseReason::DuringProbe {
                    reason: Box::new(reason.clone()),
                }),
        );
    }
    HostNoise::from_reasons(reasons)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(one_minute: f64, steal_share: f64) -> HostLoad {
        HostLoad {
            cpus: 2,
            load_average: Some([one_minute, 0.0, 0.0]),
            other_runnable: None,
            steal_ms: Some(0.0),
            steal_share: Some(steal_share),
            elapsed_s: 120.0,
        }
    }

    #[test]
    fn the_probe_s_noise_heads_the_report_but_its_load_average_is_not_read_twice() {
        assert_eq!(host_noise(&load(0.3, 0.0), None), HostNoise::Quiet);
        // A quiet report whose probe saw steal and spread floors is noisy.
        let probe = HostNoise::Noisy(vec![
            NoiseReason::LoadAverage {
                one_minute: 3.0,
                cpus: 2,
            },
            NoiseReason::Steal { share: 0.09 },
            NoiseReason::SharedCore,
        ]);
        let HostNoise::Noisy(reasons) = host_noise(&load(0.3, 0.0), Some(&probe)) else {
            panic!("the probe's steal and shared core make the report noisy");
        };
        let during_probe = |reason| NoiseReason::DuringProbe {
            reason: Box::new(reason),
        };
        assert_eq!(
            reasons,
            [
                during_probe(NoiseReason::Steal { share: 0.09 }),
                during_probe(NoiseReason::SharedCore)
            ]
        );
        assert_eq!(
            reasons[0].to_string(),
            "while the probe measured the floors, 9.0% of CPU time stolen by the outer host"
        );
        // The report's own load average stands for both.
        let HostNoise::Noisy(reasons) = host_noise(&load(3.5, 0.0), Some(&probe)) else {
            panic!("a loaded host is noisy");
        };
        let load_averages = reasons
            .iter()
            .filter(|r| matches!(r, NoiseReason::LoadAverage { .. }))
            .count();
        assert_eq!(load_averages, 1, "{reasons:?}");
    }
}
