//! The guest model: handler programs and the interpreter that runs them.

use super::apps::App;
use super::cyclictest::{TIMER_HANDLER, USER_TASK};
use super::*;

/// Guest work whose length comes from the profile.
#[derive(Clone, Copy, Debug)]
pub(super) enum Work {
    IrqEntry,
    TimerToUserRest,
    Request,
    IpiGap,
    /// A housekeeping section with interrupts disabled.
    IrqsOffSection,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TimerWrite {
    NextTick,
    ArmGuard,
    Cancel,
}

/// One instruction of the guest model.
#[derive(Clone, Copy, Debug)]
pub(super) enum Step {
    Work(Work),
    /// Background loop that never ends (idle=poll, whileloop).
    Spin,
    /// An application's work, or a spin while it has none.
    App(App),
    MaskRx,
    UnmaskRx,
    Eoi,
    Cli,
    Sti,
    /// Housekeeping: the pass's next I/O or EPT-faulting access.
    DeviceAccess,
    /// Housekeeping: back to the start while accesses are left.
    NextAccess,
    /// ipi-call: the caller starts a call.
    StartCall,
    /// ipi-call: back to the ICR write while callees are unsent.
    NextIcrWrite,
    /// ipi-call: the caller spins until its call completes.
    AwaitCall,
    /// ipi-call: a callee ran the function.
    CompleteCall,
    /// NAPI poll: one packet at a time until the ring is empty.
    PollRx,
    /// be2net's transmit poll: every completion reaped, the event queue
    /// re-armed (its work per packet is the sender's `tx_packet`).
    ReapTx,
    WriteTimer(TimerWrite),
    /// The timer handler wakes cyclictest's thread; the scheduler runs it
    /// when the last handler returns.
    WakeUserTask,
    RecordTimerLatency,
    RecordRequestLatency,
    RecordIpiLatency,
    SubmitBlock,
    /// ipi: the ICR write of the group's IPI.
    SendIpi,
    /// ipi-call: the ICR write to the call's next callees.
    SendCallIpis,
    Halt,
    Iret,
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
/// A guard-timer expiry (fio) or a stray tick: acknowledge and return.
const PLAIN_HANDLER: &[Step] = &[Step::Work(Work::IrqEntry), Step::Eoi, Step::Iret];
pub(super) const SPIN: &[Step] = &[Step::Spin];
pub(super) const HALT_LOOP: &[Step] = &[Step::Halt];
pub(super) const SERVER: &[Step] = &[Step::App(App::Serve)];
pub(super) const SIP_RELAY: &[Step] = &[Step::App(App::Relay)];
pub(super) const STREAM_WRITER: &[Step] = &[Step::App(App::StreamWrite)];
pub(super) const POLL_MODE_DRIVER: &[Step] = &[Step::App(App::PollMode)];

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
            GUEST_VF_VECTOR | GUEST_VIRTIO_VECTOR => self.workload.device_handler,
            GUEST_VF_TX_VECTOR => TX_HANDLER,
            GUEST_TIMER_VECTOR if self.cyclictest.ticks(vcpu) => TIMER_HANDLER,
            GUEST_IPI_VECTOR => self.workload.ipi_handler,
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
    /// mean with the profile's guest shape; the IPI sender's gap is the
    /// workload's own rate, not a service time.
    pub(super) fn work_ns(&mut self, work: Work) -> u64 {
        let guest = &self.profile.guest_ns;
        let mean = match work {
            Work::IrqEntry => guest.irq_entry,
            Work::TimerToUserRest => guest.timer_irq_to_user.saturating_sub(guest.irq_entry),
            Work::Request => guest.request_work,
            Work::IrqsOffSection => self.profile.guest_housekeeping.irqs_off_ns,
            Work::IpiGap => {
                let rate = self.spec.group.ipi_rate_per_s.max(1);
                return 1_000_000_000 / rate;
            }
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
                    let remaining = frame.remaining.unwrap_or_else(|| self.rx_work_ns(vcpu));
                    self.start_timed(vcpu, remaining, fx);
                    return;
                }
                Step::Spin => {
                    self.vcpus[vcpu].spin_since = Some(self.now);
                    self.vcpus[vcpu].step_running = true;
                    return;
                }
                Step::App(app) => {
                    match frame.remaining.or_else(|| self.app_work(vcpu, app)) {
                        Some(remaining) => self.start_timed(vcpu, remaining, fx),
                        None => {
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
                Step::StartCall => {
                    self.ipi_call.start(self.vcpus[vcpu].vm, self.now);
                    self.advance(vcpu);
                    continue;
                }
                Step::NextIcrWrite => {
                    let vm = self.vcpus[vcpu].vm;
                    if !self.ipi_call.icr_writes_left(vm) {
                        self.advance(vcpu);
                    } else if let Some(top) = self.vcpus[vcpu].frames.last_mut() {
                        top.pc -= 1;
                    }
                    continue;
                }
                Step::AwaitCall => {
                    let vm = self.vcpus[vcpu].vm;
                    if self.ipi_call.done(vm) {
                        self.advance(vcpu);
                        continue;
                    }
                    self.vcpus[vcpu].spin_since = Some(self.now);
                    self.vcpus[vcpu].step_running = true;
                    return;
                }
                Step::CompleteCall => Effect::CompleteCall(vcpu),
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
                    if to_task && self.cyclictest.take_woken(vcpu) {
                        v.frames.push(Frame::background(USER_TASK));
                    }
                    if restored {
                        self.enable_interrupts(vcpu, fx);
                        return;
                    }
                    v.interruptible = false;
                    continue;
                }
                Step::WriteTimer(write) => Effect::TimerWrite { vcpu, write },
                Step::WakeUserTask => {
                    self.cyclictest.wake(vcpu);
                    self.advance(vcpu);
                    continue;
                }
                Step::RecordTimerLatency => {
                    self.advance(vcpu);
                    if let Some(latency) = self.cyclictest.latency(vcpu, self.now) {
                        self.counters.latencies.push(latency);
                    }
                    continue;
                }
                Step::RecordRequestLatency => {
                    self.advance(vcpu);
                    if let Some(latency) = self.fio.completed(self.vcpus[vcpu].vm, self.now) {
                        self.counters.request_done(latency);
                    }
                    continue;
                }
                Step::RecordIpiLatency => {
                    self.advance(vcpu);
                    self.ipi.record_latency(vcpu, self.now, &mut self.counters);
                    continue;
                }
                Step::SubmitBlock => Effect::SubmitBlock(vcpu),
                Step::SendIpi => self.ipi.write_icr(vcpu),
                Step::SendCallIpis => {
                    let vm = self.vcpus[vcpu].vm;
                    let Some(write) = self.ipi_call.write_next_icr(vm, vcpu) else {
                        self.advance(vcpu);
                        continue;
                    };
                    write
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
        if let Step::PollRx = frame.program[frame.pc] {
            // One packet done; the step repeats until the ring is empty.
            let queue = self.rx_queue_of(frame.vector);
            let pair = self.vcpus[vcpu].pair;
            let rx = self.pairs[pair].rx(queue);
            rx.ring = rx.ring.saturating_sub(1);
            rx.napi.took();
            self.counters.packets_processed += 1;
            if let Some(top) = self.vcpus[vcpu].frames.last_mut() {
                top.remaining = None;
            }
            if self.acts_on_packets() {
                fx.push(Effect::PacketTaken { vcpu, queue });
                fx.push(Effect::RunGuest(vcpu));
                return;
            }
        } else if let Step::App(app) = frame.program[frame.pc] {
            self.advance(vcpu);
            self.app_done(vcpu, app, fx);
            fx.push(Effect::RunGuest(vcpu));
            return;
        } else {
            self.advance(vcpu);
        }
        self.run_guest(vcpu, fx);
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
        assert!(m.cyclictest.woken[0]);
        let top = m.vcpus[0].frames.last().map(|frame| frame.vector);
        assert_eq!(top, Some(Some(GUEST_VF_VECTOR)));
        m.vcpus[0].step_running = false;
        listed(&mut m, |m, fx| m.run_guest(0, fx));
        // The VF handler returned: the scheduler switched to the thread.
        assert!(!m.cyclictest.woken[0]);
        let top = m.vcpus[0].frames.last().map(|frame| frame.program.len());
        assert_eq!(top, Some(USER_TASK.len()));
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
