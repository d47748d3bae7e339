//! The report's steps: progress bars for long work, and what became of
//! each step (ok, failed with which configurations, skipped and why). Step
//! lines always go to stderr; the bars draw only when stderr is a terminal
//! (indicatif hides them otherwise), so logs stay readable.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// Shows what `bar` works on now: in the bar on a terminal, as a line on
/// stderr otherwise (where indicatif draws nothing), so a log shows
/// progress too.
pub fn working_on(bar: &ProgressBar, what: impl Into<String>) {
    let what = what.into();
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        diag!("  {what} ...");
    }
    bar.set_message(what);
}

/// The steps of `dirq report`, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    Probe,
    EmulatedVsNative,
    Calibrate,
    RealBenchmarks,
    RealTraces,
    ModelChecks,
    Studies,
    Simulation,
    Trace,
}

impl Step {
    pub fn title(self) -> &'static str {
        match self {
            Step::Probe => "probe: KVM capabilities and platform floors",
            Step::EmulatedVsNative => "emulated against native: irq-latency on three paths",
            Step::Calibrate => "calibrate: this host's costs",
            Step::RealBenchmarks => "real benchmarks on /dev/kvm",
            Step::RealTraces => "real-run traces: irq-latency on every path, beside its twins",
            Step::ModelChecks => "model vs reality: simulated twins of the real runs",
            Step::Studies => "software-only studies: VIOAPIC, batched I/O, tick scaling, IPI/HLT",
            Step::Simulation => "simulation: built-in scenarios (published profiles)",
            Step::Trace => "simulation: one Perfetto trace, a process per design",
        }
    }

    /// The ids of the sections this step fills: each says so when it failed.
    pub fn sections(self) -> &'static [&'static str] {
        match self {
            Step::Probe => &["host"],
            Step::EmulatedVsNative => &["emulation"],
            Step::Calibrate => &["calibration"],
            Step::RealBenchmarks => &["real"],
            Step::RealTraces => &["real-traces"],
            Step::ModelChecks => &["model-vs-reality", "extrapolation"],
            Step::Studies => &["studies"],
            Step::Simulation => &[],
            Step::Trace => &["sim-trace-exits"],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Ok,
    /// Some or all of its work failed: see `failures`.
    Failed,
    /// Not run, because what it needs is missing: see `skipped_because`.
    Skipped,
}

/// One thing a step could not do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepFailure {
    /// What failed: the configuration, design or scenario.
    pub configuration: String,
    pub reason: String,
    /// The command that repeats the failed work on its own.
    pub command: Option<String>,
}

impl StepFailure {
    /// "`dirq run ...`: the guest hung", for a terminal line or a note.
    pub fn line(&self) -> String {
        let what = match &self.command {
            Some(command) => format!("{} (`{command}`)", self.configuration),
            None => self.configuration.clone(),
        };
        format!("{what}: {}", self.reason)
    }
}

/// What became of one step: data.json's `steps[]`, the page's step table.
#[derive(Debug, Clone, Serialize)]
pub struct StepRecord {
    pub step: Step,
    pub title: &'static str,
    pub status: StepStatus,
    /// Wall time; 0 for a step that did not run.
    pub wall_s: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<StepFailure>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped_because: Option<String>,
}

impl StepRecord {
    fn new(step: Step, status: StepStatus, wall_s: f64) -> Self {
        Self {
            step,
            title: step.title(),
            status,
            wall_s,
            failures: Vec::new(),
            skipped_because: None,
        }
    }
}

#[derive(Default)]
pub struct Steps {
    records: Vec<StepRecord>,
}

impl Steps {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that (part of) `step` failed, and says so on the terminal at once.
    pub fn fail(&mut self, step: Step, failure: StepFailure) {
        diag!("dirq report: FAILED {}: {}", step.title(), failure.line());
        let record = match self.records.iter().rposition(|r| r.step == step) {
            Some(index) => &mut self.records[index],
            None => {
                self.records
                    .push(StepRecord::new(step, StepStatus::Failed, 0.0));
                self.records.last_mut().expect("just pushed")
            }
        };
        record.status = StepStatus::Failed;
        record.failures.push(failure);
    }

    /// Records that `step` did not run, and why.
    pub fn skip(&mut self, step: Step, because: impl Into<String>) {
        let because = because.into();
        diag!("dirq report: skipped {}: {because}", step.title());
        let mut record = StepRecord::new(step, StepStatus::Skipped, 0.0);
        record.skipped_because = Some(because);
        self.records.push(record);
    }

    /// Every step that failed so far.
    pub fn failed(&self) -> impl Iterator<Item = &StepRecord> {
        self.records
            .iter()
            .filter(|r| r.status == StepStatus::Failed)
    }

    /// Runs one step with a bar of `items` units of work; `work` advances it.
    pub fn run<T>(&mut self, step: Step, items: u64, work: impl FnOnce(&ProgressBar) -> T) -> T {
        let name = step.title();
        diag!("dirq report: {name} ...");
        let bar = ProgressBar::new(items);
        bar.set_style(
            ProgressStyle::with_template("  [{bar:32}] {pos}/{len} {msg} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        let started = Instant::now();
        let result = work(&bar);
        bar.finish_and_clear();
        let wall_s = started.elapsed().as_secs_f64();
        // Whether it succeeded is the caller's to say (`fail`).
        diag!("dirq report: {name}: finished in {wall_s:.1} s");
        self.records
            .push(StepRecord::new(step, StepStatus::Ok, wall_s));
        result
    }

    pub fn finish(self) -> Vec<StepRecord> {
        self.records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(what: &str) -> StepFailure {
        StepFailure {
            configuration: what.into(),
            reason: "the guest hung".into(),
            command: Some(format!("dirq run {what}")),
        }
    }

    #[test]
    fn a_failure_marks_the_step_that_ran_and_a_skip_says_why() {
        let mut steps = Steps::new();
        steps.run(Step::Probe, 1, |_| ());
        steps.run(Step::RealBenchmarks, 1, |_| ());
        steps.fail(Step::RealBenchmarks, failure("timer-latency"));
        steps.skip(Step::ModelChecks, "no calibration");
        let failed: Vec<Step> = steps.failed().map(|r| r.step).collect();
        assert_eq!(failed, [Step::RealBenchmarks]);
        let records = steps.finish();
        let statuses: Vec<StepStatus> = records.iter().map(|r| r.status).collect();
        assert_eq!(
            statuses,
            [StepStatus::Ok, StepStatus::Failed, StepStatus::Skipped]
        );
        let json = serde_json::to_value(&records).expect("serializes");
        assert_eq!(json[1]["status"], "failed");
        assert_eq!(json[1]["failures"][0]["command"], "dirq run timer-latency");
        assert_eq!(json[2]["skipped_because"], "no calibration");
        assert_eq!(json[0]["step"], "probe");
        assert_eq!(
            failure("timer-latency").line(),
            "timer-latency (`dirq run timer-latency`): the guest hung"
        );
    }

    #[test]
    fn a_step_that_fails_before_it_ran_still_gets_a_record() {
        let mut steps = Steps::new();
        steps.fail(Step::Calibrate, failure("calibrate"));
        let records = steps.finish();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].status, StepStatus::Failed);
    }
}
