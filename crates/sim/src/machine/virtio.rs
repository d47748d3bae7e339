//! A VM's vhost-net worker and the notifications between it and the
//! guest's virtio-net driver (Linux 3.6, the DID testbed's host:
//! drivers/vhost/net.c, drivers/vhost/vhost.c, drivers/virtio/virtio_ring.c,
//! drivers/net/tun.c).
//!
//! - One worker thread per device (`vhost_worker`) runs the device's work
//!   items one after another, each queue's at most once in its list
//!   (`vhost_work_queue` adds a work only while it is not queued). It
//!   sleeps when the list is empty; work queued then pays its wake-up
//!   (`virtio_backend_wakeup`). A queue's work is a pass over that queue:
//!   `handle_rx` takes frames while the tap socket holds any,
//!   `handle_tx` buffers while the TX ring holds any, each at the
//!   per-buffer cost (`virtio_backend_per_request` plus its copy), so
//!   buffers that reach a queue while its pass runs are taken in it, and
//!   another queue's work waits for the pass to end. A pass that moved
//!   `VHOST_NET_WEIGHT` bytes requeues itself behind the other work.
//! - A TX buffer's pass also runs the host's bridge: `handle_tx` hands the
//!   frame to the tap (`tun_get_user`), whose `netif_rx_ni` runs the
//!   receive softirq (bridge, then the host's stack or NIC driver) on
//!   vhost's own thread (`bridge_one_way`).
//! - The guest's TX kick (VIRTIO_RING_F_EVENT_IDX, `vring_need_event` in
//!   `virtqueue_kick_prepare`; `start_xmit` kicks after every packet): the
//!   guest notifies only when the buffer it adds is the one vhost's
//!   `avail_event` asks for. vhost moves `avail_event` up only when it
//!   re-enables notifications (`vhost_enable_notify`), which `handle_tx`
//!   does once it finds the ring empty. So the first buffer after a TX
//!   pass ended kicks, and the buffers after it until the next pass ends
//!   do not: one kick per TX pass, not per packet.
//! - Interrupts the other way use the same rule (`used_event`, see
//!   `RxQueue::signalled`): vhost signals the first used buffer after the
//!   guest's NAPI re-enabled callbacks, and none while the guest polls.
//! - A PV peer on another server (memcached's clients, on the DID
//!   testbed's other machine) reaches vhost through the host's own NIC,
//!   whose driver throttles its interrupts as the VF's does (`itr`): the
//!   host's interrupt hands every frame in its ring through the bridge
//!   and the tap at once, and vhost takes them in one pass.

use std::collections::VecDeque;

use super::devices::Coalescing;
use super::itr::{ItrMode, Throttle};
use super::*;

/// vhost-net's byte budget of one pass before it requeues its work
/// behind the others (drivers/vhost/net.c, `VHOST_NET_WEIGHT`).
const VHOST_NET_WEIGHT: u64 = 0x80000;

/// The guest's virtio-net NAPI weight (drivers/net/virtio_net.c,
/// `napi_weight = 128`, a module parameter): a scenario's `napi_weight`
/// overrides it as it does the VF's.
pub(super) const VIRTIO_NET_NAPI_WEIGHT: u32 = 128;

/// A virtqueue the worker serves, each with a work item of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Virtqueue {
    Rx,
    Tx,
    Block,
}

impl Virtqueue {
    fn of(job: BackendJob) -> Virtqueue {
        match job {
            BackendJob::RxPacket => Virtqueue::Rx,
            BackendJob::Tx => Virtqueue::Tx,
            BackendJob::BlockRead => Virtqueue::Block,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A VM's vhost worker, and the host NIC queue its remote traffic
/// arrives on.
#[derive(Clone, Debug)]
pub(super) struct Vhost {
    /// The queue whose pass runs; None while the worker sleeps.
    running: Option<Virtqueue>,
    /// Bytes the running pass has moved.
    pass_bytes: u64,
    /// Work queued behind the running pass (`dev->work_list`).
    work_list: VecDeque<Virtqueue>,
    /// Each queue's buffers no pass has taken yet, oldest first, with the
    /// queue pair they came from.
    waiting: [VecDeque<(usize, BackendJob)>; 3],
    /// Whether the guest's next TX buffer kicks: a TX pass ended since
    /// the last kick.
    tx_notify: bool,
    /// Frames in the host NIC's ring, not yet signalled to the host.
    nic_ring: u32,
    nic_throttle: Throttle,
    nic_timeout_armed: bool,
}

impl Vhost {
    /// A worker that sleeps, behind a host NIC throttled by `itr`.
    pub(super) fn new(itr: ItrMode) -> Vhost {
        Vhost {
            running: None,
            pass_bytes: 0,
            work_list: VecDeque::new(),
            waiting: Default::default(),
            tx_notify: true,
            nic_ring: 0,
            nic_throttle: Throttle::new(itr),
            nic_timeout_armed: false,
        }
    }

    /// A buffer reaches `job`'s queue: whether the worker must wake for
    /// it (it slept). A TX buffer passes `avail_event`, so the next one
    /// does not kick until a TX pass ends.
    fn add(&mut self, pair: usize, job: BackendJob) -> bool {
        let queue = Virtqueue::of(job);
        if queue == Virtqueue::Tx {
            self.tx_notify = false;
        }
        self.waiting[queue.index()].push_back((pair, job));
        if self.running == Some(queue) || self.work_list.contains(&queue) {
            return false;
        }
        self.work_list.push_back(queue);
        self.running.is_none()
    }

    /// The running pass's next buffer, if it goes on: its queue still
    /// holds one and the pass is within its weight. Otherwise the pass
    /// ends (an empty TX ring re-enables the guest's kicks; a pass over
    /// its weight requeues its work) and the next work's first buffer
    /// follows; None when the worker goes to sleep.
    fn next_buffer(&mut self) -> Option<(usize, BackendJob)> {
        if let Some(queue) = self.running {
            let waiting = &mut self.waiting[queue.index()];
            if self.pass_bytes >= VHOST_NET_WEIGHT {
                self.work_list.push_back(queue);
            } else if let Some(buffer) = waiting.pop_front() {
                return Some(buffer);
            } else if queue == Virtqueue::Tx {
                self.tx_notify = true;
            }
        }
        self.running = None;
        while let Some(queue) = self.work_list.pop_front() {
            self.pass_bytes = 0;
            if let Some(buffer) = self.waiting[queue.index()].pop_front() {
                self.running = Some(queue);
                return Some(buffer);
            }
            if queue == Virtqueue::Tx {
                self.tx_notify = true;
            }
        }
        None
    }

    /// Whether the guest adding a TX buffer now must kick.
    pub(super) fn tx_notify_enabled(&self) -> bool {
        self.tx_notify
    }
}

impl BackendJob {
    /// Whether the job is a guest TX buffer (the TX ring's notifications).
    pub(super) fn is_guest_tx(self) -> bool {
        Virtqueue::of(self) == Virtqueue::Tx
    }
}

impl Machine {
    /// A frame for `vm` lands in the host NIC's ring; the host's interrupt
    /// follows its throttle.
    pub(super) fn host_nic_receive(&mut self, vm: usize, fx: &mut Effects) {
        let bytes = self.traffic.frame_bytes;
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
                let pair = self.first_pair(vm);
                for _ in 0..frames {
                    self.backend_start(pair, BackendJob::RxPacket, fx);
                }
            }
        }
    }

    /// The host NIC's throttling interval ran out.
    pub(super) fn host_nic_timeout(&mut self, vm: usize, fx: &mut Effects) {
        self.vms[vm].vhost.nic_timeout_armed = false;
        self.host_nic_decide(vm, fx);
    }

    /// A buffer reaches the VM's vhost worker (`backend_start`): a
    /// sleeping worker wakes and starts a pass at once.
    pub(super) fn vhost_add(&mut self, pair: usize, job: BackendJob, fx: &mut Effects) {
        let vm = self.vm_of_pair(pair);
        if self.vms[vm].vhost.add(pair, job) {
            let wakeup = self.profile.host_ns.virtio_backend_wakeup;
            self.vhost_take_next(vm, self.now + wakeup, fx);
        }
    }

    /// The worker takes its next buffer at `at`, or sleeps.
    pub(super) fn vhost_take_next(&mut self, vm: usize, at: u64, fx: &mut Effects) {
        let Some((pair, job)) = self.vms[vm].vhost.next_buffer() else {
            return;
        };
        self.vms[vm].vhost.pass_bytes += self.backend_bytes(job);
        let done = at + self.backend_service_ns(job);
        fx.schedule(
            done,
            Event::BackendDone {
                pair: index_u32(pair),
                job,
            },
        );
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

    const RX: (usize, BackendJob) = (0, BackendJob::RxPacket);
    const TX: (usize, BackendJob) = (0, BackendJob::Tx);

    /// netperf-rr's guest answers through virtio: the kick, then the
    /// buffer for vhost.
    fn respond(m: &mut Machine, fx: &mut Effects) {
        m.virtio_kick(0, fx);
        m.backend_start(0, BackendJob::Tx, fx);
    }

    fn worker() -> Vhost {
        Vhost::new(ItrMode::Fixed { interval_ns: 0 })
    }

    #[test]
    fn a_sleeping_worker_wakes_and_its_pass_takes_what_reaches_its_queue() {
        let mut vhost = worker();
        assert!(vhost.add(RX.0, RX.1), "asleep: wakes");
        assert_eq!(vhost.next_buffer(), Some(RX));
        assert!(!vhost.add(RX.0, RX.1), "running: the same pass takes it");
        assert_eq!(vhost.next_buffer(), Some(RX));
        assert_eq!(vhost.next_buffer(), None, "nothing left: sleeps");
        assert!(vhost.add(RX.0, RX.1), "asleep again");
    }

    #[test]
    fn tx_work_waits_for_the_rx_pass_which_drains_the_socket_first() {
        let mut vhost = worker();
        vhost.add(RX.0, RX.1);
        assert_eq!(vhost.next_buffer(), Some(RX));
        assert!(!vhost.add(TX.0, TX.1), "queued behind the RX pass");
        assert!(!vhost.add(RX.0, RX.1));
        assert_eq!(vhost.next_buffer(), Some(RX), "handle_rx loops first");
        assert_eq!(vhost.next_buffer(), Some(TX));
        assert_eq!(vhost.next_buffer(), None);
    }

    #[test]
    fn a_pass_over_its_weight_requeues_behind_the_other_work() {
        let mut vhost = worker();
        vhost.add(RX.0, RX.1);
        assert_eq!(vhost.next_buffer(), Some(RX));
        vhost.pass_bytes = VHOST_NET_WEIGHT;
        vhost.add(RX.0, RX.1);
        vhost.add(TX.0, TX.1);
        assert_eq!(vhost.next_buffer(), Some(TX), "RX requeued at the tail");
        assert_eq!(vhost.next_buffer(), Some(RX));
    }

    #[test]
    fn one_kick_per_tx_pass() {
        let mut vhost = worker();
        assert!(vhost.tx_notify_enabled());
        vhost.add(TX.0, TX.1);
        assert!(!vhost.tx_notify_enabled(), "kicked: avail_event passed");
        assert_eq!(vhost.next_buffer(), Some(TX));
        vhost.add(TX.0, TX.1);
        assert!(!vhost.tx_notify_enabled(), "the pass still runs");
        assert_eq!(vhost.next_buffer(), Some(TX), "taken in the same pass");
        assert!(!vhost.tx_notify_enabled());
        assert_eq!(vhost.next_buffer(), None);
        assert!(vhost.tx_notify_enabled(), "ring empty: re-enabled");
    }

    #[test]
    fn a_tx_buffers_pass_runs_the_bridge_and_the_frame_is_then_with_the_host_peer() {
        let mut m = over_pv(WorkloadKind::NetperfRr, 1_000_000, |_| {});
        running(&mut m, 0);
        let job = BackendJob::Tx;
        let host = &m.profile.host_ns;
        let pass = host.virtio_backend_wakeup
            + host.virtio_backend_per_request
            + m.net.copy_ns(m.net.message_bytes())
            + m.profile.network.bridge_one_way;
        let fx = listed(&mut m, respond);
        assert!(fx.contains(&scheduled(pass, Event::BackendDone { pair: 0, job })));
        m.now = pass;
        let fx = listed(&mut m, |m, fx| m.backend_done(0, job, fx));
        let request = super::super::workload::RemoteEvent::Request { vm: 0 };
        assert_eq!(fx, [scheduled(pass, request)]);
    }

    #[test]
    fn a_virtio_poll_at_its_weight_polls_again_without_an_interrupt() {
        use super::super::fixture::in_handler;
        use super::super::guest::{Step, RX_HANDLER};
        let mut m = over_pv(WorkloadKind::Iperf, 1_000_000, |_| {});
        assert_eq!(m.pairs[0].virtio.napi.weight, VIRTIO_NET_NAPI_WEIGHT);
        let unmask = RX_HANDLER
            .iter()
            .position(|step| matches!(step, Step::UnmaskRx))
            .expect("the handler unmasks");
        in_handler(&mut m, 0, RX_HANDLER, unmask, GUEST_VIRTIO_VECTOR);
        let rx = &mut m.pairs[0].virtio;
        rx.masked = true;
        rx.ring = 1;
        let fx = listed(&mut m, |m, fx| m.run_guest(0, fx));
        assert!(m.pairs[0].virtio.masked, "callbacks stay off");
        assert!(!fx
            .iter()
            .any(|effect| matches!(effect, Effect::SignalVirtual { .. })));
        let top = m.vcpus[0].frames.last().expect("in the handler");
        assert!(matches!(top.program[top.pc], Step::PollRx), "polls again");
    }

    #[test]
    fn frames_within_the_host_nics_interval_reach_vhost_in_one_batch() {
        let mut m = over_pv(WorkloadKind::Memcached, 1_000_000, |group| {
            group.itr_us = Some(50);
        });
        let rx_jobs = |fx: &[Effect]| {
            let job = BackendJob::RxPacket;
            let done = Event::BackendDone { pair: 0, job };
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
        // The interval ends: both go to vhost together, which the pass
        // running since the first takes after it.
        m.now = 50_000;
        let fx = listed(&mut m, |m, fx| m.host_nic_timeout(0, fx));
        assert_eq!(rx_jobs(&fx), 0);
        assert_eq!(m.vms[0].vhost.waiting[Virtqueue::Rx.index()].len(), 2);
    }

    #[test]
    fn the_guest_kicks_only_once_a_tx_pass_ended() {
        let mut m = over_pv(WorkloadKind::NetperfRr, 1_000_000, |_| {});
        running(&mut m, 0);
        let kick = Effect::Exit {
            vcpu: 0,
            reason: ExitReason::IoInstruction,
            service_ns: m.profile.virtio_notify_cost(),
        };
        let fx = listed(&mut m, respond);
        assert_eq!(fx[0], kick);
        // The first response is not used yet: the second adds no kick.
        let fx = listed(&mut m, respond);
        assert!(!fx.contains(&kick));
        // A busy worker on the RX side alone does not hold the kick back.
        m.vms[0].vhost = worker();
        m.vms[0].vhost.add(RX.0, RX.1);
        m.vms[0].vhost.next_buffer();
        let fx = listed(&mut m, |m, fx| m.virtio_kick(0, fx));
        assert_eq!(fx, [kick]);
    }
}
