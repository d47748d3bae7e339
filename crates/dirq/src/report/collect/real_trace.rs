//! A real run's timeline (`dirq_vmm::trace::RunTrace`) as a Chrome /
//! Perfetto trace, in the trace-event JSON of the simulated trace
//! (`dirq_sim::trace`), beside its simulated twins: one file per
//! configuration, the real run as process 0, each twin a process of its
//! own, every process named with what ran it (this host, or the twin's
//! design and cost profile).
//!
//! The real run's tracks: "vCPU n" alternates "guest" slices (inside
//! KVM_RUN: the guest and every exit KVM handles itself) with slices named
//! by the VMX reason of the exit that returned to the VMM, lasting until
//! the next KVM_RUN; "vCPU n · in KVM" holds, per round trip, what KVM's
//! statistics counted on that vCPU between the raise and the
//! acknowledgement (the exits no KVM_RUN return shows); "device" holds
//! each round trip, from the raise to the acknowledgement the device saw.
//! One flow arrow per round trip leads from the raise through the exits
//! between (KVM's count, then each return to the VMM) to the guest's
//! acknowledgement, on every path.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use dirq_sim::trace::TraceEvent;
use dirq_sim::CostProfile;
use dirq_stats::f64_of;
use dirq_vmm::config::{BenchParams, Named};
use dirq_vmm::exits::{KvmStat, VmxExit};
use dirq_vmm::trace::{Ack, KvmRun, RunTrace, Tracing};

use crate::calibrate::costs::HostCosts;
use crate::common::progress::StepFailure;
use crate::common::real::RealCase;
use crate::report::collect::twins;

/// A slice on track `track` from `from_ns` to `to_ns`.
fn slice(name: &str, cat: &'static str, track: usize, from_ns: u64, to_ns: u64) -> TraceEvent {
    let mut event = TraceEvent::new(name.into(), cat, "X", track, from_ns);
    event.dur = Some(f64_of(to_ns.saturating_sub(from_ns)) / 1e3);
    event
}

/// One point of round trip `id`'s arrow: its start (`s`), a step (`t`) or
/// its end (`f`), each bound to the slice that encloses it.
fn flow(ph: &'static str, id: u64, track: usize, at_ns: u64) -> TraceEvent {
    let mut event = TraceEvent::new("interrupt".into(), "flow", ph, track, at_ns);
    event.id = Some(id);
    event.bp = (ph != "s").then_some("e");
    event
}

/// Event arguments from a JSON object literal.
fn args(value: Value) -> serde_json::Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}

/// What one traced run's file holds, for the report's table.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceCounts {
    pub raises: usize,
    /// KVM_RUN returns recorded, all vCPUs.
    pub exits: usize,
    /// Round trips with an arrow from the raise to the acknowledgement.
    pub flows: usize,
    /// Exits KVM counted between raises and acknowledgements, all vCPUs.
    pub kvm_exits: u64,
    /// Records that did not fit the recorder's tracks.
    pub dropped: u64,
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

/// The vCPU that took round trip `ack`'s interrupt: the one whose KVM
/// counted the most exits meanwhile (vCPU 0 without any).
fn target_vcpu(ack: &Ack) -> usize {
    ack.kvm
        .iter()
        .filter(|(_, stat, _)| *stat == KvmStat::Exits)
        .max_by_key(|(_, _, count)| *count)
        .map_or(0, |(cpu, _, _)| *cpu)
}

/// The exits that returned to the VMM on any vCPU within `[from, to)`:
/// (vCPU, when the exit's slice starts).
fn vmm_exits_between(trace: &RunTrace, from_ns: u64, to_ns: u64) -> Vec<(usize, u64)> {
    let mut exits: Vec<(usize, u64)> = trace
        .vcpus
        .iter()
        .enumerate()
        .flat_map(|(cpu, track)| {
            // The last return of a track has no exit slice after it.
            let runs = &track.records[..track.records.len().saturating_sub(1)];
            let first = runs.partition_point(|run| run.returned_ns < from_ns);
            runs[first..]
                .iter()
                .take_while(move |run| run.returned_ns < to_ns)
                .map(move |run| (cpu, run.returned_ns))
        })
        .collect();
    exits.sort_by_key(|&(_, at)| at);
    exits
}

/// The trace events of one real run, named `label`, as process 0, and
/// what they hold.
pub fn trace_json(label: &str, trace: &RunTrace) -> (Vec<Value>, TraceCounts) {
    let vcpus = trace.vcpus.len();
    let device = vcpus;
    let in_kvm = |cpu: usize| vcpus + 1 + cpu;
    let mut metadata = vec![
        json!({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": label}}),
        json!({"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}}),
        json!({"name": "thread_name", "ph": "M", "pid": 0, "tid": device, "args": {"name": "device"}}),
    ];
    let mut events = Vec::new();
    for (cpu, track) in trace.vcpus.iter().enumerate() {
        metadata.push(json!({
            "name": "thread_name", "ph": "M", "pid": 0, "tid": cpu,
            "args": {"name": format!("vCPU {cpu}")}
        }));
        metadata.push(json!({
            "name": "thread_name", "ph": "M", "pid": 0, "tid": in_kvm(cpu),
            "args": {"name": format!("vCPU {cpu} · in KVM")}
        }));
        vcpu_events(cpu, &track.records, &mut events);
    }
    let mut flows = 0;
    let mut kvm_exits = 0;
    // The device raises the next interrupt only once the last was
    // acknowledged: raise k pairs with acknowledgement k.
    for (id, (&raised, ack)) in (0_u64..).zip(trace.raises.records.iter().zip(&trace.acks.records))
    {
        let acked = ack.at_ns.max(raised);
        let mut round_trip = slice("round trip", "irq", device, raised, acked);
        round_trip.args = args(json!({
            "raise": id,
            "round_trip_us": f64_of(acked - raised) / 1e3,
        }));
        events.push(round_trip);
        events.push(flow("s", id, device, raised));
        // What KVM counted on each vCPU between the raise and the ack.
        for cpu in 0..vcpus {
            let counted: Vec<(KvmStat, u64)> = ack
                .kvm
                .iter()
                .filter(|(of, _, _)| *of == cpu)
                .map(|&(_, stat, count)| (stat, count))
                .collect();
            let exits = counted
                .iter()
                .find(|(stat, _)| *stat == KvmStat::Exits)
                .map_or(0, |(_, count)| *count);
            if exits == 0 {
                continue;
            }
            kvm_exits += exits;
            let mut counted_slice = slice(
                &format!(
                    "KVM counted {exits} exit{}",
                    if exits == 1 { "" } else { "s" }
                ),
                "kvm",
                in_kvm(cpu),
                raised,
                acked,
            );
            counted_slice.args = counted
                .iter()
                .map(|(stat, count)| (stat.name().to_string(), Value::from(*count)))
                .collect();
            events.push(counted_slice);
            events.push(flow("t", id, in_kvm(cpu), raised));
        }
        for (cpu, at) in vmm_exits_between(trace, raised, acked) {
            events.push(flow("t", id, cpu, at));
        }
        let target = target_vcpu(ack);
        let mut acknowledged = slice("acknowledged", "irq", target, acked, acked);
        acknowledged.args = args(json!({"raise": id}));
        events.push(acknowledged);
        events.push(flow("f", id, target, acked));
        flows += 1;
    }
    let dropped = trace.raises.dropped
        + trace.acks.dropped
        + trace.vcpus.iter().map(|t| t.dropped).sum::<u64>();
    let counts = TraceCounts {
        raises: trace.raises.records.len(),
        exits: trace.vcpus.iter().map(|t| t.records.len()).sum(),
        flows,
        kvm_exits,
        dropped,
    };
    let mut all: Vec<Value> = metadata;
    all.extend(events.iter().filter_map(|e| serde_json::to_value(e).ok()));
    (all, counts)
}

/// Flow ids of the twins' processes start here, past any real run's.
const TWIN_FLOW_IDS: u64 = 1 << 48;

/// The simulated twins' trace events as processes after the real run's:
/// each pid one up, its flows renumbered, each named with its design and
/// the cost profile it ran on.
fn twin_processes(twins: &Value, profile: &str) -> Vec<Value> {
    let events = twins["traceEvents"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    events
        .iter()
        .map(|event| {
            let mut event = event.clone();
            if let Some(pid) = event["pid"].as_u64() {
                event["pid"] = json!(pid + 1);
                if event["name"] == "process_sort_index" {
                    event["args"]["sort_index"] = json!(pid + 1);
                }
            }
            if let Some(id) = event["id"].as_u64() {
                event["id"] = json!(TWIN_FLOW_IDS + id);
            }
            if event["ph"] == "M" && event["name"] == "process_name" {
                let design = event["args"]["name"].as_str().unwrap_or("").to_string();
                event["args"]["name"] =
                    json!(format!("twin (simulated, profile {profile}): {design}"));
            }
            event
        })
        .collect()
}

/// A traced run is one more run of its configuration, this many
/// round trips at most: enough to see every path, small enough to open.
const TRACED_EVENTS: u64 = 300;

/// A traced run's watchdog: it repeats a run that already passed.
const TRACED_RUN_TIMEOUT_MS: u64 = 10_000;

/// Simulated time of a twin in the trace: the simulator traces its first
/// 20 ms.
const TWIN_TRACE_MS: u64 = 20;

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

/// What the real half's traces are made with: the host's name for its
/// own process, and the twins' costs.
pub struct TraceInputs<'a> {
    /// "kvm_pvm, native": the host the real run ran on.
    pub host: String,
    /// The calibrated profile and costs the twins run with, and the
    /// profile's file name; none without a calibration (no twins).
    pub twins: Option<(&'a CostProfile, &'a HostCosts, &'a str)>,
    /// Some real PV EOI run on this host skipped an EOI.
    pub host_flags_pv_eoi: bool,
    pub seed: u64,
}

/// Runs `case` once more with the recorder on, simulates its twins with
/// their trace on, and writes both into one file in `dir`.
fn write_one(dir: &Path, case: &RealCase, inputs: &TraceInputs) -> Result<WrittenTrace> {
    let BenchParams::IrqLatency(params) = &case.config.params else {
        bail!("only irq-latency records a trace");
    };
    let mut config = case.config.clone();
    let mut params = params.clone();
    params.count = params.count.min(TRACED_EVENTS);
    config.params = BenchParams::IrqLatency(params.clone());
    config.common.timeout_ms = Some(
        config
            .common
            .timeout_ms
            .map_or(TRACED_RUN_TIMEOUT_MS, |ms| ms.min(TRACED_RUN_TIMEOUT_MS)),
    );
    let (_, trace) = dirq_vmm::bench::irq_latency::run_traced(&config, &params, Tracing::default())
        .with_context(|| format!("traced run of {}", case.command))?;
    let (mut events, counts) = trace_json(
        &format!(
            "real run on this host ({}): {} {}",
            inputs.host,
            case.bench(),
            case.label
        ),
        &trace,
    );
    let twins = match inputs.twins {
        Some((profile, costs, file)) => {
            let flags = inputs.host_flags_pv_eoi;
            match twins::trace_twins(case, profile, costs, flags, inputs.seed, TWIN_TRACE_MS)? {
                Ok(twins) => {
                    events.extend(twin_processes(&twins, file));
                    Twins::Traced
                }
                Err(why) => Twins::None(why.to_string()),
            }
        }
        None => Twins::None("no calibration, so no twin".into()),
    };
    let name = file_name(case);
    let file = json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"run": case.command, "dropped_records": counts.dropped},
    });
    crate::output::write_atomic(&dir.join(&name), &serde_json::to_vec(&file)?)?;
    Ok(WrittenTrace {
        case_label: case.label.clone(),
        file: name,
        counts,
        twins,
    })
}

/// Whether a trace holds its configuration's twins.
#[derive(Debug, Clone, PartialEq)]
pub enum Twins {
    Traced,
    /// Why not.
    None(String),
}

/// One real configuration, traced again and written with its twins.
pub struct WrittenTrace {
    pub case_label: String,
    /// The file's name in the traces directory.
    pub file: String,
    pub counts: TraceCounts,
    pub twins: Twins,
}

/// Traces every irq-latency configuration into `dir`; the traces
/// written, and a failure per trace that could not be.
pub fn write_real_traces(
    dir: &Path,
    cases: &[RealCase],
    inputs: &TraceInputs,
) -> (Vec<WrittenTrace>, Vec<StepFailure>) {
    let mut written = Vec::new();
    let mut failures = Vec::new();
    for case in cases
        .iter()
        .filter(|case| matches!(case.config.params, BenchParams::IrqLatency(_)))
    {
        match write_one(dir, case, inputs) {
            Ok(trace) => written.push(trace),
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
                records: vec![4_000, 5_800],
                dropped: 0,
            },
            // The first round trip: KVM counted three exits on vCPU 0, one
            // of them an HLT; the second: none, one return to the VMM.
            acks: Track {
                records: vec![
                    Ack {
                        at_ns: 5_500,
                        kvm: vec![(0, KvmStat::Exits, 3), (0, KvmStat::HaltExits, 1)],
                    },
                    Ack {
                        at_ns: 6_400,
                        kvm: Vec::new(),
                    },
                ],
                dropped: 0,
            },
        }
    }

    /// The events whose `field` is `value`.
    fn having<'a>(events: &'a [Value], field: &str, value: &str) -> Vec<&'a Value> {
        events.iter().filter(|e| e[field] == value).collect()
    }

    #[test]
    fn tracks_are_named_vcpus_their_kvm_counts_and_device() {
        let (events, _) = trace_json("real run on this host (kvm_pvm): x", &fabricated());
        let names: Vec<(u64, &str)> = having(&events, "name", "thread_name")
            .iter()
            .map(|e| {
                let tid = e["tid"].as_u64().expect("tid");
                (tid, e["args"]["name"].as_str().expect("name"))
            })
            .collect();
        for track in [
            (0, "vCPU 0"),
            (1, "vCPU 1"),
            (2, "device"),
            (3, "vCPU 0 · in KVM"),
            (4, "vCPU 1 · in KVM"),
        ] {
            assert!(names.contains(&track), "{track:?} in {names:?}");
        }
        let process = having(&events, "name", "process_name");
        assert_eq!(
            process[0]["args"]["name"],
            "real run on this host (kvm_pvm): x"
        );
    }

    #[test]
    fn an_exit_is_the_vmm_slice_until_the_next_entry_named_by_its_vmx_reason() {
        let (events, counts) = trace_json("x", &fabricated());
        let exits = having(&events, "cat", "exit");
        // vCPU 0: two exits with a next entry; its last and vCPU 1's only
        // return end the run.
        assert_eq!(exits.len(), 2);
        assert_eq!(exits[0]["name"], "HLT");
        assert_eq!(exits[0]["ts"], 1.0);
        assert_eq!(exits[0]["dur"], 4.0);
        assert_eq!(exits[0]["args"]["kvm_exit"], "hlt");
        assert_eq!(exits[1]["name"], "MSR_WRITE");
        assert_eq!(exits[1]["args"]["vmm_ns"], 500);
        assert_eq!(having(&events, "name", "guest").len(), 4);
        assert_eq!((counts.exits, counts.dropped), (4, 2));
    }

    #[test]
    fn every_round_trip_flows_from_the_raise_through_its_exits_to_the_acknowledgement() {
        let (events, counts) = trace_json("x", &fabricated());
        assert_eq!((counts.raises, counts.flows, counts.kvm_exits), (2, 2, 3));
        let points = |id: u64| -> Vec<(String, u64, f64)> {
            having(&events, "cat", "flow")
                .iter()
                .filter(|e| e["id"] == id)
                .map(|e| {
                    (
                        e["ph"].as_str().expect("ph").to_string(),
                        e["tid"].as_u64().expect("tid"),
                        e["ts"].as_f64().expect("ts"),
                    )
                })
                .collect()
        };
        // The first: the raise on the device, KVM's three exits on vCPU 0,
        // the acknowledgement on vCPU 0 (where KVM counted them).
        assert_eq!(
            points(0),
            [
                ("s".to_string(), 2, 4.0),
                ("t".to_string(), 3, 4.0),
                ("f".to_string(), 0, 5.5)
            ]
        );
        // The second: through the MSR write that returned to the VMM.
        assert_eq!(
            points(1),
            [
                ("s".to_string(), 2, 5.8),
                ("t".to_string(), 0, 6.0),
                ("f".to_string(), 0, 6.4)
            ]
        );
        let kvm = having(&events, "cat", "kvm");
        assert_eq!(kvm.len(), 1);
        assert_eq!(kvm[0]["name"], "KVM counted 3 exits");
        assert_eq!(kvm[0]["args"]["halt_exits"], 1);
        let round_trips = having(&events, "name", "round trip");
        assert_eq!(round_trips[0]["dur"], 1.5);
        // Every end binds to the slice that encloses it.
        for point in having(&events, "cat", "flow") {
            assert_eq!(point["bp"].is_null(), point["ph"] == "s", "{point}");
        }
    }

    #[test]
    fn every_event_has_the_fields_of_the_simulated_trace() {
        let (events, _) = trace_json("x", &fabricated());
        for event in &events {
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

    #[test]
    fn twins_follow_the_real_run_each_named_with_its_design_and_profile() {
        let twins = json!({"traceEvents": [
            {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "vanilla udp-rx"}},
            {"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}},
            {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "did udp-rx"}},
            {"name": "interrupt", "cat": "flow", "ph": "s", "pid": 1, "tid": 0, "ts": 1.0, "id": 7}
        ]});
        let events = twin_processes(&twins, "host-profile.toml");
        assert_eq!(events[0]["pid"], 1);
        assert_eq!(
            events[0]["args"]["name"],
            "twin (simulated, profile host-profile.toml): vanilla udp-rx"
        );
        assert_eq!(events[1]["args"]["sort_index"], 1);
        assert_eq!(events[2]["pid"], 2);
        assert_eq!(events[3]["id"], TWIN_FLOW_IDS + 7);
    }
}
