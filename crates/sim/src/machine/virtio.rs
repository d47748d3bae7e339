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

use super::*;

/// A VM's vhost worker.
#[derive(Clone, Debug, Default)]
pub(super) struct Vhost {
    /// The worker runs (or has work queued) until then; after, it sleeps.
    busy_until: u64,
    /// Guest TX buffers made available and not yet used by vhost.
    tx_unused: u32,
}

impl Vhost {
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
    use super::super::fixture::{listed, running, shaped};
    use super::*;
    use crate::policy::DesignKind;
    use crate::scenario::{NicCoalescing, RunGroup};

    #[test]
    fn a_sleeping_worker_wakes_a_running_one_takes_the_job_in_its_pass() {
        let mut vhost = Vhost::default();
        assert_eq!(vhost.queue(100, 1_000, 2_000), 3_100, "asleep: wakes");
        assert_eq!(vhost.queue(200, 1_000, 2_000), 4_100, "same pass");
        assert_eq!(vhost.queue(9_000, 1_000, 2_000), 12_000, "asleep again");
    }

    #[test]
    fn one_kick_until_vhost_used_every_tx_buffer() {
        let mut vhost = Vhost::default();
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
    fn the_guest_kicks_only_while_vhost_has_no_tx_buffer_outstanding() {
        let mut group = RunGroup::new(WorkloadKind::NetperfRr, vec![DesignKind::Did]);
        group.transport = Transport::Pv;
        let mut m = shaped(RunSpec {
            policy: DesignKind::Did,
            workload: WorkloadKind::NetperfRr,
            rate_pps: None,
            group,
            nic: NicCoalescing::FITTED,
            duration_ns: 1_000_000,
            offered_per_s: None,
        });
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
        m.vms[0].vhost = Vhost::default();
        m.vms[0].vhost.queue(0, 10_000, 0);
        let fx = listed(&mut m, |m, fx| m.virtio_kick(0, fx));
        assert_eq!(fx, [kick]);
    }
}
