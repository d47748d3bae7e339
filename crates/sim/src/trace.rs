//! Chrome/Perfetto trace output (the JSON "Trace Event Format"): one track
//! per core with guest-mode spans, exits by reason, interrupts raised and
//! handled.

use serde::Serialize;

/// Only the start of each run is traced: enough to see every mechanism at
/// work, small enough for a trace viewer.
const TRACE_WINDOW_NS: u64 = 20_000_000;
/// Events kept at most per run, whatever the rate.
const MAX_EVENTS: usize = 200_000;

#[derive(Serialize)]
struct TraceEvent {
    name: String,
    ph: &'static str,
    ts: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    tid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
}

#[derive(Default)]
pub struct Trace {
    events: Vec<TraceEvent>,
    run: u32,
}

impl Trace {
    fn push(&mut self, event: TraceEvent) {
        if self.events.len() < MAX_EVENTS {
            self.events.push(event);
        }
    }

    pub(crate) fn span(&mut self, core: usize, start_ns: u64, end_ns: u64, name: &str) {
        if start_ns >= TRACE_WINDOW_NS || end_ns == start_ns {
            return;
        }
        self.push(TraceEvent {
            name: name.to_string(),
            ph: "X",
            ts: start_ns as f64 / 1000.0,
            dur: Some((end_ns - start_ns) as f64 / 1000.0),
            pid: self.run,
            tid: core as u32,
            s: None,
        });
    }

    pub(crate) fn instant(&mut self, core: usize, at_ns: u64, what: &str, vector: u8) {
        if at_ns >= TRACE_WINDOW_NS {
            return;
        }
        let name = if vector == 0 {
            what.to_string()
        } else {
            format!("{what} {vector:#04x}")
        };
        self.push(TraceEvent {
            name,
            ph: "i",
            ts: at_ns as f64 / 1000.0,
            dur: None,
            pid: self.run,
            tid: core as u32,
            s: Some("t"),
        });
    }
}

/// The traces of a scenario's runs, one process per run.
#[derive(Default)]
pub struct TraceFile {
    events: Vec<serde_json::Value>,
}

impl TraceFile {
    pub(crate) fn add_run(&mut self, run: u32, label: &str, cores: usize, mut trace: Trace) {
        trace.run = run;
        self.events.push(serde_json::json!({
            "name": "process_name", "ph": "M", "pid": run, "args": {"name": label}
        }));
        for core in 0..cores {
            self.events.push(serde_json::json!({
                "name": "thread_name", "ph": "M", "pid": run, "tid": core,
                "args": {"name": format!("core {core}")}
            }));
        }
        for mut event in trace.events {
            event.pid = run;
            if let Ok(value) = serde_json::to_value(&event) {
                self.events.push(value);
            }
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "traceEvents": self.events, "displayTimeUnit": "ns" })
    }
}
