//! SVG rendering of the report's charts (plotters, SVG backend). The SVG is
//! returned as a string so the HTML page can inline it.

use anyhow::{ensure, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::data::{Axis, Chart, NamedValues, Scale, Series, SeriesStyle};

const WIDTH: u32 = 720;
const XY_HEIGHT: u32 = 420;
const BAR_HEIGHT_PX: u32 = 26;
const FONT: &str = "sans-serif";

/// Tableau 10: distinct, colour-blind tolerant, readable on white.
const PALETTE: [RGBColor; 10] = [
    RGBColor(78, 121, 167),
    RGBColor(242, 142, 43),
    RGBColor(225, 87, 89),
    RGBColor(118, 183, 178),
    RGBColor(89, 161, 79),
    RGBColor(237, 201, 72),
    RGBColor(176, 122, 161),
    RGBColor(255, 157, 167),
    RGBColor(156, 117, 95),
    RGBColor(186, 176, 172),
];

/// Exit reasons keep one colour across every figure of the report, so a
/// reader can compare bars between figures at a glance.
const REASON_ORDER: [&str; 10] = [
    "EXTINT",
    "MSRWR",
    "PENDVINT",
    "APIC_ACCESS",
    "IOINSR",
    "HLT",
    "EPT_VIOLATION",
    "NMI",
    "EXCEPTION",
    "OTHER",
];

/// Colours for one chart's entries: exit reasons keep their fixed colour;
/// other names take the palette slots no fixed reason in this chart uses.
fn colours<'a>(names: impl Iterator<Item = &'a str> + Clone) -> Vec<RGBColor> {
    let fixed_slot = |name: &str| REASON_ORDER.iter().position(|reason| *reason == name);
    let taken: Vec<usize> = names.clone().filter_map(fixed_slot).collect();
    let mut free = (0..PALETTE.len())
        .filter(|slot| !taken.contains(slot))
        .cycle();
    names
        .map(|name| {
            let slot = fixed_slot(name).or_else(|| free.next()).unwrap_or(0);
            PALETTE[slot % PALETTE.len()]
        })
        .collect()
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
        Chart::Xy {
            x_axis,
            y_axis,
            series,
            identity_line,
        } => render_xy(x_axis, y_axis, series, *identity_line),
    }
}

fn render_bars(value_label: &str, categories: &[String], stacks: &[NamedValues]) -> Result<String> {
    let count = categories.len();
    let value = |stack: &NamedValues, row: usize| -> f64 {
        stack
            .values
            .get(row)
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0)
            .unwrap_or(0.0)
    };
    let largest_total = (0..count)
        .map(|row| stacks.iter().map(|stack| value(stack, row)).sum::<f64>())
        .fold(0.0, f64::max);
    let x_max = if largest_total > 0.0 {
        largest_total * 1.05
    } else {
        1.0
    };
    let legend_rows = stacks.len().div_ceil(4) as u32;
    let height = 70 + legend_rows * 18 + BAR_HEIGHT_PX * count as u32;
    let longest_label = categories
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0);
    let label_area = (longest_label as u32 * 7 + 12).clamp(40, 300);
    let rows = count as f64;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let (legend_area, plot_area) = root.split_vertically(10 + legend_rows * 18);
        let palette = colours(stacks.iter().map(|s| s.name.as_str()));
        draw_legend(
            &legend_area,
            stacks
                .iter()
                .map(|s| s.name.as_str())
                .zip(palette.iter().copied()),
        )?;
        // Rows are a plain numeric axis, 0 at the top, one unit per
        // category; the category names are drawn beside it by hand, which
        // works for any number of rows (plotters' discrete axes drop the
        // label of a single category).
        let mut chart = ChartBuilder::on(&plot_area)
            .margin_right(20)
            .margin_top(4)
            .x_label_area_size(40)
            .y_label_area_size(label_area)
            .build_cartesian_2d(0.0..x_max, rows..0.0)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc(value_label)
            .x_label_formatter(&|v| compact_number(*v))
            .label_style((FONT, 13))
            .draw()?;
        let label_style =
            TextStyle::from((FONT, 13).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
        for (row, category) in categories.iter().enumerate() {
            let top = row as f64;
            let (x, y) = chart.backend_coord(&(0.0, top + 0.5));
            root.draw(&Text::new(
                category.clone(),
                (x - 6, y),
                label_style.clone(),
            ))?;
            let mut start = 0.0;
            for (index, stack) in stacks.iter().enumerate() {
                let width = value(stack, row);
                if width <= 0.0 {
                    continue;
                }
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(start, top + 0.15), (start + width, top + 0.85)],
                    palette[index].filled(),
                )))?;
                start += width;
            }
        }
        root.present()?;
    }
    Ok(svg)
}

/// A legend drawn above the plot, four entries a row, so it never hides data.
fn draw_legend<'a, DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    entries: impl Iterator<Item = (&'a str, RGBColor)>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let column_width = (WIDTH - 20) as i32 / 4;
    for (index, (name, colour)) in entries.enumerate() {
        let index = i32::try_from(index).unwrap_or(i32::MAX);
        let x = 10 + (index % 4) * column_width;
        let y = 8 + (index / 4) * 18;
        area.draw(&Rectangle::new([(x, y), (x + 12, y + 12)], colour.filled()))
            .map_err(|err| anyhow::anyhow!("{err}"))?;
        area.draw(&Text::new(name.to_string(), (x + 17, y), (FONT, 13)))
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
        Scale::Log => None,
    }
}

fn axis_label(axis: &Axis, coordinate: f64) -> String {
    match axis.scale {
        Scale::Linear => compact_number(coordinate),
        Scale::Log => compact_number(10f64.powf(coordinate)),
    }
}

/// How many ticks to ask for: on a log axis about one per decade, so the
/// ticks land on round powers of ten whenever the range spans a few decades.
fn label_count(axis: &Axis, range: &std::ops::Range<f64>) -> usize {
    match axis.scale {
        Scale::Linear => 10,
        Scale::Log => ((range.end - range.start).ceil() as usize + 1).clamp(3, 12),
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
        _ => (low - pad)..(high + pad),
    }
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
    let legend_rows = (series.len() + usize::from(identity_line)).div_ceil(4) as u32;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, XY_HEIGHT + legend_rows * 18))
            .into_drawing_area();
        root.fill(&WHITE)?;
        let (legend_area, plot_area) = root.split_vertically(10 + legend_rows * 18);
        let palette = colours(series.iter().map(|s| s.name.as_str()));
        let mut legend: Vec<(&str, RGBColor)> = series
            .iter()
            .map(|s| s.name.as_str())
            .zip(palette.iter().copied())
            .collect();
        if identity_line {
            legend.push(("y = x (exact prediction)", RGBColor(90, 90, 90)));
        }
        draw_legend(&legend_area, legend.into_iter())?;
        let mut chart = ChartBuilder::on(&plot_area)
            .margin_right(20)
            .margin_top(4)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x_range.clone(), y_range.clone())?;
        chart
            .configure_mesh()
            .x_desc(x_axis.label.as_str())
            .y_desc(y_axis.label.as_str())
            .x_labels(label_count(x_axis, &x_range))
            .y_labels(label_count(y_axis, &y_range))
            .x_label_formatter(&|v| axis_label(x_axis, *v))
            .y_label_formatter(&|v| axis_label(y_axis, *v))
            .label_style((FONT, 13))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()?;
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
            if spec.style == SeriesStyle::Line {
                chart.draw_series(LineSeries::new(
                    points.iter().copied(),
                    colour.stroke_width(2),
                ))?;
            }
            let radius = if spec.style == SeriesStyle::Line {
                2
            } else {
                4
            };
            chart.draw_series(
                points
                    .iter()
                    .map(|point| Circle::new(*point, radius, colour.filled())),
            )?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// 1234567 -> "1.23M", 0.25 -> "0.25": short tick labels.
pub fn compact_number(value: f64) -> String {
    let magnitude = value.abs();
    let (scaled, suffix) = if magnitude >= 1e9 {
        (value / 1e9, "G")
    } else if magnitude >= 1e6 {
        (value / 1e6, "M")
    } else if magnitude >= 1e3 {
        (value / 1e3, "K")
    } else {
        (value, "")
    };
    let text = if scaled == 0.0 {
        "0".to_string()
    } else if scaled.abs() >= 100.0 {
        format!("{scaled:.0}")
    } else if scaled.abs() >= 10.0 {
        format!("{scaled:.1}")
    } else if scaled.abs() >= 0.01 {
        format!("{scaled:.2}")
    } else {
        format!("{scaled:.1e}")
    };
    let trimmed = if text.contains('.') && !text.contains('e') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    };
    format!("{trimmed}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(label: &str, scale: Scale) -> Axis {
        Axis {
            label: label.to_string(),
            scale,
        }
    }

    #[test]
    fn bars_draw_one_rectangle_per_positive_segment() {
        let chart = Chart::Bars {
            value_label: "exits/s".into(),
            categories: vec!["vanilla 100K pps".into(), "did 100K pps".into()],
            stacks: vec![
                NamedValues {
                    name: "EXTINT".into(),
                    values: vec![14_000.0, 0.0],
                },
                NamedValues {
                    name: "MSRWR".into(),
                    values: vec![14_000.0, 0.0],
                },
                NamedValues {
                    name: "IOINSR".into(),
                    values: vec![500.0, 500.0],
                },
            ],
        };
        let svg = render_svg(&chart).expect("renders");
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("vanilla 100K pps"));
        // Segment colours are the fixed per-reason colours: EXTINT, MSRWR, IOINSR.
        let fill = |c: RGBColor| format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
        let count = |c: RGBColor| svg.matches(&fill(c)).count();
        // One legend swatch each, plus one bar per positive value.
        assert_eq!(count(PALETTE[0]), 1 + 1);
        assert_eq!(count(PALETTE[1]), 1 + 1);
        assert_eq!(count(PALETTE[4]), 1 + 2);
    }

    #[test]
    fn log_axis_drops_non_positive_points_and_labels_in_real_units() {
        let chart = Chart::Xy {
            x_axis: axis("latency (ns)", Scale::Log),
            y_axis: axis("fraction", Scale::Linear),
            series: vec![Series {
                name: "did".into(),
                style: SeriesStyle::Points,
                points: vec![[0.0, 0.1], [1_000.0, 0.5], [100_000.0, 1.0]],
            }],
            identity_line: false,
        };
        let svg = render_svg(&chart).expect("renders");
        // Two drawable points, one legend swatch drawn as a rectangle.
        assert_eq!(svg.matches("<circle").count(), 2);
        assert!(svg.contains("\n10K\n"), "{svg}");
    }

    #[test]
    fn single_bar_and_single_point_charts_render() {
        let bar = Chart::Bars {
            value_label: "exits".into(),
            categories: vec!["only".into()],
            stacks: vec![NamedValues {
                name: "HLT".into(),
                values: vec![1.0],
            }],
        };
        assert!(render_svg(&bar).expect("renders").contains("only"));
        let point = Chart::Xy {
            x_axis: axis("x", Scale::Log),
            y_axis: axis("y", Scale::Log),
            series: vec![Series {
                name: "one".into(),
                style: SeriesStyle::Points,
                points: vec![[5.0, 5.0]],
            }],
            identity_line: true,
        };
        assert_eq!(
            render_svg(&point)
                .expect("renders")
                .matches("<circle")
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
    fn fixed_reason_colours_never_collide_with_other_names() {
        let names = ["other", "MSRWR", "halt_exits", "EXTINT"];
        let assigned = colours(names.iter().copied());
        assert_eq!(assigned[1], PALETTE[1]);
        assert_eq!(assigned[3], PALETTE[0]);
        for (i, a) in assigned.iter().enumerate() {
            for b in &assigned[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn compact_numbers() {
        assert_eq!(compact_number(0.0), "0");
        assert_eq!(compact_number(0.25), "0.25");
        assert_eq!(compact_number(1_500.0), "1.5K");
        assert_eq!(compact_number(28_000.0), "28K");
        assert_eq!(compact_number(2_340_000.0), "2.34M");
        assert_eq!(compact_number(-3_000.0), "-3K");
    }
}
