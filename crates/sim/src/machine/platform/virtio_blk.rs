//! A VM's virtio-blk back end in QEMU's user space, as the DID testbed's
//! era ran it (QEMU 1.x: hw/virtio-blk.c on the main loop, raw-posix's
//! reads on the AIO thread pool, `aio=threads`, the disk opened with
//! `cache=none`; no in-kernel virtio-blk back end existed, vhost-blk was
//! never merged). A read goes through these steps, each charged:
//!
//! 1. The guest's notify exits and KVM signals the queue's ioeventfd
//!    (`kvm_io_bus_write`; the exit is the hypervisor's `virtio_notify`),
//!    which wakes QEMU's main loop from its poll ([`Step::MainLoopWakeup`]).
//! 2. The main loop handles the queue (`virtio_queue_notify_vq` ->
//!    `virtio_blk_handle_output`: the notifier's read, `virtqueue_pop`
//!    mapping the request's descriptors, `virtio_blk_handle_request`,
//!    `bdrv_aio_readv` queueing the read on the thread pool) under QEMU's
//!    global lock ([`Step::Dispatch`]).
//! 3. The pool's idle worker wakes ([`Step::AioThreadWakeup`]) and reads
//!    the host's ramdisk with `preadv`, O_DIRECT: the system call and the
//!    direct-I/O path ([`Step::Pread`]) around the copy out of the
//!    ramdisk's pages ([`Step::RamdiskCopy`]).
//! 4. Its completion's event notifier wakes the main loop
//!    ([`Step::CompletionWakeup`]), which completes the request
//!    (`virtio_blk_rw_complete` -> `virtio_blk_req_complete`: the status
//!    byte, `virtqueue_push`, `virtio_notify` -> `msix_notify`, the MSI
//!    sent into KVM) ([`Step::Complete`]).
//!
//! The guest's interrupt follows, delivered as each design delivers a
//! virtual device's. fio keeps one request in flight, so no step waits
//! for another request's.

use super::Platform;
use crate::machine::effects::{Effect, Effects};
use crate::machine::ledger::Ledger;
use crate::machine::{index_u32, Event, GUEST_VIRTIO_VECTOR};
use crate::profile::CostProfile;

/// One step of a read through QEMU's virtio-blk, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum Step {
    MainLoopWakeup,
    Dispatch,
    AioThreadWakeup,
    Pread,
    RamdiskCopy,
    CompletionWakeup,
    Complete,
}

/// Each step's cost, fixed for the run.
#[derive(Clone, Copy, Debug)]
pub(super) struct Costs {
    steps: [(Step, u64); 7],
}

impl Costs {
    /// The profile's costs: a thread's wake-up is the profile's
    /// `virtio_backend_wakeup` (the same eventfd or futex wake-up of a
    /// sleeping host thread as vhost's worker), the copy `ramdisk_read`,
    /// the rest `virtio_blk_ns`.
    pub(super) fn of(profile: &CostProfile) -> Costs {
        let wakeup = profile.host_ns.virtio_backend_wakeup;
        let blk = &profile.virtio_blk_ns;
        Costs {
            steps: [
                (Step::MainLoopWakeup, wakeup),
                (Step::Dispatch, blk.dispatch),
                (Step::AioThreadWakeup, wakeup),
                (Step::Pread, blk.pread),
                (Step::RamdiskCopy, profile.host_ns.ramdisk_read),
                (Step::CompletionWakeup, wakeup),
                (Step::Complete, blk.complete),
            ],
        }
    }

    /// The steps of a read and what each costs, in order.
    pub(super) fn steps(&self) -> &[(Step, u64)] {
        &self.steps
    }

    /// From the notify to the MSI: every step, one after another.
    pub(super) fn read_ns(&self) -> u64 {
        self.steps().iter().map(|&(_, ns)| ns).sum()
    }
}

impl Platform {
    /// `pair`'s guest notified a read at `now`: QEMU sends its interrupt
    /// when every step is done.
    pub(in crate::machine) fn block_read(&mut self, pair: usize, now: u64, fx: &mut Effects) {
        fx.schedule(
            now + self.blk_costs.read_ns(),
            Event::BlockReadDone {
                pair: index_u32(pair),
            },
        );
    }

    /// QEMU's MSI for `pair`'s read reaches KVM: the guest's virtio-blk
    /// interrupt.
    pub(in crate::machine) fn block_read_done(
        &mut self,
        pair: usize,
        now: u64,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let queue_pair = &self.pairs[pair];
        ledger.raise(queue_pair.vm, GUEST_VIRTIO_VECTOR, now);
        fx.push(Effect::SignalVirtual {
            vcpu: queue_pair.owner,
            vector: GUEST_VIRTIO_VECTOR,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::design::DesignKind;
    use crate::machine::fixture::{listed, scheduled, Setting};
    use crate::scenario::WorkloadKind;

    #[test]
    fn a_read_takes_every_step_of_qemus_path_in_order() {
        let setting = Setting::group(DesignKind::Vanilla, WorkloadKind::Fio, |_| {});
        let profile = &setting.profile;
        let costs = Costs::of(profile);
        let wakeup = profile.host_ns.virtio_backend_wakeup;
        let blk = &profile.virtio_blk_ns;
        assert_eq!(
            costs.steps(),
            [
                (Step::MainLoopWakeup, wakeup),
                (Step::Dispatch, blk.dispatch),
                (Step::AioThreadWakeup, wakeup),
                (Step::Pread, blk.pread),
                (Step::RamdiskCopy, profile.host_ns.ramdisk_read),
                (Step::CompletionWakeup, wakeup),
                (Step::Complete, blk.complete),
            ]
        );
        let mut platform = setting.platform();
        let fx = listed(|fx| platform.block_read(0, 1_000, fx));
        let total =
            3 * wakeup + blk.dispatch + blk.pread + profile.host_ns.ramdisk_read + blk.complete;
        assert_eq!(
            fx,
            [scheduled(1_000 + total, Event::BlockReadDone { pair: 0 })]
        );
    }

    #[test]
    fn each_step_is_charged_by_its_own_cost() {
        let base = Costs::of(&Setting::group(DesignKind::Did, WorkloadKind::Fio, |_| {}).profile);
        let bumped = |adapt: fn(&mut CostProfile)| {
            let spec = Setting::group(DesignKind::Did, WorkloadKind::Fio, |_| {}).spec;
            Costs::of(&Setting::with_profile(spec, adapt).profile).read_ns() - base.read_ns()
        };
        assert_eq!(bumped(|p| p.virtio_blk_ns.dispatch += 10), 10);
        assert_eq!(bumped(|p| p.virtio_blk_ns.pread += 10), 10);
        assert_eq!(bumped(|p| p.virtio_blk_ns.complete += 10), 10);
        assert_eq!(bumped(|p| p.host_ns.ramdisk_read += 10), 10);
        assert_eq!(
            bumped(|p| p.host_ns.virtio_backend_wakeup += 10),
            30,
            "three wake-ups"
        );
    }
}
