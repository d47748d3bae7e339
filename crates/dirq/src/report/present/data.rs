//! The report's data model. This tree, serialized, is `DIR/data.json`; the
//! HTML page is rendered from the same tree, so every figure and table on the
//! page has its numbers in the JSON.

use serde::Serialize;

use dirq_sim::policy::PolicyKind;
use dirq_vmm::exits::VmxExit;

pub use crate::report::collect::spread::Spread;
use crate::report::collect::Depth;
use crate::report::progress::StepRecord;
use dirq_vmm::host_load::{HostLoad, HostNoise};

/// What a series stands for, which decides its colour: a design and an
/// exit reason keep one colour in every figure, from palettes of their
/// own; the real run is dark grey; anything else (a delivery path, an idle
/// mode, a VIOAPIC level, a latency bucket) takes a third palette by its
/// place in the figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "of", rename_all = "snake_case")]
pub enum SeriesKey {
    Measured,
    Design(PolicyKind),
    Exit(VmxExit),
    Variant,
}

impl SeriesKey {
    /// The key of an exit reason named by its VMX name.
    pub fn exit(name: &str) -> SeriesKey {
        VmxExit::from_name(name).map_or(SeriesKey::Variant, SeriesKey::Exit)
    }
}

/// Everything `dirq report` learned, figures included. data.json is this
/// tree after the metadata (`report::meta::Meta`).
#[derive(Debug, Clone, Serialize)]
pub struct ReportData {
    pub depth: Depth,
    /// Times each real measurement ran; tables show the median and range.
    pub repeats: usize,
    pub kvm: KvmStatus,
    /// What the reader must know before trusting the numbers: skipped steps,
    /// failed runs, model misses. Shown at the top of the page.
    pub notes: Vec<String>,
    /// Each step in the order it ran: its status, wall time and failures.
    pub steps: Vec<StepRecord>,
    /// How busy the host was while the report ran; absent until it ends.
    pub host_load: Option<HostLoad>,
    /// Whether the timings can be taken as this host's (the load over the
    /// report, the probe's floor spreads); a noisy verdict heads the page.
    pub host_noise: HostNoise,
    pub sections: Vec<Section>,
    /// The raw results behind the sections, as each tool printed them.
    pub raw: serde_json::Map<String, serde_json::Value>,
}

/// Whether the real half (KVM) could run.
#[derive(Debug, Clone, Serialize)]
pub struct KvmStatus {
    pub available: bool,
    /// Why it is missing, or what backend answered.
    pub detail: String,
}

/// One heading of the report with its figures and free-standing tables.
#[derive(Debug, Clone, Serialize)]
pub struct Section {
    /// HTML anchor, unique in the report.
    pub id: String,
    pub title: String,
    /// Paragraphs of plain text shown under the heading.
    pub intro: Vec<String>,
    pub figures: Vec<Figure>,
    pub tables: Vec<Table>,
}

/// A chart with the table of its numbers below it.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// HTML anchor and key of this figure, unique in the report.
    pub id: String,
    pub title: String,
    /// How to read the figure.
    pub caption: String,
    /// The commands that made it, each of which repeats one of its runs.
    pub commands: Vec<String>,
    pub chart: Chart,
    pub table: Table,
}

/// What a figure draws. Both kinds keep their numbers, not pixels.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Chart {
    /// Horizontal bars, one per category, each split into stacked segments.
    Bars {
        value_label: String,
        categories: Vec<String>,
        /// One entry per segment kind; `values[i]` belongs to `categories[i]`.
        stacks: Vec<NamedValues>,
    },
    /// Horizontal bars grouped by category, one bar per series, each the
    /// median of its runs with a whisker over their range.
    Grouped {
        value_axis: Axis,
        categories: Vec<String>,
        series: Vec<GroupedSeries>,
    },
    /// Lines or points on two numeric axes.
    Xy {
        x_axis: Axis,
        y_axis: Axis,
        series: Vec<Series>,
        /// Draw y = x (measured against predicted).
        identity_line: bool,
    },
}

impl Chart {
    /// Whether the chart has at least one number to draw.
    pub fn has_data(&self) -> bool {
        match self {
            Chart::Bars {
                categories, stacks, ..
            } => !categories.is_empty() && stacks.iter().any(|s| !s.values.is_empty()),
            Chart::Grouped {
                categories, series, ..
            } => {
                !categories.is_empty()
                    && series.iter().any(|s| s.values.iter().any(Option::is_some))
            }
            Chart::Xy { series, .. } => series.iter().any(|s| !s.points.is_empty()),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct NamedValues {
    pub name: String,
    /// What the segment stands for: its colour.
    pub key: SeriesKey,
    pub values: Vec<f64>,
}

/// One series of a grouped chart: `values[i]` belongs to `categories[i]`.
#[derive(Debug, Clone, Serialize)]
pub struct GroupedSeries {
    pub name: String,
    /// What the series stands for: its colour.
    pub key: SeriesKey,
    pub values: Vec<Option<Spread>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Axis {
    pub label: String,
    pub scale: Scale,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scale {
    Linear,
    /// Base-10 logarithmic; non-positive values are not drawn.
    Log,
    /// Percentiles as fractions, drawn at log10(1 / (1 - p)) as
    /// HdrHistogram plots them: 50%, 90%, 99%, 99.9% equally spaced.
    Percentile,
}

#[derive(Debug, Clone, Serialize)]
pub struct Series {
    pub name: String,
    /// What the series stands for: its colour.
    pub key: SeriesKey,
    pub style: SeriesStyle,
    /// `[x, y]` pairs.
    pub points: Vec<[f64; 2]>,
    /// `[low, high]` of y over repeated runs, one per point, drawn as a
    /// whisker; empty when the points were measured once.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub y_ranges: Vec<[f64; 2]>,
}

impl Series {
    pub fn new(name: impl Into<String>, style: SeriesStyle, points: Vec<[f64; 2]>) -> Self {
        Series {
            name: name.into(),
            key: SeriesKey::Variant,
            style,
            points,
            y_ranges: Vec::new(),
        }
    }

    /// The same series standing for `key`.
    pub fn keyed(self, key: SeriesKey) -> Self {
        Series { key, ..self }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SeriesStyle {
    Line,
    /// A step line: a cumulative distribution.
    Steps,
    Points,
}

/// A table of preformatted cells; the numbers themselves are in the chart or
/// in `raw`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Table {
    /// Shown above a free-standing table; empty beside a figure.
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<TableRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TableRow {
    pub cells: Vec<String>,
    /// Highlighted: a model prediction that missed its target, a failed run,
    /// a value that cannot be true.
    pub flagged: bool,
}

impl TableRow {
    pub fn new(cells: Vec<String>) -> Self {
        Self {
            cells,
            flagged: false,
        }
    }

    pub fn flagged(cells: Vec<String>, flagged: bool) -> Self {
        Self { cells, flagged }
    }
}
