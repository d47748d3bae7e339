//! What a run records, beside its parts' own state: the invariant
//! checker's ledger of every interrupt, the run's counters and, when asked
//! for, the Perfetto trace. Every part reports to it; none reads it.

use super::checker::Checker;
use super::topology::Topology;
use crate::metrics::ExitReason;
use crate::trace::Trace;

#[derive(Default)]
pub(crate) struct Counters {
    pub exits: [u64; ExitReason::ALL.len()],
    pub packets_processed: u64,
    pub requests_done: u64,
    pub latencies: Vec<u64>,
    pub guest_ns: u64,
    pub asleep_ns: u64,
    pub guest_core_ns: u64,
    pub spin_ns: u64,
    pub events: u64,
    /// Guest timer expiries that found their core in host mode.
    pub timer_irqs_in_host_mode: u64,
    /// Guest EOIs PV EOI skipped.
    pub pv_eoi_skips: u64,
}

impl Counters {
    /// A request (a block read, a transaction) is done, `latency` after
    /// it started.
    pub(crate) fn request_done(&mut self, latency: u64) {
        self.latencies.push(latency);
        self.requests_done += 1;
    }
}

pub(crate) struct Ledger {
    pub(crate) checker: Checker,
    pub(crate) counters: Counters,
    pub(crate) trace: Option<Trace>,
    /// Per VM, the core its trace instants go on: its first vCPU's.
    vm_cores: Vec<usize>,
}

impl Ledger {
    pub(super) fn new(topology: &Topology, trace: bool) -> Ledger {
        Ledger {
            checker: Checker::new(topology.vm_count(), topology.vcpu_count()),
            counters: Counters::default(),
            trace: trace.then(Trace::default),
            vm_cores: (0..topology.vm_count())
                .map(|vm| topology.home_core(topology.lead(vm)))
                .collect(),
        }
    }

    /// An interrupt is raised for `vm` at `now`.
    pub(super) fn raise(&mut self, vm: usize, vector: u8, now: u64) {
        self.checker.raise(vm, vector);
        if let Some(trace) = &mut self.trace {
            trace.instant(self.vm_cores[vm], now, "raise", vector);
        }
    }

    /// A structure holding one instance per vector merged a second request.
    pub(super) fn merged(&mut self, vm: usize, vector: u8) {
        self.checker.merged(vm, vector);
    }

    /// A trace instant on `core`, if the run traces.
    pub(super) fn instant(&mut self, core: usize, now: u64, name: &'static str, vector: u8) {
        if let Some(trace) = &mut self.trace {
            trace.instant(core, now, name, vector);
        }
    }
}
