//! Host exits, VM entry and scheduling: what the hypervisor does on a core
//! between two stretches of guest time, and which vCPU runs next.

use super::*;

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

impl Machine {
    pub(super) fn enter_guest(&mut self, core: usize, fx: &mut Effects) {
        let Some(vcpu) = self.cores[core].current else {
            self.set_mode(core, Mode::Idle);
            return;
        };
        self.set_mode(core, Mode::Guest);
        self.cores[core].free_host_irqs = 0;
        if let Some(vector) = self.vcpus[vcpu].injection.entered() {
            self.deliver_to_guest(vcpu, vector, fx);
        }
        fx.push(Effect::TryDeliver(vcpu));
    }

    /// A VM exit on the vCPU's core; the host is busy for `service_ns`.
    pub(super) fn exit(
        &mut self,
        vcpu: usize,
        reason: ExitReason,
        service_ns: u64,
        fx: &mut Effects,
    ) {
        let core = self.vcpus[vcpu].home_core;
        // The listed cost is the mean; this exit's own is drawn around it.
        let service_ns = self.exit_times.draw(service_ns, &mut self.rng);
        self.suspend(vcpu, fx);
        self.counters.exits[reason.index()] += 1;
        self.set_mode(core, Mode::Host);
        // After the guest slice closes: the trace names the host slice
        // that starts now after the exit.
        if let Some(trace) = &mut self.trace {
            trace.exit(core, self.now, reason.vmx());
        }
        if matches!(
            reason,
            ExitReason::ExternalInterrupt | ExitReason::Nmi | ExitReason::Exception
        ) {
            self.cores[core].free_host_irqs = 1;
        }
        self.host_busy(core, service_ns, fx);
    }

    pub(super) fn host_busy(&self, core: usize, ns: u64, fx: &mut Effects) {
        fx.schedule(
            self.now + ns,
            Event::HostDone {
                core: index_u32(core),
            },
        );
    }

    pub(super) fn arm_slice(&self, core: usize, delay: u64, fx: &mut Effects) {
        fx.schedule(
            self.now + delay,
            Event::SliceEnd {
                core: index_u32(core),
            },
        );
    }

    /// The host finished the work of an exit: it takes the pending
    /// interrupts, whose handlers run before [`Self::finish_host_work`].
    pub(super) fn host_done(&mut self, core: usize, fx: &mut Effects) {
        let mut extra_ns = 0;
        while let Some(vector) = self.cores[core].lapic.acknowledge() {
            self.cores[core].lapic.eoi();
            extra_ns += self.host_irq_cost(core);
            fx.push(Effect::HostVector { core, vector });
        }
        let mailbox = std::mem::take(&mut self.cores[core].nmi_mailbox);
        for message in mailbox {
            extra_ns += self.host_irq_cost(core);
            match message {
                NmiMessage::AssignedInterrupt { pair, vector } => fx.push(Effect::QueueVirtual {
                    vcpu: self.pairs[pair as usize].owner,
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
    pub(super) fn finish_host_work(&mut self, core: usize, mut extra_ns: u64, fx: &mut Effects) {
        extra_ns += std::mem::take(&mut self.cores[core].timer_work_ns);
        if let Some(vcpu) = self.cores[core].current {
            if std::mem::take(&mut self.vcpus[vcpu].halt_requested) {
                self.halt(vcpu);
            }
        }
        if std::mem::take(&mut self.cores[core].slice_due) {
            extra_ns += self.end_slice(core, fx);
        }
        if extra_ns > 0 {
            self.host_busy(core, extra_ns, fx);
            return;
        }
        match self.cores[core].current {
            Some(vcpu) if self.vcpus[vcpu].state == VcpuState::Running => {
                if let Some(ns) = self.entry_work_due(vcpu) {
                    self.host_busy(core, ns, fx);
                    return;
                }
                fx.push(Effect::PrepareEntry(vcpu));
                fx.push(Effect::EnterGuest(core));
            }
            _ => self.set_mode(core, Mode::Idle),
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

    pub(super) fn host_handle_vector(&mut self, core: usize, vector: u8, fx: &mut Effects) {
        if let Some(trace) = &mut self.trace {
            trace.instant(core, self.now, "host-irq", vector);
        }
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
            HOST_TIMER_VECTOR => self.expire_software_timers(core, fx),
            POSTED_WAKEUP_VECTOR => self.wake_posted_sleepers(Some(core), fx),
            GA_LOG_VECTOR => self.wake_posted_sleepers(None, fx),
            vector if is_guest_vector(vector) => {
                // DID's race: an interrupt for the VM scheduled here arrived
                // while the core was in host mode; make it virtual.
                if let Some(vcpu) = self.cores[core].current {
                    fx.push(Effect::QueueVirtual { vcpu, vector });
                }
            }
            _ => {}
        }
    }

    pub(super) fn wake(&mut self, vcpu: usize, fx: &mut Effects) {
        if self.vcpus[vcpu].state != VcpuState::Halted {
            return;
        }
        self.vcpu_woken(vcpu);
        let core = self.vcpus[vcpu].home_core;
        self.vcpus[vcpu].state = VcpuState::Running;
        if self.cores[core].current != Some(vcpu) {
            self.vcpus[vcpu].state = VcpuState::Runnable;
            return;
        }
        if self.cores[core].mode == Mode::Idle {
            let cost = self.wakeup_cost(core);
            self.set_mode(core, Mode::Host);
            self.host_busy(core, cost, fx);
        }
    }

    /// Waking a sleeping vCPU thread, unless the host is still halt-polling.
    pub(super) fn wakeup_cost(&self, core: usize) -> u64 {
        if self.now < self.cores[core].halt_poll_until {
            0
        } else {
            self.profile.host_ns.wakeup
        }
    }

    pub(super) fn guest_halt(&mut self, vcpu: usize, fx: &mut Effects) {
        let core = self.vcpus[vcpu].home_core;
        if self.vcpus[vcpu].hw.vmcs.hlt_exits() {
            self.vcpus[vcpu].halt_requested = true;
            self.list_exit(vcpu, ExitReason::Hlt, fx);
            return;
        }
        // HLT does not exit: the core halts until an interrupt.
        if self.cores[core].lapic.pending_vector().is_some() {
            fx.push(Effect::TryDeliver(vcpu));
            return;
        }
        self.vcpus[vcpu].state = VcpuState::Halted;
        self.vcpu_blocked(vcpu);
        self.suspend(vcpu, fx);
        self.set_mode(core, Mode::Idle);
    }

    /// HLT exit handling: sleep unless something is pending.
    pub(super) fn halt(&mut self, vcpu: usize) {
        let core = self.vcpus[vcpu].home_core;
        let v = &self.vcpus[vcpu];
        let pending = v.hw.vlapic.pending_vector().is_some()
            || !v.hw.pid.pir.is_empty()
            || v.injection.has_queued()
            || self.cores[core].lapic.pending_vector().is_some();
        if pending {
            return;
        }
        self.vcpus[vcpu].state = VcpuState::Halted;
        self.vcpu_blocked(vcpu);
        self.cores[core].halt_poll_until = match self.spec.group.idle {
            IdleMode::HaltPoll => self.now + self.profile.host_ns.halt_poll,
            _ => 0,
        };
        if self.cores[core].runqueue.len() > 1 {
            self.cores[core].slice_due = true;
        }
    }

    /// A time slice ended (or the current vCPU halted): switch to the next
    /// runnable vCPU homed here. Returns the host time it costs.
    pub(super) fn end_slice(&mut self, core: usize, fx: &mut Effects) -> u64 {
        if self.cores[core].runqueue.len() > 1 {
            self.arm_slice(core, self.profile.host_ns.sched_quantum, fx);
        }
        let Some(current) = self.cores[core].current else {
            return 0;
        };
        let guest_in_service = self.cores[core].lapic.isr().iter().any(is_guest_vector);
        if !self.design.preemption.may_preempt(guest_in_service) {
            // The guest is inside a handler whose EOI goes to this LAPIC:
            // let it finish and try again shortly.
            self.arm_slice(core, self.profile.host_ns.preemption_retry, fx);
            return 0;
        }
        let runnable = |vcpu: usize| self.vcpus[vcpu].state != VcpuState::Halted;
        let Some(next) = next_in_turn(&self.cores[core].runqueue, current, runnable) else {
            return 0;
        };
        let out_ns = self.schedule_out(current, fx);
        if self.vcpus[current].state == VcpuState::Running {
            self.vcpus[current].state = VcpuState::Runnable;
        }
        self.cores[core].current = Some(next);
        self.recheck_timer_ownership(core);
        self.vcpus[next].state = VcpuState::Running;
        let in_ns = self.schedule_in(next, fx);
        self.profile.host_ns.context_switch + out_ns + in_ns
    }

    /// The route of `vcpu`'s VF event queue whose host vector is
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

    /// Points the IRTEs of the vCPU's own VF queue's event queues, if it
    /// owns one, at where the vCPU is now. Returns the host time the
    /// changed entries cost.
    pub(super) fn retarget_vf(&mut self, vcpu: usize) -> u64 {
        let pair = self.vcpus[vcpu].pair;
        let queue_pair = &self.pairs[pair];
        if queue_pair.owner != vcpu {
            return 0;
        }
        let tx = queue_pair.tx_eq.map(|eq| (VfVector::Tx, eq.host_vector));
        let mut ns = 0;
        for (queue, host_vector) in [(VfVector::Rx, queue_pair.vf_host_vector)]
            .into_iter()
            .chain(tx)
        {
            let irte = self
                .design
                .vf_irte
                .irte(&self.vf_route(vcpu, queue, host_vector));
            let handle = queue.irte_handle(pair, self.pairs.len());
            if self.iommu.entry(handle) != Some(&irte) {
                // The table has an entry per event queue.
                let _ = self.iommu.set_entry(handle, irte);
                ns += self.profile.design_work_ns.irte_rewrite;
            }
        }
        ns
    }

    /// Returns the host time the design's work for it costs.
    pub(super) fn schedule_in(&mut self, vcpu: usize, fx: &mut Effects) -> u64 {
        let irte_ns = self.retarget_vf(vcpu);
        self.vcpus[vcpu].hw.pid.suppress = false;
        let (timer, timer_ns) = self.design.guest_timer.schedule_in(
            &mut self.vcpus[vcpu].timer,
            self.now,
            &self.profile.design_work_ns,
        );
        Self::list_timer_effects(vcpu, timer, fx);
        irte_ns + timer_ns
    }

    /// Returns the host time the design's work for it costs.
    pub(super) fn schedule_out(&mut self, vcpu: usize, fx: &mut Effects) -> u64 {
        let core = self.vcpus[vcpu].home_core;
        // The IRTE must stop pointing at this core before anything else.
        self.cores[core].current = None;
        let ns = self.retarget_vf(vcpu);
        self.cores[core].current = Some(vcpu);
        let blocked = self.vcpus[vcpu].state == VcpuState::Halted;
        self.vcpus[vcpu].hw.pid.suppress = self.design.posting.suppress_when_descheduled(blocked);
        let owned_deadline = (self.cores[core].timer_owner == Some(vcpu))
            .then(|| self.cores[core].lapic.timer_deadline_ns());
        let (timer, timer_ns) = self
            .design
            .guest_timer
            .schedule_out(owned_deadline, &self.profile.design_work_ns);
        Self::list_timer_effects(vcpu, timer, fx);
        ns + timer_ns
    }

    /// Lists the timer path's effects for the engine, in order.
    fn list_timer_effects(vcpu: usize, timer: TimerEffects, fx: &mut Effects) {
        for effect in timer.into_iter().flatten() {
            fx.push(Effect::Timer { vcpu, effect });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{listed, machine, running, scheduled, single};
    use super::*;
    use crate::design::DesignKind;
    use crate::scenario::HostShape;

    /// Two single-vCPU VMs sharing core 1.
    fn shared_core(design: DesignKind) -> Machine {
        let host = HostShape {
            cores: 2,
            vms: 2,
            vcpus_per_vm: 1,
        };
        let mut m = machine(design, WorkloadKind::UdpRx, host);
        running(&mut m, 0);
        m.vcpus[1].state = VcpuState::Runnable;
        m.cores[1].mode = Mode::Host;
        m
    }

    #[test]
    fn round_robin_skips_halted_vcpus_and_keeps_a_lone_runner() {
        let runqueue = [3, 5, 7];
        assert_eq!(next_in_turn(&runqueue, 5, |_| true), Some(7));
        assert_eq!(next_in_turn(&runqueue, 7, |vcpu| vcpu != 3), Some(5));
        assert_eq!(next_in_turn(&runqueue, 3, |_| false), None);
        assert_eq!(next_in_turn(&[3], 3, |_| true), None);
    }

    #[test]
    fn an_exit_stops_the_guest_and_keeps_the_host_busy() {
        let mut m = single(DesignKind::Vanilla);
        running(&mut m, 0);
        m.now = 1_000;
        let fx = listed(&mut m, |m, fx| m.exit(0, ExitReason::Hlt, 700, fx));
        let done = scheduled(1_700, Event::HostDone { core: 1 });
        let step_end = Effect::Cancel(Event::GuestStep { vcpu: 0 });
        assert_eq!(fx, [step_end, done]);
        assert_eq!(m.counters.exits[ExitReason::Hlt.index()], 1);
        assert_eq!(m.cores[1].mode, Mode::Host);
    }

    #[test]
    fn host_done_runs_the_handlers_before_finishing_its_work() {
        let mut m = single(DesignKind::Did);
        running(&mut m, 0);
        m.cores[1].mode = Mode::Host;
        m.cores[1].nmi_mailbox.push(NmiMessage::AssignedInterrupt {
            pair: 0,
            vector: GUEST_VF_VECTOR,
        });
        let fx = listed(&mut m, |m, fx| m.host_done(1, fx));
        let vector = GUEST_VF_VECTOR;
        let extra_ns = m.profile.host_ns.irq_in_host_mode;
        assert_eq!(
            fx,
            [
                Effect::QueueVirtual { vcpu: 0, vector },
                Effect::FinishHostWork { core: 1, extra_ns }
            ]
        );
    }

    #[test]
    fn finished_host_work_injects_and_enters_the_guest() {
        let mut m = single(DesignKind::Vanilla);
        running(&mut m, 0);
        m.cores[1].mode = Mode::Host;
        m.vcpus[0]
            .hw
            .vlapic
            .accept(GUEST_VF_VECTOR, TriggerMode::Edge);
        let fx = listed(&mut m, |m, fx| m.finish_host_work(1, 0, fx));
        assert_eq!(fx, [Effect::PrepareEntry(0), Effect::EnterGuest(1)]);
        m.prepare_entry(0);
        let fx = listed(&mut m, |m, fx| m.enter_guest(1, fx));
        let step_end = Effect::Cancel(Event::GuestStep { vcpu: 0 });
        assert_eq!(fx, [step_end, Effect::TryDeliver(0)]);
        let handler = m.vcpus[0].frames.last().and_then(|frame| frame.vector);
        assert_eq!(handler, Some(GUEST_VF_VECTOR));
        assert_eq!(m.cores[1].mode, Mode::Guest);
    }

    #[test]
    fn a_time_slice_switches_to_the_next_runnable_vcpu() {
        let mut m = shared_core(DesignKind::Vanilla);
        let mut cost = 0;
        let fx = listed(&mut m, |m, fx| cost = m.end_slice(1, fx));
        let at = m.profile.host_ns.sched_quantum;
        let slice_end = scheduled(at, Event::SliceEnd { core: 1 });
        assert_eq!(fx.first(), Some(&slice_end));
        assert_eq!(cost, m.profile.host_ns.context_switch);
        assert_eq!(m.cores[1].current, Some(1));
        assert_eq!(m.vcpus[0].state, VcpuState::Runnable);
        assert_eq!(m.vcpus[1].state, VcpuState::Running);
    }

    #[test]
    fn did_defers_a_slice_end_while_a_guest_vector_is_in_service() {
        let mut m = shared_core(DesignKind::Did);
        m.cores[1].lapic.accept(GUEST_VF_VECTOR, TriggerMode::Edge);
        m.cores[1].lapic.acknowledge();
        let mut cost = None;
        let fx = listed(&mut m, |m, fx| cost = Some(m.end_slice(1, fx)));
        assert_eq!(cost, Some(0));
        let at = m.profile.host_ns.preemption_retry;
        let slice_end = scheduled(at, Event::SliceEnd { core: 1 });
        assert_eq!(fx.last(), Some(&slice_end));
        assert_eq!(m.cores[1].current, Some(0));
    }

    #[test]
    fn an_exiting_hlt_with_nothing_pending_halts_the_vcpu() {
        let mut m = single(DesignKind::Vanilla);
        running(&mut m, 0);
        let fx = listed(&mut m, |m, fx| m.guest_halt(0, fx));
        assert!(matches!(
            fx.as_slice(),
            [Effect::Exit {
                reason: ExitReason::Hlt,
                ..
            }]
        ));
        m.halt(0);
        assert_eq!(m.vcpus[0].state, VcpuState::Halted);
    }

    #[test]
    fn did_pays_one_self_ipi_per_pending_virtual_interrupt_once() {
        let mut m = single(DesignKind::Did);
        running(&mut m, 0);
        m.cores[1].mode = Mode::Host;
        listed(&mut m, |m, fx| {
            m.queue_virtual(0, GUEST_VIRTIO_VECTOR, fx);
            m.queue_virtual(0, GUEST_TIMER_VECTOR, fx);
        });
        let self_ipi = m.profile.design_work_ns.self_ipi;
        assert!(self_ipi > 0);
        m.now = 100;
        let fx = listed(&mut m, |m, fx| m.finish_host_work(1, 0, fx));
        assert_eq!(
            fx,
            [scheduled(100 + 2 * self_ipi, Event::HostDone { core: 1 })]
        );
        // Paid: the next pass sends them and enters.
        let fx = listed(&mut m, |m, fx| m.finish_host_work(1, 0, fx));
        assert_eq!(fx, [Effect::PrepareEntry(0), Effect::EnterGuest(1)]);
        m.prepare_entry(0);
        listed(&mut m, |m, fx| m.enter_guest(1, fx));
        assert_eq!(m.cores[1].mode, Mode::Guest);
        assert!(!m.vcpus[0].injection.has_queued());
        assert!(m.cores[1].lapic.irr().contains(GUEST_TIMER_VECTOR));
    }

    #[test]
    fn a_did_reschedule_pays_the_irte_rewrites_and_the_timer_migration() {
        let mut m = shared_core(DesignKind::Did);
        listed(&mut m, |m, fx| m.program_guest_timer(0, 50_000, fx));
        let mut cost = 0;
        let fx = listed(&mut m, |m, fx| cost = m.end_slice(1, fx));
        let costs = &m.profile.design_work_ns;
        // Out: vCPU 0's IRTE to NMI mode and its timer parked; in: vCPU
        // 1's IRTE to this core (it has no timer to install).
        assert_eq!(
            cost,
            m.profile.host_ns.context_switch + 2 * costs.irte_rewrite + costs.timer_migration
        );
        let timer = |effect| Effect::Timer { vcpu: 0, effect };
        assert!(fx.contains(&timer(TimerEffect::StopPhysical)));
        assert!(fx.contains(&timer(TimerEffect::Park(50_000))));
        let mut vanilla = shared_core(DesignKind::Vanilla);
        let mut cost = 0;
        listed(&mut vanilla, |m, fx| cost = m.end_slice(1, fx));
        assert_eq!(
            cost, vanilla.profile.host_ns.context_switch,
            "KVM's IRTE stays"
        );
    }
}
