//! The effects mechanisms list for the engine, and the list they go on.

use super::guest::TimerWrite;
use super::hypervisor::NmiMessage;
use super::platform::{BackendJob, Ring};
use super::Event;
use crate::design::mechanism::posting::PostSource;
use crate::design::mechanism::timer::TimerEffect;
use crate::metrics::ExitReason;
use crate::queue::{EventQueue, Keyed};

/// What a mechanism asks the engine to do. Mechanisms never call each
/// other or the engine: they change their own state and list effects, and
/// [`Machine::apply`](super::Machine) carries them out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Effect {
    /// Schedule `event` at `at` (replacing a pending cancellable one).
    Schedule {
        at: u64,
        event: Event,
    },
    /// Withdraw the pending cancellable event with `event`'s key.
    Cancel(Event),
    /// A VM exit; the host is then busy for `service_ns`.
    Exit {
        vcpu: usize,
        reason: ExitReason,
        service_ns: u64,
    },
    /// Run the guest's instructions until one takes time.
    RunGuest(usize),
    /// Deliver whatever the guest can take now.
    TryDeliver(usize),
    GuestEoi(usize),
    /// The guest enabled interrupts (STI, IRET): an interrupt window the
    /// hypervisor asked for exits, else a delivery attempt.
    InterruptsOn(usize),
    TimerWrite {
        vcpu: usize,
        write: TimerWrite,
    },
    /// A housekeeping access (`guest::housekeeping`).
    DeviceAccess(usize),
    /// The guest writes `icr` on `vcpu`'s vLAPIC (the x2APIC ICR MSR): the
    /// VM's APIC bus routes the IPI and the design's IPI sender sends it
    /// (`hypervisor::ipi`).
    WriteIcr {
        vcpu: usize,
        icr: u64,
    },
    GuestHalt(usize),
    /// The guest tells vhost of a buffer to transmit, if vhost asks to
    /// be told (`platform::vhost`).
    VirtioKick(usize),
    /// The guest notifies a virtio device: a port write, which exits
    /// under a hypervisor.
    Notify(usize),
    /// A frame from the workload's peer reaches `pair`'s `ring`: the VF's
    /// ring, or virtio's through vhost (and the host's NIC first, for a
    /// peer on the wire).
    RxPacket {
        pair: usize,
        ring: Ring,
    },
    /// `frames` frames land in `pair`'s VF ring at once (a generator's
    /// burst).
    RxBurst {
        pair: usize,
        frames: u32,
    },
    /// A driver that polls took `frames` frames from `pair`'s `ring`.
    RingTaken {
        pair: usize,
        ring: Ring,
        frames: u32,
    },
    /// The guest's driver handed the VF `bytes` to send from `start`
    /// (its completion, `tx_completion`).
    VfSent {
        pair: usize,
        start: u64,
        bytes: u64,
    },
    /// vhost passed one of `pair`'s guest's TX buffers on: the workload's
    /// peer's side has it.
    Sent {
        pair: usize,
    },
    /// The VM's vhost worker takes `job` (a message for a PV guest).
    BackendStart {
        pair: usize,
        job: BackendJob,
    },
    /// `pair`'s guest hands its virtio-blk a read (QEMU's, `virtio_blk`).
    BlockRead {
        pair: usize,
    },
    /// The guest's transmit poll reaped the completions and re-armed the
    /// transmit event queue (`tx_completion`).
    TxReaped {
        pair: usize,
    },
    /// Stop the vCPU's background spin and run its guest again (a
    /// poll-mode driver sees new packets).
    Poke(usize),
    /// A fixed interrupt reaches a core's LAPIC.
    DeliverPhysical {
        core: usize,
        vector: u8,
    },
    HostInterrupt {
        core: usize,
        message: NmiMessage,
    },
    Nmi {
        core: usize,
        message: NmiMessage,
    },
    /// The host's handler for a vector it took.
    HostVector {
        core: usize,
        vector: u8,
    },
    QueueVirtual {
        vcpu: usize,
        vector: u8,
    },
    /// Hardware (the IOMMU, or a CPU sending a virtualized IPI) posts
    /// `vector` for `vcpu`.
    Post {
        vcpu: usize,
        vector: u8,
        source: PostSource,
    },
    SignalVirtual {
        vcpu: usize,
        vector: u8,
    },
    Wake(usize),
    /// What the design's timer path asked for `vcpu`'s timer.
    Timer {
        vcpu: usize,
        effect: TimerEffect,
    },
    /// The design's injection readies `vcpu`'s virtual interrupts for the
    /// coming entry.
    PrepareEntry(usize),
    EnterGuest(usize),
    /// The rest of the host's work once its interrupt handlers ran.
    FinishHostWork {
        core: usize,
        extra_ns: u64,
    },
}

/// The effects not yet applied, as a stack whose top is the next one: the
/// running mechanism lists its effects from `listed_from` up, and the
/// engine reverses them into order when it returns. The event queue lives
/// here too: a schedule or cancellation listed before anything else by the
/// running mechanism would be the very next effect applied, so it is
/// applied at once, which keeps the order and skips a trip through the
/// stack for the most common effects.
#[derive(Default)]
pub(super) struct Effects {
    pub(super) stack: Vec<Effect>,
    pub(super) listed_from: usize,
    pub(super) queue: EventQueue<Event>,
}

impl Effects {
    /// Nothing is applied at once: every effect stays listed (tests).
    #[cfg(test)]
    pub(super) const LIST_ALL: usize = usize::MAX;

    pub(super) fn push(&mut self, effect: Effect) {
        self.stack.push(effect);
    }

    /// Whether the running mechanism has listed no effect yet.
    pub(super) fn nothing_listed(&self) -> bool {
        self.stack.len() == self.listed_from
    }

    /// Always inlined, as `EventQueue::schedule` is (hot path).
    #[inline(always)]
    pub(super) fn schedule(&mut self, at: u64, event: impl Into<Event>) {
        let event = event.into();
        if self.nothing_listed() {
            self.queue.schedule(at, event);
        } else {
            self.push(Effect::Schedule { at, event });
        }
    }

    /// Withdraws the pending cancellable event with `event`'s key.
    pub(super) fn cancel(&mut self, event: Event) {
        if !self.nothing_listed() {
            self.push(Effect::Cancel(event));
        } else if let Some(key) = event.key() {
            self.queue.cancel(key);
        }
    }

    /// Schedules the cancellable `event` at `at`, or cancels it when `at`
    /// is None.
    pub(super) fn reschedule(&mut self, at: Option<u64>, event: Event) {
        match at {
            Some(at) => self.schedule(at, event),
            None => self.cancel(event),
        }
    }

    /// Whether the cancellable `event`'s key has an event pending.
    pub(super) fn is_pending(&self, event: Event) -> bool {
        event.key().is_some_and(|key| self.queue.is_pending(key))
    }

    pub(super) fn exit(&mut self, vcpu: usize, reason: ExitReason, service_ns: u64) {
        self.push(Effect::Exit {
            vcpu,
            reason,
            service_ns,
        });
    }
}
