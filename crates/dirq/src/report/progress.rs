//! Step lines and progress bars for long work. Step lines always go to
//! stderr; the bars draw only when stderr is a terminal (indicatif hides
//! them otherwise), so logs stay readable.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use super::data::StepTiming;

/// Shows what `bar` works on now: in the bar on a terminal, as a line on
/// stderr otherwise (where indicatif draws nothing), so a log shows
/// progress too.
pub fn working_on(bar: &ProgressBar, what: impl Into<String>) {
    let what = what.into();
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!("  {what} ...");
    }
    bar.set_message(what);
}

pub struct Steps {
    timings: Vec<StepTiming>,
    /// "<step>: <reason>", one per failure, in order.
    failures: Vec<String>,
}

impl Steps {
    pub fn new() -> Self {
        Self {
            timings: Vec::new(),
            failures: Vec::new(),
        }
    }

    /// Records that (part of) `step` failed, and says so on the terminal at once.
    pub fn fail(&mut self, step: &str, reason: &str) {
        eprintln!("dirq report: FAILED {step}: {reason}");
        self.failures.push(format!("{step}: {reason}"));
    }

    /// Every failure recorded so far.
    pub fn failures(&self) -> &[String] {
        &self.failures
    }

    /// Runs one step with a bar of `items` units of work; `work` advances it.
    pub fn run<T>(&mut self, name: &str, items: u64, work: impl FnOnce(&ProgressBar) -> T) -> T {
        eprintln!("dirq report: {name} ...");
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
        eprintln!("dirq report: {name}: finished in {wall_s:.1} s");
        self.timings.push(StepTiming {
            step: name.to_string(),
            wall_s,
        });
        result
    }

    pub fn finish(self) -> Vec<StepTiming> {
        self.timings
    }
}
