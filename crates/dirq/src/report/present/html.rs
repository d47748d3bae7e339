//! The report page: one self-contained HTML file (inline CSS and SVG, no
//! script, nothing fetched from the network), written with maud, which
//! escapes every piece of text it is given.

use maud::{html, Markup, PreEscaped, DOCTYPE};

use crate::common::meta::{utc_minutes, Meta};
use crate::common::plan::Depth;
use crate::common::progress::{StepFailure, StepRecord, StepStatus};
use crate::report::present::data::{Cell, Figure, ReportData, Section, Table, TableRow, Unit};
use crate::report::present::figures::render_svg;
use dirq_vmm::host_load::HostNoise;

const STYLE: &str = "
body { font-family: sans-serif; margin: 0 auto; max-width: 1100px; padding: 0 20px 48px; color: #222; line-height: 1.4; }
h1 { margin-bottom: 4px; }
.meta { color: #555; margin-top: 0; }
.banner { background: #fff3cd; border: 1px solid #e0b400; padding: 12px 16px; font-weight: bold; margin: 16px 0; }
.banner.failed { background: #fde2e1; border-color: #c00; }
.banner ul { font-weight: normal; margin: 8px 0 0; padding-left: 20px; }
.partial { color: #fff; background: #c00; padding: 2px 8px; border-radius: 4px; font-size: 0.6em; vertical-align: middle; }
.notes { background: #f6f6f6; border-left: 4px solid #999; padding: 4px 16px; }
nav ol { columns: 2; column-gap: 32px; }
section { border-top: 1px solid #ddd; margin-top: 32px; }
#conclusions p { font-size: 1.05em; display: list-item; margin: 6px 0 6px 1.2em; }
figure { margin: 24px 0; padding: 12px; border: 1px solid #e4e4e4; border-radius: 6px; }
figure h3 { margin-top: 0; }
.chart svg { max-width: 100%; height: auto; }
figcaption { color: #444; font-size: 0.9em; margin: 8px 0; }
details { font-size: 0.85em; margin-top: 8px; }
details.fold { font-size: 1em; margin: 10px 0; }
details.fold > summary { cursor: pointer; color: #333; }
details.fold > summary::marker { color: #888; }
.side { display: flex; gap: 24px; align-items: flex-start; margin: 12px 0; }
.side > .given { flex: 1 1 36%; min-width: 0; font-size: 0.88em; }
.side > .numbers { flex: 1 1 64%; min-width: 0; }
.side figure { margin: 0; }
.side dl { margin: 0; }
.side dt { font-weight: bold; color: #444; }
.side dd { margin: 0 0 6px 0; }
.hostline { margin: 2px 0 0; font-weight: bold; }
details pre { background: #f2f2f2; padding: 6px 8px; white-space: pre-wrap; overflow-wrap: anywhere; }
code { background: #f2f2f2; padding: 1px 4px; }
.table-wrap { overflow-x: auto; margin-top: 8px; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: #f2f2f2; }
th:first-child, td:first-child, td.text, th.text { text-align: left; }
td.text { overflow-wrap: break-word; max-width: 420px; }
tr.flagged td { background: #fde2e1; }
.error { color: #a00; }
";

/// The steps table: every step with its status, so a failure or a skip
/// is never only a missing section.
fn steps_table(steps: &[StepRecord]) -> Table {
    let rows = steps
        .iter()
        .map(|record| {
            let (status, detail) = match record.status {
                StepStatus::Ok => ("ok", String::new()),
                StepStatus::Failed => (
                    "FAILED",
                    record
                        .failures
                        .iter()
                        .map(StepFailure::line)
                        .collect::<Vec<_>>()
                        .join("; "),
                ),
                StepStatus::Skipped => (
                    "skipped",
                    record.skipped_because.clone().unwrap_or_default(),
                ),
            };
            TableRow::flagged(
                vec![
                    Cell::text(record.title.to_string()),
                    Cell::text(status),
                    Cell::number(record.wall_s, Unit::Seconds),
                    Cell::text(detail),
                ],
                record.status == StepStatus::Failed,
            )
        })
        .collect();
    Table {
        folded: false,
        title: String::new(),
        columns: [
            "step",
            "status",
            "wall time (s)",
            "what failed, or why skipped",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    }
}

/// "1 step", "2 steps".
pub fn counted(count: usize, noun: &str) -> String {
    match count {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}

/// The banner above everything else when a step failed: each failure, its
/// configuration and the command that repeats it.
fn failures_banner(failed: &[&StepRecord]) -> Markup {
    let count: usize = failed.iter().map(|record| record.failures.len()).sum();
    html! {
        div.banner.failed #failures {
            "PARTIAL REPORT: " (counted(count, "failure")) " in " (counted(failed.len(), "step")) ". "
            "The sections they feed say so; the rest of the report stands."
            ul {
                @for record in failed {
                    @for failure in &record.failures {
                        li {
                            strong { (record.title) } ": " (failure.configuration) ": "
                            (failure.reason)
                            @if let Some(command) = &failure.command {
                                ". Reproduce: " code { (command) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The warning a noisy host puts at the top of the page; None when quiet.
pub fn noise_warning(noise: &HostNoise) -> Option<String> {
    let HostNoise::Noisy(reasons) = noise else {
        return None;
    };
    let reasons: Vec<String> = reasons.iter().map(ToString::to_string).collect();
    Some(format!(
        "Noisy host: {}. Other work shared the cores the real runs were timed on, so their \
         latencies and floors are noisier than on an idle host; compare ranges, not single \
         numbers, or rerun on an idle host.",
        reasons.join("; ")
    ))
}

/// The host's facts every number depends on, first thing on the page:
/// the KVM backend, hardware virtualization, nesting, the guest's
/// execution and the load when the report started.
fn host_line(report: &ReportData, meta: &Meta) -> String {
    let host = &meta.host;
    let mut facts = vec![match &report.kvm.backend {
        Some(backend) => format!("KVM backend {backend}"),
        None => "no KVM backend loaded".into(),
    }];
    facts.push(
        match host.hardware_virtualization {
            Some(true) => "VT-x/AMD-V present",
            Some(false) => "no VT-x or AMD-V: every design but vanilla is a prediction here",
            None => "hardware virtualization unknown",
        }
        .into(),
    );
    facts.push(
        match host.nested {
            Some(true) => "nested (this host is itself a VM)",
            Some(false) => "not nested",
            None => "nesting unknown",
        }
        .into(),
    );
    if let Some(exec) = &host.guest_exec {
        facts.push(format!("guest runs {exec}"));
    }
    let load = report.host_load.as_ref();
    if let Some([one_minute, ..]) = load.and_then(|load| load.load_average) {
        facts.push(format!(
            "load {one_minute:.2} on {} at the start",
            counted(host.cpus, "CPU")
        ));
    }
    if let Some(steal) = load.and_then(|load| load.steal_share) {
        facts.push(format!(
            "{:.1}% of CPU time stolen while it ran",
            steal * 100.0
        ));
    }
    facts.join(" · ")
}

/// Renders the whole report page.
pub fn render_page(report: &ReportData, meta: &Meta) -> String {
    let total_s: f64 = report.steps.iter().map(|s| s.wall_s).sum();
    let failed: Vec<&StepRecord> = report
        .steps
        .iter()
        .filter(|record| record.status == StepStatus::Failed)
        .collect();
    let partial = !failed.is_empty();
    let noisy = noise_warning(&report.host_noise);
    let build = format!(
        "source {} ({:?} build)",
        meta.source_commit.get(..12).unwrap_or(meta.source_commit),
        meta.build_profile
    )
    .to_lowercase();
    let depth = match report.depth {
        Depth::Full => format!("full run, every real measurement {} times", report.repeats),
        Depth::Quick => "--quick run: every real measurement once, so no spread".into(),
        Depth::Smoke => "smoke run (test counts: the numbers mean nothing)".into(),
    };
    let steps = steps_table(&report.steps);
    let (conclusions, rest) = match report.sections.split_first() {
        Some((first, rest)) if first.id == "conclusions" => (Some(first), rest),
        _ => (None, report.sections.as_slice()),
    };
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { @if partial { "PARTIAL · " } "dirq report" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    h1 { "dirq report" @if partial { " " span.partial { "PARTIAL" } } }
                    p.hostline #host-line { (host_line(report, meta)) }
                    p.meta {
                        "dirq " (meta.dirq_version) ", " (build) " · " (depth) " · started "
                        (utc_minutes(meta.started)) " · took " (format!("{total_s:.0}")) " s"
                        @if partial { ", " strong { "PARTIAL: " (counted(failed.len(), "step")) " failed" } }
                        " · "
                        "host " (meta.host.cpu.as_deref().unwrap_or("unknown CPU")) ", "
                        (meta.host.cpus) " CPUs, kernel " (meta.host.kernel.as_deref().unwrap_or("unknown"))
                        " · numbers in " a href="data.json" { "data.json" }
                        ", core timelines in " a href="traces/" { "traces/" }
                        " (open in ui.perfetto.dev)"
                    }
                }
                @if partial { (failures_banner(&failed)) }
                @if let Some(warning) = &noisy { div.banner #noisy-host { (warning) } }
                @if !report.kvm.available {
                    div.banner #no-kvm {
                        "Simulation only: " (report.kvm.detail)
                        ". The real-VMM sections, calibration and model checks were not run."
                    }
                }
                // The first screen: the conclusions and what qualifies them,
                // then the contents.
                @if let Some(conclusions) = conclusions { (render_section(conclusions)) }
                @if !report.notes.is_empty() {
                    div.notes #notes {
                        h2 { "Read first" }
                        ul { @for note in &report.notes { li { (code_spans(note)) } } }
                    }
                }
                nav #toc {
                    h2 { "Contents" }
                    ol {
                        @for section in &report.sections {
                            li { a href={ "#" (section.id) } { (section.title) } }
                            @if section.id == "conclusions" && !report.notes.is_empty() {
                                li { a href="#notes" { "Read first: misses and warnings" } }
                            }
                        }
                        li { a href="#steps" { "What ran, its status, and how long it took" } }
                    }
                }
                @for section in rest { (render_section(section)) }
                section #steps {
                    h2 { "What ran, its status, and how long it took" }
                    (render_table(&steps))
                }
            }
        }
    };
    page.into_string()
}

fn render_section(section: &Section) -> Markup {
    let (open, folded): (Vec<&Figure>, Vec<&Figure>) =
        section.figures.iter().partition(|figure| !figure.folded);
    let (tables, folded_tables): (Vec<&Table>, Vec<&Table>) =
        section.tables.iter().partition(|table| !table.folded);
    // A section with inputs sets them beside its point figure, whose
    // numbers fold away under it.
    let beside = (!section.given.is_empty())
        .then(|| open.first().copied())
        .flatten();
    html! {
        section id=(section.id) {
            h2 { (section.title) }
            @for paragraph in &section.intro { p { (code_spans(paragraph)) } }
            @if !section.given.is_empty() {
                div.side {
                    div.given {
                        dl { @for given in &section.given {
                            dt { (given.what) } dd { (code_spans(&given.value)) }
                        } }
                    }
                    @if let Some(figure) = beside {
                        div.numbers { (render_figure(figure, Numbers::Folded)) }
                    }
                }
            }
            @for (index, figure) in open.iter().enumerate() {
                @if index > 0 || beside.is_none() { (render_figure(figure, Numbers::beside(figure))) }
            }
            @for table in &tables { (render_free_table(table)) }
            @for figure in &folded {
                details.fold data-folded=(figure.id) {
                    summary { "Figure: " (figure.title) }
                    (render_figure(figure, Numbers::Shown))
                }
            }
            @if !folded_tables.is_empty() {
                details.fold {
                    summary {
                        @if let [table] = folded_tables.as_slice() { "Table: " (code_spans(&table.title)) }
                        @else { (folded_tables.len()) " tables: " (folded_tables[0].title) ", ..." }
                    }
                    @for table in &folded_tables { (render_free_table(table)) }
                }
            }
        }
    }
}

fn render_free_table(table: &Table) -> Markup {
    html! {
        div.table-block {
            @if !table.title.is_empty() { h3 { (code_spans(&table.title)) } }
            (render_table(table))
        }
    }
}

/// Where a figure's table goes.
#[derive(Clone, Copy, PartialEq)]
enum Numbers {
    Shown,
    /// Folded under the chart: it stands beside a section's inputs, or
    /// its table is longer than the chart says at a glance.
    Folded,
}

/// A table longer than this folds under its chart.
const SHOWN_ROWS: usize = 12;

impl Numbers {
    fn beside(figure: &Figure) -> Numbers {
        if figure.table.rows.len() > SHOWN_ROWS {
            Numbers::Folded
        } else {
            Numbers::Shown
        }
    }
}

/// A figure: its chart and caption, its table, and the commands that
/// repeat it.
fn render_figure(figure: &Figure, numbers: Numbers) -> Markup {
    let svg = render_svg(&figure.chart);
    html! {
        figure id=(figure.id) data-figure=(figure.id) {
            h3 { (figure.title) }
            div.chart {
                @match &svg {
                    Ok(svg) => (PreEscaped(svg)),
                    Err(err) => p.error { "figure not drawn: " (format!("{err:#}")) },
                }
            }
            figcaption { (code_spans(&figure.caption)) }
            @if numbers == Numbers::Shown { (render_table(&figure.table)) }
            @else {
                details {
                    summary { "The numbers (" (figure.table.rows.len()) " rows)" }
                    (render_table(&figure.table))
                }
            }
            @if !figure.commands.is_empty() {
                details {
                    summary {
                        @if figure.commands.len() == 1 {
                            "The command that repeats these runs"
                        } @else {
                            "The " (figure.commands.len()) " commands that repeat these runs"
                        }
                    }
                    pre { code { @for command in &figure.commands { (command) "\n" } } }
                }
            }
        }
    }
}

/// A column whose cells are all words (no number) is a text column: its
/// header aligns left with them.
fn text_column(table: &Table, column: usize) -> bool {
    table
        .rows
        .iter()
        .filter_map(|row| row.cells.get(column))
        .all(|cell| !is_number(cell))
}

fn render_table(table: &Table) -> Markup {
    html! {
        div.table-wrap {
            table {
                thead { tr { @for (index, column) in table.columns.iter().enumerate() {
                    th class=[text_column(table, index).then_some("text")] { (column) }
                } } }
                tbody {
                    @for row in &table.rows {
                        tr class=[row.flagged.then_some("flagged")] {
                            @for cell in &row.cells {
                                td class=[(!is_number(cell)).then_some("text")] { (code_spans(&cell.text)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A number's cell, or the "-" / "n/a" that stands for a missing one in
/// a number column: right-aligned. Every number a table shows is typed.
fn is_number(cell: &Cell) -> bool {
    cell.value.is_some() || matches!(cell.text.as_str(), "-" | "n/a")
}

/// A trace the report wrote (`traces/....json`): linked where named.
fn is_trace_file(part: &str) -> bool {
    part.starts_with("traces/") && part.ends_with(".json") && !part.contains(char::is_whitespace)
}

/// Text with its `backquoted` commands shown as code, and its trace files
/// as links.
fn code_spans(text: &str) -> Markup {
    html! {
        // Odd parts sit between backquotes; an unmatched trailing backquote
        // leaves a last odd part, shown as code as well.
        @for (index, part) in text.split('`').enumerate() {
            @if index % 2 == 0 { (part) }
            @else if is_trace_file(part) { a href=(part) { code { (part) } } }
            @else { code { (part) } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::progress::{Step, Steps};
    use crate::report::present::data::{
        Axis, Chart, KvmStatus, NamedValues, Scale, Series, SeriesKey, SeriesStyle, TableRow, Unit,
    };
    use dirq_vmm::host_load::{HostLoad, NoiseReason};

    fn sample_report(kvm_available: bool) -> ReportData {
        let bars = Figure {
            folded: false,
            id: "fig-exits".into(),
            title: "Exits by reason <per second>".into(),
            caption: "Ran `dirq sim did-udp-rx --seed 1` & friends".into(),
            commands: vec!["dirq sim did-udp-rx --seed 1 <&>".into()],
            chart: Chart::Bars {
                value_label: "exits/s".into(),
                categories: vec!["vanilla 100K".into(), "did 100K".into()],
                stacks: vec![NamedValues {
                    key: SeriesKey::Variant,
                    name: "EXTERNAL_INTERRUPT".into(),
                    values: vec![14_000.0, 10.0],
                }],
            },
            table: Table {
                folded: false,
                title: String::new(),
                columns: vec!["run".into(), "EXTERNAL_INTERRUPT/s".into()],
                rows: vec![
                    TableRow::new(vec![Cell::text("vanilla 100K"), Cell::count(14_000_u64)]),
                    TableRow::flagged(vec![Cell::text("did 100K"), Cell::count(10_u64)], true),
                ],
            },
        };
        let cdf = Figure {
            folded: false,
            id: "fig-cdf".into(),
            title: "Latency".into(),
            caption: "Percentiles".into(),
            commands: Vec::new(),
            chart: Chart::Xy {
                x_axis: Axis {
                    label: "latency (ns)".into(),
                    scale: Scale::Log,
                },
                y_axis: Axis {
                    label: "fraction".into(),
                    scale: Scale::Linear,
                },
                series: vec![Series::new(
                    "did",
                    SeriesStyle::Line,
                    vec![[2_000.0, 0.5], [3_000.0, 1.0]],
                )],
                identity_line: false,
            },
            table: Table::default(),
        };
        ReportData {
            depth: Depth::Quick,
            repeats: 1,
            kvm: KvmStatus {
                available: kvm_available,
                detail: "no /dev/kvm: No such file or directory".into(),
                backend: None,
            },
            notes: vec!["model missed 1 of 2 targets".into()],
            steps: {
                let mut steps = Steps::new();
                steps.run(Step::Simulation, 1, |_| ());
                steps.finish()
            },
            host_load: None,
            host_noise: HostNoise::Quiet,
            sections: vec![
                Section {
                    given: Vec::new(),
                    id: "conclusions".into(),
                    title: "Conclusions".into(),
                    intro: vec!["DID saves 90%.".into()],
                    figures: vec![],
                    tables: vec![],
                },
                Section {
                    given: Vec::new(),
                    id: "sim".into(),
                    title: "Simulation".into(),
                    intro: vec!["Intro with <angle> & ampersand.".into()],
                    figures: vec![bars, cdf],
                    tables: vec![],
                },
            ],
            raw: serde_json::Map::new(),
        }
    }

    fn render(report: &ReportData) -> String {
        let started = time::OffsetDateTime::from_unix_timestamp(1_795_333_151).expect("time");
        render_page(report, &Meta::since(started, None))
    }

    fn page(kvm_available: bool) -> String {
        render(&sample_report(kvm_available))
    }

    /// The sample with one real run that failed and a model check skipped.
    fn partial_report() -> ReportData {
        let mut report = sample_report(true);
        let mut steps = Steps::new();
        steps.run(Step::RealBenchmarks, 1, |_| ());
        steps.fail(
            Step::RealBenchmarks,
            StepFailure {
                configuration: "ipi · halt".into(),
                reason: "failed in 1 of 3 runs: the guest hung".into(),
                command: Some("dirq run ipi --halt exit".into()),
            },
        );
        steps.skip(Step::ModelChecks, "no calibration");
        report.steps = steps.finish();
        report
    }

    #[test]
    fn a_failed_step_makes_the_page_partial_with_a_banner_above_the_contents() {
        let page = render(&partial_report());
        let document = scraper::Html::parse_document(&page);
        assert!(document.errors.is_empty(), "{:?}", document.errors);
        let select = |css: &str| scraper::Selector::parse(css).expect("selector");
        let title: String = document
            .select(&select("head > title"))
            .flat_map(|t| t.text())
            .collect();
        assert_eq!(title, "PARTIAL · dirq report");
        let header: String = document
            .select(&select("header"))
            .flat_map(|h| h.text())
            .collect();
        assert!(header.contains("PARTIAL: 1 step failed"), "{header}");
        let banner: String = document
            .select(&select("#failures"))
            .flat_map(|b| b.text())
            .collect();
        assert!(
            banner.contains("real benchmarks on /dev/kvm: ipi · halt: failed in 1 of 3 runs")
                && banner.contains("Reproduce: dirq run ipi --halt exit"),
            "{banner}"
        );
        // Above the contents and every section.
        let at = |needle: &str| page.find(needle).expect(needle);
        assert!(at("id=\"failures\"") < at("id=\"toc\""));
        assert!(at("id=\"failures\"") < at("<section"));
        // The step table has a status per step; the failed one is flagged.
        let statuses: Vec<String> = document
            .select(&select("#steps tbody tr td:nth-child(2)"))
            .map(|td| td.text().collect())
            .collect();
        assert_eq!(statuses, ["FAILED", "skipped"]);
        assert_eq!(document.select(&select("#steps tr.flagged")).count(), 1);
    }

    #[test]
    fn the_header_names_the_backend_and_the_load_before_the_conclusions() {
        let mut report = sample_report(true);
        report.kvm.backend = Some("kvm_pvm".into());
        report.host_load = Some(HostLoad {
            cpus: 2,
            load_average: Some([1.25, 0.5, 0.25]),
            other_runnable: None,
            steal_ms: Some(40.0),
            steal_share: Some(0.004),
            elapsed_s: 100.0,
        });
        let page = render(&report);
        let line = &page[page.find("id=\"host-line\"").expect("host line")..];
        let line = &line[..line.find("</p>").expect("end")];
        assert!(line.contains("KVM backend kvm_pvm"), "{line}");
        assert!(line.contains("load 1.25 on"), "{line}");
        assert!(line.contains("0.4% of CPU time stolen"), "{line}");
        assert!(page.find("id=\"host-line\"") < page.find("id=\"conclusions\""));
    }

    #[test]
    fn a_folded_figure_and_folded_tables_sit_under_details_with_their_titles() {
        let mut report = sample_report(true);
        report.sections[1].figures[1].folded = true;
        report.sections[1].tables = vec![Table {
            title: "All runs".into(),
            columns: vec!["run".into()],
            rows: vec![TableRow::new(vec![Cell::text("a")])],
            folded: true,
        }];
        let page = render(&report);
        let document = scraper::Html::parse_document(&page);
        let select = |css: &str| scraper::Selector::parse(css).expect("selector");
        let folded: Vec<&str> = document
            .select(&select("details.fold > figure"))
            .filter_map(|f| f.value().attr("data-figure"))
            .collect();
        assert_eq!(folded, ["fig-cdf"]);
        let summaries: Vec<String> = document
            .select(&select("details.fold > summary"))
            .map(|s| s.text().collect())
            .collect();
        assert_eq!(summaries, ["Figure: Latency", "Table: All runs"]);
    }

    #[test]
    fn a_complete_report_says_nothing_of_failures() {
        let page = page(true);
        assert!(page.contains("<title>dirq report</title>"), "{page}");
        assert!(!page.contains("PARTIAL") && !page.contains("id=\"failures\""));
    }

    #[test]
    fn a_noisy_host_is_warned_about_at_the_top() {
        let mut report = sample_report(true);
        report.host_noise = HostNoise::Noisy(vec![NoiseReason::LoadAverage {
            one_minute: 4.0,
            cpus: 2,
        }]);
        let page = render(&report);
        let warning = page.find("id=\"noisy-host\"").expect("warning");
        assert!(warning < page.find("<section").expect("sections"));
        assert!(page.contains("Noisy host: load average 4.00 on 2 CPUs"));
    }

    #[test]
    fn page_parses_as_html_without_errors() {
        let page = page(true);
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
        let page = page(true);
        assert!(page.contains("Exits by reason &lt;per second&gt;"));
        assert!(page.contains("Intro with &lt;angle&gt; &amp; ampersand."));
        assert!(page.contains("<code>dirq sim did-udp-rx --seed 1</code> &amp; friends"));
        assert!(page.contains("<tr class=\"flagged\"><td class=\"text\">did 100K</td><td>10</td>"));
        assert!(page.contains("dirq sim did-udp-rx --seed 1 &lt;&amp;&gt;"));
        assert!(page.contains("started 2026-11-22 07:39 UTC"));
    }

    #[test]
    fn a_named_trace_file_is_a_link_and_a_command_is_not() {
        let markup = code_spans("open `traces/real-x.json` or run `dirq run x`").into_string();
        assert!(
            markup.contains(r#"<a href="traces/real-x.json"><code>traces/real-x.json</code></a>"#)
        );
        assert!(markup.contains("<code>dirq run x</code>") && !markup.contains(r#"href="dirq"#));
    }

    #[test]
    fn conclusions_come_first_then_the_notes_and_commands_fold_away() {
        let page = page(true);
        let document = scraper::Html::parse_document(&page);
        let select = |css: &str| scraper::Selector::parse(css).expect("selector");
        let order: Vec<&str> = document
            .select(&select("body > section, body > div.notes"))
            .filter_map(|e| e.value().attr("id"))
            .collect();
        assert_eq!(order, ["conclusions", "notes", "sim", "steps"]);
        // The contents follow the conclusions and the notes: the first
        // screen is what the report found.
        let at = |needle: &str| page.find(needle).expect(needle);
        assert!(at("id=\"toc\"") > at("id=\"notes\""));
        let links: Vec<&str> = document
            .select(&select("nav#toc a"))
            .filter_map(|a| a.value().attr("href"))
            .collect();
        assert_eq!(links, ["#conclusions", "#notes", "#sim", "#steps"]);
        // The figure with commands folds them in a <details>; the other has none.
        assert_eq!(document.select(&select("figure details pre")).count(), 1);
    }

    #[test]
    fn missing_kvm_puts_a_banner_at_the_top() {
        let page = page(false);
        let banner = page.find("id=\"no-kvm\"").expect("banner present");
        let first_section = page.find("<section").expect("sections present");
        assert!(banner < first_section);
        assert!(page.contains("Simulation only: no /dev/kvm"));
    }

    #[test]
    fn a_words_only_column_heads_left_and_a_number_column_right() {
        let table = Table {
            folded: false,
            title: String::new(),
            columns: vec!["run".into(), "why".into(), "exits/s".into()],
            rows: vec![TableRow::new(vec![
                Cell::text("a"),
                Cell::text("saturated: the rest merged"),
                Cell::number(28_200.0, Unit::Count),
            ])],
        };
        let html = render_table(&table).into_string();
        assert!(html.contains(r#"<th class="text">why</th>"#), "{html}");
        assert!(html.contains("<th>exits/s</th>"), "{html}");
    }

    #[test]
    fn numbers_align_right_and_words_left() {
        // "-" (no value) stands in number columns, so it aligns with them.
        for number in ["-", "n/a"] {
            assert!(is_number(&Cell::text(number)), "{number}");
        }
        // A number's text alone does not make a number: its value does.
        for text in ["did 100K", "MISS", "99.8K packets/s", "28.2K"] {
            assert!(!is_number(&Cell::text(text)), "{text}");
        }
        let packets = Unit::Throughput(dirq_sim::metrics::ThroughputUnit::PacketsPerS);
        for typed in [
            Cell::number(99_800.0, packets),
            Cell::number(2.0, Unit::Us).shown_as("2.00us"),
            Cell::count(3_u64),
        ] {
            assert!(is_number(&typed), "{}", typed.text);
        }
    }
}
