//! The report's data model. This tree, serialized, is `DIR/data.json`; the
//! HTML page is rendered from the same tree, so every figure and table on the
//! page has its numbers in the JSON.

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

/// Everything `dirq report` learned, figures included.
#[derive(Debug, Clone, Serialize)]
pub struct ReportData {
    pub dirq_version: String,
    pub depth: Depth,
    /// Seconds since the Unix epoch when the report was started.
    pub started_unix_s: u64,
    pub kvm: KvmStatus,
    /// What the reader must know before trusting the numbers: skipped steps,
    /// failed runs, model misses. Shown at the top of the page.
    pub notes: Vec<String>,
    /// Wall time of each step, in the order they ran.
    pub steps: Vec<StepTiming>,
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

#[derive(Debug, Clone, Serialize)]
pub struct StepTiming {
    pub step: String,
    pub wall_s: f64,
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

/// A chart with the table of its numbers beside it.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// HTML anchor and key of this figure, unique in the report.
    pub id: String,
    pub title: String,
    /// What was run to make the figure (the equivalent commands).
    pub caption: String,
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
            Chart::Xy { series, .. } => series.iter().any(|s| !s.points.is_empty()),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct NamedValues {
    pub name: String,
    pub values: Vec<f64>,
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
}

#[derive(Debug, Clone, Serialize)]
pub struct Series {
    pub name: String,
    pub style: SeriesStyle,
    /// `[x, y]` pairs.
    pub points: Vec<[f64; 2]>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SeriesStyle {
    Line,
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
    /// Highlighted: a model prediction that missed its target, a failed run.
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
