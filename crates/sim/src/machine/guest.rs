//! The guest model: handler programs and the interpreter that runs them.
//! A workload's own steps ([`Step::Workload`]) are the workload's to
//! carry out (`workload`); the kernel's are here.

use super::timer_thread::{TIMER_HANDLER, TIMER_THREAD};
use super::workload::{Programs, StepOutcome, Taken, WorkloadStep};
use super::*;

/// Guest work whose length comes from the profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Work {
    IrqEntry,
    /// The switch to a woken thread and its return from the wait.
    TimerToUserRest,
    Request,
    /// A housekeeping section with interrupts disabled.
    IrqsOffSection,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TimerWrite {
    /// The timer thread's periodic timer re-armed for its next tick.
    NextTick,
    /// A guard timer far enough never to fire (fio's).
    ArmGuard,
    Cancel,
}

/// One instruction of the guest model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Work(Work),
    /// Background loop that never ends (idle=poll, whileloop).
    Spin,
    MaskRx,
    UnmaskRx,
    Eoi,
    Cli,
    Sti,
    /// Housekeeping: the pass's next I/O or EPT-faulting access.
    DeviceAccess,
    /// Housekeeping: back to the start while accesses are left.
    NextAccess,
    /// NAPI poll: one packet at a time until the ring is empty.
    PollRx,
    /// be2net's transmit poll: every completion reaped, the event queue
    /// re-armed (its work per packet is the sender's `tx_packet`).
    ReapTx,
    WriteTimer(TimerWrite),
    /// The timer handler wakes the timer thread; the scheduler runs it
    /// when the last handler returns.
    WakeTimerThread,
    /// The timer thread reads the clock: the workload hears how late.
    TimerThreadReadsClock,
    Halt,
    Iret,
    /// A step of the run's workload.
    Workload(WorkloadStep),
}

pub(super) const RX_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::MaskRx,
    Step::Eoi,
    Step::Sti,
    Step::PollRx,
    Step::UnmaskRx,
    Step::Iret,
];
/// be2net's transmit event queue's interrupt (`be_msix_tx_mcc`, then
/// `be_poll_tx_mcc`; `tx_completion`).
const TX_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::Eoi,
    Step::ReapTx,
    Step::Iret,
];
/// A guard-timer expiry (fio), a stray tick or an IPI no workload waits
/// for: acknowledge and return.
pub(super) const PLAIN_HANDLER: &[Step] = &[Step::Work(Work::IrqEntry), Step::Eoi, Step::Iret];
pub(super) const SPIN: &[Step] = &[Step::Spin];
pub(super) const HALT_LOOP: &[Step] = &[Step::Halt];

/// The programs a run's guest runs: the workload's where it has its own,
/// the kernel's otherwise. Fixed for the run.
#[derive(Clone, Copy, Debug)]
pub(super) struct Handlers {
    background: Option<&'static [Step]>,
    lead: Option<&'static [Step]>,
    device: &'static [Step],
    ipi: &'static [Step],
}

impl Handlers {
    pub(super) fn of(programs: Programs) -> Handlers {
        Handlers {
            background: programs.background,
            lead: programs.lead,
            device: programs.device_handler.unwrap_or(RX_HANDLER),
            ipi: programs.ipi_handler.unwrap_or(PLAIN_HANDLER),
        }
    }

    /// The program of a VM's vCPU `index` when idle vCPUs do `idle`.
    pub(super) fn program(&self, index: usize, idle: IdleMode) -> &'static [Step] {
        match (self.lead, index) {
            (Some(lead), 0) => lead,
            _ => self.background.unwrap_or(match idle {
                IdleMode::Poll => SPIN,
                _ => HALT_LOOP,
            }),
        }
    }
}

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
}

impl Machine {
    /// The guest starts the handler for `vector`.
    pub(super) fn deliver_to_guest(&mut self, vcpu: usize, vector: u8, fx: &mut Effects) {
        let in_service = self.vcpus[vcpu]
            .frames
            .iter()
            .filter(|frame| !frame.eoi_done)
            .filter_map(|frame| frame.vector)
            .max();
        let vm = self.vcpus[vcpu].vm;
        self.checker
            .delivered(vm, vector, is_guest_vector(vector), in_service);
        if let Some(trace) = &mut self.trace {
            trace.instant(self.vcpus[vcpu].home_core, self.now, "handle", vector);
        }
        self.suspend(vcpu, fx);
        let program = match vector {
            GUEST_VF_VECTOR | GUEST_VIRTIO_VECTOR => self.handlers.device,
            GUEST_VF_TX_VECTOR => TX_HANDLER,
            GUEST_TIMER_VECTOR if self.timer_threads.ticks(vcpu) => TIMER_HANDLER,
            GUEST_IPI_VECTOR => self.handlers.ipi,
            _ => PLAIN_HANDLER,
        };
        let nested = self.spec.group.nested_interrupts;
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
        v.interruptible = nested;
    }

    /// Stops the clock of the step in progress (exit or nested interrupt).
    pub(super) fn suspend(&mut self, vcpu: usize, fx: &mut Effects) {
        fx.cancel(Event::GuestStep {
            vcpu: index_u32(vcpu),
        });
        let now = self.now;
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
    pub(super) fn work_ns(&mut self, work: Work) -> u64 {
        let guest = &self.profile.guest_ns;
        let mean = match work {
            Work::IrqEntry => guest.irq_entry,
            Work::TimerToUserRest => guest.timer_irq_to_user.saturating_sub(guest.irq_entry),
            Work::Request => guest.request_work,
            Work::IrqsOffSection => self.profile.guest_housekeeping.irqs_off_ns,
        };
        self.guest_times.draw(mean, &mut self.rng)
    }

    /// Runs guest steps until one takes time, the guest exits or halts. A
    /// step that involves another mechanism ends the pass: its effect, then
    /// a new pass, which stops at once if the guest no longer runs.
    pub(super) fn run_guest(&mut self, vcpu: usize, fx: &mut Effects) {
        if !self.in_guest(vcpu) || self.vcpus[vcpu].step_running {
            return;
        }
        loop {
            let Some(frame) = self.vcpus[vcpu].frames.last().copied() else {
                return;
            };
            let step = frame.program[frame.pc];
            let handoff = match step {
                Step::Work(work) => {
                    let remaining = match frame.remaining {
                        Some(remaining) => remaining,
                        None => self.work_ns(work),
                    };
                    self.start_timed(vcpu, remaining, fx);
                    return;
                }
                Step::PollRx => {
                    let kind = self.rx_queue_of(frame.vector);
                    let pair = self.vcpus[vcpu].pair;
                    let rx = self.pairs[pair].rx(kind);
                    if !rx.napi.may_take(rx.ring) {
                        self.advance(vcpu);
                        continue;
                    }
                    let remaining = frame.remaining.unwrap_or_else(|| {
                        self.workload
                            .rx_work_ns(pair)
                            .unwrap_or(self.profile.guest_ns.rx_packet)
                    });
                    self.start_timed(vcpu, remaining, fx);
                    return;
                }
                Step::Spin => {
                    self.vcpus[vcpu].spin_since = Some(self.now);
                    self.vcpus[vcpu].step_running = true;
                    return;
                }
                Step::Workload(step) => {
                    if let Some(remaining) = frame.remaining {
                        self.start_timed(vcpu, remaining, fx);
                        return;
                    }
                    match self.with_workload(|workload, ctx| workload.on_step(vcpu, step, ctx, fx))
                    {
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
                        StepOutcome::Takes(ns) => self.start_timed(vcpu, ns, fx),
                        StepOutcome::Spin => {
                            self.vcpus[vcpu].spin_since = Some(self.now);
                            self.vcpus[vcpu].step_running = true;
                        }
                    }
                    return;
                }
                Step::MaskRx => {
                    let kind = self.rx_queue_of(frame.vector);
                    let pair = self.vcpus[vcpu].pair;
                    let rx = self.pairs[pair].rx(kind);
                    rx.masked = true;
                    rx.napi.start_poll();
                    self.advance(vcpu);
                    continue;
                }
                Step::UnmaskRx => {
                    let kind = self.rx_queue_of(frame.vector);
                    let pair = self.vcpus[vcpu].pair;
                    let rx = self.pairs[pair].rx(kind);
                    if rx.ring == 0 {
                        rx.unmask();
                        self.advance(vcpu);
                        continue;
                    }
                    // The poll used its weight.
                    if kind == Ring::Virtio {
                        rx.napi.start_poll();
                        self.poll_again(vcpu);
                        continue;
                    }
                    self.advance(vcpu);
                    fx.push(Effect::NapiComplete { pair });
                    fx.push(Effect::RunGuest(vcpu));
                    return;
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
                Step::TimerThreadReadsClock => {
                    self.advance(vcpu);
                    if let Some(latency) = self.timer_threads.latency(vcpu, self.now) {
                        self.with_workload(|workload, ctx| workload.on_timer_thread(latency, ctx));
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

    pub(super) fn start_timed(&mut self, vcpu: usize, remaining: u64, fx: &mut Effects) {
        let v = &mut self.vcpus[vcpu];
        if let Some(frame) = v.frames.last_mut() {
            frame.remaining = Some(remaining);
        }
        v.step_started = self.now;
        v.step_running = true;
        fx.schedule(
            self.now + remaining,
            Event::GuestStep {
                vcpu: index_u32(vcpu),
            },
        );
    }

    pub(super) fn finish_timed_step(&mut self, vcpu: usize, fx: &mut Effects) {
        self.vcpus[vcpu].step_running = false;
        let Some(frame) = self.vcpus[vcpu].frames.last().copied() else {
            return;
        };
        match frame.program[frame.pc] {
            // One packet done; the step repeats until the ring is empty.
            Step::PollRx => {
                let ring = self.rx_queue_of(frame.vector);
                let pair = self.vcpus[vcpu].pair;
                let rx = self.pairs[pair].rx(ring);
                rx.ring = rx.ring.saturating_sub(1);
                rx.napi.took();
                let last_in_poll = !rx.napi.may_take(rx.ring);
                self.counters.packets_processed += 1;
                if let Some(top) = self.vcpus[vcpu].frames.last_mut() {
                    top.remaining = None;
                }
                let taken = Taken {
                    vcpu,
                    pair,
                    ring,
                    last_in_poll,
                };
                self.with_workload(|workload, ctx| workload.packet_taken(taken, ctx, fx));
            }
            Step::Workload(step) => {
                self.advance(vcpu);
                self.with_workload(|workload, ctx| workload.step_done(vcpu, step, ctx, fx));
            }
            _ => self.advance(vcpu),
        }
        self.run_on(vcpu, fx);
    }

    /// The guest runs on, after whatever its step listed.
    fn run_on(&mut self, vcpu: usize, fx: &mut Effects) {
        if fx.nothing_listed() {
            self.run_guest(vcpu, fx);
        } else {
            fx.push(Effect::RunGuest(vcpu));
        }
    }

    /// virtio-net's poll that used its weight returns without completing
    /// NAPI (`virtnet_poll`), so the softirq polls it again: no unmask,
    /// no interrupt (Linux 3.6 drivers/net/virtio_net.c).
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

    pub(super) fn advance(&mut self, vcpu: usize) {
        if let Some(frame) = self.vcpus[vcpu].frames.last_mut() {
            frame.pc = (frame.pc + 1) % frame.program.len();
            frame.remaining = None;
        }
    }

    /// STI or IRET to an interruptible context: an interrupt window may
    /// open; an exit or a delivery attempt follows, either of which goes on
    /// to run the guest.
    pub(super) fn enable_interrupts(&mut self, vcpu: usize, fx: &mut Effects) {
        self.vcpus[vcpu].interruptible = true;
        if self.vcpus[vcpu].hw.vmcs.interrupt_window_exits(true) {
            self.vcpus[vcpu]
                .hw
                .vmcs
                .set_primary(CPU_INTERRUPT_WINDOW_EXITING, false);
            self.list_exit(vcpu, ExitReason::InterruptWindow, fx);
            return;
        }
        fx.push(Effect::TryDeliver(vcpu));
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{applied, exit_of, in_handler, listed, running, scheduled, single};
    use super::*;
    use crate::design::DesignKind;
    use crate::metrics::Invariant;

    #[test]
    fn an_eoi_step_hands_over_to_the_eoi_and_runs_on_after_it() {
        let mut m = single(DesignKind::Vanilla);
        in_handler(&mut m, 0, PLAIN_HANDLER, 1, GUEST_TIMER_VECTOR);
        let fx = listed(&mut m, |m, fx| m.run_guest(0, fx));
        assert_eq!(fx, [Effect::GuestEoi(0)]);
        assert_eq!(m.vcpus[0].frames.last().map(|frame| frame.pc), Some(2));
    }

    #[test]
    fn a_timed_step_schedules_its_end_and_runs_nothing_else() {
        let mut m = single(DesignKind::Vanilla);
        in_handler(&mut m, 0, PLAIN_HANDLER, 0, GUEST_TIMER_VECTOR);
        m.now = 1_000;
        let fx = listed(&mut m, |m, fx| m.run_guest(0, fx));
        let at = 1_000 + m.profile.guest_ns.irq_entry;
        assert_eq!(fx, [scheduled(at, Event::GuestStep { vcpu: 0 })]);
        assert!(m.vcpus[0].step_running);
        // Running again while the step runs is a no-op.
        assert!(listed(&mut m, |m, fx| m.run_guest(0, fx)).is_empty());
    }

    #[test]
    fn a_suspended_step_keeps_its_remaining_time() {
        let mut m = single(DesignKind::Vanilla);
        in_handler(&mut m, 0, PLAIN_HANDLER, 0, GUEST_TIMER_VECTOR);
        applied(&mut m, |m, fx| m.start_timed(0, 1_000, fx));
        m.now = 400;
        let fx = listed(&mut m, |m, fx| m.suspend(0, fx));
        assert_eq!(fx, [Effect::Cancel(Event::GuestStep { vcpu: 0 })]);
        assert!(!m.vcpus[0].step_running);
        assert_eq!(
            m.vcpus[0].frames.last().and_then(|f| f.remaining),
            Some(600)
        );
    }

    #[test]
    fn a_handler_starts_with_interrupts_off_and_settles_the_ledger() {
        let mut m = single(DesignKind::Did);
        running(&mut m, 0);
        m.checker.raise(0, GUEST_VF_VECTOR);
        listed(&mut m, |m, fx| m.deliver_to_guest(0, GUEST_VF_VECTOR, fx));
        let top = m.vcpus[0].frames.last().copied();
        assert_eq!(top.and_then(|frame| frame.vector), Some(GUEST_VF_VECTOR));
        assert!(!m.vcpus[0].interruptible);
        assert_eq!(m.checker.handled, 1);
        // A second handler for the same vector with nothing raised.
        listed(&mut m, |m, fx| m.deliver_to_guest(0, GUEST_VF_VECTOR, fx));
        assert_eq!(m.checker.violations_of(Invariant::Doubled), 1);
        assert_eq!(m.checker.violations_of(Invariant::PriorityInversion), 1);
    }

    #[test]
    fn the_woken_thread_runs_only_when_the_last_handler_returns() {
        let mut m = single(DesignKind::Did);
        // A timer handler nested in a VF handler, at its WakeUserTask step.
        in_handler(&mut m, 0, RX_HANDLER, 6, GUEST_VF_VECTOR);
        m.vcpus[0].frames.push(Frame {
            program: TIMER_HANDLER,
            pc: 3,
            remaining: None,
            vector: Some(GUEST_TIMER_VECTOR),
            eoi_done: true,
            saved_interruptible: true,
        });
        listed(&mut m, |m, fx| m.run_guest(0, fx));
        // Back in the VF handler (its Iret next): the thread waits.
        assert!(m.timer_threads.is_woken(0));
        let top = m.vcpus[0].frames.last().map(|frame| frame.vector);
        assert_eq!(top, Some(Some(GUEST_VF_VECTOR)));
        m.vcpus[0].step_running = false;
        listed(&mut m, |m, fx| m.run_guest(0, fx));
        // The VF handler returned: the scheduler switched to the thread.
        assert!(!m.timer_threads.is_woken(0));
        let top = m.vcpus[0].frames.last().map(|frame| frame.program.len());
        assert_eq!(top, Some(TIMER_THREAD.len()));
    }

    #[test]
    fn sti_with_a_requested_window_exits_otherwise_tries_to_deliver() {
        let mut m = single(DesignKind::Vanilla);
        running(&mut m, 0);
        let fx = listed(&mut m, |m, fx| m.enable_interrupts(0, fx));
        assert_eq!(fx, [Effect::TryDeliver(0)]);
        m.vcpus[0]
            .hw
            .vmcs
            .set_primary(CPU_INTERRUPT_WINDOW_EXITING, true);
        let fx = listed(&mut m, |m, fx| m.enable_interrupts(0, fx));
        assert_eq!(fx, [exit_of(&m, 0, ExitReason::InterruptWindow)]);
    }
}
