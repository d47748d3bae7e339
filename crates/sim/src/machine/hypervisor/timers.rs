//! The guest LAPIC timer's paths: KVM's emulated hrtimer, the
//! passed-through physical timer, and DID's timer parked on the
//! housekeeping core while its vCPU is descheduled.
//!
//! KVM's emulated path as it was (Linux 3.6, docs/mechanisms.md section
//! 2): the guest's TMICT write exits and arms a host hrtimer on the vCPU's
//! core; its expiry is a host interrupt there (an EXTERNAL_INTERRUPT exit
//! if the guest runs, waiting in the IRR if the host has interrupts off);
//! the callback marks the timer pending in the software LAPIC and kicks
//! the vCPU, and the entry injects it (an interrupt-window exit first if
//! the guest has interrupts off). No timer advance: the hrtimer fires at
//! the deadline, so the guest sees the expiry one exit, one injection and
//! its own handler late. Those are the four sources of cyclictest's
//! latency: host sections with interrupts off (exits, the host tick in
//! `periodic`), the exit-and-inject delay (drawn service times), the
//! guest's own sections with interrupts off (`guest::housekeeping`), and the wake-up
//! of the user task after the handler (`Work::TimerToUserRest`).

use dirq_arch::clock::Clock;
use dirq_arch::lapic::Lapic;
use dirq_arch::vmcs::MsrWriteAction;

use super::{Hypervisor, Mode};
use crate::design::mechanism::timer::{TimerEffect, TimerEffects};
use crate::design::msrs;
use crate::machine::effects::{Effect, Effects};
use crate::machine::ledger::Ledger;
use crate::machine::{index_u32, At, Event, GUEST_TIMER_VECTOR, HOST_TIMER_VECTOR};
use crate::metrics::ExitReason;
use crate::rng::Rng;

/// Writes a LAPIC's TMICT at `now` (0 stops the timer).
fn tmict_write(lapic: &mut Lapic, count: u64, now: u64) {
    // TMICT is a writable LAPIC register: this cannot fail.
    let _ = lapic.write_msr(msrs::TMICT, count.min(u64::from(u32::MAX)), &At(now));
}

impl Hypervisor {
    /// `vcpu`'s guest writes TMICT at `now` for `deadline` (None: it stops
    /// its timer); `lapic` is its core's.
    pub(in crate::machine) fn timer_write(
        &mut self,
        vcpu: usize,
        deadline: Option<u64>,
        now: u64,
        lapic: &mut Lapic,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        if self.vcpus[vcpu].hw.vmcs.msr_write(msrs::TMICT) == MsrWriteAction::Exit {
            fx.exit(
                vcpu,
                ExitReason::MsrWrite,
                self.profile.exit_service_ns.timer_write
                    + self.profile.host_ns.exit_entry_transition,
            );
        }
        match deadline {
            Some(deadline) => self.program_guest_timer(vcpu, deadline, now, lapic, ledger, fx),
            None => self.cancel_guest_timer(vcpu, now, lapic, ledger, fx),
        }
    }

    /// `vcpu`'s guest timer is programmed for `deadline` at `now`, where
    /// the design keeps it.
    pub(in crate::machine) fn program_guest_timer(
        &mut self,
        vcpu: usize,
        deadline: u64,
        now: u64,
        lapic: &mut Lapic,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let core = self.vcpus[vcpu].home_core;
        let current_here = self.cores[core].current == Some(vcpu);
        let effect = self.design.guest_timer.program(deadline, now, current_here);
        self.apply_timer_effect(vcpu, effect, now, lapic, ledger, fx);
    }

    pub(super) fn cancel_guest_timer(
        &mut self,
        vcpu: usize,
        now: u64,
        lapic: &mut Lapic,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let core = self.vcpus[vcpu].home_core;
        let owns_physical = self.cores[core].timer_owner == Some(vcpu);
        let effects: TimerEffects = self.design.guest_timer.cancel(owns_physical);
        for effect in effects.into_iter().flatten() {
            self.apply_timer_effect(vcpu, effect, now, lapic, ledger, fx);
        }
    }

    /// Carries out what the design's guest timer asked for `vcpu` at `now`;
    /// `lapic` is its core's.
    pub(in crate::machine) fn apply_timer_effect(
        &mut self,
        vcpu: usize,
        effect: TimerEffect,
        now: u64,
        lapic: &mut Lapic,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let core = self.vcpus[vcpu].home_core;
        match effect {
            TimerEffect::Software { count } => {
                tmict_write(&mut self.vcpus[vcpu].hw.vlapic, count, now);
                self.arm_host_timer(vcpu, fx);
            }
            TimerEffect::Physical { count } => {
                tmict_write(lapic, count, now);
                self.cores[core].timer_owner = Some(vcpu);
                self.recheck_timer_ownership(core, lapic, ledger);
                fx.reschedule(
                    lapic.timer_deadline_ns(),
                    Event::PhysicalTimer {
                        core: index_u32(core),
                    },
                );
            }
            TimerEffect::StopPhysical => {
                tmict_write(lapic, 0, now);
                fx.cancel(Event::PhysicalTimer {
                    core: index_u32(core),
                });
                self.cores[core].timer_owner = None;
                self.recheck_timer_ownership(core, lapic, ledger);
            }
            TimerEffect::Park(deadline) => self.park_timer(vcpu, Some(deadline), fx),
            TimerEffect::Unpark => self.park_timer(vcpu, None, fx),
            TimerEffect::HostInterrupt => {
                self.note_timer_expiry(core, ledger);
                fx.push(Effect::DeliverPhysical {
                    core,
                    vector: HOST_TIMER_VECTOR,
                });
            }
            TimerEffect::InjectTimer => {
                ledger.raise(self.vcpus[vcpu].vm, GUEST_TIMER_VECTOR, now);
                fx.push(Effect::QueueVirtual {
                    vcpu,
                    vector: GUEST_TIMER_VECTOR,
                });
            }
        }
    }

    /// KVM's hrtimer follows the software LAPIC's deadline.
    pub(super) fn arm_host_timer(&self, vcpu: usize, fx: &mut Effects) {
        let deadline = self.vcpus[vcpu].hw.vlapic.timer_deadline_ns();
        fx.reschedule(
            deadline,
            Event::HostTimer {
                vcpu: index_u32(vcpu),
            },
        );
    }

    /// DID: the timer of a descheduled vCPU lives on the designated core.
    pub(super) fn park_timer(&mut self, vcpu: usize, deadline: Option<u64>, fx: &mut Effects) {
        self.vcpus[vcpu].timer.park(deadline);
        fx.reschedule(
            deadline,
            Event::HostTimer {
                vcpu: index_u32(vcpu),
            },
        );
    }

    /// `core`'s physical LAPIC timer (`lapic`) expires at `now`: the owner's
    /// timer vector is pending there. Returns whether it expired.
    pub(in crate::machine) fn physical_timer(
        &mut self,
        core: usize,
        now: u64,
        lapic: &mut Lapic,
        ledger: &mut Ledger,
    ) -> bool {
        let already = lapic.irr().contains(GUEST_TIMER_VECTOR);
        if !lapic.expire_timer(&At(now)) {
            return false;
        }
        let owner = self.cores[core].timer_owner.take();
        self.recheck_timer_ownership(core, lapic, ledger);
        self.note_timer_expiry(core, ledger);
        if let Some(vcpu) = owner {
            let vm = self.vcpus[vcpu].vm;
            ledger.raise(vm, GUEST_TIMER_VECTOR, now);
            if already {
                ledger.merged(vm, GUEST_TIMER_VECTOR);
            }
        }
        true
    }

    /// A host-side timer of a vCPU: KVM's hrtimer for the emulated LAPIC
    /// timer (fires as a host interrupt on the vCPU's core), or DID's
    /// parked timer on the designated core (becomes a virtual interrupt).
    pub(in crate::machine) fn host_timer(
        &mut self,
        vcpu: usize,
        now: u64,
        lapic: &mut Lapic,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let fired = self
            .design
            .guest_timer
            .host_timer_fired(&mut self.vcpus[vcpu].timer);
        if let Some(effect) = fired {
            self.apply_timer_effect(vcpu, effect, now, lapic, ledger, fx);
        }
    }

    /// KVM's hrtimer callback for the emulated LAPIC timers of the vCPUs
    /// homed on `core`, at `now`.
    pub(super) fn expire_software_timers(
        &mut self,
        core: usize,
        now: u64,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let clock = At(now);
        for slot in 0..self.cores[core].runqueue.len() {
            let vcpu = self.cores[core].runqueue[slot];
            let due = self.vcpus[vcpu]
                .hw
                .vlapic
                .timer_deadline_ns()
                .is_some_and(|deadline| deadline <= clock.now_ns());
            if !due {
                continue;
            }
            let vm = self.vcpus[vcpu].vm;
            let already = self.vcpus[vcpu]
                .hw
                .vlapic
                .irr()
                .contains(GUEST_TIMER_VECTOR);
            if self.vcpus[vcpu].hw.vlapic.expire_timer(&clock) {
                self.cores[core].timer_work_ns += self
                    .design
                    .guest_timer
                    .expiry_host_ns(&self.profile.design_work_ns);
                ledger.raise(vm, GUEST_TIMER_VECTOR, now);
                if already {
                    ledger.merged(vm, GUEST_TIMER_VECTOR);
                }
                // With APICv the software LAPIC is the virtual-APIC page, so
                // every injection path finds the vector there.
                fx.push(Effect::Wake(vcpu));
            }
        }
    }

    /// A guest timer expiry that finds its core in host mode (an exit in
    /// service): counted, for the residual latency DID keeps.
    pub(super) fn note_timer_expiry(&self, core: usize, ledger: &mut Ledger) {
        if self.cores[core].mode == Mode::Host {
            ledger.counters.timer_irqs_in_host_mode += 1;
        }
    }

    /// Whether the design keeps host timers (the tick) on guest cores.
    pub(super) fn ticks_on_guest_cores(&self) -> bool {
        self.design
            .host_tick
            .on_guest_cores(self.profile.host_tick.hz)
    }

    pub(super) fn tick_period_ns(&self) -> u64 {
        1_000_000_000 / self.profile.host_tick.hz.max(1)
    }

    /// The host's tick is where it disables interrupt delivery while a
    /// guest runs (its handler, like every exit's service, runs with
    /// interrupts off, and an interrupt arriving meanwhile waits in the
    /// IRR); a hypervisor that emulates the guest timer with host hrtimers
    /// keeps its timers, tick included, on the guest cores, while DID
    /// moves them to the designated core (docs/mechanisms.md section 5).
    /// The first tick of every core that runs vCPUs, at a random phase.
    pub(in crate::machine) fn start_host_ticks(&self, rng: &mut Rng, fx: &mut Effects) {
        if !self.ticks_on_guest_cores() {
            return;
        }
        let period = self.tick_period_ns();
        for core in 1..self.cores.len() {
            if !self.cores[core].runqueue.is_empty() {
                let at = rng.next_u64() % period;
                fx.schedule(
                    at,
                    Event::HostTick {
                        core: index_u32(core),
                    },
                );
            }
        }
    }

    /// The host's tick on `core` at `now`: a host timer interrupt, unless
    /// the core sleeps (NO_HZ idle). Its handler does the tick's own work
    /// on the core before the next entry (Linux 3.6's `tick_sched_timer`:
    /// `update_process_times`, then the softirqs it raised at `irq_exit`).
    pub(in crate::machine) fn host_tick(&mut self, core: usize, now: u64, fx: &mut Effects) {
        let next = now + self.tick_period_ns();
        fx.schedule(
            next,
            Event::HostTick {
                core: index_u32(core),
            },
        );
        if self.cores[core].mode != Mode::Idle {
            self.cores[core].timer_work_ns += self.profile.host_tick.work_ns;
            fx.push(Effect::DeliverPhysical {
                core,
                vector: HOST_TIMER_VECTOR,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::design::DesignKind;
    use crate::machine::fixture::{listed, scheduled, Setting};
    use crate::metrics::Invariant;

    const DEADLINE: u64 = 5_000;

    #[test]
    fn kvm_traps_tmict_and_emulates_the_timer_with_a_host_hrtimer() {
        let setting = Setting::single(DesignKind::Vanilla);
        let mut host = setting.host();
        let ((), fx) = host.call(1, |hv, lapic, ledger, now, fx| {
            hv.timer_write(0, Some(DEADLINE), now, lapic, ledger, fx)
        });
        let profile = &setting.profile;
        let exit = Effect::Exit {
            vcpu: 0,
            reason: ExitReason::MsrWrite,
            service_ns: profile.exit_service_ns.timer_write + profile.host_ns.exit_entry_transition,
        };
        let hrtimer = scheduled(DEADLINE, Event::HostTimer { vcpu: 0 });
        assert_eq!(fx, [exit, hrtimer]);
        host.now = DEADLINE;
        let ((), fx) = host.call(1, |hv, lapic, ledger, now, fx| {
            hv.host_timer(0, now, lapic, ledger, fx)
        });
        let vector = HOST_TIMER_VECTOR;
        assert_eq!(fx, [Effect::DeliverPhysical { core: 1, vector }]);
    }

    #[test]
    fn did_passes_the_timer_through_on_the_running_vcpus_core() {
        let mut host = Setting::single(DesignKind::Did).host();
        let ((), fx) = host.call(1, |hv, lapic, ledger, now, fx| {
            hv.timer_write(0, Some(DEADLINE), now, lapic, ledger, fx)
        });
        assert_eq!(fx, [scheduled(DEADLINE, Event::PhysicalTimer { core: 1 })]);
        assert_eq!(host.platform.lapic(1).timer_deadline_ns(), Some(DEADLINE));
        let ((), fx) = host.call(1, |hv, lapic, ledger, now, fx| {
            hv.timer_write(0, None, now, lapic, ledger, fx)
        });
        assert_eq!(
            fx,
            [
                Effect::Cancel(Event::PhysicalTimer { core: 1 }),
                Effect::Cancel(Event::HostTimer { vcpu: 0 })
            ]
        );
        assert_eq!(host.platform.lapic(1).timer_deadline_ns(), None);
        let misowned = host.ledger.checker.violations_of(Invariant::TimerOwnership);
        assert_eq!(misowned, 0);
    }

    #[test]
    fn a_physical_expiry_raises_the_owners_timer_vector() {
        let mut host = Setting::single(DesignKind::Did).host();
        host.call(1, |hv, lapic, ledger, now, fx| {
            hv.timer_write(0, Some(DEADLINE), now, lapic, ledger, fx)
        });
        host.now = DEADLINE;
        let (expired, fx) = host.call(1, |hv, lapic, ledger, now, _| {
            hv.physical_timer(1, now, lapic, ledger)
        });
        assert!(expired && fx.is_empty());
        assert!(host.platform.lapic(1).irr().contains(GUEST_TIMER_VECTOR));
        let outstanding: Vec<_> = host.ledger.checker.outstanding(0).collect();
        assert_eq!(outstanding, [(GUEST_TIMER_VECTOR, 1)]);
    }

    #[test]
    fn dids_parked_timer_is_injected_when_due() {
        let mut host = Setting::single(DesignKind::Did).host();
        let ((), fx) = host.call(1, |hv, lapic, ledger, now, fx| {
            hv.apply_timer_effect(0, TimerEffect::Park(DEADLINE), now, lapic, ledger, fx)
        });
        assert_eq!(fx, [scheduled(DEADLINE, Event::HostTimer { vcpu: 0 })]);
        host.now = DEADLINE;
        let fire = |host: &mut crate::machine::fixture::Host| {
            host.call(1, |hv, lapic, ledger, now, fx| {
                hv.host_timer(0, now, lapic, ledger, fx)
            })
            .1
        };
        let vector = GUEST_TIMER_VECTOR;
        assert_eq!(fire(&mut host), [Effect::QueueVirtual { vcpu: 0, vector }]);
        // Fired once: nothing is parked any more.
        assert!(fire(&mut host).is_empty());
    }

    #[test]
    fn the_host_ticks_on_guest_cores_unless_the_design_moves_it() {
        for (design, ticks) in [
            (DesignKind::Vanilla, true),
            (DesignKind::Apicv, true),
            (DesignKind::Eli, true),
            (DesignKind::Did, false),
            (DesignKind::Bare, false),
        ] {
            let host = Setting::single(design).host();
            let first = listed(|fx| host.hypervisor.start_host_ticks(&mut Rng::new(1), fx));
            assert_eq!(first.len(), usize::from(ticks), "{design}");
        }
    }

    #[test]
    fn a_tick_interrupts_a_running_core_but_not_a_sleeping_one() {
        let setting = Setting::single(DesignKind::Vanilla);
        let mut host = setting.host();
        let period = 1_000_000_000 / setting.profile.host_tick.hz;
        let next = scheduled(period, Event::HostTick { core: 1 });
        let fx = listed(|fx| host.hypervisor.host_tick(1, 0, fx));
        let vector = HOST_TIMER_VECTOR;
        assert_eq!(fx, [next, Effect::DeliverPhysical { core: 1, vector }]);
        // The tick's own work keeps the host busy before the next entry.
        let work = setting.profile.host_tick.work_ns;
        assert!(work > 0);
        host.exits(0, ExitReason::ExternalInterrupt);
        let (hypervisor, platform, ledger) =
            (&mut host.hypervisor, &mut host.platform, &mut host.ledger);
        let fx = listed(|fx| hypervisor.finish_host_work(1, 0, 0, platform, ledger, fx));
        assert_eq!(fx, [scheduled(work, Event::HostDone { core: 1 })]);
        // HLT exits; the host finds nothing pending and the core sleeps.
        host.call(1, |hv, lapic, ledger, _, fx| {
            hv.guest_halt(0, lapic, ledger, fx)
        });
        host.exits(0, ExitReason::Hlt);
        let (hypervisor, platform, ledger) =
            (&mut host.hypervisor, &mut host.platform, &mut host.ledger);
        listed(|fx| hypervisor.finish_host_work(1, 0, 0, platform, ledger, fx));
        assert_eq!(host.hypervisor.mode(1), Mode::Idle);
        let fx = listed(|fx| host.hypervisor.host_tick(1, 0, fx));
        assert_eq!(fx, [next]);
    }
}
