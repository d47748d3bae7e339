//! Devices: the SR-IOV VF with interrupt coalescing, the virtio backend,
//! the block device and the guest's IPI sender.

use super::itr::Throttle;
use super::napi::Napi;
use super::tx_completion::rx_disarms_on_interrupt;
use super::*;
use crate::scenario::NicCoalescing;

/// The vLAPIC of the vCPU at `sender` on a VM's APIC bus takes the
/// guest's write of `icr`, which puts the IPI on the bus; `bus::route`
/// picks the bus positions it reaches (every destination mode, shorthand
/// and lowest-priority arbitration), as for the real guest. A write the
/// LAPIC refuses sends nothing.
fn route_icr_write(bus: &mut [Vcpu], sender: usize, icr: u64, now: u64) -> Vec<usize> {
    let Some(sender) = bus.get_mut(sender) else {
        return Vec::new();
    };
    let sent = sender.hw.vlapic.write_msr(msrs::ICR, icr, &At(now));
    let Ok(Some(ApicBusMessage::Ipi(interrupt))) = sent else {
        return Vec::new();
    };
    match bus::route(&interrupt, bus) {
        Ok(targets) => targets.iter().collect(),
        Err(_) => Vec::new(),
    }
}

/// Descriptors per receive ring; packets beyond are dropped.
pub(super) const RX_RING_SIZE: u32 = 1024;

/// A VM's VF's PCI requester ID, which interrupt remapping validates.
pub(super) fn vf_requester(vm: usize) -> u16 {
    0x0100 + u16::try_from(vm).expect("at most MAX_VMS VMs")
}

/// A queue pair's receive ring: the VF's, or virtio's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Ring {
    #[default]
    Vf,
    Virtio,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BackendJob {
    /// A frame for the guest's receive ring.
    RxPacket,
    /// A buffer the guest sends (a response, an answer, an ACK): the
    /// workload's peer has it once vhost passed it on.
    Tx,
    BlockRead,
}

#[derive(Clone, Default)]
pub(super) struct RxRing {
    pub(super) ring: u32,
    pub(super) since_interrupt: u32,
    pub(super) first_unsignalled: Option<u64>,
    pub(super) masked: bool,
    pub(super) signalled: bool,
    pub(super) dropped: u64,
    pub(super) napi: Napi,
}

/// A vCPU's receive queues: an SR-IOV VF queue with its own MSI-X vector
/// and IRTE (the pair's index is the IRTE handle), and a virtio queue.
pub(super) struct QueuePair {
    pub(super) owner: usize,
    pub(super) vf: RxRing,
    pub(super) virtio: RxRing,
    /// The VF MSI-X vector's host vector on the owner's home core.
    pub(super) vf_host_vector: u8,
    /// The VF's interrupt throttling (all but the UDP receive workloads).
    pub(super) throttle: Throttle,
    /// The VF's transmit event queue, if its driver gives it one.
    pub(super) tx_eq: Option<TxEq>,
}

impl QueuePair {
    pub(super) fn rx(&mut self, kind: Ring) -> &mut RxRing {
        match kind {
            Ring::Vf => &mut self.vf,
            Ring::Virtio => &mut self.virtio,
        }
    }

    pub(super) fn ring(&self, kind: Ring) -> &RxRing {
        match kind {
            Ring::Vf => &self.vf,
            Ring::Virtio => &self.virtio,
        }
    }
}

/// What the VF's coalescing logic asks for after a packet or a timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Coalescing {
    /// Nothing to signal, or the timeout already runs.
    Wait,
    /// Arm the timeout to fire at this time.
    ArmTimeout(u64),
    /// Write the MSI-X message (and drop a pending timeout).
    Fire,
}

impl RxRing {
    /// A packet lands in the ring at `now`: false if the ring is full and
    /// the packet is dropped.
    pub(super) fn receive(&mut self, now: u64) -> bool {
        if self.ring >= RX_RING_SIZE {
            self.dropped += 1;
            return false;
        }
        self.ring += 1;
        self.since_interrupt += 1;
        self.first_unsignalled.get_or_insert(now);
        true
    }

    /// The 82599-style coalescing logic: fire at the packet threshold, or
    /// when the timeout armed at the first unsignalled packet runs out,
    /// and only while the driver has the interrupt unmasked.
    pub(super) fn coalesce(
        &mut self,
        now: u64,
        nic: NicCoalescing,
        timed_out: bool,
        timeout_armed: bool,
    ) -> Coalescing {
        if self.masked || self.ring == 0 || self.since_interrupt == 0 {
            return Coalescing::Wait;
        }
        let threshold = self.since_interrupt >= nic.packets_per_interrupt;
        if !threshold && !timed_out {
            if timeout_armed {
                return Coalescing::Wait;
            }
            let at = self.first_unsignalled.unwrap_or(now) + nic.interrupt_timeout_ns;
            return Coalescing::ArmTimeout(at.max(now));
        }
        self.since_interrupt = 0;
        self.first_unsignalled = None;
        Coalescing::Fire
    }

    /// The driver re-enables the queue's interrupt after its poll.
    pub(super) fn unmask(&mut self) {
        self.masked = false;
        self.signalled = false;
        self.since_interrupt = 0;
        self.first_unsignalled = None;
    }
}

impl Machine {
    /// The VM a queue pair belongs to.
    pub(super) fn vm_of_pair(&self, pair: usize) -> usize {
        self.topology.vm_of_pair(pair)
    }

    /// The queue pair of a VM's vCPU 0.
    pub(super) fn first_pair(&self, vm: usize) -> usize {
        self.topology.first_pair(vm)
    }

    pub(super) fn rx_queue_of(&self, vector: Option<u8>) -> Ring {
        match vector {
            Some(GUEST_VIRTIO_VECTOR) => Ring::Virtio,
            _ => Ring::Vf,
        }
    }

    /// A frame from the workload's peer reaches `pair`'s `ring`: the VF's
    /// ring, or virtio's through vhost, and through the host's NIC first
    /// when the peer is on the wire.
    pub(super) fn packet_arrival(&mut self, pair: usize, kind: Ring, fx: &mut Effects) {
        match kind {
            Ring::Vf => self.rx_packet(pair, Ring::Vf, fx),
            Ring::Virtio if self.traffic.pv_peer_on_wire => {
                self.host_nic_receive(self.vm_of_pair(pair), fx)
            }
            Ring::Virtio => self.backend_start(pair, BackendJob::RxPacket, fx),
        }
    }

    /// `frames` frames land in `pair`'s VF ring at once; the VF's
    /// coalescing decides once.
    pub(super) fn rx_burst(&mut self, pair: usize, frames: u32, fx: &mut Effects) {
        let bytes = self.traffic.frame_bytes;
        for _ in 0..frames {
            if self.pairs[pair].vf.receive(self.now) {
                self.pairs[pair].throttle.received(self.now, bytes);
            }
        }
        self.maybe_fire_vf(pair, false, fx);
    }

    /// A packet lands in a receive ring.
    pub(super) fn rx_packet(&mut self, pair: usize, kind: Ring, fx: &mut Effects) {
        if !self.pairs[pair].rx(kind).receive(self.now) {
            return;
        }
        match kind {
            Ring::Vf => {
                let bytes = self.traffic.frame_bytes;
                self.pairs[pair].throttle.received(self.now, bytes);
                self.maybe_fire_vf(pair, false, fx);
            }
            Ring::Virtio => self.signal_virtio(pair, fx),
        }
    }

    /// vhost signals the guest for a virtio queue it has not yet signalled
    /// and the driver has unmasked.
    pub(super) fn signal_virtio(&mut self, pair: usize, fx: &mut Effects) {
        let rx = &mut self.pairs[pair].virtio;
        if !rx.masked && !rx.signalled {
            rx.signalled = true;
            self.raise(self.vm_of_pair(pair), GUEST_VIRTIO_VECTOR);
            fx.push(Effect::SignalVirtual {
                vcpu: self.pairs[pair].owner,
                vector: GUEST_VIRTIO_VECTOR,
            });
        }
    }

    /// The VF queue's coalescing decision, carried out.
    pub(super) fn maybe_fire_vf(&mut self, pair: usize, timed_out: bool, fx: &mut Effects) {
        let timeout = Event::CoalesceTimeout {
            pair: index_u32(pair),
        };
        let armed = fx.is_pending(timeout);
        let now = self.now;
        let decision = if self.traffic.fitted_coalescing {
            self.pairs[pair]
                .vf
                .coalesce(now, self.spec.nic, timed_out, armed)
        } else {
            let queue_pair = &mut self.pairs[pair];
            let rx = &queue_pair.vf;
            if rx.masked || rx.ring == 0 || rx.since_interrupt == 0 {
                Coalescing::Wait
            } else {
                queue_pair.throttle.decide(now, armed)
            }
        };
        match decision {
            Coalescing::Wait => {}
            Coalescing::ArmTimeout(at) => fx.schedule(at, timeout),
            Coalescing::Fire => self.fire_vf_now(pair, fx),
        }
    }

    /// The VF interrupts now: the waiting packets are signalled, the
    /// throttle restarts, a pending timeout is dropped; be2net's
    /// completion queue disarms until NAPI completes
    /// ([`rx_disarms_on_interrupt`]).
    pub(super) fn fire_vf_now(&mut self, pair: usize, fx: &mut Effects) {
        let now = self.now;
        let disarms = rx_disarms_on_interrupt(self.profile.network.adaptive_coalescing);
        let queue_pair = &mut self.pairs[pair];
        queue_pair.vf.since_interrupt = 0;
        queue_pair.vf.first_unsignalled = None;
        queue_pair.vf.masked |= disarms;
        queue_pair.throttle.fired(now);
        fx.cancel(Event::CoalesceTimeout {
            pair: index_u32(pair),
        });
        self.fire_vf_msi(pair, VfVector::Rx, fx);
    }

    /// The VF writes `queue`'s MSI-X message; the IOMMU remaps it.
    pub(super) fn fire_vf_msi(&mut self, pair: usize, queue: VfVector, fx: &mut Effects) {
        let handle = queue.irte_handle(pair, self.pairs.len());
        let message = MsiMessage::compose_remappable(&RemappableMsi {
            handle: u16::try_from(handle).expect("MAX_QUEUES keeps handles in 16 bits"),
            subhandle: None,
        });
        let vm = self.vm_of_pair(pair);
        let Ok(remapped) = self.iommu.remap(&message, vf_requester(vm)) else {
            // Blocked requests are counted by the IOMMU model.
            return;
        };
        self.raise(vm, queue.guest_vector());
        match remapped {
            Remapped::Interrupt(interrupt) => {
                // An IRTE names no shorthand, so routing cannot fail; a
                // destination no core answers to loses the interrupt,
                // which the checker reports.
                let targets = bus::route(&interrupt, &self.cores).unwrap_or(bus::Targets::None);
                for core in targets.iter() {
                    fx.push(if interrupt.delivery_mode == DeliveryMode::Nmi {
                        Effect::Nmi {
                            core,
                            message: NmiMessage::AssignedInterrupt {
                                pair: index_u32(pair),
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
            Remapped::Post { descriptor, vector } => {
                self.hardware_post(descriptor as usize, vector, PostSource::Iommu, fx);
            }
        }
    }

    /// A buffer for the VM's vhost worker (`virtio`): taken in a pass
    /// over its queue.
    pub(super) fn backend_start(&mut self, pair: usize, job: BackendJob, fx: &mut Effects) {
        self.vhost_add(pair, job, fx);
    }

    /// vhost's work for one buffer in a pass: its own, the copy, a block
    /// read's ramdisk, and for a guest TX buffer the host's bridge, which
    /// `tun_get_user`'s `netif_rx_ni` runs on vhost's thread.
    pub(super) fn backend_service_ns(&self, job: BackendJob) -> u64 {
        let host = &self.profile.host_ns;
        let own = host.virtio_backend_per_request + self.net.copy_ns(self.backend_bytes(job));
        match job {
            BackendJob::BlockRead => own + host.ramdisk_read,
            _ if job.is_guest_tx() => own + self.profile.network.bridge_one_way,
            _ => own,
        }
    }

    /// The payload vhost copies for a buffer: into the guest's receive
    /// buffer (`handle_rx`'s recvmsg), out of its transmit buffer
    /// (`handle_tx`'s sendmsg; Linux 3.6 leaves zero-copy transmit off).
    pub(super) fn backend_bytes(&self, job: BackendJob) -> u64 {
        match job {
            BackendJob::RxPacket => self.traffic.frame_bytes,
            BackendJob::Tx => self.traffic.tx_bytes,
            BackendJob::BlockRead => 0,
        }
    }

    /// vhost used a buffer: its effect (a TX frame's host-side work, run
    /// on vhost's thread, may queue more work), then the worker's pass
    /// goes on.
    pub(super) fn backend_done(&mut self, pair: usize, job: BackendJob, fx: &mut Effects) {
        match job {
            BackendJob::RxPacket => self.rx_packet(pair, Ring::Virtio, fx),
            BackendJob::Tx => self.with_workload(|workload, ctx| workload.sent(pair, ctx, fx)),
            BackendJob::BlockRead => {
                self.raise(self.vm_of_pair(pair), GUEST_VIRTIO_VECTOR);
                fx.push(Effect::SignalVirtual {
                    vcpu: self.pairs[pair].owner,
                    vector: GUEST_VIRTIO_VECTOR,
                });
            }
        }
        self.vhost_take_next(self.vm_of_pair(pair), self.now, fx);
    }

    /// A virtio notify: a port write that exits under every hypervisor,
    /// served in the kernel by an ioeventfd.
    pub(super) fn io_notify(&self, vcpu: usize, fx: &mut Effects) {
        if self.vcpus[vcpu].hw.vmcs.io_exits() {
            let cost = self.profile.virtio_notify_cost();
            fx.exit(vcpu, ExitReason::IoInstruction, cost);
        }
    }

    /// The guest's write of `icr` on `vcpu`'s vLAPIC (`Effect::WriteIcr`):
    /// its VM's APIC bus routes the IPI, the workload learns which vCPUs
    /// it reached, and the design's IPI sender sends it.
    pub(super) fn write_icr(&mut self, vcpu: usize, icr: u64, fx: &mut Effects) {
        // A VM's vCPUs are numbered consecutively, in APIC-ID order.
        let vm = self.topology.vcpus_of(self.topology.vm_of(vcpu));
        let first = vm.start;
        let targets: Vec<usize> = route_icr_write(&mut self.vcpus[vm], vcpu - first, icr, self.now)
            .into_iter()
            .map(|position| first + position)
            .collect();
        self.with_workload(|workload, ctx| workload.on_ipi_sent(vcpu, &targets, ctx));
        self.send_guest_ipis(vcpu, icr, &targets, fx);
    }

    /// The IPIs of `vcpu`'s ICR write `icr` leave for `targets`. The
    /// design's IPI sender decides whether the write exits and whether the
    /// CPU posted the vector itself (IPIv, AVIC). A write that exits has
    /// the host kick the targets one after another within that exit
    /// (`kvm_apic_send_ipi` -> `kvm_vcpu_kick` per target; AVIC's
    /// AVIC_INCOMPLETE_IPI likewise): each IPI leaves once the kicks
    /// before it are done.
    pub(super) fn send_guest_ipis(
        &mut self,
        vcpu: usize,
        icr: u64,
        targets: &[usize],
        fx: &mut Effects,
    ) {
        let from = self.vcpus[vcpu].home_core;
        let every_target_running = targets.iter().all(|&target| self.is_running(target));
        let send =
            self.design
                .ipi_sender
                .send(&self.vcpus[vcpu].hw.vmcs, icr, every_target_running);
        let trapped = send.exits;
        let mut sent_at = Vec::with_capacity(targets.len());
        let mut send_at = self.now;
        if trapped {
            send_at += self.profile.exit_service_ns.icr_write;
        }
        for &target in targets {
            if trapped {
                send_at += self.kick_ns(from, target);
            }
            sent_at.push(send_at);
        }
        if trapped {
            let kicks = send_at - self.now - self.profile.exit_service_ns.icr_write;
            let cost = self.profile.exit_service_ns.icr_write
                + self.profile.host_ns.exit_entry_transition
                + kicks;
            fx.exit(vcpu, ExitReason::MsrWrite, cost);
        }
        for (&target, at) in targets.iter().zip(sent_at) {
            let to = self.vcpus[target].home_core;
            let target = index_u32(target);
            let event = if send.posted_by_cpu {
                Event::PostedIpi { vcpu: target }
            } else {
                Event::GuestIpi { vcpu: target }
            };
            fx.schedule(at + self.topology.interconnect_ns(from, to), event);
        }
    }

    /// The sender's time in `kvm_vcpu_kick` for `target`: the IPI's send,
    /// and for a target whose thread sleeps in `schedule()` (halted, not
    /// halt-polling) its wake-up from the sender (`try_to_wake_up`), which
    /// takes the target core's runqueue lock: one cache line from that
    /// core, over the interconnect (same-node or cross-node).
    fn kick_ns(&self, from: usize, target: usize) -> u64 {
        let core = self.vcpus[target].home_core;
        let asleep = self.vcpus[target].state == VcpuState::Halted
            && self.cores[core].mode == Mode::Idle
            && self.now >= self.cores[core].halt_poll_until;
        let wake = if asleep {
            self.topology.interconnect_ns(from, core)
        } else {
            0
        };
        self.profile.host_ns.send_ipi + wake
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{listed, one_vm, running, scheduled, shaped, shaped_with, single};
    use super::*;
    use crate::design::DesignKind;
    use crate::scenario::{HostShape, IpiMode, NicCoalescing, QueueOwners, RunGroup};
    use dirq_arch::interrupt::Destination;
    use dirq_arch::lapic::x2apic_icr;

    #[test]
    fn a_packet_below_the_threshold_arms_the_coalescing_timeout() {
        let mut m = single(DesignKind::Vanilla);
        running(&mut m, 0);
        m.now = 1_000;
        let fx = listed(&mut m, |m, fx| m.rx_packet(0, Ring::Vf, fx));
        let at = 1_000 + m.spec.nic.interrupt_timeout_ns;
        assert_eq!(fx, [scheduled(at, Event::CoalesceTimeout { pair: 0 })]);
        assert_eq!(m.pairs[0].vf.ring, 1);
    }

    #[test]
    fn the_threshold_packet_fires_the_msi_through_the_irte() {
        for (design, vector) in [
            (DesignKind::Vanilla, None),
            (DesignKind::Did, Some(GUEST_VF_VECTOR)),
        ] {
            let mut m = single(design);
            running(&mut m, 0);
            let vector = vector.unwrap_or(m.pairs[0].vf_host_vector);
            let threshold = m.spec.nic.packets_per_interrupt;
            m.pairs[0].vf.ring = threshold - 1;
            m.pairs[0].vf.since_interrupt = threshold - 1;
            let fx = listed(&mut m, |m, fx| m.rx_packet(0, Ring::Vf, fx));
            let timeout = Event::CoalesceTimeout { pair: 0 };
            assert_eq!(
                fx,
                [
                    Effect::Cancel(timeout),
                    Effect::DeliverPhysical { core: 1, vector }
                ],
                "{design}"
            );
            assert_eq!(m.pairs[0].vf.since_interrupt, 0);
        }
    }

    #[test]
    fn dids_vf_interrupt_for_a_descheduled_vm_is_an_nmi_to_its_home_core() {
        let mut m = single(DesignKind::Did);
        m.cores[1].current = None;
        m.retarget_vf(0);
        let fx = listed(&mut m, |m, fx| m.fire_vf_msi(0, VfVector::Rx, fx));
        let message = NmiMessage::AssignedInterrupt {
            pair: 0,
            vector: GUEST_VF_VECTOR,
        };
        assert_eq!(fx, [Effect::Nmi { core: 1, message }]);
    }

    const NIC: NicCoalescing = NicCoalescing {
        packets_per_interrupt: 3,
        interrupt_timeout_ns: 1_000,
    };

    #[test]
    fn coalescing_arms_once_fires_at_the_threshold_and_stays_quiet_masked() {
        let mut rx = RxRing::default();
        assert!(rx.receive(100));
        assert_eq!(
            rx.coalesce(100, NIC, false, false),
            Coalescing::ArmTimeout(1_100)
        );
        assert!(rx.receive(200));
        assert_eq!(rx.coalesce(200, NIC, false, true), Coalescing::Wait);
        assert!(rx.receive(300));
        assert_eq!(rx.coalesce(300, NIC, false, true), Coalescing::Fire);
        assert_eq!((rx.since_interrupt, rx.first_unsignalled), (0, None));
        rx.masked = true;
        assert!(rx.receive(400));
        assert_eq!(rx.coalesce(1_400, NIC, true, false), Coalescing::Wait);
    }

    #[test]
    fn a_timeout_fires_below_the_threshold_and_late_arming_is_now() {
        let mut rx = RxRing::default();
        assert!(rx.receive(100));
        assert_eq!(rx.coalesce(1_100, NIC, true, false), Coalescing::Fire);
        assert!(rx.receive(2_000));
        assert_eq!(
            rx.coalesce(5_000, NIC, false, false),
            Coalescing::ArmTimeout(5_000)
        );
    }

    #[test]
    fn a_full_ring_drops_the_packet() {
        let mut m = single(DesignKind::Vanilla);
        m.pairs[0].vf.ring = RX_RING_SIZE;
        let fx = listed(&mut m, |m, fx| m.rx_packet(0, Ring::Vf, fx));
        assert!(fx.is_empty());
        assert_eq!(m.pairs[0].vf.dropped, 1);
    }

    #[test]
    fn the_virtio_backend_wakes_once_and_serves_one_buffer_at_a_time() {
        let mut m = single(DesignKind::Vanilla);
        let job = BackendJob::RxPacket;
        let per_buffer = m.backend_service_ns(job);
        let wakeup = m.profile.host_ns.virtio_backend_wakeup;
        let done = |at| scheduled(at, Event::BackendDone { pair: 0, job });
        let fx = listed(&mut m, |m, fx| {
            m.backend_start(0, job, fx);
            m.backend_start(0, job, fx);
        });
        let first = wakeup + per_buffer;
        assert_eq!(fx, [done(first)], "the pass takes one buffer at a time");
        m.now = first;
        let fx = listed(&mut m, |m, fx| m.backend_done(0, job, fx));
        assert!(fx.contains(&done(first + per_buffer)), "no second wake-up");
    }

    #[test]
    fn a_trapped_icr_write_exits_and_the_ipi_leaves_after_its_emulation_and_kick() {
        let mut m = one_vm(DesignKind::Vanilla, WorkloadKind::Ipi, 2);
        let write = Effect::WriteIcr {
            vcpu: 0,
            icr: IpiMode::Unicast.icr(GUEST_IPI_VECTOR),
        };
        let fx = listed(&mut m, |m, fx| m.perform(write, fx));
        let icr_write = m.profile.exit_service_ns.icr_write;
        let exit = Effect::Exit {
            vcpu: 0,
            reason: ExitReason::MsrWrite,
            service_ns: icr_write
                + m.profile.host_ns.exit_entry_transition
                + m.profile.host_ns.send_ipi,
        };
        let kick = m.profile.host_ns.send_ipi;
        let sent = scheduled(icr_write + kick, Event::GuestIpi { vcpu: 1 });
        assert_eq!(fx, [exit, sent]);
    }

    #[test]
    fn with_every_vcpu_owning_queues_each_queue_interrupts_its_own_vcpu() {
        let host = HostShape {
            cores: 3,
            vms: 1,
            vcpus_per_vm: 2,
        };
        let mut group = RunGroup::new(WorkloadKind::UdpRx, vec![DesignKind::Did]);
        group.host = host;
        group.queue_owners = QueueOwners::EveryVcpu;
        group.with_timer = true;
        let mut m = shaped(RunSpec {
            design: DesignKind::Did,
            workload: WorkloadKind::UdpRx,
            rate_pps: None,
            group,
            nic: NicCoalescing::FITTED,
            duration_ns: 10_000_000,
            offered_per_s: None,
        });
        assert_eq!(m.pairs.len(), 2);
        for vcpu in 0..2 {
            assert_eq!(m.pairs[m.vcpus[vcpu].pair].owner, vcpu);
            // Each owner's guest timer is armed.
            assert!(m.timer_threads.ticks(vcpu));
            running(&mut m, vcpu);
        }
        let fx = listed(&mut m, |m, fx| m.fire_vf_msi(1, VfVector::Rx, fx));
        let vector = GUEST_VF_VECTOR;
        let core = m.vcpus[1].home_core;
        assert_eq!(core, 2);
        assert_eq!(fx, [Effect::DeliverPhysical { core, vector }]);
    }

    #[test]
    fn a_guest_ipi_reaches_exactly_the_vcpus_the_bus_routes_it_to() {
        let mut m = one_vm(DesignKind::Vanilla, WorkloadKind::Ipi, 4);
        let vector = GUEST_IPI_VECTOR;
        let icr = |mode, destination| x2apic_icr(vector, mode, destination);
        let fixed = DeliveryMode::Fixed;
        let all_but_self = Destination::AllExcludingSelf { sender: 0 };
        let bus = &mut m.vcpus;
        let broadcast = icr(fixed, all_but_self);
        assert_eq!(route_icr_write(bus, 0, broadcast, 0), [1, 2, 3]);
        assert_eq!(route_icr_write(bus, 2, broadcast, 0), [0, 1, 3]);
        let physical = icr(fixed, Destination::Physical(3));
        assert_eq!(route_icr_write(bus, 0, physical, 0), [3]);
        // x2APIC logical: cluster 0, member bits 2 and 3.
        let logical = Destination::Logical(0b1100);
        assert_eq!(route_icr_write(bus, 0, icr(fixed, logical), 0), [2, 3]);
        // Lowest priority among 1 to 3: vCPU 1's TPR keeps it out.
        bus[1].hw.vlapic.set_tpr(0x20);
        let lowest = icr(DeliveryMode::LowestPriority, Destination::Logical(0b1110));
        assert_eq!(route_icr_write(bus, 0, lowest, 0), [2]);
        // The scenario's broadcast IPI goes the same way.
        let write = Effect::WriteIcr {
            vcpu: 0,
            icr: IpiMode::Broadcast.icr(GUEST_IPI_VECTOR),
        };
        let fx = listed(&mut m, |m, fx| m.perform(write, fx));
        let targets: Vec<u32> = fx
            .iter()
            .filter_map(|effect| match effect {
                Effect::Schedule {
                    event: Event::GuestIpi { vcpu },
                    ..
                } => Some(*vcpu),
                _ => None,
            })
            .collect();
        assert_eq!(targets, [1, 2, 3]);
    }

    #[test]
    fn the_sender_kicks_sleeping_targets_one_after_another_waking_across_nodes_dearer() {
        let mut group = RunGroup::new(WorkloadKind::IpiCall, vec![DesignKind::Apicv]);
        group.host = HostShape {
            cores: 7,
            vms: 1,
            vcpus_per_vm: 6,
        };
        group.numa_nodes = 2;
        group.idle = IdleMode::Hlt;
        let spec = RunSpec {
            design: DesignKind::Apicv,
            workload: WorkloadKind::IpiCall,
            rate_pps: None,
            group,
            nic: NicCoalescing::FITTED,
            duration_ns: 2_000_000,
            offered_per_s: None,
        };
        let mut m = shaped_with(spec, |profile| {
            profile.numa_ns = crate::profile::BuiltinProfile::Ipi2019.profile().numa_ns;
        });
        running(&mut m, 0);
        // Cores 0-3 are node 0, 4-6 node 1: vCPUs 1-2 share the sender's
        // node, vCPUs 3-5 do not. vCPUs 1 and 3 sleep in the host.
        for sleeper in [1, 3] {
            let core = m.vcpus[sleeper].home_core;
            m.vcpus[sleeper].state = VcpuState::Halted;
            m.cores[core].current = Some(sleeper);
            m.cores[core].mode = Mode::Idle;
        }
        let from = m.vcpus[0].home_core;
        let crossing =
            |m: &Machine, vcpu: usize| m.topology.interconnect_ns(from, m.vcpus[vcpu].home_core);
        let (same, cross) = (crossing(&m, 1), crossing(&m, 3));
        assert!(cross > same);
        // One logical write to every other vCPU (x2APIC cluster 0).
        let write = Effect::WriteIcr {
            vcpu: 0,
            icr: x2apic_icr(
                GUEST_IPI_VECTOR,
                DeliveryMode::Fixed,
                Destination::Logical(0b11_1110),
            ),
        };
        let fx = listed(&mut m, |m, fx| m.perform(write, fx));
        let send_ipi = m.profile.host_ns.send_ipi;
        let icr = m.profile.exit_service_ns.icr_write;
        // Each IPI leaves after every kick before it and its own.
        let mut left = icr;
        let mut expected = Vec::new();
        for (target, wake) in [(1, same), (2, 0), (3, cross), (4, 0), (5, 0)] {
            left += send_ipi + wake;
            let vcpu = index_u32(target);
            expected.push(scheduled(
                left + crossing(&m, target),
                Event::GuestIpi { vcpu },
            ));
        }
        let exit = Effect::Exit {
            vcpu: 0,
            reason: ExitReason::MsrWrite,
            service_ns: left + m.profile.host_ns.exit_entry_transition,
        };
        assert_eq!(fx[0], exit);
        assert_eq!(fx[1..], expected[..]);
    }
}
