//! Chrome/Perfetto trace output (the JSON "Trace Event Format"): a process
//! per run, a thread per core. A core's time is a row of guest / host /
//! idle slices; an exit is the host slice it starts, named by its reason,
//! with its cost in the args; a flow arrow links each interrupt's raise to
//! the handler that took it.

use std::collections::BTreeMap;

use serde::Serialize;

use dirq_arch::exit::VmxExit;
use dirq_stats::f64_of;

use crate::machine::index_u32;

/// Only the start of each run is traced: enough to see every mechanism at
/// work, small enough for a trace viewer.
const TRACE_WINDOW_NS: u64 = 20_000_000;
/// Events kept at most per run, whatever the rate.
const MAX_EVENTS: usize = 200_000;
/// Flow ids of run `r` start at `r * FLOW_IDS_PER_RUN`, so ids are unique
/// in a file of many runs.
const FLOW_IDS_PER_RUN: u64 = 1 << 32;

/// One event of the trace-event JSON; the real runs' traces (dirq
/// report) are written with it too.
#[derive(Serialize)]
pub struct TraceEvent {
    pub name: String,
    pub cat: &'static str,
    pub ph: &'static str,
    pub ts: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    pub pid: u32,
    pub tid: u32,
    /// Flow events: the arrow's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// Flow ends bind to the slice enclosing them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bp: Option<&'static str>,
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub args: serde_json::Map<String, serde_json::Value>,
}

impl TraceEvent {
    /// An event on track `core` of process 0 at `at_ns`.
    pub fn new(name: String, cat: &'static str, ph: &'static str, core: usize, at_ns: u64) -> Self {
        TraceEvent {
            name,
            cat,
            ph,
            ts: f64_of(at_ns) / 1000.0,
            dur: None,
            pid: 0,
            tid: index_u32(core),
            id: None,
            bp: None,
            args: serde_json::Map::new(),
        }
    }
}

#[derive(Default)]
pub struct Trace {
    events: Vec<TraceEvent>,
    /// Per core: the exit that just happened, waiting for the host slice
    /// it starts.
    pending_exit: BTreeMap<usize, (u64, &'static str)>,
    /// Per vector: the flow ids of raises not handled yet, oldest first.
    raised: BTreeMap<u8, Vec<u64>>,
    next_flow: u64,
}

impl Trace {
    fn push(&mut self, event: TraceEvent) {
        if self.events.len() < MAX_EVENTS {
            self.events.push(event);
        }
    }

    /// A stretch of one mode on a core. The host stretch an exit starts is
    /// that exit: named by its reason, its length the exit's cost.
    pub(crate) fn span(&mut self, core: usize, start_ns: u64, end_ns: u64, name: &str) {
        if start_ns >= TRACE_WINDOW_NS || end_ns == start_ns {
            return;
        }
        let exit = self
            .pending_exit
            .remove(&core)
            .filter(|(at, _)| name == "host" && *at == start_ns)
            .map(|(_, reason)| reason);
        let (name, cat) = match exit {
            Some(reason) => (reason.to_string(), "exit"),
            None => (name.to_string(), "mode"),
        };
        let mut event = TraceEvent::new(name, cat, "X", core, start_ns);
        event.dur = Some(f64_of(end_ns - start_ns) / 1000.0);
        if let Some(reason) = exit {
            event.args.insert("reason".into(), reason.into());
            event.args.insert("core".into(), core.into());
            event
                .args
                .insert("cost_ns".into(), (end_ns - start_ns).into());
        }
        self.push(event);
    }

    /// An exit: shown as the host slice it starts, named by its reason.
    pub(crate) fn exit(&mut self, core: usize, at_ns: u64, reason: VmxExit) {
        if at_ns < TRACE_WINDOW_NS {
            self.pending_exit.insert(core, (at_ns, reason.name()));
        }
    }

    /// A point event: an interrupt raised or handled (linked by a flow
    /// arrow), or another.
    pub(crate) fn instant(&mut self, core: usize, at_ns: u64, what: &str, vector: u8) {
        if at_ns >= TRACE_WINDOW_NS {
            return;
        }
        let name = if vector == 0 {
            what.to_string()
        } else {
            format!("{what} {vector:#04x}")
        };
        let mut event = TraceEvent::new(name, "irq", "X", core, at_ns);
        event.dur = Some(0.0);
        if vector != 0 {
            event
                .args
                .insert("vector".into(), format!("{vector:#04x}").into());
        }
        event.args.insert("core".into(), core.into());
        self.push(event);
        let flow = match what {
            "raise" => {
                let id = self.next_flow;
                self.next_flow += 1;
                self.raised.entry(vector).or_default().push(id);
                Some((id, "s"))
            }
            // The handler takes the oldest raise; later raises of the same
            // vector merged into it and have no handler of their own.
            "handle" => self
                .raised
                .remove(&vector)
                .and_then(|ids| ids.first().copied())
                .map(|id| (id, "f")),
            _ => None,
        };
        if let Some((id, ph)) = flow {
            let mut arrow = TraceEvent::new("interrupt".into(), "flow", ph, core, at_ns);
            arrow.id = Some(id);
            arrow.bp = (ph == "f").then_some("e");
            self.push(arrow);
        }
    }
}

/// The traces of a scenario's runs, one process per run.
#[derive(Default)]
pub struct TraceFile {
    events: Vec<serde_json::Value>,
}

impl TraceFile {
    pub(crate) fn add_run(&mut self, run: u32, label: &str, cores: usize, trace: Trace) {
        self.events.push(serde_json::json!({
            "name": "process_name", "ph": "M", "pid": run, "args": {"name": label}
        }));
        self.events.push(serde_json::json!({
            "name": "process_sort_index", "ph": "M", "pid": run, "args": {"sort_index": run}
        }));
        for core in 0..cores {
            self.events.push(serde_json::json!({
                "name": "thread_name", "ph": "M", "pid": run, "tid": core,
                "args": {"name": format!("core {core}")}
            }));
        }
        for mut event in trace.events {
            event.pid = run;
            event.id = event.id.map(|id| u64::from(run) * FLOW_IDS_PER_RUN + id);
            if let Ok(value) = serde_json::to_value(&event) {
                self.events.push(value);
            }
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "traceEvents": self.events, "displayTimeUnit": "ns" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(trace: Trace, run: u32) -> Vec<serde_json::Value> {
        let mut file = TraceFile::default();
        file.add_run(run, "vanilla", 1, trace);
        file.to_json()["traceEvents"]
            .as_array()
            .expect("events")
            .clone()
    }

    #[test]
    fn an_exit_is_the_host_slice_it_starts_named_by_its_reason() {
        let mut trace = Trace::default();
        trace.span(0, 0, 1_000, "guest");
        trace.exit(0, 1_000, VmxExit::ExternalInterrupt);
        trace.span(0, 1_000, 3_500, "host");
        trace.span(0, 3_500, 4_000, "guest");
        let events = events(trace, 2);
        let exit = events
            .iter()
            .find(|e| e["cat"] == "exit")
            .expect("an exit slice");
        assert_eq!(exit["name"], "EXTERNAL_INTERRUPT");
        assert_eq!(exit["ph"], "X");
        assert_eq!(exit["dur"], 2.5);
        assert_eq!(exit["args"]["cost_ns"], 2_500);
        assert_eq!(exit["pid"], 2);
        // No separate instant for the exit, and no plain "host" slice.
        assert_eq!(events.iter().filter(|e| e["name"] == "host").count(), 0);
        assert_eq!(
            events
                .iter()
                .filter(|e| e["name"] == "EXTERNAL_INTERRUPT")
                .count(),
            1
        );
    }

    #[test]
    fn a_flow_links_each_raise_to_the_handler_that_took_it() {
        let mut trace = Trace::default();
        trace.instant(0, 100, "raise", 0x41);
        trace.instant(0, 150, "raise", 0x41);
        trace.instant(1, 900, "handle", 0x41);
        trace.instant(1, 950, "handle", 0x51);
        let events = events(trace, 1);
        let flows: Vec<_> = events.iter().filter(|e| e["cat"] == "flow").collect();
        // Two starts (one per raise), one end: the second raise merged.
        let starts: Vec<_> = flows.iter().filter(|e| e["ph"] == "s").collect();
        let ends: Vec<_> = flows.iter().filter(|e| e["ph"] == "f").collect();
        assert_eq!((starts.len(), ends.len()), (2, 1));
        assert_eq!(ends[0]["id"], starts[0]["id"]);
        assert_eq!(ends[0]["tid"], 1);
        assert_eq!(ends[0]["bp"], "e");
        // Ids are unique across the runs of one file.
        assert_eq!(starts[0]["id"], serde_json::json!(FLOW_IDS_PER_RUN));
        let raise = events
            .iter()
            .find(|e| e["name"] == "raise 0x41")
            .expect("raise slice");
        assert_eq!(raise["args"]["vector"], "0x41");
    }
}
