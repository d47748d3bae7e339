//! Periodic work of host and guest that interrupts a running guest: the
//! host's scheduler tick on the guest cores, and the guest's own
//! housekeeping, which makes the idle VM's background I/O and EPT exits.
//!
//! The tick is where the host disables interrupt delivery while a guest
//! runs (its handler, like every exit's service, runs with interrupts off,
//! and an interrupt arriving meanwhile waits in the IRR); a hypervisor that
//! emulates the guest timer with host hrtimers keeps its timers, tick
//! included, on the guest cores, while DID moves them to the designated
//! core (docs/mechanisms.md section 5). Idle cores do not tick (NO_HZ).
//!
//! Housekeeping passes come every `guest_housekeeping.period_ns` (jittered)
//! and make the accesses of one period at the profile's measured idle exit
//! rates, each in a section with interrupts disabled: a timer expiring in
//! the section waits for it, and one expiring during the access's exit
//! lands while the core is in host mode.

use dirq_stats::{f64_of, round_u64};

use super::guest::{Step, Work};
use super::*;

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
pub(super) struct Accesses {
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

impl Machine {
    /// Whether the design keeps host timers (the tick) on guest cores.
    fn ticks_on_guest_cores(&self) -> bool {
        self.design
            .host_tick
            .on_guest_cores(self.profile.host_tick.hz)
    }

    fn tick_period_ns(&self) -> u64 {
        1_000_000_000 / self.profile.host_tick.hz.max(1)
    }

    /// The first tick of every core that runs vCPUs, at a random phase.
    pub(super) fn start_host_ticks(&mut self, fx: &mut Effects) {
        if !self.ticks_on_guest_cores() {
            return;
        }
        let period = self.tick_period_ns();
        for core in 1..self.cores.len() {
            if self.cores[core].hosts_vcpus {
                let at = self.rng.next_u64() % period;
                fx.schedule(
                    at,
                    Event::HostTick {
                        core: index_u32(core),
                    },
                );
            }
        }
    }

    /// The host's tick on `core`: a host timer interrupt, unless the core
    /// sleeps (NO_HZ idle).
    pub(super) fn host_tick(&mut self, core: usize, fx: &mut Effects) {
        let next = self.now + self.tick_period_ns();
        fx.schedule(
            next,
            Event::HostTick {
                core: index_u32(core),
            },
        );
        if self.cores[core].mode != Mode::Idle {
            fx.push(Effect::DeliverPhysical {
                core,
                vector: HOST_TIMER_VECTOR,
            });
        }
    }

    /// The first housekeeping pass of `vcpu`, at a random phase.
    pub(super) fn start_housekeeping(&mut self, vcpu: usize, fx: &mut Effects) {
        let period = self.profile.guest_housekeeping.period_ns;
        if period == 0 {
            return;
        }
        let at = self.rng.next_u64() % period;
        fx.schedule(
            at,
            Event::Housekeeping {
                vcpu: index_u32(vcpu),
            },
        );
    }

    /// How many accesses at `rate_per_s` one period holds: the whole part,
    /// plus one with the probability of the fraction, so the mean is kept.
    fn accesses_per_pass(&mut self, rate_per_s: f64) -> u32 {
        let expected = rate_per_s * f64_of(self.profile.guest_housekeeping.period_ns) / 1e9;
        let whole = expected.floor();
        let extra = self.rng.next_f64() < expected - whole;
        // `whole` is already whole: round_u64 only converts it.
        u32::try_from(round_u64(whole)).unwrap_or(u32::MAX) + u32::from(extra)
    }

    /// A housekeeping pass is due: schedule the next, and run this one
    /// above the background task (below any handler, which returns first).
    pub(super) fn housekeeping_due(&mut self, vcpu: usize, fx: &mut Effects) {
        let housekeeping = &self.profile.guest_housekeeping;
        let (period, jitter) = (
            housekeeping.period_ns,
            housekeeping.jitter_ns.min(housekeeping.period_ns),
        );
        let offset = self.rng.next_u64() % (2 * jitter + 1);
        let next = self.now + period - jitter + offset;
        fx.schedule(
            next,
            Event::Housekeeping {
                vcpu: index_u32(vcpu),
            },
        );
        let rates = self.profile.idle_exits_per_s.clone();
        let io = self.accesses_per_pass(rates.io_instruction);
        let ept = self.accesses_per_pass(rates.ept_violation);
        let pass_running = !self.vcpus[vcpu].housekeeping.is_empty();
        let pass = &mut self.vcpus[vcpu].housekeeping;
        pass.io += io;
        pass.ept += ept;
        if pass_running || pass.is_empty() {
            return;
        }
        let halted = self.vcpus[vcpu].state == VcpuState::Halted;
        if halted && !self.vcpus[vcpu].hw.vmcs.hlt_exits() {
            // Halted in guest mode (bare metal): its accesses exit nowhere;
            // they wait for the core's next wake-up.
            self.vcpus[vcpu]
                .frames
                .insert(1, Frame::background(HOUSEKEEPING));
            return;
        }
        let on_top = self.vcpus[vcpu].frames.len() == 1;
        if on_top {
            self.suspend(vcpu, fx);
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

    /// The housekeeping's device access: an I/O-port or EPT-faulting
    /// access, which exits under a hypervisor.
    pub(super) fn device_access(&mut self, vcpu: usize, fx: &mut Effects) {
        let Some(reason) = self.vcpus[vcpu].housekeeping.take() else {
            return;
        };
        let vmcs = &self.vcpus[vcpu].hw.vmcs;
        let exits = match reason {
            ExitReason::IoInstruction => vmcs.io_exits(),
            _ => vmcs.ept_enabled(),
        };
        if exits {
            self.list_exit(vcpu, reason, fx);
        }
    }

    /// A guest timer expiry that finds its core in host mode (an exit in
    /// service): counted, for the residual latency DID keeps.
    pub(super) fn note_timer_expiry(&mut self, core: usize) {
        if self.cores[core].mode == Mode::Host {
            self.counters.timer_irqs_in_host_mode += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{applied, exit_of, listed, running, single};
    use super::*;
    use crate::design::DesignKind;

    #[test]
    fn accesses_come_port_io_first_and_run_out() {
        let mut pass = Accesses { io: 1, ept: 1 };
        assert_eq!(pass.take(), Some(ExitReason::IoInstruction));
        assert_eq!(pass.take(), Some(ExitReason::EptViolation));
        assert!(pass.is_empty());
        assert_eq!(pass.take(), None);
    }

    #[test]
    fn vanilla_ticks_on_guest_cores_did_and_bare_do_not() {
        for (design, ticks) in [
            (DesignKind::Vanilla, true),
            (DesignKind::Apicv, true),
            (DesignKind::Eli, true),
            (DesignKind::Did, false),
            (DesignKind::Bare, false),
        ] {
            let m = single(design);
            assert_eq!(m.ticks_on_guest_cores(), ticks, "{design}");
        }
    }

    #[test]
    fn a_tick_interrupts_a_running_core_but_not_a_sleeping_one() {
        let mut m = single(DesignKind::Vanilla);
        running(&mut m, 0);
        let fx = listed(&mut m, |m, fx| m.host_tick(1, fx));
        let vector = HOST_TIMER_VECTOR;
        assert_eq!(
            fx.last(),
            Some(&Effect::DeliverPhysical { core: 1, vector })
        );
        m.cores[1].mode = Mode::Idle;
        let fx = listed(&mut m, |m, fx| m.host_tick(1, fx));
        assert!(matches!(
            fx.as_slice(),
            [Effect::Schedule {
                event: Event::HostTick { core: 1 },
                ..
            }]
        ));
    }

    #[test]
    fn a_pass_disables_interrupts_around_each_access_that_exits() {
        let mut m = single(DesignKind::Vanilla);
        running(&mut m, 0);
        m.vcpus[0].housekeeping = Accesses { io: 1, ept: 0 };
        m.vcpus[0].frames.push(Frame::background(HOUSEKEEPING));
        m.vcpus[0].step_running = false;
        // Cli, then the section's work starts.
        listed(&mut m, |m, fx| m.run_guest(0, fx));
        assert!(!m.vcpus[0].interruptible);
        // The section's work ends (the guest runs on): the access exits.
        let fx = listed(&mut m, |m, fx| m.finish_timed_step(0, fx));
        assert_eq!(fx, [Effect::RunGuest(0)]);
        let fx = listed(&mut m, |m, fx| m.run_guest(0, fx));
        assert_eq!(fx.first(), Some(&Effect::DeviceAccess(0)));
        let fx = listed(&mut m, |m, fx| m.device_access(0, fx));
        assert_eq!(fx, [exit_of(&m, 0, ExitReason::IoInstruction)]);
        assert!(m.vcpus[0].housekeeping.is_empty());
    }

    #[test]
    fn a_did_timer_waits_out_the_guests_section_with_interrupts_off() {
        let mut m = single(DesignKind::Did);
        running(&mut m, 0);
        m.vcpus[0].housekeeping = Accesses { io: 1, ept: 0 };
        m.vcpus[0].frames.push(Frame::background(HOUSEKEEPING));
        m.vcpus[0].step_running = false;
        applied(&mut m, |m, fx| m.run_guest(0, fx));
        assert!(!m.vcpus[0].interruptible, "inside the section");
        applied(&mut m, |m, fx| m.program_guest_timer(0, 100, fx));
        m.now = 100;
        applied(&mut m, |m, fx| m.physical_timer(1, fx));
        // Pending in the physical IRR, not taken: the guest runs on.
        assert!(m.cores[1].lapic.irr().contains(GUEST_TIMER_VECTOR));
        assert_eq!(m.vcpus[0].frames.len(), 2);
        // STI: the guest takes it at once.
        applied(&mut m, |m, fx| m.enable_interrupts(0, fx));
        let handler = m.vcpus[0].frames.last().and_then(|frame| frame.vector);
        assert_eq!(handler, Some(GUEST_TIMER_VECTOR));
    }

    #[test]
    fn a_due_pass_runs_above_the_background_and_wakes_a_halted_vcpu() {
        let mut m = single(DesignKind::Vanilla);
        running(&mut m, 0);
        m.profile.idle_exits_per_s.io_instruction =
            1e9 / f64_of(m.profile.guest_housekeeping.period_ns);
        m.profile.idle_exits_per_s.ept_violation = 0.0;
        let fx = listed(&mut m, |m, fx| m.housekeeping_due(0, fx));
        assert_eq!(fx.last(), Some(&Effect::RunGuest(0)));
        assert_eq!(m.vcpus[0].housekeeping, Accesses { io: 1, ept: 0 });
        assert_eq!(m.vcpus[0].frames.len(), 2);
        // A halted vCPU (HLT exits) is woken to run its pass.
        let mut m = single(DesignKind::Vanilla);
        running(&mut m, 0);
        m.profile.idle_exits_per_s.io_instruction =
            1e9 / f64_of(m.profile.guest_housekeeping.period_ns);
        m.vcpus[0].state = VcpuState::Halted;
        let fx = listed(&mut m, |m, fx| m.housekeeping_due(0, fx));
        assert_eq!(fx.last(), Some(&Effect::Wake(0)));
    }

    #[test]
    fn a_did_timer_expiring_in_host_mode_is_counted_and_injected_by_self_ipi_at_entry() {
        let mut m = single(DesignKind::Did);
        running(&mut m, 0);
        applied(&mut m, |m, fx| m.program_guest_timer(0, 5_000, fx));
        // The vCPU exits (a housekeeping access) and the timer expires while
        // the host serves it.
        m.now = 4_000;
        applied(&mut m, |m, fx| {
            m.exit(0, ExitReason::IoInstruction, 10_000, fx)
        });
        m.now = 5_000;
        applied(&mut m, |m, fx| m.physical_timer(1, fx));
        assert_eq!(m.counters.timer_irqs_in_host_mode, 1);
        assert!(m.cores[1].lapic.irr().contains(GUEST_TIMER_VECTOR));
        // The host takes it as its own interrupt and queues it as virtual;
        // the entry sends it as a self-IPI, which the guest then takes
        // from the physical LAPIC.
        for _ in 0..3 {
            if m.cores[1].mode == Mode::Guest {
                break;
            }
            m.now += 10_000;
            applied(&mut m, |m, fx| m.host_done(1, fx));
        }
        assert_eq!(m.cores[1].mode, Mode::Guest);
        let handler = m.vcpus[0].frames.last().and_then(|frame| frame.vector);
        assert_eq!(handler, Some(GUEST_TIMER_VECTOR));
        assert!(m.cores[1].lapic.isr().contains(GUEST_TIMER_VECTOR));
        assert!(!m.vcpus[0].injection.has_queued());
    }
}
