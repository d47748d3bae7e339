//! The platform: the physical machine under the hypervisor and its
//! guests. It owns every core's LAPIC, the IOMMU and its interrupt
//! remapping table, the SR-IOV NIC's queue pairs (`nic`, with their
//! throttles, `itr`, and transmit event queues, `tx_completion`), each
//! VM's vhost-net worker with the host NIC its PV peers' frames come
//! through (`vhost`), and its virtio-blk back end in QEMU (`virtio_blk`).
//!
//! Its methods take the time, the run's [`Ledger`] (every interrupt
//! raised or merged is the checker's) and the effect list: what the
//! hardware cannot do itself (a post into a vCPU's descriptor, a
//! virtual signal, an exit) it lists for the hypervisor. The hypervisor
//! drives the LAPICs and the IOMMU's table through [`Platform::lapic`]
//! and [`Platform::iommu`], as a host kernel programs its hardware.

mod itr;
mod nic;
mod tx_completion;
mod vhost;
mod virtio_blk;

use dirq_arch::bus;
use dirq_arch::interrupt::{DeliveryMode, TriggerMode};
use dirq_arch::iommu::{InterruptRemappingTable, Remapped};
use dirq_arch::lapic::{AcceptOutcome, Lapic};
use dirq_arch::msi::{MsiMessage, RemappableMsi};

use super::effects::{Effect, Effects};
use super::ledger::Ledger;
use super::network::Network;
use super::topology::Topology;
use super::workload::Traffic;
use super::{index_u32, NmiMessage};
use crate::design::mechanism::posting::PostSource;
use crate::profile::CostProfile;
use crate::scenario::{NicCoalescing, RunSpec};

pub(super) use itr::{ItrMode, Throttle};
pub(super) use nic::{Coalescing, QueuePair, Ring, RX_RING_SIZE};
pub(super) use tx_completion::VfVector;
pub(super) use vhost::{BackendJob, VIRTIO_NET_NAPI_WEIGHT};

/// A VM's VF's PCI requester ID, which interrupt remapping validates.
pub(super) fn vf_requester(vm: usize) -> u16 {
    0x0100 + u16::try_from(vm).expect("at most MAX_VMS VMs")
}

pub(super) struct Platform {
    lapics: Vec<Lapic>,
    iommu: InterruptRemappingTable,
    pairs: Vec<QueuePair>,
    /// Per VM, its vhost-net worker and the host NIC queue its PV peers'
    /// frames arrive on.
    vhosts: Vec<vhost::Vhost>,
    nic: NicCoalescing,
    traffic: Traffic,
    net: Network,
    vhost_costs: vhost::Costs,
    blk_costs: virtio_blk::Costs,
}

impl Platform {
    /// The platform of `spec`'s host: `lapics` one per core, a queue pair
    /// per owner of `topology`, the IOMMU's table with an entry per VF
    /// vector.
    pub(super) fn new(
        spec: &RunSpec,
        profile: &CostProfile,
        topology: &Topology,
        traffic: Traffic,
        lapics: Vec<Lapic>,
    ) -> Platform {
        let itr = itr::ItrMode::of(spec.group.itr_us, profile);
        let pairs: Vec<QueuePair> = (0..topology.pair_count())
            .map(|pair| QueuePair::new(profile, topology, traffic, itr, pair))
            .collect();
        Platform {
            lapics,
            // An entry per VF event queue (`VfVector::irte_handle`).
            iommu: InterruptRemappingTable::new(index_u32(
                pairs.len() * crate::scenario::VF_MSIX_VECTORS as usize,
            )),
            pairs,
            vhosts: (0..topology.vm_count())
                .map(|vm| vhost::Vhost::new(itr, topology.first_pair(vm)))
                .collect(),
            nic: spec.nic,
            traffic,
            net: Network::new(profile, &spec.group, traffic.pv_peer_on_wire),
            vhost_costs: vhost::Costs::of(profile),
            blk_costs: virtio_blk::Costs::of(profile),
        }
    }

    /// `core`'s LAPIC.
    pub(super) fn lapic(&self, core: usize) -> &Lapic {
        &self.lapics[core]
    }

    /// `core`'s LAPIC, for the hypervisor that drives it.
    pub(super) fn lapic_mut(&mut self, core: usize) -> &mut Lapic {
        &mut self.lapics[core]
    }

    /// `core`'s LAPIC and the IOMMU's table, for the host's work on both.
    pub(super) fn lapic_and_iommu(
        &mut self,
        core: usize,
    ) -> (&mut Lapic, &mut InterruptRemappingTable) {
        (&mut self.lapics[core], &mut self.iommu)
    }

    /// The IOMMU's interrupt remapping table, for the hypervisor that
    /// writes the IRTEs.
    pub(super) fn iommu(&mut self) -> &mut InterruptRemappingTable {
        &mut self.iommu
    }

    /// Requests the IOMMU blocked (a bad requester or IRTE).
    pub(super) fn iommu_blocked(&self) -> u64 {
        self.iommu.blocked()
    }

    /// Whether a queue pair has a transmit event queue (be2net's).
    pub(super) fn has_tx_eq(&self, pair: usize) -> bool {
        self.pairs[pair].tx_eq.is_some()
    }

    /// A fixed interrupt arrives at `core`'s LAPIC: whether it merged
    /// with one already pending (NMIs go through the hypervisor's
    /// mailbox).
    pub(super) fn deliver_physical(&mut self, core: usize, vector: u8) -> bool {
        self.lapics[core].accept(vector, TriggerMode::Edge) == AcceptOutcome::Coalesced
    }

    /// The VF writes `queue`'s MSI-X message for queue pair `pair`; the
    /// IOMMU remaps it: fixed interrupts and NMIs to the cores the bus
    /// routes them to, or a post into the named vCPU's descriptor.
    pub(super) fn fire_vf_msi(
        &mut self,
        pair: usize,
        queue: VfVector,
        now: u64,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let handle = queue.irte_handle(pair, self.pairs.len());
        let message = MsiMessage::compose_remappable(&RemappableMsi {
            handle: u16::try_from(handle).expect("MAX_QUEUES keeps handles in 16 bits"),
            subhandle: None,
        });
        let vm = self.pairs[pair].vm;
        let Ok(remapped) = self.iommu.remap(&message, vf_requester(vm)) else {
            // Blocked requests are counted by the IOMMU model.
            return;
        };
        ledger.raise(vm, queue.guest_vector(), now);
        match remapped {
            Remapped::Interrupt(interrupt) => {
                // An IRTE names no shorthand, so routing cannot fail; a
                // destination no core answers to loses the interrupt,
                // which the checker reports.
                let targets = bus::route(&interrupt, &self.lapics).unwrap_or(bus::Targets::None);
                for core in targets.iter() {
                    fx.push(if interrupt.delivery_mode == DeliveryMode::Nmi {
                        Effect::Nmi {
                            core,
                            message: NmiMessage::AssignedInterrupt {
                                vcpu: index_u32(self.pairs[pair].owner),
                                vector: queue.guest_vector(),
                            },
                        }
                    } else {
                        Effect::DeliverPhysical {
                            core,
                            vector: interrupt.vector,
                        }
                    });
                }
            }
            Remapped::Post { descriptor, vector } => fx.push(Effect::Post {
                vcpu: descriptor as usize,
                vector,
                source: PostSource::Iommu,
            }),
        }
    }

    /// Frames dropped by a full ring.
    pub(super) fn dropped_packets(&self) -> u64 {
        self.pairs
            .iter()
            .map(|pair| pair.vf.dropped + pair.virtio.dropped)
            .sum()
    }
}
