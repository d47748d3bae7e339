//! cyclictest: a 1 kHz guest timer whose handler wakes a measuring
//! thread; the thread, run by the guest's scheduler once the last handler
//! returns, reads the clock: the latency from the expiry to it. The same
//! timer thread ticks beside another workload when its group asks for a
//! timer (`with_timer`), unmeasured.

use super::guest::{Step, TimerWrite, Work};
use super::*;

pub(super) const CYCLICTEST_PERIOD_NS: u64 = 1_000_000;

/// cyclictest's timer interrupt: re-arm, EOI, wake the measuring thread.
pub(super) const TIMER_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::WriteTimer(TimerWrite::NextTick),
    Step::Eoi,
    Step::WakeUserTask,
    Step::Iret,
];
/// cyclictest's thread, run by the guest's scheduler once the handlers
/// return: the switch to it and its return from the wait, then it reads
/// the clock; then it sleeps again.
pub(super) const USER_TASK: &[Step] = &[
    Step::Work(Work::TimerToUserRest),
    Step::RecordTimerLatency,
    Step::Iret,
];

/// The timer threads' own state, per vCPU.
#[derive(Debug, Default)]
pub(super) struct Cyclictest {
    /// The run is cyclictest's: its thread's latencies count.
    measured: bool,
    /// The expiry the guest asked for; None on a vCPU with no thread.
    targets: Vec<Option<u64>>,
    /// The thread is woken and waits for the handlers to return.
    pub(super) woken: Vec<bool>,
}

impl Cyclictest {
    pub(super) fn new(vcpus: usize, measured: bool) -> Self {
        Cyclictest {
            measured,
            targets: vec![None; vcpus],
            woken: vec![false; vcpus],
        }
    }

    /// `vcpu`'s thread arms its first expiry, staggered by a draw from
    /// `rng` so that the VMs' ticks do not all coincide: the deadline for
    /// the guest's timer.
    pub(super) fn arm_first_tick(&mut self, vcpu: usize, rng: &mut Rng) -> u64 {
        let offset = rng.next_u64() % CYCLICTEST_PERIOD_NS;
        let target = CYCLICTEST_PERIOD_NS + offset;
        self.targets[vcpu] = Some(target);
        target
    }

    /// `vcpu` runs a timer thread, whose handler its timer vector starts.
    pub(super) fn ticks(&self, vcpu: usize) -> bool {
        self.targets[vcpu].is_some()
    }

    /// The handler re-arms: the next period's expiry, never in the past.
    pub(super) fn next_tick(&mut self, vcpu: usize, now: u64) -> u64 {
        let target = self.targets[vcpu].unwrap_or(now) + CYCLICTEST_PERIOD_NS;
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
    /// it waited for (the handler already re-armed for the next period),
    /// None when this run does not measure it.
    pub(super) fn latency(&self, vcpu: usize, now: u64) -> Option<u64> {
        let expired = self.targets[vcpu]?.saturating_sub(CYCLICTEST_PERIOD_NS);
        self.measured.then(|| now.saturating_sub(expired))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_measures_from_the_expiry_before_the_re_armed_one() {
        let mut timer = Cyclictest::new(2, true);
        assert!(!timer.ticks(1));
        timer.targets[1] = Some(3_000_000);
        assert_eq!(timer.next_tick(1, 3_000_500), 4_000_000);
        assert_eq!(timer.latency(1, 3_020_000), Some(20_000));
        assert_eq!(timer.latency(0, 3_020_000), None, "no thread");
        let beside = Cyclictest {
            measured: false,
            ..timer
        };
        assert_eq!(beside.latency(1, 3_020_000), None, "unmeasured");
    }

    #[test]
    fn the_first_expiry_falls_in_the_second_period_and_the_ticks_follow_it() {
        let mut timer = Cyclictest::new(2, true);
        let mut rng = Rng::new(7);
        let first = timer.arm_first_tick(1, &mut rng);
        assert!((CYCLICTEST_PERIOD_NS..2 * CYCLICTEST_PERIOD_NS).contains(&first));
        assert!(timer.ticks(1) && !timer.ticks(0));
        assert_eq!(timer.next_tick(1, first + 10), first + CYCLICTEST_PERIOD_NS);
        let mut other = Rng::new(8);
        let second = Cyclictest::new(1, true).arm_first_tick(0, &mut other);
        assert_ne!(first, second, "another draw, another stagger");
    }

    #[test]
    fn a_late_re_arm_is_never_in_the_past() {
        let mut timer = Cyclictest::new(1, true);
        timer.targets[0] = Some(1_000_000);
        assert_eq!(timer.next_tick(0, 5_000_000), 5_000_001);
    }

    #[test]
    fn a_wake_is_taken_once() {
        let mut timer = Cyclictest::new(1, true);
        assert!(!timer.take_woken(0));
        timer.wake(0);
        assert!(timer.take_woken(0));
        assert!(!timer.take_woken(0));
    }
}
