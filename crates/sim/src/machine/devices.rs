//! Devices: the SR-IOV VF with interrupt coalescing, the virtio backend,
//! the block device and the guest's IPI sender.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RxQueueKind {
    Vf,
    Virtio,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BackendJob {
    RxPacket,
    TxPacket,
    BlockRead,
}

#[derive(Default)]
pub(super) struct RxQueue {
    pub(super) ring: u32,
    pub(super) since_interrupt: u32,
    pub(super) first_unsignalled: Option<u64>,
    pub(super) masked: bool,
    pub(super) signalled: bool,
    pub(super) dropped: u64,
}

impl RxQueue {
    /// The driver re-enables the queue's interrupt after its poll.
    pub(super) fn unmask(&mut self) {
        self.masked = false;
        self.signalled = false;
        self.since_interrupt = 0;
        self.first_unsignalled = None;
    }
}

impl Machine {
    pub(super) fn packet_rate(&self, queue: RxQueueKind) -> f64 {
        match self.spec.workload {
            WorkloadKind::Iperf => LINE_RATE_MTU_PPS as f64,
            _ => match (queue, self.spec.rate_pps) {
                (_, Some(rate)) => rate as f64,
                (_, None) => 0.0,
            },
        }
    }

    pub(super) fn schedule_packet(&mut self, vm: usize, queue: RxQueueKind, fx: &mut Effects) {
        let rate = self.packet_rate(queue);
        if rate <= 0.0 {
            return;
        }
        let gap = self.rng.exponential_ns(1e9 / rate);
        fx.schedule(
            self.now + gap,
            Event::PacketArrival {
                vm: vm as u32,
                queue,
            },
        );
    }

    pub(super) fn rx(&self, vm: usize, queue: RxQueueKind) -> &RxQueue {
        match queue {
            RxQueueKind::Vf => &self.vms[vm].vf,
            RxQueueKind::Virtio => &self.vms[vm].virtio,
        }
    }

    pub(super) fn rx_mut(&mut self, vm: usize, queue: RxQueueKind) -> &mut RxQueue {
        match queue {
            RxQueueKind::Vf => &mut self.vms[vm].vf,
            RxQueueKind::Virtio => &mut self.vms[vm].virtio,
        }
    }

    pub(super) fn rx_queue_of(&self, vector: Option<u8>) -> RxQueueKind {
        match vector {
            Some(GUEST_VIRTIO_VECTOR) => RxQueueKind::Virtio,
            _ => RxQueueKind::Vf,
        }
    }

    pub(super) fn packet_arrival(&mut self, vm: usize, queue: RxQueueKind, fx: &mut Effects) {
        self.schedule_packet(vm, queue, fx);
        match queue {
            RxQueueKind::Vf => self.rx_packet(vm, RxQueueKind::Vf, fx),
            RxQueueKind::Virtio => self.backend_start(vm, BackendJob::RxPacket, fx),
        }
    }

    /// A packet lands in a receive ring.
    pub(super) fn rx_packet(&mut self, vm: usize, queue: RxQueueKind, fx: &mut Effects) {
        let now = self.now;
        let rx = self.rx_mut(vm, queue);
        if rx.ring >= RX_RING_SIZE {
            rx.dropped += 1;
            return;
        }
        rx.ring += 1;
        rx.since_interrupt += 1;
        rx.first_unsignalled.get_or_insert(now);
        match queue {
            RxQueueKind::Vf => self.maybe_fire_vf(vm, false, fx),
            RxQueueKind::Virtio => {
                let rx = &mut self.vms[vm].virtio;
                if !rx.masked && !rx.signalled {
                    rx.signalled = true;
                    self.raise(vm, GUEST_VIRTIO_VECTOR);
                    fx.push(Effect::SignalVirtual {
                        vcpu: self.vms[vm].vcpus[0],
                        vector: GUEST_VIRTIO_VECTOR,
                    });
                }
            }
        }
    }

    /// The VF's coalescing logic: fire at the packet threshold, or when the
    /// timeout armed at the first unsignalled packet runs out.
    pub(super) fn maybe_fire_vf(&mut self, vm: usize, timed_out: bool, fx: &mut Effects) {
        let coalescing = self.spec.nic;
        let now = self.now;
        let timeout = Event::CoalesceTimeout { vm: vm as u32 };
        let timeout_armed = timeout.key().is_some_and(|key| self.queue.is_pending(key));
        let rx = &mut self.vms[vm].vf;
        if rx.masked || rx.ring == 0 || rx.since_interrupt == 0 {
            return;
        }
        let threshold = rx.since_interrupt >= coalescing.packets_per_interrupt;
        if !threshold && !timed_out {
            if !timeout_armed {
                let at = rx.first_unsignalled.unwrap_or(now) + coalescing.interrupt_timeout_ns;
                fx.schedule(at.max(now), timeout);
            }
            return;
        }
        rx.since_interrupt = 0;
        rx.first_unsignalled = None;
        fx.push(Effect::Cancel(timeout));
        self.fire_vf_msi(vm, fx);
    }

    /// The VF writes its MSI; the IOMMU remaps it.
    pub(super) fn fire_vf_msi(&mut self, vm: usize, fx: &mut Effects) {
        let message = MsiMessage::compose_remappable(&RemappableMsi {
            handle: vm as u16,
            subhandle: None,
        });
        let requester = 0x0100 + vm as u16;
        let Ok(remapped) = self.iommu.remap(&message, requester) else {
            // Blocked requests are counted by the IOMMU model.
            return;
        };
        self.raise(vm, GUEST_VF_VECTOR);
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
                            message: NmiMessage::AssignedInterrupt { vm: vm as u32 },
                        }
                    } else {
                        Effect::DeliverPhysical {
                            core,
                            vector: interrupt.vector,
                        }
                    });
                }
            }
            Remapped::Post { vector, .. } => fx.push(Effect::SignalVirtual {
                vcpu: self.vms[vm].vcpus[0],
                vector,
            }),
        }
    }

    pub(super) fn backend_start(&mut self, vm: usize, job: BackendJob, fx: &mut Effects) {
        let mut service = self.profile.host_ns.virtio_backend_per_request;
        if job == BackendJob::BlockRead {
            service += self.profile.host_ns.block_device_service;
        }
        let start = self.now.max(self.vms[vm].backend_busy_until);
        let done = start + service;
        self.vms[vm].backend_busy_until = done;
        fx.schedule(done, Event::BackendDone { vm: vm as u32, job });
    }

    pub(super) fn backend_done(&mut self, vm: usize, job: BackendJob, fx: &mut Effects) {
        match job {
            BackendJob::RxPacket => self.rx_packet(vm, RxQueueKind::Virtio, fx),
            BackendJob::TxPacket => fx.schedule(
                self.now + self.profile.guest_ns.wire_one_way,
                Event::RemoteRequest { vm: vm as u32 },
            ),
            BackendJob::BlockRead => {
                self.raise(vm, GUEST_VIRTIO_VECTOR);
                fx.push(Effect::SignalVirtual {
                    vcpu: self.vms[vm].vcpus[0],
                    vector: GUEST_VIRTIO_VECTOR,
                });
            }
        }
    }

    pub(super) fn submit_block(&mut self, vm: usize, fx: &mut Effects) {
        self.vms[vm].request_sent_at = Some(self.now);
        self.backend_start(vm, BackendJob::BlockRead, fx);
    }

    /// fio's submission: the request, then the virtio notify.
    pub(super) fn guest_submit_block(&mut self, vcpu: usize, fx: &mut Effects) {
        self.submit_block(self.vcpus[vcpu].vm, fx);
        self.io_notify(vcpu, fx);
    }

    /// A virtio notify: a port write that exits under every hypervisor.
    pub(super) fn io_notify(&self, vcpu: usize, fx: &mut Effects) {
        if self.vcpus[vcpu].vmcs.io_exits() {
            fx.exit(
                vcpu,
                ExitReason::IoInsr,
                self.profile.exit_cost(ExitReason::IoInsr),
            );
        }
    }

    /// netperf-rr: the guest answered; the response goes out and the remote
    /// sends the next request.
    pub(super) fn netperf_respond(&mut self, vcpu: usize, queue: RxQueueKind, fx: &mut Effects) {
        let vm = self.vcpus[vcpu].vm;
        match queue {
            RxQueueKind::Virtio => {
                self.backend_start(vm, BackendJob::TxPacket, fx);
                self.io_notify(vcpu, fx);
            }
            RxQueueKind::Vf => {
                // The VF's doorbell is a passed-through MMIO write.
                fx.schedule(
                    self.now + self.profile.guest_ns.wire_one_way,
                    Event::RemoteRequest { vm: vm as u32 },
                );
            }
        }
    }

    /// The guest writes the ICR: every hypervisor traps it; bare metal
    /// sends the IPI itself.
    pub(super) fn guest_send_ipi(&mut self, vcpu: usize, fx: &mut Effects) {
        let vm = self.vcpus[vcpu].vm;
        let targets: Vec<usize> = match self.spec.group.ipi_mode {
            IpiMode::Unicast => self.vms[vm].vcpus.iter().copied().skip(1).take(1).collect(),
            IpiMode::Broadcast => self.vms[vm].vcpus.iter().copied().skip(1).collect(),
        };
        let trapped = self.vcpus[vcpu].vmcs.msr_write(msrs::ICR) == MsrWriteAction::Exit;
        let mut send_at = self.now;
        if trapped {
            let cost = self.profile.exit_service_ns.icr_write
                + self.profile.host_ns.exit_entry_transition
                + self.profile.host_ns.send_ipi * targets.len() as u64;
            fx.exit(vcpu, ExitReason::MsrWr, cost);
            send_at += self.profile.exit_service_ns.icr_write;
        }
        for target in targets {
            self.vcpus[target].ipi_sent_at = Some(self.now);
            fx.schedule(
                send_at,
                Event::GuestIpi {
                    vcpu: target as u32,
                },
            );
        }
    }
}
