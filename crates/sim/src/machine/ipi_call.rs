//! The IPI paper's benchmark: vCPU 0 calls a function on other vCPUs and
//! spins until every callee has run it (Linux's smp_call_function_single
//! and _many with wait), call after call. The caller's ICR writes exit
//! under every hypervisor here; in x2APIC cluster mode one write reaches
//! the targets of one cluster of 16 logical IDs (SDM 10.12.10), so a call
//! to all CPUs makes one write per cluster. A callee acknowledges (EOI)
//! first, runs the function and releases the caller's lock, whose cache
//! line reaches the caller over the interconnect.

use super::guest::{Step, Work};
use super::*;
use crate::metrics::WorkloadFigures;
use dirq_arch::interrupt::Destination;
use dirq_arch::lapic::x2apic_icr;

/// vCPU 0's loop: one call, its ICR writes, the wait.
pub(super) const IPI_CALLER: &[Step] = &[
    Step::StartCall,
    Step::SendCallIpis,
    Step::NextIcrWrite,
    Step::AwaitCall,
];
/// A callee's interrupt handler.
pub(super) const CALL_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::Eoi,
    Step::CompleteCall,
    Step::Iret,
];

/// x2APIC logical IDs per cluster (SDM 10.12.10.2).
const X2APIC_CLUSTER_SIZE: u32 = 16;
/// The benchmark's calls per configuration; `total_s` scales the
/// simulated calls' mean to it.
pub(super) const CALLS_PER_BENCHMARK: f64 = 100_000.0;

/// The call in flight of a VM's caller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Call {
    /// Logical IDs of the callees whose ICR write the caller has still to
    /// make.
    unsent: Vec<u32>,
    /// Callees the caller's writes reached that have not yet run the
    /// function.
    outstanding: usize,
    started: u64,
    /// The caller has seen every callee finish.
    done: bool,
}

/// ipi-call's own state: whom a call calls, and per VM its caller's call
/// in flight.
#[derive(Debug, Default)]
pub(super) struct IpiCall {
    /// The callees' x2APIC logical IDs, their indices in the VM (the
    /// scenario's call targets, the same in every VM).
    callees: Vec<u32>,
    calls: Vec<Call>,
}

impl IpiCall {
    pub(super) fn new(vms: usize, callees: Vec<u32>) -> Self {
        IpiCall {
            callees,
            calls: vec![Call::default(); vms],
        }
    }

    /// `vm`'s caller starts a call at `now`.
    pub(super) fn start(&mut self, vm: usize, now: u64) {
        self.calls[vm] = Call {
            unsent: self.callees.clone(),
            outstanding: 0,
            started: now,
            done: false,
        };
    }

    /// `vm`'s caller has ICR writes left to make for its call.
    pub(super) fn icr_writes_left(&self, vm: usize) -> bool {
        !self.calls[vm].unsent.is_empty()
    }

    /// `vm`'s caller has seen its call complete.
    pub(super) fn done(&self, vm: usize) -> bool {
        self.calls[vm].done
    }

    /// The call's next ICR write by `vm`'s caller `vcpu`: one x2APIC
    /// logical write to the unsent callees of the next cluster (SDM
    /// 10.12.10.2: cluster in bits 31:16, member bitmap in 15:0). None once
    /// every callee was written to.
    pub(super) fn write_next_icr(&mut self, vm: usize, vcpu: usize) -> Option<Effect> {
        let call = &mut self.calls[vm];
        let cluster = call.unsent.first()? / X2APIC_CLUSTER_SIZE;
        let (batch, rest): (Vec<u32>, Vec<u32>) = std::mem::take(&mut call.unsent)
            .into_iter()
            .partition(|&callee| callee / X2APIC_CLUSTER_SIZE == cluster);
        call.unsent = rest;
        let members = batch.iter().fold(0, |bits, &callee| {
            bits | 1 << (callee % X2APIC_CLUSTER_SIZE)
        });
        let icr = x2apic_icr(
            GUEST_IPI_VECTOR,
            DeliveryMode::Fixed,
            Destination::Logical(cluster << 16 | members),
        );
        Some(Effect::WriteIcr { vcpu, icr })
    }

    /// `vm`'s caller's write reached `callees` vCPUs (the bus's routing).
    pub(super) fn sent(&mut self, vm: usize, callees: usize) {
        self.calls[vm].outstanding += callees;
    }

    /// A callee of `vm`'s call ran the function: once every write is made,
    /// the last one releases the caller, whose spin sees it at `seen_at`.
    pub(super) fn complete(&mut self, vm: usize, seen_at: u64, fx: &mut Effects) {
        let call = &mut self.calls[vm];
        call.outstanding = call.outstanding.saturating_sub(1);
        if call.outstanding > 0 || !call.unsent.is_empty() {
            return;
        }
        fx.schedule(seen_at, CallEvent::Done { vm: index_u32(vm) });
    }

    /// `vm`'s caller sees its call complete at `now`: the call's latency.
    fn finish(&mut self, vm: usize, now: u64) -> u64 {
        let call = &mut self.calls[vm];
        call.done = true;
        now - call.started
    }

    /// The benchmark's total time: its calls at the simulated mean.
    pub(super) fn results(calls: &Counters) -> WorkloadFigures {
        WorkloadFigures {
            total_s: (calls.requests_done > 0).then(|| {
                let mean_ns =
                    dirq_stats::ratio(calls.latencies.iter().sum::<u64>(), calls.requests_done);
                mean_ns * CALLS_PER_BENCHMARK / 1e9
            }),
            ..Default::default()
        }
    }
}

/// ipi-call's event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CallEvent {
    /// A VM's caller sees its call's last callee finish.
    Done { vm: u32 },
}

/// The machine's side: what ipi-call reads of it, the caller and callees'
/// places.
impl Machine {
    /// A callee ran the function (`Effect::CompleteCall`): its release
    /// reaches the caller's core one interconnect crossing later.
    pub(super) fn complete_call(&mut self, callee: usize, fx: &mut Effects) {
        let vm = self.vcpus[callee].vm;
        let caller = self.vms[vm].vcpus[0];
        let crossing =
            self.interconnect_ns(self.vcpus[callee].home_core, self.vcpus[caller].home_core);
        self.ipi_call.complete(vm, self.now + crossing, fx);
    }

    /// The caller sees its call complete: one call's latency; its spin
    /// ends (at once in guest mode: the guest model runs it on; else when
    /// it re-enters).
    pub(super) fn call_event(&mut self, event: CallEvent, fx: &mut Effects) {
        match event {
            CallEvent::Done { vm } => {
                let vm = vm as usize;
                let latency = self.ipi_call.finish(vm, self.now);
                self.counters.request_done(latency);
                let caller = self.vms[vm].vcpus[0];
                if self.in_guest(caller) {
                    fx.push(Effect::Poke(caller));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{listed, running, scheduled, shaped};
    use super::*;
    use crate::design::DesignKind;
    use crate::scenario::{HostShape, IpiTarget, NicCoalescing, RunGroup};

    /// A VM of `vcpus` vCPUs, one per core, under `design`, calling
    /// `target`, idle vCPUs in `idle` mode.
    fn calls(design: DesignKind, vcpus: u32, target: IpiTarget, idle: IdleMode) -> Machine {
        let mut group = RunGroup::new(WorkloadKind::IpiCall, vec![design]);
        group.host = HostShape {
            cores: vcpus + 1,
            vms: 1,
            vcpus_per_vm: vcpus,
        };
        group.target = target;
        group.idle = idle;
        shaped(RunSpec {
            design,
            workload: WorkloadKind::IpiCall,
            rate_pps: None,
            group,
            nic: NicCoalescing::FITTED,
            duration_ns: 2_000_000,
            offered_per_s: None,
        })
    }

    #[test]
    fn a_call_to_all_makes_one_trapped_icr_write_per_x2apic_cluster() {
        let mut m = calls(DesignKind::Apicv, 40, IpiTarget::All, IdleMode::Poll);
        running(&mut m, 0);
        m.ipi_call.start(0, 0);
        let mut writes = 0;
        while let Some(write) = m.ipi_call.write_next_icr(0, 0) {
            let fx = listed(&mut m, |m, fx| m.perform(write, fx));
            let exits = fx
                .iter()
                .filter(|effect| matches!(effect, Effect::Exit { .. }))
                .count();
            assert_eq!(exits, 1);
            writes += 1;
        }
        // Logical IDs 1-15, 16-31, 32-39.
        assert_eq!(writes, 3);
        // The bus routed the writes to every callee.
        assert_eq!(m.ipi_call.calls[0].outstanding, 39);
    }

    #[test]
    fn a_256_vcpu_vm_calls_all_with_one_icr_write_per_cluster_of_16() {
        let mut m = calls(DesignKind::Apicv, 256, IpiTarget::All, IdleMode::Poll);
        m.run();
        let calls = m.counters.requests_done;
        assert!(calls > 0);
        // APICv virtualizes the EOI: every MSR_WRITE exit is an ICR write,
        // 16 per call (logical IDs 1-255); the last call may be unfinished.
        let writes = m.counters.exits[ExitReason::MsrWrite.index()];
        assert!(
            (16 * calls..=16 * (calls + 1)).contains(&writes),
            "{writes} for {calls}"
        );
    }

    #[test]
    fn the_sender_kicks_sleeping_callees_one_after_another_waking_across_nodes_dearer() {
        let mut m = calls(DesignKind::Apicv, 6, IpiTarget::All, IdleMode::Hlt);
        m.spec.group.numa_nodes = 2;
        m.profile.numa_ns = crate::profile::BuiltinProfile::Ipi2019.profile().numa_ns;
        running(&mut m, 0);
        // Cores 0-3 are node 0, 4-6 node 1: vCPUs 1-2 share the caller's
        // node, vCPUs 3-5 do not. vCPUs 1 and 3 sleep in the host.
        for sleeper in [1, 3] {
            let core = m.vcpus[sleeper].home_core;
            m.vcpus[sleeper].state = VcpuState::Halted;
            m.cores[core].current = Some(sleeper);
            m.cores[core].mode = Mode::Idle;
        }
        let from = m.vcpus[0].home_core;
        let node_of = |m: &Machine, vcpu: usize| m.interconnect_ns(from, m.vcpus[vcpu].home_core);
        let (same, cross) = (node_of(&m, 1), node_of(&m, 3));
        assert!(cross > same);
        m.ipi_call.start(0, 0);
        let write = m.ipi_call.write_next_icr(0, 0);
        let fx = listed(&mut m, |m, fx| {
            write.into_iter().for_each(|w| m.perform(w, fx))
        });
        let send_ipi = m.profile.host_ns.send_ipi;
        let icr = m.profile.exit_service_ns.icr_write;
        // Each IPI leaves after every kick before it and its own.
        let mut left = icr;
        let mut expected = Vec::new();
        for (callee, wake) in [(1, same), (2, 0), (3, cross), (4, 0), (5, 0)] {
            left += send_ipi + wake;
            let crossing = node_of(&m, callee);
            expected.push(scheduled(
                left + crossing,
                Event::GuestIpi {
                    vcpu: index_u32(callee),
                },
            ));
        }
        let exit = Effect::Exit {
            vcpu: 0,
            reason: ExitReason::MsrWrite,
            service_ns: left + m.profile.host_ns.exit_entry_transition,
        };
        assert_eq!(fx[0], exit);
        assert_eq!(fx[1..], expected[..]);
    }

    #[test]
    fn the_last_callee_releases_the_caller_which_records_the_call() {
        let mut m = calls(DesignKind::Apicv, 3, IpiTarget::All, IdleMode::Poll);
        running(&mut m, 0);
        m.ipi_call.start(0, 0);
        let write = m.ipi_call.write_next_icr(0, 0);
        listed(&mut m, |m, fx| {
            write.into_iter().for_each(|w| m.perform(w, fx))
        });
        assert!(listed(&mut m, |m, fx| m.complete_call(1, fx)).is_empty());
        let fx = listed(&mut m, |m, fx| m.complete_call(2, fx));
        assert!(matches!(
            fx.as_slice(),
            [Effect::Schedule {
                event: Event::Workload(WorkloadEvent::Call(CallEvent::Done { vm: 0 })),
                ..
            }]
        ));
        m.now = 7_000;
        let fx = listed(&mut m, |m, fx| m.call_event(CallEvent::Done { vm: 0 }, fx));
        assert_eq!(fx, [Effect::Poke(0)]);
        assert!(m.ipi_call.calls[0].done);
        assert_eq!(m.counters.latencies, [7_000]);
    }

    #[test]
    fn a_call_completes_when_every_write_is_made_and_every_reached_callee_ran() {
        // Callees 1 and 17: one write to each x2APIC cluster.
        let mut calls = IpiCall::new(1, vec![1, 17]);
        calls.start(0, 100);
        let write = |cluster: u32, members: u32| Effect::WriteIcr {
            vcpu: 0,
            icr: x2apic_icr(
                GUEST_IPI_VECTOR,
                DeliveryMode::Fixed,
                Destination::Logical(cluster << 16 | members),
            ),
        };
        let mut fx = Effects {
            listed_from: Effects::LIST_ALL,
            ..Effects::default()
        };
        assert_eq!(calls.write_next_icr(0, 0), Some(write(0, 1 << 1)));
        calls.sent(0, 1);
        // The first callee finishes before the second write: no release.
        calls.complete(0, 500, &mut fx);
        assert!(fx.stack.is_empty());
        assert_eq!(calls.write_next_icr(0, 0), Some(write(1, 1 << 1)));
        assert_eq!(calls.write_next_icr(0, 0), None);
        calls.sent(0, 1);
        calls.complete(0, 900, &mut fx);
        let done = scheduled(900, CallEvent::Done { vm: 0 });
        assert_eq!(fx.stack, [done]);
        assert_eq!(calls.finish(0, 1_000), 900);
        assert!(calls.done(0));
    }

    #[test]
    fn guest_idle_poll_burns_a_full_core_per_vcpu_and_halting_does_not() {
        let mut poll = calls(DesignKind::Apicv, 4, IpiTarget::SameNode, IdleMode::Poll);
        poll.run();
        assert_eq!(poll.counters.asleep_ns, 0);
        assert_eq!(poll.counters.guest_core_ns, 4 * poll.end);
        assert!(poll.counters.requests_done > 0);
        let mut halt = calls(DesignKind::Apicv, 4, IpiTarget::SameNode, IdleMode::Hlt);
        halt.run();
        // vCPUs 2 and 3 are never called: they sleep nearly all the run.
        assert!(halt.counters.asleep_ns > 2 * halt.end * 9 / 10);
        assert!(halt.counters.requests_done > 0);
    }
}
