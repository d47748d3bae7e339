//! udp-rx: 128-byte UDP packets arrive at the group's rate on each queue
//! pair, over the group's transport, as a Poisson process; the guest's
//! NAPI handler takes them and only counts them. whileloop is the same
//! receive behind a guest that spins in the background (the DID paper's
//! loop): its figure is the share of the core the loop kept.

use dirq_stats::{f64_of, ratio};

use super::{Ctx, Programs, Traffic, Workload, WorkloadEvent};
use crate::machine::effects::{Effect, Effects};
use crate::machine::guest::SPIN;
use crate::machine::state::Counters;
use crate::machine::{index_u32, Ring};
use crate::metrics::{Throughput, ThroughputUnit};
use crate::profile::CostProfile;
use crate::scenario::{RunSpec, Transport, WorkloadKind};

/// udp-rx's event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum UdpEvent {
    /// A packet for `pair`'s `ring` reaches the VM's device.
    Arrival { pair: u32, ring: Ring },
}

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
    rings: &'static [Ring],
    /// whileloop: the guest spins in the background.
    whileloop: bool,
}

impl UdpRx {
    pub(super) fn new(spec: &RunSpec, _profile: &CostProfile) -> UdpRx {
        UdpRx {
            rate_pps: spec.rate_pps.map_or(0.0, f64_of),
            rings: rings(spec.group.transport),
            whileloop: spec.workload == WorkloadKind::Whileloop,
        }
    }

    fn schedule_arrival(&self, pair: usize, ring: Ring, ctx: &mut Ctx, fx: &mut Effects) {
        let pair = index_u32(pair);
        ctx.schedule_poisson(self.rate_pps, UdpEvent::Arrival { pair, ring }, fx);
    }
}

impl Workload for UdpRx {
    fn programs(&self) -> Programs {
        Programs {
            background: self.whileloop.then_some(SPIN),
            ..Programs::default()
        }
    }

    fn traffic(&self) -> Traffic {
        Traffic {
            fitted_coalescing: true,
            ..Traffic::default()
        }
    }

    /// Each owner's queue pair gets its first packet on each ring.
    fn start(&mut self, _vm: usize, owners: &[usize], ctx: &mut Ctx, fx: &mut Effects) {
        for &owner in owners {
            let pair = ctx.topology.pair_of(owner);
            for &ring in self.rings {
                self.schedule_arrival(pair, ring, ctx, fx);
            }
        }
    }

    /// A packet arrives; the next one on its ring is drawn.
    fn on_event(&mut self, event: WorkloadEvent, ctx: &mut Ctx, fx: &mut Effects) {
        let WorkloadEvent::Udp(UdpEvent::Arrival { pair, ring }) = event else {
            return;
        };
        let pair = pair as usize;
        self.schedule_arrival(pair, ring, ctx, fx);
        fx.push(Effect::RxPacket { pair, ring });
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
    use crate::machine::fixture::scheduled;
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
                        event:
                            crate::machine::Event::Workload(WorkloadEvent::Udp(UdpEvent::Arrival {
                                ring,
                                ..
                            })),
                        ..
                    } => Some(ring),
                    _ => None,
                })
                .collect();
            assert_eq!(first, rings(transport), "{transport:?}");
            assert_eq!(workload.programs().background, Some(SPIN));
        }
    }

    #[test]
    fn an_arrival_draws_the_next_and_hands_the_packet_to_the_device() {
        let (mut workload, mut bench) = whileloop(Transport::Sriov);
        bench.now = 5_000;
        let arrival = UdpEvent::Arrival {
            pair: 0,
            ring: Ring::Vf,
        };
        let fx = bench.listed(|ctx, fx| workload.on_event(WorkloadEvent::Udp(arrival), ctx, fx));
        let [Effect::Schedule { at, event }, packet] = fx.as_slice() else {
            panic!("the next arrival and the packet: {fx:?}");
        };
        assert!(*at > 5_000);
        assert_eq!(
            scheduled(*at, arrival),
            Effect::Schedule {
                at: *at,
                event: *event
            }
        );
        assert_eq!(
            *packet,
            Effect::RxPacket {
                pair: 0,
                ring: Ring::Vf
            }
        );
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
