//! The guest: per vCPU its stack of frames (the background task and the
//! handlers in progress), its interrupt flag and its step in progress; the
//! interpreter that runs its programs ([`Step`], `programs`); the drivers'
//! NAPI contexts (`napi`); its housekeeping passes (`housekeeping`); its
//! timer thread (`timer_thread`); and the run's workload, whose own steps
//! it hands over.
//!
//! It owns no hardware: its drivers read and write their queue pairs'
//! rings, and learn whether a vCPU runs, through [`Surroundings`]; what it
//! asks of the hypervisor (an EOI, a timer write, a halt, interrupts
//! enabled, an access that may exit) it lists as effects.

mod housekeeping;
mod napi;
mod programs;
mod timer_thread;

use std::collections::BTreeMap;

use super::effects::{Effect, Effects};
use super::ledger::{Counters, Ledger};
use super::topology::Topology;
use super::workload::{Ctx, MachineState, StepOutcome, Taken, Workload, WorkloadEvent};
use super::{
    index_u32, is_guest_vector, Event, Ring, GUEST_IPI_VECTOR, GUEST_TIMER_VECTOR,
    GUEST_VF_TX_VECTOR, GUEST_VF_VECTOR, GUEST_VIRTIO_VECTOR,
};
use crate::metrics::{Throughput, WorkloadFigures};
use crate::profile::{CostProfile, GuestHousekeeping, GuestNs, IdleExitsPerS, VirtioBlkNs};
use crate::rng::Rng;
use crate::scenario::RunSpec;
use crate::service::Sampler;

use housekeeping::Accesses;
use napi::Napi;
use programs::TX_HANDLER;
pub(super) use programs::{Handlers, Step, TimerWrite, Work, PLAIN_HANDLER, RX_EACH_HANDLER, SPIN};
use timer_thread::{TimerThreads, TIMER_HANDLER, TIMER_THREAD, TIMER_THREAD_PERIOD_NS};

/// What the guest touches outside itself: its queue pairs' rings (the
/// drivers read them and write their interrupt masks) and whether a vCPU
/// runs in guest mode.
pub(super) trait Surroundings {
    fn in_guest(&self, vcpu: usize) -> bool;
    fn ring_level(&self, pair: usize, ring: Ring) -> u32;
    /// The driver masks the ring's interrupt for its poll.
    fn mask(&mut self, pair: usize, ring: Ring);
    /// The driver re-enables it after its poll.
    fn unmask(&mut self, pair: usize, ring: Ring);
    /// The driver took `frames` frames: how many are left.
    fn take(&mut self, pair: usize, ring: Ring, frames: u32) -> u32;
}

/// What the machine hands the guest for one call: the time, the run's
/// random stream and ledger, where everything is, and its surroundings.
pub(super) struct Inputs<'a, S: Surroundings> {
    pub(super) now: u64,
    pub(super) rng: &'a mut Rng,
    pub(super) ledger: &'a mut Ledger,
    pub(super) topology: &'a Topology,
    pub(super) around: &'a mut S,
}

/// A program in progress: the background task, or a handler.
#[derive(Clone, Copy, Debug)]
pub(super) struct Frame {
    pub(super) program: &'static [Step],
    pub(super) pc: usize,
    /// Remaining ns of the current timed step, when it has started.
    pub(super) remaining: Option<u64>,
    /// The vector this handler serves (None: the background task).
    pub(super) vector: Option<u8>,
    pub(super) eoi_done: bool,
    pub(super) saved_interruptible: bool,
}

impl Frame {
    pub(super) fn background(program: &'static [Step]) -> Frame {
        Frame {
            program,
            pc: 0,
            remaining: None,
            vector: None,
            eoi_done: true,
            saved_interruptible: true,
        }
    }

    /// A softirq `program` run at the `irq_exit` of `vector`'s handler,
    /// whose interrupt flag was `interruptible`: interrupt context, not a
    /// task, so a thread that it or a nested handler wakes waits for it;
    /// the handler's EOI is already written.
    pub(super) fn softirq(program: &'static [Step], vector: u8, interruptible: bool) -> Frame {
        Frame {
            program,
            pc: 0,
            remaining: None,
            vector: Some(vector),
            eoi_done: true,
            saved_interruptible: interruptible,
        }
    }
}

/// One vCPU as its guest sees it.
struct GuestCpu {
    frames: Vec<Frame>,
    interruptible: bool,
    step_started: u64,
    /// A timed step (or the spin loop) is executing; `run` must not start
    /// it again.
    step_running: bool,
    spin_since: Option<u64>,
    spin_ns: u64,
    /// The queue pair its driver polls.
    pair: usize,
    /// The accesses the running housekeeping pass has still to make.
    housekeeping: Accesses,
    /// Guest time the next timed step loses refilling what the last
    /// exit's host path displaced (the exit's indirect cost).
    refill_ns: u64,
}

/// The guest's costs, fixed for the run.
struct Costs {
    guest_ns: GuestNs,
    housekeeping: GuestHousekeeping,
    idle_exits_per_s: IdleExitsPerS,
    virtio_blk: VirtioBlkNs,
    /// An exit's indirect cost to the guest's next work.
    exit_indirect: u64,
    /// Its service times' shape, ready to draw.
    sampler: Sampler,
}

pub(super) struct Guest {
    vcpus: Vec<GuestCpu>,
    /// Per queue pair, its drivers' NAPI contexts (VF, virtio).
    napi: Vec<[Napi; 2]>,
    timer_threads: TimerThreads,
    handlers: Handlers,
    workload: Box<dyn Workload>,
    /// Handlers re-enable interrupts (older Linux, Windows).
    nested_interrupts: bool,
    /// The workload's frames are datagrams the guest only counts.
    datagrams: bool,
    costs: Costs,
}

/// The NAPI context index of a ring.
fn napi_index(ring: Ring) -> usize {
    match ring {
        Ring::Vf => 0,
        Ring::Virtio => 1,
    }
}

/// The ring a handler serves: virtio's vector's, or the VF's.
fn ring_of(vector: Option<u8>) -> Ring {
    match vector {
        Some(GUEST_VIRTIO_VECTOR) => Ring::Virtio,
        _ => Ring::Vf,
    }
}

impl Guest {
    /// The guest of `spec`'s VMs running `workload`: each vCPU in its
    /// background program, the VF's NAPI at the group's or the profile's
    /// weight, virtio-net's at the group's or the driver's.
    pub(super) fn new(
        spec: &RunSpec,
        profile: &CostProfile,
        topology: &Topology,
        workload: Box<dyn Workload>,
    ) -> Guest {
        let handlers = Handlers::of(workload.programs());
        let datagrams = workload.traffic().datagrams;
        let vcpus = (0..topology.vcpu_count())
            .map(|vcpu| {
                let index = vcpu - topology.lead(topology.vm_of(vcpu));
                GuestCpu {
                    frames: vec![Frame::background(handlers.program(index, spec.group.idle))],
                    interruptible: true,
                    step_started: 0,
                    step_running: false,
                    spin_since: None,
                    spin_ns: 0,
                    pair: topology.pair_of(vcpu),
                    housekeeping: Accesses::default(),
                    refill_ns: 0,
                }
            })
            .collect();
        let vf_weight = spec
            .group
            .napi_weight
            .unwrap_or(profile.network.napi_weight);
        let virtio_weight = spec
            .group
            .napi_weight
            .unwrap_or(super::platform::VIRTIO_NET_NAPI_WEIGHT);
        Guest {
            vcpus,
            napi: vec![
                [
                    Napi::with_weight(vf_weight),
                    Napi::with_weight(virtio_weight)
                ];
                topology.pair_count()
            ],
            timer_threads: TimerThreads::new(
                topology.vcpu_count(),
                profile.guest_tick.hz,
                workload
                    .timer_thread_period_ns()
                    .unwrap_or(TIMER_THREAD_PERIOD_NS),
            ),
            handlers,
            workload,
            nested_interrupts: spec.group.nested_interrupts,
            datagrams,
            costs: Costs {
                guest_ns: profile.guest_ns.clone(),
                housekeeping: profile.guest_housekeeping.clone(),
                idle_exits_per_s: profile.idle_exits_per_s.clone(),
                virtio_blk: profile.virtio_blk_ns.clone(),
                exit_indirect: profile.host_ns.exit_indirect,
                sampler: profile.service_time.guest.sampler(),
            },
        }
    }

    /// `vcpu`'s guest takes interrupts (IF set).
    pub(super) fn interruptible(&self, vcpu: usize) -> bool {
        self.vcpus[vcpu].interruptible
    }

    /// Time the vCPUs spent spinning, all told.
    pub(super) fn spin_ns(&self) -> u64 {
        self.vcpus.iter().map(|v| v.spin_ns).sum()
    }

    /// The guest starts the handler for `vector`; the checker hears which
    /// vector starts in `vm` and what was in service.
    pub(super) fn deliver<S: Surroundings>(
        &mut self,
        vcpu: usize,
        vector: u8,
        ins: &mut Inputs<S>,
        fx: &mut Effects,
    ) {
        let in_service = self.vcpus[vcpu]
            .frames
            .iter()
            .filter(|frame| !frame.eoi_done)
            .filter_map(|frame| frame.vector)
            .max();
        let vm = ins.topology.vm_of(vcpu);
        ins.ledger
            .checker
            .delivered(vm, vector, is_guest_vector(vector), in_service);
        let core = ins.topology.home_core(vcpu);
        ins.ledger.instant(core, ins.now, "handle", vector);
        self.suspend(vcpu, ins.now, fx);
        let program = match vector {
            GUEST_VF_VECTOR | GUEST_VIRTIO_VECTOR => self.handlers.device,
            GUEST_VF_TX_VECTOR => TX_HANDLER,
            GUEST_TIMER_VECTOR if self.timer_threads.ticks(vcpu) => TIMER_HANDLER,
            GUEST_IPI_VECTOR => self.handlers.ipi,
            _ => PLAIN_HANDLER,
        };
        let v = &mut self.vcpus[vcpu];
        v.frames.push(Frame {
            program,
            pc: 0,
            remaining: None,
            vector: Some(vector),
            eoi_done: false,
            saved_interruptible: v.interruptible,
        });
        // The CPU clears IF on delivery; a nesting guest sets it again.
        v.interruptible = self.nested_interrupts;
    }

    /// `vcpu` re-enters guest mode after the host ran on its core: its next
    /// work pays the exit's indirect cost (the ELI study's cache and TLB
    /// pollution). Lines displaced by two exits in a row are refilled once,
    /// so the debt is set, not added.
    pub(super) fn reentered(&mut self, vcpu: usize) {
        self.vcpus[vcpu].refill_ns = self.costs.exit_indirect;
    }

    /// Stops the clock of the step in progress (exit or nested interrupt).
    pub(super) fn suspend(&mut self, vcpu: usize, now: u64, fx: &mut Effects) {
        fx.cancel(Event::GuestStep {
            vcpu: index_u32(vcpu),
        });
        let v = &mut self.vcpus[vcpu];
        if !std::mem::replace(&mut v.step_running, false) {
            // Already stopped: its remaining time is already up to date.
            return;
        }
        if let Some(since) = v.spin_since.take() {
            v.spin_ns += now - since;
        }
        let started = v.step_started;
        if let Some(frame) = v.frames.last_mut() {
            if let Some(remaining) = frame.remaining.as_mut() {
                *remaining = remaining.saturating_sub(now - started);
            }
        }
    }

    /// One instance of `work`: a guest service time drawn around its
    /// mean with the profile's guest shape.
    fn work_ns(&self, work: Work, rng: &mut Rng) -> u64 {
        let guest = &self.costs.guest_ns;
        let mean = match work {
            Work::IrqEntry => guest.irq_entry,
            Work::TimerToUserRest => guest.timer_irq_to_user.saturating_sub(guest.irq_entry),
            Work::Request => guest.request_work,
            Work::IrqsOffSection => self.costs.housekeeping.irqs_off_ns,
            Work::BlockSubmit => self.costs.virtio_blk.guest_submit,
            Work::BlockComplete => self.costs.virtio_blk.guest_complete,
        };
        self.costs.sampler.draw(mean, rng)
    }

    /// Runs `vcpu`'s guest steps until one takes time, the guest exits or
    /// halts. A step that involves another part of the machine ends the
    /// pass: its effect, then a new pass, which stops at once if the guest
    /// no longer runs.
    pub(super) fn run<S: Surroundings>(
        &mut self,
        vcpu: usize,
        ins: &mut Inputs<S>,
        fx: &mut Effects,
    ) {
        if !ins.around.in_guest(vcpu) || self.vcpus[vcpu].step_running {
            return;
        }
        let now = ins.now;
        loop {
            let Some(frame) = self.vcpus[vcpu].frames.last().copied() else {
                return;
            };
            let handoff = match frame.program[frame.pc] {
                Step::Work(work) => {
                    let remaining = match frame.remaining {
                        Some(remaining) => remaining,
                        None => self.work_ns(work, ins.rng),
                    };
                    self.start_timed(vcpu, remaining, now, fx);
                    return;
                }
                Step::PollRx => {
                    let ring = ring_of(frame.vector);
                    let pair = self.vcpus[vcpu].pair;
                    let level = ins.around.ring_level(pair, ring);
                    if !self.napi[pair][napi_index(ring)].may_take(level) {
                        self.advance(vcpu);
                        continue;
                    }
                    let remaining = frame.remaining.unwrap_or_else(|| {
                        let datagram = self.costs.guest_ns.rx_packet;
                        if self.datagrams {
                            return datagram;
                        }
                        self.workload.rx_work_ns(pair).unwrap_or(datagram)
                    });
                    self.start_timed(vcpu, remaining, now, fx);
                    return;
                }
                Step::Spin => {
                    self.spin(vcpu, now);
                    return;
                }
                Step::Workload(step) => {
                    if let Some(remaining) = frame.remaining {
                        self.start_timed(vcpu, remaining, now, fx);
                        return;
                    }
                    let outcome = self
                        .with_workload(ins, |workload, ctx| workload.on_step(vcpu, step, ctx, fx));
                    match outcome {
                        StepOutcome::Next => {
                            self.advance(vcpu);
                            if fx.nothing_listed() {
                                continue;
                            }
                            fx.push(Effect::RunGuest(vcpu));
                        }
                        StepOutcome::Back => {
                            if let Some(top) = self.vcpus[vcpu].frames.last_mut() {
                                top.pc -= 1;
                            }
                            continue;
                        }
                        StepOutcome::Takes(ns) => self.start_timed(vcpu, ns, now, fx),
                        StepOutcome::Spin => self.spin(vcpu, now),
                    }
                    return;
                }
                Step::MaskRx => {
                    let ring = ring_of(frame.vector);
                    let pair = self.vcpus[vcpu].pair;
                    ins.around.mask(pair, ring);
                    self.napi[pair][napi_index(ring)].start_poll();
                    self.advance(vcpu);
                    continue;
                }
                Step::TakeRx => {
                    let ring = ring_of(frame.vector);
                    let pair = self.vcpus[vcpu].pair;
                    let frames = ins.around.ring_level(pair, ring);
                    ins.around.take(pair, ring, frames);
                    ins.around.unmask(pair, ring);
                    ins.ledger.counters.packets_processed += u64::from(frames);
                    self.advance(vcpu);
                    continue;
                }
                Step::UnmaskRx => {
                    let ring = ring_of(frame.vector);
                    let pair = self.vcpus[vcpu].pair;
                    if ins.around.ring_level(pair, ring) == 0 {
                        ins.around.unmask(pair, ring);
                        self.advance(vcpu);
                        continue;
                    }
                    // The poll used its weight: polled again (`napi`).
                    self.napi[pair][napi_index(ring)].start_poll();
                    self.poll_again(vcpu);
                    continue;
                }
                Step::Eoi => {
                    // The EOI ends in a delivery attempt, which runs the
                    // guest on.
                    self.advance(vcpu);
                    fx.push(Effect::GuestEoi(vcpu));
                    return;
                }
                Step::Sti => {
                    self.advance(vcpu);
                    self.enable_interrupts(vcpu, fx);
                    return;
                }
                Step::Cli => {
                    self.vcpus[vcpu].interruptible = false;
                    self.advance(vcpu);
                    continue;
                }
                Step::NextAccess => {
                    if self.vcpus[vcpu].housekeeping.is_empty() {
                        self.advance(vcpu);
                    } else if let Some(top) = self.vcpus[vcpu].frames.last_mut() {
                        top.pc = 0;
                    }
                    continue;
                }
                Step::ReapTx => Effect::TxReaped {
                    pair: self.vcpus[vcpu].pair,
                },
                Step::DeviceAccess => Effect::DeviceAccess(vcpu),
                Step::Iret => {
                    let v = &mut self.vcpus[vcpu];
                    let popped = v.frames.pop();
                    let restored = popped.is_none_or(|frame| frame.saved_interruptible);
                    if v.frames.is_empty() {
                        v.frames.push(Frame::background(SPIN));
                    }
                    // Back from the last handler: the scheduler switches to
                    // a woken thread (a nested return goes to a handler).
                    let to_task = v.frames.last().is_some_and(|top| top.vector.is_none());
                    if to_task && self.timer_threads.take_woken(vcpu) {
                        v.frames.push(Frame::background(TIMER_THREAD));
                    }
                    if restored {
                        self.enable_interrupts(vcpu, fx);
                        return;
                    }
                    v.interruptible = false;
                    continue;
                }
                Step::WriteTimer(write) => Effect::TimerWrite { vcpu, write },
                Step::WakeTimerThread => {
                    self.timer_threads.wake(vcpu);
                    self.advance(vcpu);
                    continue;
                }
                Step::TickSoftirq => {
                    self.advance(vcpu);
                    self.tick_softirq(vcpu);
                    continue;
                }
                Step::TimerThreadReadsClock => {
                    self.advance(vcpu);
                    if let Some(latency) = self.timer_threads.latency(vcpu, now) {
                        self.with_workload(ins, |workload, ctx| {
                            workload.on_timer_thread(latency, ctx)
                        });
                    }
                    continue;
                }
                Step::Halt => {
                    fx.push(Effect::GuestHalt(vcpu));
                    return;
                }
            };
            self.advance(vcpu);
            fx.push(handoff);
            fx.push(Effect::RunGuest(vcpu));
            return;
        }
    }

    /// `vcpu` spins from `now` until something pokes it (a spin loop has
    /// no work to slow: it refills what an exit displaced for free).
    fn spin(&mut self, vcpu: usize, now: u64) {
        let v = &mut self.vcpus[vcpu];
        v.refill_ns = 0;
        v.spin_since = Some(now);
        v.step_running = true;
    }

    /// Starts (or resumes) `vcpu`'s timed step with `remaining` ns to go,
    /// plus what the guest still owes the last exit's refill.
    fn start_timed(&mut self, vcpu: usize, remaining: u64, now: u64, fx: &mut Effects) {
        let v = &mut self.vcpus[vcpu];
        let remaining = remaining + std::mem::take(&mut v.refill_ns);
        if let Some(frame) = v.frames.last_mut() {
            frame.remaining = Some(remaining);
        }
        v.step_started = now;
        v.step_running = true;
        fx.schedule(
            now + remaining,
            Event::GuestStep {
                vcpu: index_u32(vcpu),
            },
        );
    }

    /// `vcpu`'s timed step is done: NAPI's packet is taken (and handed to
    /// the workload), a workload's step is the workload's, then the program
    /// goes on (after what they listed).
    pub(super) fn finish_step<S: Surroundings>(
        &mut self,
        vcpu: usize,
        ins: &mut Inputs<S>,
        fx: &mut Effects,
    ) {
        self.vcpus[vcpu].step_running = false;
        let Some(frame) = self.vcpus[vcpu].frames.last().copied() else {
            return;
        };
        match frame.program[frame.pc] {
            // One packet done; the step repeats until the ring is empty.
            Step::PollRx => {
                let ring = ring_of(frame.vector);
                let pair = self.vcpus[vcpu].pair;
                let left = ins.around.take(pair, ring, 1);
                let napi = &mut self.napi[pair][napi_index(ring)];
                napi.took();
                let napi_completes = left == 0;
                ins.ledger.counters.packets_processed += 1;
                if let Some(top) = self.vcpus[vcpu].frames.last_mut() {
                    top.remaining = None;
                }
                if !self.datagrams {
                    let taken = Taken {
                        vcpu,
                        pair,
                        ring,
                        napi_completes,
                    };
                    self.with_workload(ins, |workload, ctx| workload.packet_taken(taken, ctx, fx));
                }
            }
            Step::Workload(step) => {
                self.advance(vcpu);
                self.with_workload(ins, |workload, ctx| workload.step_done(vcpu, step, ctx, fx));
            }
            _ => self.advance(vcpu),
        }
        // With nothing listed, running on is the very next effect anyway.
        if fx.nothing_listed() {
            self.run(vcpu, ins, fx);
        } else {
            fx.push(Effect::RunGuest(vcpu));
        }
    }

    /// A poll that used its weight returns without completing NAPI, so
    /// the softirq polls it again: no unmask, no interrupt (`napi`).
    fn poll_again(&mut self, vcpu: usize) {
        if let Some(top) = self.vcpus[vcpu].frames.last_mut() {
            if let Some(poll) = top
                .program
                .iter()
                .position(|step| matches!(step, Step::PollRx))
            {
                top.pc = poll;
                top.remaining = None;
            }
        }
    }

    fn advance(&mut self, vcpu: usize) {
        if let Some(frame) = self.vcpus[vcpu].frames.last_mut() {
            // Programs loop back to their start (a compare, not a
            // division: this is the interpreter's hottest line).
            frame.pc = if frame.pc + 1 == frame.program.len() {
                0
            } else {
                frame.pc + 1
            };
            frame.remaining = None;
        }
    }

    /// STI or IRET to an interruptible context: an interrupt window may
    /// open (the hypervisor's VMCS says), and a delivery attempt follows.
    fn enable_interrupts(&mut self, vcpu: usize, fx: &mut Effects) {
        self.vcpus[vcpu].interruptible = true;
        fx.push(Effect::InterruptsOn(vcpu));
    }

    /// The guest writes the EOI for the handler it is in: the vector it
    /// believes it completes.
    pub(super) fn eoi(&mut self, vcpu: usize) -> Option<u8> {
        self.vcpus[vcpu]
            .frames
            .iter_mut()
            .rev()
            .find(|frame| !frame.eoi_done)
            .and_then(|frame| {
                frame.eoi_done = true;
                frame.vector
            })
    }

    /// The deadline of `vcpu`'s timer write at `now`: the timer thread's
    /// next tick, fio's guard (far enough never to fire), or none.
    pub(super) fn timer_deadline(
        &mut self,
        vcpu: usize,
        write: TimerWrite,
        now: u64,
    ) -> Option<u64> {
        match write {
            TimerWrite::NextTick => Some(self.timer_threads.next_tick(vcpu, now)),
            TimerWrite::ArmGuard => Some(now + 100_000_000),
            TimerWrite::Cancel => None,
        }
    }

    /// Whether the run has a timer thread on the queue-pair owners: the
    /// workload's, or the group's.
    pub(super) fn runs_timer_thread(&self, group_timer: bool) -> bool {
        group_timer || self.workload.runs_timer_thread()
    }

    /// `vcpu`'s timer thread arms its first expiry: the deadline.
    pub(super) fn arm_timer_thread(&mut self, vcpu: usize, rng: &mut Rng) -> u64 {
        self.timer_threads.arm_first_tick(vcpu, rng)
    }

    /// Calls the workload with the context it is handed: what `ins`
    /// carries, and the live facts of the guest and its surroundings.
    fn with_workload<R, S: Surroundings>(
        &mut self,
        ins: &mut Inputs<S>,
        call: impl FnOnce(&mut dyn Workload, &mut Ctx) -> R,
    ) -> R {
        let state = Live {
            around: &*ins.around,
            vcpus: &self.vcpus,
        };
        let mut ctx = Ctx {
            now: ins.now,
            rng: ins.rng,
            record: &mut ins.ledger.counters,
            topology: ins.topology,
            state: &state,
        };
        call(&mut *self.workload, &mut ctx)
    }

    /// `vm`'s workload starts, its queue pairs owned by `owners`.
    pub(super) fn start_workload<S: Surroundings>(
        &mut self,
        vm: usize,
        owners: &[usize],
        ins: &mut Inputs<S>,
        fx: &mut Effects,
    ) {
        self.with_workload(ins, |workload, ctx| workload.start(vm, owners, ctx, fx));
    }

    /// One of the workload's own events.
    pub(super) fn workload_event<S: Surroundings>(
        &mut self,
        event: WorkloadEvent,
        ins: &mut Inputs<S>,
        fx: &mut Effects,
    ) {
        self.with_workload(ins, |workload, ctx| workload.on_event(event, ctx, fx));
    }

    /// `sender`'s ICR write left for `targets`.
    pub(super) fn ipi_sent<S: Surroundings>(
        &mut self,
        sender: usize,
        targets: &[usize],
        ins: &mut Inputs<S>,
    ) {
        self.with_workload(ins, |workload, ctx| {
            workload.on_ipi_sent(sender, targets, ctx)
        });
    }

    /// vhost passed one of `pair`'s guest's TX buffers on.
    pub(super) fn sent<S: Surroundings>(
        &mut self,
        pair: usize,
        ins: &mut Inputs<S>,
        fx: &mut Effects,
    ) {
        self.with_workload(ins, |workload, ctx| workload.sent(pair, ctx, fx));
    }
}

/// What the workload reads of the guest and its surroundings.
struct Live<'a, S: Surroundings> {
    around: &'a S,
    vcpus: &'a [GuestCpu],
}

impl<S: Surroundings> MachineState for Live<'_, S> {
    fn in_guest(&self, vcpu: usize) -> bool {
        self.around.in_guest(vcpu)
    }

    fn spinning(&self, vcpu: usize) -> bool {
        self.vcpus[vcpu].spin_since.is_some()
    }

    fn ring_level(&self, pair: usize, ring: Ring) -> u32 {
        self.around.ring_level(pair, ring)
    }
}

/// The workload's results, read at the end of the run.
impl Guest {
    pub(super) fn figures(&self, record: &Counters) -> WorkloadFigures {
        self.workload.figures(record)
    }

    pub(super) fn throughput(&self, record: &Counters, seconds: f64) -> Option<Throughput> {
        self.workload.throughput(record, seconds)
    }

    pub(super) fn params(&self, params: &mut BTreeMap<String, serde_json::Value>) {
        self.workload.params(params);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::design::DesignKind;
    use crate::machine::fixture::{scheduled, GuestBench, Setting};
    use crate::metrics::Invariant;
    use crate::scenario::WorkloadKind;

    fn step_end_at(at: u64) -> Effect {
        scheduled(at, Event::GuestStep { vcpu: 0 })
    }

    #[test]
    fn a_handler_starts_with_interrupts_off_and_its_first_step_timed() {
        let setting = Setting::single(DesignKind::Vanilla);
        let (mut guest, mut bench) = (setting.guest(), GuestBench::new(&setting));
        bench.now = 1_000;
        let fx = bench.listed(&mut guest, |g, ins, fx| {
            g.deliver(0, GUEST_TIMER_VECTOR, ins, fx)
        });
        assert_eq!(fx, [Effect::Cancel(Event::GuestStep { vcpu: 0 })]);
        assert!(!guest.interruptible(0));
        let fx = bench.listed(&mut guest, |g, ins, fx| g.run(0, ins, fx));
        let entry = setting.profile.guest_ns.irq_entry;
        assert_eq!(fx, [step_end_at(1_000 + entry)]);
        // Running again while the step runs is a no-op.
        let fx = bench.listed(&mut guest, |g, ins, fx| g.run(0, ins, fx));
        assert!(fx.is_empty());
    }

    #[test]
    fn a_suspended_step_keeps_its_remaining_time() {
        let setting = Setting::single(DesignKind::Vanilla);
        let (mut guest, mut bench) = (setting.guest(), GuestBench::new(&setting));
        bench.listed(&mut guest, |g, ins, fx| {
            g.deliver(0, GUEST_TIMER_VECTOR, ins, fx);
            g.run(0, ins, fx);
        });
        let entry = setting.profile.guest_ns.irq_entry;
        let after = entry / 2;
        bench.now = after;
        let fx = bench.listed(&mut guest, |g, ins, fx| g.suspend(0, ins.now, fx));
        assert_eq!(fx, [Effect::Cancel(Event::GuestStep { vcpu: 0 })]);
        bench.now = 10_000;
        let fx = bench.listed(&mut guest, |g, ins, fx| g.run(0, ins, fx));
        assert_eq!(fx, [step_end_at(10_000 + entry - after)]);
    }

    #[test]
    fn the_first_work_after_an_exit_pays_the_refill_once() {
        let setting = Setting::single(DesignKind::Vanilla);
        let (mut guest, mut bench) = (setting.guest(), GuestBench::new(&setting));
        let (entry, refill) = (
            setting.profile.guest_ns.irq_entry,
            setting.profile.host_ns.exit_indirect,
        );
        assert!(refill > 0);
        guest.reentered(0);
        bench.now = 1_000;
        let fx = bench.listed(&mut guest, |g, ins, fx| {
            g.deliver(0, GUEST_TIMER_VECTOR, ins, fx);
            g.run(0, ins, fx);
        });
        assert!(fx.contains(&step_end_at(1_000 + entry + refill)), "{fx:?}");
        bench.listed(&mut guest, |g, ins, fx| g.finish_step(0, ins, fx));
        guest.eoi(0);
        // Paid: the next handler's entry runs at its own length.
        bench.now = 10_000;
        let fx = bench.listed(&mut guest, |g, ins, fx| {
            g.deliver(0, GUEST_VF_VECTOR, ins, fx);
            g.run(0, ins, fx);
        });
        assert!(fx.contains(&step_end_at(10_000 + entry)), "{fx:?}");
    }

    #[test]
    fn a_ticking_vcpus_housekeeping_waits_for_the_ticks_softirq() {
        use crate::machine::fixture::listed;
        let setting = Setting::single(DesignKind::Did);
        let mut guest = setting.guest();
        assert!(setting.profile.guest_tick.hz > 0);
        let mut rng = Rng::new(1);
        guest.arm_timer_thread(0, &mut rng);
        assert!(guest.timer_threads.guest_ticks(0));
        let fx = listed(|fx| guest.housekeeping_due(0, false, false, 0, &mut rng, fx));
        let only_next_pass = fx.iter().all(|effect| {
            matches!(
                effect,
                Effect::Schedule {
                    event: Event::Housekeeping { .. },
                    ..
                }
            )
        });
        assert!(only_next_pass, "{fx:?}");
        assert_eq!(guest.vcpus[0].frames.len(), 1, "no pass yet");
        assert!(!guest.vcpus[0].housekeeping.is_empty());
        // A handler that found no tick runs no softirq.
        guest.tick_softirq(0);
        assert_eq!(guest.vcpus[0].frames.len(), 1);
        // The handler's re-arm finds the tick expired: its softirq runs
        // the pass on top of the handler, before any woken thread.
        guest.timer_deadline(0, TimerWrite::NextTick, 10_000_000);
        guest.tick_softirq(0);
        let top = guest.vcpus[0].frames.last().expect("a frame");
        assert_eq!(top.program, housekeeping::HOUSEKEEPING);
        // Once: the next softirq without a tick adds nothing.
        guest.tick_softirq(0);
        assert_eq!(guest.vcpus[0].frames.len(), 2);
    }

    #[test]
    fn a_plain_handler_hands_its_eoi_over() {
        let setting = Setting::single(DesignKind::Vanilla);
        let (mut guest, mut bench) = (setting.guest(), GuestBench::new(&setting));
        bench.listed(&mut guest, |g, ins, fx| {
            g.deliver(0, GUEST_TIMER_VECTOR, ins, fx);
            g.run(0, ins, fx);
        });
        let fx = bench.listed(&mut guest, |g, ins, fx| g.finish_step(0, ins, fx));
        assert_eq!(fx, [Effect::RunGuest(0)]);
        let fx = bench.listed(&mut guest, |g, ins, fx| g.run(0, ins, fx));
        assert_eq!(fx, [Effect::GuestEoi(0)]);
        assert_eq!(guest.eoi(0), Some(GUEST_TIMER_VECTOR));
    }

    #[test]
    fn a_guest_not_in_guest_mode_does_not_run() {
        let setting = Setting::single(DesignKind::Vanilla);
        let (mut guest, mut bench) = (setting.guest(), GuestBench::new(&setting));
        bench.around.in_guest.clear();
        let fx = bench.listed(&mut guest, |g, ins, fx| {
            g.deliver(0, GUEST_TIMER_VECTOR, ins, fx);
            g.run(0, ins, fx);
        });
        assert_eq!(fx, [Effect::Cancel(Event::GuestStep { vcpu: 0 })]);
    }

    #[test]
    fn a_poll_that_used_its_weight_is_polled_again_with_the_queue_masked() {
        let setting = Setting::group(DesignKind::Vanilla, WorkloadKind::UdpRx, |group| {
            group.napi_weight = Some(2);
        });
        let (mut guest, mut bench) = (setting.guest(), GuestBench::new(&setting));
        let vf = (0, Ring::Vf);
        bench.around.rings.insert(vf, 5);
        let mut fx = bench.listed(&mut guest, |g, ins, fx| {
            g.deliver(0, GUEST_VF_VECTOR, ins, fx)
        });
        // The handler runs on: each timed step ends, each effect handed
        // over is taken as done.
        let (mut steps, mut polled) = (0, false);
        while !polled || bench.around.masked.contains(&vf) {
            let timed = fx.iter().any(|effect| {
                matches!(
                    effect,
                    Effect::Schedule {
                        event: Event::GuestStep { .. },
                        ..
                    }
                )
            });
            fx = if timed {
                bench.listed(&mut guest, |g, ins, fx| g.finish_step(0, ins, fx))
            } else {
                bench.listed(&mut guest, |g, ins, fx| g.run(0, ins, fx))
            };
            let masked = bench.around.masked.contains(&vf);
            if polled && bench.around.rings[&vf] > 0 {
                assert!(masked, "unmasked with frames left");
            }
            polled |= masked;
            steps += 1;
            assert!(steps < 100, "the handler never ends: {fx:?}");
        }
        // Three polls (2, 2, 1) within the one interrupt's handler.
        assert_eq!(bench.around.rings[&vf], 0);
        assert_eq!(bench.ledger.counters.packets_processed, 5);
    }

    #[test]
    fn the_checker_hears_a_doubled_handler() {
        let setting = Setting::single(DesignKind::Did);
        let (mut guest, mut bench) = (setting.guest(), GuestBench::new(&setting));
        bench.ledger.checker.raise(0, GUEST_VF_VECTOR);
        bench.listed(&mut guest, |g, ins, fx| {
            g.deliver(0, GUEST_VF_VECTOR, ins, fx)
        });
        let checker = &bench.ledger.checker;
        assert_eq!(checker.violations_of(Invariant::Doubled), 0);
        // A second handler for the same vector with nothing raised.
        bench.listed(&mut guest, |g, ins, fx| {
            g.deliver(0, GUEST_VF_VECTOR, ins, fx)
        });
        let checker = &bench.ledger.checker;
        assert_eq!(checker.violations_of(Invariant::Doubled), 1);
        assert_eq!(checker.violations_of(Invariant::PriorityInversion), 1);
    }
}
