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
