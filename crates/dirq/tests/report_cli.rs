//! `dirq report` end to end: the page parses, opens with its conclusions,
//! and every figure on it has its numbers in data.json.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dirq-test-{name}-{}", std::process::id()));
    // A leftover from an earlier run of this process id would hide a missing file.
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs dirq with `args`; returns its standard output, having checked it succeeded.
fn dirq(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_dirq"))
        .args(args)
        .output()
        .expect("dirq runs");
    assert!(
        output.status.success(),
        "dirq {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

fn run_report(out: &Path, extra: &[&str]) {
    let out = out.to_str().expect("UTF-8 path");
    dirq(&[&["report", "--smoke", "--out", out], extra].concat());
}

/// Figure ids in data.json whose chart has at least one number.
fn figures_with_data(data: &serde_json::Value) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for section in data["sections"].as_array().expect("sections list") {
        for figure in section["figures"].as_array().expect("figures list") {
            let chart = &figure["chart"];
            let has_numbers = match chart["kind"].as_str() {
                Some("bars") => chart["stacks"].as_array().is_some_and(|stacks| {
                    stacks
                        .iter()
                        .any(|s| s["values"].as_array().is_some_and(|v| !v.is_empty()))
                }),
                Some("xy") => chart["series"].as_array().is_some_and(|series| {
                    series
                        .iter()
                        .any(|s| s["points"].as_array().is_some_and(|p| !p.is_empty()))
                }),
                Some("grouped") => chart["series"].as_array().is_some_and(|series| {
                    series.iter().any(|s| {
                        s["values"]
                            .as_array()
                            .is_some_and(|v| v.iter().any(|value| !value.is_null()))
                    })
                }),
                _ => false,
            };
            if has_numbers {
                ids.insert(figure["id"].as_str().expect("figure id").to_string());
            }
        }
    }
    ids
}

/// Checks the written report; returns data.json.
fn check_report(out: &Path) -> serde_json::Value {
    let page = std::fs::read_to_string(out.join("index.html")).expect("index.html written");
    let document = scraper::Html::parse_document(&page);
    assert!(
        document.errors.is_empty(),
        "HTML errors: {:?}",
        document.errors
    );

    let data: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("data.json")).expect("data.json written"),
    )
    .expect("data.json is JSON");

    let figure_selector = scraper::Selector::parse("figure[data-figure]").expect("selector");
    let svg_selector = scraper::Selector::parse("svg").expect("selector");
    let mut on_page = BTreeSet::new();
    for figure in document.select(&figure_selector) {
        let id = figure.value().attr("data-figure").expect("id").to_string();
        assert!(
            figure.select(&svg_selector).next().is_some(),
            "figure {id} has no drawing"
        );
        on_page.insert(id);
    }
    assert!(!on_page.is_empty(), "the report has no figure");
    assert_eq!(on_page, figures_with_data(&data));

    let no_kvm_banner = scraper::Selector::parse("#no-kvm").expect("selector");
    let kvm_available = data["kvm"]["available"].as_bool().expect("kvm.available");
    assert_eq!(
        document.select(&no_kvm_banner).next().is_some(),
        !kvm_available
    );

    // The page opens with its conclusions: the first section, first in the contents.
    let sections = scraper::Selector::parse("body > section").expect("selector");
    let first = document.select(&sections).next().expect("a section");
    assert_eq!(first.value().attr("id"), Some("conclusions"));
    let toc = scraper::Selector::parse("nav#toc a").expect("selector");
    assert_eq!(
        document
            .select(&toc)
            .next()
            .and_then(|a| a.value().attr("href")),
        Some("#conclusions")
    );

    // data.json describes itself.
    assert!(data["schema_version"].as_u64().is_some_and(|v| v >= 1));
    assert!(data["command_line"]
        .as_array()
        .is_some_and(|args| args.iter().any(|a| a == "report")));
    assert!(data["host"]["cpus"].as_u64().is_some_and(|cpus| cpus >= 1));
    for stamp in ["started", "ended"] {
        assert!(
            data[stamp].as_str().is_some_and(|t| t.ends_with('Z')),
            "{stamp}: {}",
            data[stamp]
        );
    }

    // Which build made it, and how busy the host was.
    assert!(data["source_commit"]
        .as_str()
        .is_some_and(|c| !c.is_empty()));
    assert_eq!(data["build_profile"], "release");
    assert!(data["host_load"]["cpus"]
        .as_u64()
        .is_some_and(|cpus| cpus >= 1));
    for fact in ["nested", "hardware_virtualization"] {
        assert!(
            data["host"][fact].is_boolean() || data["host"][fact].is_null(),
            "{fact}: {}",
            data["host"]
        );
    }
    // Every step has a status; a smoke run fails none, so the page is whole.
    let steps = data["steps"].as_array().expect("steps");
    assert!(!steps.is_empty());
    for step in steps {
        assert!(
            ["ok", "skipped"].contains(&step["status"].as_str().unwrap_or_default()),
            "{step}"
        );
    }
    assert!(!page.contains("PARTIAL"), "a whole report says PARTIAL");

    // One merged trace: a process per design, each exit a named slice.
    let traces = data["raw"]["traces"].as_array().expect("trace list");
    assert_eq!(traces.len(), 1, "{traces:?}");
    let name = traces[0].as_str().expect("trace file name");
    let text = std::fs::read_to_string(out.join("traces").join(name)).expect("trace written");
    let trace: serde_json::Value = serde_json::from_str(&text).expect("trace is JSON");
    let events = trace["traceEvents"].as_array().expect("trace events");
    let processes: BTreeSet<String> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .filter_map(|label| label.split_whitespace().next().map(str::to_string))
        .collect();
    for design in ["vanilla", "apicv", "eli", "did"] {
        assert!(processes.contains(design), "{design} not in {processes:?}");
    }
    assert!(events
        .iter()
        .any(|e| e["cat"] == "exit" && e["args"]["cost_ns"].is_u64()));
    assert!(events.iter().any(|e| e["ph"] == "f"), "no flow arrow");
    data
}

#[test]
fn simulation_only_report_parses_and_every_figure_has_data() {
    let out = scratch_dir("sim-only");
    run_report(&out, &["--sim-only"]);
    let data = check_report(&out);
    assert_eq!(data["kvm"]["available"], false);
    // The real half is skipped, and says why, step by step.
    let skipped: Vec<&str> = data["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter(|step| step["status"] == "skipped")
        .filter_map(|step| step["step"].as_str())
        .collect();
    assert_eq!(
        skipped,
        [
            "probe",
            "calibrate",
            "real-benchmarks",
            "model-checks",
            "studies"
        ]
    );
    assert!(data["raw"]["sim_scenarios"]
        .as_array()
        .is_some_and(|s| !s.is_empty()));
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn full_pipeline_report_builds_model_checks_from_real_runs() {
    if !dirq_vmm::testing::require_kvm("full_pipeline_report_builds_model_checks_from_real_runs") {
        return;
    }
    let out = scratch_dir("kvm");
    run_report(&out, &[]);
    let data = check_report(&out);
    assert_eq!(data["kvm"]["available"], true);
    let real_runs = data["raw"]["real_runs"]
        .as_array()
        .expect("real runs recorded");
    assert!(!real_runs.is_empty());
    // Every latency measurement keeps its histogram, and its buckets hold every sample.
    for run in real_runs {
        let latency = &run["latency_ns"];
        if latency.is_null() {
            continue;
        }
        let counted: u64 = latency["histogram"]
            .as_array()
            .expect("histogram buckets")
            .iter()
            .filter_map(|bucket| bucket["count"].as_u64())
            .sum();
        assert_eq!(Some(counted), latency["samples"].as_u64(), "{latency}");
    }
    assert_eq!(
        data["repeats"], 1,
        "a smoke report runs each measurement once"
    );
    // Every measured exits-per-interrupt in the model table is a real run's.
    let comparisons = data["raw"]["model_checks"]["comparisons"]
        .as_array()
        .expect("model checks recorded");
    let measured_exits: Vec<f64> = real_runs
        .iter()
        .filter_map(|run| run["exits_per_interrupt"].as_f64())
        .collect();
    let exit_comparisons: Vec<f64> = comparisons
        .iter()
        .filter(|c| c["metric"] == "exits_per_interrupt")
        .filter_map(|c| c["measured"].as_f64())
        .collect();
    assert!(
        !exit_comparisons.is_empty(),
        "no model-vs-reality comparison"
    );
    for measured in exit_comparisons {
        assert!(
            measured_exits.contains(&measured),
            "{measured} is not from a real run"
        );
    }
    let sections: Vec<&str> = data["sections"]
        .as_array()
        .expect("sections")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    for id in [
        "host",
        "calibration",
        "real",
        "model-vs-reality",
        "extrapolation",
        "studies",
    ] {
        assert!(sections.contains(&id), "section {id} missing: {sections:?}");
    }
    // Every software-only study was measured, and its table kept.
    let studies = &data["raw"]["studies"];
    assert_eq!(studies["failures"], serde_json::json!([]), "{studies}");
    for (table, rows) in [("vioapic", 4), ("io_batch", 2), ("tick", 2)] {
        assert_eq!(
            studies[table]["rows"].as_array().map(Vec::len),
            Some(rows),
            "{table}: {studies}"
        );
    }
    // The calibrated profile is written next to the page and the sim accepts it.
    let profile = out.join("host-profile.toml");
    let output = Command::new(env!("CARGO_BIN_EXE_dirq"))
        .args(["sim", "did-cyclictest", "--json", "--profile"])
        .arg(&profile)
        .output()
        .expect("dirq runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bad_flags_are_rejected_with_a_clear_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_dirq"))
        .args(["report", "--quick", "--smoke"])
        .output()
        .expect("dirq runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

#[test]
fn a_page_that_cannot_be_written_is_refused_before_any_work() {
    let out = scratch_dir("unwritable");
    std::fs::create_dir_all(out.join("index.html")).expect("a directory in the page's place");
    let output = Command::new(env!("CARGO_BIN_EXE_dirq"))
        .args(["report", "--sim-only", "--out"])
        .arg(&out)
        .output()
        .expect("dirq runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("index.html is a directory"), "{stderr}");
    // Refused before the simulations ran: nothing else was written.
    assert!(!out.join("data.json").exists());
    assert!(!out.join("traces").join("designs.json").exists());
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn run_prints_perf_kvm_stat_tables_a_histogram_and_self_describing_json() {
    if !dirq_vmm::testing::require_kvm(
        "run_prints_perf_kvm_stat_tables_a_histogram_and_self_describing_json",
    ) {
        return;
    }
    let run = |extra: &[&str]| dirq(&[&["run", "irq-latency", "--count", "200"], extra].concat());
    let text = run(&["--histogram=100000"]);
    for header in ["VM-EXIT", "Samples%", "Time%", "Min Time", "Avg time"] {
        assert!(text.contains(header), "{header} missing:\n{text}");
    }
    assert!(
        text.contains("Time%, Min, Max, Avg time: not measured"),
        "{text}"
    );
    // The run loop times the exits that reach the VMM: the userspace
    // irqchip's EOIs have a time.
    let userspace = run(&["--irqchip", "userspace"]);
    let eoi_row = userspace
        .lines()
        .skip_while(|line| !line.contains("returned to the VMM"))
        .find(|line| line.trim_start().starts_with("MSR_WRITE"))
        .unwrap_or_else(|| panic!("no userspace MSR_WRITE row:\n{userspace}"));
    assert!(eoi_row.matches("us").count() >= 3, "{eoi_row}");
    // Exits are named by VMX reason; KVM's other statistics are not exits.
    assert!(!text.contains("halt_exits"), "{text}");
    assert!(text.contains("# Histogram"), "{text}");
    let histogram_total: u64 = text
        .lines()
        .skip_while(|line| !line.starts_with("# Histogram"))
        .skip(1)
        .take_while(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    let overflows: u64 = text
        .lines()
        .find_map(|line| line.strip_prefix("# Histogram Overflows: "))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect("overflow line");
    assert_eq!(histogram_total + overflows, 200, "{text}");

    let json: serde_json::Value = serde_json::from_str(&run(&["--json"])).expect("JSON");
    assert!(json["schema_version"].as_u64().is_some());
    assert_eq!(json["bench"], "irq-latency");
    assert!(json["host"]["kvm_backend"].is_string(), "{}", json["host"]);
    assert!(json["latency_ns"]["histogram"]
        .as_array()
        .is_some_and(|buckets| !buckets.is_empty()));
}
