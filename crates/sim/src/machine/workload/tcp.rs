//! TCP with flow control: a sender may have at most the receiver's window
//! unacknowledged (RFC 793 3.7, RFC 5681 2); each acknowledgement opens
//! the window again, so the ACKs clock the sender. Over the NIC's link the
//! segments leave one after another at line rate (a TSO send is cut into
//! MSS frames by the NIC); the receiver's GRO merges the frames of one
//! NAPI poll into batches of up to a GSO buffer and acknowledges each
//! batch once (an ACK covers at least two full segments, RFC 5681 4.2).
//! Throughput is what the window, the link and the two ends' CPUs let
//! through, never a constant.

use std::collections::VecDeque;

use super::streams::TcpEvent;
use crate::machine::effects::{Effect, Effects};
use crate::machine::network::{mss, wire_ns};
use crate::machine::platform::{BackendJob, Coalescing};
use crate::machine::platform::{ItrMode, Throttle};
use crate::profile::NetworkCosts;
use crate::scenario::Transport;

/// Payload of a pure TCP ACK frame.
pub(super) const ACK_BYTES: u64 = 0;

/// One direction of a TCP connection.
#[derive(Clone, Debug)]
pub(super) struct TcpFlow {
    window_bytes: u64,
    /// Payload per segment handed to the receiver's ring: an MSS frame
    /// over a NIC, a whole GSO buffer over virtio.
    pub(super) segment_bytes: u64,
    /// Sent and not acknowledged.
    in_flight: u64,
    /// Received and not acknowledged (the receiver's side).
    unacked: u64,
    /// Frames merged into the current GRO batch.
    gro_frames: u64,
    gro_max_frames: u64,
    /// ACKs on their way back, oldest first: the bytes each covers.
    pub(super) acks: VecDeque<u64>,
    /// Data the sending application wrote and TCP has not sent yet.
    pub(super) buffered: u64,
    /// When the sender's link has sent everything handed to it.
    pub(super) link_free_at: u64,
    pub(super) acked_bytes: u64,
}

impl TcpFlow {
    pub(super) fn new(window_bytes: u64, segment_bytes: u64, gso_bytes: u64) -> TcpFlow {
        TcpFlow {
            window_bytes,
            segment_bytes,
            in_flight: 0,
            unacked: 0,
            gro_frames: 0,
            gro_max_frames: (gso_bytes / segment_bytes).max(1),
            acks: VecDeque::new(),
            buffered: 0,
            link_free_at: 0,
            acked_bytes: 0,
        }
    }

    /// Bytes the window lets the sender put on the wire now.
    pub(super) fn room(&self) -> u64 {
        self.window_bytes.saturating_sub(self.in_flight)
    }

    pub(super) fn in_flight(&self) -> u64 {
        self.in_flight
    }

    /// The sending application may write `bytes` more: its send buffer
    /// (as large as the window) has room.
    pub(super) fn may_write(&self, bytes: u64) -> bool {
        self.in_flight + self.buffered + bytes <= self.window_bytes
    }

    /// The sender can send a full segment.
    pub(super) fn can_send_segment(&self) -> bool {
        self.room() >= self.segment_bytes
    }

    /// The sender puts `bytes` on the wire.
    pub(super) fn sent(&mut self, bytes: u64) {
        self.in_flight += bytes;
    }

    /// The sender takes an ACK for `bytes`.
    pub(super) fn acknowledged(&mut self, bytes: u64) {
        let bytes = bytes.min(self.in_flight);
        self.in_flight -= bytes;
        self.acked_bytes += bytes;
    }

    /// The receiver takes a segment; `napi_completes` when the ring holds
    /// no more (GRO flushes when NAPI completes). Returns the bytes an ACK
    /// now covers, if the segment closed a GRO batch.
    pub(super) fn received(&mut self, napi_completes: bool) -> Option<u64> {
        self.unacked += self.segment_bytes;
        self.gro_frames += 1;
        if self.gro_frames < self.gro_max_frames && !napi_completes {
            return None;
        }
        self.gro_frames = 0;
        Some(std::mem::take(&mut self.unacked))
    }

    /// Whether the next segment received starts a GRO batch (the stack's
    /// work is paid once per batch).
    pub(super) fn starts_batch(&self) -> bool {
        self.gro_frames == 0
    }
}

/// The remote receiver of netperf's stream (bare metal; ASSUMED to run
/// the testbed's NIC and driver too): its NIC interrupts as that driver's
/// throttle lets it, each interrupt's NAPI poll merges the frames that
/// arrived into GRO batches of up to a GSO buffer, and TCP acknowledges
/// each merged batch at once (more than one full segment received, RFC
/// 1122 4.2.3.2's every-second-segment rule applied to the merged skb, as
/// Linux's `__tcp_ack_snd_check` does).
#[derive(Clone, Debug)]
pub(super) struct RemoteReceiver {
    throttle: Throttle,
    max_frames: u64,
    /// The batches the coming polls will acknowledge, oldest first.
    batches: VecDeque<GroBatch>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct GroBatch {
    poll_at: u64,
    frames: u64,
    bytes: u64,
}

impl RemoteReceiver {
    pub(super) fn new(mode: ItrMode, gso_bytes: u64, mss: u64) -> RemoteReceiver {
        RemoteReceiver {
            throttle: Throttle::new(mode),
            max_frames: (gso_bytes / mss).max(1),
            batches: VecDeque::new(),
        }
    }

    /// A frame of `bytes` reaches the remote's NIC at `at`: the time of
    /// the poll that takes it, if that poll is a new one (the caller
    /// schedules it).
    pub(super) fn frame(&mut self, at: u64, bytes: u64) -> Option<u64> {
        self.throttle.received(at, bytes);
        if let Some(last) = self.batches.back_mut() {
            if at <= last.poll_at {
                if last.frames < self.max_frames {
                    last.frames += 1;
                    last.bytes += bytes;
                    return None;
                }
                // The GSO limit: the same poll starts another merge.
                let poll_at = last.poll_at;
                self.batches.push_back(GroBatch {
                    poll_at,
                    frames: 1,
                    bytes,
                });
                return None;
            }
        }
        let poll_at = match self.throttle.decide(at, false) {
            Coalescing::ArmTimeout(later) => later,
            Coalescing::Fire | Coalescing::Wait => at,
        };
        self.throttle.fired(poll_at);
        self.batches.push_back(GroBatch {
            poll_at,
            frames: 1,
            bytes,
        });
        Some(poll_at)
    }

    /// The remote polls at `now`: the bytes each ACK it sends covers.
    pub(super) fn poll(&mut self, now: u64) -> Vec<u64> {
        let mut acks = Vec::new();
        while let Some(batch) = self.batches.front() {
            if batch.poll_at > now {
                break;
            }
            acks.push(batch.bytes);
            self.batches.pop_front();
        }
        acks
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
pub(super) enum AckVia {
    Vf,
    Virtio { vcpu: usize },
}

/// The flow's sending end (iperf's remote, netperf's guest): it owns its
/// window and its link's timing, and lists what it sends.
impl TcpFlow {
    /// The receiving guest (iperf's) acknowledges `bytes` at `now` along
    /// `via`.
    pub(super) fn ack_sent(
        &mut self,
        pair: u32,
        via: AckVia,
        bytes: u64,
        now: u64,
        link: &StreamLink,
        fx: &mut Effects,
    ) {
        self.acks.push_back(bytes);
        match via {
            AckVia::Vf => {
                let at = now + link.wire_one_way_ns + link.frame_wire_ns(ACK_BYTES);
                fx.schedule(at, TcpEvent::Ack { pair });
            }
            AckVia::Virtio { vcpu } => {
                fx.push(Effect::VirtioKick(vcpu));
                fx.push(Effect::BackendStart {
                    pair: pair as usize,
                    job: BackendJob::Tx,
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

/// netperf's remote receiver: the testbed's adaptive coalescing, merges
/// up to a GSO buffer of MSS frames.
pub(super) fn remote_receiver(network: &NetworkCosts) -> RemoteReceiver {
    let mode = ItrMode::Adaptive(network.adaptive_coalescing);
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
    use super::*;
    use crate::machine::fixture::{listed, scheduled};

    const MSS: u64 = 1_460;
    #[test]
    fn the_window_stops_the_sender_and_acks_reopen_it() {
        let mut flow = TcpFlow::new(4 * MSS, MSS, 64 * 1024);
        let mut sent = 0;
        while flow.can_send_segment() {
            flow.sent(MSS);
            sent += 1;
        }
        assert_eq!(sent, 4);
        flow.acknowledged(2 * MSS);
        assert!(flow.can_send_segment());
        assert_eq!(flow.room(), 2 * MSS);
        assert_eq!(flow.acked_bytes, 2 * MSS);
        // An ACK never covers more than is in flight.
        flow.acknowledged(100 * MSS);
        assert_eq!(flow.room(), 4 * MSS);
    }

    #[test]
    fn gro_acks_once_per_batch_or_at_the_end_of_a_poll() {
        let mut flow = TcpFlow::new(1 << 20, MSS, 3 * MSS);
        assert!(flow.starts_batch());
        assert_eq!(flow.received(false), None);
        assert!(!flow.starts_batch());
        assert_eq!(flow.received(false), None);
        assert_eq!(flow.received(false), Some(3 * MSS));
        assert!(flow.starts_batch());
        assert_eq!(flow.received(true), Some(MSS));
    }

    #[test]
    fn the_remote_acks_once_per_poll_and_per_gso_buffer() {
        // A fixed 32 us throttle: frames every 1.2 us.
        let mode = ItrMode::Fixed {
            interval_ns: 32_000,
        };
        let mut remote = RemoteReceiver::new(mode, 4 * MSS, MSS);
        assert_eq!(remote.frame(1_000, MSS), Some(1_000), "the first fires");
        let mut polls = Vec::new();
        for frame in 1..=10 {
            polls.extend(remote.frame(1_000 + frame * 1_200, MSS));
        }
        // The next poll waits out the throttle and takes the ten frames,
        // in merges of at most four.
        assert_eq!(polls, [33_000]);
        assert_eq!(remote.poll(1_000), [MSS]);
        assert_eq!(remote.poll(32_999), Vec::<u64>::new());
        assert_eq!(remote.poll(33_000), [4 * MSS, 4 * MSS, 2 * MSS]);
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
        let fx = listed(|fx| flow.ack_arrives(3, 5_000, &LINK, fx));
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
        let fx = listed(|fx| flow.ack_arrives(0, 0, &LINK, fx));
        assert!(fx.is_empty(), "the pending send goes on its own");
        assert_eq!(flow.in_flight(), 0);
        assert_eq!(flow.acked_bytes, 1_000);
        let fx = listed(|fx| flow.ack_arrives(0, 0, &LINK, fx));
        assert!(fx.is_empty(), "no ACK on its way");
    }

    #[test]
    fn over_pv_the_sender_hands_each_buffer_to_vhost_and_sends_on() {
        let link = StreamLink {
            over_pv: true,
            ..LINK
        };
        let mut flow = two_segment_flow();
        let fx = listed(|fx| flow.send(2, 700, &link, fx));
        let vhost = Effect::BackendStart {
            pair: 2,
            job: BackendJob::RxPacket,
        };
        assert_eq!(fx, [vhost, scheduled(700, TcpEvent::Send { pair: 2 })]);
        flow.send(2, 700, &link, &mut Effects::default());
        let fx = listed(|fx| flow.send(2, 700, &link, fx));
        assert!(fx.is_empty(), "the window is full");
    }

    #[test]
    fn the_receivers_ack_goes_over_the_link_or_through_vhost() {
        let mut flow = two_segment_flow();
        let fx = listed(|fx| flow.ack_sent(2, AckVia::Vf, 2_000, 400, &LINK, fx));
        // 38 bytes of framing at 10 Gb/s: 30.4 ns, rounded up.
        let ack = TcpEvent::Ack { pair: 2 };
        assert_eq!(fx, [scheduled(400 + 100 + 31, ack)]);
        let via = AckVia::Virtio { vcpu: 1 };
        let fx = listed(|fx| flow.ack_sent(2, via, 1_000, 400, &LINK, fx));
        let vhost = Effect::BackendStart {
            pair: 2,
            job: BackendJob::Tx,
        };
        assert_eq!(fx, [Effect::VirtioKick(1), vhost]);
        assert_eq!(flow.acks, [2_000, 1_000], "on their way, oldest first");
    }

    #[test]
    fn a_tso_send_lists_the_remotes_polls_and_its_acks_come_back() {
        let mut flow = TcpFlow::new(4_000, 1_000, 2_000);
        // The remote's NIC interrupts at most every 32 us.
        let mode = ItrMode::Fixed {
            interval_ns: 32_000,
        };
        let mut remote = RemoteReceiver::new(mode, 2_000, 1_000);
        flow.buffered = 2_500;
        let mut sends = Vec::new();
        let fx = listed(|fx| sends = flow.tso_send(&mut remote, 1, 0, &LINK, fx));
        assert_eq!(sends, [(0, 2_000)], "one GSO buffer; the rest waits");
        assert_eq!(flow.buffered, 500);
        // Frame 1 lands at 831 + 100 ns and fires at once; frame 2, at
        // 1,661 + 100 ns, waits out the throttle.
        let poll = TcpEvent::RemotePoll { pair: 1 };
        assert_eq!(fx, [scheduled(931, poll), scheduled(32_931, poll)]);
        let fx = listed(|fx| flow.remote_polls(&mut remote, 1, 931, &LINK, fx));
        let ack = TcpEvent::AckArrival { pair: 1 };
        assert_eq!(fx, [scheduled(1_031, ack)]);
        assert_eq!(flow.acks, [1_000]);
    }
}
