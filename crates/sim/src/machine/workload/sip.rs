//! The SIP B2BUA (VoIP): SIPp's UAC on the remote host places calls at a
//! fixed rate, the back-to-back user agent in the VM relays each call to
//! SIPp's UAS on the host. Every message the B2BUA receives costs it
//! `workloads.sip_message` of CPU. The call flow (RFC 3261 and the DID
//! paper): the B2BUA answers an INVITE with 100 Trying and relays it; the
//! UAS rings, sending 180 Ringing at once, and answers with 200 OK when
//! the ringing ends; the UAC's ACK goes through to the UAS; BYE and its
//! 200 OK end the call. A call's setup latency runs from the UAC's first
//! INVITE to its 200 OK.
//!
//! The B2BUA serves its socket in arrival order on the guest's vCPU, so a
//! busy one delays the messages behind: an INVITE whose 100 Trying leaves
//! more than T1 after the UAC sent it makes the UAC send it again, and the
//! B2BUA serves that retransmission too, answering it from its INVITE
//! server transaction (RFC 3261 17.2.1) without relaying it.
//!
//! SIP's timers retransmit what is lost: the UAC's timer A (RFC 3261
//! 17.1.1.2) sends an INVITE with no provisional or final response again
//! after T1 = 500 ms, then after twice as long each time, until timer B
//! (64 T1); the UAS sends its 200 OK again until the ACK comes (13.3.1.4:
//! T1, doubling up to T2 = 4 s, for at most 64 T1). A message that finds
//! the guest's receive ring full is lost.
//!
//! The bare-metal testbed's own spread is a workload input (the paper's
//! bare row, docs/calibration.md): how long the UAS rings, and which of
//! the UAC's INVITEs the testbed loses, follow it (see [`BareTestbed`]).
//! Everything a VM adds on top is the model's.

use std::collections::{BTreeMap, VecDeque};

use dirq_stats::{f64_of, round_u64};

use super::{Ctx, Programs, StepOutcome, Taken, Traffic, Workload, WorkloadEvent, WorkloadStep};
use crate::machine::effects::{Effect, Effects};
use crate::machine::guest::Step;
use crate::machine::ledger::Counters;
use crate::machine::network::Network;
use crate::machine::platform::RX_RING_SIZE;
use crate::machine::Ring;
use crate::metrics::WorkloadFigures;
use crate::profile::CostProfile;
use crate::scenario::{RunSpec, Transport};

/// The B2BUA, the guest's background task.
const SIP_RELAY: &[Step] = &[Step::Workload(WorkloadStep::App)];

/// RFC 3261 17.1.1.1: T1, the round-trip estimate, 500 ms.
const T1_NS: u64 = 500_000_000;
/// RFC 3261 17.1.2.2: T2, the cap on a doubled retransmission interval.
const T2_NS: u64 = 4_000_000_000;
/// Timer B: the INVITE transaction gives up after 64 T1 (and a UAS stops
/// retransmitting its 200 OK as late, 13.3.1.4).
const TIMER_B_NS: u64 = 64 * T1_NS;
/// The B2BUA's timer process ticks 16 times a second (ASSUMED: the study
/// does not name its B2BUA; the SER family's core timer ticks at
/// `TIMER_TICKS_HZ`, 16, in Kamailio's timer_ticks.h): each tick is a
/// guest timer expiry that wakes the process to run the transaction
/// timers due (RFC 3261 17.1.1.2's A and B for the INVITE it relays to
/// the UAS, 17.1.2.2's E, F and K for the BYE). None of them retransmits
/// here: the UAS answers at once and nothing on that leg is lost; what
/// they cost is the tick itself, under vanilla KVM a TMICT write exit, a
/// host timer exit with its injection and an EOI exit.
const B2BUA_TIMER_TICK_NS: u64 = 1_000_000_000 / 16;
/// The call-placing rate and hold time of the DID paper's SIPp run.
const CALLS_PER_S: u64 = 100;
const HOLD_NS: u64 = 10_000_000_000;
/// A SIP message's payload, bytes (ASSUMED: a typical INVITE with SDP).
const SIP_MESSAGE_BYTES: u64 = 800;
/// The setup-latency buckets' upper bounds, ms, and their names.
const BUCKETS: [(u64, &str); 4] = [
    (10, "<10"),
    (100, "10-100"),
    (200, "100-200"),
    (u64::MAX, ">200"),
];

/// The bare-metal row of the DID paper's VoIP run (a workload input):
/// calls per setup-latency bucket and the UAC's INVITE retransmissions,
/// of 10,000 calls.
const BARE_BUCKET_CALLS: [u64; 4] = [9_485, 112, 147, 256];
const BARE_INVITE_RETRANSMISSIONS: u64 = 79;
const BARE_CALLS: u64 = 10_000;
/// How long the UAS rings for a call of each bucket, ms: at once for the
/// <10 bucket (SIPp's UAS answers without a pause), uniform over the
/// bucket for the others; the >200 bucket's upper end, 500 ms (T1), is
/// ASSUMED (the paper gives none).
const RING_MS: [(u64, u64); 4] = [(0, 0), (10, 100), (100, 200), (200, 500)];

/// The bare testbed's spread, drawn as low-discrepancy (Weyl) sequences
/// so that a 10,000-call run reproduces the bare row's counts, not only
/// their expectation, and every design sees the same calls.
///
/// Which INVITEs the testbed loses: each of the UAC's INVITEs (a
/// retransmission too) is lost with p = 79 / (10,000 + 79), so that the
/// expected retransmissions, 10,000 p / (1 - p), are the measured 79
/// (ASSUMED: the UAC's timer A fired because its INVITE was lost, not its
/// 100 Trying). A call whose first INVITE is lost lands in >200 (T1 is
/// 500 ms). The ring times take the rest: the share of the bare row's
/// calls in each bucket, less the lost INVITEs' calls from >200, among
/// the calls that lost none. The row gives setup latencies, and on bare
/// metal the B2BUA's own work on a call's setup path (its INVITE and the
/// UAS's 200 OK, each received and relayed) is part of one: the UAS rings
/// for the drawn setup latency less that work, so that the bare run lands
/// where the row says whatever the B2BUA's work per message.
#[derive(Clone, Copy, Debug, Default)]
struct BareTestbed {
    invites_sent: u64,
    /// The bare B2BUA's work on a call's setup path.
    setup_server_ns: u64,
}

/// Weyl sequences' steps: the golden ratio's and the silver ratio's
/// fractional parts (any two irrationals with no rational relation).
const LOSS_STEP: f64 = 0.618_033_988_749_894_8;
const RING_STEP: f64 = 0.414_213_562_373_095_03;

impl BareTestbed {
    fn loss_probability() -> f64 {
        f64_of(BARE_INVITE_RETRANSMISSIONS) / f64_of(BARE_CALLS + BARE_INVITE_RETRANSMISSIONS)
    }

    /// Whether the testbed loses the UAC's next INVITE.
    fn loses_invite(&mut self) -> bool {
        self.invites_sent += 1;
        (f64_of(self.invites_sent) * LOSS_STEP).fract() < Self::loss_probability()
    }

    /// How long the UAS rings for `call`.
    fn ring_ns(&self, call: u32) -> u64 {
        Self::setup_ns(call).saturating_sub(self.setup_server_ns)
    }

    /// The setup latency the bare row gives `call`.
    fn setup_ns(call: u32) -> u64 {
        let lost = f64_of(BARE_CALLS) * Self::loss_probability();
        let answered = f64_of(BARE_CALLS) - lost;
        let mut left = (f64_of(u64::from(call)) * RING_STEP + 0.5 * RING_STEP).fract() * answered;
        for (bucket, &calls) in BARE_BUCKET_CALLS.iter().enumerate() {
            let calls = if bucket == BUCKETS.len() - 1 {
                f64_of(calls) - lost
            } else {
                f64_of(calls)
            };
            if left < calls {
                let (low, high) = RING_MS[bucket];
                let within = left / calls;
                return low * 1_000_000 + round_u64(f64_of((high - low) * 1_000_000) * within);
            }
            left -= calls;
        }
        RING_MS[BUCKETS.len() - 1].1 * 1_000_000
    }
}

/// A message the B2BUA receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum SipKind {
    /// From the UAC: a new call (or its retransmission).
    Invite,
    /// From the UAS: it rings (180 Ringing).
    Ringing,
    /// From the UAS: the call is answered (200 OK, or its retransmission).
    InviteOk,
    /// From the UAC: the answer's acknowledgement.
    Ack,
    /// From the UAC: the call ends.
    Bye,
    /// From the UAS: the BYE is answered.
    ByeOk,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) struct SipMessage {
    pub(super) call: u32,
    pub(super) kind: SipKind,
}

/// The B2BUA's INVITE server transaction towards the UAC, which answers a
/// retransmitted INVITE itself (RFC 3261 17.2.1: in the Proceeding state
/// it sends again the latest provisional response and passes nothing to
/// its core, so nothing goes on to the UAS; RFC 6026 7.1: once the 2xx has
/// gone, the Accepted state absorbs it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum InviteServer {
    /// No INVITE of the call has reached the B2BUA yet.
    #[default]
    Absent,
    /// Proceeding, its latest response 100 Trying.
    Trying,
    /// Proceeding, its latest response the UAS's 180 Ringing relayed.
    Ringing,
    /// Accepted: the UAS's 200 OK relayed.
    Accepted,
}

#[derive(Clone, Copy, Debug, Default)]
struct Call {
    invite_at: u64,
    /// The UAC heard a response (100 Trying, 180 or 200 OK): timer A stops.
    responded: bool,
    set_up: bool,
    /// The UAS has the INVITE (a retransmission rings no second time).
    ringing: bool,
    /// The UAS answered and when: its 200 OK goes again until the ACK.
    answered_at: Option<u64>,
    /// The B2BUA's INVITE server transaction.
    invite_server: InviteServer,
    /// The B2BUA has the UAC's ACK: it acknowledges a repeated 200 OK
    /// itself.
    acked_by_uac: bool,
    acked_at_uas: bool,
}

/// Where the run's SIP messages go, fixed for the run: the VM's first
/// queue pair, the guest's receive ring for SIP (the VF's, or virtio's,
/// PV), and a message's one-way time between SIPp and the B2BUA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SipLink {
    pair: usize,
    ring: Ring,
    one_way_ns: u64,
}

impl Default for SipLink {
    fn default() -> Self {
        SipLink {
            pair: 0,
            ring: Ring::Vf,
            one_way_ns: 0,
        }
    }
}

/// The VoIP run's state: SIPp's calls, the B2BUA's messages and the
/// figures. Its handlers change only this state and list [`Effect`]s: a
/// message's next hop as an event, a packet for the ring, a virtio kick.
#[derive(Debug, Default)]
pub(super) struct Sip {
    link: SipLink,
    /// The ring SIP's messages arrive on (virtio over PV, else the VF's).
    ring: Ring,
    /// A message's one-way time between SIPp and the B2BUA.
    one_way_ns: u64,
    /// The B2BUA's work per message: its own, the relay's send and copy.
    relay_ns: u64,
    /// The guest's stack work per message received.
    rx_work_ns: u64,
    duration_ns: u64,
    calls: Vec<Call>,
    /// Messages in the guest's receive ring, oldest first, then in the
    /// B2BUA's socket.
    in_ring: VecDeque<SipMessage>,
    socket: VecDeque<SipMessage>,
    serving: Option<SipMessage>,
    setup_ns: Vec<u64>,
    retransmissions: u64,
    completed: u64,
    last_completed_at: u64,
    lost: u64,
    testbed: BareTestbed,
}

impl Sip {
    pub(super) fn new(spec: &RunSpec, profile: &CostProfile) -> Sip {
        let net = Network::new(profile, &spec.group, false);
        let network = &profile.network;
        let copy = net.copy_ns(SIP_MESSAGE_BYTES);
        let relay_ns = profile.workloads.sip_message + network.tx_packet + copy;
        let rx_work_ns = network.rx_frame + network.rx_stack + copy;
        Sip {
            ring: match spec.group.transport {
                Transport::Pv => Ring::Virtio,
                _ => Ring::Vf,
            },
            one_way_ns: net.one_way_ns(SIP_MESSAGE_BYTES),
            relay_ns,
            rx_work_ns,
            duration_ns: spec.duration_ns,
            testbed: BareTestbed {
                setup_server_ns: 2 * (rx_work_ns + relay_ns),
                ..BareTestbed::default()
            },
            ..Sip::default()
        }
    }

    /// The calls a run of `duration_ns` places: all but the last hold
    /// time's worth, so that every call can end.
    fn calls_for(duration_ns: u64) -> u32 {
        let calls = duration_ns.saturating_sub(HOLD_NS) * CALLS_PER_S / 1_000_000_000;
        u32::try_from(calls).unwrap_or(u32::MAX)
    }

    /// Calls per setup-latency bucket.
    fn buckets(&self) -> BTreeMap<String, u64> {
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
    fn call_rate(&self) -> f64 {
        if self.last_completed_at == 0 {
            return 0.0;
        }
        f64_of(self.completed) / (f64_of(self.last_completed_at) / 1e9)
    }

    fn retransmissions(&self) -> u64 {
        self.retransmissions
    }

    fn lost(&self) -> u64 {
        self.lost
    }

    /// VoIP's figures.
    fn results(&self) -> WorkloadFigures {
        WorkloadFigures {
            setup_ms_buckets: Some(self.buckets()),
            call_rate: Some(self.call_rate()),
            invite_retransmissions: Some(self.retransmissions()),
            ..Default::default()
        }
    }

    /// SIPp starts placing the calls of a run of `duration_ns` over `link`.
    fn place_calls(&mut self, duration_ns: u64, link: SipLink, fx: &mut Effects) {
        let calls = Sip::calls_for(duration_ns);
        self.link = link;
        self.calls = vec![Call::default(); calls as usize];
        let gap = 1_000_000_000 / CALLS_PER_S;
        for call in 0..calls {
            fx.schedule(u64::from(call) * gap, SipEvent::Call { call });
        }
    }

    /// One of VoIP's events at `now`; `ring_full`: the guest's receive
    /// ring has no room (a message arriving is lost). A call's setup
    /// latency when its UAC has the 200 OK.
    fn handle(
        &mut self,
        event: SipEvent,
        now: u64,
        ring_full: bool,
        fx: &mut Effects,
    ) -> Option<u64> {
        match event {
            SipEvent::Call { call } => self.place_call(call, now, fx),
            SipEvent::TimerA { call, interval } => self.on_timer_a(call, now, interval, fx),
            SipEvent::Arrival { call, kind } => {
                self.arrival(SipMessage { call, kind }, ring_full, fx)
            }
            SipEvent::Uas { call, kind } => self.uas(call, kind, now, fx),
            SipEvent::Answer { call } => self.answer(call, now, fx),
            SipEvent::OkAgain { call, interval } => self.on_ok_again(call, now, interval, fx),
            SipEvent::Uac { call, kind } => return self.uac(call, kind, now, fx),
            SipEvent::HangUp { call } => self.send(call, SipKind::Bye, now, fx),
        }
        None
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

    /// The UAS's 2xx timer fired for `call` at `now`, `interval` after
    /// the last send: the next interval if the 200 OK goes again.
    fn ok_again(&self, call: u32, now: u64, interval: u64) -> Option<u64> {
        let state = self.calls.get(call as usize)?;
        let answered_at = state.answered_at?;
        if state.acked_at_uas || now - answered_at >= TIMER_B_NS {
            return None;
        }
        Some((interval * 2).min(T2_NS))
    }

    /// The UAC places `call`: its INVITE leaves, timer A starts.
    fn place_call(&mut self, call: u32, now: u64, fx: &mut Effects) {
        let Some(state) = self.calls.get_mut(call as usize) else {
            return;
        };
        state.invite_at = now;
        self.uac_sends_invite(call, now, fx);
        fx.schedule(
            now + T1_NS,
            SipEvent::TimerA {
                call,
                interval: T1_NS,
            },
        );
    }

    fn on_timer_a(&mut self, call: u32, now: u64, interval: u64, fx: &mut Effects) {
        if let Some(next) = self.timer_a(call, now, interval) {
            self.uac_sends_invite(call, now, fx);
            fx.schedule(
                now + next,
                SipEvent::TimerA {
                    call,
                    interval: next,
                },
            );
        }
    }

    /// The UAC's INVITE leaves, unless the bare testbed loses it.
    fn uac_sends_invite(&mut self, call: u32, now: u64, fx: &mut Effects) {
        if !self.testbed.loses_invite() {
            self.send(call, SipKind::Invite, now, fx);
        }
    }

    /// A message for the B2BUA leaves its sender (UAC or UAS) at `now`.
    fn send(&self, call: u32, kind: SipKind, now: u64, fx: &mut Effects) {
        fx.schedule(now + self.link.one_way_ns, SipEvent::Arrival { call, kind });
    }

    /// A message reaches the VM: into the ring (through vhost, PV), or
    /// lost if the ring is full.
    fn arrival(&mut self, message: SipMessage, ring_full: bool, fx: &mut Effects) {
        if ring_full {
            self.lost += 1;
            return;
        }
        self.in_ring.push_back(message);
        let SipLink { pair, ring, .. } = self.link;
        fx.push(Effect::RxPacket { pair, ring });
    }

    /// NAPI handed the oldest ring message to the B2BUA's socket.
    fn socket_takes(&mut self) {
        if let Some(message) = self.in_ring.pop_front() {
            self.socket.push_back(message);
        }
    }

    /// The B2BUA takes the next message, if any.
    fn take(&mut self) -> bool {
        self.serving = self.socket.pop_front();
        self.serving.is_some()
    }

    /// The B2BUA has handled a message on `vcpu` at `now`: it relays it
    /// (through the VF's doorbell, no exit; or a virtio kick, PV), or
    /// its INVITE server transaction answers a retransmitted INVITE.
    fn handled(&mut self, vcpu: usize, now: u64, fx: &mut Effects) {
        let Some(SipMessage { call, kind }) = self.serving.take() else {
            return;
        };
        let to_peer = now + self.link.one_way_ns;
        let kicks = self.link.ring == Ring::Virtio;
        let Some(state) = self.calls.get_mut(call as usize) else {
            return;
        };
        // RFC 6026 7.1: after the 200 OK a retransmitted INVITE is
        // absorbed; nothing goes out.
        if kind == SipKind::Invite && state.invite_server == InviteServer::Accepted {
            return;
        }
        if kicks {
            fx.push(Effect::VirtioKick(vcpu));
        }
        match kind {
            // 100 Trying to the UAC and the INVITE to the UAS for a new
            // INVITE; for a retransmission the latest provisional
            // response again (100 Trying is the UAC's event of kind
            // Invite).
            SipKind::Invite => {
                let provisional = match state.invite_server {
                    InviteServer::Ringing => SipKind::Ringing,
                    _ => SipKind::Invite,
                };
                fx.schedule(
                    to_peer,
                    SipEvent::Uac {
                        call,
                        kind: provisional,
                    },
                );
                if state.invite_server == InviteServer::Absent {
                    state.invite_server = InviteServer::Trying;
                    fx.schedule(to_peer, SipEvent::Uas { call, kind });
                }
            }
            // A repeated 200 OK after the UAC's ACK: the B2BUA, which
            // holds the dialog, acknowledges it itself.
            SipKind::InviteOk if state.acked_by_uac => fx.schedule(
                to_peer,
                SipEvent::Uas {
                    call,
                    kind: SipKind::Ack,
                },
            ),
            SipKind::Ringing | SipKind::InviteOk | SipKind::ByeOk => {
                state.invite_server = match (kind, state.invite_server) {
                    (SipKind::InviteOk, _) => InviteServer::Accepted,
                    (SipKind::Ringing, InviteServer::Trying) => InviteServer::Ringing,
                    (_, server) => server,
                };
                fx.schedule(to_peer, SipEvent::Uac { call, kind })
            }
            SipKind::Ack | SipKind::Bye => {
                if kind == SipKind::Ack {
                    state.acked_by_uac = true;
                }
                fx.schedule(to_peer, SipEvent::Uas { call, kind });
            }
        }
    }

    /// A message the B2BUA relayed reaches the UAS: it rings on an
    /// INVITE, takes an ACK, answers a BYE.
    fn uas(&mut self, call: u32, kind: SipKind, now: u64, fx: &mut Effects) {
        let Some(state) = self.calls.get_mut(call as usize) else {
            return;
        };
        match kind {
            SipKind::Invite if !state.ringing => {
                state.ringing = true;
                self.send(call, SipKind::Ringing, now, fx);
                let ring = self.testbed.ring_ns(call);
                fx.schedule(now + ring, SipEvent::Answer { call });
            }
            SipKind::Ack => state.acked_at_uas = true,
            SipKind::Bye => self.send(call, SipKind::ByeOk, now, fx),
            _ => {}
        }
    }

    /// The UAS stops ringing and answers: its 200 OK leaves, and its 2xx
    /// timer starts.
    fn answer(&mut self, call: u32, now: u64, fx: &mut Effects) {
        if let Some(state) = self.calls.get_mut(call as usize) {
            state.answered_at = Some(now);
        }
        self.send(call, SipKind::InviteOk, now, fx);
        fx.schedule(
            now + T1_NS,
            SipEvent::OkAgain {
                call,
                interval: T1_NS,
            },
        );
    }

    /// The UAS's 2xx timer: the 200 OK goes again while no ACK came.
    fn on_ok_again(&mut self, call: u32, now: u64, interval: u64, fx: &mut Effects) {
        if let Some(next) = self.ok_again(call, now, interval) {
            self.send(call, SipKind::InviteOk, now, fx);
            fx.schedule(
                now + next,
                SipEvent::OkAgain {
                    call,
                    interval: next,
                },
            );
        }
    }

    /// A message the B2BUA relayed reaches the UAC: the call's setup
    /// latency when it is the first 200 OK.
    fn uac(&mut self, call: u32, kind: SipKind, now: u64, fx: &mut Effects) -> Option<u64> {
        let state = self.calls.get_mut(call as usize)?;
        state.responded = true;
        match kind {
            SipKind::InviteOk if !state.set_up => {
                state.set_up = true;
                let setup = now - state.invite_at;
                self.setup_ns.push(setup);
                self.send(call, SipKind::Ack, now, fx);
                fx.schedule(now + HOLD_NS, SipEvent::HangUp { call });
                return Some(setup);
            }
            // A repeated 200 OK: the UAC acknowledges it again.
            SipKind::InviteOk => self.send(call, SipKind::Ack, now, fx),
            SipKind::ByeOk => {
                self.completed += 1;
                self.last_completed_at = now;
            }
            _ => {}
        }
        None
    }
}

/// VoIP's events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum SipEvent {
    /// SIPp's UAC places a call.
    Call { call: u32 },
    /// The UAC's timer A for a call's INVITE.
    TimerA { call: u32, interval: u64 },
    /// A SIP message reaches the B2BUA's VF.
    Arrival { call: u32, kind: SipKind },
    /// A message the B2BUA relayed reaches the UAS.
    Uas { call: u32, kind: SipKind },
    /// The UAS stops ringing and answers.
    Answer { call: u32 },
    /// The UAS's timer for sending its 200 OK again.
    OkAgain { call: u32, interval: u64 },
    /// A message the B2BUA relayed reaches the UAC.
    Uac { call: u32, kind: SipKind },
    /// The UAC ends a call.
    HangUp { call: u32 },
}

impl Workload for Sip {
    fn programs(&self) -> Programs {
        Programs {
            background: Some(SIP_RELAY),
            ..Programs::default()
        }
    }

    fn traffic(&self) -> Traffic {
        Traffic {
            frame_bytes: SIP_MESSAGE_BYTES,
            ..Traffic::default()
        }
    }

    /// The B2BUA's timer process, its transaction timers' tick.
    fn runs_timer_thread(&self) -> bool {
        true
    }

    fn timer_thread_period_ns(&self) -> Option<u64> {
        Some(B2BUA_TIMER_TICK_NS)
    }

    /// SIPp starts over the VM's first queue pair (a VoIP run has one VM).
    fn start(&mut self, vm: usize, _owners: &[usize], ctx: &mut Ctx, fx: &mut Effects) {
        let link = SipLink {
            pair: ctx.topology.first_pair(vm),
            ring: self.ring,
            one_way_ns: self.one_way_ns,
        };
        self.place_calls(self.duration_ns, link, fx);
    }

    /// A VoIP event, handed the time and whether SIP's ring is full; a
    /// call's setup latency is the run's.
    fn on_event(&mut self, event: WorkloadEvent, ctx: &mut Ctx, fx: &mut Effects) {
        let WorkloadEvent::Sip(event) = event else {
            return;
        };
        let ring_full = ctx.state.ring_level(self.link.pair, self.link.ring) >= RX_RING_SIZE;
        if let Some(setup) = self.handle(event, ctx.now, ring_full, fx) {
            ctx.record.latencies.push(setup);
        }
    }

    /// The B2BUA takes the next message, if any.
    fn on_step(
        &mut self,
        _vcpu: usize,
        _step: WorkloadStep,
        _ctx: &mut Ctx,
        _fx: &mut Effects,
    ) -> StepOutcome {
        if self.take() {
            StepOutcome::Takes(self.relay_ns)
        } else {
            StepOutcome::Spin
        }
    }

    fn step_done(&mut self, vcpu: usize, _step: WorkloadStep, ctx: &mut Ctx, fx: &mut Effects) {
        self.handled(vcpu, ctx.now, fx);
    }

    fn rx_work_ns(&self, _pair: usize) -> Option<u64> {
        Some(self.rx_work_ns)
    }

    fn packet_taken(&mut self, _taken: Taken, _ctx: &mut Ctx, _fx: &mut Effects) {
        self.socket_takes();
    }

    fn figures(&self, _record: &Counters) -> WorkloadFigures {
        self.results()
    }

    /// SIP messages lost to a full ring.
    fn params(&self, params: &mut BTreeMap<String, serde_json::Value>) {
        if self.lost() > 0 {
            params.insert("lost_sip_messages".into(), self.lost().into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::fixture::{listed, scheduled};

    /// A message's one-way time in the tests.
    const ONE_WAY_NS: u64 = 30_000;

    /// VoIP's state alone, over `ring` of queue pair 2, with `calls` placed.
    fn sip(ring: Ring, calls: usize) -> Sip {
        Sip {
            link: SipLink {
                pair: 2,
                ring,
                one_way_ns: ONE_WAY_NS,
            },
            calls: vec![Call::default(); calls],
            ..Sip::default()
        }
    }

    fn arrival(call: u32, kind: SipKind) -> SipEvent {
        SipEvent::Arrival { call, kind }
    }

    /// Call 0's message of `kind` reaches the B2BUA, which serves it: what
    /// it sends.
    fn served(sip: &mut Sip, kind: SipKind) -> Vec<Effect> {
        listed(|fx| sip.handle(arrival(0, kind), 0, false, fx));
        sip.socket_takes();
        assert!(sip.take());
        listed(|fx| sip.handled(0, 0, fx))
    }

    #[test]
    fn a_message_that_finds_the_ring_full_is_lost_and_one_that_fits_is_queued() {
        let mut sip = sip(Ring::Vf, 1);
        let invite = arrival(0, SipKind::Invite);
        let fx = listed(|fx| sip.handle(invite, 0, true, fx));
        assert!(fx.is_empty(), "{fx:?}");
        assert_eq!(sip.lost(), 1);
        assert!(!sip.take(), "nothing reached the socket");
        let fx = listed(|fx| sip.handle(invite, 0, false, fx));
        let packet = Effect::RxPacket {
            pair: 2,
            ring: Ring::Vf,
        };
        assert_eq!(fx, [packet]);
        sip.socket_takes();
        assert!(sip.take());
        assert_eq!(
            sip.serving,
            Some(SipMessage {
                call: 0,
                kind: SipKind::Invite
            })
        );
    }

    #[test]
    fn over_virtio_a_message_goes_to_vhost_and_its_relay_kicks() {
        let mut sip = sip(Ring::Virtio, 1);
        let fx = listed(|fx| sip.handle(arrival(0, SipKind::Bye), 0, false, fx));
        let to_vhost = Effect::RxPacket {
            pair: 2,
            ring: Ring::Virtio,
        };
        assert_eq!(fx, [to_vhost]);
        sip.socket_takes();
        assert!(sip.take());
        let fx = listed(|fx| sip.handled(3, 100, fx));
        let to_uas = SipEvent::Uas {
            call: 0,
            kind: SipKind::Bye,
        };
        assert_eq!(
            fx,
            [Effect::VirtioKick(3), scheduled(100 + ONE_WAY_NS, to_uas)]
        );
    }

    #[test]
    fn the_b2bua_relays_an_invite_both_ways_and_a_repeated_ok_after_the_ack_itself() {
        let mut sip = sip(Ring::Vf, 1);
        let invite = SipKind::Invite;
        assert_eq!(
            served(&mut sip, invite),
            [
                scheduled(
                    ONE_WAY_NS,
                    SipEvent::Uac {
                        call: 0,
                        kind: invite
                    }
                ),
                scheduled(
                    ONE_WAY_NS,
                    SipEvent::Uas {
                        call: 0,
                        kind: invite
                    }
                )
            ]
        );
        let ok = SipKind::InviteOk;
        let ok_to_uac = scheduled(ONE_WAY_NS, SipEvent::Uac { call: 0, kind: ok });
        assert_eq!(served(&mut sip, ok), [ok_to_uac]);
        served(&mut sip, SipKind::Ack);
        let ack = SipEvent::Uas {
            call: 0,
            kind: SipKind::Ack,
        };
        assert_eq!(served(&mut sip, ok), [scheduled(ONE_WAY_NS, ack)]);
    }

    #[test]
    fn a_retransmitted_invite_gets_the_latest_provisional_response_and_goes_no_further() {
        let mut sip = sip(Ring::Vf, 1);
        let to_uac = |kind| scheduled(ONE_WAY_NS, SipEvent::Uac { call: 0, kind });
        let invite = SipKind::Invite;
        assert_eq!(
            served(&mut sip, invite).len(),
            2,
            "100 Trying and the relay"
        );
        // RFC 3261 17.2.1, Proceeding: 100 Trying again, the UAS untouched.
        assert_eq!(served(&mut sip, invite), [to_uac(invite)]);
        assert_eq!(
            served(&mut sip, SipKind::Ringing),
            [to_uac(SipKind::Ringing)]
        );
        assert_eq!(served(&mut sip, invite), [to_uac(SipKind::Ringing)]);
        served(&mut sip, SipKind::InviteOk);
        // RFC 6026 7.1, Accepted: absorbed.
        assert!(served(&mut sip, invite).is_empty());
    }

    #[test]
    fn an_unanswered_invite_goes_again_and_an_answered_one_does_not() {
        let mut sip = sip(Ring::Vf, 1);
        let fx = listed(|fx| sip.handle(SipEvent::Call { call: 0 }, 0, false, fx));
        assert_eq!(fx.len(), 2, "the INVITE and timer A: {fx:?}");
        let timer_a = |interval| SipEvent::TimerA { call: 0, interval };
        let fx = listed(|fx| sip.handle(timer_a(T1_NS), T1_NS, false, fx));
        assert_eq!(sip.retransmissions(), 1);
        assert_eq!(fx.len(), 2, "the INVITE again and timer A doubled: {fx:?}");
        assert!(
            fx.contains(&scheduled(3 * T1_NS, timer_a(2 * T1_NS))),
            "{fx:?}"
        );
        // 100 Trying reaches the UAC: timer A stops.
        let trying = SipEvent::Uac {
            call: 0,
            kind: SipKind::Invite,
        };
        listed(|fx| sip.handle(trying, T1_NS, false, fx));
        let fx = listed(|fx| sip.handle(timer_a(2 * T1_NS), 3 * T1_NS, false, fx));
        assert!(fx.is_empty());
        assert_eq!(sip.retransmissions(), 1);
    }

    #[test]
    fn the_uac_measures_the_setup_once_acks_and_hangs_up_after_the_hold() {
        let mut sip = sip(Ring::Vf, 1);
        listed(|fx| sip.handle(SipEvent::Call { call: 0 }, 1_000, false, fx));
        let ok = SipEvent::Uac {
            call: 0,
            kind: SipKind::InviteOk,
        };
        let mut setup = None;
        let fx = listed(|fx| setup = sip.handle(ok, 5_000, false, fx));
        assert_eq!(setup, Some(4_000));
        assert_eq!(
            fx,
            [
                scheduled(5_000 + ONE_WAY_NS, arrival(0, SipKind::Ack)),
                scheduled(5_000 + HOLD_NS, SipEvent::HangUp { call: 0 })
            ]
        );
        // The 200 OK again: only the ACK again, no second setup.
        let fx = listed(|fx| setup = sip.handle(ok, 9_000, false, fx));
        assert_eq!(setup, None);
        assert_eq!(
            fx,
            [scheduled(9_000 + ONE_WAY_NS, arrival(0, SipKind::Ack))]
        );
        assert_eq!(sip.buckets()["<10"], 1);
    }

    #[test]
    fn the_uas_rings_with_180_before_its_200_ok_and_rings_once() {
        let mut sip = sip(Ring::Vf, 1);
        let invite = SipEvent::Uas {
            call: 0,
            kind: SipKind::Invite,
        };
        let fx = listed(|fx| sip.handle(invite, 0, false, fx));
        let answer = sip.testbed.ring_ns(0);
        assert_eq!(
            fx,
            [
                scheduled(ONE_WAY_NS, arrival(0, SipKind::Ringing)),
                scheduled(answer, SipEvent::Answer { call: 0 })
            ]
        );
        // The INVITE again (timer A): the UAS already rings.
        assert!(listed(|fx| sip.handle(invite, 0, false, fx)).is_empty());
    }

    #[test]
    fn sipp_places_a_call_every_ten_ms_over_the_vms_first_pair() {
        use super::super::testing::{one_vm, spec, Bench};
        use crate::scenario::WorkloadKind;
        let mut group = one_vm(WorkloadKind::Sip, 1);
        group.transport = Transport::Pv;
        let mut sip = Sip::new(
            &spec(WorkloadKind::Sip, group.clone()),
            &CostProfile::did_2015(),
        );
        sip.duration_ns = HOLD_NS + 30_000_000;
        let mut bench = Bench::new(&group);
        let fx = bench.listed(|ctx, fx| sip.start(0, &[0], ctx, fx));
        assert_eq!(
            fx,
            [0, 10_000_000, 20_000_000].map(|at| {
                let call = u32::try_from(at / 10_000_000).expect("3 calls");
                scheduled(at, SipEvent::Call { call })
            })
        );
        assert_eq!((sip.link.pair, sip.link.ring), (0, Ring::Virtio));
    }

    #[test]
    fn the_uas_sends_its_200_ok_again_until_the_ack_doubling_up_to_t2() {
        let mut sip = Sip {
            calls: vec![Call {
                answered_at: Some(0),
                ..Call::default()
            }],
            ..Sip::default()
        };
        assert_eq!(sip.ok_again(0, T1_NS, T1_NS), Some(2 * T1_NS));
        assert_eq!(sip.ok_again(0, 7 * T1_NS, 4 * T1_NS), Some(T2_NS));
        assert_eq!(sip.ok_again(0, 15 * T1_NS, T2_NS), Some(T2_NS));
        assert_eq!(sip.ok_again(0, TIMER_B_NS, T2_NS), None);
        sip.calls[0].acked_at_uas = true;
        assert_eq!(sip.ok_again(0, T1_NS, T1_NS), None);
    }

    #[test]
    fn the_bare_testbed_loses_and_rings_as_the_bare_row_says() {
        let mut testbed = BareTestbed::default();
        let calls = u32::try_from(BARE_CALLS).expect("10,000");
        let (mut sent, mut setups) = (0, [0u64; 4]);
        for call in 0..calls {
            // A lost INVITE goes again after T1 until one gets through.
            let mut setup_ms = BareTestbed::setup_ns(call) / 1_000_000;
            while testbed.loses_invite() {
                setup_ms += T1_NS / 1_000_000;
                sent += 1;
            }
            sent += 1;
            let bucket = BUCKETS.iter().position(|(bound, _)| setup_ms < *bound);
            setups[bucket.expect("a bucket")] += 1;
        }
        let retransmissions = sent - BARE_CALLS;
        assert!(retransmissions.abs_diff(BARE_INVITE_RETRANSMISSIONS) <= 2);
        for (got, want) in setups.iter().zip(BARE_BUCKET_CALLS) {
            assert!(got.abs_diff(want) <= 5, "{setups:?} against the bare row");
        }
    }

    #[test]
    fn the_uas_rings_the_bare_setup_less_the_bare_b2buas_own_work() {
        let server_ns = 31_000;
        let testbed = BareTestbed {
            setup_server_ns: server_ns,
            ..BareTestbed::default()
        };
        let calls = 0..u32::try_from(BARE_CALLS).expect("10,000");
        let slow = calls.clone().find(|&call| BareTestbed::setup_ns(call) > 0);
        let slow = slow.expect("some calls ring");
        assert_eq!(
            testbed.ring_ns(slow) + server_ns,
            BareTestbed::setup_ns(slow)
        );
        let at_once = calls.clone().find(|&call| BareTestbed::setup_ns(call) == 0);
        assert_eq!(testbed.ring_ns(at_once.expect("most calls")), 0);
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
