//! The network as the workloads use it: what a received frame carries and
//! costs the guest, the one-way paths (the NIC's link, the host's bridge),
//! and the two TCP streams: iperf (the guest receives; the remote sender
//! is clocked by the guest's ACKs) and netperf (the guest's application
//! writes; the remote's ACKs clock it). Costs come from the profile's
//! `network` section.

use super::tcp::{wire_ns, RemoteReceiver, TcpFlow};
use super::*;
use crate::profile::NetworkCosts;

/// Ethernet's header, FCS, preamble and inter-frame gap (IEEE 802.3).
const ETHERNET_FRAMING_BYTES: u64 = 38;
/// Frame bytes the NIC does not move by DMA: the FCS (the NIC adds and
/// strips it), the preamble and the inter-frame gap (IEEE 802.3).
const NOT_DMA_BYTES: u64 = 24;
/// Payload of a pure TCP ACK frame.
const ACK_BYTES: u64 = 0;
/// The UDP workloads' packets (docs/calibration.md: 128-byte packets).
const UDP_PACKET_BYTES: u64 = 128;
/// netperf's default request/response size (1 byte) when a scenario
/// names no `message_bytes`.
const DEFAULT_MESSAGE_BYTES: u64 = 1;

/// The TCP streams' events (iperf, netperf).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TcpEvent {
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

/// What a packet the guest receives is to the run's workload
/// ([`WorkloadModel`]): what it carries, costs the guest and brings about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Received {
    /// A UDP packet the guest only counts (udp-rx, whileloop, and the
    /// group's background traffic beside the other workloads).
    Datagram,
    /// A segment of iperf's TCP stream, acknowledged once per GRO batch.
    StreamSegment,
    /// The remote's ACK of netperf's TCP stream.
    StreamAck,
    /// A netperf-rr or udp-rr transaction's request.
    Transaction,
    /// A client's request to the server (memcached, apache).
    Request,
    /// A SIP message for the B2BUA.
    SipMessage,
}

impl Machine {
    /// The UDP receive workloads: they keep the coalescing fitted on them,
    /// and a packet NAPI takes is simply consumed.
    pub(super) fn fitted_coalescing(&self) -> bool {
        self.workload.fitted_coalescing
    }

    /// Whether the workload acts on each packet NAPI takes
    /// ([`Self::packet_taken`]); the UDP receivers only count it.
    pub(super) fn acts_on_packets(&self) -> bool {
        !self.fitted_coalescing()
    }

    pub(super) fn message_bytes(&self) -> u64 {
        self.spec
            .group
            .message_bytes
            .unwrap_or(DEFAULT_MESSAGE_BYTES)
    }

    /// Payload bytes of one frame (or virtio buffer) the guest receives.
    pub(super) fn frame_bytes(&self) -> u64 {
        match self.workload.received {
            Received::StreamSegment => {
                tcp_flow(&self.profile.network, self.spec.group.transport).segment_bytes
            }
            Received::StreamAck => ACK_BYTES,
            Received::Transaction => self.message_bytes(),
            Received::Request => self.request_bytes(),
            Received::SipMessage => super::sip::SIP_MESSAGE_BYTES,
            Received::Datagram => UDP_PACKET_BYTES,
        }
    }

    /// Copying `bytes` between buffers.
    pub(super) fn copy_ns(&self, bytes: u64) -> u64 {
        bytes * self.profile.network.copy_per_kib / 1024
    }

    /// Serialization of one frame of `payload` bytes on the link.
    pub(super) fn frame_wire_ns(&self, payload: u64) -> u64 {
        let network = &self.profile.network;
        wire_ns(payload, 1, network.frame_overhead_bytes, network.link_mbps)
    }

    /// One NIC's DMA of a frame of `payload` bytes between its FIFO and
    /// host memory. The 82599 stores a frame whole before it passes it on
    /// either way (the receive side checks the FCS, the transmit side
    /// inserts checksums over the whole frame), so the DMA is on the path.
    pub(super) fn frame_dma_ns(&self, payload: u64) -> u64 {
        let network = &self.profile.network;
        let bytes = payload + network.frame_overhead_bytes.saturating_sub(NOT_DMA_BYTES);
        (bytes * 8 * 1_000).div_ceil(network.pcie_mbps)
    }

    /// A message's way to the peer: over the link to the remote host (the
    /// sending NIC's DMA, the wire, the receiving NIC's DMA), or over the
    /// host's bridge to a host process (PV; vhost's copy is its own job),
    /// or both for a PV peer on another server.
    pub(super) fn one_way_ns(&self, payload: u64) -> u64 {
        let bridge = self.profile.network.bridge_one_way;
        match self.spec.group.transport {
            Transport::Pv => bridge + self.past_bridge_ns(payload),
            _ => self.link_one_way_ns(payload),
        }
    }

    /// A PV guest's frame once past the host's bridge, which vhost's pass
    /// runs itself (`backend_start`): the link to a peer on another
    /// server, nothing more for a host process.
    pub(super) fn past_bridge_ns(&self, payload: u64) -> u64 {
        if self.pv_peer_on_wire() {
            self.link_one_way_ns(payload)
        } else {
            0
        }
    }

    /// Over the link: the sending NIC's DMA, the wire, the receiving
    /// NIC's DMA.
    fn link_one_way_ns(&self, payload: u64) -> u64 {
        self.profile.guest_ns.wire_one_way
            + self.frame_wire_ns(payload)
            + 2 * self.frame_dma_ns(payload)
    }

    /// The payload vhost copies for a buffer: into the guest's receive
    /// buffer (`handle_rx`'s recvmsg), out of its transmit buffer
    /// (`handle_tx`'s sendmsg; Linux 3.6 leaves zero-copy transmit off).
    pub(super) fn backend_bytes(&self, job: BackendJob) -> u64 {
        match job {
            BackendJob::RxPacket => self.frame_bytes(),
            BackendJob::TxPacket => self.message_bytes(),
            BackendJob::TxResponse => self.response_bytes(),
            BackendJob::TxAck | BackendJob::BlockRead => 0,
        }
    }

    /// The guest's work for the packet NAPI takes next from `vcpu`'s ring.
    pub(super) fn rx_work_ns(&self, vcpu: usize) -> u64 {
        let network = &self.profile.network;
        let pair = self.vcpus[vcpu].pair;
        match self.workload.received {
            Received::StreamSegment => {
                let flow = &self.pairs[pair].tcp;
                // The stack's work and the ACK once per GRO batch.
                let batch = if flow.starts_batch() {
                    network.rx_stack + network.tx_packet
                } else {
                    0
                };
                network.rx_frame + batch + self.copy_ns(flow.segment_bytes)
            }
            // A pure ACK: no GRO merge, nothing to copy.
            Received::StreamAck => network.rx_frame + network.rx_stack,
            // netperf's transaction, the message copied in and out.
            Received::Transaction => {
                self.profile.guest_ns.request_work + 2 * self.copy_ns(self.message_bytes())
            }
            Received::Request if self.connection_per_request() => self.segment_work_ns(pair),
            Received::Request | Received::SipMessage => {
                network.rx_frame + network.rx_stack + self.copy_ns(self.frame_bytes())
            }
            Received::Datagram => self.profile.guest_ns.rx_packet,
        }
    }

    /// NAPI took a packet from `kind`'s ring: what the workload does with
    /// it.
    pub(super) fn packet_taken(&mut self, vcpu: usize, kind: Ring, fx: &mut Effects) {
        let pair = self.vcpus[vcpu].pair;
        match self.workload.received {
            Received::Transaction => {
                fx.push(Effect::NetperfRespond { vcpu, queue: kind });
            }
            Received::StreamSegment => {
                let rx = self.pairs[pair].rx(kind);
                let last_in_poll = !rx.napi.may_take(rx.ring);
                if let Some(bytes) = self.pairs[pair].tcp.received(last_in_poll) {
                    self.send_ack(vcpu, kind, bytes, fx);
                }
            }
            Received::StreamAck => {
                let flow = &mut self.pairs[pair].tcp;
                if let Some(bytes) = flow.acks.pop_front() {
                    flow.acknowledged(bytes);
                }
                self.tso_send(pair, fx);
            }
            Received::Request if self.connection_per_request() => {
                self.segment_taken(pair, fx);
            }
            Received::Request => self.pairs[pair].socket += 1,
            Received::SipMessage => self.sip.packet_taken(),
            Received::Datagram => {}
        }
    }

    /// The receiving guest's ACK for `bytes` leaves
    /// ([`TcpFlow::ack_sent`]); over the VF its completion is the VF's.
    fn send_ack(&mut self, vcpu: usize, kind: Ring, bytes: u64, fx: &mut Effects) {
        let pair = self.vcpus[vcpu].pair;
        let link = self.stream_link();
        let path = match kind {
            Ring::Vf => AckPath::Vf,
            Ring::Virtio => AckPath::Virtio { vcpu },
        };
        self.pairs[pair]
            .tcp
            .ack_sent(index_u32(pair), path, bytes, self.now, &link, fx);
        if kind == Ring::Vf {
            self.vf_sent(pair, self.now, ACK_BYTES, fx);
        }
    }

    pub(super) fn tcp_event(&mut self, event: TcpEvent, fx: &mut Effects) {
        match event {
            TcpEvent::Send { pair } => self.tcp_send(pair as usize, fx),
            TcpEvent::SegmentArrival { pair } | TcpEvent::AckArrival { pair } => {
                self.rx_packet(pair as usize, Ring::Vf, fx)
            }
            TcpEvent::Ack { pair } => self.tcp_ack_arrives(pair as usize, fx),
            TcpEvent::RemotePoll { pair } => self.remote_poll(pair as usize, fx),
        }
    }

    /// An ACK reaches iperf's sender: the window opens and it sends on.
    pub(super) fn tcp_ack_arrives(&mut self, pair: usize, fx: &mut Effects) {
        let link = self.stream_link();
        self.pairs[pair]
            .tcp
            .ack_arrives(index_u32(pair), self.now, &link, fx);
    }

    /// iperf's sender sends what the window allows ([`TcpFlow::send`]).
    pub(super) fn tcp_send(&mut self, pair: usize, fx: &mut Effects) {
        let link = self.stream_link();
        self.pairs[pair]
            .tcp
            .send(index_u32(pair), self.now, &link, fx);
    }

    /// The figures a stream's sender uses, fixed for the run.
    fn stream_link(&self) -> StreamLink {
        let network = &self.profile.network;
        StreamLink {
            wire_one_way_ns: self.profile.guest_ns.wire_one_way,
            frame_overhead_bytes: network.frame_overhead_bytes,
            link_mbps: network.link_mbps,
            mss: mss(network),
            gso_bytes: network.gso_bytes,
            over_pv: self.spec.group.transport == Transport::Pv,
        }
    }

    /// netperf's TCP sends what its application wrote
    /// ([`TcpFlow::tso_send`]); each send's completion is the VF's.
    pub(super) fn tso_send(&mut self, pair: usize, fx: &mut Effects) {
        let link = self.stream_link();
        let queue_pair = &mut self.pairs[pair];
        let sends =
            queue_pair
                .tcp
                .tso_send(&mut queue_pair.remote, index_u32(pair), self.now, &link, fx);
        for (start, bytes) in sends {
            self.vf_sent(pair, start, bytes, fx);
        }
    }

    /// netperf's remote polls ([`TcpFlow::remote_polls`]).
    pub(super) fn remote_poll(&mut self, pair: usize, fx: &mut Effects) {
        let link = self.stream_link();
        let queue_pair = &mut self.pairs[pair];
        queue_pair
            .tcp
            .remote_polls(&mut queue_pair.remote, index_u32(pair), self.now, &link, fx);
    }

    pub(super) fn mss(&self) -> u64 {
        mss(&self.profile.network)
    }
}

/// What a stream's sender puts its segments on, fixed for the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct StreamLink {
    /// The link's one-way latency past serialization.
    pub(super) wire_one_way_ns: u64,
    pub(super) frame_overhead_bytes: u64,
    pub(super) link_mbps: u64,
    pub(super) mss: u64,
    pub(super) gso_bytes: u64,
    /// The sender is a host process handing GSO buffers to vhost (PV),
    /// not a remote on the link.
    pub(super) over_pv: bool,
}

impl StreamLink {
    /// Serialization of one frame of `payload` bytes.
    fn frame_wire_ns(&self, payload: u64) -> u64 {
        wire_ns(payload, 1, self.frame_overhead_bytes, self.link_mbps)
    }
}

/// The way the receiving guest's ACK leaves: through the VF's doorbell
/// (no exit) over the link, or through `vcpu`'s virtio kick to vhost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AckPath {
    Vf,
    Virtio { vcpu: usize },
}

/// The flow's sending end (iperf's remote, netperf's guest): it owns its
/// window and its link's timing, and lists what it sends.
impl TcpFlow {
    /// The receiving guest (iperf's) acknowledges `bytes` at `now` along
    /// `path`.
    pub(super) fn ack_sent(
        &mut self,
        pair: u32,
        path: AckPath,
        bytes: u64,
        now: u64,
        link: &StreamLink,
        fx: &mut Effects,
    ) {
        self.acks.push_back(bytes);
        match path {
            AckPath::Vf => {
                let at = now + link.wire_one_way_ns + link.frame_wire_ns(ACK_BYTES);
                fx.schedule(at, TcpEvent::Ack { pair });
            }
            AckPath::Virtio { vcpu } => {
                fx.push(Effect::VirtioKick(vcpu));
                fx.push(Effect::BackendStart {
                    pair: pair as usize,
                    job: BackendJob::TxAck,
                });
            }
        }
    }

    /// An ACK reaches the sender at `now`: the window opens and, if it
    /// had stalled the sender, it sends on.
    pub(super) fn ack_arrives(&mut self, pair: u32, now: u64, link: &StreamLink, fx: &mut Effects) {
        if let Some(bytes) = self.acks.pop_front() {
            let was_stalled = !self.can_send_segment();
            self.acknowledged(bytes);
            if was_stalled {
                self.send(pair, now, link, fx);
            }
        }
    }

    /// The sender sends what the window allows at `now`: MSS frames back
    /// to back at line rate over the link, or GSO buffers to vhost (PV).
    /// One send is pending at most (a later one replaces it).
    pub(super) fn send(&mut self, pair: u32, now: u64, link: &StreamLink, fx: &mut Effects) {
        if self.link_free_at > now {
            // The link is still sending the previous frame.
            fx.schedule(self.link_free_at, TcpEvent::Send { pair });
            return;
        }
        if !self.can_send_segment() {
            return;
        }
        let segment = self.segment_bytes;
        self.sent(segment);
        if link.over_pv {
            fx.push(Effect::BackendStart {
                pair: pair as usize,
                job: BackendJob::RxPacket,
            });
            fx.schedule(now, TcpEvent::Send { pair });
        } else {
            let on_wire = link.frame_wire_ns(segment);
            self.link_free_at = now + on_wire;
            let arrival = now + on_wire + link.wire_one_way_ns;
            fx.schedule(arrival, TcpEvent::SegmentArrival { pair });
            fx.schedule(now + on_wire, TcpEvent::Send { pair });
        }
    }

    /// netperf's TCP sends what its application wrote, as far as the
    /// window allows: one TSO send per GSO buffer, cut into MSS frames by
    /// the NIC; the `remote` acknowledges each GRO merge of its polls
    /// ([`RemoteReceiver`]). A send of more than one segment is cut at a
    /// whole number of segments and the rest waits for Nagle (Linux
    /// 3.1's `tcp_write_xmit` limits it with `tcp_mss_split_point`,
    /// which returns `needed - needed % mss_now` for the write queue's
    /// tail): no sub-MSS frame trails a TSO send. Returns each send's
    /// start and bytes.
    pub(super) fn tso_send(
        &mut self,
        remote: &mut RemoteReceiver,
        pair: u32,
        now: u64,
        link: &StreamLink,
        fx: &mut Effects,
    ) -> Vec<(u64, u64)> {
        let (mss, overhead, rate) = (link.mss, link.frame_overhead_bytes, link.link_mbps);
        let mut sends = Vec::new();
        loop {
            let bytes = self.buffered.min(self.room()).min(link.gso_bytes);
            if bytes == 0 || (bytes < mss && self.in_flight() > 0) {
                // Nagle (RFC 896): a partial segment waits while data is
                // unacknowledged.
                break;
            }
            let bytes = if bytes > mss {
                bytes - bytes % mss
            } else {
                bytes
            };
            self.buffered -= bytes;
            self.sent(bytes);
            let start = now.max(self.link_free_at);
            sends.push((start, bytes));
            let frames = bytes.div_ceil(mss);
            self.link_free_at = start + wire_ns(bytes, frames, overhead, rate);
            for frame in 1..=frames {
                let through = bytes.min(frame * mss);
                let payload = through - (frame - 1) * mss;
                let arrival =
                    start + wire_ns(through, frame, overhead, rate) + link.wire_one_way_ns;
                if let Some(poll_at) = remote.frame(arrival, payload) {
                    fx.schedule(poll_at, TcpEvent::RemotePoll { pair });
                }
            }
        }
        sends
    }

    /// netperf's `remote` polls at `now`: its ACKs leave for the guest's
    /// VF.
    pub(super) fn remote_polls(
        &mut self,
        remote: &mut RemoteReceiver,
        pair: u32,
        now: u64,
        link: &StreamLink,
        fx: &mut Effects,
    ) {
        let arrival = now + link.wire_one_way_ns;
        for covered in remote.poll(now) {
            self.acks.push_back(covered);
            fx.schedule(arrival, TcpEvent::AckArrival { pair });
        }
    }
}

/// TCP's payload per frame: the MTU less the IP and TCP headers (the
/// profile's frame overhead less Ethernet's own framing).
fn mss(network: &NetworkCosts) -> u64 {
    network.mtu_bytes
        - network
            .frame_overhead_bytes
            .saturating_sub(ETHERNET_FRAMING_BYTES)
}

/// netperf's remote receiver: the testbed's adaptive coalescing, merges
/// up to a GSO buffer of MSS frames.
pub(super) fn remote_receiver(network: &NetworkCosts) -> RemoteReceiver {
    let mode = super::itr::ItrMode::Adaptive(network.adaptive_coalescing);
    RemoteReceiver::new(mode, network.gso_bytes, mss(network))
}

/// A queue pair's TCP flow: MSS frames over a NIC, GSO buffers over
/// virtio.
pub(super) fn tcp_flow(network: &NetworkCosts, transport: Transport) -> TcpFlow {
    let segment = match transport {
        Transport::Pv => network.gso_bytes,
        _ => mss(network),
    };
    TcpFlow::new(network.tcp_window_bytes, segment, network.gso_bytes)
}

#[cfg(test)]
mod tests {
    use dirq_stats::f64_of;

    use super::super::fixture::{did_run, listed, listed_alone, scheduled, shaped};
    use super::*;
    use crate::design::DesignKind;
    use crate::scenario::{NicCoalescing, RunGroup};

    fn run(design: DesignKind, group: RunGroup, ms: u64) -> Machine {
        let mut m = shaped(RunSpec {
            design,
            workload: group.workload,
            rate_pps: None,
            group,
            nic: NicCoalescing::FITTED,
            duration_ns: ms * 1_000_000,
            offered_per_s: None,
        });
        m.run();
        m
    }

    /// A machine of `workload` over `transport`, not run.
    fn built(workload: WorkloadKind, transport: Transport) -> Machine {
        did_run(workload, 1_000_000, |group| {
            group.transport = transport;
            group.message_bytes = Some(256);
        })
    }

    #[test]
    fn the_receiver_pays_the_stack_and_the_ack_once_per_gro_batch() {
        let mut m = built(WorkloadKind::Iperf, Transport::Sriov);
        let network = m.profile.network.clone();
        let first = m.rx_work_ns(0);
        m.pairs[0].tcp.received(false);
        let next = m.rx_work_ns(0);
        assert_eq!(first - next, network.rx_stack + network.tx_packet);
    }

    #[test]
    fn nagle_holds_back_a_partial_segment_while_data_is_in_flight() {
        let mut m = built(WorkloadKind::Netperf, Transport::Sriov);
        m.pairs[0].tcp.buffered = 256;
        let fx = listed(&mut m, |m, fx| m.tso_send(0, fx));
        assert_eq!(fx.len(), 1, "nothing in flight: the write goes at once");
        assert_eq!(m.pairs[0].tcp.in_flight(), 256);
        m.pairs[0].tcp.buffered = 256;
        let fx = listed(&mut m, |m, fx| m.tso_send(0, fx));
        assert!(fx.is_empty(), "a partial segment waits for the ACK");
        m.pairs[0].tcp.buffered = 2 * m.mss();
        let fx = listed(&mut m, |m, fx| m.tso_send(0, fx));
        assert_eq!(fx.len(), 1, "two full frames: one ACK");
    }

    #[test]
    fn a_tso_send_carries_whole_segments_and_leaves_the_rest_to_nagle() {
        let mut m = built(WorkloadKind::Netperf, Transport::Sriov);
        let mss = m.mss();
        m.pairs[0].tcp.buffered = 2 * mss + 100;
        listed(&mut m, |m, fx| m.tso_send(0, fx));
        assert_eq!(m.pairs[0].tcp.in_flight(), 2 * mss);
        assert_eq!(m.pairs[0].tcp.buffered, 100, "held while data is in flight");
    }

    #[test]
    fn the_sender_waits_for_the_link_before_its_next_frame() {
        let mut m = built(WorkloadKind::Iperf, Transport::Sriov);
        let fx = listed(&mut m, |m, fx| m.tcp_send(0, fx));
        let on_wire = m.frame_wire_ns(m.mss());
        let arrival = on_wire + m.profile.guest_ns.wire_one_way;
        let send = TcpEvent::Send { pair: 0 };
        let frame = TcpEvent::SegmentArrival { pair: 0 };
        assert_eq!(fx, [scheduled(arrival, frame), scheduled(on_wire, send)]);
        // An ACK's send while the frame is on the wire only re-arms.
        let fx = listed(&mut m, |m, fx| m.tcp_send(0, fx));
        assert_eq!(fx, [scheduled(on_wire, send)]);
        assert_eq!(m.pairs[0].tcp.in_flight(), m.mss());
    }

    /// A 10 Gb/s link, 100 ns one way, 38 bytes of framing.
    const LINK: StreamLink = StreamLink {
        wire_one_way_ns: 100,
        frame_overhead_bytes: 38,
        link_mbps: 10_000,
        mss: 1_000,
        gso_bytes: 2_000,
        over_pv: false,
    };

    /// A flow of 1,000-byte segments and a two-segment window.
    fn two_segment_flow() -> TcpFlow {
        TcpFlow::new(2_000, 1_000, 2_000)
    }

    #[test]
    fn an_ack_that_opens_a_stalled_window_lists_the_next_send() {
        let mut flow = two_segment_flow();
        flow.sent(2_000);
        flow.acks.push_back(1_000);
        let fx = listed_alone(|fx| flow.ack_arrives(3, 5_000, &LINK, fx));
        // 1,038 bytes at 10 Gb/s: 830.4 ns, rounded up.
        let on_wire = LINK.frame_wire_ns(1_000);
        assert_eq!(on_wire, 831);
        let frame = TcpEvent::SegmentArrival { pair: 3 };
        let send = TcpEvent::Send { pair: 3 };
        assert_eq!(
            fx,
            [
                scheduled(5_000 + on_wire + 100, frame),
                scheduled(5_000 + on_wire, send)
            ]
        );
        assert_eq!(flow.in_flight(), 2_000);
        assert_eq!(flow.link_free_at, 5_000 + on_wire);
    }

    #[test]
    fn an_ack_into_an_open_window_lists_nothing() {
        let mut flow = two_segment_flow();
        flow.sent(1_000);
        flow.acks.push_back(1_000);
        let fx = listed_alone(|fx| flow.ack_arrives(0, 0, &LINK, fx));
        assert!(fx.is_empty(), "the pending send goes on its own");
        assert_eq!(flow.in_flight(), 0);
        assert_eq!(flow.acked_bytes, 1_000);
        let fx = listed_alone(|fx| flow.ack_arrives(0, 0, &LINK, fx));
        assert!(fx.is_empty(), "no ACK on its way");
    }

    #[test]
    fn over_pv_the_sender_hands_each_buffer_to_vhost_and_sends_on() {
        let link = StreamLink {
            over_pv: true,
            ..LINK
        };
        let mut flow = two_segment_flow();
        let fx = listed_alone(|fx| flow.send(2, 700, &link, fx));
        let vhost = Effect::BackendStart {
            pair: 2,
            job: BackendJob::RxPacket,
        };
        assert_eq!(fx, [vhost, scheduled(700, TcpEvent::Send { pair: 2 })]);
        flow.send(2, 700, &link, &mut Effects::default());
        let fx = listed_alone(|fx| flow.send(2, 700, &link, fx));
        assert!(fx.is_empty(), "the window is full");
    }

    #[test]
    fn the_receivers_ack_goes_over_the_link_or_through_vhost() {
        let mut flow = two_segment_flow();
        let fx = listed_alone(|fx| flow.ack_sent(2, AckPath::Vf, 2_000, 400, &LINK, fx));
        // 38 bytes of framing at 10 Gb/s: 30.4 ns, rounded up.
        let ack = TcpEvent::Ack { pair: 2 };
        assert_eq!(fx, [scheduled(400 + 100 + 31, ack)]);
        let path = AckPath::Virtio { vcpu: 1 };
        let fx = listed_alone(|fx| flow.ack_sent(2, path, 1_000, 400, &LINK, fx));
        let vhost = Effect::BackendStart {
            pair: 2,
            job: BackendJob::TxAck,
        };
        assert_eq!(fx, [Effect::VirtioKick(1), vhost]);
        assert_eq!(flow.acks, [2_000, 1_000], "on their way, oldest first");
    }

    #[test]
    fn a_tso_send_lists_the_remotes_polls_and_its_acks_come_back() {
        let mut flow = TcpFlow::new(4_000, 1_000, 2_000);
        // The remote's NIC interrupts at most every 32 us.
        let mode = super::super::itr::ItrMode::Fixed {
            interval_ns: 32_000,
        };
        let mut remote = RemoteReceiver::new(mode, 2_000, 1_000);
        flow.buffered = 2_500;
        let mut sends = Vec::new();
        let fx = listed_alone(|fx| sends = flow.tso_send(&mut remote, 1, 0, &LINK, fx));
        assert_eq!(sends, [(0, 2_000)], "one GSO buffer; the rest waits");
        assert_eq!(flow.buffered, 500);
        // Frame 1 lands at 831 + 100 ns and fires at once; frame 2, at
        // 1,661 + 100 ns, waits out the throttle.
        let poll = TcpEvent::RemotePoll { pair: 1 };
        assert_eq!(fx, [scheduled(931, poll), scheduled(32_931, poll)]);
        let fx = listed_alone(|fx| flow.remote_polls(&mut remote, 1, 931, &LINK, fx));
        let ack = TcpEvent::AckArrival { pair: 1 };
        assert_eq!(fx, [scheduled(1_031, ack)]);
        assert_eq!(flow.acks, [1_000]);
    }

    #[test]
    fn tcp_throughput_never_exceeds_the_link() {
        let group = RunGroup::new(WorkloadKind::Iperf, vec![DesignKind::Bare]);
        let m = run(DesignKind::Bare, group, 20);
        let network = &m.profile.network;
        let link_bytes = f64_of(network.link_mbps) * 1e6 / 8.0 * 0.02;
        let acked = f64_of(m.counters.acked_bytes);
        assert!(acked > 0.0);
        assert!(acked <= link_bytes, "{acked} > {link_bytes}");
    }

    #[test]
    fn lowering_napis_weight_raises_the_interrupt_rate() {
        let raised = |weight| {
            let mut group = RunGroup::new(WorkloadKind::UdpRx, vec![DesignKind::Vanilla]);
            group.napi_weight = Some(weight);
            let mut m = shaped(RunSpec {
                design: DesignKind::Vanilla,
                workload: WorkloadKind::UdpRx,
                rate_pps: Some(600_000),
                group,
                nic: NicCoalescing::FITTED,
                duration_ns: 20_000_000,
                offered_per_s: None,
            });
            m.run();
            m.checker.raised
        };
        assert!(raised(4) > raised(64));
    }

    #[test]
    fn a_closed_loop_servers_rate_never_exceeds_its_cpu_budget() {
        let mut group = RunGroup::new(WorkloadKind::Memcached, vec![DesignKind::Vanilla]);
        group.clients = Some(200);
        let m = run(DesignKind::Vanilla, group, 20);
        let per_request = m.profile.workloads.memcached_request;
        let budget = 0.02 * 1e9 / f64_of(per_request);
        let done = f64_of(m.counters.requests_done);
        assert!(done > 0.0);
        assert!(done <= budget, "{done} > {budget}");
    }
}
