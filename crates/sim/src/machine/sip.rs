//! The SIP B2BUA (VoIP): SIPp's UAC on the remote host places calls at a
//! fixed rate, the back-to-back user agent in the VM relays each call to
//! SIPp's UAS on the host, and the UAS answers at once. Every message the
//! B2BUA receives costs it `workloads.sip_message` of CPU. A call's setup
//! latency runs from the UAC's INVITE to its 200 OK; the B2BUA answers an
//! INVITE with 100 Trying, which stops the UAC's retransmissions. SIP's
//! timer A (RFC 3261 17.1.1.2): an INVITE with no response is sent again
//! after T1 = 500 ms, then after twice as long each time, until timer B
//! (64 T1) gives up. A message that finds the VF's ring full is lost.

use std::collections::{BTreeMap, VecDeque};

use dirq_stats::f64_of;

use super::*;

/// RFC 3261 17.1.1.1: T1, the round-trip estimate, 500 ms.
const T1_NS: u64 = 500_000_000;
/// Timer B: the INVITE transaction gives up after 64 T1.
const TIMER_B_NS: u64 = 64 * T1_NS;
/// The call-placing rate and hold time of the DID study's SIPp run.
const CALLS_PER_S: u64 = 100;
const HOLD_NS: u64 = 10_000_000_000;
/// A SIP message's payload, bytes (ASSUMED: a typical INVITE with SDP).
pub(super) const SIP_MESSAGE_BYTES: u64 = 800;
/// The setup-latency buckets' upper bounds, ms, and their names.
const BUCKETS: [(u64, &str); 4] = [
    (10, "<10"),
    (100, "10-100"),
    (200, "100-200"),
    (u64::MAX, ">200"),
];

/// VoIP's events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SipEvent {
    /// SIPp's UAC places a call.
    Call { call: u32 },
    /// The UAC's timer A for a call's INVITE.
    TimerA { call: u32, interval: u64 },
    /// A SIP message reaches the B2BUA's VF.
    Arrival { call: u32, kind: SipKind },
    /// A message the B2BUA relayed reaches the UAS, which answers with
    /// `kind`.
    Uas { call: u32, kind: SipKind },
    /// A message the B2BUA relayed reaches the UAC.
    Uac { call: u32, kind: SipKind },
    /// The UAC ends a call.
    HangUp { call: u32 },
}

/// A message the B2BUA receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SipKind {
    /// From the UAC: a new call (or its retransmission).
    Invite,
    /// From the UAS: the call is answered.
    InviteOk,
    /// From the UAC: the answer's acknowledgement.
    Ack,
    /// From the UAC: the call ends.
    Bye,
    /// From the UAS: the BYE is answered.
    ByeOk,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SipMessage {
    pub(super) call: u32,
    pub(super) kind: SipKind,
}

#[derive(Clone, Copy, Debug, Default)]
struct Call {
    invite_at: u64,
    /// The UAC heard a response (100 Trying or 200 OK): timer A stops.
    responded: bool,
    set_up: bool,
}

/// The VoIP run's state.
#[derive(Debug, Default)]
pub(super) struct Sip {
    calls: Vec<Call>,
    /// Messages in the VF's ring, oldest first, then in the B2BUA's socket.
    in_ring: VecDeque<SipMessage>,
    socket: VecDeque<SipMessage>,
    pub(super) serving: Option<SipMessage>,
    setup_ns: Vec<u64>,
    retransmissions: u64,
    completed: u64,
    last_completed_at: u64,
    lost: u64,
}

impl Sip {
    /// The calls a run of `duration_ns` places: all but the last hold
    /// time's worth, so that every call can end.
    fn calls_for(duration_ns: u64) -> u32 {
        let calls = duration_ns.saturating_sub(HOLD_NS) * CALLS_PER_S / 1_000_000_000;
        u32::try_from(calls).unwrap_or(u32::MAX)
    }

    /// Calls per setup-latency bucket.
    pub(super) fn buckets(&self) -> BTreeMap<String, u64> {
        let mut buckets: BTreeMap<String, u64> = BUCKETS
            .iter()
            .map(|(_, name)| (name.to_string(), 0))
            .collect();
        for &ns in &self.setup_ns {
            let ms = ns / 1_000_000;
            if let Some((_, name)) = BUCKETS.iter().find(|(bound, _)| ms < *bound) {
                *buckets.entry(name.to_string()).or_default() += 1;
            }
        }
        buckets
    }

    /// Completed calls per second from the first INVITE to the last BYE's
    /// answer (SIPp's call rate over the whole run).
    pub(super) fn call_rate(&self) -> f64 {
        if self.last_completed_at == 0 {
            return 0.0;
        }
        f64_of(self.completed) / (f64_of(self.last_completed_at) / 1e9)
    }

    pub(super) fn retransmissions(&self) -> u64 {
        self.retransmissions
    }

    pub(super) fn lost(&self) -> u64 {
        self.lost
    }

    /// Timer A fired for `call` at `now`, `interval` after the last send:
    /// the next interval if the INVITE goes again, None if not.
    fn timer_a(&mut self, call: u32, now: u64, interval: u64) -> Option<u64> {
        let state = self.calls.get(call as usize)?;
        if state.responded || now - state.invite_at >= TIMER_B_NS {
            return None;
        }
        self.retransmissions += 1;
        Some(interval * 2)
    }
}

impl Machine {
    /// SIPp starts placing calls.
    pub(super) fn start_calls(&mut self, fx: &mut Effects) {
        let calls = Sip::calls_for(self.spec.duration_ns);
        self.sip.calls = vec![Call::default(); calls as usize];
        let gap = 1_000_000_000 / CALLS_PER_S;
        for call in 0..calls {
            fx.schedule(u64::from(call) * gap, SipEvent::Call { call });
        }
    }

    pub(super) fn sip_event(&mut self, event: SipEvent, fx: &mut Effects) {
        match event {
            SipEvent::Call { call } => self.place_call(call, fx),
            SipEvent::TimerA { call, interval } => self.sip_timer_a(call, interval, fx),
            SipEvent::Arrival { call, kind } => self.sip_arrival(SipMessage { call, kind }, fx),
            SipEvent::Uas { call, kind } => self.sip_peer_sends(call, kind, fx),
            SipEvent::Uac { call, kind } => self.sip_uac(call, kind, fx),
            SipEvent::HangUp { call } => self.sip_peer_sends(call, SipKind::Bye, fx),
        }
    }

    /// The UAC places `call`: its INVITE leaves, timer A starts.
    pub(super) fn place_call(&mut self, call: u32, fx: &mut Effects) {
        self.sip.calls[call as usize].invite_at = self.now;
        self.sip_send(call, SipKind::Invite, fx);
        fx.schedule(
            self.now + T1_NS,
            SipEvent::TimerA {
                call,
                interval: T1_NS,
            },
        );
    }

    pub(super) fn sip_timer_a(&mut self, call: u32, interval: u64, fx: &mut Effects) {
        if let Some(next) = self.sip.timer_a(call, self.now, interval) {
            self.sip_send(call, SipKind::Invite, fx);
            fx.schedule(
                self.now + next,
                SipEvent::TimerA {
                    call,
                    interval: next,
                },
            );
        }
    }

    /// A message for the B2BUA leaves its sender (UAC or UAS).
    fn sip_send(&mut self, call: u32, kind: SipKind, fx: &mut Effects) {
        let at = self.now + self.one_way_ns(SIP_MESSAGE_BYTES);
        fx.schedule(at, SipEvent::Arrival { call, kind });
    }

    /// A message reaches the VM's VF: into the ring, or lost if it is full.
    pub(super) fn sip_arrival(&mut self, message: SipMessage, fx: &mut Effects) {
        let queues = self.first_queues(0);
        if self.queues[queues].vf.ring >= RX_RING_SIZE {
            self.sip.lost += 1;
        } else {
            self.sip.in_ring.push_back(message);
        }
        self.rx_packet(queues, RxQueueKind::Vf, fx);
    }

    /// NAPI handed the oldest ring message to the B2BUA's socket.
    pub(super) fn sip_to_socket(&mut self) {
        if let Some(message) = self.sip.in_ring.pop_front() {
            self.sip.socket.push_back(message);
        }
    }

    /// The B2BUA takes the next message, if any.
    pub(super) fn sip_take(&mut self) -> bool {
        self.sip.serving = self.sip.socket.pop_front();
        self.sip.serving.is_some()
    }

    /// The B2BUA has handled a message: it relays it (its sends leave
    /// through the VF's doorbell, no exit).
    pub(super) fn sip_handled(&mut self, fx: &mut Effects) {
        let Some(SipMessage { call, kind }) = self.sip.serving.take() else {
            return;
        };
        let to_peer = self.now + self.one_way_ns(SIP_MESSAGE_BYTES);
        match kind {
            // 100 Trying to the UAC; the INVITE to the UAS, which answers.
            SipKind::Invite => {
                fx.schedule(to_peer, SipEvent::Uac { call, kind });
                let answered = SipKind::InviteOk;
                fx.schedule(
                    to_peer,
                    SipEvent::Uas {
                        call,
                        kind: answered,
                    },
                );
            }
            SipKind::InviteOk | SipKind::ByeOk => {
                fx.schedule(to_peer, SipEvent::Uac { call, kind })
            }
            // Relayed to the UAS, which answers a BYE.
            SipKind::Ack => {}
            SipKind::Bye => fx.schedule(
                to_peer,
                SipEvent::Uas {
                    call,
                    kind: SipKind::ByeOk,
                },
            ),
        }
    }

    /// The UAS answers, or the UAC hangs up: a message for the B2BUA.
    pub(super) fn sip_peer_sends(&mut self, call: u32, kind: SipKind, fx: &mut Effects) {
        self.sip_send(call, kind, fx);
    }

    /// A message the B2BUA relayed reaches the UAC.
    pub(super) fn sip_uac(&mut self, call: u32, kind: SipKind, fx: &mut Effects) {
        let now = self.now;
        let Some(state) = self.sip.calls.get_mut(call as usize) else {
            return;
        };
        state.responded = true;
        match kind {
            SipKind::Invite => {}
            SipKind::InviteOk if !state.set_up => {
                state.set_up = true;
                let setup = now - state.invite_at;
                self.sip.setup_ns.push(setup);
                self.counters.latencies.push(setup);
                self.sip_send(call, SipKind::Ack, fx);
                fx.schedule(now + HOLD_NS, SipEvent::HangUp { call });
            }
            SipKind::ByeOk => {
                self.sip.completed += 1;
                self.sip.last_completed_at = now;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{listed, single};
    use super::*;
    use crate::policy::DesignKind;

    #[test]
    fn a_message_that_finds_the_ring_full_is_lost_and_one_that_fits_is_queued() {
        let mut m = single(DesignKind::Did);
        let invite = SipMessage {
            call: 0,
            kind: SipKind::Invite,
        };
        m.queues[0].vf.ring = RX_RING_SIZE;
        listed(&mut m, |m, fx| m.sip_arrival(invite, fx));
        assert_eq!(m.sip.lost(), 1);
        assert!(m.sip.in_ring.is_empty());
        m.queues[0].vf.ring = 0;
        listed(&mut m, |m, fx| m.sip_arrival(invite, fx));
        assert_eq!(m.sip.in_ring.front(), Some(&invite));
        m.sip_to_socket();
        assert!(m.sip_take());
        assert_eq!(m.sip.serving, Some(invite));
    }

    #[test]
    fn an_unanswered_invite_goes_again_and_an_answered_one_does_not() {
        let mut m = single(DesignKind::Did);
        m.sip.calls = vec![Call::default()];
        let fx = listed(&mut m, |m, fx| m.place_call(0, fx));
        assert_eq!(fx.len(), 2, "the INVITE and timer A: {fx:?}");
        m.now = T1_NS;
        let fx = listed(&mut m, |m, fx| m.sip_timer_a(0, T1_NS, fx));
        assert_eq!(m.sip.retransmissions(), 1);
        assert_eq!(fx.len(), 2, "the INVITE again and timer A doubled: {fx:?}");
        // 100 Trying reaches the UAC: timer A stops.
        listed(&mut m, |m, fx| m.sip_uac(0, SipKind::Invite, fx));
        let fx = listed(&mut m, |m, fx| m.sip_timer_a(0, 2 * T1_NS, fx));
        assert!(fx.is_empty());
        assert_eq!(m.sip.retransmissions(), 1);
    }

    #[test]
    fn timer_a_doubles_until_a_response_or_timer_b() {
        let mut sip = Sip {
            calls: vec![Call::default()],
            ..Sip::default()
        };
        assert_eq!(sip.timer_a(0, T1_NS, T1_NS), Some(2 * T1_NS));
        assert_eq!(sip.timer_a(0, 3 * T1_NS, 2 * T1_NS), Some(4 * T1_NS));
        assert_eq!(sip.retransmissions(), 2);
        assert_eq!(sip.timer_a(0, TIMER_B_NS, 64 * T1_NS), None);
        sip.calls[0].responded = true;
        assert_eq!(sip.timer_a(0, T1_NS, T1_NS), None);
        assert_eq!(sip.retransmissions(), 2);
    }

    #[test]
    fn setups_fall_into_their_buckets_and_the_rate_counts_to_the_last_call() {
        let sip = Sip {
            setup_ns: vec![1_000_000, 9_999_999, 10_000_000, 150_000_000, 600_000_000],
            completed: 10,
            last_completed_at: 5_000_000_000,
            ..Sip::default()
        };
        let buckets = sip.buckets();
        assert_eq!(buckets["<10"], 2);
        assert_eq!(buckets["10-100"], 1);
        assert_eq!(buckets["100-200"], 1);
        assert_eq!(buckets[">200"], 1);
        assert_eq!(sip.call_rate(), 2.0);
    }

    #[test]
    fn a_run_places_calls_at_the_rate_that_can_all_end() {
        assert_eq!(Sip::calls_for(110_000_000_000), 10_000);
        assert_eq!(Sip::calls_for(5_000_000_000), 0);
    }
}
