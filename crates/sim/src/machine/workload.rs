//! The workloads as the machine sees them: each workload's state, events
//! and handlers live in its module; [`WorkloadModel::of`] is the one place
//! that picks by [`WorkloadKind`], once per run, and the engine hands a
//! [`WorkloadEvent`] to the module that owns it.

use super::apps::{Service, APACHE, MEMCACHED, NO_SERVICE};
use super::fio::BLOCK_HANDLER;
use super::guest::{
    Step, HALT_LOOP, POLL_MODE_DRIVER, RX_HANDLER, SERVER, SIP_RELAY, SPIN, STREAM_WRITER,
};
use super::ipi::{IPI_HANDLER, IPI_SENDER};
use super::ipi_call::{CALL_HANDLER, IPI_CALLER};
use super::netstack::Received;
use super::rr::RemoteLink;
use super::sip::{SipLink, SIP_MESSAGE_BYTES};
use super::*;
use crate::metrics::WorkloadFigures;

/// What the machine asks of the workload a run names: the programs its
/// vCPUs run, its interrupt handlers, its first events and its own
/// figures. Chosen once per run, so that the machine's other modules
/// never ask which workload runs.
#[derive(Clone, Copy)]
pub(super) struct WorkloadModel {
    /// Every vCPU's background task; None: the group's idle mode's.
    background: Option<&'static [Step]>,
    /// What the first vCPU of each VM runs instead, if anything.
    lead: Option<&'static [Step]>,
    /// The handler of the NIC's and virtio's vectors.
    pub(super) device_handler: &'static [Step],
    /// The handler of the guest IPI vector.
    pub(super) ipi_handler: &'static [Step],
    /// Its first events in a VM, given the VM and its queue pairs' owners.
    start: fn(&mut Machine, usize, &[usize], &mut Effects),
    /// What it learns when its guest's ICR write leaves: the writing vCPU
    /// and the vCPUs the APIC bus routed the IPI to.
    pub(super) ipi_sent: fn(&mut Machine, usize, &[usize]),
    /// cyclictest's: the timer thread's latencies are the run's.
    pub(super) measures_timer: bool,
    /// What a packet the guest receives is to it.
    pub(super) received: Received,
    /// udp-rx's and whileloop's: the NIC keeps the coalescing fitted on
    /// them, and a packet NAPI takes is only counted.
    pub(super) fitted_coalescing: bool,
    /// The requests it serves, if it is a server.
    pub(super) service: Service,
    /// memcached's: its PV peers are on another server
    /// ([`Machine::pv_peer_on_wire`]).
    pub(super) pv_peer_on_wire: bool,
    /// Its figures beyond the common ones.
    workload_figures: fn(&Machine) -> WorkloadFigures,
}

/// A workload that only receives what the group's devices and timer send.
const BACKGROUND_ONLY: WorkloadModel = WorkloadModel {
    background: None,
    lead: None,
    device_handler: RX_HANDLER,
    ipi_handler: IPI_HANDLER,
    start: |_, _, _, _| {},
    ipi_sent: |_, _, _| {},
    measures_timer: false,
    received: Received::Datagram,
    fitted_coalescing: false,
    service: NO_SERVICE,
    pv_peer_on_wire: false,
    workload_figures: |_| WorkloadFigures::default(),
};

/// udp-rx's and whileloop's first packet on each owner's queue pair, on
/// each ring of the group's transport.
fn start_receive(m: &mut Machine, _vm: usize, owners: &[usize], fx: &mut Effects) {
    for &owner in owners {
        let pair = m.vcpus[owner].pair;
        for &ring in super::udp_rx::rings(m.spec.group.transport) {
            m.schedule_packet(pair, ring, fx);
        }
    }
}

impl WorkloadModel {
    pub(super) fn of(kind: WorkloadKind) -> WorkloadModel {
        let base = BACKGROUND_ONLY;
        match kind {
            WorkloadKind::Idle | WorkloadKind::Vioapic => base,
            WorkloadKind::UdpRx => WorkloadModel {
                start: start_receive,
                fitted_coalescing: true,
                ..base
            },
            WorkloadKind::Whileloop => WorkloadModel {
                background: Some(SPIN),
                start: start_receive,
                fitted_coalescing: true,
                ..base
            },
            WorkloadKind::Cyclictest => WorkloadModel {
                measures_timer: true,
                ..base
            },
            WorkloadKind::NetperfRr | WorkloadKind::UdpRr => WorkloadModel {
                start: |m, vm, _, fx| {
                    let bytes = m.message_bytes();
                    let link = RemoteLink {
                        one_way_ns: m.one_way_ns(bytes),
                        copy_ns: m.copy_ns(bytes),
                    };
                    m.remote.start(vm, link, fx);
                },
                received: Received::Transaction,
                ..base
            },
            WorkloadKind::Iperf => WorkloadModel {
                start: |m, _, owners, fx| m.start_streams(owners, fx),
                received: Received::StreamSegment,
                ..base
            },
            WorkloadKind::Netperf => WorkloadModel {
                background: Some(STREAM_WRITER),
                received: Received::StreamAck,
                ..base
            },
            WorkloadKind::Fio => WorkloadModel {
                device_handler: BLOCK_HANDLER,
                start: |m, vm, _, fx| m.fio.submit(vm, m.first_pair(vm), m.now, fx),
                ..base
            },
            WorkloadKind::Ipi => WorkloadModel {
                lead: Some(IPI_SENDER),
                ipi_sent: |m, _, targets| m.ipi.sent(targets, m.now),
                ..base
            },
            WorkloadKind::IpiCall => WorkloadModel {
                lead: Some(IPI_CALLER),
                ipi_handler: CALL_HANDLER,
                ipi_sent: |m, caller, targets| m.ipi_call.sent(m.vcpus[caller].vm, targets.len()),
                workload_figures: |m| IpiCall::results(&m.counters),
                ..base
            },
            WorkloadKind::Memcached => WorkloadModel {
                background: Some(SERVER),
                start: |m, vm, _, fx| m.start_clients(vm, fx),
                received: Received::Request,
                service: MEMCACHED,
                pv_peer_on_wire: true,
                ..base
            },
            WorkloadKind::Apache => WorkloadModel {
                background: Some(SERVER),
                start: |m, vm, _, fx| m.start_clients(vm, fx),
                received: Received::Request,
                service: APACHE,
                ..base
            },
            WorkloadKind::L2fwd => WorkloadModel {
                background: Some(POLL_MODE_DRIVER),
                start: |m, _, owners, fx| {
                    let link_mbps = m.profile.network.link_mbps;
                    for &owner in owners {
                        let pair = m.vcpus[owner].pair;
                        m.l2fwd.start(pair, link_mbps, &mut m.pairs[pair].vf, fx);
                    }
                },
                ..base
            },
            WorkloadKind::Sip => WorkloadModel {
                background: Some(SIP_RELAY),
                start: |m, _, _, fx| m.start_calls(fx),
                received: Received::SipMessage,
                workload_figures: |m| m.sip.results(),
                ..base
            },
        }
    }

    /// The program of a VM's vCPU `index` when idle vCPUs do `idle`.
    pub(super) fn program(&self, index: usize, idle: IdleMode) -> &'static [Step] {
        match (self.lead, index) {
            (Some(lead), 0) => lead,
            _ => self.background.unwrap_or(match idle {
                IdleMode::Poll => SPIN,
                _ => HALT_LOOP,
            }),
        }
    }
}

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
    /// `vm`'s workload starts: its first events; then the timer thread on
    /// each queue-pair owner, for cyclictest or a group with a timer.
    pub(super) fn start_workload(&mut self, vm: usize, fx: &mut Effects) {
        let owners = self
            .spec
            .group
            .queue_owners
            .per_vm(self.spec.group.host.vcpus_per_vm);
        let owners: Vec<usize> = self.vms[vm].vcpus[..owners as usize].to_vec();
        (self.workload.start)(self, vm, &owners, fx);
        if self.spec.group.with_timer || self.workload.measures_timer {
            for &owner in &owners {
                let deadline = self.cyclictest.arm_first_tick(owner, &mut self.rng);
                self.program_guest_timer(owner, deadline, fx);
            }
        }
    }

    /// The workload's own figures.
    pub(crate) fn workload_figures(&self) -> WorkloadFigures {
        (self.workload.workload_figures)(self)
    }

    /// iperf: each owner's TCP stream starts sending.
    fn start_streams(&mut self, owners: &[usize], fx: &mut Effects) {
        for &owner in owners {
            let pair = index_u32(self.vcpus[owner].pair);
            fx.schedule(0, TcpEvent::Send { pair });
        }
    }

    pub(super) fn workload_event(&mut self, event: WorkloadEvent, fx: &mut Effects) {
        match event {
            WorkloadEvent::Call(event) => self.call_event(event, fx),
            WorkloadEvent::Remote(RemoteEvent::Request { vm }) => {
                if let Some(round_trip) = self.remote.request(vm as usize, self.now, fx) {
                    let latency = self.spec.workload.reported_latency_ns(round_trip);
                    self.counters.request_done(latency);
                }
            }
            WorkloadEvent::Remote(RemoteEvent::RequestArrival { vm }) => {
                self.request_arrives(vm as usize, fx)
            }
            WorkloadEvent::Tcp(event) => self.tcp_event(event, fx),
            WorkloadEvent::Clients(event) => self.client_event(event, fx),
            WorkloadEvent::Pmd(PmdEvent::Burst { pair }) => {
                let queue_pair = &mut self.pairs[pair as usize];
                let spinning = self.vcpus[queue_pair.owner]
                    .spin_since
                    .map(|_| queue_pair.owner);
                self.l2fwd
                    .burst(pair as usize, self.now, &mut queue_pair.vf, spinning, fx);
            }
            WorkloadEvent::Sip(event) => self.sip_event(event, fx),
        }
    }

    /// netperf-rr's and udp-rr's guest answered on `vcpu`: the response
    /// leaves through virtio to vhost, or through the VF's doorbell (a
    /// passed-through MMIO write) for the remote.
    pub(super) fn netperf_respond(&mut self, vcpu: usize, kind: Ring, fx: &mut Effects) {
        let pair = self.vcpus[vcpu].pair;
        match kind {
            Ring::Virtio => {
                self.virtio_kick(vcpu, fx);
                self.backend_start(pair, BackendJob::TxPacket, fx);
            }
            Ring::Vf => {
                self.remote.response_sent(self.vcpus[vcpu].vm, self.now, fx);
                self.vf_sent(pair, self.now, self.message_bytes(), fx);
            }
        }
    }

    /// fio's submission from `vcpu`: the read, then the virtio notify.
    pub(super) fn guest_submit_block(&mut self, vcpu: usize, fx: &mut Effects) {
        let vm = self.vcpus[vcpu].vm;
        self.fio.submit(vm, self.first_pair(vm), self.now, fx);
        self.io_notify(vcpu, fx);
    }

    /// SIPp starts over the path of the VM's first queue pair.
    fn start_calls(&mut self, fx: &mut Effects) {
        let path = SipLink {
            pair: self.first_pair(0),
            ring: match self.spec.group.transport {
                Transport::Pv => Ring::Virtio,
                _ => Ring::Vf,
            },
            one_way_ns: self.one_way_ns(SIP_MESSAGE_BYTES),
        };
        self.sip.start(self.spec.duration_ns, path, fx);
    }

    /// A VoIP event, handed the time and whether SIP's ring is full; a
    /// call's setup latency is the run's.
    fn sip_event(&mut self, event: SipEvent, fx: &mut Effects) {
        let (pair, ring) = self.sip.ring();
        let ring_full = self.pairs[pair].rx(ring).ring >= RX_RING_SIZE;
        if let Some(setup) = self.sip.handle(event, self.now, ring_full, fx) {
            self.counters.latencies.push(setup);
        }
    }
}
