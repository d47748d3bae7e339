//! The workloads behind one interface, [`Workload`]: what a run's guest
//! runs beside its kernel and who talks to it from outside (the remote
//! peers, the clients, the generators). A workload owns its state, reads
//! the machine only through the [`Ctx`] it is handed (the time, the run's
//! random stream and record, the [`Topology`], the few live facts of
//! [`MachineState`]) and acts on it only by listing [`Effect`]s.
//!
//! The machine asks a workload for its guest programs and traffic once,
//! starts it in each VM, hands it its own events, the guest's
//! [`WorkloadStep`]s, the IPIs its guest's ICR writes sent, the packets
//! NAPI takes and the buffers vhost passes on, and reads its results.
//! [`for_run`] is the one place that picks a workload by
//! [`WorkloadKind`]. A new workload is a module here implementing
//! [`Workload`], its line in [`for_run`] and, if it has events of its own,
//! a variant of [`WorkloadEvent`]; it lists the machine's
//! [`Effect`](super::effects::Effect)s.

mod cyclictest;
mod fio;
mod http;
mod ipi;
mod ipi_call;
mod l2fwd;
mod rr;
mod servers;
mod sip;
mod streams;
mod tcp;
mod udp_rx;

use std::collections::BTreeMap;

use super::effects::Effects;
use super::guest::Step;
use super::ledger::Counters;
use super::topology::Topology;
use super::Ring;
use crate::metrics::{Throughput, ThroughputUnit, WorkloadFigures};
use crate::profile::CostProfile;
use crate::rng::Rng;
use crate::scenario::{Arrivals, RunSpec, WorkloadKind};

pub(super) use ipi_call::CallEvent;
pub(super) use l2fwd::PmdEvent;
pub(super) use rr::RemoteEvent;
pub(super) use servers::ClientEvent;
pub(super) use sip::SipEvent;
pub(super) use streams::TcpEvent;

/// The workload a run names, built for its spec and profile.
pub(super) fn for_run(
    spec: &RunSpec,
    profile: &CostProfile,
    topology: &Topology,
) -> Box<dyn Workload> {
    match spec.workload {
        WorkloadKind::Idle | WorkloadKind::Vioapic => Box::new(Idle),
        WorkloadKind::UdpRx | WorkloadKind::Whileloop => {
            Box::new(udp_rx::UdpRx::new(spec, profile))
        }
        WorkloadKind::Cyclictest => Box::new(cyclictest::Cyclictest),
        WorkloadKind::NetperfRr | WorkloadKind::UdpRr => Box::new(rr::Remote::new(spec, profile)),
        WorkloadKind::Iperf | WorkloadKind::Netperf => {
            Box::new(streams::Streams::new(spec, profile, topology))
        }
        WorkloadKind::Fio => Box::new(fio::Fio::default()),
        WorkloadKind::Ipi => Box::new(ipi::Ipi::new(spec)),
        WorkloadKind::IpiCall => Box::new(ipi_call::IpiCall::new(
            topology.vm_count(),
            spec.group.call_targets(),
            spec.group.x2apic,
        )),
        WorkloadKind::Memcached | WorkloadKind::Apache => {
            Box::new(servers::Servers::new(spec, profile, topology))
        }
        WorkloadKind::L2fwd => Box::new(l2fwd::L2fwd::new(profile)),
        WorkloadKind::Sip => Box::new(sip::Sip::new(spec, profile)),
    }
}

/// What a run's workload is to the machine. Every method but the fixed
/// facts has a default that does nothing, so a workload implements what
/// it takes part in.
pub(super) trait Workload {
    /// The programs its guest runs, beside the kernel's own.
    fn programs(&self) -> Programs {
        Programs::default()
    }

    /// What its traffic is to the devices, fixed for the run.
    fn traffic(&self) -> Traffic {
        Traffic::default()
    }

    /// Whether it runs the guest's timer thread (cyclictest's), which a
    /// group's `with_timer` adds to any workload.
    fn runs_timer_thread(&self) -> bool {
        false
    }

    /// Its timer thread's period, if not cyclictest's 1 kHz.
    fn timer_thread_period_ns(&self) -> Option<u64> {
        None
    }

    /// Its first events in `vm`, whose queue-pair owners are `owners`.
    fn start(&mut self, _vm: usize, _owners: &[usize], _ctx: &mut Ctx, _fx: &mut Effects) {}

    /// One of its own events.
    fn on_event(&mut self, _event: WorkloadEvent, _ctx: &mut Ctx, _fx: &mut Effects) {}

    /// `vcpu`'s guest reaches one of its steps.
    fn on_step(
        &mut self,
        _vcpu: usize,
        _step: WorkloadStep,
        _ctx: &mut Ctx,
        _fx: &mut Effects,
    ) -> StepOutcome {
        StepOutcome::Next
    }

    /// A step of its that took time ([`StepOutcome::Takes`]) is done.
    fn step_done(&mut self, _vcpu: usize, _step: WorkloadStep, _ctx: &mut Ctx, _fx: &mut Effects) {}

    /// An ICR write of `sender`'s guest left for `targets` (the vCPUs the
    /// APIC bus routed it to).
    fn on_ipi_sent(&mut self, _sender: usize, _targets: &[usize], _ctx: &mut Ctx) {}

    /// The guest's timer thread read the clock `latency` after the expiry
    /// it waited for.
    fn on_timer_thread(&mut self, _latency: u64, _ctx: &mut Ctx) {}

    /// The guest's work for the packet NAPI takes next from `pair`'s
    /// ring, if it is not a plain datagram's.
    fn rx_work_ns(&self, _pair: usize) -> Option<u64> {
        None
    }

    /// NAPI on `vcpu` took a packet from `pair`'s `ring`; `napi_completes`
    /// when the ring is empty after it.
    fn packet_taken(&mut self, _taken: Taken, _ctx: &mut Ctx, _fx: &mut Effects) {}

    /// vhost passed one of `pair`'s guest's TX buffers on: it is past the
    /// host now.
    fn sent(&mut self, _pair: usize, _ctx: &mut Ctx, _fx: &mut Effects) {}

    /// Its figures beyond the common ones.
    fn figures(&self, _record: &Counters) -> WorkloadFigures {
        WorkloadFigures::default()
    }

    /// Its throughput over a run of `seconds`, if it has one.
    fn throughput(&self, _record: &Counters, _seconds: f64) -> Option<Throughput> {
        None
    }

    /// Run parameters it adds to the result's `params` (what it lost).
    fn params(&self, _params: &mut BTreeMap<String, serde_json::Value>) {}
}

/// The throughput of a workload that counts completed requests: requests
/// done per second of the run, in the `unit` its readers know them by.
fn requests_per_s(record: &Counters, seconds: f64, unit: ThroughputUnit) -> Option<Throughput> {
    Some(Throughput {
        value: dirq_stats::f64_of(record.requests_done) / seconds,
        unit,
    })
}

/// A packet NAPI took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Taken {
    pub(super) vcpu: usize,
    pub(super) pair: usize,
    pub(super) ring: Ring,
    /// The ring is empty after it: NAPI completes and GRO flushes. A poll
    /// that used its weight is polled again and keeps its GRO list (Linux
    /// 3.6's `net_rx_action` flushes nothing on a re-poll; the flush there,
    /// `napi_gro_flush` on `work == weight`, came with 3.7).
    pub(super) napi_completes: bool,
}

/// What a workload is handed at each call: the time, the run's random
/// stream and record, where everything is, and the live facts it may
/// read.
pub(super) struct Ctx<'a> {
    pub(super) now: u64,
    pub(super) rng: &'a mut Rng,
    pub(super) record: &'a mut Counters,
    pub(super) topology: &'a Topology,
    pub(super) state: &'a dyn MachineState,
}

/// The little a workload reads of the machine's changing state.
pub(super) trait MachineState {
    /// `vcpu` runs in guest mode on its core.
    fn in_guest(&self, vcpu: usize) -> bool;
    /// `vcpu`'s guest spins, waiting for work.
    fn spinning(&self, vcpu: usize) -> bool;
    /// Frames waiting in `pair`'s `ring`.
    fn ring_level(&self, pair: usize, ring: Ring) -> u32;
}

impl Ctx<'_> {
    /// Schedules `event` as the next arrival of a source at `rate_per_s`
    /// spaced as `arrivals` says, unless the rate is zero.
    pub(super) fn schedule_arrival(
        &mut self,
        arrivals: Arrivals,
        rate_per_s: f64,
        event: impl Into<super::Event>,
        fx: &mut Effects,
    ) {
        if rate_per_s <= 0.0 {
            return;
        }
        let gap = arrivals.gap_ns(rate_per_s, self.rng);
        fx.schedule(self.now + gap, event);
    }
}

/// The programs a workload's guest runs; None: the kernel's own.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Programs {
    /// Every vCPU's background task (None: the group's idle mode's).
    pub(super) background: Option<&'static [Step]>,
    /// What the first vCPU of each VM runs instead, if anything.
    pub(super) lead: Option<&'static [Step]>,
    /// The handler of the NIC's and virtio's vectors (None: NAPI's).
    pub(super) device_handler: Option<&'static [Step]>,
    /// The handler of the guest IPI vector (None: acknowledge and return).
    pub(super) ipi_handler: Option<&'static [Step]>,
}

/// What a workload's traffic is to the devices, fixed for the run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Traffic {
    /// Payload bytes of one frame (or virtio buffer) the guest receives.
    pub(super) frame_bytes: u64,
    /// Payload bytes of a TX buffer of the guest's that vhost copies.
    pub(super) tx_bytes: u64,
    /// The UDP receivers': the guest only counts each packet NAPI takes
    /// (the workload does not hear of it), and the NIC keeps the
    /// coalescing fitted on them instead of its throttle.
    pub(super) datagrams: bool,
    /// The rate of the frames a source sends each ring whose first
    /// arrival the workload schedules (`Event::PacketArrival`): each
    /// arrival draws the next.
    pub(super) arrivals_per_s: f64,
    /// How that source spaces them.
    pub(super) arrivals: Arrivals,
    /// The PV peer is on another server: its frames come through the
    /// host's NIC.
    pub(super) pv_peer_on_wire: bool,
    /// The guest polls the VF's receive ring and never enables its
    /// interrupt (a poll-mode driver).
    pub(super) polled_vf: bool,
}

/// The UDP workloads' packets (docs/calibration.md: 128-byte packets),
/// also the background traffic's.
pub(super) const UDP_PACKET_BYTES: u64 = 128;

impl Default for Traffic {
    fn default() -> Traffic {
        Traffic {
            frame_bytes: UDP_PACKET_BYTES,
            tx_bytes: 0,
            datagrams: false,
            arrivals_per_s: 0.0,
            arrivals: Arrivals::Poisson,
            pv_peer_on_wire: false,
            polled_vf: false,
        }
    }
}

/// A workload's own instruction in a guest program; each workload gives
/// the ones it uses their meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WorkloadStep {
    /// The application's next piece of work (serve a request, relay a
    /// message, write to a stream, forward a burst), or a spin while it
    /// has none.
    App,
    /// A pause of the workload's own length (ipi's gap between IPIs).
    Pause,
    /// An operation begins (ipi-call's call).
    Begin,
    /// The operation's next send (an ICR write), if any.
    Send,
    /// Back to the send while the operation has more to send.
    SendMore,
    /// Spin until the operation completes.
    Await,
    /// A handler's part in another vCPU's operation (a callee runs the
    /// function).
    Complete,
    /// Record what just completed (a request's, an IPI's latency).
    Record,
    /// Submit the next request: its clock starts.
    Submit,
    /// Hand the submitted request to the device and notify it.
    Notify,
}

/// What a workload's step does to its guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StepOutcome {
    /// Done at once (with whatever effects it listed): the next step
    /// follows, after those effects.
    Next,
    /// Back to the step before (a loop).
    Back,
    /// It takes this long; [`Workload::step_done`] follows.
    Takes(u64),
    /// Nothing to do now: the vCPU spins until poked.
    Spin,
}

/// A workload's own event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WorkloadEvent {
    /// ipi-call's.
    Call(CallEvent),
    /// netperf-rr's and udp-rr's remote end.
    Remote(RemoteEvent),
    /// iperf's and netperf's TCP streams.
    Tcp(TcpEvent),
    /// memcached's and apache's clients.
    Clients(ClientEvent),
    /// l2fwd's traffic.
    Pmd(PmdEvent),
    /// VoIP's SIPp.
    Sip(SipEvent),
}

impl WorkloadEvent {
    /// The slot of a cancellable workload event (one pending at most per
    /// slot; rescheduling replaces it): iperf's sender's next send, per
    /// queue pair.
    pub(super) fn slot(&self) -> Option<u32> {
        match *self {
            WorkloadEvent::Tcp(TcpEvent::Send { pair }) => Some(pair),
            _ => None,
        }
    }
}

macro_rules! workload_events {
    ($($variant:ident($event:ty)),*) => {$(
        impl From<$event> for super::Event {
            fn from(event: $event) -> super::Event {
                super::Event::Workload(WorkloadEvent::$variant(event))
            }
        }
    )*};
}

workload_events!(
    Call(CallEvent),
    Remote(RemoteEvent),
    Tcp(TcpEvent),
    Clients(ClientEvent),
    Pmd(PmdEvent),
    Sip(SipEvent)
);

/// A workload with no part of its own: the guest only does what the
/// group's devices and timer make it do (idle, and the Loongson VIOAPIC
/// run, which has its own model).
struct Idle;

impl Workload for Idle {}

/// A time per index (a VM or a vCPU): when a workload's request or IPI
/// in flight left.
#[derive(Debug, Default)]
pub(super) struct SentTimes(Vec<Option<u64>>);

impl SentTimes {
    /// Records `now` for `index`; the time it replaces, if any.
    pub(super) fn replace(&mut self, index: usize, now: u64) -> Option<u64> {
        if index >= self.0.len() {
            self.0.resize(index + 1, None);
        }
        self.0[index].replace(now)
    }

    /// The time recorded for `index`, taken once.
    pub(super) fn take(&mut self, index: usize) -> Option<u64> {
        self.0.get_mut(index)?.take()
    }
}

#[cfg(test)]
pub(super) mod testing;
