//! udp-rx: 128-byte UDP packets arrive at the group's rate on each queue
//! pair, over the group's transport; the guest's NAPI handler
//! (`guest::RX_HANDLER`, `napi`) takes them. whileloop is the same receive
//! behind a guest that spins in the background (the DID paper's loop).
//! The arrivals are the NIC's (`devices`); the workload keeps no state of
//! its own.

use super::*;

impl Machine {
    /// The first packet on each owner's queue pair: VF and/or virtio as the
    /// group's transport says. Whileloop's receive comes over it too
    /// (SR-IOV unless the group says otherwise, as the DID paper's loop
    /// ran), so a twin of a virtio run uses virtio.
    pub(super) fn start_udp_rx(&mut self, _vm: usize, owners: &[usize], fx: &mut Effects) {
        let transport = self.spec.group.transport;
        for &owner in owners {
            let queues = self.vcpus[owner].queues;
            if matches!(transport, Transport::Sriov | Transport::Both) {
                self.schedule_packet(queues, RxQueueKind::Vf, fx);
            }
            if matches!(transport, Transport::Pv | Transport::Both) {
                self.schedule_packet(queues, RxQueueKind::Virtio, fx);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{listed, shaped};
    use super::*;
    use crate::policy::DesignKind;
    use crate::scenario::{NicCoalescing, RunGroup};

    /// The queues whose first packets a whileloop over `transport` schedules.
    fn first_arrivals(transport: Transport) -> Vec<RxQueueKind> {
        let mut group = RunGroup::new(WorkloadKind::Whileloop, vec![DesignKind::Vanilla]);
        group.transport = transport;
        group.rates_pps = vec![10_000];
        let mut machine = shaped(RunSpec {
            policy: DesignKind::Vanilla,
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
    fn a_whileloops_background_receive_comes_over_its_groups_transport() {
        assert_eq!(first_arrivals(Transport::Pv), [RxQueueKind::Virtio]);
        assert_eq!(first_arrivals(Transport::Sriov), [RxQueueKind::Vf]);
        assert_eq!(
            first_arrivals(Transport::Both),
            [RxQueueKind::Vf, RxQueueKind::Virtio]
        );
    }
}
