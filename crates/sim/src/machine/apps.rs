//! The guest's applications, run as its background task while no handler
//! runs: a server answering requests its clients sent (memcached, apache,
//! the SIP B2BUA of `sip`), netperf writing a TCP stream, and DPDK's poll-mode
//! driver forwarding packets (l2fwd). With nothing to do each spins, as
//! the testbeds' guests do (idle=poll, or a poll-mode driver).
//!
//! The clients are closed-loop: each connection has at most one request
//! outstanding; offered requests beyond that wait for a free connection,
//! so a saturated server's clients slow down with it.

use std::collections::VecDeque;

use dirq_stats::f64_of;

use super::sip::SIP_MESSAGE_BYTES;
use super::*;

/// A background application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum App {
    Serve,
    StreamWrite,
    PollMode,
}

/// DPDK's receive burst (l2fwd's MAX_PKT_BURST).
const PMD_BURST: u32 = 32;
/// 128-byte frames with their preamble and gap on the wire.
const L2FWD_FRAME_WIRE_BYTES: u64 = 128 + 20;

/// Request and response payloads, bytes. ASSUMED: a get with a 64-byte
/// key and a 1 KiB value (the ELI study's memslap sizes); a GET and a
/// 4 KB static page with its headers.
fn payloads(workload: WorkloadKind) -> (u64, u64) {
    match workload {
        WorkloadKind::Memcached => (100, 1_100),
        WorkloadKind::Apache => (100, 4_350),
        _ => (0, 0),
    }
}

/// A VM's clients.
#[derive(Clone, Debug, Default)]
pub(super) struct ClientPool {
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
    pub(super) fn new(connections: u32) -> ClientPool {
        ClientPool {
            connections,
            ..ClientPool::default()
        }
    }

    /// A client offers a request at `now`: true if a connection is free
    /// and it leaves now.
    pub(super) fn offer(&mut self, now: u64) -> bool {
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
    /// (one was waiting, or `back_to_back` clients send at once).
    pub(super) fn answered(&mut self, now: u64, back_to_back: bool) -> (Option<u64>, bool) {
        let latency = self.sent.pop_front().map(|sent| now - sent);
        self.outstanding = self.outstanding.saturating_sub(1);
        let offered = if back_to_back {
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
        payloads(self.spec.workload).0
    }

    /// The application's next piece of work, taken now: its length, or
    /// None when there is nothing to do.
    pub(super) fn app_work(&mut self, vcpu: usize, app: App) -> Option<u64> {
        let queues = self.vcpus[vcpu].queues;
        if app == App::Serve && self.spec.workload == WorkloadKind::Sip {
            if !self.sip_take() {
                return None;
            }
            let relay = self.profile.network.tx_packet + self.copy_ns(SIP_MESSAGE_BYTES);
            return Some(self.profile.workloads.sip_message + relay);
        }
        let network = &self.profile.network;
        let workloads = &self.profile.workloads;
        match app {
            App::Serve => {
                let pair = &mut self.queues[queues];
                if pair.socket == 0 {
                    return None;
                }
                pair.socket -= 1;
                let work = match self.spec.workload {
                    WorkloadKind::Apache => workloads.http_request,
                    _ => workloads.memcached_request,
                };
                let response = payloads(self.spec.workload).1;
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
                if !self.queues[queues].tcp.may_write(bytes) {
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
                let pair = &mut self.queues[queues];
                let burst = pair.vf.ring.min(PMD_BURST);
                if burst == 0 {
                    return None;
                }
                pair.vf.ring -= burst;
                pair.forwarding = burst;
                Some(u64::from(burst) * workloads.l2fwd_packet)
            }
        }
    }

    /// The application finished a piece of work.
    pub(super) fn app_done(&mut self, vcpu: usize, app: App, fx: &mut Effects) {
        let queues = self.vcpus[vcpu].queues;
        match app {
            App::Serve if self.spec.workload == WorkloadKind::Sip => self.sip_handled(vcpu, fx),
            App::Serve => match self.spec.group.transport {
                Transport::Pv => {
                    self.virtio_kick(vcpu, fx);
                    self.backend_start(queues, BackendJob::TxResponse, fx);
                }
                _ => {
                    let response = payloads(self.spec.workload).1;
                    let at = self.now + self.one_way_ns(response);
                    let vm = self.vcpus[vcpu].vm;
                    fx.schedule(at, Event::ResponseArrival { vm: index_u32(vm) });
                    if self.connection_per_request() {
                        self.response_sent(vm, response, fx);
                    }
                }
            },
            App::StreamWrite => {
                self.queues[queues].tcp.buffered += self.message_bytes();
                self.tso_send(queues, fx);
            }
            // The forwarded burst leaves through the VF's doorbell.
            App::PollMode => {
                let burst = std::mem::take(&mut self.queues[queues].forwarding);
                self.counters.packets_processed += u64::from(burst);
            }
        }
    }

    /// A client's request leaves for the server: on a new connection, its
    /// SYN first.
    pub(super) fn send_request(&mut self, vm: usize, fx: &mut Effects) {
        let vm32 = index_u32(vm);
        if self.connection_per_request() {
            let segment = super::http::Segment::Syn;
            let at = self.now + self.one_way_ns(0);
            fx.schedule(at, Event::ConnectionSegment { vm: vm32, segment });
            return;
        }
        let at = self.now + self.one_way_ns(self.request_bytes());
        fx.schedule(at, Event::RequestArrival { vm: vm32 });
    }

    /// The request reaches the server's NIC, or vhost.
    pub(super) fn request_arrives(&mut self, vm: usize, fx: &mut Effects) {
        let queues = self.first_queues(vm);
        match self.spec.group.transport {
            Transport::Pv => self.backend_start(queues, BackendJob::RxPacket, fx),
            _ => self.rx_packet(queues, RxQueueKind::Vf, fx),
        }
    }

    /// The response reaches its client.
    pub(super) fn response_arrives(&mut self, vm: usize, fx: &mut Effects) {
        let back_to_back = self.spec.offered_per_s.is_none();
        let (latency, next) = self.vms[vm].clients.answered(self.now, back_to_back);
        if let Some(latency) = latency {
            self.counters.latencies.push(latency);
            self.counters.requests_done += 1;
        }
        if next {
            self.send_request(vm, fx);
        }
    }

    /// An offered request (Poisson at the offered load).
    pub(super) fn client_offers(&mut self, vm: usize, fx: &mut Effects) {
        self.schedule_offered(vm, fx);
        if self.vms[vm].clients.offer(self.now) {
            self.send_request(vm, fx);
        }
    }

    pub(super) fn schedule_offered(&mut self, vm: usize, fx: &mut Effects) {
        let rate = f64_of(self.spec.offered_per_s.unwrap_or(0));
        self.schedule_poisson(rate, Event::ClientSend { vm: index_u32(vm) }, fx);
    }

    /// The clients start: at the offered load, or every connection at once.
    pub(super) fn start_clients(&mut self, vm: usize, fx: &mut Effects) {
        let connections = self.spec.group.clients.unwrap_or(1);
        self.vms[vm].clients = ClientPool::new(connections);
        if self.spec.offered_per_s.is_some() {
            self.schedule_offered(vm, fx);
            return;
        }
        for _ in 0..connections {
            if self.vms[vm].clients.offer(self.now) {
                self.send_request(vm, fx);
            }
        }
    }

    /// A burst of 128-byte frames reaches the poll-mode driver's ring at
    /// line rate; a driver spinning on an empty ring takes them at once.
    pub(super) fn pmd_burst(&mut self, queues: usize, fx: &mut Effects) {
        let link_mbps = self.profile.network.link_mbps;
        let burst_ns = (u64::from(PMD_BURST) * L2FWD_FRAME_WIRE_BYTES * 8 * 1_000) / link_mbps;
        fx.schedule(
            self.now + burst_ns,
            Event::PmdBurst {
                queues: index_u32(queues),
            },
        );
        let now = self.now;
        for _ in 0..PMD_BURST {
            self.queues[queues].vf.receive(now);
        }
        let owner = self.queues[queues].owner;
        if self.vcpus[owner].spin_since.is_some() {
            fx.push(Effect::Poke(owner));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{listed, machine, running};
    use super::*;
    use crate::policy::DesignKind;
    use crate::scenario::HostShape;

    #[test]
    fn the_poll_mode_driver_forwards_bursts_and_is_poked_when_idle() {
        let mut m = machine(DesignKind::Did, WorkloadKind::L2fwd, HostShape::default());
        running(&mut m, 0);
        assert_eq!(m.app_work(0, App::PollMode), None, "an empty ring: spin");
        m.vcpus[0].spin_since = Some(0);
        let fx = listed(&mut m, |m, fx| m.pmd_burst(0, fx));
        assert!(fx.contains(&Effect::Poke(0)), "{fx:?}");
        let per_packet = m.profile.workloads.l2fwd_packet;
        let work = m.app_work(0, App::PollMode);
        assert_eq!(work, Some(u64::from(PMD_BURST) * per_packet));
        assert_eq!(m.queues[0].vf.ring, 0);
        assert_eq!(m.counters.packets_processed, 0, "counted once forwarded");
        listed(&mut m, |m, fx| m.app_done(0, App::PollMode, fx));
        assert_eq!(m.counters.packets_processed, u64::from(PMD_BURST));
    }

    #[test]
    fn a_closed_loop_keeps_at_most_one_request_per_connection() {
        let mut pool = ClientPool::new(2);
        assert!(pool.offer(0));
        assert!(pool.offer(10));
        assert!(!pool.offer(20));
        assert_eq!(pool.outstanding, 2);
        // The oldest is answered first; the waiting request takes its
        // connection, timed from its offer.
        assert_eq!(pool.answered(100, false), (Some(100), true));
        assert_eq!(pool.outstanding, 2);
        assert_eq!(pool.answered(150, false), (Some(140), false));
        assert_eq!(pool.sent.front(), Some(&20), "offered at 20, sent at 100");
        assert_eq!(pool.answered(300, false), (Some(280), false));
        assert_eq!(pool.outstanding, 0);
    }

    #[test]
    fn back_to_back_clients_send_again_at_once() {
        let mut pool = ClientPool::new(1);
        assert!(pool.offer(0));
        assert_eq!(pool.answered(50, true), (Some(50), true));
        assert_eq!(pool.answered(80, true), (Some(30), true));
    }
}
