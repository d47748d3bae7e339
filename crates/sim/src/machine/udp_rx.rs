//! udp-rx: 128-byte UDP packets arrive at the group's rate on each queue
//! pair, over the group's transport; the guest's NAPI handler
//! (`guest::RX_HANDLER`, `napi`) takes them. whileloop is the same receive
//! behind a guest that spins in the background (the DID paper's loop).
//! The arrivals are the NIC's (`devices`); the workload keeps no state of
//! its own.

use super::*;

/// The rings a queue pair's packets arrive on over `transport`: VF and/or
/// virtio. Whileloop's receive comes over it too (SR-IOV unless the
/// group says otherwise, as the DID paper's loop ran), so a twin of a
/// virtio run uses virtio.
pub(super) fn rings(transport: Transport) -> &'static [Ring] {
    match transport {
        Transport::Sriov => &[Ring::Vf],
        Transport::Pv => &[Ring::Virtio],
        Transport::Both => &[Ring::Vf, Ring::Virtio],
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{listed, shaped};
    use super::*;
    use crate::design::DesignKind;
    use crate::scenario::{NicCoalescing, RunGroup};

    /// The queues whose first packets a whileloop over `transport` schedules.
    fn first_arrivals(transport: Transport) -> Vec<Ring> {
        let mut group = RunGroup::new(WorkloadKind::Whileloop, vec![DesignKind::Vanilla]);
        group.transport = transport;
        group.rates_pps = vec![10_000];
        let mut machine = shaped(RunSpec {
            design: DesignKind::Vanilla,
            workload: WorkloadKind::Whileloop,
            rate_pps: Some(10_000),
            group,
            nic: NicCoalescing::FITTED,
            duration_ns: 1_000_000,
            offered_per_s: None,
        });
        listed(&mut machine, |m, fx| m.start_workload(0, fx))
            .into_iter()
            .filter_map(|effect| match effect {
                Effect::Schedule {
                    event: Event::PacketArrival { kind, .. },
                    ..
                } => Some(kind),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn each_transport_names_its_rings() {
        assert_eq!(rings(Transport::Sriov), [Ring::Vf]);
        assert_eq!(rings(Transport::Pv), [Ring::Virtio]);
        assert_eq!(rings(Transport::Both), [Ring::Vf, Ring::Virtio]);
    }

    #[test]
    fn a_whileloops_background_receive_comes_over_its_groups_transport() {
        for transport in [Transport::Sriov, Transport::Pv, Transport::Both] {
            assert_eq!(first_arrivals(transport), rings(transport), "{transport:?}");
        }
    }
}
