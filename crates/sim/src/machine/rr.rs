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

/// The remote's own state: per VM, when it sent its last request.
#[derive(Debug, Default)]
pub(super) struct Remote {
    requested_at: SentTimes,
}

impl Remote {
    /// The remote sends `vm` a request at `now`: the round trip since its
    /// previous one, if any.
    fn requested(&mut self, vm: usize, now: u64) -> Option<u64> {
        let previous = self.requested_at.replace(vm, now)?;
        Some(now - previous)
    }
}

impl Machine {
    /// The remote starts with `vm`'s first request.
    pub(super) fn start_remote(&mut self, vm: usize, fx: &mut Effects) {
        fx.schedule(0, RemoteEvent::Request { vm: index_u32(vm) });
    }

    pub(super) fn remote_event(&mut self, event: RemoteEvent, fx: &mut Effects) {
        let vm = match event {
            RemoteEvent::Request { vm } => vm as usize,
            RemoteEvent::RequestArrival { vm } => return self.request_arrives(vm as usize, fx),
        };
        // The remote answers each response at once: the time since
        // its previous request is one full round trip.
        if let Some(round_trip) = self.remote.requested(vm, self.now) {
            let latency = self.spec.workload.reported_latency_ns(round_trip);
            self.counters.latencies.push(latency);
            self.counters.requests_done += 1;
        }
        // ... reading the response out of its socket and writing the
        // next request in (a copy each), which reaches the VM one way
        // later.
        let bytes = self.message_bytes();
        let at = self.now + 2 * self.copy_ns(bytes) + self.one_way_ns(bytes);
        fx.schedule(at, RemoteEvent::RequestArrival { vm: index_u32(vm) });
    }

    /// netperf-rr: the guest answered; the response goes out and the remote
    /// sends the next request.
    pub(super) fn netperf_respond(&mut self, vcpu: usize, kind: RxQueueKind, fx: &mut Effects) {
        let vm = self.vcpus[vcpu].vm;
        match kind {
            RxQueueKind::Virtio => {
                self.virtio_kick(vcpu, fx);
                self.backend_start(self.vcpus[vcpu].queues, BackendJob::TxPacket, fx);
            }
            RxQueueKind::Vf => {
                // The VF's doorbell is a passed-through MMIO write.
                fx.schedule(
                    self.now + self.one_way_ns(self.message_bytes()),
                    RemoteEvent::Request { vm: index_u32(vm) },
                );
                self.vf_sent(self.vcpus[vcpu].queues, self.now, self.message_bytes(), fx);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use dirq_stats::f64_of;

    use super::super::fixture::over_pv;
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
        assert_eq!(remote.requested(1, 100), None, "the first request");
        assert_eq!(remote.requested(0, 150), None, "another VM's first");
        assert_eq!(remote.requested(1, 400), Some(300));
        assert_eq!(remote.requested(1, 450), Some(50));
    }
}
