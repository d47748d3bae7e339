//! The closed-loop servers, memcached and apache: the guest's server
//! application answers, as its background task, the requests its clients
//! send; with nothing to do it spins, as the testbeds' guests do
//! (idle=poll). Requests arrive on the VM's first queue pair.
//!
//! The clients are a closed loop, as memaslap's and apachebench's are:
//! each connection has one request outstanding and sends the next as soon
//! as its response comes, so a saturated server's clients slow down with
//! it; each request is timed from its send (`crate::qos`). apache's
//! requests over a VF each open a connection of their own (`http`).

use std::collections::VecDeque;

use super::http::{Apachebench, Segment, SegmentRing};
use super::{
    requests_per_s, Ctx, Programs, StepOutcome, Taken, Traffic, Workload, WorkloadEvent,
    WorkloadStep,
};
use crate::machine::effects::{Effect, Effects};
use crate::machine::guest::Step;
use crate::machine::ledger::Counters;
use crate::machine::network::Network;
use crate::machine::platform::{BackendJob, RX_RING_SIZE};
use crate::machine::topology::Topology;
use crate::machine::{index_u32, Ring};
use crate::metrics::{Throughput, ThroughputUnit};
use crate::profile::CostProfile;
use crate::scenario::{RunSpec, Transport, WorkloadKind};

/// The server application, the guest's background task.
const SERVER: &[Step] = &[Step::Workload(WorkloadStep::App)];

/// A server's requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Service {
    request_bytes: u64,
    response_bytes: u64,
    /// The application's work per request.
    work_ns: u64,
    /// apache's: without keep-alive each request opens a connection of
    /// its own (`http`).
    connection_per_request: bool,
}

impl Service {
    /// ASSUMED, memcached: a get with a 64-byte key and a 1 KiB value (the
    /// ELI paper's memslap sizes). apache: a GET and a 4 KB static page
    /// with its headers; ab's connections without keep-alive.
    fn of(kind: WorkloadKind, profile: &CostProfile) -> Service {
        match kind {
            WorkloadKind::Apache => Service {
                request_bytes: 100,
                response_bytes: 4_350,
                work_ns: profile.workloads.http_request,
                connection_per_request: true,
            },
            _ => Service {
                request_bytes: 100,
                response_bytes: 1_100,
                work_ns: profile.workloads.memcached_request,
                connection_per_request: false,
            },
        }
    }
}

/// The clients' events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum ClientEvent {
    /// A request reaches the server's NIC, or vhost.
    RequestArrival { vm: u32 },
    /// The server's response reaches its client (apache: apachebench
    /// closes the response's connection).
    ResponseArrival { vm: u32 },
    /// A segment of apachebench's connection reaches the server.
    ConnectionSegment { vm: u32, segment: Segment },
}

/// How a VM's clients send, fixed when they start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ClientLink {
    /// A request's way to the server, as one message.
    request_way_ns: u64,
    /// apachebench's connection per request (apache over a VF).
    connection: Option<Apachebench>,
}

/// A VM's clients.
#[derive(Clone, Debug, Default)]
struct ClientPool {
    link: ClientLink,
    connections: u32,
    /// Send times of the outstanding requests, oldest first (the server
    /// answers in order).
    sent: VecDeque<u64>,
}

impl ClientPool {
    fn new(connections: u32, link: ClientLink) -> ClientPool {
        ClientPool {
            link,
            connections,
            ..ClientPool::default()
        }
    }

    /// `vm`'s clients start at `now`: every connection sends its first
    /// request.
    fn start(&mut self, vm: usize, now: u64, fx: &mut Effects) {
        for _ in 0..self.connections {
            self.sent.push_back(now);
            self.send(vm, now, fx);
        }
    }

    /// The oldest request's response reached its client at `now`: its
    /// connection sends the next request at once. The response time of
    /// the answered request (None for a response no request is waiting
    /// for, which sends nothing).
    fn response_arrived(&mut self, vm: usize, now: u64, fx: &mut Effects) -> Option<u64> {
        let sent = self.sent.pop_front()?;
        self.sent.push_back(now);
        self.send(vm, now, fx);
        Some(now - sent)
    }

    /// A request of `vm`'s clients leaves at `now`: on a new connection,
    /// its SYN first (sent by the client's `connect`).
    fn send(&self, vm: usize, now: u64, fx: &mut Effects) {
        if let Some(connection) = &self.link.connection {
            connection.connect(vm, now, fx);
            return;
        }
        let vm = index_u32(vm);
        fx.schedule(
            now + self.link.request_way_ns,
            ClientEvent::RequestArrival { vm },
        );
    }
}

/// memcached's or apache's run: its service, per VM its clients, per
/// queue pair the requests received and not yet taken by the server
/// (its socket) and apachebench's segments in the VF's ring.
pub(super) struct Servers {
    service: Service,
    net: Network,
    /// The ring requests arrive on (virtio over PV, else the VF's).
    ring: Ring,
    /// Each request's connection of its own (apache's over a VF; over
    /// virtio a request stays one message).
    connection: Option<Apachebench>,
    /// Concurrent client connections per VM.
    connections: u32,
    pools: Vec<ClientPool>,
    sockets: Vec<u32>,
    segments: Vec<SegmentRing>,
}

impl Servers {
    pub(super) fn new(spec: &RunSpec, profile: &CostProfile, topology: &Topology) -> Servers {
        let service = Service::of(spec.workload, profile);
        // memcached's clients are on the DID testbed's other server.
        let net = Network::new(
            profile,
            &spec.group,
            spec.workload == WorkloadKind::Memcached,
        );
        let connection = (service.connection_per_request && spec.group.transport != Transport::Pv)
            .then(|| {
                Apachebench::new(
                    &net,
                    service.request_bytes,
                    service.response_bytes,
                    profile.host_ns.wakeup,
                )
            });
        Servers {
            service,
            ring: match spec.group.transport {
                Transport::Pv => Ring::Virtio,
                _ => Ring::Vf,
            },
            connection,
            connections: spec.group.clients.unwrap_or(1),
            pools: vec![ClientPool::default(); topology.vm_count()],
            sockets: vec![0; topology.pair_count()],
            segments: vec![SegmentRing::new(); topology.pair_count()],
            net,
        }
    }

    /// The guest's stack work for the segment NAPI takes next from `pair`:
    /// a SYN and a FIN are answered from the stack.
    fn segment_work_ns(&self, pair: usize) -> u64 {
        let network = &self.net.costs;
        let segment = self.segments[pair].front().copied();
        let answer = match segment {
            Some(segment) if segment.answered_by_stack() => network.tx_packet,
            _ => 0,
        };
        let copy = match segment {
            Some(Segment::Request) => self.net.copy_ns(self.service.request_bytes),
            _ => 0,
        };
        network.rx_frame + network.rx_stack + answer + copy
    }

    /// NAPI took a connection's segment from `pair`'s ring: the request
    /// goes to the socket; the stack answers a SYN (apachebench's part
    /// follows) and a FIN.
    fn segment_taken(&mut self, pair: usize, ctx: &Ctx, fx: &mut Effects) {
        let answer = Effect::VfSent {
            pair,
            start: ctx.now,
            bytes: 0,
        };
        match self.segments[pair].pop_front() {
            Some(Segment::Request) => self.sockets[pair] += 1,
            Some(Segment::Syn) => {
                if let Some(connection) = &self.connection {
                    connection.syn_answered(ctx.topology.vm_of_pair(pair), ctx.now, fx);
                }
                // The SYN-ACK.
                fx.push(answer);
            }
            // The stack's ACK of the client's FIN.
            Some(Segment::Fin) => fx.push(answer),
            Some(Segment::HandshakeAck | Segment::DataAck) | None => {}
        }
    }
}

impl Workload for Servers {
    fn programs(&self) -> Programs {
        Programs {
            background: Some(SERVER),
            ..Programs::default()
        }
    }

    fn traffic(&self) -> Traffic {
        Traffic {
            frame_bytes: self.service.request_bytes,
            tx_bytes: self.service.response_bytes,
            pv_peer_on_wire: self.net.pv_peer_on_wire,
            ..Traffic::default()
        }
    }

    /// The clients start: every connection at once.
    fn start(&mut self, vm: usize, _owners: &[usize], ctx: &mut Ctx, fx: &mut Effects) {
        let link = ClientLink {
            request_way_ns: self.net.one_way_ns(self.service.request_bytes),
            connection: self.connection,
        };
        self.pools[vm] = ClientPool::new(self.connections, link);
        self.pools[vm].start(vm, ctx.now, fx);
    }

    fn on_event(&mut self, event: WorkloadEvent, ctx: &mut Ctx, fx: &mut Effects) {
        let WorkloadEvent::Clients(event) = event else {
            return;
        };
        match event {
            ClientEvent::RequestArrival { vm } => fx.push(Effect::RxPacket {
                pair: ctx.topology.first_pair(vm as usize),
                ring: self.ring,
            }),
            ClientEvent::ResponseArrival { vm } => {
                let vm = vm as usize;
                if let Some(latency) = self.pools[vm].response_arrived(vm, ctx.now, fx) {
                    ctx.record.request_done(latency);
                }
            }
            // A segment of apachebench's connection reaches the VF.
            ClientEvent::ConnectionSegment { vm, segment } => {
                let pair = ctx.topology.first_pair(vm as usize);
                if ctx.state.ring_level(pair, Ring::Vf) < RX_RING_SIZE {
                    self.segments[pair].push_back(segment);
                }
                fx.push(Effect::RxPacket {
                    pair,
                    ring: Ring::Vf,
                });
            }
        }
    }

    /// The server takes a request from its socket: its work, the
    /// response's send and copy, and (apache without keep-alive) the FIN
    /// that closes the connection; a spin while the socket is empty.
    fn on_step(
        &mut self,
        vcpu: usize,
        _step: WorkloadStep,
        ctx: &mut Ctx,
        _fx: &mut Effects,
    ) -> StepOutcome {
        let pair = ctx.topology.pair_of(vcpu);
        if self.sockets[pair] == 0 {
            return StepOutcome::Spin;
        }
        self.sockets[pair] -= 1;
        let network = &self.net.costs;
        let close = if self.connection.is_some() {
            network.tx_packet
        } else {
            0
        };
        let response = self.net.copy_ns(self.service.response_bytes);
        StepOutcome::Takes(self.service.work_ns + network.tx_packet + response + close)
    }

    /// The response leaves: through virtio to vhost, or through the VF
    /// (apache's FIN after it, apachebench's segments back).
    fn step_done(&mut self, vcpu: usize, _step: WorkloadStep, ctx: &mut Ctx, fx: &mut Effects) {
        let pair = ctx.topology.pair_of(vcpu);
        if self.ring == Ring::Virtio {
            fx.push(Effect::VirtioKick(vcpu));
            fx.push(Effect::BackendStart {
                pair,
                job: BackendJob::Tx,
            });
            return;
        }
        let response = self.service.response_bytes;
        let vm = ctx.topology.vm_of(vcpu);
        fx.push(Effect::VfSent {
            pair,
            start: ctx.now,
            bytes: response,
        });
        if let Some(connection) = &self.connection {
            // Done when apachebench closes the connection.
            fx.push(Effect::VfSent {
                pair: ctx.topology.first_pair(vm),
                start: connection.fin_sent(ctx.now),
                bytes: 0,
            });
            connection.response_sent(vm, ctx.now, fx);
        } else {
            let at = ctx.now + self.net.one_way_ns(response);
            fx.schedule(at, ClientEvent::ResponseArrival { vm: index_u32(vm) });
        }
    }

    fn rx_work_ns(&self, pair: usize) -> Option<u64> {
        Some(if self.connection.is_some() {
            self.segment_work_ns(pair)
        } else {
            let network = &self.net.costs;
            network.rx_frame + network.rx_stack + self.net.copy_ns(self.service.request_bytes)
        })
    }

    fn packet_taken(&mut self, taken: Taken, ctx: &mut Ctx, fx: &mut Effects) {
        if self.connection.is_some() {
            self.segment_taken(taken.pair, ctx, fx);
        } else {
            self.sockets[taken.pair] += 1;
        }
    }

    /// vhost passed the response on: the client has it once past the
    /// bridge.
    fn sent(&mut self, pair: usize, ctx: &mut Ctx, fx: &mut Effects) {
        let vm = ctx.topology.vm_of_pair(pair);
        let at = ctx.now + self.net.past_bridge_ns(self.service.response_bytes);
        fx.schedule(at, ClientEvent::ResponseArrival { vm: index_u32(vm) });
    }

    fn throughput(&self, record: &Counters, seconds: f64) -> Option<Throughput> {
        requests_per_s(record, seconds, ThroughputUnit::RequestsPerS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::fixture::{listed, scheduled};

    /// Requests reach the server 3 us after they leave.
    const REQUEST_WAY_NS: u64 = 3_000;

    fn pool(connections: u32) -> ClientPool {
        let link = ClientLink {
            request_way_ns: REQUEST_WAY_NS,
            connection: None,
        };
        ClientPool::new(connections, link)
    }

    fn request_at(at: u64, vm: u32) -> Effect {
        scheduled(at, ClientEvent::RequestArrival { vm })
    }

    #[test]
    fn every_connection_starts_and_resends_on_its_response_timed_from_its_send() {
        let mut pool = pool(2);
        let fx = listed(|fx| pool.start(1, 0, fx));
        assert_eq!(
            fx,
            [request_at(REQUEST_WAY_NS, 1), request_at(REQUEST_WAY_NS, 1)]
        );
        let mut latency = None;
        let fx = listed(|fx| latency = pool.response_arrived(1, 20_000, fx));
        assert_eq!(latency, Some(20_000));
        assert_eq!(
            fx,
            [request_at(20_000 + REQUEST_WAY_NS, 1)],
            "the next at once"
        );
        // The second connection's first request, then the first's second,
        // each timed from its own send.
        let fx = listed(|fx| latency = pool.response_arrived(1, 25_000, fx));
        assert_eq!(latency, Some(25_000));
        assert_eq!(fx, [request_at(25_000 + REQUEST_WAY_NS, 1)]);
        let fx = listed(|fx| latency = pool.response_arrived(1, 30_000, fx));
        assert_eq!(latency, Some(10_000));
        assert_eq!(fx, [request_at(30_000 + REQUEST_WAY_NS, 1)]);
        assert_eq!(pool.sent.len(), 2, "one request outstanding per connection");
    }

    #[test]
    fn a_response_no_request_waits_for_sends_nothing() {
        let mut pool = pool(1);
        let mut latency = Some(0);
        let fx = listed(|fx| latency = pool.response_arrived(0, 5_000, fx));
        assert_eq!(latency, None);
        assert!(fx.is_empty(), "{fx:?}");
    }

    #[test]
    fn a_connection_per_request_opens_with_its_syn() {
        let connection = Apachebench {
            segment_way_ns: 2_000,
            send_ns: 1_000,
            ..Apachebench::default()
        };
        let link = ClientLink {
            request_way_ns: REQUEST_WAY_NS,
            connection: Some(connection),
        };
        let mut pool = ClientPool::new(1, link);
        let syn = |at| {
            let segment = Segment::Syn;
            scheduled(at, ClientEvent::ConnectionSegment { vm: 0, segment })
        };
        let fx = listed(|fx| pool.start(0, 0, fx));
        assert_eq!(fx, [syn(3_000)], "connect's send and the SYN's way");
        let fx = listed(|fx| pool.response_arrived(0, 50_000, fx));
        assert_eq!(fx, [syn(53_000)]);
    }

    #[test]
    fn the_stack_answers_a_syn_and_the_request_reaches_the_server() {
        use super::super::testing::{one_vm, spec, Bench};
        let group = one_vm(WorkloadKind::Apache, 1);
        let mut bench = Bench::new(&group);
        let mut apache = Servers::new(
            &spec(WorkloadKind::Apache, group),
            &CostProfile::did_2015(),
            &bench.topology,
        );
        let ab = apache
            .connection
            .expect("apache over a VF: a connection per request");
        let segment =
            |segment| WorkloadEvent::Clients(ClientEvent::ConnectionSegment { vm: 0, segment });
        let taken = Taken {
            vcpu: 0,
            pair: 0,
            ring: Ring::Vf,
            napi_completes: true,
        };
        let fx = bench.listed(|ctx, fx| apache.on_event(segment(Segment::Syn), ctx, fx));
        let to_vf = Effect::RxPacket {
            pair: 0,
            ring: Ring::Vf,
        };
        assert_eq!(fx, [to_vf]);
        let network = apache.net.costs.clone();
        let syn_work = apache.rx_work_ns(0);
        assert_eq!(
            syn_work,
            Some(network.rx_frame + network.rx_stack + network.tx_packet)
        );
        bench.now = 1_000;
        let fx = bench.listed(|ctx, fx| apache.packet_taken(taken, ctx, fx));
        let handshake = listed(|fx| ab.syn_answered(0, 1_000, fx));
        let syn_ack = Effect::VfSent {
            pair: 0,
            start: 1_000,
            bytes: 0,
        };
        assert_eq!(fx[..2], handshake[..], "ab's part, then the SYN-ACK");
        assert_eq!(fx[2], syn_ack);
        let (outcome, _) = bench.call(|ctx, fx| apache.on_step(0, WorkloadStep::App, ctx, fx));
        assert_eq!(outcome, StepOutcome::Spin, "no request yet");
        bench.listed(|ctx, fx| apache.on_event(segment(Segment::Request), ctx, fx));
        bench.listed(|ctx, fx| apache.packet_taken(taken, ctx, fx));
        let (outcome, _) = bench.call(|ctx, fx| apache.on_step(0, WorkloadStep::App, ctx, fx));
        assert!(matches!(outcome, StepOutcome::Takes(_)), "the request");
    }
}
