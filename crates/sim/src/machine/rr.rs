//! netperf-rr and udp-rr: a remote on the wire sends a request, the guest
//! answers it, and the remote sends the next request as soon as it has
//! the response, one request outstanding. The remote measures the round
//! trip; the workload reports it as its tool defines latency.

use super::workload::SentTimes;
use super::*;

/// The request/response remote's event (netperf-rr, udp-rr).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RemoteEvent {
    /// The remote has the VM's response and sends its next request.
    Request { vm: u32 },
    /// The request reaches the VM's NIC, or vhost.
    RequestArrival { vm: u32 },
}

/// What the run's message costs the remote, fixed for the run: its
/// one-way trip, and one copy of it in or out of a socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct RemoteLink {
    pub(super) one_way_ns: u64,
    pub(super) copy_ns: u64,
}

/// The remote's own state: its link, and per VM when it sent its last
/// request.
#[derive(Debug, Default)]
pub(super) struct Remote {
    link: RemoteLink,
    requested_at: SentTimes,
}

impl Remote {
    /// The remote starts over `link` with `vm`'s first request.
    pub(super) fn start(&mut self, vm: usize, link: RemoteLink, fx: &mut Effects) {
        self.link = link;
        fx.schedule(0, RemoteEvent::Request { vm: index_u32(vm) });
    }

    /// The remote has `vm`'s response at `now` and answers at once:
    /// reading the response out of its socket and writing the next
    /// request in (a copy each), which reaches the VM one way later. The
    /// round trip since its previous request, if any.
    pub(super) fn request(&mut self, vm: usize, now: u64, fx: &mut Effects) -> Option<u64> {
        let at = now + 2 * self.link.copy_ns + self.link.one_way_ns;
        fx.schedule(at, RemoteEvent::RequestArrival { vm: index_u32(vm) });
        let previous = self.requested_at.replace(vm, now)?;
        Some(now - previous)
    }

    /// `vm`'s guest sent its response through the VF at `now`: it
    /// reaches the remote one way later.
    pub(super) fn response_sent(&self, vm: usize, now: u64, fx: &mut Effects) {
        let at = now + self.link.one_way_ns;
        fx.schedule(at, RemoteEvent::Request { vm: index_u32(vm) });
    }
}

#[cfg(test)]
mod tests {
    use dirq_stats::f64_of;

    use super::super::fixture::{listed_alone, over_pv, scheduled};
    use super::*;

    /// The mean round trip of a 20 ms ping-pong of `bytes` over PV.
    fn pv_round_trip(bytes: u64) -> f64 {
        let mut m = over_pv(WorkloadKind::NetperfRr, 20_000_000, |group| {
            group.message_bytes = Some(bytes);
        });
        m.run();
        f64_of(m.end) / f64_of(m.counters.requests_done)
    }

    #[test]
    fn a_pv_round_trip_grows_by_its_six_copies_of_the_message() {
        // The remote's read and write, vhost's two, the guest's two.
        let (small, large) = (32, 1_024);
        let m = over_pv(WorkloadKind::NetperfRr, 1, |_| {});
        let copies = f64_of(6 * (m.copy_ns(large) - m.copy_ns(small)));
        let growth = pv_round_trip(large) - pv_round_trip(small);
        assert!(growth > 0.9 * copies, "{growth} ns < {copies} ns");
    }

    #[test]
    fn each_request_after_the_first_closes_a_round_trip() {
        let mut remote = Remote::default();
        let link = RemoteLink {
            one_way_ns: 5_000,
            copy_ns: 100,
        };
        let fx = listed_alone(|fx| remote.start(1, link, fx));
        assert_eq!(fx, [scheduled(0, RemoteEvent::Request { vm: 1 })]);
        let mut round_trip = Some(0);
        let fx = listed_alone(|fx| round_trip = remote.request(1, 0, fx));
        assert_eq!(round_trip, None, "the first request");
        let arrival = |at, vm| scheduled(at, RemoteEvent::RequestArrival { vm });
        assert_eq!(fx, [arrival(5_200, 1)], "two copies and the wire");
        listed_alone(|fx| assert_eq!(remote.request(0, 150, fx), None, "another VM's first"));
        let fx = listed_alone(|fx| remote.response_sent(1, 10_000, fx));
        assert_eq!(fx, [scheduled(15_000, RemoteEvent::Request { vm: 1 })]);
        let fx = listed_alone(|fx| round_trip = remote.request(1, 15_000, fx));
        assert_eq!(round_trip, Some(15_000));
        assert_eq!(fx, [arrival(20_200, 1)]);
    }
}
