//! The x86 machine, a model on the simulator's engine (`crate::engine`,
//! which also runs the VIOAPIC paper's core), assembled from parts that
//! own their state, as a nexosim bench is from its models:
//!
//! - `platform`: the physical machine: every core's LAPIC, the IOMMU and
//!   its interrupt remapping table, the NIC's queue pairs, vhost.
//! - `hypervisor`: per core what the host does there (guest, host or idle,
//!   scheduling, exits), per vCPU what virtualizes it (virtual LAPIC,
//!   VMCS, posted-interrupt descriptor) and the design's mechanisms
//!   (`crate::design`), which it calls and never branches around.
//! - `guest`: per vCPU its frames and interrupt flag, the interpreter of
//!   its programs, its drivers' NAPI, housekeeping and timer thread, and
//!   the run's workload (`workload`), behind one interface.
//!
//! The parts never touch each other's fields. Each handles its events and
//! effects with `&mut self` and narrow inputs (the time, the run's random
//! stream and [`Ledger`], the piece of hardware it drives: a core's
//! `&mut Lapic`, the IOMMU's table; the guest's [`guest::Surroundings`])
//! and lists [`Effect`]s for what another part must do. The machine holds
//! the parts, the event queue and the run's ledger, routes each event and
//! effect to the part that owns it ([`Machine::dispatch`],
//! [`Machine::perform`]) and carries out the few steps that pass from one
//! part to another at once (a delivery to the guest, an exit that stops
//! the guest's step). A design's behaviour is its table plus the mechanism
//! types the table names; a workload's is its module.
//!
//! ```text
//!  engine::run --pop--> Running::handle(Event)
//!      ^                   |
//!      |                   v
//!      |            Machine::dispatch ---> platform | hypervisor | guest
//!      |                   |                 (the part the event is for)
//!      |                   v                         |  lists Effects
//!      +--Schedule/Cancel-- Machine::apply <---------+
//!                              |  (depth first: an effect's own effects
//!                              |   before the next one's)
//!                              v
//!                          Machine::perform ---> the part the effect is for
//! ```
//!
//! The queue under the engine is a 4-ary heap (`crate::queue`): the
//! hottest code of a run, so kept to one integer comparison per step.

/// Runs `$body` with `$inputs`, the guest's inputs borrowed from the
/// machine `$m`'s other parts.
macro_rules! with_inputs {
    ($m:ident, |$inputs:ident| $body:expr) => {{
        let mut around = Around {
            hypervisor: &$m.hypervisor,
            platform: &mut $m.platform,
        };
        let mut $inputs: guest::Inputs<Around> = guest::Inputs {
            now: $m.now,
            rng: &mut $m.rng,
            ledger: &mut $m.ledger,
            topology: &$m.topology,
            around: &mut around,
        };
        $body
    }};
}

mod build;
mod checker;
mod effects;
#[cfg(test)]
mod fixture;
mod guest;
mod hypervisor;
mod ledger;
mod network;
mod platform;
mod topology;
mod workload;

use std::collections::BTreeMap;

use dirq_arch::clock::Clock;
use dirq_stats::f64_of;

use crate::engine;
use crate::metrics::{ExitReason, Throughput, WorkloadFigures};
use crate::queue::{EventQueue, Keyed};
use crate::rng::Rng;

pub(crate) use checker::Checker;
use effects::{Effect, Effects};
use guest::{Guest, Surroundings};
use hypervisor::{Delivery, Halt, Hypervisor, Mode, NmiMessage};
pub(crate) use ledger::{Counters, Ledger};
use platform::{BackendJob, Platform, Ring};
use topology::Topology;
use workload::WorkloadEvent;

// Guest vectors (what the guest OS programmed), in Linux's layout.
pub(crate) const GUEST_VF_VECTOR: u8 = 0x41;
/// The VF's transmit event queue's vector (`platform::tx_completion`): the
/// next one after the receive queue's that Linux's allocator of the time
/// hands out (`__assign_irq_vector` steps by 8).
pub(crate) const GUEST_VF_TX_VECTOR: u8 = 0x49;
pub(crate) const GUEST_VIRTIO_VECTOR: u8 = 0x51;
pub(crate) const GUEST_TIMER_VECTOR: u8 = 0xEC;
pub(crate) const GUEST_IPI_VECTOR: u8 = 0xFB;
// Host vectors.
const HOST_TIMER_VECTOR: u8 = 0xEF;
const HOST_KICK_VECTOR: u8 = 0xFD;
const POSTED_NOTIFICATION_VECTOR: u8 = 0xF2;
/// VT-d posting's NV while a vCPU is blocked (Linux's
/// POSTED_INTR_WAKEUP_VECTOR).
const POSTED_WAKEUP_VECTOR: u8 = 0xF1;
/// The AMD IOMMU's GA log interrupt, on the housekeeping core.
const GA_LOG_VECTOR: u8 = 0xE1;

/// The housekeeping core: backends, DID's designated timer core.
const HOUSEKEEPING_CORE: usize = 0;

fn is_guest_vector(vector: u8) -> bool {
    matches!(
        vector,
        GUEST_VF_VECTOR
            | GUEST_VF_TX_VECTOR
            | GUEST_VIRTIO_VECTOR
            | GUEST_TIMER_VECTOR
            | GUEST_IPI_VECTOR
    )
}

/// A core, vCPU, VM or queue-pair index as the u32 an event, a trace or a
/// register field carries: the scenario's counts are u32, so every index
/// fits.
pub(crate) fn index_u32(index: usize) -> u32 {
    u32::try_from(index).expect("indices come from u32 counts")
}

/// A clock standing at a time, for the LAPIC models.
struct At(u64);
impl Clock for At {
    fn now_ns(&self) -> u64 {
        self.0
    }
}

/// What happens at a time: an event of the hardware or of the
/// hypervisor's mechanisms, or a workload's own event, which the workload
/// handles ([`workload::WorkloadEvent`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// A frame of the NIC's Poisson source reaches a ring (the UDP
    /// receivers' traffic).
    PacketArrival {
        pair: u32,
        ring: Ring,
    },
    CoalesceTimeout {
        pair: u32,
    },
    /// The VF posts a transmit completion (`platform::tx_completion`).
    TxCompletion {
        pair: u32,
    },
    /// The transmit event queue's delay has passed.
    TxCoalesceTimeout {
        pair: u32,
    },
    BackendDone {
        pair: u32,
        job: BackendJob,
    },
    /// QEMU's virtio-blk sends the MSI of a read (`platform::virtio_blk`).
    BlockReadDone {
        pair: u32,
    },
    HostDone {
        core: u32,
    },
    GuestStep {
        vcpu: u32,
    },
    PhysicalTimer {
        core: u32,
    },
    HostTimer {
        vcpu: u32,
    },
    SliceEnd {
        core: u32,
    },
    /// The host's scheduler tick on a guest core.
    HostTick {
        core: u32,
    },
    /// The guest's housekeeping pass is due.
    Housekeeping {
        vcpu: u32,
    },
    /// The hypervisor, done emulating an ICR write, sends the IPI.
    GuestIpi {
        vcpu: u32,
    },
    /// A guest IPI the sending CPU posts itself (IPIv, AVIC) arrives.
    PostedIpi {
        vcpu: u32,
    },
    /// The throttling interval of the host NIC queue carrying a VM's PV
    /// traffic ran out (`platform::vhost`).
    HostNicTimeout {
        vm: u32,
    },
    Workload(WorkloadEvent),
}

/// How many kinds of event are cancellable (see [`Keyed for Event`]).
const CANCELLABLE_KINDS: usize = 8;
/// The kind of a cancellable workload event ([`WorkloadEvent::slot`]).
const WORKLOAD_KIND: usize = 6;

/// The cancellable events: one pending at most per (kind, core, vCPU or
/// queue pair); rescheduling one replaces it.
impl Keyed for Event {
    fn key(&self) -> Option<usize> {
        let (kind, id) = match *self {
            Event::CoalesceTimeout { pair } => (0, pair),
            Event::HostDone { core } => (1, core),
            Event::GuestStep { vcpu } => (2, vcpu),
            Event::PhysicalTimer { core } => (3, core),
            Event::HostTimer { vcpu } => (4, vcpu),
            Event::SliceEnd { core } => (5, core),
            Event::Workload(event) => (WORKLOAD_KIND, event.slot()?),
            Event::TxCoalesceTimeout { pair } => (7, pair),
            _ => return None,
        };
        Some(id as usize * CANCELLABLE_KINDS + kind)
    }
}

/// The machine on the engine: its effects taken out while it runs, so
/// that a part can change its state and list effects at once.
struct Running<'m> {
    machine: &'m mut Machine,
    fx: Effects,
}

impl engine::Model for Running<'_> {
    type Event = Event;

    fn queue(&mut self) -> &mut EventQueue<Event> {
        &mut self.fx.queue
    }

    fn handle(&mut self, now: u64, event: Event) {
        let machine = &mut *self.machine;
        machine.now = now;
        machine.dispatch(event, &mut self.fx);
        // Hot path: many events list no effect; skip the call then.
        if !self.fx.stack.is_empty() {
            machine.apply(&mut self.fx);
        }
        machine.ledger.checker.event_done();
    }
}

pub(crate) struct Machine {
    now: u64,
    end: u64,
    /// The event queue and the effects not yet applied; taken out while
    /// the engine runs.
    fx: Effects,
    rng: Rng,
    topology: Topology,
    platform: Platform,
    hypervisor: Hypervisor,
    guest: Guest,
    pub(crate) ledger: Ledger,
}

/// What the guest touches outside itself, borrowed from the platform and
/// the hypervisor for one call.
struct Around<'a> {
    hypervisor: &'a Hypervisor,
    platform: &'a mut Platform,
}

impl Surroundings for Around<'_> {
    fn in_guest(&self, vcpu: usize) -> bool {
        self.hypervisor.in_guest(vcpu)
    }

    fn ring_level(&self, pair: usize, ring: Ring) -> u32 {
        self.platform.ring_level(pair, ring)
    }

    fn mask(&mut self, pair: usize, ring: Ring) {
        self.platform.mask(pair, ring);
    }

    fn unmask(&mut self, pair: usize, ring: Ring) {
        self.platform.unmask(pair, ring);
    }

    fn take(&mut self, pair: usize, ring: Ring, frames: u32) -> u32 {
        self.platform.take(pair, ring, frames)
    }
}

impl Machine {
    pub(crate) fn run(&mut self) {
        let fx = std::mem::take(&mut self.fx);
        let end = self.end;
        let mut running = Running { machine: self, fx };
        let events = engine::run(&mut running, end);
        self.fx = running.fx;
        self.ledger.counters.events += events;
        self.now = self.end;
        self.finish();
    }

    /// The one place effects take place: what `fx` lists since the last
    /// call. Each effect's own effects are applied before the next one
    /// (depth first), so a part's effects happen in the order it listed
    /// them.
    fn apply(&mut self, fx: &mut Effects) {
        loop {
            // What the last part listed, put in order (most list one
            // effect or none: nothing to reverse).
            if fx.stack.len() - fx.listed_from > 1 {
                fx.stack[fx.listed_from..].reverse();
            }
            let Some(effect) = fx.stack.pop() else {
                break;
            };
            fx.listed_from = fx.stack.len();
            self.perform(effect, fx);
        }
        fx.listed_from = 0;
    }

    /// The guest runs on, after what the running part listed: with
    /// nothing listed, running it is the very next effect anyway, so it
    /// runs at once, as a schedule is applied at once, which spares the hot
    /// paths a trip through the list and [`Self::perform`]. (Only as the
    /// last thing a caller does: nothing it does after may come first.)
    fn run_on(&mut self, vcpu: usize, fx: &mut Effects) {
        if fx.nothing_listed() {
            self.run_guest(vcpu, fx);
        } else {
            fx.push(Effect::RunGuest(vcpu));
        }
    }

    /// The guest may take what is pending, after what the running part
    /// listed: at once if nothing.
    fn deliver_on(&mut self, vcpu: usize, fx: &mut Effects) {
        if fx.nothing_listed() {
            self.try_deliver(vcpu, fx);
        } else {
            fx.push(Effect::TryDeliver(vcpu));
        }
    }

    /// Routes an effect to the part it is for.
    fn perform(&mut self, effect: Effect, fx: &mut Effects) {
        let now = self.now;
        match effect {
            Effect::Schedule { at, event } => fx.queue.schedule(at, event),
            Effect::Cancel(event) => {
                if let Some(key) = event.key() {
                    fx.queue.cancel(key);
                }
            }
            Effect::Exit {
                vcpu,
                reason,
                service_ns,
            } => self.exit(vcpu, reason, service_ns, fx),
            Effect::RunGuest(vcpu) => self.run_guest(vcpu, fx),
            Effect::TryDeliver(vcpu) => self.try_deliver(vcpu, fx),
            Effect::GuestEoi(vcpu) => {
                let believed = self.guest.eoi(vcpu);
                let lapic = self.platform.lapic_mut(self.hypervisor.home_core(vcpu));
                self.hypervisor
                    .guest_eoi(vcpu, believed, lapic, &mut self.ledger, fx);
                // Whatever it completed, the guest may take the next one.
                self.deliver_on(vcpu, fx);
            }
            Effect::InterruptsOn(vcpu) => {
                if !self.hypervisor.interrupts_on(vcpu, fx) {
                    self.deliver_on(vcpu, fx);
                }
            }
            Effect::TimerWrite { vcpu, write } => {
                let deadline = self.guest.timer_deadline(vcpu, write, now);
                let lapic = self.platform.lapic_mut(self.hypervisor.home_core(vcpu));
                self.hypervisor
                    .timer_write(vcpu, deadline, now, lapic, &mut self.ledger, fx);
            }
            Effect::DeviceAccess(vcpu) => {
                if let Some(reason) = self.guest.take_access(vcpu) {
                    self.hypervisor.access(vcpu, reason, fx);
                }
            }
            Effect::WriteIcr { vcpu, icr } => {
                let targets = self.hypervisor.route_icr(vcpu, icr, now);
                with_inputs!(self, |inputs| self.guest.ipi_sent(
                    vcpu,
                    &targets,
                    &mut inputs
                ));
                self.hypervisor
                    .send_guest_ipis(vcpu, icr, &targets, now, fx);
            }
            Effect::GuestHalt(vcpu) => self.guest_halt(vcpu, fx),
            Effect::VirtioKick(vcpu) => {
                if self.platform.virtio_kick(self.topology.vm_of(vcpu)) {
                    self.hypervisor.io_notify(vcpu, fx);
                }
            }
            Effect::Notify(vcpu) => self.hypervisor.io_notify(vcpu, fx),
            Effect::RxPacket { pair, ring } => {
                self.platform
                    .packet_arrival(pair, ring, now, &mut self.ledger, fx)
            }
            Effect::RxBurst { pair, frames } => {
                self.platform
                    .rx_burst(pair, frames, now, &mut self.ledger, fx)
            }
            Effect::RingTaken { pair, ring, frames } => {
                self.platform.take(pair, ring, frames);
            }
            Effect::VfSent { pair, start, bytes } => self.platform.vf_sent(pair, start, bytes, fx),
            Effect::BackendStart { pair, job } => self.platform.backend_start(pair, job, now, fx),
            Effect::BlockRead { pair } => self.platform.block_read(pair, now, fx),
            Effect::Sent { pair } => {
                with_inputs!(self, |inputs| self.guest.sent(pair, &mut inputs, fx))
            }
            Effect::TxReaped { pair } => self.platform.tx_reaped(pair, now, &mut self.ledger, fx),
            Effect::Poke(vcpu) => {
                self.guest.suspend(vcpu, now, fx);
                self.run_guest(vcpu, fx);
            }
            Effect::DeliverPhysical { core, vector } => self.deliver_physical(core, vector, fx),
            Effect::HostInterrupt { core, message } => self.host_interrupt(core, message, fx),
            Effect::Nmi { core, message } => {
                self.hypervisor
                    .send_nmi(core, message, now, &mut self.ledger, fx)
            }
            Effect::HostVector { core, vector } => {
                self.hypervisor
                    .host_vector(core, vector, now, &mut self.ledger, fx)
            }
            Effect::QueueVirtual { vcpu, vector } => {
                self.hypervisor
                    .queue_virtual(vcpu, vector, &mut self.ledger, fx)
            }
            Effect::SignalVirtual { vcpu, vector } => {
                self.hypervisor
                    .signal_virtual(vcpu, vector, &mut self.ledger, fx)
            }
            Effect::Post {
                vcpu,
                vector,
                source,
            } => self
                .hypervisor
                .hardware_post(vcpu, vector, source, &mut self.ledger, fx),
            Effect::Wake(vcpu) => self.hypervisor.wake(vcpu, now, &mut self.ledger, fx),
            Effect::Timer { vcpu, effect } => {
                let lapic = self.platform.lapic_mut(self.hypervisor.home_core(vcpu));
                self.hypervisor
                    .apply_timer_effect(vcpu, effect, now, lapic, &mut self.ledger, fx);
            }
            Effect::PrepareEntry(vcpu) => {
                let interruptible = self.guest.interruptible(vcpu);
                let lapic = self.platform.lapic_mut(self.hypervisor.home_core(vcpu));
                self.hypervisor
                    .prepare_entry(vcpu, interruptible, lapic, &mut self.ledger);
            }
            Effect::EnterGuest(core) => self.enter_guest(core, fx),
            Effect::FinishHostWork { core, extra_ns } => self.hypervisor.finish_host_work(
                core,
                extra_ns,
                now,
                &mut self.platform,
                &mut self.ledger,
                fx,
            ),
        }
    }

    /// Routes an event to the part it is for.
    fn dispatch(&mut self, event: Event, fx: &mut Effects) {
        let now = self.now;
        match event {
            Event::PacketArrival { pair, ring } => self.platform.source_arrival(
                pair as usize,
                ring,
                now,
                &mut self.rng,
                &mut self.ledger,
                fx,
            ),
            Event::CoalesceTimeout { pair } => {
                self.platform
                    .maybe_fire_vf(pair as usize, true, now, &mut self.ledger, fx)
            }
            Event::TxCompletion { pair } => {
                self.platform
                    .tx_completed(pair as usize, now, &mut self.ledger, fx)
            }
            Event::TxCoalesceTimeout { pair } => {
                self.platform
                    .maybe_fire_tx(pair as usize, now, &mut self.ledger, fx)
            }
            Event::BackendDone { pair, job } => {
                self.platform
                    .backend_done(pair as usize, job, now, &mut self.ledger, fx)
            }
            Event::BlockReadDone { pair } => {
                self.platform
                    .block_read_done(pair as usize, now, &mut self.ledger, fx)
            }
            Event::HostDone { core } => {
                let core = core as usize;
                if self.hypervisor.mode(core) == Mode::Host {
                    let lapic = self.platform.lapic_mut(core);
                    self.hypervisor.host_done(core, lapic, fx);
                }
            }
            Event::GuestStep { vcpu } => {
                with_inputs!(self, |inputs| self.guest.finish_step(
                    vcpu as usize,
                    &mut inputs,
                    fx
                ))
            }
            Event::PhysicalTimer { core } => {
                let core = core as usize;
                let lapic = self.platform.lapic_mut(core);
                if self
                    .hypervisor
                    .physical_timer(core, now, lapic, &mut self.ledger)
                {
                    self.physical_pending(core, fx);
                }
            }
            Event::HostTimer { vcpu } => {
                let vcpu = vcpu as usize;
                let lapic = self.platform.lapic_mut(self.hypervisor.home_core(vcpu));
                self.hypervisor
                    .host_timer(vcpu, now, lapic, &mut self.ledger, fx);
            }
            Event::SliceEnd { core } => {
                self.host_interrupt(core as usize, NmiMessage::SliceEnd, fx)
            }
            Event::HostTick { core } => self.hypervisor.host_tick(core as usize, now, fx),
            Event::Housekeeping { vcpu } => {
                let vcpu = vcpu as usize;
                let halted = self.hypervisor.halted(vcpu);
                let hlt_exits = self.hypervisor.hlt_exits(vcpu);
                self.guest
                    .housekeeping_due(vcpu, halted, hlt_exits, now, &mut self.rng, fx);
            }
            Event::GuestIpi { vcpu } => {
                let vcpu = vcpu as usize;
                self.ledger
                    .raise(self.topology.vm_of(vcpu), GUEST_IPI_VECTOR, now);
                self.hypervisor
                    .signal_virtual(vcpu, GUEST_IPI_VECTOR, &mut self.ledger, fx);
            }
            Event::PostedIpi { vcpu } => {
                let vcpu = vcpu as usize;
                self.ledger
                    .raise(self.topology.vm_of(vcpu), GUEST_IPI_VECTOR, now);
                self.hypervisor.hardware_post(
                    vcpu,
                    GUEST_IPI_VECTOR,
                    crate::design::mechanism::posting::PostSource::Cpu,
                    &mut self.ledger,
                    fx,
                );
            }
            Event::HostNicTimeout { vm } => self.platform.host_nic_timeout(vm as usize, now, fx),
            Event::Workload(event) => {
                with_inputs!(self, |inputs| self.guest.workload_event(
                    event,
                    &mut inputs,
                    fx
                ))
            }
        }
    }

    /// A VM exit: the guest's step stops, then the host takes the core.
    fn exit(&mut self, vcpu: usize, reason: ExitReason, service_ns: u64, fx: &mut Effects) {
        self.guest.suspend(vcpu, self.now, fx);
        self.hypervisor.exit(
            vcpu,
            reason,
            service_ns,
            self.now,
            &mut self.rng,
            &mut self.ledger,
            fx,
        );
    }

    fn run_guest(&mut self, vcpu: usize, fx: &mut Effects) {
        with_inputs!(self, |inputs| self.guest.run(vcpu, &mut inputs, fx));
    }

    /// The CPU delivers to `vcpu`'s guest, in guest mode, what it can take
    /// now (each delivery starts a handler, which masks interrupts unless
    /// the guest nests); then the guest runs on.
    fn try_deliver(&mut self, vcpu: usize, fx: &mut Effects) {
        if !self.hypervisor.in_guest(vcpu) {
            return;
        }
        let core = self.hypervisor.home_core(vcpu);
        while self.guest.interruptible(vcpu) {
            let lapic = self.platform.lapic_mut(core);
            match self
                .hypervisor
                .next_delivery(vcpu, lapic, &mut self.ledger, fx)
            {
                Delivery::Handler(vector) => {
                    with_inputs!(self, |inputs| self.guest.deliver(
                        vcpu,
                        vector,
                        &mut inputs,
                        fx
                    ))
                }
                Delivery::Again => {}
                Delivery::Stop => return,
                Delivery::Nothing => break,
            }
        }
        // A new handler (or nothing new: then this is a no-op) runs.
        self.run_on(vcpu, fx);
    }

    /// The guest executes HLT.
    fn guest_halt(&mut self, vcpu: usize, fx: &mut Effects) {
        let lapic = self.platform.lapic(self.hypervisor.home_core(vcpu));
        match self
            .hypervisor
            .guest_halt(vcpu, lapic, &mut self.ledger, fx)
        {
            Halt::Exits => {}
            Halt::Delivers => fx.push(Effect::TryDeliver(vcpu)),
            Halt::Sleeps => {
                self.guest.suspend(vcpu, self.now, fx);
                self.hypervisor
                    .sleep_in_guest(vcpu, self.now, &mut self.ledger);
            }
        }
    }

    /// A fixed interrupt arrives at `core`'s LAPIC; one that merged with
    /// one pending there is its VM's.
    fn deliver_physical(&mut self, core: usize, vector: u8, fx: &mut Effects) {
        if self.platform.deliver_physical(core, vector) {
            if let Some((vm, guest_vector)) = self.hypervisor.physical_owner(core, vector) {
                self.ledger.merged(vm, guest_vector);
            }
        }
        self.physical_pending(core, fx);
    }

    /// Something is pending in `core`'s IRR: the guest there may take it.
    fn physical_pending(&mut self, core: usize, fx: &mut Effects) {
        let lapic = self.platform.lapic_mut(core);
        if let Some(vcpu) =
            self.hypervisor
                .physical_pending(core, self.now, lapic, &mut self.ledger, fx)
        {
            self.try_deliver(vcpu, fx);
        }
    }

    /// A host IPI or hypervisor tick for `core`: an NMI, or a fixed vector
    /// at its LAPIC.
    fn host_interrupt(&mut self, core: usize, message: NmiMessage, fx: &mut Effects) {
        if let Some(vector) =
            self.hypervisor
                .host_interrupt(core, message, self.now, &mut self.ledger, fx)
        {
            self.deliver_physical(core, vector, fx);
        }
    }

    /// `core` enters its vCPU's guest, which starts the handler of what
    /// the entry injects, then may take what is pending; after an exit (the
    /// host ran there) the guest's next work pays the exit's indirect cost.
    fn enter_guest(&mut self, core: usize, fx: &mut Effects) {
        let from_host = self.hypervisor.mode(core) == Mode::Host;
        let Some((vcpu, injected)) = self
            .hypervisor
            .enter_guest(core, self.now, &mut self.ledger)
        else {
            return;
        };
        if from_host {
            self.guest.reentered(vcpu);
        }
        if let Some(vector) = injected {
            with_inputs!(self, |inputs| self.guest.deliver(
                vcpu,
                vector,
                &mut inputs,
                fx
            ));
        }
        self.deliver_on(vcpu, fx);
    }

    /// End of run: the time in each mode, the guests' steps stopped, the
    /// interrupts still outstanding settled.
    fn finish(&mut self) {
        let (guest_ns, asleep_ns, guest_cores) = self.hypervisor.close(self.now, &mut self.ledger);
        let counters = &mut self.ledger.counters;
        counters.guest_ns = guest_ns;
        counters.asleep_ns = asleep_ns;
        counters.guest_core_ns = guest_cores * self.end;
        let mut fx = std::mem::take(&mut self.fx);
        for vcpu in 0..self.topology.vcpu_count() {
            self.guest.suspend(vcpu, self.now, &mut fx);
        }
        self.apply(&mut fx);
        self.fx = fx;
        self.ledger.counters.spin_ns = self.guest.spin_ns();
        self.hypervisor.count_lost(&self.platform, &mut self.ledger);
        self.hypervisor
            .count_unwoken_sleepers(&self.platform, &mut self.ledger);
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.ledger.counters
    }

    pub(crate) fn checker(&self) -> &Checker {
        &self.ledger.checker
    }

    pub(crate) fn take_trace(&mut self) -> Option<crate::trace::Trace> {
        self.ledger.trace.take()
    }

    pub(crate) fn iommu_blocked(&self) -> u64 {
        self.platform.iommu_blocked()
    }

    pub(crate) fn dropped_packets(&self) -> u64 {
        self.platform.dropped_packets()
    }

    /// The workload's figures beyond the common ones.
    pub(crate) fn workload_figures(&self) -> WorkloadFigures {
        self.guest.figures(&self.ledger.counters)
    }

    /// The workload's throughput over the run, if it has one.
    pub(crate) fn throughput(&self) -> Option<Throughput> {
        let seconds = f64_of(self.end) / 1e9;
        self.guest.throughput(&self.ledger.counters, seconds)
    }

    /// Parameters the workload adds to the run's.
    pub(crate) fn workload_params(&self, params: &mut BTreeMap<String, serde_json::Value>) {
        self.guest.params(params);
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::Setting;
    use super::*;
    use crate::design::DesignKind;
    use crate::metrics::Invariant;
    use crate::scenario::WorkloadKind;

    fn ran(setting: &Setting) -> Machine {
        let mut machine = setting.machine();
        machine.run();
        machine
    }

    fn violations(machine: &Machine) -> u64 {
        Invariant::ALL
            .iter()
            .map(|&invariant| machine.checker().violations_of(invariant))
            .sum()
    }

    #[test]
    fn physical_interrupts_exit_only_where_the_design_traps_them() {
        let external = ExitReason::ExternalInterrupt.index();
        let vanilla = ran(&Setting::single(DesignKind::Vanilla));
        assert!(vanilla.counters().exits[external] > 0);
        let did = ran(&Setting::single(DesignKind::Did));
        assert_eq!(did.counters().exits[external], 0);
        assert!(did.counters().events > 0);
    }

    #[test]
    fn guest_ipis_run_clean_under_every_sender() {
        for design in [
            DesignKind::Vanilla,
            DesignKind::Did,
            DesignKind::ApicvPiIpiv,
        ] {
            let machine = ran(&Setting::one_vm(design, WorkloadKind::Ipi, 2));
            assert_eq!(violations(&machine), 0, "{design:?}");
            let exits: u64 = machine.counters().exits.iter().sum();
            assert!(exits > 0, "{design:?}");
        }
    }
}
