//! The software-only studies of mechanisms.md sections 6-8, measured for
//! real: each module runs its benchmark in every mode and returns one
//! side-by-side table (`Display` for people, serde for the report).

use std::collections::BTreeMap;

use dirq_stats::f64_of;
use serde::{Deserialize, Serialize};

use crate::config::{Bench, BenchConfig, BenchParams, CommonSettings, GuestExec};
use crate::exits::VmxExit;
use crate::report::RunReport;

pub mod halt;
pub mod io_batch;
pub mod tick;
pub mod vioapic;

/// How long a comparison runs: `Quick` for tests and `dirq report --quick`,
/// `Full` for the benchmark command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scale {
    Quick,
    Full,
}

/// How a comparison runs: its length, and how the guest executes
/// (`None`: the host's default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    pub scale: Scale,
    pub guest_exec: Option<GuestExec>,
}

impl Settings {
    /// `bench`'s shared defaults, executing as these settings say.
    pub fn common(self, bench: Bench) -> CommonSettings {
        CommonSettings {
            guest_exec: self.guest_exec,
            ..CommonSettings::new(bench)
        }
    }

    /// A run of `params` with its bench's shared defaults, executing as
    /// these settings say.
    pub fn config(self, params: BenchParams) -> BenchConfig {
        BenchConfig {
            common: self.common(params.bench()),
            params,
        }
    }

    /// `quick` or `full`, by the scale.
    pub fn pick(self, quick: u64, full: u64) -> u64 {
        match self.scale {
            Scale::Quick => quick,
            Scale::Full => full,
        }
    }
}

/// One run per compared value, in order; the first that fails ends the
/// comparison.
fn run_each<T: Copy>(
    compared: &[T],
    config: impl Fn(T) -> BenchConfig,
) -> Result<Vec<RunReport>, crate::bench::BenchError> {
    compared
        .iter()
        .map(|&value| crate::bench::run(&config(value)))
        .collect()
}

/// The exits of `run` by KVM category, per interrupt it delivered.
pub fn per_interrupt_by_category(run: &RunReport) -> BTreeMap<VmxExit, f64> {
    let interrupts = f64_of(run.interrupts.max(1));
    run.exits
        .by_category
        .iter()
        .map(|(&reason, count)| (reason, f64_of(*count) / interrupts))
        .collect()
}
