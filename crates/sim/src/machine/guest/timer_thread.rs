//! The guest's timer thread: a 1 kHz guest timer whose handler wakes a
//! waiting thread; the thread, run by the guest's scheduler once the last
//! handler returns, reads the clock, sleeps again, and the handler has
//! already re-armed the timer. cyclictest is this thread, measured; a
//! group's `with_timer` runs it beside another workload, unmeasured.
//!
//! The guest's own tick shares the one LAPIC timer with it. Linux 3.6's
//! NO_HZ idle (kernel/time/tick-sched.c, `tick_nohz_stop_sched_tick`)
//! keeps the tick running when the next timer event is at most one jiffy
//! away ("Do not stop the tick, if we are only one off"), which a 1 kHz
//! thread always is: so a vCPU with the thread also ticks at the guest's
//! HZ (`guest_tick.hz`), its LAPIC timer programmed for whichever of the
//! two comes first (`hrtimer_interrupt` runs every expired one and
//! re-arms for the next). The tick's timer softirq runs the timer-wheel
//! callbacks due, among them the guest's housekeeping (`housekeeping`),
//! at `irq_exit`, before the return to a woken thread.

use super::{Step, TimerWrite, Work};
use crate::rng::Rng;

/// The thread's period unless its workload sets one: cyclictest's and a
/// group's `with_timer` (1 kHz).
pub(super) const TIMER_THREAD_PERIOD_NS: u64 = 1_000_000;

/// The timer's interrupt: re-arm for the next expiry of either timer, EOI,
/// wake the thread if its expiry came, then the tick's softirq if the tick
/// came.
pub(in crate::machine) const TIMER_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::WriteTimer(TimerWrite::NextTick),
    Step::Eoi,
    Step::WakeTimerThread,
    Step::TickSoftirq,
    Step::Iret,
];
/// The thread, run by the guest's scheduler once the handlers return: the
/// switch to it and its return from the wait, then it reads the clock;
/// then it sleeps again.
pub(in crate::machine) const TIMER_THREAD: &[Step] = &[
    Step::Work(Work::TimerToUserRest),
    Step::TimerThreadReadsClock,
    Step::Iret,
];

/// The timer threads' state and the guest tick beside them, per vCPU.
#[derive(Debug, Default)]
pub(super) struct TimerThreads {
    /// The thread's next expiry; None on a vCPU with no thread.
    targets: Vec<Option<u64>>,
    /// The guest tick's next expiry, on a vCPU with a thread.
    ticks: Vec<Option<u64>>,
    /// The thread's period.
    period_ns: u64,
    /// The guest's tick period (0: no tick, or the thread's period is
    /// longer than a jiffy and lets NO_HZ idle stop it).
    tick_period_ns: u64,
    /// The thread's expiry the last handler took: its latency's start.
    expired: Vec<Option<u64>>,
    /// The running handler found the thread's expiry: it wakes the thread.
    thread_due: Vec<bool>,
    /// The running handler found the tick's expiry: its softirq runs.
    tick_due: Vec<bool>,
    /// The thread is woken and waits for the handlers to return.
    woken: Vec<bool>,
}

impl TimerThreads {
    /// The timer threads of `vcpus` vCPUs, each with a period of
    /// `period_ns`, in a guest whose HZ is `tick_hz` (0: no tick
    /// modelled); the tick runs beside a thread at most a jiffy apart.
    pub(super) fn new(vcpus: usize, tick_hz: u64, period_ns: u64) -> Self {
        let jiffy = 1_000_000_000 / tick_hz.max(1);
        TimerThreads {
            targets: vec![None; vcpus],
            ticks: vec![None; vcpus],
            period_ns,
            tick_period_ns: if tick_hz > 0 && period_ns <= jiffy {
                jiffy
            } else {
                0
            },
            expired: vec![None; vcpus],
            thread_due: vec![false; vcpus],
            tick_due: vec![false; vcpus],
            woken: vec![false; vcpus],
        }
    }

    /// `vcpu`'s thread arms its first expiry, staggered by a draw from
    /// `rng` so that the VMs' ticks do not all coincide, and the guest's
    /// tick starts at a phase of its own: the deadline for the guest's
    /// timer.
    pub(super) fn arm_first_tick(&mut self, vcpu: usize, rng: &mut Rng) -> u64 {
        let offset = rng.next_u64() % self.period_ns;
        let target = self.period_ns + offset;
        self.targets[vcpu] = Some(target);
        if self.tick_period_ns > 0 {
            self.ticks[vcpu] = Some(rng.next_u64() % self.tick_period_ns + 1);
        }
        self.deadline(vcpu).unwrap_or(target)
    }

    /// The earlier of `vcpu`'s two expiries.
    fn deadline(&self, vcpu: usize) -> Option<u64> {
        match (self.targets[vcpu], self.ticks[vcpu]) {
            (Some(thread), Some(tick)) => Some(thread.min(tick)),
            (thread, tick) => thread.or(tick),
        }
    }

    /// `vcpu` runs a timer thread, whose handler its timer vector starts.
    pub(super) fn ticks(&self, vcpu: usize) -> bool {
        self.targets[vcpu].is_some()
    }

    /// `vcpu`'s guest keeps its periodic tick (its thread holds it off
    /// NO_HZ idle): the tick's softirq runs its timer-wheel work.
    pub(super) fn guest_ticks(&self, vcpu: usize) -> bool {
        self.ticks[vcpu].is_some()
    }

    /// The handler re-arms at `now`: each timer that expired moves to its
    /// next period (the thread's never in the past, the tick's to its next
    /// boundary after `now`, as `hrtimer_forward` does); the deadline of
    /// the earlier one.
    pub(super) fn next_tick(&mut self, vcpu: usize, now: u64) -> u64 {
        if let Some(target) = self.targets[vcpu].filter(|&target| target <= now) {
            self.expired[vcpu] = Some(target);
            self.thread_due[vcpu] = true;
            self.targets[vcpu] = Some((target + self.period_ns).max(now + 1));
        }
        if let Some(tick) = self.ticks[vcpu].filter(|&tick| tick <= now) {
            let period = self.tick_period_ns;
            self.tick_due[vcpu] = true;
            self.ticks[vcpu] = Some(tick + ((now - tick) / period + 1) * period);
        }
        self.deadline(vcpu).unwrap_or(now + self.period_ns)
    }

    /// The handler wakes the thread if it found the thread's expiry.
    pub(super) fn wake(&mut self, vcpu: usize) {
        if std::mem::take(&mut self.thread_due[vcpu]) {
            self.woken[vcpu] = true;
        }
    }

    /// Whether the handler found the tick's expiry, taken once: its
    /// softirq runs.
    pub(super) fn take_tick_due(&mut self, vcpu: usize) -> bool {
        std::mem::take(&mut self.tick_due[vcpu])
    }

    /// Whether the thread was woken, taken once: the scheduler runs it.
    pub(super) fn take_woken(&mut self, vcpu: usize) -> bool {
        std::mem::take(&mut self.woken[vcpu])
    }

    /// The thread reads the clock at `now`: its latency from the expiry
    /// it waited for (the handler already re-armed for the next period);
    /// None on a vCPU with no thread.
    pub(super) fn latency(&self, vcpu: usize, now: u64) -> Option<u64> {
        let expired = self.expired[vcpu]?;
        Some(now.saturating_sub(expired))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_measures_from_the_expiry_the_handler_took() {
        let mut timer = TimerThreads::new(2, 0, TIMER_THREAD_PERIOD_NS);
        assert!(!timer.ticks(1));
        timer.targets[1] = Some(3_000_000);
        assert_eq!(timer.next_tick(1, 3_000_500), 4_000_000);
        timer.wake(1);
        assert!(timer.take_woken(1));
        assert_eq!(timer.latency(1, 3_020_000), Some(20_000));
        assert_eq!(timer.latency(0, 3_020_000), None, "no thread");
    }

    #[test]
    fn the_first_expiry_falls_in_the_second_period_and_the_ticks_follow_it() {
        let mut timer = TimerThreads::new(2, 0, TIMER_THREAD_PERIOD_NS);
        let mut rng = Rng::new(7);
        let first = timer.arm_first_tick(1, &mut rng);
        assert!((TIMER_THREAD_PERIOD_NS..2 * TIMER_THREAD_PERIOD_NS).contains(&first));
        assert!(timer.ticks(1) && !timer.ticks(0));
        assert!(!timer.guest_ticks(1), "no guest tick modelled");
        assert_eq!(
            timer.next_tick(1, first + 10),
            first + TIMER_THREAD_PERIOD_NS
        );
        let mut other = Rng::new(8);
        let second = TimerThreads::new(1, 0, TIMER_THREAD_PERIOD_NS).arm_first_tick(0, &mut other);
        assert_ne!(first, second, "another draw, another stagger");
    }

    #[test]
    fn a_late_re_arm_is_never_in_the_past() {
        let mut timer = TimerThreads::new(1, 0, TIMER_THREAD_PERIOD_NS);
        timer.targets[0] = Some(1_000_000);
        assert_eq!(timer.next_tick(0, 5_000_000), 5_000_001);
    }

    #[test]
    fn a_wake_comes_only_from_the_threads_expiry_and_is_taken_once() {
        let mut timer = TimerThreads::new(1, 250, TIMER_THREAD_PERIOD_NS);
        timer.targets[0] = Some(3_000_000);
        timer.ticks[0] = Some(2_500_000);
        // The tick's expiry alone: no wake, the softirq is due once.
        assert_eq!(timer.next_tick(0, 2_500_100), 3_000_000);
        timer.wake(0);
        assert!(!timer.take_woken(0));
        assert!(timer.take_tick_due(0));
        assert!(!timer.take_tick_due(0));
        // The thread's: a wake, taken once.
        assert_eq!(timer.next_tick(0, 3_000_100), 4_000_000);
        timer.wake(0);
        assert!(timer.take_woken(0));
        assert!(!timer.take_woken(0));
        assert!(!timer.take_tick_due(0));
    }

    #[test]
    fn only_a_thread_within_a_jiffy_keeps_the_guest_ticking() {
        let mut rng = Rng::new(5);
        let mut fast = TimerThreads::new(1, 250, 4_000_000);
        fast.arm_first_tick(0, &mut rng);
        assert!(fast.guest_ticks(0));
        let mut slow = TimerThreads::new(1, 250, 4_000_001);
        slow.arm_first_tick(0, &mut rng);
        assert!(slow.ticks(0) && !slow.guest_ticks(0), "NO_HZ idle stops it");
    }

    #[test]
    fn the_guest_tick_keeps_its_boundaries_and_shares_the_timer() {
        let mut timer = TimerThreads::new(1, 250, TIMER_THREAD_PERIOD_NS);
        let first = timer.arm_first_tick(0, &mut Rng::new(3));
        assert!(timer.guest_ticks(0));
        let (thread, tick) = (timer.targets[0], timer.ticks[0]);
        assert_eq!(Some(first), thread.min(tick));
        // Both expire in one interrupt, served late: each moves on, the
        // tick by whole periods past `now`.
        timer.targets[0] = Some(8_000_000);
        timer.ticks[0] = Some(8_000_000);
        assert_eq!(timer.next_tick(0, 12_500_000), 12_500_001);
        assert_eq!(timer.ticks[0], Some(16_000_000));
        assert!(timer.take_tick_due(0));
        timer.wake(0);
        assert!(timer.take_woken(0));
    }
}
