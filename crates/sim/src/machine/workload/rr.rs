//! netperf-rr and udp-rr: a remote on the wire sends a request, the guest
//! answers it, and the remote sends the next request as soon as it has
//! the response, one request outstanding. The remote measures the round
//! trip; the workload reports it as its tool defines latency (NetPIPE's
//! netperf-rr half the round trip, netperf's UDP_RR the whole).

use super::{requests_per_s, Ctx, SentTimes, Taken, Traffic, Workload, WorkloadEvent};
use crate::machine::effects::{Effect, Effects};
use crate::machine::ledger::Counters;
use crate::machine::network::Network;
use crate::machine::platform::BackendJob;
use crate::machine::{index_u32, Ring};
use crate::metrics::{Throughput, ThroughputUnit};
use crate::profile::CostProfile;
use crate::scenario::{RunSpec, Transport, WorkloadKind};

/// The request/response remote's event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum RemoteEvent {
    /// The remote has the VM's response and sends its next request.
    Request { vm: u32 },
    /// The request reaches the VM's NIC, or vhost.
    RequestArrival { vm: u32 },
}

/// The remote end: per VM when it sent its last request, and what the
/// run's message costs, fixed for the run.
pub(super) struct Remote {
    requested_at: SentTimes,
    net: Network,
    /// The ring the requests arrive on (virtio over PV, else the VF's).
    ring: Ring,
    /// Its guest's work per transaction.
    request_work_ns: u64,
    /// netperf-rr's (NetPIPE's) latency is half the round trip.
    halves_round_trip: bool,
}

impl Remote {
    pub(super) fn new(spec: &RunSpec, profile: &CostProfile) -> Remote {
        Remote {
            requested_at: SentTimes::default(),
            net: Network::new(profile, &spec.group, false),
            ring: match spec.group.transport {
                Transport::Pv => Ring::Virtio,
                _ => Ring::Vf,
            },
            request_work_ns: profile.guest_ns.request_work,
            halves_round_trip: spec.workload == WorkloadKind::NetperfRr,
        }
    }

    /// The remote has `vm`'s response at `now` and answers at once:
    /// reading the response out of its socket and writing the next
    /// request in (a copy each), which reaches the VM one way later. The
    /// round trip since its previous request, if any.
    fn request(&mut self, vm: usize, now: u64, fx: &mut Effects) -> Option<u64> {
        let bytes = self.net.message_bytes();
        let at = now + 2 * self.net.copy_ns(bytes) + self.net.one_way_ns(bytes);
        fx.schedule(at, RemoteEvent::RequestArrival { vm: index_u32(vm) });
        let previous = self.requested_at.replace(vm, now)?;
        Some(now - previous)
    }
}

impl Workload for Remote {
    fn traffic(&self) -> Traffic {
        let bytes = self.net.message_bytes();
        Traffic {
            frame_bytes: bytes,
            tx_bytes: bytes,
            ..Traffic::default()
        }
    }

    /// The remote starts with `vm`'s first request.
    fn start(&mut self, vm: usize, _owners: &[usize], _ctx: &mut Ctx, fx: &mut Effects) {
        fx.schedule(0, RemoteEvent::Request { vm: index_u32(vm) });
    }

    fn on_event(&mut self, event: WorkloadEvent, ctx: &mut Ctx, fx: &mut Effects) {
        match event {
            WorkloadEvent::Remote(RemoteEvent::Request { vm }) => {
                if let Some(round_trip) = self.request(vm as usize, ctx.now, fx) {
                    let latency = if self.halves_round_trip {
                        round_trip / 2
                    } else {
                        round_trip
                    };
                    ctx.record.request_done(latency);
                }
            }
            WorkloadEvent::Remote(RemoteEvent::RequestArrival { vm }) => {
                let pair = ctx.topology.first_pair(vm as usize);
                fx.push(Effect::RxPacket {
                    pair,
                    ring: self.ring,
                });
            }
            _ => {}
        }
    }

    /// netperf's transaction: the message copied in and out.
    fn rx_work_ns(&self, _pair: usize) -> Option<u64> {
        Some(self.request_work_ns + 2 * self.net.copy_ns(self.net.message_bytes()))
    }

    /// The guest answered: the response leaves through virtio to vhost, or
    /// through the VF's doorbell (a passed-through MMIO write) for the
    /// remote, which has it one way later.
    fn packet_taken(&mut self, taken: Taken, ctx: &mut Ctx, fx: &mut Effects) {
        let pair = ctx.topology.pair_of(taken.vcpu);
        match taken.ring {
            Ring::Virtio => {
                fx.push(Effect::VirtioKick(taken.vcpu));
                fx.push(Effect::BackendStart {
                    pair,
                    job: BackendJob::Tx,
                });
            }
            Ring::Vf => {
                let vm = ctx.topology.vm_of(taken.vcpu);
                let at = ctx.now + self.net.one_way_ns(self.net.message_bytes());
                fx.schedule(at, RemoteEvent::Request { vm: index_u32(vm) });
                fx.push(Effect::VfSent {
                    pair,
                    start: ctx.now,
                    bytes: self.net.message_bytes(),
                });
            }
        }
    }

    /// vhost passed the response on: the host process has it once past
    /// the bridge.
    fn sent(&mut self, pair: usize, ctx: &mut Ctx, fx: &mut Effects) {
        let vm = ctx.topology.vm_of_pair(pair);
        let at = ctx.now + self.net.past_bridge_ns(self.net.message_bytes());
        fx.schedule(at, RemoteEvent::Request { vm: index_u32(vm) });
    }

    fn throughput(&self, record: &Counters, seconds: f64) -> Option<Throughput> {
        requests_per_s(record, seconds, ThroughputUnit::TransactionsPerS)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{one_vm, spec, Bench};
    use super::*;
    use crate::machine::fixture::scheduled;

    fn built(workload: WorkloadKind, transport: Transport) -> (Remote, Bench) {
        let mut group = one_vm(workload, 1);
        group.transport = transport;
        group.message_bytes = Some(256);
        let bench = Bench::new(&group);
        (
            Remote::new(&spec(workload, group), &CostProfile::did_2015()),
            bench,
        )
    }

    #[test]
    fn each_request_after_the_first_closes_a_round_trip_reported_as_the_tool_does() {
        for (workload, halves) in [
            (WorkloadKind::NetperfRr, true),
            (WorkloadKind::UdpRr, false),
        ] {
            let (mut remote, mut bench) = built(workload, Transport::Sriov);
            let fx = bench.listed(|ctx, fx| remote.start(0, &[0], ctx, fx));
            assert_eq!(fx, [scheduled(0, RemoteEvent::Request { vm: 0 })]);
            let request = WorkloadEvent::Remote(RemoteEvent::Request { vm: 0 });
            let fx = bench.listed(|ctx, fx| remote.on_event(request, ctx, fx));
            let bytes = remote.net.message_bytes();
            let way = 2 * remote.net.copy_ns(bytes) + remote.net.one_way_ns(bytes);
            let arrival = scheduled(way, RemoteEvent::RequestArrival { vm: 0 });
            assert_eq!(fx, [arrival], "two copies and the wire");
            assert!(bench.record.latencies.is_empty(), "the first request");
            bench.now = 20_000;
            bench.listed(|ctx, fx| remote.on_event(request, ctx, fx));
            let expected = if halves { 10_000 } else { 20_000 };
            assert_eq!(bench.record.latencies, [expected], "{workload:?}");
        }
    }

    #[test]
    fn a_request_arrives_on_the_transports_ring_and_the_answer_leaves_the_same_way() {
        let (mut remote, mut bench) = built(WorkloadKind::NetperfRr, Transport::Pv);
        let arrival = WorkloadEvent::Remote(RemoteEvent::RequestArrival { vm: 0 });
        let fx = bench.listed(|ctx, fx| remote.on_event(arrival, ctx, fx));
        assert_eq!(
            fx,
            [Effect::RxPacket {
                pair: 0,
                ring: Ring::Virtio
            }]
        );
        let taken = Taken {
            vcpu: 0,
            pair: 0,
            ring: Ring::Virtio,
            napi_completes: true,
        };
        let fx = bench.listed(|ctx, fx| remote.packet_taken(taken, ctx, fx));
        let to_vhost = Effect::BackendStart {
            pair: 0,
            job: BackendJob::Tx,
        };
        assert_eq!(fx, [Effect::VirtioKick(0), to_vhost]);
        // Over the VF the remote has it one way later.
        let (mut remote, mut bench) = built(WorkloadKind::NetperfRr, Transport::Sriov);
        bench.now = 1_000;
        let taken = Taken {
            ring: Ring::Vf,
            ..taken
        };
        let fx = bench.listed(|ctx, fx| remote.packet_taken(taken, ctx, fx));
        let way = remote.net.one_way_ns(256);
        let sent = Effect::VfSent {
            pair: 0,
            start: 1_000,
            bytes: 256,
        };
        assert_eq!(
            fx,
            [scheduled(1_000 + way, RemoteEvent::Request { vm: 0 }), sent]
        );
    }
}
