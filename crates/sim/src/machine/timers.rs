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
//! guest's own sections with interrupts off (`periodic`), and the wake-up
//! of the user task after the handler (`Work::TimerToUserRest`).

use super::*;

impl Machine {
    pub(super) fn guest_timer_write(&mut self, vcpu: usize, write: TimerWrite, fx: &mut Effects) {
        let deadline = match write {
            TimerWrite::NextTick => Some(self.timer_threads.next_tick(vcpu, self.now)),
            // fio's guard timer: far enough never to fire.
            TimerWrite::ArmGuard => Some(self.now + 100_000_000),
            TimerWrite::Cancel => None,
        };
        if self.vcpus[vcpu].hw.vmcs.msr_write(msrs::TMICT) == MsrWriteAction::Exit {
            fx.exit(
                vcpu,
                ExitReason::MsrWrite,
                self.profile.exit_service_ns.timer_write
                    + self.profile.host_ns.exit_entry_transition,
            );
        }
        match deadline {
            Some(deadline) => self.program_guest_timer(vcpu, deadline, fx),
            None => self.cancel_guest_timer(vcpu, fx),
        }
    }

    pub(super) fn tmict_write(lapic: &mut Lapic, count: u64, now: u64) {
        // TMICT is a writable LAPIC register: this cannot fail.
        let _ = lapic.write_msr(msrs::TMICT, count.min(u64::from(u32::MAX)), &At(now));
    }

    pub(super) fn program_guest_timer(&mut self, vcpu: usize, deadline: u64, fx: &mut Effects) {
        let core = self.vcpus[vcpu].home_core;
        let current_here = self.cores[core].current == Some(vcpu);
        let effect = self
            .design
            .guest_timer
            .program(deadline, self.now, current_here);
        self.apply_timer_effect(vcpu, effect, fx);
    }

    pub(super) fn cancel_guest_timer(&mut self, vcpu: usize, fx: &mut Effects) {
        let core = self.vcpus[vcpu].home_core;
        let owns_physical = self.cores[core].timer_owner == Some(vcpu);
        let effects = self.design.guest_timer.cancel(owns_physical);
        self.apply_timer_effects(vcpu, effects, fx);
    }

    /// Carries out what the design's timer path asked for `vcpu`, in
    /// order.
    fn apply_timer_effects(&mut self, vcpu: usize, effects: TimerEffects, fx: &mut Effects) {
        for effect in effects.into_iter().flatten() {
            self.apply_timer_effect(vcpu, effect, fx);
        }
    }

    pub(super) fn apply_timer_effect(
        &mut self,
        vcpu: usize,
        effect: TimerEffect,
        fx: &mut Effects,
    ) {
        let core = self.vcpus[vcpu].home_core;
        match effect {
            TimerEffect::Software { count } => {
                Self::tmict_write(&mut self.vcpus[vcpu].hw.vlapic, count, self.now);
                self.arm_host_timer(vcpu, fx);
            }
            TimerEffect::Physical { count } => self.program_physical_timer(core, vcpu, count, fx),
            TimerEffect::StopPhysical => self.stop_physical_timer(core, fx),
            TimerEffect::Park(deadline) => self.park_timer(vcpu, Some(deadline), fx),
            TimerEffect::Unpark => self.park_timer(vcpu, None, fx),
            TimerEffect::HostInterrupt => {
                self.note_timer_expiry(core);
                fx.push(Effect::DeliverPhysical {
                    core,
                    vector: HOST_TIMER_VECTOR,
                });
            }
            TimerEffect::InjectTimer => {
                let vm = self.vcpus[vcpu].vm;
                self.raise(vm, GUEST_TIMER_VECTOR);
                fx.push(Effect::QueueVirtual {
                    vcpu,
                    vector: GUEST_TIMER_VECTOR,
                });
            }
        }
    }

    pub(super) fn arm_host_timer(&self, vcpu: usize, fx: &mut Effects) {
        let deadline = self.vcpus[vcpu].hw.vlapic.timer_deadline_ns();
        fx.reschedule(
            deadline,
            Event::HostTimer {
                vcpu: index_u32(vcpu),
            },
        );
    }

    fn program_physical_timer(&mut self, core: usize, vcpu: usize, count: u64, fx: &mut Effects) {
        Self::tmict_write(&mut self.cores[core].lapic, count, self.now);
        self.cores[core].timer_owner = Some(vcpu);
        self.recheck_timer_ownership(core);
        let deadline = self.cores[core].lapic.timer_deadline_ns();
        fx.reschedule(
            deadline,
            Event::PhysicalTimer {
                core: index_u32(core),
            },
        );
    }

    /// Disarms a core's passed-through timer and its owner.
    fn stop_physical_timer(&mut self, core: usize, fx: &mut Effects) {
        Self::tmict_write(&mut self.cores[core].lapic, 0, self.now);
        fx.cancel(Event::PhysicalTimer {
            core: index_u32(core),
        });
        self.cores[core].timer_owner = None;
        self.recheck_timer_ownership(core);
    }

    /// DID: the timer of a descheduled vCPU lives on the designated core.
    fn park_timer(&mut self, vcpu: usize, deadline: Option<u64>, fx: &mut Effects) {
        self.vcpus[vcpu].timer.park(deadline);
        fx.reschedule(
            deadline,
            Event::HostTimer {
                vcpu: index_u32(vcpu),
            },
        );
    }

    pub(super) fn physical_timer(&mut self, core: usize, fx: &mut Effects) {
        let already = self.cores[core].lapic.irr().contains(GUEST_TIMER_VECTOR);
        if !self.cores[core].lapic.expire_timer(&At(self.now)) {
            return;
        }
        let owner = self.cores[core].timer_owner.take();
        self.recheck_timer_ownership(core);
        self.note_timer_expiry(core);
        if let Some(vcpu) = owner {
            let vm = self.vcpus[vcpu].vm;
            self.raise(vm, GUEST_TIMER_VECTOR);
            if already {
                self.merged(vm, GUEST_TIMER_VECTOR);
            }
        }
        fx.push(Effect::PhysicalPending(core));
    }

    /// A host-side timer of a vCPU: KVM's hrtimer for the emulated LAPIC
    /// timer (fires as a host interrupt on the vCPU's core), or DID's
    /// parked timer on the designated core (becomes a virtual interrupt).
    pub(super) fn host_timer(&mut self, vcpu: usize, fx: &mut Effects) {
        let fired = self
            .design
            .guest_timer
            .host_timer_fired(&mut self.vcpus[vcpu].timer);
        if let Some(effect) = fired {
            self.apply_timer_effect(vcpu, effect, fx);
        }
    }

    /// KVM's hrtimer callback for the emulated LAPIC timers of the vCPUs
    /// homed on this core.
    pub(super) fn expire_software_timers(&mut self, core: usize, fx: &mut Effects) {
        let clock = At(self.now);
        for slot in 0..self.cores[core].runqueue.len() {
            let vcpu = self.cores[core].runqueue[slot];
            let due = self.vcpus[vcpu]
                .hw
                .vlapic
                .timer_deadline_ns()
                .is_some_and(|deadline| deadline <= self.now);
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
                self.raise(vm, GUEST_TIMER_VECTOR);
                if already {
                    self.merged(vm, GUEST_TIMER_VECTOR);
                }
                // With APICv the software LAPIC is the virtual-APIC page, so
                // every injection path finds the vector there.
                fx.push(Effect::Wake(vcpu));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{listed, running, scheduled, single};
    use super::*;
    use crate::design::DesignKind;

    const DEADLINE: u64 = 5_000;

    fn parked(deadline: Option<u64>) -> TimerState {
        let mut state = TimerState::default();
        state.park(deadline);
        state
    }

    #[test]
    fn kvm_emulates_the_guest_timer_with_a_host_hrtimer() {
        let mut m = single(DesignKind::Vanilla);
        running(&mut m, 0);
        let fx = listed(&mut m, |m, fx| m.program_guest_timer(0, DEADLINE, fx));
        assert_eq!(fx, [scheduled(DEADLINE, Event::HostTimer { vcpu: 0 })]);
        assert_eq!(m.vcpus[0].hw.vlapic.timer_deadline_ns(), Some(DEADLINE));
        let fx = listed(&mut m, |m, fx| m.host_timer(0, fx));
        let vector = HOST_TIMER_VECTOR;
        assert_eq!(fx, [Effect::DeliverPhysical { core: 1, vector }]);
    }

    #[test]
    fn did_passes_the_timer_through_on_the_running_vcpus_core() {
        let mut m = single(DesignKind::Did);
        running(&mut m, 0);
        let fx = listed(&mut m, |m, fx| m.program_guest_timer(0, DEADLINE, fx));
        assert_eq!(fx, [scheduled(DEADLINE, Event::PhysicalTimer { core: 1 })]);
        assert_eq!(m.cores[1].timer_owner, Some(0));
        let fx = listed(&mut m, |m, fx| m.cancel_guest_timer(0, fx));
        assert_eq!(
            fx,
            [
                Effect::Cancel(Event::PhysicalTimer { core: 1 }),
                Effect::Cancel(Event::HostTimer { vcpu: 0 })
            ]
        );
        assert_eq!(m.cores[1].timer_owner, None);
        assert_eq!(m.cores[1].lapic.timer_deadline_ns(), None);
    }

    #[test]
    fn a_physical_expiry_raises_the_owners_timer_vector() {
        let mut m = single(DesignKind::Did);
        running(&mut m, 0);
        listed(&mut m, |m, fx| m.program_guest_timer(0, DEADLINE, fx));
        m.now = DEADLINE;
        let fx = listed(&mut m, |m, fx| m.physical_timer(1, fx));
        assert_eq!(fx, [Effect::PhysicalPending(1)]);
        assert!(m.cores[1].lapic.irr().contains(GUEST_TIMER_VECTOR));
        assert_eq!(m.checker.raised, 1);
    }

    #[test]
    fn did_parks_a_descheduled_vcpus_timer_and_injects_it_when_due() {
        let mut m = single(DesignKind::Did);
        m.cores[1].current = None;
        let fx = listed(&mut m, |m, fx| m.program_guest_timer(0, DEADLINE, fx));
        assert_eq!(fx, [scheduled(DEADLINE, Event::HostTimer { vcpu: 0 })]);
        assert_eq!(m.vcpus[0].timer, parked(Some(DEADLINE)));
        m.now = DEADLINE;
        let fx = listed(&mut m, |m, fx| m.host_timer(0, fx));
        let vector = GUEST_TIMER_VECTOR;
        assert_eq!(fx, [Effect::QueueVirtual { vcpu: 0, vector }]);
        assert_eq!(m.vcpus[0].timer, parked(None));
    }

    #[test]
    fn a_trapped_tmict_write_exits_before_the_timer_is_armed() {
        let mut m = single(DesignKind::Vanilla);
        running(&mut m, 0);
        let write = TimerWrite::ArmGuard;
        let fx = listed(&mut m, |m, fx| m.guest_timer_write(0, write, fx));
        assert!(matches!(
            fx.as_slice(),
            [
                Effect::Exit {
                    reason: ExitReason::MsrWrite,
                    ..
                },
                Effect::Schedule {
                    event: Event::HostTimer { vcpu: 0 },
                    ..
                }
            ]
        ));
    }
}
