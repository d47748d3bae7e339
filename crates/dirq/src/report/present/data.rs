//! The report's data model. This tree, serialized, is `DIR/data.json`; the
//! HTML page is rendered from the same tree, so every figure and table on the
//! page has its numbers in the JSON.

use dirq_stats::f64_of;
use serde::Serialize;

use dirq_sim::design::DesignKind;
use dirq_sim::metrics::ThroughputUnit;
use dirq_vmm::exits::VmxExit;

use crate::common::format::{format_percent, format_value};
use crate::common::plan::Depth;
use crate::common::progress::StepRecord;
pub use crate::common::spread::Spread;
use dirq_vmm::host_load::{HostLoad, HostNoise};

/// What a series stands for, which decides its colour: a design, an exit
/// reason and a real delivery path keep one colour in every figure, each
/// from a palette of its own; several runs of one design take shades of
/// its colour; the real run is dark grey and the model's vanilla twin as
/// this host counts a grey of its own; anything else (an idle mode, a
/// VIOAPIC level, a latency bucket: ordered things) takes a ramp by its
/// place in the figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "of", rename_all = "snake_case")]
pub enum SeriesKey {
    Measured,
    /// The model's prediction of the measured quantity (its twin).
    Twin,
    Design(DesignKind),
    /// Run `run` of `runs` of one design in one figure.
    DesignRun {
        design: DesignKind,
        run: u8,
        runs: u8,
    },
    Exit(VmxExit),
    /// A real interrupt path, by its place in the report's plan.
    Path(u8),
    /// A reference line (a tolerance band), not data.
    Guide,
    Variant,
}

impl SeriesKey {
    /// Run `index` of `count` of `design` in one figure: the design's
    /// colour, in shades where it has several.
    pub fn shade(design: DesignKind, index: usize, count: usize) -> SeriesKey {
        if count <= 1 {
            return SeriesKey::Design(design);
        }
        let small = |n: usize| u8::try_from(n).unwrap_or(u8::MAX);
        SeriesKey::DesignRun {
            design,
            run: small(index),
            runs: small(count),
        }
    }
}

/// Everything `dirq report` learned, figures included. data.json is this
/// tree after the metadata (`common::meta::Meta`).
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
    /// The KVM backend (`kvm_pvm`, `kvm_intel`, `kvm_amd`): as the probe's
    /// KVM named it, else the loaded module; none without either.
    pub backend: Option<String>,
}

/// One heading of the report with its figures and free-standing tables.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Section {
    /// HTML anchor, unique in the report.
    pub id: String,
    pub title: String,
    /// Paragraphs of plain text shown under the heading.
    pub intro: Vec<String>,
    /// What the section's results were given (a scenario's inputs), shown
    /// beside the numbers of its first figure.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub given: Vec<Given>,
    pub figures: Vec<Figure>,
    pub tables: Vec<Table>,
}

/// One input of a section's results: what it is, and its value in words.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Given {
    pub what: String,
    pub value: String,
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
    /// Folded away under its title: a figure that does not carry its
    /// section's point.
    pub folded: bool,
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

/// A table whose cells keep their numbers: a number's cell has its value
/// and unit beside the text the page shows.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Table {
    /// Shown above a free-standing table; empty beside a figure.
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<TableRow>,
    /// A free-standing table folded away under its title: reference
    /// numbers, not the point.
    pub folded: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct TableRow {
    pub cells: Vec<Cell>,
    /// Highlighted: a model prediction that missed its target, a failed run,
    /// a value that cannot be true.
    pub flagged: bool,
}

impl TableRow {
    pub fn new(cells: Vec<impl Into<Cell>>) -> Self {
        Self::flagged(cells, false)
    }

    pub fn flagged(cells: Vec<impl Into<Cell>>, flagged: bool) -> Self {
        Self {
            cells: cells.into_iter().map(Into::into).collect(),
            flagged,
        }
    }
}

/// What a number in a table measures, which decides how the page prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// A count, or a ratio of counts (exits per interrupt): three
    /// significant digits.
    Count,
    /// Microseconds, three significant digits.
    Us,
    /// Nanoseconds, three significant digits.
    Ns,
    /// How many times another value of the same kind ("1.50x").
    Times,
    /// A share of a whole (0 to 1), printed as a percentage.
    Fraction,
    /// A relative change (0.05 is 5% more), printed signed.
    Change,
    /// Host CPU cores kept busy.
    Cores,
    /// Wall-clock seconds, to the hundredth.
    Seconds,
    /// A workload's throughput in its own unit, named as people read it
    /// ("packets/s").
    #[serde(untagged)]
    Throughput(ThroughputUnit),
}

impl Unit {
    pub fn format(self, value: f64) -> String {
        match self {
            Unit::Count | Unit::Us | Unit::Ns => format_value(value),
            Unit::Times => format!("{value:.2}x"),
            Unit::Fraction => format_percent(value),
            Unit::Change => format!("{:+.1}%", value * 100.0),
            Unit::Cores | Unit::Seconds => format!("{value:.2}"),
            Unit::Throughput(unit) => format!("{} {unit}", format_value(value)),
        }
    }
}

/// One table cell: the text the page shows and, for a number, the number
/// and its unit, so data.json carries numbers, not only their text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    pub text: String,
    /// In `unit`; absent in a cell of words or one with nothing measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<Unit>,
    /// The runs `value` is the median of, in `unit`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spread: Option<Spread>,
}

impl Cell {
    /// Words, or a number only its text can say ("1.5x", "n/a").
    pub fn text(text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            value: None,
            unit: None,
            spread: None,
        }
    }

    pub fn number(value: f64, unit: Unit) -> Cell {
        Cell {
            text: unit.format(value),
            value: Some(value),
            unit: Some(unit),
            spread: None,
        }
    }

    /// A count, printed whole (past u64, the largest u64).
    pub fn count(count: impl TryInto<u64>) -> Cell {
        let count: u64 = count.try_into().unwrap_or(u64::MAX);
        Cell {
            text: count.to_string(),
            value: Some(f64_of(count)),
            unit: Some(Unit::Count),
            spread: None,
        }
    }

    /// The same number, printed as the tool whose output the table
    /// copies prints it (perf's "0.53us").
    pub fn shown_as(self, text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            ..self
        }
    }

    /// A number if there is one, "-" if not.
    pub fn maybe(value: Option<f64>, unit: Unit) -> Cell {
        value.map_or_else(|| Cell::text("-"), |value| Cell::number(value, unit))
    }

    /// The median and range of repeated runs, "41.2K (39.8K-44.0K)";
    /// "-" when nothing was measured.
    pub fn spread(spread: Option<Spread>, unit: Unit) -> Cell {
        match spread {
            Some(spread) => Cell {
                text: spread.text(|value| unit.format(value)),
                value: Some(spread.median),
                unit: Some(unit),
                spread: Some(spread),
            },
            None => Cell::text("-"),
        }
    }
}

impl From<String> for Cell {
    fn from(text: String) -> Cell {
        Cell::text(text)
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Cell {
        Cell::text(text)
    }
}

/// Tests and the renderer read a cell as the page shows it.
impl PartialEq<&str> for Cell {
    fn eq(&self, text: &&str) -> bool {
        self.text == *text
    }
}

impl PartialEq<str> for Cell {
    fn eq(&self, text: &str) -> bool {
        self.text == text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_s_cell_carries_its_value_and_unit_into_data_json() {
        let spread = Spread::of([2.0, 3.0, 2.5]).expect("values");
        let cell = Cell::spread(Some(spread), Unit::Us);
        assert_eq!(cell, "2.50 (2.00\u{2013}3.00)");
        let json = serde_json::to_value(&cell).expect("serializes");
        assert_eq!(json["value"], 2.5);
        assert_eq!(json["unit"], "us");
        assert_eq!(json["spread"]["runs"], 3);
        assert_eq!(Cell::number(0.125, Unit::Fraction), "12.50%");
        assert_eq!(Cell::number(-0.5, Unit::Change), "-50.0%");
        assert_eq!(Cell::count(1234), "1234");
        assert_eq!(Cell::number(1.5, Unit::Times), "1.50x");
        // A throughput keeps its own unit's name, as a string like the others.
        let packets = Cell::number(99_800.0, Unit::Throughput(ThroughputUnit::PacketsPerS));
        assert_eq!(packets, "99.8K packets/s");
        let json = serde_json::to_value(&packets).expect("serializes");
        assert_eq!(json["unit"], "packets/s");
        assert_eq!(json["value"], 99_800.0);
        let shown = Cell::number(530.0, Unit::Ns).shown_as("0.53us");
        assert_eq!((shown.text.as_str(), shown.value), ("0.53us", Some(530.0)));
        assert_eq!(Cell::maybe(None, Unit::Us), "-");
        // Words, and a measurement that is missing, have text only.
        for cell in [Cell::text("vanilla"), Cell::spread(None, Unit::Count)] {
            let json = serde_json::to_value(&cell).expect("serializes");
            assert_eq!(json, serde_json::json!({"text": cell.text}));
        }
    }
}
