//! Host exits, VM entry and scheduling: what the hypervisor does on a core
//! between two stretches of guest time, and which vCPU runs next.

use dirq_arch::iommu::InterruptRemappingTable;
use dirq_arch::lapic::Lapic;

use super::{Hypervisor, Mode, NmiMessage, VcpuState};
use crate::design::mechanism::timer::TimerEffects;
use crate::design::VfRoute;
use crate::machine::effects::{Effect, Effects};
use crate::machine::ledger::Ledger;
use crate::machine::platform::{vf_requester, Platform, VfVector};
use crate::machine::{
    index_u32, is_guest_vector, Event, GA_LOG_VECTOR, HOST_TIMER_VECTOR, POSTED_WAKEUP_VECTOR,
};
use crate::metrics::ExitReason;
use crate::rng::Rng;
use crate::scenario::IdleMode;

/// Round robin: the first vCPU after `current` in `runqueue` that is
/// `runnable`, wrapping around; None when that is `current` itself.
fn next_in_turn(
    runqueue: &[usize],
    current: usize,
    runnable: impl Fn(usize) -> bool,
) -> Option<usize> {
    let position = runqueue.iter().position(|&id| id == current).unwrap_or(0);
    (1..=runqueue.len())
        .map(|step| runqueue[(position + step) % runqueue.len()])
        .find(|&id| id == current || runnable(id))
        .filter(|&next| next != current)
}

/// What a guest's HLT does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum Halt {
    /// It exits (listed); the host halts the vCPU after the exit.
    Exits,
    /// An interrupt is pending: the guest takes it at once.
    Delivers,
    /// The core halts in guest mode until an interrupt: the guest's step
    /// stops, then the core goes idle ([`Hypervisor::sleep_in_guest`]).
    Sleeps,
}

impl Hypervisor {
    /// `core` enters the guest at `now`, or goes idle with no vCPU: the
    /// vCPU entered and the vector its injection delivers with the entry.
    pub(in crate::machine) fn enter_guest(
        &mut self,
        core: usize,
        now: u64,
        ledger: &mut Ledger,
    ) -> Option<(usize, Option<u8>)> {
        let Some(vcpu) = self.cores[core].current else {
            self.set_mode(core, Mode::Idle, now, ledger);
            return None;
        };
        self.set_mode(core, Mode::Guest, now, ledger);
        self.cores[core].free_host_irqs = 0;
        let v = &mut self.vcpus[vcpu];
        let injected = v.injection.entered();
        v.pv_eoi.entering(&v.hw.vlapic, injected);
        Some((vcpu, injected))
    }

    /// A VM exit on the vCPU's core at `now` (its guest's step already
    /// stopped); the host is busy for `service_ns`, drawn around it.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::machine) fn exit(
        &mut self,
        vcpu: usize,
        reason: ExitReason,
        service_ns: u64,
        now: u64,
        rng: &mut Rng,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let core = self.vcpus[vcpu].home_core;
        // The listed cost is the mean; this exit's own is drawn around it.
        let service_ns = self.exit_times.draw(service_ns, rng);
        ledger.counters.exits[reason.index()] += 1;
        // KVM completes the EOI a PV EOI guest skipped since the entry.
        let v = &mut self.vcpus[vcpu];
        if let Some(vector) = v.pv_eoi.exited(&mut v.hw.vlapic) {
            ledger.instant(core, now, "pv-eoi", vector);
        }
        self.set_mode(core, Mode::Host, now, ledger);
        // After the guest slice closes: the trace names the host slice
        // that starts now after the exit.
        if let Some(trace) = &mut ledger.trace {
            trace.exit(core, now, reason.vmx());
        }
        if matches!(
            reason,
            ExitReason::ExternalInterrupt | ExitReason::Nmi | ExitReason::Exception
        ) {
            self.cores[core].free_host_irqs = 1;
        }
        self.host_busy(core, now, service_ns, fx);
    }

    /// A time slice on `core` ends `delay` after `now`.
    pub(in crate::machine) fn arm_slice(
        &self,
        core: usize,
        now: u64,
        delay: u64,
        fx: &mut Effects,
    ) {
        fx.schedule(
            now + delay,
            Event::SliceEnd {
                core: index_u32(core),
            },
        );
    }

    /// The host finished the work of an exit: it takes the pending
    /// interrupts in `lapic`, whose handlers run before
    /// [`Self::finish_host_work`].
    pub(in crate::machine) fn host_done(
        &mut self,
        core: usize,
        lapic: &mut Lapic,
        fx: &mut Effects,
    ) {
        let mut extra_ns = 0;
        while let Some(vector) = lapic.acknowledge() {
            lapic.eoi();
            extra_ns += self.host_irq_cost(core);
            fx.push(Effect::HostVector { core, vector });
        }
        let mailbox = std::mem::take(&mut self.cores[core].nmi_mailbox);
        for message in mailbox {
            extra_ns += self.host_irq_cost(core);
            match message {
                NmiMessage::AssignedInterrupt { vcpu, vector } => fx.push(Effect::QueueVirtual {
                    vcpu: vcpu as usize,
                    vector,
                }),
                NmiMessage::SliceEnd => self.cores[core].slice_due = true,
                NmiMessage::Kick => {}
            }
        }
        fx.push(Effect::FinishHostWork { core, extra_ns });
    }

    /// After the host's handlers: halt, reschedule if due, then either more
    /// host work or inject and re-enter.
    pub(in crate::machine) fn finish_host_work(
        &mut self,
        core: usize,
        mut extra_ns: u64,
        now: u64,
        platform: &mut Platform,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        extra_ns += std::mem::take(&mut self.cores[core].timer_work_ns);
        if let Some(vcpu) = self.cores[core].current {
            if std::mem::take(&mut self.vcpus[vcpu].halt_requested) {
                self.halt(vcpu, platform.lapic(core), now, ledger);
            }
        }
        if std::mem::take(&mut self.cores[core].slice_due) {
            let (lapic, iommu) = platform.lapic_and_iommu(core);
            extra_ns += self.end_slice(core, now, lapic, iommu, ledger, fx);
        }
        if extra_ns > 0 {
            self.host_busy(core, now, extra_ns, fx);
            return;
        }
        match self.cores[core].current {
            Some(vcpu) if self.vcpus[vcpu].state == VcpuState::Running => {
                if let Some(ns) = self.entry_work_due(vcpu) {
                    self.host_busy(core, now, ns, fx);
                    return;
                }
                fx.push(Effect::PrepareEntry(vcpu));
                fx.push(Effect::EnterGuest(core));
            }
            _ => self.set_mode(core, Mode::Idle, now, ledger),
        }
    }

    pub(super) fn host_irq_cost(&mut self, core: usize) -> u64 {
        let c = &mut self.cores[core];
        if c.free_host_irqs > 0 {
            c.free_host_irqs -= 1;
            0
        } else {
            self.profile.host_ns.irq_in_host_mode
        }
    }

    /// The host's handler for a vector it took on `core` at `now`.
    pub(in crate::machine) fn host_vector(
        &mut self,
        core: usize,
        vector: u8,
        now: u64,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        ledger.instant(core, now, "host-irq", vector);
        if let Some((pair, queue)) = self.host_vf_vector(core, vector) {
            // KVM's handler for the assigned device: inject the guest
            // vector into the queue's owner.
            fx.push(Effect::QueueVirtual {
                vcpu: self.pairs[pair].owner,
                vector: queue.guest_vector(),
            });
            return;
        }
        match vector {
            HOST_TIMER_VECTOR => self.expire_software_timers(core, now, ledger, fx),
            POSTED_WAKEUP_VECTOR => self.wake_posted_sleepers(Some(core), fx),
            GA_LOG_VECTOR => self.wake_posted_sleepers(None, fx),
            vector if is_guest_vector(vector) => {
                // Direct delivery's race (the IRTEs and self-IPIs of the
                // designs that send guest vectors to a core): one for the
                // VM scheduled here arrived while the core was in host
                // mode; make it virtual.
                if let Some(vcpu) = self.cores[core].current {
                    fx.push(Effect::QueueVirtual { vcpu, vector });
                }
            }
            _ => {}
        }
    }

    /// A halted `vcpu` wakes at `now`.
    pub(in crate::machine) fn wake(
        &mut self,
        vcpu: usize,
        now: u64,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        if self.vcpus[vcpu].state != VcpuState::Halted {
            return;
        }
        self.vcpu_woken(vcpu, ledger);
        let core = self.vcpus[vcpu].home_core;
        if self.idle == IdleMode::AdaptiveHaltPoll {
            let v = &mut self.vcpus[vcpu];
            let block_ns = now.saturating_sub(v.halted_at);
            let rules = &self.profile.halt_polling;
            v.poll_window
                .after_block(block_ns, self.halt_poll_ns, rules);
        }
        self.vcpus[vcpu].state = VcpuState::Running;
        if self.cores[core].current != Some(vcpu) {
            self.vcpus[vcpu].state = VcpuState::Runnable;
            return;
        }
        if self.cores[core].mode == Mode::Idle {
            let cost = self.wakeup_cost(core, now);
            self.set_mode(core, Mode::Host, now, ledger);
            self.host_busy(core, now, cost, fx);
        }
    }

    /// Waking a sleeping vCPU thread; or, while the host still polls it,
    /// ending the poll and re-entering (`halt_polling.wakeup_ns`).
    pub(super) fn wakeup_cost(&self, core: usize, now: u64) -> u64 {
        if self.polling(core, now) {
            self.profile.halt_polling.wakeup_ns
        } else {
            self.profile.host_ns.wakeup
        }
    }

    /// The host halt-polls `core`'s vCPU at `now`.
    pub(super) fn polling(&self, core: usize, now: u64) -> bool {
        now < self.cores[core].halt_poll_until
    }

    /// The guest executes HLT on `vcpu`; `lapic` is its core's.
    pub(in crate::machine) fn guest_halt(
        &mut self,
        vcpu: usize,
        lapic: &Lapic,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) -> Halt {
        if self.vcpus[vcpu].hw.vmcs.hlt_exits() {
            self.vcpus[vcpu].halt_requested = true;
            self.list_exit(vcpu, ExitReason::Hlt, fx);
            return Halt::Exits;
        }
        // HLT does not exit: the core halts until an interrupt.
        if lapic.pending_vector().is_some() {
            return Halt::Delivers;
        }
        self.vcpus[vcpu].state = VcpuState::Halted;
        self.vcpu_blocked(vcpu, ledger);
        Halt::Sleeps
    }

    /// `vcpu`'s core halts in guest mode at `now`.
    pub(in crate::machine) fn sleep_in_guest(
        &mut self,
        vcpu: usize,
        now: u64,
        ledger: &mut Ledger,
    ) {
        let core = self.vcpus[vcpu].home_core;
        self.set_mode(core, Mode::Idle, now, ledger);
    }

    /// HLT exit handling: sleep unless something is pending (in the
    /// vCPU's structures or its core's `lapic`).
    pub(super) fn halt(&mut self, vcpu: usize, lapic: &Lapic, now: u64, ledger: &mut Ledger) {
        let core = self.vcpus[vcpu].home_core;
        let v = &self.vcpus[vcpu];
        let pending = v.hw.vlapic.pending_vector().is_some()
            || !v.hw.pid.pir.is_empty()
            || v.injection.has_queued()
            || lapic.pending_vector().is_some();
        if pending {
            return;
        }
        self.vcpus[vcpu].state = VcpuState::Halted;
        self.vcpus[vcpu].halted_at = now;
        self.vcpu_blocked(vcpu, ledger);
        let window = match self.idle {
            IdleMode::HaltPoll => self.halt_poll_ns,
            IdleMode::AdaptiveHaltPoll => self.vcpus[vcpu].poll_window.ns,
            IdleMode::Poll | IdleMode::Hlt => 0,
        };
        self.cores[core].halt_poll_until = if window > 0 { now + window } else { 0 };
        if self.cores[core].runqueue.len() > 1 {
            self.cores[core].slice_due = true;
        }
    }

    /// A time slice ended (or the current vCPU halted): switch to the next
    /// runnable vCPU homed here. Returns the host time it costs.
    pub(super) fn end_slice(
        &mut self,
        core: usize,
        now: u64,
        lapic: &mut Lapic,
        iommu: &mut InterruptRemappingTable,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) -> u64 {
        if self.cores[core].runqueue.len() > 1 {
            self.arm_slice(core, now, self.profile.host_ns.sched_quantum, fx);
        }
        let Some(current) = self.cores[core].current else {
            return 0;
        };
        let guest_in_service = lapic.isr().iter().any(is_guest_vector);
        if !self.design.preemption.may_preempt(guest_in_service) {
            // The guest is inside a handler whose EOI goes to this LAPIC:
            // let it finish and try again shortly.
            self.arm_slice(core, now, self.profile.host_ns.preemption_retry, fx);
            return 0;
        }
        let runnable = |vcpu: usize| self.vcpus[vcpu].state != VcpuState::Halted;
        let Some(next) = next_in_turn(&self.cores[core].runqueue, current, runnable) else {
            return 0;
        };
        let out_ns = self.schedule_out(current, lapic, iommu, fx);
        if self.vcpus[current].state == VcpuState::Running {
            self.vcpus[current].state = VcpuState::Runnable;
        }
        self.cores[core].current = Some(next);
        self.recheck_timer_ownership(core, lapic, ledger);
        self.vcpus[next].state = VcpuState::Running;
        let in_ns = self.schedule_in(next, now, iommu, fx);
        self.profile.host_ns.context_switch + out_ns + in_ns
    }

    /// The route of `vcpu`'s VF vector `queue`, whose host vector is
    /// `host_vector`.
    pub(super) fn vf_route(&self, vcpu: usize, queue: VfVector, host_vector: u8) -> VfRoute {
        let v = &self.vcpus[vcpu];
        let running = self.cores[v.home_core].current == Some(vcpu);
        VfRoute {
            running_on: running.then_some(index_u32(v.home_core)),
            home_core: index_u32(v.home_core),
            guest_vector: queue.guest_vector(),
            descriptor: index_u32(vcpu),
            host_vector,
            requester_id: vf_requester(v.vm),
        }
    }

    /// Points the IRTEs of the vCPU's own VF queue's vectors, if it owns
    /// one, at where the vCPU is now. Returns the host time the changed
    /// entries cost.
    pub(in crate::machine) fn retarget_vf(
        &self,
        vcpu: usize,
        iommu: &mut InterruptRemappingTable,
    ) -> u64 {
        let pair = self.topology.pair_of(vcpu);
        let vectors = self.pairs[pair];
        if vectors.owner != vcpu {
            return 0;
        }
        let tx = vectors.tx.map(|host| (VfVector::Tx, host));
        let mut ns = 0;
        for (queue, host_vector) in [(VfVector::Rx, vectors.rx)].into_iter().chain(tx) {
            let irte = self
                .design
                .vf_irte
                .irte(&self.vf_route(vcpu, queue, host_vector));
            let handle = queue.irte_handle(pair, self.pairs.len());
            if iommu.entry(handle) != Some(&irte) {
                // The table has an entry per VF vector.
                let _ = iommu.set_entry(handle, irte);
                ns += self.profile.design_work_ns.irte_rewrite;
            }
        }
        ns
    }

    /// `vcpu` is scheduled in at `now`. Returns the host time the design's
    /// work for it costs.
    pub(in crate::machine) fn schedule_in(
        &mut self,
        vcpu: usize,
        now: u64,
        iommu: &mut InterruptRemappingTable,
        fx: &mut Effects,
    ) -> u64 {
        let irte_ns = self.retarget_vf(vcpu, iommu);
        self.vcpus[vcpu].hw.pid.suppress = false;
        let (timer, timer_ns) = self.design.guest_timer.schedule_in(
            &mut self.vcpus[vcpu].timer,
            now,
            &self.profile.design_work_ns,
        );
        Self::list_timer_effects(vcpu, timer, fx);
        irte_ns + timer_ns
    }

    /// `vcpu` is scheduled out; `lapic` is its core's. Returns the host
    /// time the design's work for it costs.
    pub(super) fn schedule_out(
        &mut self,
        vcpu: usize,
        lapic: &Lapic,
        iommu: &mut InterruptRemappingTable,
        fx: &mut Effects,
    ) -> u64 {
        let core = self.vcpus[vcpu].home_core;
        // The IRTE must stop pointing at this core before anything else.
        self.cores[core].current = None;
        let ns = self.retarget_vf(vcpu, iommu);
        self.cores[core].current = Some(vcpu);
        let blocked = self.vcpus[vcpu].state == VcpuState::Halted;
        self.vcpus[vcpu].hw.pid.suppress = self.design.posting.suppress_when_descheduled(blocked);
        let owned_deadline =
            (self.cores[core].timer_owner == Some(vcpu)).then(|| lapic.timer_deadline_ns());
        let (timer, timer_ns) = self
            .design
            .guest_timer
            .schedule_out(owned_deadline, &self.profile.design_work_ns);
        Self::list_timer_effects(vcpu, timer, fx);
        ns + timer_ns
    }

    /// Lists the guest timer's effects for the engine, in order.
    pub(super) fn list_timer_effects(vcpu: usize, timer: TimerEffects, fx: &mut Effects) {
        for effect in timer.into_iter().flatten() {
            fx.push(Effect::Timer { vcpu, effect });
        }
    }

    /// The run starts: every VF's IRTE is valid, routed as for a VM that
    /// is not running until its vCPU is first scheduled in (set-up work is
    /// not charged).
    pub(in crate::machine) fn route_vfs(&self, iommu: &mut InterruptRemappingTable) {
        for vcpu in 0..self.vcpus.len() {
            self.retarget_vf(vcpu, iommu);
        }
    }

    /// `core`'s first vCPU, if it has one, is scheduled in at time 0;
    /// whether it has.
    pub(in crate::machine) fn start_core(
        &mut self,
        core: usize,
        lapic: &Lapic,
        iommu: &mut InterruptRemappingTable,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) -> bool {
        let Some(&first) = self.cores[core].runqueue.first() else {
            return false;
        };
        self.cores[core].current = Some(first);
        self.vcpus[first].state = VcpuState::Running;
        self.recheck_timer_ownership(core, lapic, ledger);
        self.schedule_in(first, 0, iommu, fx);
        true
    }

    /// `core`'s first slice, if its vCPUs share it.
    pub(in crate::machine) fn arm_first_slice(&self, core: usize, fx: &mut Effects) {
        if self.cores[core].runqueue.len() > 1 {
            self.arm_slice(core, 0, self.profile.host_ns.sched_quantum, fx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::design::DesignKind;
    use crate::machine::fixture::{listed, scheduled, Setting};
    use crate::machine::{
        GUEST_TIMER_VECTOR, GUEST_VF_VECTOR, GUEST_VIRTIO_VECTOR, HOST_KICK_VECTOR,
    };

    #[test]
    fn round_robin_skips_halted_vcpus_and_keeps_a_lone_runner() {
        let runqueue = [3, 5, 7];
        assert_eq!(next_in_turn(&runqueue, 5, |_| true), Some(7));
        assert_eq!(next_in_turn(&runqueue, 7, |vcpu| vcpu != 3), Some(5));
        assert_eq!(next_in_turn(&runqueue, 3, |_| false), None);
        assert_eq!(next_in_turn(&[3], 3, |_| true), None);
    }

    #[test]
    fn an_exit_keeps_the_host_busy_and_is_counted() {
        let mut host = Setting::single(DesignKind::Vanilla).host();
        host.now = 1_000;
        let (hypervisor, ledger, rng) = (&mut host.hypervisor, &mut host.ledger, &mut host.rng);
        let fx = listed(|fx| hypervisor.exit(0, ExitReason::Hlt, 700, 1_000, rng, ledger, fx));
        assert_eq!(fx, [scheduled(1_700, Event::HostDone { core: 1 })]);
        assert_eq!(host.ledger.counters.exits[ExitReason::Hlt.index()], 1);
        assert!(!host.hypervisor.in_guest(0));
    }

    #[test]
    fn a_guest_vector_that_reaches_the_host_is_made_virtual() {
        // Direct delivery's race: the VF's IRTE still names the core the
        // vCPU just left for the host.
        let mut host = Setting::single(DesignKind::Did).host();
        host.exits(0, ExitReason::Hlt);
        let ((), fx) = host.call(1, |hv, _, ledger, now, fx| {
            hv.host_vector(1, GUEST_VF_VECTOR, now, ledger, fx)
        });
        let vector = GUEST_VF_VECTOR;
        assert_eq!(fx, [Effect::QueueVirtual { vcpu: 0, vector }]);
    }

    #[test]
    fn host_done_runs_the_handlers_before_finishing_its_work() {
        let setting = Setting::single(DesignKind::Vanilla);
        let mut host = setting.host();
        host.exits(0, ExitReason::Hlt);
        host.raise(1, HOST_KICK_VECTOR);
        let ((), fx) = host.call(1, |hv, lapic, _, _, fx| hv.host_done(1, lapic, fx));
        let vector = HOST_KICK_VECTOR;
        let extra_ns = setting.profile.host_ns.irq_in_host_mode;
        assert_eq!(
            fx,
            [
                Effect::HostVector { core: 1, vector },
                Effect::FinishHostWork { core: 1, extra_ns }
            ]
        );
    }

    #[test]
    fn finished_host_work_injects_and_enters_the_guest() {
        let mut host = Setting::single(DesignKind::Vanilla).host();
        host.exits(0, ExitReason::ExternalInterrupt);
        let (hypervisor, platform, ledger) =
            (&mut host.hypervisor, &mut host.platform, &mut host.ledger);
        listed(|fx| hypervisor.queue_virtual(0, GUEST_VF_VECTOR, ledger, fx));
        let fx = listed(|fx| hypervisor.finish_host_work(1, 0, 0, platform, ledger, fx));
        assert_eq!(fx, [Effect::PrepareEntry(0), Effect::EnterGuest(1)]);
        host.call(1, |hv, lapic, ledger, _, _| {
            hv.prepare_entry(0, true, lapic, ledger)
        });
        let entered = host.hypervisor.enter_guest(1, 0, &mut host.ledger);
        assert_eq!(entered, Some((0, Some(GUEST_VF_VECTOR))));
        assert!(host.hypervisor.in_guest(0));
    }

    #[test]
    fn did_pays_one_self_ipi_per_pending_virtual_interrupt_once() {
        let setting = Setting::single(DesignKind::Did);
        let mut host = setting.host();
        host.exits(0, ExitReason::ExternalInterrupt);
        host.now = 100;
        let (hypervisor, platform, ledger) =
            (&mut host.hypervisor, &mut host.platform, &mut host.ledger);
        listed(|fx| {
            hypervisor.queue_virtual(0, GUEST_VIRTIO_VECTOR, ledger, fx);
            hypervisor.queue_virtual(0, GUEST_TIMER_VECTOR, ledger, fx);
        });
        let self_ipi = setting.profile.design_work_ns.self_ipi;
        assert!(self_ipi > 0);
        let fx = listed(|fx| hypervisor.finish_host_work(1, 0, 100, platform, ledger, fx));
        let done = scheduled(100 + 2 * self_ipi, Event::HostDone { core: 1 });
        assert_eq!(fx, [done]);
        // Paid: the next pass enters.
        let fx = listed(|fx| hypervisor.finish_host_work(1, 0, 100, platform, ledger, fx));
        assert_eq!(fx, [Effect::PrepareEntry(0), Effect::EnterGuest(1)]);
    }

    #[test]
    fn an_exiting_hlt_with_nothing_pending_exits() {
        let mut host = Setting::single(DesignKind::Vanilla).host();
        let (halt, fx) = host.call(1, |hv, lapic, ledger, _, fx| {
            hv.guest_halt(0, lapic, ledger, fx)
        });
        assert_eq!(halt, Halt::Exits);
        assert_eq!(fx, [host.exit_of(0, ExitReason::Hlt)]);
    }
}
