//! The first stage of `dirq report`: everything that runs something (the
//! real benchmarks on /dev/kvm, their traces, the simulated twins and the
//! built-in scenarios) and the collected data the later stages read.

#[cfg(test)]
pub mod fixtures;
pub mod plan;
pub mod real;
pub mod real_trace;
pub mod simulate;
pub mod spread;
pub mod twins;
pub mod views;

use serde::Serialize;

/// How much `dirq report` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Depth {
    /// Tiny counts, a few scenarios: for the test suite only.
    Smoke,
    /// A subset of benches and scenarios with small counts (under 3 minutes).
    Quick,
    /// Everything with the default counts (under 15 minutes).
    Full,
}

impl Depth {
    /// How many times each real measurement runs: enough at full depth to
    /// show how much a result moves between runs.
    pub fn repeats(self) -> usize {
        match self {
            Depth::Smoke | Depth::Quick => 1,
            Depth::Full => 3,
        }
    }
}
