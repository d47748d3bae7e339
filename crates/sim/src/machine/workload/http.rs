//! apachebench's connections: without keep-alive (ab's default, and the
//! ELI paper's runs) every request opens a TCP connection of its own and
//! the server closes it after the response, so each request brings the
//! server six segments, not one:
//!
//! ```text
//!  client (ab)                         server (apache in the guest)
//!    SYN          ------------------>  (1) answers SYN-ACK from the stack
//!                 <------------------  SYN-ACK
//!    ACK          ------------------>  (2) handshake done
//!    GET          ------------------>  (3) the request, once ab has run
//!                 <------------------  the response, 3 MSS frames, and FIN
//!    ACK          ------------------>  (4) frames 1-2 (RFC 5681 4.2)
//!    ACK          ------------------>  (5) frame 3
//!    FIN, ACK     ------------------>  (6) ab closes; the stack ACKs it
//!    SYN          ------------------>  the next request's connection
//! ```
//!
//! RFC 793's handshake and close. The client is the bare remote host. Its
//! kernel answers at once: the handshake's ACK, the ACKs of the response's
//! frames. What ab itself sends waits for ab: its thread sleeps in its
//! poll until its connection is writable (the GET) or readable (the
//! response and the end of file the FIN brings: it closes, then opens the
//! next connection, ab's `close_connection` calling `start_connect`), so
//! those segments leave one wake-up and one send after what they answer
//! ([`Apachebench::turn_ns`]). The client's kernel delays its ACK of
//! the server's FIN (Linux's `tcp_fin` enters delayed-ACK mode) and ab's
//! close comes first, so the ACK rides on the client's FIN. Over virtio
//! (no scenario runs apache so) a request stays one message.

use std::collections::VecDeque;

use super::servers::ClientEvent;
use crate::machine::effects::Effects;
use crate::machine::index_u32;
use crate::machine::network::Network;

/// A segment apachebench's connection brings the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum Segment {
    Syn,
    HandshakeAck,
    Request,
    /// An ACK of response frames.
    DataAck,
    Fin,
}

impl Segment {
    /// Whether the server's stack answers the segment at once (the
    /// SYN-ACK, the ACK of the client's FIN).
    pub(super) fn answered_by_stack(self) -> bool {
        matches!(self, Segment::Syn | Segment::Fin)
    }
}

/// The segments in a VF ring, oldest first (a ring holds only counts).
pub(super) type SegmentRing = VecDeque<Segment>;

/// apachebench's timing, fixed for the run: what its connection's
/// segments take on their way, and its own turn. It lists the segments
/// the server's connection brings back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Apachebench {
    /// A segment without payload, one way.
    pub(super) segment_way_ns: u64,
    /// The GET, one way.
    pub(super) request_way_ns: u64,
    /// The response, one way: its last frame's arrival.
    pub(super) response_way_ns: u64,
    /// The response on the server's wire: its FIN leaves after it.
    pub(super) response_wire_ns: u64,
    /// The response's first two frames' arrival, which the client's
    /// kernel ACKs at once (RFC 5681 4.2).
    pub(super) two_frames_ns: u64,
    /// ab's `connect` sending the SYN.
    pub(super) send_ns: u64,
    /// ab's time from an event on its connection to the segment it sends
    /// in answer: its thread, asleep in its poll, is woken (ASSUMED: as
    /// the profile's thread wake-up, `host_ns.wakeup`) and its system
    /// call sends the segment (`network.tx_packet`).
    pub(super) turn_ns: u64,
}

impl Apachebench {
    /// apachebench's timing for requests of `request_bytes` and responses
    /// of `response_bytes` over `net`; `wakeup_ns` wakes its thread.
    pub(super) fn new(
        net: &Network,
        request_bytes: u64,
        response_bytes: u64,
        wakeup_ns: u64,
    ) -> Self {
        let tx_packet = net.costs.tx_packet;
        Apachebench {
            segment_way_ns: net.one_way_ns(0),
            request_way_ns: net.one_way_ns(request_bytes),
            response_way_ns: net.one_way_ns(response_bytes),
            response_wire_ns: net.frame_wire_ns(response_bytes),
            two_frames_ns: net.frame_wire_ns(net.mss()) * 2 + net.wire_one_way_ns,
            send_ns: tx_packet,
            turn_ns: wakeup_ns + tx_packet,
        }
    }

    /// `vm`'s client opens a connection at `now`: its SYN.
    pub(super) fn connect(&self, vm: usize, now: u64, fx: &mut Effects) {
        let at = now + self.send_ns + self.segment_way_ns;
        schedule_segment(vm, Segment::Syn, at, fx);
    }

    /// The server's stack answered `vm`'s SYN at `now`: the SYN-ACK brings
    /// the client kernel's ACK and, once ab has run, its request.
    pub(super) fn syn_answered(&self, vm: usize, now: u64, fx: &mut Effects) {
        let syn_ack_arrives = now + self.segment_way_ns;
        let ack_at = syn_ack_arrives + self.segment_way_ns;
        let request_at = syn_ack_arrives + self.turn_ns + self.request_way_ns;
        schedule_segment(vm, Segment::HandshakeAck, ack_at, fx);
        schedule_segment(vm, Segment::Request, request_at, fx);
    }

    /// When the server's FIN leaves, for a response sent at `now`.
    pub(super) fn fin_sent(&self, now: u64) -> u64 {
        now + self.response_wire_ns
    }

    /// The server sent `vm` its response and its FIN at `now`: the
    /// client's kernel ACKs the frames; ab reads the response and the end
    /// of file, and closes: its FIN comes back, and the request is done.
    pub(super) fn response_sent(&self, vm: usize, now: u64, fx: &mut Effects) {
        let back = self.segment_way_ns;
        schedule_segment(vm, Segment::DataAck, now + self.two_frames_ns + back, fx);
        schedule_segment(vm, Segment::DataAck, now + self.response_way_ns + back, fx);
        let end_of_file = (now + self.response_way_ns).max(self.fin_sent(now) + back);
        let closed = end_of_file + self.turn_ns;
        schedule_segment(vm, Segment::Fin, closed + back, fx);
        let vm = index_u32(vm);
        fx.schedule(closed, ClientEvent::ResponseArrival { vm });
    }
}

fn schedule_segment(vm: usize, segment: Segment, at: u64, fx: &mut Effects) {
    let vm = index_u32(vm);
    fx.schedule(at, ClientEvent::ConnectionSegment { vm, segment });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::effects::Effect;
    use crate::machine::fixture::{listed, scheduled};

    /// Round figures, so that a test names the times it expects.
    const AB: Apachebench = Apachebench {
        segment_way_ns: 2_000,
        request_way_ns: 2_500,
        response_way_ns: 9_000,
        response_wire_ns: 4_000,
        two_frames_ns: 4_500,
        send_ns: 1_000,
        turn_ns: 7_000,
    };

    fn segment(at: u64, segment: Segment) -> Effect {
        scheduled(at, ClientEvent::ConnectionSegment { vm: 1, segment })
    }

    #[test]
    fn a_syn_answered_brings_the_handshakes_ack_then_abs_request() {
        let fx = listed(|fx| AB.syn_answered(1, 10_000, fx));
        // The SYN-ACK arrives at 12,000: the kernel ACKs at once; the GET
        // waits for ab to run and send.
        let expected = [
            segment(14_000, Segment::HandshakeAck),
            segment(12_000 + 7_000 + 2_500, Segment::Request),
        ];
        assert_eq!(fx, expected);
    }

    #[test]
    fn a_response_brings_two_acks_and_the_clients_fin_after_ab_closes() {
        let fx = listed(|fx| AB.response_sent(1, 100_000, fx));
        // ab has the response at 109,000, the server's FIN at 106,000;
        // it closes one turn later, at 116,000.
        let expected = [
            segment(100_000 + 4_500 + 2_000, Segment::DataAck),
            segment(109_000 + 2_000, Segment::DataAck),
            segment(116_000 + 2_000, Segment::Fin),
            scheduled(116_000, ClientEvent::ResponseArrival { vm: 1 }),
        ];
        assert_eq!(fx, expected);
    }

    #[test]
    fn a_late_fin_holds_abs_close() {
        let late_fin = Apachebench {
            response_wire_ns: 10_000,
            ..AB
        };
        let fx = listed(|fx| late_fin.response_sent(1, 0, fx));
        // The FIN leaves at 10,000 and arrives at 12,000, after the data.
        assert_eq!(fx[2], segment(12_000 + 7_000 + 2_000, Segment::Fin));
        assert_eq!(
            fx[3],
            scheduled(19_000, ClientEvent::ResponseArrival { vm: 1 })
        );
    }
}
