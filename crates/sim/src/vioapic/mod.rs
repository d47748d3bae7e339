//! The Loongson VIOAPIC paper (docs/mechanisms.md section 6): one core,
//! host and guest on it, a virtual device raising level-triggered
//! interrupts back to back through a `dirq_arch::vioapic` controller, and
//! the guest answering each with the 7A flow ([`flow::FLOW`]) whose
//! register accesses exit or not by the level ([`VioapicLevel`]); with
//! the controller in the userspace VMM, every change of its output to the
//! core costs the VMM a second kernel crossing (`flow`'s module text). The
//! core is a model on the simulator's engine (`crate::engine`), as the x86
//! machine is, its time counted in the core's cycles: the x86 machine's
//! LAPICs and VMCS have no part in it.

mod flow;
mod profile;

use std::collections::BTreeMap;

use dirq_arch::exit::VmxExit;
use dirq_arch::vioapic::{Vioapic, REG_MASK, REG_ROUTE_BASE, REG_UNMASK};
use dirq_stats::{f64_of, ratio};

pub use flow::VioapicLevel;
use flow::{AccessKind, Landing, LevelLandings, Register, Step, FLOW};
pub use profile::{LoongsonProfile, VioapicCycles};

use crate::engine;
use crate::metrics::{
    InterruptCounts, Invariant, RunResult, Throughput, ThroughputUnit, WorkloadFigures,
};
use crate::queue::{EventQueue, Keyed};
use crate::scenario::{RunSpec, Scenario, WorkloadKind};
use crate::trace::Trace;

/// The device's line and the vector its route carries.
const LINE: u32 = 0;
const LINE_BIT: u32 = 1 << LINE;
const DEVICE_VECTOR: u8 = 0x40;
/// Step (C): the device is emulated in the userspace VMM at every level
/// (assumed: the paper moves only the controller).
const DEVICE_LANDING: Landing = Landing::Userspace;
/// A trapped register access is a guest-physical access the host left
/// unmapped: the Loongson VZ core's TLB exit, VMX's EPT violation.
const ACCESS_EXIT: VmxExit = VmxExit::EptViolation;
/// The one core host and guest share, in the trace.
const CORE: usize = 0;

/// Whether every run of `scenario` is on the Loongson testbed.
pub fn on_loongson(scenario: &Scenario) -> bool {
    scenario
        .runs
        .iter()
        .all(|group| group.workload == WorkloadKind::Vioapic)
}

/// An upper bound on the events one run makes per simulated second: one
/// per step, an interrupt at most every injection.
pub fn most_events_per_s(profile: &LoongsonProfile) -> f64 {
    let per_interrupt = f64_of(FLOW.len() as u64) + 1.0;
    ratio(profile.cpu_hz, profile.cycles.injection.max(1)) * per_interrupt
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// The injection finished: the guest's handler starts.
    Injected,
    /// Step `FLOW[n]` finished.
    StepDone(usize),
    /// The VMM's crossing after step `FLOW[n]` (its write changed the
    /// line) finished.
    Crossed(usize),
}

impl Keyed for Event {
    fn key(&self) -> Option<usize> {
        None
    }
}

/// What one interrupt's response cost so far; committed when it completes,
/// so the figures cover whole interrupts only.
#[derive(Clone, Copy, Debug, Default)]
struct Spent {
    guest_cycles: u64,
    exits: u64,
    userspace_exits: u64,
    /// The VMM's own kernel crossings (userspace level only).
    crossings: u64,
    /// Cycles in the controller's register accesses, their exits and the
    /// VMM's crossings they caused.
    register_cycles: u64,
}

#[derive(Debug, Default)]
struct Counts {
    raised: u64,
    handled: u64,
    /// Controller messages that found the core's delivered bit still set.
    merged: u64,
    /// Responses whose status read found nothing to service.
    spurious: u64,
    completed: u64,
    /// When the first interrupt completed: the start-up (the first
    /// delivery) ends there.
    first_completion: Option<u64>,
    last_completion: u64,
    events: u64,
    committed: Spent,
}

struct Loongson<'a> {
    profile: &'a LoongsonProfile,
    level: VioapicLevel,
    controller: Vioapic,
    /// pv: the MASK the guest keeps in the shared page.
    shared_mask: u32,
    /// The core's delivered bit for the device's vector: set by the
    /// controller's message, cleared by the acknowledge.
    delivered: bool,
    /// The guest is inside the handler (interrupts off) or being injected.
    busy: bool,
    /// The last MASK the guest read, for its read-modify-write.
    mask_read: u32,
    /// The controller's output to the core as KVM last heard of it from
    /// the VMM (userspace level).
    line_output: bool,
    current: Spent,
    counts: Counts,
    queue: EventQueue<Event>,
    now: u64,
    trace: Option<Trace>,
}

/// Runs one `vioapic` run: back-to-back interrupts for the run's duration
/// (time is the core's cycles), figures over the interrupts completed; and
/// its trace when `trace` is set.
pub(crate) fn simulate(
    spec: &RunSpec,
    level: VioapicLevel,
    profile: &LoongsonProfile,
    trace: bool,
) -> (RunResult, Option<Trace>) {
    let started = std::time::Instant::now();
    let end =
        u64::try_from(u128::from(spec.duration_ns) * u128::from(profile.cpu_hz) / 1_000_000_000)
            .unwrap_or(u64::MAX);
    let mut run = Loongson::new(level, profile);
    run.trace = trace.then(Trace::default);
    run.start();
    run.counts.events = engine::run(&mut run, end);
    let mut result = run.summarize(spec);
    result.wall_s = started.elapsed().as_secs_f64();
    (result, run.trace)
}

impl engine::Model for Loongson<'_> {
    type Event = Event;

    fn queue(&mut self) -> &mut EventQueue<Event> {
        &mut self.queue
    }

    fn handle(&mut self, now: u64, event: Event) {
        self.now = now;
        self.dispatch(event);
    }
}

impl<'a> Loongson<'a> {
    fn new(level: VioapicLevel, profile: &'a LoongsonProfile) -> Self {
        let mut controller = Vioapic::new();
        let route = REG_ROUTE_BASE + 4 * u64::from(LINE);
        // Guest set-up, before the measurement: route the line, unmask it.
        let setup = [(route, u32::from(DEVICE_VECTOR)), (REG_UNMASK, LINE_BIT)];
        for (offset, value) in setup {
            if let Err(err) = controller.write(offset, value) {
                unreachable!("the model refused its own register {offset:#x}: {err}");
            }
        }
        Loongson {
            profile,
            level,
            shared_mask: controller.mask(),
            controller,
            delivered: false,
            busy: false,
            mask_read: 0,
            line_output: false,
            current: Spent::default(),
            counts: Counts::default(),
            queue: EventQueue::new(),
            now: 0,
            trace: None,
        }
    }

    /// The device asserts its first event.
    fn start(&mut self) {
        self.raise();
    }

    fn dispatch(&mut self, event: Event) {
        match event {
            Event::Injected => self.schedule_step(0),
            Event::StepDone(index) => {
                let step = FLOW[index];
                self.finish_step(step);
                if self.output_changed() {
                    self.cross(index, step);
                } else {
                    self.next_step(index);
                }
            }
            Event::Crossed(index) => self.next_step(index),
        }
    }

    fn next_step(&mut self, done: usize) {
        if done + 1 < FLOW.len() {
            self.schedule_step(done + 1);
        } else {
            self.complete();
        }
    }

    /// With the controller in the userspace VMM: whether its output to the
    /// core (`IRR & !MASK` on the device's line) changed since KVM last
    /// heard of it, which the VMM then tells KVM. In the kernel there is
    /// nothing to tell.
    fn output_changed(&mut self) -> bool {
        if self.level != VioapicLevel::Userspace {
            return false;
        }
        let output = self.controller.irr() & !self.controller.mask() & LINE_BIT != 0;
        let changed = output != self.line_output;
        self.line_output = output;
        changed
    }

    /// The VMM's second crossing after `step` (`FLOW[index]`), whose write
    /// changed the line: it sets or clears the vCPU's interrupt in KVM.
    fn cross(&mut self, index: usize, step: Step) {
        let cycles = self.profile.vmm_crossing();
        self.current.crossings += 1;
        if matches!(step, Step::Controller(_)) {
            self.current.register_cycles += cycles;
        }
        let end = self.now + cycles;
        self.trace_span(end, "vmm-crossing", None);
        self.queue.schedule(end, Event::Crossed(index));
    }

    /// The device asserts the line for its next event.
    fn raise(&mut self) {
        self.counts.raised += 1;
        self.trace_instant("raise");
        self.sync_shared_mask();
        self.set_line(true);
    }

    fn set_line(&mut self, asserted: bool) {
        match self.controller.set_line(LINE, asserted) {
            Ok(messages) => self.deliver(messages.len()),
            Err(err) => unreachable!("the model refused its own line: {err}"),
        }
    }

    /// pv: the VMM takes the shared page's lock and reads the guest's MASK
    /// before it evaluates the controller.
    fn sync_shared_mask(&mut self) {
        if self.level == VioapicLevel::Pv {
            let messages = self.controller.sync_mask(self.shared_mask);
            self.deliver(messages.len());
        }
    }

    /// `messages` controller messages reach the core.
    fn deliver(&mut self, messages: usize) {
        for _ in 0..messages {
            if self.delivered {
                self.counts.merged += 1;
            } else {
                self.delivered = true;
            }
        }
        self.maybe_inject();
    }

    /// A delivered interrupt is injected once the guest is out of its
    /// handler (it runs with interrupts off), after the VMM's crossing
    /// when the line rose outside the guest's writes (the first one).
    fn maybe_inject(&mut self) {
        if self.delivered && !self.busy {
            self.busy = true;
            let crossing = if self.output_changed() {
                self.current.crossings += 1;
                self.profile.vmm_crossing()
            } else {
                0
            };
            let at = self.now + crossing + self.profile.cycles.injection;
            self.trace_span(at, "injection", None);
            self.queue.schedule(at, Event::Injected);
        }
    }

    fn schedule_step(&mut self, index: usize) {
        let step = FLOW[index];
        let end = self.now + self.step_cycles(step);
        let exit = self.landing(step).filter(|landing| landing.exits());
        let name = if exit.is_some() { "host" } else { "guest" };
        self.trace_span(end, name, exit.map(|_| ACCESS_EXIT));
        self.queue.schedule(end, Event::StepDone(index));
    }

    /// Where a step's access lands; the handler's own work is the guest's.
    fn landing(&self, step: Step) -> Option<Landing> {
        match step {
            Step::Handler => None,
            Step::Controller(access) => Some(self.level.lands(access)),
            Step::Device => Some(DEVICE_LANDING),
        }
    }

    /// A step's cost, counted into the current response.
    fn step_cycles(&mut self, step: Step) -> u64 {
        let Some(landing) = self.landing(step) else {
            let handler = self.profile.handler_cycles();
            self.current.guest_cycles += handler;
            return handler;
        };
        let cycles = self.profile.access_cycles(landing);
        if matches!(step, Step::Controller(_)) {
            self.current.register_cycles += cycles;
        }
        match landing {
            Landing::Memory | Landing::SharedPageLocked => self.current.guest_cycles += cycles,
            Landing::Kernel => self.current.exits += 1,
            Landing::Userspace => {
                self.current.exits += 1;
                self.current.userspace_exits += 1;
            }
        }
        cycles
    }

    /// A step's effect on the controller, the core and the device.
    fn finish_step(&mut self, step: Step) {
        match step {
            Step::Handler => {}
            Step::Device => {
                // Read-to-clear: the event is consumed and the line drops;
                // back to back, the next event is ready at once.
                self.counts.handled += 1;
                self.trace_instant("handle");
                self.sync_shared_mask();
                self.set_line(false);
                self.raise();
            }
            Step::Controller(access) => match (access.kind, access.register) {
                (AccessKind::Read, Register::Isr) if self.status_pending() => {}
                (AccessKind::Read, Register::Isr) => self.counts.spurious += 1,
                (AccessKind::Read, Register::Mask) => self.mask_read = self.read_mask(),
                (AccessKind::Read, _) => {}
                (AccessKind::Write, Register::Ack) => {
                    self.sync_shared_mask();
                    self.delivered = false;
                }
                (AccessKind::Write, Register::Unmask) => self.write_mask(false),
                (AccessKind::Write, _) => self.write_mask(true),
            },
        }
    }

    /// A status read while the guest has the line unmasked (step A) must
    /// find it wanting service; the read-back in step (D) sees it masked.
    fn status_pending(&self) -> bool {
        let mask = self.read_mask();
        mask & LINE_BIT != 0 || self.controller.irr() & !mask & LINE_BIT != 0
    }

    fn read_mask(&self) -> u32 {
        match self.level {
            VioapicLevel::Pv => self.shared_mask,
            _ => self.controller.mask(),
        }
    }

    /// A MASK write: setting the line's bit in step (B), clearing it in
    /// step (D). pv masks in the shared page and unmasks through UNMASK.
    fn write_mask(&mut self, masking: bool) {
        let value = if masking {
            self.mask_read | LINE_BIT
        } else {
            self.mask_read & !LINE_BIT
        };
        let messages = match (self.level, masking) {
            (VioapicLevel::Pv, true) => {
                self.shared_mask = value;
                return;
            }
            (VioapicLevel::Pv, false) => {
                self.sync_shared_mask();
                self.shared_mask = value;
                self.controller.write(REG_UNMASK, LINE_BIT)
            }
            _ => self.controller.write(REG_MASK, value),
        };
        match messages {
            Ok(messages) => self.deliver(messages.len()),
            Err(err) => unreachable!("the model refused its own MASK write: {err}"),
        }
    }

    fn ns(&self, cycles: u64) -> u64 {
        u64::try_from(u128::from(cycles) * 1_000_000_000 / u128::from(self.profile.cpu_hz))
            .unwrap_or(u64::MAX)
    }

    /// The core from now to `end` (cycles): an exit's host slice when
    /// `exit` names one.
    fn trace_span(&mut self, end: u64, name: &str, exit: Option<VmxExit>) {
        let (start_ns, end_ns) = (self.ns(self.now), self.ns(end));
        if let Some(trace) = &mut self.trace {
            if let Some(reason) = exit {
                trace.exit(CORE, start_ns, reason);
            }
            trace.span(CORE, start_ns, end_ns, name);
        }
    }

    fn trace_instant(&mut self, what: &str) {
        let at_ns = self.ns(self.now);
        if let Some(trace) = &mut self.trace {
            trace.instant(CORE, at_ns, what, DEVICE_VECTOR);
        }
    }

    /// The response returned: the interrupt is complete.
    fn complete(&mut self) {
        let spent = std::mem::take(&mut self.current);
        let total = &mut self.counts.committed;
        total.guest_cycles += spent.guest_cycles;
        total.exits += spent.exits;
        total.userspace_exits += spent.userspace_exits;
        total.crossings += spent.crossings;
        total.register_cycles += spent.register_cycles;
        self.counts.completed += 1;
        self.counts.first_completion.get_or_insert(self.now);
        self.counts.last_completion = self.now;
        self.busy = false;
        self.maybe_inject();
    }

    fn summarize(&self, spec: &RunSpec) -> RunResult {
        let counts = &self.counts;
        let cycles = f64_of(counts.last_completion.max(1));
        let seconds = cycles / f64_of(self.profile.cpu_hz);
        let completed = f64_of(counts.completed.max(1));
        // In the steady state, from one completion to the next (the first
        // delivery may differ: at userspace it is the VMM's own).
        let cycles_per_interrupt = match counts.first_completion {
            Some(first) if counts.completed > 1 => {
                f64_of(counts.last_completion - first) / f64_of(counts.completed - 1)
            }
            _ => cycles / completed,
        };
        let exits_per_s = f64_of(counts.committed.exits) / seconds;
        // The device asserts its next event when it consumes one: one is
        // always outstanding at the end.
        let pending_at_end = counts.raised.saturating_sub(counts.handled);
        let asserted = u64::from(self.controller.irr() & LINE_BIT != 0);
        let lost = pending_at_end.saturating_sub(asserted);
        let invariant_violations = Invariant::ALL
            .iter()
            .map(|&invariant| {
                let count = match invariant {
                    Invariant::Lost => lost,
                    Invariant::Doubled => counts.spurious,
                    _ => 0,
                };
                (invariant, count)
            })
            .collect();
        RunResult {
            design: spec.design,
            params: spec.params(),
            exits_per_s,
            interrupts_per_s: f64_of(counts.raised) / seconds,
            exits_by_reason_per_s: BTreeMap::from([(ACCESS_EXIT, exits_per_s)]),
            time_in_guest: f64_of(counts.committed.guest_cycles) / cycles,
            cpu_busy: 1.0,
            latency_ns: None,
            throughput: Some(Throughput {
                value: completed / seconds,
                unit: ThroughputUnit::InterruptsPerS,
            }),
            invariant_violations,
            figures: WorkloadFigures {
                cycles_per_interrupt: Some(cycles_per_interrupt),
                // The paper measures a million interrupts; the run
                // completes fewer, each costing the same, and scales.
                seconds_per_million: Some(cycles_per_interrupt * 1e6 / f64_of(self.profile.cpu_hz)),
                register_access_share: Some(f64_of(counts.committed.register_cycles) / cycles),
                ..WorkloadFigures::default()
            },
            interrupts: InterruptCounts {
                raised: counts.raised,
                handled: counts.handled,
                coalesced: counts.merged,
                pending_at_end,
            },
            events: counts.events,
            wall_s: 0.0,
        }
    }
}

#[cfg(test)]
mod tests;
