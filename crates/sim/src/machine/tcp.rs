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

use super::devices::Coalescing;
use super::itr::{ItrMode, Throttle};

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

    /// The receiver takes a segment; `last_in_poll` when the ring holds no
    /// more (GRO flushes at the end of a poll). Returns the bytes an ACK
    /// now covers, if the segment closed a GRO batch.
    pub(super) fn received(&mut self, last_in_poll: bool) -> Option<u64> {
        self.unacked += self.segment_bytes;
        self.gro_frames += 1;
        if self.gro_frames < self.gro_max_frames && !last_in_poll {
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

/// Serialization time of `frames` frames carrying `payload` bytes in all
/// at `link_mbps`, ns.
pub(super) fn wire_ns(payload: u64, frames: u64, overhead_bytes: u64, link_mbps: u64) -> u64 {
    let bits = (payload + frames * overhead_bytes) * 8;
    (bits * 1_000).div_ceil(link_mbps)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn the_wire_time_counts_every_frames_overhead_at_line_rate() {
        // One 1500-byte frame (1460 payload + 78 overhead) at 10 Gbit/s.
        assert_eq!(wire_ns(1_460, 1, 78, 10_000), 1_231);
        assert_eq!(wire_ns(2 * 1_460, 2, 78, 10_000), 2_461);
    }
}
