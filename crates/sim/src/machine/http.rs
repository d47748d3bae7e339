//! apachebench's connections: without keep-alive (ab's default, and the
//! ELI study's runs) every request opens a TCP connection of its own and
//! the server closes it after the response, so each request brings the
//! server six segments, not one:
//!
//! ```text
//!  client (ab)                         server (apache in the guest)
//!    SYN          ------------------>  (1) answers SYN-ACK from the stack
//!                 <------------------  SYN-ACK
//!    ACK, GET     ------------------>  (2) handshake done, (3) the request
//!                 <------------------  the response, 3 MSS frames, and FIN
//!    ACK          ------------------>  (4) frames 1-2 (RFC 5681 4.2)
//!    ACK          ------------------>  (5) frame 3 and the FIN
//!    FIN          ------------------>  (6) ab closes; the stack ACKs it
//! ```
//!
//! RFC 793's handshake and close. The client is the bare remote host: its
//! segments leave as soon as what they answer arrives (ASSUMED: ab's own
//! work between them is not modelled). Over virtio (no scenario runs
//! apache so) a request stays one message.

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

    /// NAPI took a connection's segment: the request goes to the socket;
    /// the SYN-ACK brings the client's ACK and its request.
    pub(super) fn segment_taken(&mut self, queues: usize, fx: &mut Effects) {
        let vm = self.vm_of_queues(queues);
        match self.queues[queues].segments.pop_front() {
            Some(Segment::Request) => self.queues[queues].socket += 1,
            Some(Segment::Syn) => {
                let round_trip = 2 * self.one_way_ns(0);
                let ack_at = self.now + round_trip;
                let request_at = ack_at + self.frame_wire_ns(self.request_bytes());
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

    /// The server sent its response and its FIN: the client's ACKs and
    /// FIN come back.
    pub(super) fn response_sent(&mut self, vm: usize, response_bytes: u64, fx: &mut Effects) {
        let fin_sent = self.now + self.frame_wire_ns(response_bytes);
        self.vf_sent(self.first_queues(vm), fin_sent, 0, fx);
        let mss = self.mss();
        let back = self.one_way_ns(0);
        let two_frames = self.frame_wire_ns(mss) * 2 + self.profile.guest_ns.wire_one_way;
        let all = self.one_way_ns(response_bytes);
        self.schedule_segment(vm, Segment::DataAck, self.now + two_frames + back, fx);
        self.schedule_segment(vm, Segment::DataAck, self.now + all + back, fx);
        let fin_at = self.now + all + back + self.frame_wire_ns(0);
        self.schedule_segment(vm, Segment::Fin, fin_at, fx);
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
        assert!(
            listed_segments[0].0 < listed_segments[1].0,
            "the ACK leaves first"
        );
        assert_eq!(m.queues[0].socket, 0, "no request yet");
        m.queues[0].segments.push_back(Segment::Request);
        listed(&mut m, |m, fx| m.segment_taken(0, fx));
        assert_eq!(m.queues[0].socket, 1);
    }

    #[test]
    fn a_response_brings_two_acks_and_the_clients_fin() {
        let mut m = apache();
        let fx = listed(&mut m, |m, fx| m.response_sent(0, 4_350, fx));
        let listed_segments = segments(&fx);
        let kinds: Vec<Segment> = listed_segments.iter().map(|&(_, kind)| kind).collect();
        assert_eq!(kinds, [Segment::DataAck, Segment::DataAck, Segment::Fin]);
        let times: Vec<u64> = listed_segments.iter().map(|&(at, _)| at).collect();
        assert!(times.windows(2).all(|pair| pair[0] < pair[1]), "{times:?}");
    }
}
