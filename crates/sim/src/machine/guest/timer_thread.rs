//! The guest's timer thread: a 1 kHz guest timer whose handler wakes a
//! waiting thread; the thread, run by the guest's scheduler once the last
//! handler returns, reads the clock, sleeps again, and the handler has
//! already re-armed the timer. cyclictest is this thread, measured; a
//! group's `with_timer` runs it beside another workload, unmeasured.

use super::{Step, TimerWrite, Work};
use crate::rng::Rng;

pub(super) const TIMER_THREAD_PERIOD_NS: u64 = 1_000_000;

/// The timer's interrupt: re-arm, EOI, wake the thread.
pub(in crate::machine) const TIMER_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::WriteTimer(TimerWrite::NextTick),
    Step::Eoi,
    Step::WakeTimerThread,
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

/// The timer threads' state, per vCPU.
#[derive(Debug, Default)]
pub(super) struct TimerThreads {
    /// The expiry the guest asked for; None on a vCPU with no thread.
    targets: Vec<Option<u64>>,
    /// The thread is woken and waits for the handlers to return.
    woken: Vec<bool>,
}

impl TimerThreads {
    pub(super) fn new(vcpus: usize) -> Self {
        TimerThreads {
            targets: vec![None; vcpus],
            woken: vec![false; vcpus],
        }
    }

    /// `vcpu`'s thread arms its first expiry, staggered by a draw from
    /// `rng` so that the VMs' ticks do not all coincide: the deadline for
    /// the guest's timer.
    pub(super) fn arm_first_tick(&mut self, vcpu: usize, rng: &mut Rng) -> u64 {
        let offset = rng.next_u64() % TIMER_THREAD_PERIOD_NS;
        let target = TIMER_THREAD_PERIOD_NS + offset;
        self.targets[vcpu] = Some(target);
        target
    }

    /// `vcpu` runs a timer thread, whose handler its timer vector starts.
    pub(super) fn ticks(&self, vcpu: usize) -> bool {
        self.targets[vcpu].is_some()
    }

    /// The handler re-arms: the next period's expiry, never in the past.
    pub(super) fn next_tick(&mut self, vcpu: usize, now: u64) -> u64 {
        let target = self.targets[vcpu].unwrap_or(now) + TIMER_THREAD_PERIOD_NS;
        let target = target.max(now + 1);
        self.targets[vcpu] = Some(target);
        target
    }

    pub(super) fn wake(&mut self, vcpu: usize) {
        self.woken[vcpu] = true;
    }

    /// Whether the thread was woken, taken once: the scheduler runs it.
    pub(super) fn take_woken(&mut self, vcpu: usize) -> bool {
        std::mem::take(&mut self.woken[vcpu])
    }

    /// The thread reads the clock at `now`: its latency from the expiry
    /// it waited for (the handler already re-armed for the next period);
    /// None on a vCPU with no thread.
    pub(super) fn latency(&self, vcpu: usize, now: u64) -> Option<u64> {
        let expired = self.targets[vcpu]?.saturating_sub(TIMER_THREAD_PERIOD_NS);
        Some(now.saturating_sub(expired))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_measures_from_the_expiry_before_the_re_armed_one() {
        let mut timer = TimerThreads::new(2);
        assert!(!timer.ticks(1));
        timer.targets[1] = Some(3_000_000);
        assert_eq!(timer.next_tick(1, 3_000_500), 4_000_000);
        assert_eq!(timer.latency(1, 3_020_000), Some(20_000));
        assert_eq!(timer.latency(0, 3_020_000), None, "no thread");
    }

    #[test]
    fn the_first_expiry_falls_in_the_second_period_and_the_ticks_follow_it() {
        let mut timer = TimerThreads::new(2);
        let mut rng = Rng::new(7);
        let first = timer.arm_first_tick(1, &mut rng);
        assert!((TIMER_THREAD_PERIOD_NS..2 * TIMER_THREAD_PERIOD_NS).contains(&first));
        assert!(timer.ticks(1) && !timer.ticks(0));
        assert_eq!(
            timer.next_tick(1, first + 10),
            first + TIMER_THREAD_PERIOD_NS
        );
        let mut other = Rng::new(8);
        let second = TimerThreads::new(1).arm_first_tick(0, &mut other);
        assert_ne!(first, second, "another draw, another stagger");
    }

    #[test]
    fn a_late_re_arm_is_never_in_the_past() {
        let mut timer = TimerThreads::new(1);
        timer.targets[0] = Some(1_000_000);
        assert_eq!(timer.next_tick(0, 5_000_000), 5_000_001);
    }

    #[test]
    fn a_wake_is_taken_once() {
        let mut timer = TimerThreads::new(1);
        assert!(!timer.take_woken(0));
        timer.wake(0);
        assert!(timer.take_woken(0));
        assert!(!timer.take_woken(0));
    }
}
