//! SVG rendering of the report's charts (plotters, SVG backend). The SVG is
//! returned as a string so the HTML page can inline it.

use anyhow::{ensure, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use dirq_sim::design::DesignKind;
use dirq_stats::round_u64;
use dirq_vmm::exits::VmxExit;

use crate::common::format::compact_number;
use crate::report::present::data::{
    Axis, Chart, GroupedSeries, NamedValues, Scale, Series, SeriesKey, SeriesStyle,
};

const WIDTH: u32 = 880;
const XY_HEIGHT: u32 = 420;
const BAR_HEIGHT_PX: u32 = 26;
/// Height of one bar of a grouped chart.
const GROUPED_BAR_PX: u32 = 12;
const FONT: &str = "sans-serif";
const FONT_PX: u32 = 13;
/// A generous width of one character at 13 px, so labels are never cut.
const CHAR_PX: u32 = 8;
const LEGEND_ROW_PX: u32 = 18;

/// The real run, beside the designs' predictions.
const MEASURED_COLOUR: RGBColor = RGBColor(50, 50, 50);

/// The model's twin of the real run as this host counts: a lighter grey,
/// never the measurement's.
const TWIN_COLOUR: RGBColor = RGBColor(160, 160, 160);

/// Reference lines (a tolerance band): light, never data's.
const GUIDE_COLOUR: RGBColor = RGBColor(205, 205, 205);

/// The real interrupt paths' palette (Okabe and Ito's), by the path's
/// place in the report's plan: userspace, split, kernel, kernel + irqfd,
/// kernel + irqfd + PV EOI, then the rest.
const PATH_PALETTE: [RGBColor; 8] = [
    RGBColor(213, 94, 0),
    RGBColor(230, 159, 0),
    RGBColor(0, 114, 178),
    RGBColor(86, 180, 233),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(240, 228, 66),
    RGBColor(102, 51, 0),
];

/// Run `run` of `runs` of one design: its colour from darker to lighter.
fn design_shade(design: DesignKind, run: u8, runs: u8) -> RGBColor {
    let base = design_colour(design);
    let at = if runs <= 1 {
        0.0
    } else {
        -0.4 + 0.9 * f64::from(run) / f64::from(runs - 1)
    };
    let (toward, share) = if at < 0.0 { (0.0, -at) } else { (255.0, at) };
    let mix = |c: u8| {
        let mixed = f64::from(c) + (toward - f64::from(c)) * share;
        u8::try_from(round_u64(mixed.clamp(0.0, 255.0))).unwrap_or(u8::MAX)
    };
    RGBColor(mix(base.0), mix(base.1), mix(base.2))
}

/// Each design's colour, the same in every figure (Tableau 10's saturated
/// hues for the studies' designs, darker ones for today's hardware).
fn design_colour(design: DesignKind) -> RGBColor {
    match design {
        DesignKind::Bare => RGBColor(89, 161, 79),
        DesignKind::Vanilla => RGBColor(78, 121, 167),
        DesignKind::Apicv => RGBColor(118, 183, 178),
        DesignKind::ApicvPi => RGBColor(44, 62, 80),
        DesignKind::ApicvPiIpiv => RGBColor(0, 128, 128),
        DesignKind::Avic => RGBColor(148, 103, 189),
        DesignKind::EliDelivery => RGBColor(237, 201, 72),
        DesignKind::Eli => RGBColor(242, 142, 43),
        DesignKind::Did => RGBColor(225, 87, 89),
        DesignKind::NaiveDirectEoi => RGBColor(176, 122, 161),
    }
}

/// Each exit reason's colour: lighter or other hues than the designs', so
/// that an exit reason never passes for a design; the most common reasons
/// (external interrupt, MSR write, interrupt window, HLT) have the hues no
/// design has.
fn exit_colour(exit: VmxExit) -> RGBColor {
    match exit {
        VmxExit::ExternalInterrupt => RGBColor(23, 190, 207),
        VmxExit::MsrWrite => RGBColor(156, 117, 95),
        VmxExit::InterruptWindow => RGBColor(188, 189, 34),
        VmxExit::Hlt => RGBColor(250, 191, 210),
        VmxExit::Other => RGBColor(186, 176, 172),
        VmxExit::IoInstruction => RGBColor(160, 203, 232),
        VmxExit::MsrRead => RGBColor(215, 181, 166),
        VmxExit::EptMisconfig => RGBColor(140, 209, 125),
        VmxExit::ApicAccess => RGBColor(212, 166, 200),
        VmxExit::EoiInduced => RGBColor(134, 188, 182),
        VmxExit::EptViolation => RGBColor(255, 157, 154),
        VmxExit::Vmcall => RGBColor(241, 206, 99),
        VmxExit::NmiWindow => RGBColor(127, 127, 127),
        VmxExit::ExceptionNmi => RGBColor(255, 190, 125),
    }
}

/// Viridis from dark purple to green (its pale yellow end is left out):
/// anchors at even steps, for names that are neither designs nor exit
/// reasons and often ordered (paths, idle modes, levels, buckets).
const VARIANT_RAMP: [RGBColor; 6] = [
    RGBColor(68, 1, 84),
    RGBColor(65, 68, 135),
    RGBColor(42, 120, 142),
    RGBColor(34, 168, 132),
    RGBColor(122, 209, 81),
    RGBColor(189, 223, 38),
];

/// The colour of variant `index` of `count`, spread over the whole ramp.
fn variant_colour(index: usize, count: usize) -> RGBColor {
    let last = VARIANT_RAMP.len() - 1;
    let position = if count <= 1 {
        0.0
    } else {
        coordinate(index) / coordinate(count - 1) * coordinate(last)
    };
    let anchor = |at: f64| {
        let index = usize::try_from(round_u64(at)).unwrap_or(last);
        VARIANT_RAMP[index.min(last)]
    };
    let (low, high) = (anchor(position.floor()), anchor(position.ceil()));
    let t = position - position.floor();
    let mix = |a: u8, b: u8| {
        let mixed = f64::from(a) + (f64::from(b) - f64::from(a)) * t;
        u8::try_from(round_u64(mixed.clamp(0.0, 255.0))).unwrap_or(u8::MAX)
    };
    RGBColor(mix(low.0, high.0), mix(low.1, high.1), mix(low.2, high.2))
}

/// Colours for one chart's series, chosen by what each stands for.
fn colours(keys: &[SeriesKey]) -> Vec<RGBColor> {
    let variants = keys.iter().filter(|k| **k == SeriesKey::Variant).count();
    let mut next_variant = 0;
    keys.iter()
        .map(|key| match key {
            SeriesKey::Measured => MEASURED_COLOUR,
            SeriesKey::Twin => TWIN_COLOUR,
            SeriesKey::Design(design) => design_colour(*design),
            SeriesKey::DesignRun { design, run, runs } => design_shade(*design, *run, *runs),
            SeriesKey::Exit(exit) => exit_colour(*exit),
            SeriesKey::Path(index) => PATH_PALETTE[usize::from(*index) % PATH_PALETTE.len()],
            SeriesKey::Guide => GUIDE_COLOUR,
            SeriesKey::Variant => {
                next_variant += 1;
                variant_colour(next_variant - 1, variants)
            }
        })
        .collect()
}

/// Shapes that show a tooltip (an SVG `<title>`) when hovered: drawn over
/// the chart, invisible, after plotters is done.
#[derive(Default)]
struct Tooltips {
    shapes: Vec<(Shape, String)>,
}

enum Shape {
    Rect { x: i32, y: i32, w: i32, h: i32 },
    Dot { x: i32, y: i32 },
}

impl Tooltips {
    fn rect(&mut self, (x0, y0): (i32, i32), (x1, y1): (i32, i32), text: String) {
        let (x, y) = (x0.min(x1), y0.min(y1));
        let (w, h) = ((x1 - x0).abs().max(2), (y1 - y0).abs().max(2));
        self.shapes.push((Shape::Rect { x, y, w, h }, text));
    }

    fn dot(&mut self, (x, y): (i32, i32), text: String) {
        self.shapes.push((Shape::Dot { x, y }, text));
    }

    /// The SVG with the tooltip shapes before its closing tag.
    fn into_svg(self, mut svg: String) -> String {
        let overlay = maud::html! {
            @for (shape, text) in &self.shapes {
                @match shape {
                    Shape::Rect { x, y, w, h } => rect x=(x) y=(y) width=(w) height=(h) fill="transparent" {
                        title { (text) }
                    },
                    Shape::Dot { x, y } => circle cx=(x) cy=(y) r="6" fill="transparent" {
                        title { (text) }
                    },
                }
            }
        };
        match svg.rfind("</svg>") {
            Some(end) => svg.insert_str(end, &overlay.into_string()),
            None => svg.push_str(&overlay.into_string()),
        }
        svg
    }
}

/// Renders a chart to a standalone `<svg>` element.
pub fn render_svg(chart: &Chart) -> Result<String> {
    ensure!(chart.has_data(), "chart has no data to draw");
    match chart {
        Chart::Bars {
            value_label,
            categories,
            stacks,
        } => render_bars(value_label, categories, stacks),
        Chart::Grouped {
            value_axis,
            categories,
            series,
        } => render_grouped(value_axis, categories, series),
        Chart::Xy {
            x_axis,
            y_axis,
            series,
            identity_line,
        } => render_xy(x_axis, y_axis, series, *identity_line),
    }
}

/// Legend rows for `names`: as many columns as the longest name allows.
fn legend_layout<'a>(names: impl Iterator<Item = &'a str>) -> (u32, u32) {
    let names: Vec<&str> = names.collect();
    let longest = px(names.iter().map(|n| n.chars().count()).max().unwrap_or(0));
    let column = longest * CHAR_PX + 30;
    let columns = ((WIDTH - 20) / column).clamp(1, 4);
    let rows = px(names.len()).div_ceil(columns);
    (columns, rows)
}

/// `count` characters, rows, bars or legend entries as a u32 for pixel
/// arithmetic; a chart has far fewer than 2^32 of anything (it saturates).
fn px(count: usize) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// A pixel length as plotters' signed backend coordinate (saturating).
fn signed(px: u32) -> i32 {
    i32::try_from(px).unwrap_or(i32::MAX)
}

/// The chart coordinate of row or bar `index` (exact: through [`px`]).
fn coordinate(index: usize) -> f64 {
    f64::from(px(index))
}

fn legend_height(rows: u32) -> u32 {
    10 + rows * LEGEND_ROW_PX
}

/// Width of the label column of horizontal bars: the longest label fits.
fn label_area(categories: &[String]) -> u32 {
    let longest = px(categories
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0));
    (longest * CHAR_PX + 12).clamp(40, WIDTH / 2)
}

/// A label shortened to fit `pixels`, with an ellipsis when cut.
fn fit(label: &str, pixels: u32) -> String {
    let room = (pixels.saturating_sub(12) / CHAR_PX) as usize;
    if label.chars().count() <= room {
        label.to_string()
    } else {
        let kept: String = label.chars().take(room.saturating_sub(1)).collect();
        format!("{kept}\u{2026}")
    }
}

type BarChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The frame every horizontal bar chart shares: the legend above, one row
/// per category named at its left, the value axis below; `draw_row` draws
/// the bars of one row (rows are y in `row..row + 1`, 0 at the top).
fn render_horizontal(
    value_axis: &Axis,
    x_range: std::ops::Range<f64>,
    categories: &[String],
    legend: &[(&str, RGBColor)],
    row_px: u32,
    mut draw_row: impl FnMut(&mut BarChart, usize, &mut Tooltips) -> Result<()>,
) -> Result<String> {
    let (columns, legend_rows) = legend_layout(legend.iter().map(|(name, _)| *name));
    let height = legend_height(legend_rows) + 60 + row_px * px(categories.len());
    let labels = label_area(categories);
    let rows = coordinate(categories.len());
    let mut tooltips = Tooltips::default();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let (legend_area, plot_area) = root.split_vertically(legend_height(legend_rows));
        draw_legend(&legend_area, columns, legend.iter().copied())?;
        // Rows are a plain numeric axis; the category names are drawn
        // beside it by hand, which works for any number of rows (plotters'
        // discrete axes drop the label of a single category).
        let mut chart = ChartBuilder::on(&plot_area)
            .margin_right(24)
            .margin_top(4)
            .x_label_area_size(44)
            .y_label_area_size(labels)
            .build_cartesian_2d(x_range.clone(), rows..0.0)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .light_line_style(RGBColor(240, 240, 240))
            .y_labels(0)
            .x_labels(label_count(value_axis, &x_range))
            .x_desc(axis_title(value_axis))
            .x_label_formatter(&|v| axis_label(value_axis, *v))
            .label_style((FONT, FONT_PX))
            .draw()?;
        let label_style =
            TextStyle::from((FONT, FONT_PX).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
        for (row, category) in categories.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(x_range.start, coordinate(row) + 0.5));
            root.draw(&Text::new(
                fit(category, labels),
                (x - 6, y),
                label_style.clone(),
            ))?;
            draw_row(&mut chart, row, &mut tooltips)?;
        }
        root.present()?;
    }
    Ok(tooltips.into_svg(svg))
}

/// Room right of the longest bar for its value label.
const LABEL_ROOM: f64 = 1.18;

/// A bar's value written just right of its end.
fn value_label(chart: &mut BarChart, at: (f64, f64), text: String) -> Result<()> {
    let style =
        TextStyle::from((FONT, FONT_PX).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    chart.draw_series(std::iter::once(
        EmptyElement::at(at) + Text::new(text, (4, 0), style),
    ))?;
    Ok(())
}

/// A bar of length zero is drawn: a dark mark on the axis.
fn zero_mark(chart: &mut BarChart, (top, bottom): (f64, f64)) -> Result<()> {
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(0.0, top), (0.0, bottom)],
        BLACK.stroke_width(3),
    )))?;
    Ok(())
}

/// Stacked horizontal bars from zero, one per category, a segment per
/// stack, each bar labelled with its total (a zero bar too).
fn render_bars(
    value_label_text: &str,
    categories: &[String],
    stacks: &[NamedValues],
) -> Result<String> {
    let value = |stack: &NamedValues, row: usize| -> f64 {
        stack
            .values
            .get(row)
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0)
            .unwrap_or(0.0)
    };
    let largest_total = (0..categories.len())
        .map(|row| stacks.iter().map(|stack| value(stack, row)).sum::<f64>())
        .fold(0.0, f64::max);
    let x_max = if largest_total > 0.0 {
        largest_total * LABEL_ROOM
    } else {
        1.0
    };
    let keys: Vec<SeriesKey> = stacks.iter().map(|s| s.key).collect();
    let palette = colours(&keys);
    let legend: Vec<(&str, RGBColor)> = stacks
        .iter()
        .map(|s| s.name.as_str())
        .zip(palette.iter().copied())
        .collect();
    let axis = Axis {
        label: value_label_text.to_string(),
        scale: Scale::Linear,
    };
    render_horizontal(
        &axis,
        0.0..x_max,
        categories,
        &legend,
        BAR_HEIGHT_PX,
        |chart, row, tooltips| {
            let top = coordinate(row);
            let mut start = 0.0;
            for (index, stack) in stacks.iter().enumerate() {
                let width = value(stack, row);
                if width <= 0.0 {
                    continue;
                }
                let corners = [(start, top + 0.15), (start + width, top + 0.85)];
                chart.draw_series(std::iter::once(Rectangle::new(
                    corners,
                    palette[index].filled(),
                )))?;
                tooltips.rect(
                    chart.backend_coord(&corners[0]),
                    chart.backend_coord(&corners[1]),
                    format!(
                        "{} · {}: {}",
                        categories[row],
                        stack.name,
                        compact_number(width)
                    ),
                );
                start += width;
            }
            if start <= 0.0 {
                zero_mark(chart, (top + 0.15, top + 0.85))?;
            }
            value_label(chart, (start, top + 0.5), compact_number(start))
        },
    )
}

/// Horizontal bars, one group per category and one bar per series, each
/// the median with a whisker from the smallest to the largest run.
fn render_grouped(
    value_axis: &Axis,
    categories: &[String],
    series: &[GroupedSeries],
) -> Result<String> {
    // A bar's length is its value: on a log axis it would mean nothing.
    ensure!(
        value_axis.scale == Scale::Linear,
        "bars are drawn from zero on a linear axis"
    );
    let bars = px(series.len().max(1));
    let (low, high) = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .flat_map(|spread| [spread.min, spread.max])
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    ensure!(low.is_finite(), "no value of the chart is a number");
    let x_min = low.min(0.0);
    let x_max = if high > x_min {
        x_min + (high - x_min) * LABEL_ROOM
    } else {
        x_min + 1.0
    };
    let keys: Vec<SeriesKey> = series.iter().map(|s| s.key).collect();
    let palette = colours(&keys);
    let legend: Vec<(&str, RGBColor)> = series
        .iter()
        .map(|s| s.name.as_str())
        .zip(palette.iter().copied())
        .collect();
    let slot = 0.9 / f64::from(bars);
    render_horizontal(
        value_axis,
        x_min..x_max,
        categories,
        &legend,
        GROUPED_BAR_PX * bars + 10,
        |chart, row, tooltips| {
            let top = coordinate(row) + 0.05;
            for (index, s) in series.iter().enumerate() {
                let Some(spread) = s.values.get(row).copied().flatten() else {
                    continue;
                };
                let end = spread.median;
                if !end.is_finite() {
                    continue;
                }
                let y0 = top + slot * coordinate(index);
                let corners = [(x_min, y0 + slot * 0.1), (end, y0 + slot * 0.9)];
                chart.draw_series(std::iter::once(Rectangle::new(
                    corners,
                    palette[index].filled(),
                )))?;
                if end == 0.0 {
                    zero_mark(chart, (y0 + slot * 0.1, y0 + slot * 0.9))?;
                }
                let (min, max) = (spread.min, spread.max);
                if spread.runs > 1 {
                    // A whisker with end caps, visible on a bar of any colour.
                    let middle = y0 + slot * 0.5;
                    let (cap_low, cap_high) = (y0 + slot * 0.2, y0 + slot * 0.8);
                    chart.draw_series(
                        [
                            vec![(min, middle), (max, middle)],
                            vec![(min, cap_low), (min, cap_high)],
                            vec![(max, cap_low), (max, cap_high)],
                        ]
                        .into_iter()
                        .map(|line| PathElement::new(line, BLACK.stroke_width(1))),
                    )?;
                }
                let range = if spread.runs > 1 {
                    format!(
                        " ({}\u{2013}{}, {} runs)",
                        compact_number(spread.min),
                        compact_number(spread.max),
                        spread.runs
                    )
                } else {
                    String::new()
                };
                tooltips.rect(
                    chart.backend_coord(&corners[0]),
                    chart.backend_coord(&corners[1]),
                    format!(
                        "{} · {}: {}{range}",
                        categories[row],
                        s.name,
                        compact_number(spread.median)
                    ),
                );
                let label_at = if spread.runs > 1 { end.max(max) } else { end };
                value_label(
                    chart,
                    (label_at, y0 + slot * 0.5),
                    compact_number(spread.median),
                )?;
            }
            Ok(())
        },
    )
}

/// A legend drawn above the plot in `columns` columns wide enough for the
/// longest name, so it never hides data or overprints itself.
fn draw_legend<'a, DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    columns: u32,
    entries: impl Iterator<Item = (&'a str, RGBColor)>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let column_width = signed((WIDTH - 20) / columns.max(1));
    let columns = signed(columns.max(1));
    for (index, (name, colour)) in entries.enumerate() {
        let index = i32::try_from(index).unwrap_or(i32::MAX);
        let x = 10 + (index % columns) * column_width;
        let y = 8 + (index / columns) * signed(LEGEND_ROW_PX);
        area.draw(&Rectangle::new([(x, y), (x + 12, y + 12)], colour.filled()))
            .map_err(|err| anyhow::anyhow!("{err}"))?;
        area.draw(&Text::new(name.to_string(), (x + 17, y), (FONT, FONT_PX)))
            .map_err(|err| anyhow::anyhow!("{err}"))?;
    }
    Ok(())
}

/// Maps a value onto an axis: log axes are drawn as linear axes over log10
/// of the value (one coordinate type for every chart); points that a log axis
/// cannot show are dropped.
fn to_axis(axis: &Axis, value: f64) -> Option<f64> {
    if !value.is_finite() {
        return None;
    }
    match axis.scale {
        Scale::Linear => Some(value),
        Scale::Log if value > 0.0 => Some(value.log10()),
        Scale::Percentile if (0.0..1.0).contains(&value) => Some(-(1.0 - value).log10()),
        Scale::Log | Scale::Percentile => None,
    }
}

fn axis_label(axis: &Axis, coordinate: f64) -> String {
    match axis.scale {
        Scale::Linear => compact_number(coordinate),
        Scale::Log => compact_number(10f64.powf(coordinate)),
        Scale::Percentile => percent_text(1.0 - 10f64.powf(-coordinate)),
    }
}

/// A value as a tooltip says it: a percentile as a percentage.
fn value_text(axis: &Axis, value: f64) -> String {
    match axis.scale {
        Scale::Percentile => percent_text(value),
        Scale::Linear | Scale::Log => compact_number(value),
    }
}

/// 0.999 -> "99.9%": as many nines as the percentile has.
fn percent_text(fraction: f64) -> String {
    let percent = fraction * 100.0;
    let text = format!("{percent:.4}");
    let trimmed = text.trim_end_matches('0').trim_end_matches('.');
    format!("{trimmed}%")
}

/// An axis's title, saying when it is not linear.
fn axis_title(axis: &Axis) -> String {
    match axis.scale {
        Scale::Linear => axis.label.clone(),
        Scale::Log => format!("{} (log scale)", axis.label),
        Scale::Percentile => format!("{} (log scale of 1/(1 - percentile))", axis.label),
    }
}

/// The percentiles a percentile axis marks within `range` (axis
/// coordinates): 0%, 50%, then 90%, 99%, 99.9%, ... one per decade.
fn percentile_ticks(range: &std::ops::Range<f64>) -> Vec<f64> {
    let nines = (1..=9).map(|decade| 1.0 - 10f64.powi(-decade));
    [0.0, 0.5]
        .into_iter()
        .chain(nines)
        .filter_map(|p| {
            let at = -(1.0_f64 - p).log10();
            (range.start..=range.end).contains(&at).then_some(at)
        })
        .collect()
}

/// How many ticks to ask for: on a log axis about one per decade, so the
/// ticks land on round powers of ten whenever the range spans a few decades.
fn label_count(axis: &Axis, range: &std::ops::Range<f64>) -> usize {
    match axis.scale {
        Scale::Linear => 8,
        // Drawn by hand at 50%, 90%, 99%, ... (`percentile_ticks`).
        Scale::Percentile => 0,
        Scale::Log => {
            let ticks = round_u64((range.end - range.start).ceil())
                .saturating_add(1)
                .clamp(3, 12);
            usize::try_from(ticks).expect("3..=12 fits a usize")
        }
    }
}

fn padded_range(low: f64, high: f64, scale: Scale) -> std::ops::Range<f64> {
    if high <= low {
        let pad = if low == 0.0 { 1.0 } else { low.abs() * 0.1 };
        return (low - pad)..(high + pad);
    }
    let pad = (high - low) * 0.05;
    match scale {
        // Counts, fractions and times start at zero; a linear axis that does
        // not would exaggerate differences.
        Scale::Linear if low >= 0.0 => 0.0..(high + pad),
        Scale::Percentile => 0.0..(high + pad),
        _ => (low - pad)..(high + pad),
    }
}

/// The y range of each point of a series on the axis: its whisker, or the
/// point itself.
fn mapped_ranges(axis: &Axis, series: &Series) -> Vec<Option<(f64, f64)>> {
    series
        .points
        .iter()
        .enumerate()
        .map(|(index, [_, y])| {
            let [low, high] = series.y_ranges.get(index).copied().unwrap_or([*y, *y]);
            Some((to_axis(axis, low)?, to_axis(axis, high)?))
        })
        .collect()
}

fn render_xy(
    x_axis: &Axis,
    y_axis: &Axis,
    series: &[Series],
    identity_line: bool,
) -> Result<String> {
    let mapped: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .filter_map(|[x, y]| Some((to_axis(x_axis, *x)?, to_axis(y_axis, *y)?)))
                .collect()
        })
        .collect();
    let all_points = || mapped.iter().flatten();
    ensure!(
        all_points().next().is_some(),
        "no point of the chart fits its axes (log axis and non-positive values?)"
    );
    let bounds = |pick: fn(&(f64, f64)) -> f64| {
        all_points()
            .map(pick)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            })
    };
    let (mut x_low, mut x_high) = bounds(|p| p.0);
    let (mut y_low, mut y_high) = bounds(|p| p.1);
    for (low, high) in series
        .iter()
        .flat_map(|s| mapped_ranges(y_axis, s))
        .flatten()
    {
        y_low = y_low.min(low);
        y_high = y_high.max(high);
    }
    if identity_line {
        // Both axes show the same quantity: give them the same range so the
        // diagonal is the diagonal.
        x_low = x_low.min(y_low);
        y_low = x_low;
        x_high = x_high.max(y_high);
        y_high = x_high;
    }
    let x_range = padded_range(x_low, x_high, x_axis.scale);
    let y_range = padded_range(y_low, y_high, y_axis.scale);
    let mut legend: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
    if identity_line {
        legend.push(IDENTITY_LEGEND);
    }
    let (columns, legend_rows) = legend_layout(legend.iter().copied());
    let mut tooltips = Tooltips::default();

    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (WIDTH, XY_HEIGHT + legend_height(legend_rows)))
                .into_drawing_area();
        root.fill(&WHITE)?;
        let (legend_area, plot_area) = root.split_vertically(legend_height(legend_rows));
        let keys: Vec<SeriesKey> = series.iter().map(|s| s.key).collect();
        let mut palette = colours(&keys);
        if identity_line {
            palette.push(RGBColor(90, 90, 90));
        }
        draw_legend(
            &legend_area,
            columns,
            legend.iter().copied().zip(palette.iter().copied()),
        )?;
        let mut chart = ChartBuilder::on(&plot_area)
            .margin_right(24)
            .margin_top(4)
            .x_label_area_size(44)
            .y_label_area_size(78)
            .build_cartesian_2d(x_range.clone(), y_range.clone())?;
        chart
            .configure_mesh()
            .x_desc(axis_title(x_axis))
            .y_desc(axis_title(y_axis))
            .x_labels(label_count(x_axis, &x_range))
            .y_labels(label_count(y_axis, &y_range))
            .x_label_formatter(&|v| axis_label(x_axis, *v))
            .y_label_formatter(&|v| axis_label(y_axis, *v))
            .label_style((FONT, FONT_PX))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()?;
        if x_axis.scale == Scale::Percentile {
            let style =
                TextStyle::from((FONT, FONT_PX).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
            for at in percentile_ticks(&x_range) {
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(at, y_range.start), (at, y_range.end)],
                    RGBColor(220, 220, 220).stroke_width(1),
                )))?;
                let (x, y) = chart.backend_coord(&(at, y_range.start));
                root.draw(&Text::new(
                    axis_label(x_axis, at),
                    (x, y + 6),
                    style.clone(),
                ))?;
            }
        }
        if identity_line {
            let low = x_range.start.max(y_range.start);
            let high = x_range.end.min(y_range.end);
            chart.draw_series(LineSeries::new(
                [(low, low), (high, high)],
                RGBColor(90, 90, 90).stroke_width(1),
            ))?;
        }
        for (index, (spec, points)) in series.iter().zip(&mapped).enumerate() {
            let colour = palette[index];
            match spec.style {
                SeriesStyle::Line => {
                    chart.draw_series(LineSeries::new(
                        points.iter().copied(),
                        colour.stroke_width(2),
                    ))?;
                }
                SeriesStyle::Steps => {
                    let start = points.first().map(|(x, _)| (*x, y_range.start.max(0.0)));
                    let mut steps: Vec<(f64, f64)> = start.into_iter().collect();
                    let mut level = steps.first().map_or(0.0, |p| p.1);
                    for &(x, y) in points {
                        steps.push((x, level));
                        steps.push((x, y));
                        level = y;
                    }
                    chart.draw_series(LineSeries::new(steps, colour.stroke_width(2)))?;
                }
                SeriesStyle::Points => {}
            }
            for ((x, low_high), point) in points
                .iter()
                .map(|p| p.0)
                .zip(mapped_ranges(y_axis, spec))
                .zip(points)
            {
                if let (Some((low, high)), false) = (low_high, spec.y_ranges.is_empty()) {
                    chart.draw_series(std::iter::once(PathElement::new(
                        vec![(x, low), (x, high)],
                        colour.stroke_width(2),
                    )))?;
                }
                if spec.style != SeriesStyle::Steps {
                    let radius = if spec.style == SeriesStyle::Line {
                        3
                    } else {
                        5
                    };
                    chart.draw_series(std::iter::once(Circle::new(
                        *point,
                        radius,
                        colour.filled(),
                    )))?;
                }
            }
            for (point, [x, y]) in points.iter().zip(&spec.points) {
                tooltips.dot(
                    chart.backend_coord(point),
                    format!(
                        "{}: {} = {}, {} = {}",
                        spec.name,
                        x_axis.label,
                        value_text(x_axis, *x),
                        y_axis.label,
                        value_text(y_axis, *y)
                    ),
                );
            }
        }
        root.present()?;
    }
    Ok(tooltips.into_svg(svg))
}

const IDENTITY_LEGEND: &str = "y = x (exact prediction)";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::present::data::{SeriesKey, Spread};

    fn axis(label: &str, scale: Scale) -> Axis {
        Axis {
            label: label.to_string(),
            scale,
        }
    }

    fn fill(colour: RGBColor) -> String {
        format!("fill=\"#{:02X}{:02X}{:02X}\"", colour.0, colour.1, colour.2)
    }

    fn exit_stack(exit: VmxExit, values: Vec<f64>) -> NamedValues {
        NamedValues {
            name: exit.name().into(),
            key: SeriesKey::Exit(exit),
            values,
        }
    }

    /// The texts of an SVG's `<text>` elements.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|part| {
                let body = part.split_once('>')?.1;
                Some(body.split("</text>").next()?.trim().to_string())
            })
            .collect()
    }

    #[test]
    fn bars_draw_one_rectangle_per_positive_segment_and_label_every_total() {
        let chart = Chart::Bars {
            value_label: "exits/s".into(),
            categories: vec![
                "vanilla 100K pps".into(),
                "did 100K pps".into(),
                "bare".into(),
            ],
            stacks: vec![
                exit_stack(VmxExit::ExternalInterrupt, vec![14_000.0, 0.0, 0.0]),
                exit_stack(VmxExit::MsrWrite, vec![14_000.0, 0.0, 0.0]),
                exit_stack(VmxExit::IoInstruction, vec![500.0, 500.0, 0.0]),
            ],
        };
        let svg = render_svg(&chart).expect("renders");
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("vanilla 100K pps"));
        // Segment colours are the fixed per-reason colours.
        let count = |exit: VmxExit| svg.matches(&fill(exit_colour(exit))).count();
        // One legend swatch each, plus one bar per positive value.
        assert_eq!(count(VmxExit::ExternalInterrupt), 1 + 1);
        assert_eq!(count(VmxExit::MsrWrite), 1 + 1);
        assert_eq!(count(VmxExit::IoInstruction), 1 + 2);
        // Every bar segment says what it is when hovered.
        assert_eq!(svg.matches("<title>").count(), 4);
        assert!(svg.contains("<title>did 100K pps · IO_INSTRUCTION: 500</title>"));
        // Each bar's total is written beside it, the zero one too.
        let labels = texts(&svg);
        for total in ["28.5K", "500", "0"] {
            assert!(labels.iter().any(|t| t == total), "{total} in {labels:?}");
        }
    }

    #[test]
    fn grouped_bars_are_linear_from_zero_with_a_label_and_whisker_per_bar() {
        let chart = Chart::Grouped {
            value_axis: axis("exits per interrupt", Scale::Linear),
            categories: vec!["irq".into(), "timer".into()],
            series: vec![
                GroupedSeries {
                    name: "measured (KVM LAPIC)".into(),
                    key: SeriesKey::Measured,
                    values: vec![Spread::of([1.0, 1.5, 2.0]), None],
                },
                GroupedSeries {
                    name: "apicv".into(),
                    key: SeriesKey::Design(DesignKind::Apicv),
                    values: vec![Spread::of([0.05]), Spread::of([0.2])],
                },
                GroupedSeries {
                    name: "did".into(),
                    key: SeriesKey::Design(DesignKind::Did),
                    values: vec![Spread::of([0.0]), Spread::of([0.2])],
                },
            ],
        };
        let svg = render_svg(&chart).expect("renders");
        assert_eq!(svg.matches("<title>").count(), 5);
        assert!(svg.contains("<title>irq · measured (KVM LAPIC): 1.5 (1\u{2013}2, 3 runs)</title>"));
        // The design keeps its colour: one swatch; DID's zero is no
        // rectangle of its colour but a mark, and is labelled.
        assert_eq!(
            svg.matches(&fill(design_colour(DesignKind::Apicv))).count(),
            3
        );
        assert_eq!(
            svg.matches(&fill(design_colour(DesignKind::Did))).count(),
            3
        );
        let labels = texts(&svg);
        for value in ["1.5", "0.05", "0.2", "0"] {
            assert!(labels.iter().any(|t| t == value), "{value} in {labels:?}");
        }
        // A log axis would make a bar's length meaningless.
        let Chart::Grouped {
            categories, series, ..
        } = chart
        else {
            unreachable!("built as grouped bars");
        };
        let log = Chart::Grouped {
            value_axis: axis("exits per interrupt", Scale::Log),
            categories,
            series,
        };
        assert!(render_svg(&log).is_err());
    }

    #[test]
    fn legends_never_need_more_width_than_the_figure() {
        let long: Vec<String> = (0..16)
            .map(|i| format!("halt polling {i}00 us · busy"))
            .collect();
        let (columns, rows) = legend_layout(long.iter().map(String::as_str));
        let longest = px(long.iter().map(|n| n.chars().count()).max().expect("names"));
        assert!(columns * (longest * CHAR_PX + 30) <= WIDTH - 20);
        assert_eq!(rows, 16_u32.div_ceil(columns));
        assert_eq!(fit("a very long label indeed", 100), "a very lon\u{2026}");
        assert_eq!(fit("short", 100), "short");
    }

    #[test]
    fn log_axis_drops_non_positive_points_and_labels_in_real_units() {
        let chart = Chart::Xy {
            x_axis: axis("latency (ns)", Scale::Log),
            y_axis: axis("fraction", Scale::Linear),
            series: vec![Series::new(
                "did",
                SeriesStyle::Points,
                vec![[0.0, 0.1], [1_000.0, 0.5], [100_000.0, 1.0]],
            )],
            identity_line: false,
        };
        let svg = render_svg(&chart).expect("renders");
        // Two drawable points (each with its tooltip circle), one legend
        // swatch drawn as a rectangle.
        assert_eq!(svg.matches("<circle").count(), 2 * 2);
        assert_eq!(svg.matches("<title>").count(), 2);
        assert!(svg.contains("\n10K\n"), "{svg}");
    }

    #[test]
    fn single_bar_and_single_point_charts_render() {
        let bar = Chart::Bars {
            value_label: "exits".into(),
            categories: vec!["only".into()],
            stacks: vec![exit_stack(VmxExit::Hlt, vec![1.0])],
        };
        assert!(render_svg(&bar).expect("renders").contains("only"));
        let point = Chart::Xy {
            x_axis: axis("x", Scale::Log),
            y_axis: axis("y", Scale::Log),
            series: vec![Series::new("one", SeriesStyle::Points, vec![[5.0, 5.0]])],
            identity_line: true,
        };
        assert_eq!(
            render_svg(&point)
                .expect("renders")
                .matches("<title>")
                .count(),
            1
        );
    }

    #[test]
    fn empty_chart_is_an_error_not_an_empty_picture() {
        let chart = Chart::Xy {
            x_axis: axis("x", Scale::Linear),
            y_axis: axis("y", Scale::Linear),
            series: vec![],
            identity_line: true,
        };
        assert!(render_svg(&chart).is_err());
    }

    #[test]
    fn designs_exit_reasons_and_variants_never_share_a_colour() {
        let designs: Vec<RGBColor> = DesignKind::ALL.into_iter().map(design_colour).collect();
        let exits: Vec<RGBColor> = VmxExit::ALL.iter().copied().map(exit_colour).collect();
        let variants = colours(&[SeriesKey::Variant; 12]);
        let all: Vec<RGBColor> = [
            &designs[..],
            &exits[..],
            &variants[..],
            &PATH_PALETTE[..],
            &[MEASURED_COLOUR, TWIN_COLOUR, GUIDE_COLOUR],
        ]
        .concat();
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // A design's colour does not depend on the figure it is in.
        let keys = [
            SeriesKey::Variant,
            SeriesKey::Design(DesignKind::Did),
            SeriesKey::Exit(VmxExit::Hlt),
            SeriesKey::Measured,
        ];
        let assigned = colours(&keys);
        assert_eq!(assigned[1], design_colour(DesignKind::Did));
        assert_eq!(assigned[2], exit_colour(VmxExit::Hlt));
        assert_eq!(assigned[0], VARIANT_RAMP[0]);
        assert_eq!(colours(&[SeriesKey::Variant; 2])[1], VARIANT_RAMP[5]);
    }

    #[test]
    fn percentile_axis_spaces_the_nines_evenly_and_says_so() {
        let axis = axis("percentile", Scale::Percentile);
        assert_eq!(to_axis(&axis, 0.0), Some(0.0));
        let ninety = to_axis(&axis, 0.9).expect("90%");
        let nines = to_axis(&axis, 0.999).expect("99.9%");
        assert!((ninety - 1.0).abs() < 1e-9 && (nines - 3.0).abs() < 1e-9);
        assert_eq!(to_axis(&axis, 1.0), None, "100% lies at infinity");
        let ticks: Vec<String> = percentile_ticks(&(0.0..3.2))
            .into_iter()
            .map(|at| axis_label(&axis, at))
            .collect();
        assert_eq!(ticks, ["0%", "50%", "90%", "99%", "99.9%"]);
        assert!(axis_title(&axis).contains("log scale"));
        let chart = Chart::Xy {
            x_axis: axis,
            y_axis: Axis {
                label: "latency (us)".into(),
                scale: Scale::Log,
            },
            series: vec![Series::new(
                "kernel",
                SeriesStyle::Steps,
                vec![[0.0, 10.0], [0.5, 20.0], [0.99, 300.0], [0.999, 300.0]],
            )],
            identity_line: false,
        };
        let svg = render_svg(&chart).expect("renders");
        let labels = texts(&svg);
        assert!(labels.iter().any(|t| t == "99.9%"), "{labels:?}");
        assert!(
            labels.iter().any(|t| t == "latency (us) (log scale)"),
            "{labels:?}"
        );
    }
}
