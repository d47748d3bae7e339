//! A real run's timeline (`dirq_vmm::trace::RunTrace`) as a Chrome /
//! Perfetto trace, in the trace-event JSON of the simulated trace
//! (`dirq_sim::trace`): one process for the run, a track per vCPU thread
//! ("vCPU 0", ...) and one for the device thread ("device"). A vCPU's
//! track alternates "guest" slices (inside KVM_RUN: the guest and every
//! exit KVM handles itself) with slices named by the VMX reason of the
//! exit that returned to the VMM, lasting until the next KVM_RUN. Each
//! raise on the device track has, where the VMM's LAPIC injects at
//! KVM_RUN entries, a flow arrow to the first entry after it (the one
//! that injects it). Where KVM's LAPIC delivers, no return to the VMM
//! takes part and raises have no arrow.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use dirq_sim::trace::TraceEvent;
use dirq_stats::f64_of;
use dirq_vmm::config::{BenchParams, Irqchip};
use dirq_vmm::exits::VmxExit;
use dirq_vmm::trace::{KvmRun, RunTrace, Tracing};

use crate::common::progress::StepFailure;
use crate::common::real::RealCase;

/// A slice on track `track` from `from_ns` to `to_ns`.
fn slice(name: &str, cat: &'static str, track: usize, from_ns: u64, to_ns: u64) -> TraceEvent {
    let mut event = TraceEvent::new(name.into(), cat, "X", track, from_ns);
    event.dur = Some(f64_of(to_ns.saturating_sub(from_ns)) / 1e3);
    event
}

/// One end of raise `id`'s arrow: its start (`s`) at the raise, its end
/// (`f`) bound to the slice that encloses it.
fn flow(ph: &'static str, id: u64, track: usize, at_ns: u64) -> TraceEvent {
    let mut event = TraceEvent::new("interrupt".into(), "flow", ph, track, at_ns);
    event.id = Some(id);
    event.bp = (ph == "f").then_some("e");
    event
}

/// Event arguments from a JSON object literal.
fn args(value: Value) -> serde_json::Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}

/// Who injects the run's interrupts, which decides its arrows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injector {
    /// The VMM's LAPIC, at a KVM_RUN entry: each raise flows to one.
    VmmAtEntry,
    /// KVM's LAPIC (kernel or split irqchip), inside KVM_RUN.
    Kvm,
}

impl Injector {
    fn of(irqchip: Irqchip) -> Self {
        match irqchip {
            Irqchip::Userspace => Injector::VmmAtEntry,
            Irqchip::Kernel | Irqchip::Split => Injector::Kvm,
        }
    }
}

/// What one traced run's file holds, for the report's table.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceCounts {
    pub raises: usize,
    /// KVM_RUN returns recorded, all vCPUs.
    pub exits: usize,
    /// Raises with an arrow to the entry that delivered them.
    pub flows: usize,
    /// Records that did not fit the recorder's tracks.
    pub dropped: u64,
}

/// The vCPU and entry time of the first KVM_RUN entry at or after `at_ns`
/// and before `until_ns`, on any vCPU.
fn first_entry(trace: &RunTrace, at_ns: u64, until_ns: u64) -> Option<(usize, u64)> {
    trace
        .vcpus
        .iter()
        .enumerate()
        .filter_map(|(cpu, track)| {
            let runs = &track.records;
            let index = runs.partition_point(|run| run.entered_ns < at_ns);
            runs.get(index)
                .map(|run| (cpu, run.entered_ns))
                .filter(|(_, entered)| *entered < until_ns)
        })
        .min_by_key(|(_, entered)| *entered)
}

fn vcpu_events(cpu: usize, runs: &[KvmRun], events: &mut Vec<TraceEvent>) {
    let next_entries = runs.iter().skip(1).map(|run| Some(run.entered_ns));
    for (run, next_entry) in runs.iter().zip(next_entries.chain([None])) {
        events.push(slice(
            "guest",
            "kvm_run",
            cpu,
            run.entered_ns,
            run.returned_ns,
        ));
        // The last return has no next entry: the run ended there.
        let Some(next_entry) = next_entry else {
            continue;
        };
        let reason = VmxExit::from(run.exit);
        let mut exit = slice(reason.name(), "exit", cpu, run.returned_ns, next_entry);
        exit.args = args(json!({
            "reason": reason.name(),
            "kvm_exit": run.exit.name(),
            "vcpu": cpu,
            "vmm_ns": next_entry.saturating_sub(run.returned_ns),
        }));
        events.push(exit);
    }
}

/// The trace file of one run, named `label`, and what it holds.
pub fn trace_json(label: &str, trace: &RunTrace, injector: Injector) -> (Value, TraceCounts) {
    let device = trace.vcpus.len();
    let mut metadata = vec![
        json!({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": label}}),
        json!({"name": "thread_name", "ph": "M", "pid": 0, "tid": device, "args": {"name": "device"}}),
    ];
    let mut events = Vec::new();
    for (cpu, track) in trace.vcpus.iter().enumerate() {
        metadata.push(json!({
            "name": "thread_name", "ph": "M", "pid": 0, "tid": cpu,
            "args": {"name": format!("vCPU {cpu}")}
        }));
        vcpu_events(cpu, &track.records, &mut events);
    }
    let raises = &trace.raises.records;
    let next_raises = raises.iter().skip(1).copied().chain([u64::MAX]);
    let mut flows = 0;
    for (id, (&raised, next)) in (0_u64..).zip(raises.iter().zip(next_raises)) {
        let mut raise = slice("raise", "irq", device, raised, raised);
        raise.args = args(json!({"raise": id}));
        events.push(raise);
        let delivery = match injector {
            Injector::VmmAtEntry => first_entry(trace, raised, next),
            Injector::Kvm => None,
        };
        if let Some((cpu, entered)) = delivery {
            events.push(flow("s", id, device, raised));
            events.push(flow("f", id, cpu, entered));
            flows += 1;
        }
    }
    let dropped = trace.raises.dropped + trace.vcpus.iter().map(|t| t.dropped).sum::<u64>();
    let counts = TraceCounts {
        raises: raises.len(),
        exits: trace.vcpus.iter().map(|t| t.records.len()).sum(),
        flows,
        dropped,
    };
    let mut all: Vec<Value> = metadata;
    all.extend(events.iter().filter_map(|e| serde_json::to_value(e).ok()));
    let file = json!({
        "traceEvents": all,
        "displayTimeUnit": "ns",
        "otherData": {"run": label, "dropped_records": dropped},
    });
    (file, counts)
}

/// A traced run's watchdog: it repeats a run that already passed.
const TRACED_RUN_TIMEOUT_MS: u64 = 10_000;

/// The irq-latency runs worth a trace: the userspace path, and the
/// in-kernel path with the lowest median p50.
pub fn traced_cases(cases: &[RealCase]) -> Vec<&RealCase> {
    let irq: Vec<&RealCase> = cases
        .iter()
        .filter(|case| matches!(case.config.params, BenchParams::IrqLatency(_)))
        .collect();
    let userspace = irq
        .iter()
        .find(|case| case.config.common.irqchip == Irqchip::Userspace);
    let best_in_kernel = irq
        .iter()
        .filter(|case| case.config.common.irqchip != Irqchip::Userspace)
        .filter_map(|case| Some((*case, case.p50()?.median)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(case, _)| case);
    userspace
        .copied()
        .into_iter()
        .chain(best_in_kernel)
        .collect()
}

/// `traces/real-irq-latency-kernel-irqfd.json`'s name for a case.
fn file_name(case: &RealCase) -> String {
    let slug: String = format!("{} {}", case.bench(), case.label)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let words: Vec<&str> = slug.split('-').filter(|w| !w.is_empty()).collect();
    format!("real-{}.json", words.join("-"))
}

/// Runs `case` once more with the recorder on and writes its trace into `dir`.
fn write_one(dir: &Path, case: &RealCase) -> Result<(String, TraceCounts)> {
    let BenchParams::IrqLatency(params) = &case.config.params else {
        bail!("only irq-latency records a trace");
    };
    let mut config = case.config.clone();
    config.common.timeout_ms = Some(
        config
            .common
            .timeout_ms
            .map_or(TRACED_RUN_TIMEOUT_MS, |ms| ms.min(TRACED_RUN_TIMEOUT_MS)),
    );
    let (_, trace) = dirq_vmm::bench::irq_latency::run_traced(&config, params, Tracing::default())
        .with_context(|| format!("traced run of {}", case.command))?;
    let name = file_name(case);
    let (file, counts) = trace_json(
        &format!("{}: {}", case.bench(), case.label),
        &trace,
        Injector::of(config.common.irqchip),
    );
    crate::output::write_atomic(&dir.join(&name), &serde_json::to_vec(&file)?)?;
    Ok((name, counts))
}

/// One representative real run, traced again and written.
pub struct WrittenTrace<'a> {
    pub case: &'a RealCase,
    /// The file's name in the traces directory.
    pub file: String,
    pub counts: TraceCounts,
}

/// Traces the representative real runs into `dir`; the traces written,
/// and a failure per trace that could not be.
pub fn write_real_traces<'a>(
    dir: &Path,
    cases: &'a [RealCase],
) -> (Vec<WrittenTrace<'a>>, Vec<StepFailure>) {
    let mut written = Vec::new();
    let mut failures = Vec::new();
    for case in traced_cases(cases) {
        match write_one(dir, case) {
            Ok((file, counts)) => written.push(WrittenTrace { case, file, counts }),
            Err(err) => failures.push(StepFailure {
                configuration: case.label.clone(),
                reason: format!("real-run trace not written: {err:#}"),
                command: Some(case.command.clone()),
            }),
        }
    }
    (written, failures)
}

#[cfg(test)]
mod tests {
    use dirq_vmm::exits::UserspaceExit;
    use dirq_vmm::trace::Track;

    use super::*;

    fn run(entered_ns: u64, returned_ns: u64, exit: UserspaceExit) -> KvmRun {
        KvmRun {
            entered_ns,
            returned_ns,
            exit,
        }
    }

    fn fabricated() -> RunTrace {
        RunTrace {
            vcpus: vec![
                Track {
                    records: vec![
                        run(0, 1_000, UserspaceExit::Hlt),
                        run(5_000, 6_000, UserspaceExit::MsrWrite),
                        run(6_500, 9_000, UserspaceExit::Io),
                    ],
                    dropped: 0,
                },
                Track {
                    records: vec![run(100, 20_000, UserspaceExit::Io)],
                    dropped: 2,
                },
            ],
            raises: Track {
                // The first is delivered at the entry at 5 us; the second
                // has no entry before the last; the last none at all.
                records: vec![4_000, 6_600, 7_000],
                dropped: 0,
            },
        }
    }

    fn events(file: &Value) -> &Vec<Value> {
        file["traceEvents"].as_array().expect("traceEvents")
    }

    /// The events whose `field` is `value`.
    fn having<'a>(file: &'a Value, field: &str, value: &str) -> Vec<&'a Value> {
        events(file).iter().filter(|e| e[field] == value).collect()
    }

    #[test]
    fn tracks_are_named_vcpus_and_device() {
        let (file, _) = trace_json("irq-latency userspace", &fabricated(), Injector::VmmAtEntry);
        let names: Vec<(u64, &str)> = events(&file)
            .iter()
            .filter(|e| e["name"] == "thread_name")
            .map(|e| {
                let tid = e["tid"].as_u64().expect("tid");
                (tid, e["args"]["name"].as_str().expect("name"))
            })
            .collect();
        assert!(names.contains(&(0, "vCPU 0")));
        assert!(names.contains(&(1, "vCPU 1")));
        assert!(names.contains(&(2, "device")));
        let process = events(&file)
            .iter()
            .find(|e| e["name"] == "process_name")
            .expect("process name");
        assert_eq!(process["args"]["name"], "irq-latency userspace");
    }

    #[test]
    fn an_exit_is_the_vmm_slice_until_the_next_entry_named_by_its_vmx_reason() {
        let (file, counts) = trace_json("x", &fabricated(), Injector::VmmAtEntry);
        let exits: Vec<&Value> = having(&file, "cat", "exit");
        // vCPU 0: two exits with a next entry; its last and vCPU 1's only
        // return end the run.
        assert_eq!(exits.len(), 2);
        assert_eq!(exits[0]["name"], "HLT");
        assert_eq!(exits[0]["ts"], 1.0);
        assert_eq!(exits[0]["dur"], 4.0);
        assert_eq!(exits[0]["args"]["kvm_exit"], "hlt");
        assert_eq!(exits[1]["name"], "MSR_WRITE");
        assert_eq!(exits[1]["args"]["vmm_ns"], 500);
        let guest = having(&file, "name", "guest").len();
        assert_eq!(guest, 4);
        assert_eq!(counts.exits, 4);
        assert_eq!(counts.dropped, 2);
    }

    #[test]
    fn each_raise_flows_to_the_first_entry_before_the_next_raise() {
        let (file, counts) = trace_json("x", &fabricated(), Injector::VmmAtEntry);
        let flows: Vec<&Value> = having(&file, "cat", "flow");
        let starts: Vec<_> = flows.iter().filter(|e| e["ph"] == "s").collect();
        let ends: Vec<_> = flows.iter().filter(|e| e["ph"] == "f").collect();
        // Raise 0 at 4 us -> vCPU 0's entry at 5 us. Raise 1 at 6.6 us:
        // no entry before raise 2 at 7 us. Raise 2: none after it.
        assert_eq!((starts.len(), ends.len()), (1, 1));
        assert_eq!(starts[0]["tid"], 2);
        assert_eq!(starts[0]["ts"], 4.0);
        assert_eq!(ends[0]["id"], starts[0]["id"]);
        assert_eq!(
            (ends[0]["tid"].as_u64(), ends[0]["ts"].as_f64()),
            (Some(0), Some(5.0))
        );
        assert_eq!(ends[0]["bp"], "e");
        assert_eq!((counts.raises, counts.flows), (3, 1));
        let raises = having(&file, "name", "raise").len();
        assert_eq!(raises, 3);
        // Where KVM's LAPIC injects, an entry after a raise is no delivery.
        let (file, counts) = trace_json("x", &fabricated(), Injector::Kvm);
        assert_eq!(counts.flows, 0);
        assert!(events(&file).iter().all(|e| e["cat"] != "flow"));
    }

    #[test]
    fn every_event_has_the_fields_of_the_simulated_trace() {
        let (file, _) = trace_json("x", &fabricated(), Injector::VmmAtEntry);
        assert_eq!(file["displayTimeUnit"], "ns");
        for event in events(&file) {
            assert!(event["ph"].is_string() && event["pid"].is_u64(), "{event}");
            if event["ph"] != "M" {
                assert!(event["ts"].is_f64() && event["tid"].is_u64(), "{event}");
                assert!(event["cat"].is_string() && event["name"].is_string());
            }
            if event["ph"] == "X" {
                assert!(event["dur"].as_f64().is_some_and(|d| d >= 0.0), "{event}");
            }
        }
    }
}
