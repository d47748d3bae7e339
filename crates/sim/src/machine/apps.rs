//! The guest's applications, run as its background task while no handler
//! runs: a server answering requests its clients sent (memcached, apache,
//! the SIP B2BUA of `sip`), netperf writing a TCP stream, and DPDK's poll-mode
//! driver forwarding packets (`l2fwd`). With nothing to do each spins, as
//! the testbeds' guests do (idle=poll, or a poll-mode driver).
//!
//! The clients are closed-loop: each connection has at most one request
//! outstanding; offered requests beyond that wait for a free connection,
//! so a saturated server's clients slow down with it.

use std::collections::VecDeque;

use dirq_stats::f64_of;

use super::http::Apachebench;
use super::sip::SIP_MESSAGE_BYTES;
use super::*;
use crate::profile::WorkloadCosts;

/// A background application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum App {
    /// memcached or apache answering its clients' requests.
    Serve,
    /// The SIP B2BUA relaying a message (`sip`).
    Relay,
    StreamWrite,
    PollMode,
}

/// A server workload's requests, as its [`WorkloadModel`] gives them.
#[derive(Clone, Copy)]
pub(super) struct Service {
    request_bytes: u64,
    response_bytes: u64,
    /// The application's work per request.
    work: fn(&WorkloadCosts) -> u64,
    /// apache's: without keep-alive each request opens a connection of
    /// its own (`http`).
    connection_per_request: bool,
}

/// The workloads that serve no requests.
pub(super) const NO_SERVICE: Service = Service {
    request_bytes: 0,
    response_bytes: 0,
    work: |_| 0,
    connection_per_request: false,
};

/// ASSUMED: a get with a 64-byte key and a 1 KiB value (the ELI paper's
/// memslap sizes).
pub(super) const MEMCACHED: Service = Service {
    request_bytes: 100,
    response_bytes: 1_100,
    work: |costs| costs.memcached_request,
    connection_per_request: false,
};

/// ASSUMED: a GET and a 4 KB static page with its headers; ab's
/// connections without keep-alive.
pub(super) const APACHE: Service = Service {
    request_bytes: 100,
    response_bytes: 4_350,
    work: |costs| costs.http_request,
    connection_per_request: true,
};

/// The clients' events (memcached, apache).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ClientEvent {
    /// A client offers a request (the offered load's Poisson arrivals).
    Offer { vm: u32 },
    /// A request reaches the server's NIC, or vhost.
    RequestArrival { vm: u32 },
    /// The server's response reaches its client (apache: apachebench
    /// closes the response's connection).
    ResponseArrival { vm: u32 },
    /// A segment of apachebench's connection reaches the server.
    ConnectionSegment {
        vm: u32,
        segment: super::http::Segment,
    },
}

/// How a VM's clients send, fixed when they start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct ClientLink {
    /// A request's way to the server, as one message.
    pub(super) request_way_ns: u64,
    /// With no offered load the clients send back to back: a freed
    /// connection's next request leaves at once.
    pub(super) back_to_back: bool,
    /// apachebench's connection per request (apache over a VF).
    pub(super) connection: Option<Apachebench>,
}

/// A VM's clients.
#[derive(Clone, Debug, Default)]
pub(super) struct ClientPool {
    link: ClientLink,
    connections: u32,
    outstanding: u32,
    /// When each offered request waiting for a free connection was
    /// offered, oldest first: its response time counts from then.
    waiting: VecDeque<u64>,
    /// Send times of the outstanding requests, oldest first (the server
    /// answers in order).
    sent: VecDeque<u64>,
}

impl ClientPool {
    pub(super) fn new(connections: u32, link: ClientLink) -> ClientPool {
        ClientPool {
            link,
            connections,
            ..ClientPool::default()
        }
    }

    /// apachebench's connection, if each request opens one.
    pub(super) fn connection(&self) -> Option<&Apachebench> {
        self.link.connection.as_ref()
    }

    /// With no offered load, `vm`'s clients start at `now`: every
    /// connection sends its first request.
    pub(super) fn start_back_to_back(&mut self, vm: usize, now: u64, fx: &mut Effects) {
        for _ in 0..self.connections {
            self.offered(vm, now, fx);
        }
    }

    /// A client of `vm` offers a request at `now`: it leaves now if a
    /// connection is free, else waits for one.
    pub(super) fn offered(&mut self, vm: usize, now: u64, fx: &mut Effects) {
        if self.offer(now) {
            self.send(vm, now, fx);
        }
    }

    /// The oldest request's response reached its client at `now`: a
    /// request waiting for the freed connection leaves (or, back to back,
    /// the next one). The response time of the answered request.
    pub(super) fn response_arrived(
        &mut self,
        vm: usize,
        now: u64,
        fx: &mut Effects,
    ) -> Option<u64> {
        let (latency, next) = self.answered(now);
        if next {
            self.send(vm, now, fx);
        }
        latency
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

    /// A client offers a request at `now`: true if a connection is free
    /// and it leaves now.
    fn offer(&mut self, now: u64) -> bool {
        if self.outstanding >= self.connections {
            self.waiting.push_back(now);
            return false;
        }
        self.outstanding += 1;
        self.sent.push_back(now);
        true
    }

    /// The oldest request's response came back at `now`: its response
    /// time, and whether a request leaves now on the freed connection
    /// (one was waiting, or back-to-back clients send at once).
    fn answered(&mut self, now: u64) -> (Option<u64>, bool) {
        let latency = self.sent.pop_front().map(|sent| now - sent);
        self.outstanding = self.outstanding.saturating_sub(1);
        let offered = if self.link.back_to_back {
            Some(now)
        } else {
            self.waiting.pop_front()
        };
        let next = offered.is_some();
        if let Some(offered) = offered {
            self.outstanding += 1;
            self.sent.push_back(offered);
        }
        (latency, next)
    }
}

impl Machine {
    pub(super) fn request_bytes(&self) -> u64 {
        self.workload.service.request_bytes
    }

    pub(super) fn response_bytes(&self) -> u64 {
        self.workload.service.response_bytes
    }

    /// Whether the workload's requests come on connections of their own
    /// (apache's over a VF; over virtio a request stays one message).
    pub(super) fn connection_per_request(&self) -> bool {
        self.workload.service.connection_per_request && self.spec.group.transport != Transport::Pv
    }

    /// The application's next piece of work, taken now: its length, or
    /// None when there is nothing to do.
    pub(super) fn app_work(&mut self, vcpu: usize, app: App) -> Option<u64> {
        let pair = self.vcpus[vcpu].pair;
        let network = &self.profile.network;
        let workloads = &self.profile.workloads;
        match app {
            App::Relay => {
                if !self.sip.take() {
                    return None;
                }
                let relay = self.profile.network.tx_packet + self.copy_ns(SIP_MESSAGE_BYTES);
                Some(self.profile.workloads.sip_message + relay)
            }
            App::Serve => {
                let queue_pair = &mut self.pairs[pair];
                if queue_pair.socket == 0 {
                    return None;
                }
                queue_pair.socket -= 1;
                let work = (self.workload.service.work)(workloads);
                let response = self.response_bytes();
                // Without keep-alive apache closes the connection: a FIN.
                let close = if self.connection_per_request() {
                    network.tx_packet
                } else {
                    0
                };
                Some(work + network.tx_packet + self.copy_ns(response) + close)
            }
            App::StreamWrite => {
                let bytes = self.message_bytes();
                if !self.pairs[pair].tcp.may_write(bytes) {
                    return None;
                }
                let cycles = self.spec.group.compute_cycles_per_byte.unwrap_or(0) * bytes;
                let compute = cycles * 1_000 / workloads.cpu_mhz;
                // TSO: one send per GSO buffer, its cost spread over the
                // writes that fill it.
                let send = network.tx_packet * bytes / network.gso_bytes;
                Some(workloads.stream_message + compute + self.copy_ns(bytes) + send)
            }
            App::PollMode => {
                let ring = &mut self.pairs[pair].vf;
                self.l2fwd.take(pair, ring, workloads.l2fwd_packet)
            }
        }
    }

    /// The application finished a piece of work.
    pub(super) fn app_done(&mut self, vcpu: usize, app: App, fx: &mut Effects) {
        let pair = self.vcpus[vcpu].pair;
        match app {
            App::Relay => self.sip.handled(vcpu, self.now, fx),
            App::Serve => match self.spec.group.transport {
                Transport::Pv => {
                    self.virtio_kick(vcpu, fx);
                    self.backend_start(pair, BackendJob::TxResponse, fx);
                }
                _ => {
                    let response = self.response_bytes();
                    let vm = self.vcpus[vcpu].vm;
                    self.vf_sent(pair, self.now, response, fx);
                    if let Some(&connection) = self.vms[vm].clients.connection() {
                        // Done when apachebench closes the connection.
                        let pair = self.first_pair(vm);
                        self.vf_sent(pair, connection.fin_sent(self.now), 0, fx);
                        connection.response_sent(vm, self.now, fx);
                    } else {
                        let at = self.now + self.one_way_ns(response);
                        fx.schedule(at, ClientEvent::ResponseArrival { vm: index_u32(vm) });
                    }
                }
            },
            App::StreamWrite => {
                self.pairs[pair].tcp.buffered += self.message_bytes();
                self.tso_send(pair, fx);
            }
            App::PollMode => self.counters.packets_processed += self.l2fwd.forwarded(pair),
        }
    }

    pub(super) fn client_event(&mut self, event: ClientEvent, fx: &mut Effects) {
        match event {
            ClientEvent::Offer { vm } => self.client_offers(vm as usize, fx),
            ClientEvent::RequestArrival { vm } => self.request_arrives(vm as usize, fx),
            ClientEvent::ResponseArrival { vm } => self.response_arrives(vm as usize, fx),
            ClientEvent::ConnectionSegment { vm, segment } => {
                self.segment_arrives(vm as usize, segment, fx)
            }
        }
    }

    /// The request reaches the server's NIC, or vhost.
    pub(super) fn request_arrives(&mut self, vm: usize, fx: &mut Effects) {
        let pair = self.first_pair(vm);
        match self.spec.group.transport {
            Transport::Pv if self.pv_peer_on_wire() => self.host_nic_receive(vm, fx),
            Transport::Pv => self.backend_start(pair, BackendJob::RxPacket, fx),
            _ => self.rx_packet(pair, Ring::Vf, fx),
        }
    }

    /// The response reaches its client.
    fn response_arrives(&mut self, vm: usize, fx: &mut Effects) {
        if let Some(latency) = self.vms[vm].clients.response_arrived(vm, self.now, fx) {
            self.counters.request_done(latency);
        }
    }

    /// An offered request (Poisson at the offered load).
    fn client_offers(&mut self, vm: usize, fx: &mut Effects) {
        self.schedule_offered(vm, fx);
        self.vms[vm].clients.offered(vm, self.now, fx);
    }

    fn schedule_offered(&mut self, vm: usize, fx: &mut Effects) {
        let rate = f64_of(self.spec.offered_per_s.unwrap_or(0));
        self.schedule_poisson(rate, ClientEvent::Offer { vm: index_u32(vm) }, fx);
    }

    /// The clients start: at the offered load, or every connection at once.
    pub(super) fn start_clients(&mut self, vm: usize, fx: &mut Effects) {
        let connections = self.spec.group.clients.unwrap_or(1);
        let link = ClientLink {
            request_way_ns: self.one_way_ns(self.request_bytes()),
            back_to_back: self.spec.offered_per_s.is_none(),
            connection: self.connection_per_request().then(|| self.apachebench()),
        };
        self.vms[vm].clients = ClientPool::new(connections, link);
        if self.spec.offered_per_s.is_some() {
            self.schedule_offered(vm, fx);
            return;
        }
        self.vms[vm].clients.start_back_to_back(vm, self.now, fx);
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{listed_alone, scheduled};
    use super::*;

    /// Requests reach the server 3 us after they leave.
    const REQUEST_WAY_NS: u64 = 3_000;

    fn pool(connections: u32, back_to_back: bool) -> ClientPool {
        let link = ClientLink {
            request_way_ns: REQUEST_WAY_NS,
            back_to_back,
            connection: None,
        };
        ClientPool::new(connections, link)
    }

    fn request_at(at: u64, vm: u32) -> Effect {
        scheduled(at, ClientEvent::RequestArrival { vm })
    }

    #[test]
    fn a_closed_loop_keeps_at_most_one_request_per_connection() {
        let mut pool = pool(2, false);
        assert!(pool.offer(0));
        assert!(pool.offer(10));
        assert!(!pool.offer(20));
        assert_eq!(pool.outstanding, 2);
        // The oldest is answered first; the waiting request takes its
        // connection, timed from its offer.
        assert_eq!(pool.answered(100), (Some(100), true));
        assert_eq!(pool.outstanding, 2);
        assert_eq!(pool.answered(150), (Some(140), false));
        assert_eq!(pool.sent.front(), Some(&20), "offered at 20, sent at 100");
        assert_eq!(pool.answered(300), (Some(280), false));
        assert_eq!(pool.outstanding, 0);
    }

    #[test]
    fn back_to_back_clients_send_again_at_once() {
        let mut pool = pool(1, true);
        assert!(pool.offer(0));
        assert_eq!(pool.answered(50), (Some(50), true));
        assert_eq!(pool.answered(80), (Some(30), true));
    }

    #[test]
    fn back_to_back_clients_start_every_connection_and_resend_on_a_response() {
        let mut pool = pool(2, true);
        let fx = listed_alone(|fx| pool.start_back_to_back(1, 0, fx));
        assert_eq!(
            fx,
            [request_at(REQUEST_WAY_NS, 1), request_at(REQUEST_WAY_NS, 1)]
        );
        let mut latency = None;
        let fx = listed_alone(|fx| latency = pool.response_arrived(1, 20_000, fx));
        assert_eq!(latency, Some(20_000));
        assert_eq!(
            fx,
            [request_at(20_000 + REQUEST_WAY_NS, 1)],
            "the next at once"
        );
    }

    #[test]
    fn an_offered_request_waits_for_a_connection_the_response_frees() {
        let mut pool = pool(1, false);
        let fx = listed_alone(|fx| pool.offered(0, 100, fx));
        assert_eq!(fx, [request_at(100 + REQUEST_WAY_NS, 0)]);
        let fx = listed_alone(|fx| pool.offered(0, 200, fx));
        assert!(fx.is_empty(), "the one connection is busy: {fx:?}");
        let mut latency = None;
        let fx = listed_alone(|fx| latency = pool.response_arrived(0, 10_100, fx));
        assert_eq!(latency, Some(10_000));
        assert_eq!(fx, [request_at(10_100 + REQUEST_WAY_NS, 0)]);
        // The waiting request's time counts from its offer.
        let fx = listed_alone(|fx| latency = pool.response_arrived(0, 20_000, fx));
        assert_eq!(latency, Some(19_800));
        assert!(fx.is_empty(), "nothing more offered: {fx:?}");
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
            back_to_back: true,
            connection: Some(connection),
        };
        let mut pool = ClientPool::new(1, link);
        let syn = |at| {
            let segment = super::super::http::Segment::Syn;
            scheduled(at, ClientEvent::ConnectionSegment { vm: 0, segment })
        };
        let fx = listed_alone(|fx| pool.start_back_to_back(0, 0, fx));
        assert_eq!(fx, [syn(3_000)], "connect's send and the SYN's way");
        let fx = listed_alone(|fx| pool.response_arrived(0, 50_000, fx));
        assert_eq!(fx, [syn(53_000)]);
    }
}
