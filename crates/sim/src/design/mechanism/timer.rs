//! Where a vCPU's LAPIC timer lives (docs/mechanisms.md sections 2 and 5):
//! KVM's emulated timer, a host hrtimer whose expiry is a host interrupt
//! on the vCPU's core; or DID's passed-through TMICT, the physical LAPIC
//! timer of the core the vCPU runs on, parked on the housekeeping core
//! while the vCPU is descheduled.
//!
//! Per vCPU it owns the parked deadline; it charges the migrations
//! between a core's LAPIC and the housekeeping core
//! (`DesignWorkNs::timer_migration`).

use crate::profile::DesignWorkNs;

/// Where a vCPU's LAPIC timer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestTimer {
    /// TMICT writes exit; KVM emulates the timer with a host hrtimer whose
    /// expiry is a host interrupt on the vCPU's core.
    HostHrtimer,
    /// TMICT passed through: the guest programs the physical LAPIC timer;
    /// while the vCPU is descheduled its timer is parked on the
    /// housekeeping core (DID).
    PassThrough,
}

/// One vCPU's timer state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TimerState {
    /// DID: the guest's deadline while the vCPU is descheduled.
    parked: Option<u64>,
}

impl TimerState {
    /// Parks `deadline` (None: nothing parked).
    pub(crate) fn park(&mut self, deadline: Option<u64>) {
        self.parked = deadline;
    }
}

/// What a timer operation asks of the engine, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TimerEffect {
    /// Write TMICT of the vCPU's software LAPIC (0 stops it) and follow
    /// its deadline with KVM's hrtimer.
    Software { count: u64 },
    /// Write the vCPU's count into its core's physical TMICT; the vCPU
    /// owns that timer.
    Physical { count: u64 },
    /// Stop the core's physical timer and drop its owner.
    StopPhysical,
    /// Park the deadline on the housekeeping core.
    Park(u64),
    /// Drop the parked deadline, if any (apart from `Park` so that an
    /// effect stays two words: the engine's effect stack is hot).
    Unpark,
    /// KVM's hrtimer fired: a host timer interrupt on the vCPU's core.
    HostInterrupt,
    /// A parked timer fired: queue the guest's timer vector.
    InjectTimer,
}

/// Up to two timer effects, in order.
pub(crate) type TimerEffects = [Option<TimerEffect>; 2];

/// The count a LAPIC timer needs at `now` to expire at `deadline`.
fn count_until(deadline: u64, now: u64) -> u64 {
    deadline.saturating_sub(now).max(1)
}

impl GuestTimer {
    /// The guest programs its timer for `deadline`; `current_here` says
    /// whether its vCPU is its core's current one.
    pub(crate) fn program(self, deadline: u64, now: u64, current_here: bool) -> TimerEffect {
        let count = count_until(deadline, now);
        match self {
            GuestTimer::HostHrtimer => TimerEffect::Software { count },
            GuestTimer::PassThrough if current_here => TimerEffect::Physical { count },
            GuestTimer::PassThrough => TimerEffect::Park(deadline),
        }
    }

    /// The guest stops its timer; `owns_physical` says whether its vCPU
    /// owns its core's physical timer.
    pub(crate) fn cancel(self, owns_physical: bool) -> TimerEffects {
        match self {
            GuestTimer::HostHrtimer => [Some(TimerEffect::Software { count: 0 }), None],
            GuestTimer::PassThrough => [
                owns_physical.then_some(TimerEffect::StopPhysical),
                Some(TimerEffect::Unpark),
            ],
        }
    }

    /// The vCPU's host-side timer fired: KVM's hrtimer, or the parked one.
    pub(crate) fn host_timer_fired(self, state: &mut TimerState) -> Option<TimerEffect> {
        match self {
            GuestTimer::HostHrtimer => Some(TimerEffect::HostInterrupt),
            GuestTimer::PassThrough => state.parked.take().map(|_| TimerEffect::InjectTimer),
        }
    }

    /// The vCPU is scheduled in at `now`: a parked timer moves to its
    /// core's LAPIC. Returns the effects and their host time.
    pub(crate) fn schedule_in(
        self,
        state: &mut TimerState,
        now: u64,
        costs: &DesignWorkNs,
    ) -> (TimerEffects, u64) {
        match (self, state.parked.take()) {
            (GuestTimer::PassThrough, Some(deadline)) => (
                [
                    Some(TimerEffect::Unpark),
                    Some(TimerEffect::Physical {
                        count: count_until(deadline, now),
                    }),
                ],
                costs.timer_migration,
            ),
            _ => ([None, None], 0),
        }
    }

    /// The vCPU is scheduled out; `owned_deadline` is its core's physical
    /// timer deadline if the vCPU owns that timer. It moves to the
    /// housekeeping core. Returns the effects and their host time.
    pub(crate) fn schedule_out(
        self,
        owned_deadline: Option<Option<u64>>,
        costs: &DesignWorkNs,
    ) -> (TimerEffects, u64) {
        match (self, owned_deadline) {
            (GuestTimer::PassThrough, Some(deadline)) => (
                [
                    Some(TimerEffect::StopPhysical),
                    Some(deadline.map_or(TimerEffect::Unpark, TimerEffect::Park)),
                ],
                costs.timer_migration,
            ),
            _ => ([None, None], 0),
        }
    }

    /// Host time the vCPU's core spends turning one expiry into a virtual
    /// interrupt beyond the exit that took it: KVM's hrtimer callback, the
    /// kick and the pending-timer injection at the next entry (the DID
    /// paper's "hypervisor's own delay"). A passed-through timer's expiry
    /// reaches the guest with none of them.
    pub(crate) fn expiry_host_ns(self, costs: &DesignWorkNs) -> u64 {
        match self {
            GuestTimer::HostHrtimer => {
                costs.hrtimer_callback + costs.vcpu_kick + costs.timer_injection
            }
            GuestTimer::PassThrough => 0,
        }
    }

    /// DID's timer invariant on a guest core: an `armed` physical timer
    /// holds the count of its `owner`, which must be the vCPU `current`
    /// there. Whether it is broken; only a passed-through timer has an
    /// owner.
    pub(crate) fn misowned(
        self,
        armed: bool,
        owner: Option<usize>,
        current: Option<usize>,
    ) -> bool {
        self == GuestTimer::PassThrough && armed && owner != current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_passed_through_armed_timer_can_belong_to_another_vcpu() {
        let did = GuestTimer::PassThrough;
        assert!(did.misowned(true, Some(1), Some(0)));
        assert!(did.misowned(true, None, Some(0)));
        assert!(!did.misowned(true, Some(0), Some(0)));
        assert!(!did.misowned(false, Some(1), Some(0)));
        assert!(!GuestTimer::HostHrtimer.misowned(true, Some(1), Some(0)));
    }

    const COSTS: DesignWorkNs = DesignWorkNs {
        irte_rewrite: 1,
        self_ipi: 10,
        timer_migration: 100,
        injection_mode_switch: 1000,
        hrtimer_callback: 2000,
        vcpu_kick: 20_000,
        timer_injection: 200_000,
    };

    #[test]
    fn kvm_pays_callback_kick_and_injection_per_expiry_and_did_none() {
        assert_eq!(GuestTimer::HostHrtimer.expiry_host_ns(&COSTS), 222_000);
        assert_eq!(GuestTimer::PassThrough.expiry_host_ns(&COSTS), 0);
    }

    #[test]
    fn kvm_programs_and_stops_the_software_timer() {
        let timer = GuestTimer::HostHrtimer;
        assert_eq!(
            timer.program(500, 200, true),
            TimerEffect::Software { count: 300 }
        );
        assert_eq!(
            timer.cancel(false),
            [Some(TimerEffect::Software { count: 0 }), None]
        );
        let mut state = TimerState::default();
        assert_eq!(
            timer.host_timer_fired(&mut state),
            Some(TimerEffect::HostInterrupt)
        );
        assert_eq!(
            timer.schedule_out(Some(Some(500)), &COSTS),
            ([None, None], 0)
        );
    }

    #[test]
    fn did_programs_the_physical_timer_or_parks_it() {
        let timer = GuestTimer::PassThrough;
        assert_eq!(
            timer.program(500, 200, true),
            TimerEffect::Physical { count: 300 }
        );
        assert_eq!(timer.program(500, 200, false), TimerEffect::Park(500));
        assert_eq!(
            timer.program(100, 200, true),
            TimerEffect::Physical { count: 1 },
            "past"
        );
        let cancel = timer.cancel(true);
        assert_eq!(
            cancel,
            [Some(TimerEffect::StopPhysical), Some(TimerEffect::Unpark)]
        );
        assert_eq!(timer.cancel(false)[0], None);
    }

    #[test]
    fn did_migrates_the_timer_at_each_reschedule_and_injects_a_parked_expiry() {
        let timer = GuestTimer::PassThrough;
        let (out, ns) = timer.schedule_out(Some(Some(900)), &COSTS);
        assert_eq!(
            out,
            [
                Some(TimerEffect::StopPhysical),
                Some(TimerEffect::Park(900))
            ]
        );
        assert_eq!(ns, 100);
        assert_eq!(
            timer.schedule_out(None, &COSTS),
            ([None, None], 0),
            "not its timer"
        );
        let mut state = TimerState::default();
        state.park(Some(900));
        let (back, ns) = timer.schedule_in(&mut state, 400, &COSTS);
        let physical = TimerEffect::Physical { count: 500 };
        assert_eq!(back, [Some(TimerEffect::Unpark), Some(physical)]);
        assert_eq!(ns, 100);
        assert_eq!(timer.host_timer_fired(&mut state), None, "unparked");
        state.park(Some(900));
        assert_eq!(
            timer.host_timer_fired(&mut state),
            Some(TimerEffect::InjectTimer)
        );
        assert_eq!(timer.host_timer_fired(&mut state), None, "fired once");
    }
}
