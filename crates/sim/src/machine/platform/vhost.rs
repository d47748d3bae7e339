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

use super::itr::{ItrMode, Throttle};
use super::nic::{Coalescing, Ring};
use super::Platform;
use crate::machine::effects::{Effect, Effects};
use crate::machine::ledger::Ledger;
use crate::machine::{index_u32, Event};
use crate::profile::CostProfile;

/// vhost-net's byte budget of one pass before it requeues its work
/// behind the others (drivers/vhost/net.c, `VHOST_NET_WEIGHT`).
const VHOST_NET_WEIGHT: u64 = 0x80000;

/// The guest's virtio-net NAPI weight (drivers/net/virtio_net.c,
/// `napi_weight = 128`, a module parameter): a scenario's `napi_weight`
/// overrides it as it does the VF's.
pub(in crate::machine) const VIRTIO_NET_NAPI_WEIGHT: u32 = 128;

/// A buffer for the VM's vhost worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum BackendJob {
    /// A frame for the guest's receive ring.
    RxPacket,
    /// A buffer the guest sends (a response, an answer, an ACK): the
    /// workload's peer has it once vhost passed it on.
    Tx,
}

/// vhost's costs, fixed for the run.
#[derive(Clone, Copy, Debug)]
pub(super) struct Costs {
    per_request: u64,
    wakeup: u64,
    bridge_one_way: u64,
}

impl Costs {
    pub(super) fn of(profile: &CostProfile) -> Costs {
        let host = &profile.host_ns;
        Costs {
            per_request: host.virtio_backend_per_request,
            wakeup: host.virtio_backend_wakeup,
            bridge_one_way: profile.network.bridge_one_way,
        }
    }
}

/// A virtqueue the worker serves, each with a work item of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Virtqueue {
    Rx,
    Tx,
}

impl Virtqueue {
    fn of(job: BackendJob) -> Virtqueue {
        match job {
            BackendJob::RxPacket => Virtqueue::Rx,
            BackendJob::Tx => Virtqueue::Tx,
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
    waiting: [VecDeque<(usize, BackendJob)>; 2],
    /// Whether the guest's next TX buffer kicks: a TX pass ended since
    /// the last kick.
    tx_notify: bool,
    /// Frames in the host NIC's ring, not yet signalled to the host.
    nic_ring: u32,
    nic_throttle: Throttle,
    nic_timeout_armed: bool,
    /// The queue pair the host NIC's frames are for (the VM's first).
    pair: usize,
}

impl Vhost {
    /// A worker that sleeps, behind a host NIC throttled by `itr`, whose
    /// frames are for queue pair `pair`.
    pub(super) fn new(itr: ItrMode, pair: usize) -> Vhost {
        Vhost {
            running: None,
            pass_bytes: 0,
            work_list: VecDeque::new(),
            waiting: Default::default(),
            tx_notify: true,
            nic_ring: 0,
            nic_throttle: Throttle::new(itr),
            nic_timeout_armed: false,
            pair,
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

impl Platform {
    /// A frame for `vm` lands in the host NIC's ring; the host's interrupt
    /// follows its throttle.
    pub(super) fn host_nic_receive(&mut self, vm: usize, now: u64, fx: &mut Effects) {
        let bytes = self.traffic.frame_bytes;
        let vhost = &mut self.vhosts[vm];
        vhost.nic_ring += 1;
        vhost.nic_throttle.received(now, bytes);
        self.host_nic_decide(vm, now, fx);
    }

    /// The host NIC interrupts now or arms its throttle's timeout: its
    /// interrupt hands every frame in its ring to vhost.
    fn host_nic_decide(&mut self, vm: usize, now: u64, fx: &mut Effects) {
        let vhost = &mut self.vhosts[vm];
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
                let pair = vhost.pair;
                for _ in 0..frames {
                    self.backend_start(pair, BackendJob::RxPacket, now, fx);
                }
            }
        }
    }

    /// The host NIC's throttling interval ran out.
    pub(in crate::machine) fn host_nic_timeout(&mut self, vm: usize, now: u64, fx: &mut Effects) {
        self.vhosts[vm].nic_timeout_armed = false;
        self.host_nic_decide(vm, now, fx);
    }

    /// A buffer reaches the VM's vhost worker: a sleeping worker wakes and
    /// starts a pass at once.
    pub(in crate::machine) fn backend_start(
        &mut self,
        pair: usize,
        job: BackendJob,
        now: u64,
        fx: &mut Effects,
    ) {
        let vm = self.pairs[pair].vm;
        if self.vhosts[vm].add(pair, job) {
            self.vhost_take_next(vm, now + self.vhost_costs.wakeup, fx);
        }
    }

    /// The worker takes its next buffer at `at`, or sleeps.
    fn vhost_take_next(&mut self, vm: usize, at: u64, fx: &mut Effects) {
        let Some((pair, job)) = self.vhosts[vm].next_buffer() else {
            return;
        };
        self.vhosts[vm].pass_bytes += self.backend_bytes(job);
        let done = at + self.backend_service_ns(job);
        fx.schedule(
            done,
            Event::BackendDone {
                pair: index_u32(pair),
                job,
            },
        );
    }

    /// The payload vhost copies for a buffer: into the guest's receive
    /// buffer (`handle_rx`'s recvmsg), out of its transmit buffer
    /// (`handle_tx`'s sendmsg; Linux 3.6 leaves zero-copy transmit off).
    fn backend_bytes(&self, job: BackendJob) -> u64 {
        match job {
            BackendJob::RxPacket => self.traffic.frame_bytes,
            BackendJob::Tx => self.traffic.tx_bytes,
        }
    }

    /// vhost's work for one buffer in a pass: its own, the copy, and for
    /// a guest TX buffer the host's bridge, which `tun_get_user`'s
    /// `netif_rx_ni` runs on vhost's thread.
    fn backend_service_ns(&self, job: BackendJob) -> u64 {
        let costs = &self.vhost_costs;
        let own = costs.per_request + self.net.copy_ns(self.backend_bytes(job));
        match job {
            BackendJob::Tx => own + costs.bridge_one_way,
            BackendJob::RxPacket => own,
        }
    }

    /// vhost used a buffer: its effect (a frame for the guest's ring, a
    /// guest buffer past the host), then the worker's pass goes on.
    pub(in crate::machine) fn backend_done(
        &mut self,
        pair: usize,
        job: BackendJob,
        now: u64,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        match job {
            BackendJob::RxPacket => self.rx_packet(pair, Ring::Virtio, now, ledger, fx),
            BackendJob::Tx => fx.push(Effect::Sent { pair }),
        }
        self.vhost_take_next(self.pairs[pair].vm, now, fx);
    }

    /// Whether the guest adding a buffer to `vm`'s virtio TX ring must
    /// kick (a port write, which exits): vhost asks to be told.
    pub(in crate::machine) fn virtio_kick(&self, vm: usize) -> bool {
        self.vhosts[vm].tx_notify_enabled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::design::DesignKind;
    use crate::machine::fixture::{listed, Setting};
    use crate::scenario::{Transport, WorkloadKind};

    const RX: (usize, BackendJob) = (0, BackendJob::RxPacket);
    const TX: (usize, BackendJob) = (0, BackendJob::Tx);

    fn worker() -> Vhost {
        Vhost::new(ItrMode::Fixed { interval_ns: 0 }, 0)
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
    fn buffers_the_guest_adds_while_the_tx_pass_is_due_kick_no_exit() {
        let setting = Setting::group(DesignKind::Vanilla, WorkloadKind::Memcached, |group| {
            group.transport = Transport::Pv;
        });
        let mut platform = setting.platform();
        let mut ledger = Ledger::new(&setting.topology, false);
        assert!(platform.virtio_kick(0), "the worker sleeps: kick");
        let fx = listed(|fx| platform.backend_start(0, BackendJob::Tx, 0, fx));
        let [Effect::Schedule { at: first_done, .. }] = fx[..] else {
            panic!("the worker wakes for its pass: {fx:?}");
        };
        assert!(!platform.virtio_kick(0), "avail_event passed: no kick");
        let fx = listed(|fx| platform.backend_start(0, BackendJob::Tx, 100, fx));
        assert!(fx.is_empty(), "the pass takes it, no wake-up: {fx:?}");
        let fx = listed(|fx| platform.backend_done(0, BackendJob::Tx, first_done, &mut ledger, fx));
        assert_eq!(fx[0], Effect::Sent { pair: 0 });
        assert!(!platform.virtio_kick(0), "the pass goes on");
        let Effect::Schedule {
            at: second_done, ..
        } = fx[1]
        else {
            panic!("the second buffer follows in the pass: {fx:?}");
        };
        let fx =
            listed(|fx| platform.backend_done(0, BackendJob::Tx, second_done, &mut ledger, fx));
        assert_eq!(fx, [Effect::Sent { pair: 0 }], "the ring is empty: sleeps");
        assert!(platform.virtio_kick(0), "notifications re-enabled: kick");
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
}
