//! The report page: one self-contained HTML file (inline CSS and SVG, no
//! script, nothing fetched from the network).

use std::fmt::Write as _;

use super::data::{Figure, ReportData, Section, Table};
use super::figures::render_svg;

const STYLE: &str = "
body { font-family: sans-serif; margin: 0 auto; max-width: 1280px; padding: 0 24px 48px; color: #222; }
h1 { margin-bottom: 4px; }
.meta { color: #666; margin-top: 0; }
.banner { background: #fff3cd; border: 1px solid #e0b400; padding: 12px 16px; font-weight: bold; margin: 16px 0; }
.notes { background: #f6f6f6; border-left: 4px solid #999; padding: 4px 16px; }
nav ol { columns: 2; }
section { border-top: 1px solid #ddd; margin-top: 32px; }
figure { margin: 24px 0; padding: 12px; border: 1px solid #e4e4e4; border-radius: 6px; }
figure h3 { margin-top: 0; }
.fig-body { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
.chart { flex: 0 0 auto; }
.fig-table { flex: 1 1 360px; overflow-x: auto; }
figcaption { color: #555; font-size: 0.9em; margin-top: 8px; }
figcaption code, p code { background: #f2f2f2; padding: 1px 4px; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child, td.text { text-align: left; }
th { background: #f2f2f2; }
tr.flagged td { background: #fde2e1; }
.error { color: #a00; }
";

/// Renders the whole report page.
pub fn render_page(report: &ReportData) -> String {
    let mut page = String::new();
    page.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    page.push_str("<title>dirq report</title>\n<style>");
    page.push_str(STYLE);
    page.push_str("</style>\n</head>\n<body>\n");
    let total_s: f64 = report.steps.iter().map(|s| s.wall_s).sum();
    let _ = writeln!(
        page,
        "<header><h1>dirq report</h1><p class=\"meta\">dirq {} · {} run · started {} · took {:.0} s · numbers in <a href=\"data.json\">data.json</a>, core timelines in <a href=\"traces/\">traces/</a> (open in ui.perfetto.dev)</p></header>",
        escape(&report.dirq_version),
        escape(&format!("{:?}", report.depth).to_lowercase()),
        utc_timestamp(report.started_unix_s),
        total_s
    );
    if !report.kvm.available {
        let _ = writeln!(
            page,
            "<div class=\"banner\" id=\"no-kvm\">Simulation only: {}. The real-VMM sections, calibration and model checks were not run.</div>",
            escape(&report.kvm.detail)
        );
    }
    if !report.notes.is_empty() {
        page.push_str("<div class=\"notes\"><h2>Read first</h2><ul>\n");
        for note in &report.notes {
            let _ = writeln!(page, "<li>{}</li>", escape(note));
        }
        page.push_str("</ul></div>\n");
    }
    page.push_str("<nav><h2>Contents</h2><ol>\n");
    for section in &report.sections {
        let _ = writeln!(
            page,
            "<li><a href=\"#{}\">{}</a></li>",
            escape(&section.id),
            escape(&section.title)
        );
    }
    page.push_str("<li><a href=\"#steps\">What ran, and how long it took</a></li>\n</ol></nav>\n");
    for section in &report.sections {
        render_section(&mut page, section);
    }
    page.push_str("<section id=\"steps\"><h2>What ran, and how long it took</h2>\n");
    let steps = Table {
        title: String::new(),
        columns: vec!["step".into(), "wall time (s)".into()],
        rows: report
            .steps
            .iter()
            .map(|s| super::data::TableRow::new(vec![s.step.clone(), format!("{:.1}", s.wall_s)]))
            .collect(),
    };
    render_table(&mut page, &steps);
    page.push_str("</section>\n</body>\n</html>\n");
    page
}

fn render_section(page: &mut String, section: &Section) {
    let _ = writeln!(
        page,
        "<section id=\"{}\"><h2>{}</h2>",
        escape(&section.id),
        escape(&section.title)
    );
    for paragraph in &section.intro {
        let _ = writeln!(page, "<p>{}</p>", code_spans(paragraph));
    }
    for figure in &section.figures {
        render_figure(page, figure);
    }
    for table in &section.tables {
        page.push_str("<div class=\"table-block\">");
        if !table.title.is_empty() {
            let _ = write!(page, "<h3>{}</h3>", code_spans(&table.title));
        }
        render_table(page, table);
        page.push_str("</div>\n");
    }
    page.push_str("</section>\n");
}

fn render_figure(page: &mut String, figure: &Figure) {
    let id = escape(&figure.id);
    let _ = write!(
        page,
        "<figure id=\"{id}\" data-figure=\"{id}\"><h3>{}</h3><div class=\"fig-body\"><div class=\"chart\">",
        escape(&figure.title)
    );
    match render_svg(&figure.chart) {
        Ok(svg) => page.push_str(&svg),
        Err(err) => {
            let _ = write!(
                page,
                "<p class=\"error\">figure not drawn: {}</p>",
                escape(&format!("{err:#}"))
            );
        }
    }
    page.push_str("</div><div class=\"fig-table\">");
    render_table(page, &figure.table);
    let _ = writeln!(
        page,
        "</div></div><figcaption>{}</figcaption></figure>",
        code_spans(&figure.caption)
    );
}

fn render_table(page: &mut String, table: &Table) {
    page.push_str("<table><thead><tr>");
    for column in &table.columns {
        let _ = write!(page, "<th>{}</th>", escape(column));
    }
    page.push_str("</tr></thead><tbody>\n");
    for row in &table.rows {
        page.push_str(if row.flagged {
            "<tr class=\"flagged\">"
        } else {
            "<tr>"
        });
        for cell in &row.cells {
            let class = if is_number(cell) {
                ""
            } else {
                " class=\"text\""
            };
            let _ = write!(page, "<td{class}>{}</td>", code_spans(cell));
        }
        page.push_str("</tr>\n");
    }
    page.push_str("</tbody></table>");
}

/// Cells that hold a number ("28.2K", "-50.0%", "0 / 1011") align right;
/// words and commands align left.
fn is_number(cell: &str) -> bool {
    let starts_numeric = cell
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_digit() || c == '-' || c == '+');
    let one_token = cell.len() <= 16 && !cell.contains(char::is_whitespace);
    let pair = cell.len() <= 24 && cell.contains(" / ");
    starts_numeric && (one_token || pair)
}

/// Escapes text for HTML element content and quoted attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// Escapes a caption and shows its `backquoted` commands as code.
fn code_spans(text: &str) -> String {
    let mut out = String::new();
    for (index, part) in text.split('`').enumerate() {
        // Odd parts sit between backquotes; an unmatched trailing backquote
        // leaves a last odd part, shown as code as well.
        if index % 2 == 1 {
            let _ = write!(out, "<code>{}</code>", escape(part));
        } else {
            out.push_str(&escape(part));
        }
    }
    out
}

/// "2026-11-22 07:39 UTC" from Unix seconds (civil-from-days, proleptic
/// Gregorian), so the report needs no date crate.
fn utc_timestamp(unix_s: u64) -> String {
    let days = unix_s / 86_400;
    let seconds_of_day = unix_s % 86_400;
    let shifted = days + 719_468;
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        seconds_of_day / 3_600,
        seconds_of_day % 3_600 / 60
    )
}

#[cfg(test)]
mod tests {
    use super::super::data::{
        Axis, Chart, Depth, KvmStatus, NamedValues, Scale, Series, SeriesStyle, StepTiming,
        TableRow,
    };
    use super::*;

    fn sample_report(kvm_available: bool) -> ReportData {
        let bars = Figure {
            id: "fig-exits".into(),
            title: "Exits by reason <per second>".into(),
            caption: "Ran `dirq sim did-udp-rx --seed 1` & friends".into(),
            chart: Chart::Bars {
                value_label: "exits/s".into(),
                categories: vec!["vanilla 100K".into(), "did 100K".into()],
                stacks: vec![NamedValues {
                    name: "EXTINT".into(),
                    values: vec![14_000.0, 10.0],
                }],
            },
            table: Table {
                title: String::new(),
                columns: vec!["run".into(), "EXTINT/s".into()],
                rows: vec![
                    TableRow::new(vec!["vanilla 100K".into(), "14000".into()]),
                    TableRow::flagged(vec!["did 100K".into(), "10".into()], true),
                ],
            },
        };
        let cdf = Figure {
            id: "fig-cdf".into(),
            title: "Latency".into(),
            caption: "Ran `dirq sim did-cyclictest`".into(),
            chart: Chart::Xy {
                x_axis: Axis {
                    label: "latency (ns)".into(),
                    scale: Scale::Log,
                },
                y_axis: Axis {
                    label: "fraction".into(),
                    scale: Scale::Linear,
                },
                series: vec![Series {
                    name: "did".into(),
                    style: SeriesStyle::Line,
                    points: vec![[2_000.0, 0.5], [3_000.0, 1.0]],
                }],
                identity_line: false,
            },
            table: Table::default(),
        };
        ReportData {
            dirq_version: "0.1.0".into(),
            depth: Depth::Quick,
            started_unix_s: 1_795_333_151,
            kvm: KvmStatus {
                available: kvm_available,
                detail: "no /dev/kvm: No such file or directory".into(),
            },
            notes: vec!["model missed 1 of 2 targets".into()],
            steps: vec![StepTiming {
                step: "simulation".into(),
                wall_s: 1.5,
            }],
            sections: vec![Section {
                id: "sim".into(),
                title: "Simulation".into(),
                intro: vec!["Intro with <angle> & ampersand.".into()],
                figures: vec![bars, cdf],
                tables: vec![],
            }],
            raw: serde_json::Map::new(),
        }
    }

    #[test]
    fn page_parses_as_html_without_errors() {
        let page = render_page(&sample_report(true));
        let document = scraper::Html::parse_document(&page);
        assert!(document.errors.is_empty(), "{:?}", document.errors);
        let figures = scraper::Selector::parse("figure[data-figure]").expect("selector");
        let svg = scraper::Selector::parse("figure svg").expect("selector");
        let ids: Vec<_> = document
            .select(&figures)
            .filter_map(|f| f.value().attr("data-figure"))
            .collect();
        assert_eq!(ids, ["fig-exits", "fig-cdf"]);
        assert_eq!(document.select(&svg).count(), 2);
        assert!(document
            .select(&scraper::Selector::parse("#no-kvm").expect("selector"))
            .next()
            .is_none());
    }

    #[test]
    fn text_is_escaped_and_captions_show_commands_as_code() {
        let page = render_page(&sample_report(true));
        assert!(page.contains("Exits by reason &lt;per second&gt;"));
        assert!(page.contains("Intro with &lt;angle&gt; &amp; ampersand."));
        assert!(page.contains("<code>dirq sim did-udp-rx --seed 1</code> &amp; friends"));
        assert!(page.contains("<tr class=\"flagged\"><td class=\"text\">did 100K</td><td>10</td>"));
    }

    #[test]
    fn missing_kvm_puts_a_banner_at_the_top() {
        let page = render_page(&sample_report(false));
        let banner = page.find("id=\"no-kvm\"").expect("banner present");
        let first_section = page.find("<section").expect("sections present");
        assert!(banner < first_section);
        assert!(page.contains("Simulation only: no /dev/kvm"));
    }

    #[test]
    fn numbers_align_right_and_words_left() {
        // "-" (no value) stands in number columns, so it aligns with them.
        for number in ["28.2K", "-50.0%", "0 / 1011", "3.96K", "99.93%", "-"] {
            assert!(is_number(number), "{number}");
        }
        for text in ["did 100K", "MISS", "99.8K packets/s", "dirq run ipi"] {
            assert!(!is_number(text), "{text}");
        }
    }

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        assert_eq!(utc_timestamp(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_timestamp(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc_timestamp(1_795_333_151), "2026-11-22 07:39 UTC");
    }
}
