//! The TCP streams, one per queue-pair owner: iperf (the guest receives;
//! the remote sender is clocked by the guest's ACKs) and netperf (the
//! guest's application writes `message_bytes` at a time, as its background
//! task; the remote's ACKs clock it). The flow, its window and its
//! sender's sends are `tcp`'s; this module gathers what they need.

use dirq_stats::f64_of;

use super::tcp::{
    remote_receiver, tcp_flow, AckVia, RemoteReceiver, StreamLink, TcpFlow, ACK_BYTES,
};
use super::{Ctx, Programs, StepOutcome, Taken, Traffic, Workload, WorkloadEvent, WorkloadStep};
use crate::machine::effects::{Effect, Effects};
use crate::machine::guest::Step;
use crate::machine::ledger::Counters;
use crate::machine::network::Network;
use crate::machine::topology::Topology;
use crate::machine::{index_u32, Ring};
use crate::metrics::{Throughput, ThroughputUnit};
use crate::profile::{CostProfile, WorkloadCosts};
use crate::scenario::{RunSpec, Transport, WorkloadKind};

/// netperf's application, the guest's background task.
const STREAM_WRITER: &[Step] = &[Step::Workload(WorkloadStep::App)];

/// The TCP streams' events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum TcpEvent {
    /// iperf's sender may put its next segment on the wire.
    Send { pair: u32 },
    /// A TCP segment reaches the VF.
    SegmentArrival { pair: u32 },
    /// A TCP ACK reaches iperf's sender.
    Ack { pair: u32 },
    /// A remote's TCP ACK reaches the VF (netperf).
    AckArrival { pair: u32 },
    /// netperf's remote receiver polls its NIC and acknowledges.
    RemotePoll { pair: u32 },
}

/// Which end the guest is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// iperf: the guest receives and acknowledges.
    Receiver,
    /// netperf: the guest's application writes.
    Sender,
}

/// iperf's or netperf's run: per queue pair its flow and (netperf) the
/// remote receiver's NIC.
pub(super) struct Streams {
    end: End,
    net: Network,
    link: StreamLink,
    costs: WorkloadCosts,
    /// Computation per byte netperf's writes add, CPU cycles.
    compute_cycles_per_byte: u64,
    flows: Vec<TcpFlow>,
    remotes: Vec<RemoteReceiver>,
}

impl Streams {
    pub(super) fn new(spec: &RunSpec, profile: &CostProfile, topology: &Topology) -> Streams {
        let net = Network::new(profile, &spec.group, false);
        let network = &profile.network;
        let pairs = topology.pair_count();
        Streams {
            end: match spec.workload {
                WorkloadKind::Netperf => End::Sender,
                _ => End::Receiver,
            },
            link: StreamLink {
                wire_one_way_ns: profile.guest_ns.wire_one_way,
                frame_overhead_bytes: network.frame_overhead_bytes,
                link_mbps: network.link_mbps,
                mss: net.mss(),
                gso_bytes: network.gso_bytes,
                over_pv: spec.group.transport == Transport::Pv,
            },
            costs: profile.workloads.clone(),
            compute_cycles_per_byte: spec.group.compute_cycles_per_byte.unwrap_or(0),
            flows: vec![tcp_flow(network, spec.group.transport); pairs],
            remotes: vec![remote_receiver(network); pairs],
            net,
        }
    }

    /// netperf's TCP sends what its application wrote
    /// ([`TcpFlow::tso_send`]); each send's completion is the VF's.
    fn tso_send(&mut self, pair: usize, now: u64, fx: &mut Effects) {
        let sends = self.flows[pair].tso_send(
            &mut self.remotes[pair],
            index_u32(pair),
            now,
            &self.link,
            fx,
        );
        for (start, bytes) in sends {
            fx.push(Effect::VfSent { pair, start, bytes });
        }
    }

    /// An ACK reaches iperf's sender: the window opens and it sends on.
    fn ack_arrives(&mut self, pair: usize, now: u64, fx: &mut Effects) {
        self.flows[pair].ack_arrives(index_u32(pair), now, &self.link, fx);
    }
}

impl Workload for Streams {
    fn programs(&self) -> Programs {
        Programs {
            background: (self.end == End::Sender).then_some(STREAM_WRITER),
            ..Programs::default()
        }
    }

    fn traffic(&self) -> Traffic {
        Traffic {
            frame_bytes: match self.end {
                End::Receiver => self.flows.first().map_or(0, |flow| flow.segment_bytes),
                End::Sender => ACK_BYTES,
            },
            tx_bytes: ACK_BYTES,
            ..Traffic::default()
        }
    }

    /// iperf: each owner's stream starts sending.
    fn start(&mut self, _vm: usize, owners: &[usize], ctx: &mut Ctx, fx: &mut Effects) {
        if self.end == End::Sender {
            return;
        }
        for &owner in owners {
            let pair = index_u32(ctx.topology.pair_of(owner));
            fx.schedule(0, TcpEvent::Send { pair });
        }
    }

    fn on_event(&mut self, event: WorkloadEvent, ctx: &mut Ctx, fx: &mut Effects) {
        let WorkloadEvent::Tcp(event) = event else {
            return;
        };
        match event {
            // iperf's sender sends what the window allows.
            TcpEvent::Send { pair } => {
                self.flows[pair as usize].send(pair, ctx.now, &self.link, fx)
            }
            TcpEvent::SegmentArrival { pair } | TcpEvent::AckArrival { pair } => {
                fx.push(Effect::RxPacket {
                    pair: pair as usize,
                    ring: Ring::Vf,
                })
            }
            TcpEvent::Ack { pair } => self.ack_arrives(pair as usize, ctx.now, fx),
            // netperf's remote polls: its ACKs leave for the guest's VF.
            TcpEvent::RemotePoll { pair } => {
                let p = pair as usize;
                self.flows[p].remote_polls(&mut self.remotes[p], pair, ctx.now, &self.link, fx)
            }
        }
    }

    /// netperf writes a message if its send buffer has room: its work,
    /// the computation, the copy and TSO's send spread over the writes
    /// that fill a GSO buffer; a spin while the window is full.
    fn on_step(
        &mut self,
        vcpu: usize,
        _step: WorkloadStep,
        ctx: &mut Ctx,
        _fx: &mut Effects,
    ) -> StepOutcome {
        let bytes = self.net.message_bytes();
        if !self.flows[ctx.topology.pair_of(vcpu)].may_write(bytes) {
            return StepOutcome::Spin;
        }
        let network = &self.net.costs;
        let compute = self.compute_cycles_per_byte * bytes * 1_000 / self.costs.cpu_mhz;
        let send = network.tx_packet * bytes / network.gso_bytes;
        StepOutcome::Takes(self.costs.stream_message + compute + self.net.copy_ns(bytes) + send)
    }

    fn step_done(&mut self, vcpu: usize, _step: WorkloadStep, ctx: &mut Ctx, fx: &mut Effects) {
        let pair = ctx.topology.pair_of(vcpu);
        self.flows[pair].buffered += self.net.message_bytes();
        self.tso_send(pair, ctx.now, fx);
    }

    fn rx_work_ns(&self, pair: usize) -> Option<u64> {
        let network = &self.net.costs;
        Some(match self.end {
            // The stack's work and the ACK once per GRO batch.
            End::Receiver => {
                let flow = &self.flows[pair];
                let batch = if flow.starts_batch() {
                    network.rx_stack + network.tx_packet
                } else {
                    0
                };
                network.rx_frame + batch + self.net.copy_ns(flow.segment_bytes)
            }
            // A pure ACK: no GRO merge, nothing to copy.
            End::Sender => network.rx_frame + network.rx_stack,
        })
    }

    fn packet_taken(&mut self, taken: Taken, ctx: &mut Ctx, fx: &mut Effects) {
        let Taken {
            vcpu, pair, ring, ..
        } = taken;
        match self.end {
            // iperf's guest acknowledges each GRO batch; over the VF its
            // ACK's completion is the VF's.
            End::Receiver => {
                let Some(bytes) = self.flows[pair].received(taken.napi_completes) else {
                    return;
                };
                let via = match ring {
                    Ring::Vf => AckVia::Vf,
                    Ring::Virtio => AckVia::Virtio { vcpu },
                };
                self.flows[pair].ack_sent(index_u32(pair), via, bytes, ctx.now, &self.link, fx);
                if ring == Ring::Vf {
                    fx.push(Effect::VfSent {
                        pair,
                        start: ctx.now,
                        bytes: ACK_BYTES,
                    });
                }
            }
            // netperf's guest takes the remote's ACK and sends on.
            End::Sender => {
                let flow = &mut self.flows[pair];
                if let Some(bytes) = flow.acks.pop_front() {
                    flow.acknowledged(bytes);
                }
                self.tso_send(pair, ctx.now, fx);
            }
        }
    }

    /// vhost passed iperf's guest's ACK on: it reaches the sender.
    fn sent(&mut self, pair: usize, ctx: &mut Ctx, fx: &mut Effects) {
        self.ack_arrives(pair, ctx.now, fx);
    }

    fn throughput(&self, _record: &Counters, seconds: f64) -> Option<Throughput> {
        let bits = f64_of(self.flows.iter().map(|flow| flow.acked_bytes).sum()) * 8.0;
        Some(match self.end {
            End::Receiver => Throughput {
                value: bits / seconds / 1e9,
                unit: ThroughputUnit::GbitPerS,
            },
            End::Sender => Throughput {
                value: bits / seconds / 1e6,
                unit: ThroughputUnit::MbitPerS,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{one_vm, spec, Bench};
    use super::*;
    use crate::machine::fixture::scheduled;

    fn streams(workload: WorkloadKind) -> (Streams, Bench) {
        let mut group = one_vm(workload, 1);
        group.message_bytes = Some(256);
        let bench = Bench::new(&group);
        let streams = Streams::new(
            &spec(workload, group),
            &CostProfile::did_2015(),
            &bench.topology,
        );
        (streams, bench)
    }

    #[test]
    fn the_receiver_pays_the_stack_and_the_ack_once_per_gro_batch() {
        let (mut iperf, _) = streams(WorkloadKind::Iperf);
        let network = iperf.net.costs.clone();
        let first = iperf.rx_work_ns(0).expect("a segment's");
        iperf.flows[0].received(false);
        let next = iperf.rx_work_ns(0).expect("a segment's");
        assert_eq!(first - next, network.rx_stack + network.tx_packet);
    }

    #[test]
    fn iperfs_receiver_acks_each_batch_and_the_vf_completes_its_send() {
        let (mut iperf, mut bench) = streams(WorkloadKind::Iperf);
        bench.now = 400;
        let taken = Taken {
            vcpu: 0,
            pair: 0,
            ring: Ring::Vf,
            napi_completes: true,
        };
        let fx = bench.listed(|ctx, fx| iperf.packet_taken(taken, ctx, fx));
        let on_wire = iperf.link.wire_one_way_ns + iperf.net.frame_wire_ns(ACK_BYTES);
        let ack = scheduled(400 + on_wire, TcpEvent::Ack { pair: 0 });
        let sent = Effect::VfSent {
            pair: 0,
            start: 400,
            bytes: ACK_BYTES,
        };
        assert_eq!(fx, [ack, sent]);
    }

    #[test]
    fn nagle_holds_back_a_partial_segment_while_data_is_in_flight() {
        let (mut netperf, mut bench) = streams(WorkloadKind::Netperf);
        let write = |netperf: &mut Streams, bench: &mut Bench| {
            bench.listed(|ctx, fx| netperf.step_done(0, WorkloadStep::App, ctx, fx))
        };
        let sends = |fx: &[Effect]| {
            fx.iter()
                .filter(|effect| matches!(effect, Effect::VfSent { .. }))
                .count()
        };
        assert_eq!(
            sends(&write(&mut netperf, &mut bench)),
            1,
            "nothing in flight: sent"
        );
        assert_eq!(netperf.flows[0].in_flight(), 256);
        assert_eq!(
            sends(&write(&mut netperf, &mut bench)),
            0,
            "a partial segment waits"
        );
        let mss = netperf.net.mss();
        netperf.flows[0].buffered = 2 * mss;
        let fx = bench.listed(|ctx, fx| {
            netperf.tso_send(0, ctx.now, fx);
        });
        assert_eq!(sends(&fx), 1, "two full frames: one send");
    }

    #[test]
    fn netperf_writes_while_its_send_buffer_has_room_and_spins_when_full() {
        let (mut netperf, mut bench) = streams(WorkloadKind::Netperf);
        let (outcome, _) = bench.call(|ctx, fx| netperf.on_step(0, WorkloadStep::App, ctx, fx));
        assert!(matches!(outcome, StepOutcome::Takes(ns) if ns > 0));
        let window = netperf.net.costs.tcp_window_bytes;
        netperf.flows[0].buffered = window;
        let (outcome, _) = bench.call(|ctx, fx| netperf.on_step(0, WorkloadStep::App, ctx, fx));
        assert_eq!(outcome, StepOutcome::Spin);
    }
}
