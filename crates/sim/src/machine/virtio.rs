//! A VM's vhost-net worker and the notifications between it and the
//! guest's virtio-net driver (Linux 3.6, the DID testbed's host:
//! drivers/vhost/net.c, drivers/vhost/vhost.c, drivers/virtio/virtio_ring.c).
//!
//! - One worker thread serves the device's queues, one job after another.
//!   It sleeps when it has nothing to do; a job that finds it asleep pays
//!   its wake-up (`virtio_backend_wakeup`), a job queued while it runs is
//!   taken in the same pass (`handle_rx` loops while the tap socket holds
//!   packets, `handle_tx` while the TX ring holds buffers), each at the
//!   per-buffer cost (`virtio_backend_per_request`).
//! - The guest's TX kick (VIRTIO_RING_F_EVENT_IDX, `vring_need_event`): the
//!   guest notifies only when the buffer it adds is the one vhost's
//!   `avail_event` asks for. vhost moves `avail_event` up only when it
//!   re-enables notifications (`vhost_enable_notify`), which `handle_tx`
//!   does once it finds the ring empty. So while any TX buffer is not yet
//!   used (kicked for, or taken by a running pass) the guest adds more
//!   without a kick: one kick per TX pass, not per packet.
//! - Interrupts the other way use the same rule (`used_event`, see
//!   `RxQueue::signalled`): vhost signals the first used buffer after the
//!   guest's NAPI re-enabled callbacks, and none while the guest polls.
//! - A PV peer on another server (memcached's clients, on the DID
//!   testbed's other machine) reaches vhost through the host's own NIC,
//!   whose driver throttles its interrupts as the VF's does (`itr`): the
//!   host's interrupt hands every frame in its ring through the bridge
//!   and the tap at once, and vhost takes them in one pass.

use super::devices::Coalescing;
use super::itr::{ItrMode, Throttle};
use super::*;

/// A VM's vhost worker, and the host NIC queue its remote traffic
/// arrives on.
#[derive(Clone, Debug)]
pub(super) struct Vhost {
    /// The worker runs (or has work queued) until then; after, it sleeps.
    busy_until: u64,
    /// Guest TX buffers made available and not yet used by vhost.
    tx_unused: u32,
    /// Frames in the host NIC's ring, not yet signalled to the host.
    nic_ring: u32,
    nic_throttle: Throttle,
    nic_timeout_armed: bool,
}

impl Vhost {
    /// A worker that sleeps, behind a host NIC throttled by `itr`.
    pub(super) fn new(itr: ItrMode) -> Vhost {
        Vhost {
            busy_until: 0,
            tx_unused: 0,
            nic_ring: 0,
            nic_throttle: Throttle::new(itr),
            nic_timeout_armed: false,
        }
    }

    /// A job of `work` ns queued at `now`: when the worker finishes it. A
    /// sleeping worker first wakes (`wakeup` ns); a running one takes the
    /// job in its pass, after the jobs before it.
    pub(super) fn queue(&mut self, now: u64, work: u64, wakeup: u64) -> u64 {
        let done = if self.busy_until <= now {
            now + wakeup + work
        } else {
            self.busy_until + work
        };
        self.busy_until = done;
        done
    }

    /// Whether the guest adding a TX buffer now must kick: only when vhost
    /// has used every earlier one, so that its TX notifications are on.
    pub(super) fn tx_notify_enabled(&self) -> bool {
        self.tx_unused == 0
    }

    /// The guest made a TX buffer available.
    pub(super) fn tx_added(&mut self) {
        self.tx_unused += 1;
    }

    /// vhost used a TX buffer; the last one re-enables notifications.
    pub(super) fn tx_used(&mut self) {
        self.tx_unused = self.tx_unused.saturating_sub(1);
    }
}

impl BackendJob {
    /// Whether the job is a guest TX buffer (the TX ring's notifications).
    pub(super) fn is_guest_tx(self) -> bool {
        matches!(
            self,
            BackendJob::TxPacket | BackendJob::TxResponse | BackendJob::TxAck
        )
    }
}

impl Machine {
    /// Whether the PV peer is on another server, its frames arriving
    /// through the host's NIC: memcached's clients (on the DID testbed's
    /// other machine); NetPIPE's and iperf's PV peers are host processes.
    pub(super) fn pv_peer_on_wire(&self) -> bool {
        self.workload.pv_peer_on_wire
    }

    /// A frame for `vm` lands in the host NIC's ring; the host's interrupt
    /// follows its throttle.
    pub(super) fn host_nic_receive(&mut self, vm: usize, fx: &mut Effects) {
        let bytes = self.frame_bytes();
        let vhost = &mut self.vms[vm].vhost;
        vhost.nic_ring += 1;
        vhost.nic_throttle.received(self.now, bytes);
        self.host_nic_decide(vm, fx);
    }

    /// The host NIC interrupts now or arms its throttle's timeout.
    pub(super) fn host_nic_decide(&mut self, vm: usize, fx: &mut Effects) {
        let now = self.now;
        let vhost = &mut self.vms[vm].vhost;
        if vhost.nic_ring == 0 {
            return;
        }
        match vhost.nic_throttle.decide(now, vhost.nic_timeout_armed) {
            Coalescing::Wait => {}
            Coalescing::ArmTimeout(at) => {
                vhost.nic_timeout_armed = true;
                fx.schedule(at, Event::HostNicTimeout { vm: index_u32(vm) });
            }
            Coalescing::Fire => {
                vhost.nic_throttle.fired(now);
                let frames = std::mem::take(&mut vhost.nic_ring);
                let queues = self.first_queues(vm);
                for _ in 0..frames {
                    self.backend_start(queues, BackendJob::RxPacket, fx);
                }
            }
        }
    }

    /// The host NIC's throttling interval ran out.
    pub(super) fn host_nic_timeout(&mut self, vm: usize, fx: &mut Effects) {
        self.vms[vm].vhost.nic_timeout_armed = false;
        self.host_nic_decide(vm, fx);
    }

    /// The guest adds a buffer to a virtio TX ring on `vcpu`: it kicks
    /// (a port write, which exits) unless vhost's notifications are off.
    pub(super) fn virtio_kick(&self, vcpu: usize, fx: &mut Effects) {
        let vm = self.vcpus[vcpu].vm;
        if self.vms[vm].vhost.tx_notify_enabled() {
            self.io_notify(vcpu, fx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{listed, over_pv, running, scheduled};
    use super::*;

    #[test]
    fn a_sleeping_worker_wakes_a_running_one_takes_the_job_in_its_pass() {
        let mut vhost = Vhost::new(ItrMode::Fixed { interval_ns: 0 });
        assert_eq!(vhost.queue(100, 1_000, 2_000), 3_100, "asleep: wakes");
        assert_eq!(vhost.queue(200, 1_000, 2_000), 4_100, "same pass");
        assert_eq!(vhost.queue(9_000, 1_000, 2_000), 12_000, "asleep again");
    }

    #[test]
    fn one_kick_until_vhost_used_every_tx_buffer() {
        let mut vhost = Vhost::new(ItrMode::Fixed { interval_ns: 0 });
        assert!(vhost.tx_notify_enabled());
        vhost.tx_added();
        assert!(!vhost.tx_notify_enabled(), "kicked: avail_event passed");
        vhost.tx_added();
        vhost.tx_used();
        assert!(!vhost.tx_notify_enabled(), "the pass still runs");
        vhost.tx_used();
        assert!(vhost.tx_notify_enabled(), "ring empty: re-enabled");
    }

    #[test]
    fn frames_within_the_host_nics_interval_reach_vhost_in_one_batch() {
        let mut m = over_pv(WorkloadKind::Memcached, 1_000_000, |group| {
            group.itr_us = Some(50);
        });
        let rx_jobs = |fx: &[Effect]| {
            let job = BackendJob::RxPacket;
            let done = Event::BackendDone { queues: 0, job };
            fx.iter()
                .filter(|effect| matches!(effect, Effect::Schedule { event, .. } if *event == done))
                .count()
        };
        // The first frame interrupts at once; the next two wait.
        let fx = listed(&mut m, |m, fx| m.host_nic_receive(0, fx));
        assert_eq!(rx_jobs(&fx), 1);
        m.now = 10_000;
        let fx = listed(&mut m, |m, fx| m.host_nic_receive(0, fx));
        let timeout = Event::HostNicTimeout { vm: 0 };
        assert_eq!(fx, [scheduled(50_000, timeout)]);
        m.now = 20_000;
        assert!(listed(&mut m, |m, fx| m.host_nic_receive(0, fx)).is_empty());
        // The interval ends: both go to vhost together.
        m.now = 50_000;
        let fx = listed(&mut m, |m, fx| m.host_nic_timeout(0, fx));
        assert_eq!(rx_jobs(&fx), 2);
    }

    #[test]
    fn the_guest_kicks_only_while_vhost_has_no_tx_buffer_outstanding() {
        let mut m = over_pv(WorkloadKind::NetperfRr, 1_000_000, |_| {});
        running(&mut m, 0);
        let kick = Effect::Exit {
            vcpu: 0,
            reason: ExitReason::IoInstruction,
            service_ns: m.profile.virtio_notify_cost(),
        };
        let fx = listed(&mut m, |m, fx| {
            m.netperf_respond(0, RxQueueKind::Virtio, fx)
        });
        assert_eq!(fx[0], kick);
        // The first response is not used yet: the second adds no kick.
        let fx = listed(&mut m, |m, fx| {
            m.netperf_respond(0, RxQueueKind::Virtio, fx)
        });
        assert!(!fx.contains(&kick));
        // A busy worker on the RX side alone does not hold the kick back.
        m.vms[0].vhost = Vhost::new(ItrMode::Fixed { interval_ns: 0 });
        m.vms[0].vhost.queue(0, 10_000, 0);
        let fx = listed(&mut m, |m, fx| m.virtio_kick(0, fx));
        assert_eq!(fx, [kick]);
    }
}
