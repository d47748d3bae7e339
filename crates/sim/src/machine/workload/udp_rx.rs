//! udp-rx: 128-byte UDP packets arrive at the group's rate on each queue
//! pair, over the group's transport, as a Poisson process or paced at a
//! fixed gap (`arrivals`; the source, `Event::PacketArrival`: the workload
//! schedules each ring's first arrival, each arrival the next); the guest's NAPI handler takes
//! them and only counts them. whileloop is the same receive behind a
//! guest that spins in the background (the DID paper's loop): its figure
//! is the share of the core the loop kept.

use dirq_stats::{f64_of, ratio};

use super::{Ctx, Programs, Traffic, Workload};
use crate::machine::effects::Effects;
use crate::machine::guest::{RX_EACH_HANDLER, SPIN};
use crate::machine::ledger::Counters;
use crate::machine::{index_u32, Event, Ring};
use crate::metrics::{Throughput, ThroughputUnit};
use crate::profile::CostProfile;
use crate::scenario::{Arrivals, RunSpec, RxHandler, Transport, WorkloadKind};

/// The rings a queue pair's packets arrive on over `transport`: VF and/or
/// virtio. Whileloop's receive comes over it too (SR-IOV unless the
/// group says otherwise, as the DID paper's loop ran), so a twin of a
/// virtio run uses virtio.
fn rings(transport: Transport) -> &'static [Ring] {
    match transport {
        Transport::Sriov => &[Ring::Vf],
        Transport::Pv => &[Ring::Virtio],
        Transport::Both => &[Ring::Vf, Ring::Virtio],
    }
}

pub(super) struct UdpRx {
    rate_pps: f64,
    arrivals: Arrivals,
    rx_handler: RxHandler,
    rings: &'static [Ring],
    /// whileloop: the guest spins in the background.
    whileloop: bool,
}

impl UdpRx {
    pub(super) fn new(spec: &RunSpec, _profile: &CostProfile) -> UdpRx {
        UdpRx {
            rate_pps: spec.rate_pps.map_or(0.0, f64_of),
            arrivals: spec.group.arrivals,
            rx_handler: spec.group.rx_handler,
            rings: rings(spec.group.transport),
            whileloop: spec.workload == WorkloadKind::Whileloop,
        }
    }
}

impl Workload for UdpRx {
    fn programs(&self) -> Programs {
        Programs {
            background: self.whileloop.then_some(SPIN),
            device_handler: match self.rx_handler {
                RxHandler::Napi => None,
                RxHandler::PerInterrupt => Some(RX_EACH_HANDLER),
            },
            ..Programs::default()
        }
    }

    fn traffic(&self) -> Traffic {
        Traffic {
            datagrams: true,
            arrivals_per_s: self.rate_pps,
            arrivals: self.arrivals,
            ..Traffic::default()
        }
    }

    /// Each owner's queue pair gets its first packet on each ring.
    fn start(&mut self, _vm: usize, owners: &[usize], ctx: &mut Ctx, fx: &mut Effects) {
        for &owner in owners {
            let pair = index_u32(ctx.topology.pair_of(owner));
            for &ring in self.rings {
                let first = Event::PacketArrival { pair, ring };
                ctx.schedule_arrival(self.arrivals, self.rate_pps, first, fx);
            }
        }
    }

    fn throughput(&self, record: &Counters, seconds: f64) -> Option<Throughput> {
        Some(if self.whileloop {
            Throughput {
                value: ratio(record.spin_ns, record.guest_core_ns.max(1)),
                unit: ThroughputUnit::LoopShare,
            }
        } else {
            Throughput {
                value: f64_of(record.packets_processed) / seconds,
                unit: ThroughputUnit::PacketsPerS,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{spec, Bench};
    use super::*;
    use crate::design::DesignKind;
    use crate::machine::effects::Effect;
    use crate::scenario::RunGroup;

    fn whileloop(transport: Transport) -> (UdpRx, Bench) {
        let mut group = RunGroup::new(WorkloadKind::Whileloop, vec![DesignKind::Vanilla]);
        group.transport = transport;
        group.rates_pps = vec![10_000];
        let bench = Bench::new(&group);
        let profile = CostProfile::did_2015();
        (
            UdpRx::new(&spec(WorkloadKind::Whileloop, group), &profile),
            bench,
        )
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
            let (mut workload, mut bench) = whileloop(transport);
            let first: Vec<Ring> = bench
                .listed(|ctx, fx| workload.start(0, &[0], ctx, fx))
                .into_iter()
                .filter_map(|effect| match effect {
                    Effect::Schedule {
                        event: Event::PacketArrival { ring, .. },
                        ..
                    } => Some(ring),
                    _ => None,
                })
                .collect();
            assert_eq!(first, rings(transport), "{transport:?}");
            assert_eq!(workload.programs().background, Some(SPIN));
            assert_eq!(workload.traffic().arrivals_per_s, 10_000.0);
        }
    }

    #[test]
    fn the_loop_reports_the_share_of_the_core_it_kept() {
        let (workload, _) = whileloop(Transport::Sriov);
        let record = Counters {
            spin_ns: 750,
            guest_core_ns: 1_000,
            ..Counters::default()
        };
        let share = workload.throughput(&record, 1.0).expect("a share");
        assert_eq!(share.unit, ThroughputUnit::LoopShare);
        assert_eq!(share.value, 0.75);
    }
}
