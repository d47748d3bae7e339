//! A scenario's own figure: what `dirq report` draws to carry the
//! scenario's point and, for a scenario that reproduces a published
//! experiment, which published figure or table that is and what of it is
//! fitted rather than predicted. The simulator only keeps it as written;
//! the report reads it, so that no scenario is named in the report's code.
//!
//! ```toml
//! [figure]
//! draw = "exits-by-reason"
//! title = "Exits per second by VMX reason, per packet rate and design"
//! paper = "DID (Tu et al., VEE 2015): the UDP receive calibration table"
//! fitted = "vanilla's column: the did-2015 profile's fitted values were fitted to it"
//! fitted_runs = ["vanilla"]
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How the report draws a scenario's figure, each from the runs' results.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FigureKind {
    /// Stacked bars of exits per second by VMX reason, one per run; its
    /// table adds the time in guest.
    ExitsByReason,
    /// Time in guest against the rate, a line per design (bars per run
    /// at a single rate).
    TimeInGuest,
    /// The workload's throughput against the swept or rate parameter, a
    /// line per design (bars per run without one).
    Throughput,
    /// The latency distributions: a percentile plot, or p50 against the
    /// swept parameter where the runs are many.
    Latency,
    /// Each design's share of its latency samples per bucket.
    LatencyDensity,
    /// Throughput as a share of the same workload's bare metal.
    ShareOfBare,
    /// Calls per setup-latency bucket, stacked per run.
    SetupBuckets,
    /// Host cycles per interrupt per VIOAPIC level.
    CyclesPerLevel,
    /// Total time and CPU burned per target and idle mode.
    TimeAndCpu,
    /// Exits per interrupt each design leaves, by interrupt kind and reason.
    ExitsLeft,
}

/// A scenario's `[figure]` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFigure {
    pub draw: FigureKind,
    /// What the figure shows, as its title.
    pub title: String,
    /// The published figure or table the scenario reproduces, as cited;
    /// none for a scenario of the project's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paper: Option<String>,
    /// What of the figure is fitted rather than predicted, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fitted: Option<String>,
    /// The runs that are fitted points: a run is one when the parts of its
    /// label (its design, the values of the parameters that vary) include
    /// every part of one entry ("vanilla", "userspace").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fitted_runs: Vec<String>,
    /// The paper's names for runs: a run whose label parts include every
    /// part of a key ("vanilla · pv") is named by its value ("PV"), its
    /// other parts kept.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub names: BTreeMap<String, String>,
    /// Parameters that mark runs outside the published figure (a sweep
    /// the scenario adds beside it): such runs are left out of it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leaves_out: Vec<String>,
}
