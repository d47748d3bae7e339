//! The workloads' own events: each workload's enum lives in its module,
//! which handles it; the engine hands a [`WorkloadEvent`] to its owner.

use super::*;

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

macro_rules! workload_events {
    ($($variant:ident($event:ty)),*) => {$(
        impl From<$event> for Event {
            fn from(event: $event) -> Event {
                Event::Workload(WorkloadEvent::$variant(event))
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

impl Machine {
    pub(super) fn workload_event(&mut self, event: WorkloadEvent, fx: &mut Effects) {
        match event {
            WorkloadEvent::Call(event) => self.call_event(event, fx),
            WorkloadEvent::Remote(event) => self.remote_event(event, fx),
            WorkloadEvent::Tcp(event) => self.tcp_event(event, fx),
            WorkloadEvent::Clients(event) => self.client_event(event, fx),
            WorkloadEvent::Pmd(event) => self.pmd_event(event, fx),
            WorkloadEvent::Sip(event) => self.sip_event(event, fx),
        }
    }
}
