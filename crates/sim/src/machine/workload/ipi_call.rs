//! The IPI paper's benchmark: vCPU 0 calls a function on other vCPUs and
//! spins until every callee has run it (Linux's smp_call_function_single
//! and _many with wait), call after call. In x2APIC physical mode (Linux's
//! in a KVM guest without interrupt remapping) `__x2apic_send_IPI_mask`
//! writes the ICR once per target, so a call to all CPUs is N-1 ICR
//! writes back to back, each its own exit where they trap; in cluster mode
//! one write reaches the targets of one cluster of 16 logical IDs (SDM
//! 10.12.10), one write per cluster, and KVM still kicks each target in
//! turn inside that write's exit (`hypervisor::ipi`). A callee
//! acknowledges (EOI) first, runs the function and releases the caller's
//! lock, whose cache line reaches the caller over the interconnect.

use dirq_arch::interrupt::{DeliveryMode, Destination};
use dirq_arch::lapic::x2apic_icr;

use super::{requests_per_s, Ctx, Programs, StepOutcome, Workload, WorkloadEvent, WorkloadStep};
use crate::machine::effects::{Effect, Effects};
use crate::machine::guest::{Step, Work};
use crate::machine::ledger::Counters;
use crate::machine::{index_u32, GUEST_IPI_VECTOR};
use crate::metrics::{Throughput, ThroughputUnit, WorkloadFigures};
use crate::scenario::X2apicMode;

/// vCPU 0's loop: one call, its ICR writes, the wait.
const IPI_CALLER: &[Step] = &[
    Step::Workload(WorkloadStep::Begin),
    Step::Workload(WorkloadStep::Send),
    Step::Workload(WorkloadStep::SendMore),
    Step::Workload(WorkloadStep::Await),
];
/// A callee's interrupt handler.
const CALL_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::Eoi,
    Step::Workload(WorkloadStep::Complete),
    Step::Iret,
];

/// x2APIC logical IDs per cluster (SDM 10.12.10.2).
const X2APIC_CLUSTER_SIZE: u32 = 16;
/// The benchmark's calls per configuration; `total_s` scales the
/// simulated calls' mean to it.
const CALLS_PER_BENCHMARK: f64 = 100_000.0;

/// ipi-call's event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum CallEvent {
    /// A VM's caller sees its call's last callee finish.
    Done { vm: u32 },
}

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

/// ipi-call's own state: whom a call calls and how the guest addresses
/// them, and per VM its caller's call in flight.
#[derive(Debug)]
pub(super) struct IpiCall {
    /// The callees' x2APIC IDs, their indices in the VM (the scenario's
    /// call targets, the same in every VM).
    callees: Vec<u32>,
    mode: X2apicMode,
    calls: Vec<Call>,
}

impl IpiCall {
    pub(super) fn new(vms: usize, callees: Vec<u32>, mode: X2apicMode) -> Self {
        IpiCall {
            callees,
            mode,
            calls: vec![Call::default(); vms],
        }
    }

    /// The call's next ICR write by `vm`'s caller `vcpu`, None once every
    /// callee was written to: in physical mode to the next callee's APIC
    /// ID; in cluster mode one logical write to the unsent callees of the
    /// next cluster (SDM 10.12.10.2: cluster in bits 31:16, member bitmap
    /// in 15:0).
    fn write_next_icr(&mut self, vm: usize, vcpu: usize) -> Option<Effect> {
        let call = &mut self.calls[vm];
        if self.mode == X2apicMode::Physical {
            let callee = *call.unsent.first()?;
            call.unsent.remove(0);
            let icr = x2apic_icr(
                GUEST_IPI_VECTOR,
                DeliveryMode::Fixed,
                Destination::Physical(callee),
            );
            return Some(Effect::WriteIcr { vcpu, icr });
        }
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

    /// A callee of `vm`'s call ran the function: once every write is made,
    /// the last one releases the caller, whose spin sees it at `seen_at`.
    fn complete(&mut self, vm: usize, seen_at: u64, fx: &mut Effects) {
        let call = &mut self.calls[vm];
        call.outstanding = call.outstanding.saturating_sub(1);
        if call.outstanding > 0 || !call.unsent.is_empty() {
            return;
        }
        fx.schedule(seen_at, CallEvent::Done { vm: index_u32(vm) });
    }
}

impl Workload for IpiCall {
    fn programs(&self) -> Programs {
        Programs {
            lead: Some(IPI_CALLER),
            ipi_handler: Some(CALL_HANDLER),
            ..Programs::default()
        }
    }

    fn on_step(
        &mut self,
        vcpu: usize,
        step: WorkloadStep,
        ctx: &mut Ctx,
        fx: &mut Effects,
    ) -> StepOutcome {
        let vm = ctx.topology.vm_of(vcpu);
        match step {
            WorkloadStep::Begin => {
                self.calls[vm] = Call {
                    unsent: self.callees.clone(),
                    outstanding: 0,
                    started: ctx.now,
                    done: false,
                };
            }
            WorkloadStep::Send => {
                if let Some(write) = self.write_next_icr(vm, vcpu) {
                    fx.push(write);
                }
            }
            WorkloadStep::SendMore if !self.calls[vm].unsent.is_empty() => {
                return StepOutcome::Back
            }
            WorkloadStep::Await if !self.calls[vm].done => return StepOutcome::Spin,
            // A callee ran the function: its release reaches the caller's
            // core one interconnect crossing later.
            WorkloadStep::Complete => {
                let caller = ctx.topology.lead(vm);
                let crossing = ctx
                    .topology
                    .interconnect_ns(ctx.topology.home_core(vcpu), ctx.topology.home_core(caller));
                self.complete(vm, ctx.now + crossing, fx);
            }
            _ => {}
        }
        StepOutcome::Next
    }

    /// The caller's write reached `targets` (the bus's routing).
    fn on_ipi_sent(&mut self, caller: usize, targets: &[usize], ctx: &mut Ctx) {
        self.calls[ctx.topology.vm_of(caller)].outstanding += targets.len();
    }

    /// The caller sees its call complete: one call's latency; its spin
    /// ends (at once in guest mode: the guest model runs it on; else when
    /// it re-enters).
    fn on_event(&mut self, event: WorkloadEvent, ctx: &mut Ctx, fx: &mut Effects) {
        let WorkloadEvent::Call(CallEvent::Done { vm }) = event else {
            return;
        };
        let vm = vm as usize;
        let call = &mut self.calls[vm];
        call.done = true;
        ctx.record.request_done(ctx.now - call.started);
        let caller = ctx.topology.lead(vm);
        if ctx.state.in_guest(caller) {
            fx.push(Effect::Poke(caller));
        }
    }

    /// The benchmark's total time: its calls at the simulated mean.
    fn figures(&self, record: &Counters) -> WorkloadFigures {
        WorkloadFigures {
            total_s: (record.requests_done > 0).then(|| {
                let mean_ns =
                    dirq_stats::ratio(record.latencies.iter().sum::<u64>(), record.requests_done);
                mean_ns * CALLS_PER_BENCHMARK / 1e9
            }),
            ..Default::default()
        }
    }

    fn throughput(&self, record: &Counters, seconds: f64) -> Option<Throughput> {
        requests_per_s(record, seconds, ThroughputUnit::CallsPerS)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{one_vm, Bench};
    use super::*;
    use crate::machine::fixture::scheduled;
    use crate::scenario::WorkloadKind;

    fn physical(apic_id: u32) -> Effect {
        Effect::WriteIcr {
            vcpu: 0,
            icr: x2apic_icr(
                GUEST_IPI_VECTOR,
                DeliveryMode::Fixed,
                Destination::Physical(apic_id),
            ),
        }
    }

    /// Every ICR write of one call by vCPU 0.
    fn all_writes(call: &mut IpiCall, bench: &mut Bench) -> Vec<Effect> {
        step(call, bench, 0, WorkloadStep::Begin);
        let mut writes = Vec::new();
        loop {
            let (_, fx) = step(call, bench, 0, WorkloadStep::Send);
            writes.extend(fx);
            if step(call, bench, 0, WorkloadStep::SendMore).0 != StepOutcome::Back {
                break;
            }
        }
        writes
    }

    fn write(cluster: u32, members: u32) -> Effect {
        Effect::WriteIcr {
            vcpu: 0,
            icr: x2apic_icr(
                GUEST_IPI_VECTOR,
                DeliveryMode::Fixed,
                Destination::Logical(cluster << 16 | members),
            ),
        }
    }

    fn step(
        call: &mut IpiCall,
        bench: &mut Bench,
        vcpu: usize,
        step: WorkloadStep,
    ) -> (StepOutcome, Vec<Effect>) {
        bench.call(|ctx, fx| call.on_step(vcpu, step, ctx, fx))
    }

    #[test]
    fn a_call_to_all_makes_one_icr_write_per_x2apic_cluster() {
        let mut bench = Bench::new(&one_vm(WorkloadKind::IpiCall, 40));
        let mut call = IpiCall::new(1, (1..40).collect(), X2apicMode::Cluster);
        // Logical IDs 1-15, 16-31, 32-39.
        assert_eq!(
            all_writes(&mut call, &mut bench),
            [write(0, 0xFFFE), write(1, 0xFFFF), write(2, 0xFF)]
        );
    }

    #[test]
    fn a_call_to_all_in_physical_mode_writes_the_icr_once_per_callee_in_order() {
        let mut bench = Bench::new(&one_vm(WorkloadKind::IpiCall, 40));
        let mut call = IpiCall::new(1, (1..40).collect(), X2apicMode::Physical);
        let expected: Vec<Effect> = (1..40).map(physical).collect();
        assert_eq!(all_writes(&mut call, &mut bench), expected);
    }

    #[test]
    fn a_call_completes_when_every_write_is_made_and_every_reached_callee_ran() {
        // Callees 1 and 17: one write to each x2APIC cluster.
        let mut bench = Bench::new(&one_vm(WorkloadKind::IpiCall, 18));
        let mut call = IpiCall::new(1, vec![1, 17], X2apicMode::Cluster);
        bench.now = 100;
        step(&mut call, &mut bench, 0, WorkloadStep::Begin);
        assert_eq!(
            step(&mut call, &mut bench, 0, WorkloadStep::Send).1,
            [write(0, 1 << 1)]
        );
        bench.call(|ctx, _| call.on_ipi_sent(0, &[1], ctx));
        // The first callee finishes before the second write: no release.
        assert!(step(&mut call, &mut bench, 1, WorkloadStep::Complete)
            .1
            .is_empty());
        assert_eq!(
            step(&mut call, &mut bench, 0, WorkloadStep::SendMore).0,
            StepOutcome::Back
        );
        assert_eq!(
            step(&mut call, &mut bench, 0, WorkloadStep::Send).1,
            [write(1, 1 << 1)]
        );
        assert_eq!(
            step(&mut call, &mut bench, 0, WorkloadStep::SendMore).0,
            StepOutcome::Next
        );
        assert_eq!(
            step(&mut call, &mut bench, 0, WorkloadStep::Await).0,
            StepOutcome::Spin
        );
        bench.call(|ctx, _| call.on_ipi_sent(0, &[17], ctx));
        bench.now = 800;
        // The release crosses from the callee's core to the caller's.
        let crossing = bench
            .topology
            .interconnect_ns(bench.topology.home_core(17), 1);
        let fx = step(&mut call, &mut bench, 17, WorkloadStep::Complete).1;
        assert_eq!(fx, [scheduled(800 + crossing, CallEvent::Done { vm: 0 })]);
        // The caller sees it, records the call and, in guest mode, is poked.
        bench.now = 1_000;
        bench.facts.in_guest = vec![0];
        let done = WorkloadEvent::Call(CallEvent::Done { vm: 0 });
        let fx = bench.listed(|ctx, fx| call.on_event(done, ctx, fx));
        assert_eq!(fx, [Effect::Poke(0)]);
        assert_eq!(bench.record.latencies, [900]);
        assert_eq!(
            step(&mut call, &mut bench, 0, WorkloadStep::Await).0,
            StepOutcome::Next
        );
        let total = call.figures(&bench.record).total_s;
        assert_eq!(total, Some(900.0 * CALLS_PER_BENCHMARK / 1e9));
    }
}
