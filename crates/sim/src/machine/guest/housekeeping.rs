//! The guest's housekeeping, which makes the idle VM's background I/O and
//! EPT exits. Passes come every `guest_housekeeping.period_ns` (jittered)
//! and make the accesses of one period at the profile's measured idle exit
//! rates, each in a section with interrupts disabled: a timer expiring in
//! the section waits for it, and one expiring during the access's exit
//! lands while the core is in host mode.
//!
//! The passes are timer-wheel work (ASSUMED: the idle VM's port I/O and
//! EPT-faulting accesses come from periodic kernel timers, such as the
//! clocksource watchdog reading the ACPI PM timer's port). On a vCPU whose
//! guest keeps its tick (`timer_thread`), a pass due waits for the next
//! tick and runs in its timer softirq (`run_timer_softirq`, raised by the
//! tick's `run_local_timers`), which `irq_exit` runs before the return to
//! a thread the same interrupt woke: what ties the housekeeping's exits,
//! and the host-mode time they bring, to the guest's timer.

use dirq_stats::{f64_of, round_u64};

use super::{Frame, Guest, Step, Work};
use crate::machine::effects::{Effect, Effects};
use crate::machine::{index_u32, Event, GUEST_TIMER_VECTOR};
use crate::metrics::ExitReason;
use crate::rng::Rng;

/// One housekeeping pass: per access, interrupts off, the access, on again.
pub(super) const HOUSEKEEPING: &[Step] = &[
    Step::Cli,
    Step::Work(Work::IrqsOffSection),
    Step::DeviceAccess,
    Step::Sti,
    Step::NextAccess,
    Step::Iret,
];

/// The accesses a housekeeping pass has still to make.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(in crate::machine) struct Accesses {
    pub(super) io: u32,
    pub(super) ept: u32,
}

impl Accesses {
    pub(super) fn is_empty(self) -> bool {
        self.io == 0 && self.ept == 0
    }

    /// The next access's exit reason (port I/O first), taken off the list.
    pub(super) fn take(&mut self) -> Option<ExitReason> {
        if self.io > 0 {
            self.io -= 1;
            Some(ExitReason::IoInstruction)
        } else if self.ept > 0 {
            self.ept -= 1;
            Some(ExitReason::EptViolation)
        } else {
            None
        }
    }
}

impl Guest {
    /// The first housekeeping pass of `vcpu`, at a random phase.
    pub(in crate::machine) fn start_housekeeping(
        &self,
        vcpu: usize,
        rng: &mut Rng,
        fx: &mut Effects,
    ) {
        let period = self.costs.housekeeping.period_ns;
        if period == 0 {
            return;
        }
        let at = rng.next_u64() % period;
        fx.schedule(
            at,
            Event::Housekeeping {
                vcpu: index_u32(vcpu),
            },
        );
    }

    /// How many accesses at `rate_per_s` one period holds: the whole part,
    /// plus one with the probability of the fraction, so the mean is kept.
    fn accesses_per_pass(&self, rate_per_s: f64, rng: &mut Rng) -> u32 {
        let expected = rate_per_s * f64_of(self.costs.housekeeping.period_ns) / 1e9;
        let whole = expected.floor();
        let extra = rng.next_f64() < expected - whole;
        // `whole` is already whole: round_u64 only converts it.
        u32::try_from(round_u64(whole)).unwrap_or(u32::MAX) + u32::from(extra)
    }

    /// A housekeeping pass is due at `now`: schedule the next, and run this
    /// one above the background task (below any handler, which returns
    /// first). `halted`: the vCPU sleeps in HLT; `hlt_exits`: it slept in
    /// the host (a hypervisor's HLT exit), whose wake-up the pass needs.
    pub(in crate::machine) fn housekeeping_due(
        &mut self,
        vcpu: usize,
        halted: bool,
        hlt_exits: bool,
        now: u64,
        rng: &mut Rng,
        fx: &mut Effects,
    ) {
        let housekeeping = &self.costs.housekeeping;
        let (period, jitter) = (
            housekeeping.period_ns,
            housekeeping.jitter_ns.min(housekeeping.period_ns),
        );
        let offset = rng.next_u64() % (2 * jitter + 1);
        let next = now + period - jitter + offset;
        fx.schedule(
            next,
            Event::Housekeeping {
                vcpu: index_u32(vcpu),
            },
        );
        let rates = &self.costs.idle_exits_per_s;
        let (io_rate, ept_rate) = (rates.io_instruction, rates.ept_violation);
        let io = self.accesses_per_pass(io_rate, rng);
        let ept = self.accesses_per_pass(ept_rate, rng);
        let pass_running = !self.vcpus[vcpu].housekeeping.is_empty();
        let waits_for_tick = self.timer_threads.guest_ticks(vcpu);
        let pass = &mut self.vcpus[vcpu].housekeeping;
        pass.io += io;
        pass.ept += ept;
        if pass_running || pass.is_empty() || waits_for_tick {
            return;
        }
        if halted && !hlt_exits {
            // Halted in guest mode (bare metal): its accesses exit nowhere;
            // they wait for the core's next wake-up.
            self.vcpus[vcpu]
                .frames
                .insert(1, Frame::background(HOUSEKEEPING));
            return;
        }
        let on_top = self.vcpus[vcpu].frames.len() == 1;
        if on_top {
            self.suspend(vcpu, now, fx);
        }
        self.vcpus[vcpu]
            .frames
            .insert(1, Frame::background(HOUSEKEEPING));
        if halted {
            // The guest's housekeeping timer wakes the halted vCPU.
            fx.push(Effect::Wake(vcpu));
        } else if on_top {
            fx.push(Effect::RunGuest(vcpu));
        }
    }

    /// The timer handler's `irq_exit` on `vcpu`: if the guest's tick
    /// expired, its timer softirq runs the pass waiting for it, above the
    /// handler and before the return to the task (unless a pass already
    /// runs there, which takes the new accesses).
    pub(super) fn tick_softirq(&mut self, vcpu: usize) {
        if !self.timer_threads.take_tick_due(vcpu) {
            return;
        }
        let v = &mut self.vcpus[vcpu];
        let running = v.frames.iter().any(|frame| frame.program == HOUSEKEEPING);
        if !v.housekeeping.is_empty() && !running {
            let softirq = Frame::softirq(HOUSEKEEPING, GUEST_TIMER_VECTOR, v.interruptible);
            v.frames.push(softirq);
        }
    }

    /// The pass's next access: an I/O-port or EPT-faulting one, which
    /// exits under a hypervisor.
    pub(in crate::machine) fn take_access(&mut self, vcpu: usize) -> Option<ExitReason> {
        self.vcpus[vcpu].housekeeping.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_come_port_io_first_and_run_out() {
        let mut pass = Accesses { io: 1, ept: 1 };
        assert_eq!(pass.take(), Some(ExitReason::IoInstruction));
        assert_eq!(pass.take(), Some(ExitReason::EptViolation));
        assert!(pass.is_empty());
        assert_eq!(pass.take(), None);
    }
}
