//! apachebench's connections: without keep-alive (ab's default, and the
//! ELI study's runs) every request opens a TCP connection of its own and
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
//! ([`Machine::client_turn_ns`]). The client's kernel delays its ACK of
//! the server's FIN (Linux's `tcp_fin` enters delayed-ACK mode) and ab's
//! close comes first, so the ACK rides on the client's FIN. Over virtio
//! (no scenario runs apache so) a request stays one message.

use std::collections::VecDeque;

use super::*;

/// A segment apachebench's connection brings the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Segment {
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
    fn answered_by_stack(self) -> bool {
        matches!(self, Segment::Syn | Segment::Fin)
    }
}

/// The segments in a VF ring, oldest first (a ring holds only counts).
pub(super) type SegmentRing = VecDeque<Segment>;

impl Machine {
    /// A segment of `vm`'s client reaches the server's VF.
    pub(super) fn segment_arrives(&mut self, vm: usize, segment: Segment, fx: &mut Effects) {
        let queues = self.first_queues(vm);
        if self.queues[queues].vf.ring < RX_RING_SIZE {
            self.queues[queues].segments.push_back(segment);
        }
        self.rx_packet(queues, RxQueueKind::Vf, fx);
    }

    /// The guest's stack work for the segment NAPI takes next: a SYN and
    /// a FIN are answered from the stack.
    pub(super) fn segment_work_ns(&self, queues: usize) -> u64 {
        let network = &self.profile.network;
        let segment = self.queues[queues].segments.front().copied();
        let answer = match segment {
            Some(segment) if segment.answered_by_stack() => network.tx_packet,
            _ => 0,
        };
        let copy = match segment {
            Some(Segment::Request) => self.copy_ns(self.request_bytes()),
            _ => 0,
        };
        network.rx_frame + network.rx_stack + answer + copy
    }

    /// apachebench's time from an event on its connection to the segment
    /// it sends in answer: its thread, asleep in its poll, is woken
    /// (ASSUMED: as the profile's thread wake-up, `host_ns.wakeup`) and
    /// its system call sends the segment (`network.tx_packet`).
    pub(super) fn client_turn_ns(&self) -> u64 {
        self.profile.host_ns.wakeup + self.profile.network.tx_packet
    }

    /// NAPI took a connection's segment: the request goes to the socket;
    /// the SYN-ACK brings the client's ACK and, once ab has run, its
    /// request.
    pub(super) fn segment_taken(&mut self, queues: usize, fx: &mut Effects) {
        let vm = self.vm_of_queues(queues);
        match self.queues[queues].segments.pop_front() {
            Some(Segment::Request) => self.queues[queues].socket += 1,
            Some(Segment::Syn) => {
                let syn_ack_arrives = self.now + self.one_way_ns(0);
                let ack_at = syn_ack_arrives + self.one_way_ns(0);
                let request_at =
                    syn_ack_arrives + self.client_turn_ns() + self.one_way_ns(self.request_bytes());
                self.schedule_segment(vm, Segment::HandshakeAck, ack_at, fx);
                self.schedule_segment(vm, Segment::Request, request_at, fx);
                // The SYN-ACK.
                self.vf_sent(queues, self.now, 0, fx);
            }
            // The stack's ACK of the client's FIN.
            Some(Segment::Fin) => self.vf_sent(queues, self.now, 0, fx),
            Some(Segment::HandshakeAck | Segment::DataAck) | None => {}
        }
    }

    /// The server sent its response and its FIN: the client's kernel
    /// ACKs the frames; ab reads the response and the end of file, and
    /// closes: its FIN comes back, and the request is done.
    pub(super) fn response_sent(&mut self, vm: usize, response_bytes: u64, fx: &mut Effects) {
        let fin_sent = self.now + self.frame_wire_ns(response_bytes);
        self.vf_sent(self.first_queues(vm), fin_sent, 0, fx);
        let mss = self.mss();
        let back = self.one_way_ns(0);
        let two_frames = self.frame_wire_ns(mss) * 2 + self.profile.guest_ns.wire_one_way;
        let all = self.one_way_ns(response_bytes);
        self.schedule_segment(vm, Segment::DataAck, self.now + two_frames + back, fx);
        self.schedule_segment(vm, Segment::DataAck, self.now + all + back, fx);
        let end_of_file = (self.now + all).max(fin_sent + back);
        let closed = end_of_file + self.client_turn_ns();
        self.schedule_segment(vm, Segment::Fin, closed + back, fx);
        let vm = index_u32(vm);
        fx.schedule(closed, ClientEvent::ResponseArrival { vm });
    }

    fn schedule_segment(&self, vm: usize, segment: Segment, at: u64, fx: &mut Effects) {
        let vm = index_u32(vm);
        fx.schedule(at, ClientEvent::ConnectionSegment { vm, segment });
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{listed, machine, running};
    use super::*;
    use crate::policy::DesignKind;
    use crate::scenario::HostShape;

    fn apache() -> Machine {
        let mut m = machine(DesignKind::Bare, WorkloadKind::Apache, HostShape::default());
        running(&mut m, 0);
        m
    }

    /// The connection segments listed, with their arrival times.
    fn segments(fx: &[Effect]) -> Vec<(u64, Segment)> {
        fx.iter()
            .filter_map(|effect| match effect {
                Effect::Schedule {
                    at,
                    event:
                        Event::Workload(WorkloadEvent::Clients(ClientEvent::ConnectionSegment {
                            segment,
                            ..
                        })),
                } => Some((*at, *segment)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_syn_brings_the_handshakes_ack_and_then_the_request() {
        let mut m = apache();
        assert!(m.connection_per_request());
        m.queues[0].segments.push_back(Segment::Syn);
        let network = m.profile.network.clone();
        let syn_work = m.segment_work_ns(0);
        assert_eq!(
            syn_work,
            network.rx_frame + network.rx_stack + network.tx_packet
        );
        let fx = listed(&mut m, |m, fx| m.segment_taken(0, fx));
        let listed_segments = segments(&fx);
        let kinds: Vec<Segment> = listed_segments.iter().map(|&(_, kind)| kind).collect();
        assert_eq!(kinds, [Segment::HandshakeAck, Segment::Request]);
        let (ack_at, request_at) = (listed_segments[0].0, listed_segments[1].0);
        // The kernel ACKs at once; the GET waits for ab to run and send.
        let request_way = m.one_way_ns(m.request_bytes()) - m.one_way_ns(0);
        assert_eq!(request_at - ack_at, m.client_turn_ns() + request_way);
        assert_eq!(m.queues[0].socket, 0, "no request yet");
        m.queues[0].segments.push_back(Segment::Request);
        listed(&mut m, |m, fx| m.segment_taken(0, fx));
        assert_eq!(m.queues[0].socket, 1);
    }

    #[test]
    fn a_response_brings_two_acks_and_the_clients_fin_after_ab_closes() {
        let mut m = apache();
        let fx = listed(&mut m, |m, fx| m.response_sent(0, 4_350, fx));
        let listed_segments = segments(&fx);
        let kinds: Vec<Segment> = listed_segments.iter().map(|&(_, kind)| kind).collect();
        assert_eq!(kinds, [Segment::DataAck, Segment::DataAck, Segment::Fin]);
        let times: Vec<u64> = listed_segments.iter().map(|&(at, _)| at).collect();
        assert!(times.windows(2).all(|pair| pair[0] < pair[1]), "{times:?}");
        // ab closes one turn after the response is in; its FIN follows.
        let closed = fx.iter().find_map(|effect| match effect {
            Effect::Schedule {
                at,
                event: Event::Workload(WorkloadEvent::Clients(ClientEvent::ResponseArrival { .. })),
            } => Some(*at),
            _ => None,
        });
        let response_in = m.one_way_ns(4_350);
        assert_eq!(closed, Some(response_in + m.client_turn_ns()));
        assert_eq!(times[2], response_in + m.client_turn_ns() + m.one_way_ns(0));
    }
}
