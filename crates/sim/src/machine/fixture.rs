//! Test fixtures for the mechanism modules' unit tests: a small machine
//! built from a run spec with no traffic, put into the state a test needs,
//! and the effects one mechanism call lists.

use super::guest::SPIN;
use super::*;
use crate::design::DesignKind;
use crate::scenario::{HostShape, NicCoalescing, RunGroup};

/// A machine of `host`'s shape under `design`, no packets (rate 0).
pub(super) fn machine(design: DesignKind, workload: WorkloadKind, host: HostShape) -> Machine {
    let mut group = RunGroup::new(workload, vec![design]);
    group.host = host;
    shaped(RunSpec {
        design,
        workload,
        rate_pps: None,
        group,
        nic: NicCoalescing::FITTED,
        duration_ns: 10_000_000,
        offered_per_s: None,
    })
}

/// A machine of one DID VM running `workload` for `duration_ns`, its
/// scenario group changed by `adapt`.
pub(super) fn did_run(
    workload: WorkloadKind,
    duration_ns: u64,
    adapt: impl FnOnce(&mut RunGroup),
) -> Machine {
    let mut group = RunGroup::new(workload, vec![DesignKind::Did]);
    adapt(&mut group);
    shaped(RunSpec {
        design: DesignKind::Did,
        workload,
        rate_pps: None,
        group,
        nic: NicCoalescing::FITTED,
        duration_ns,
        offered_per_s: None,
    })
}

/// [`did_run`] over virtio-net.
pub(super) fn over_pv(
    workload: WorkloadKind,
    duration_ns: u64,
    adapt: impl FnOnce(&mut RunGroup),
) -> Machine {
    did_run(workload, duration_ns, |group| {
        group.transport = Transport::Pv;
        adapt(group);
    })
}

/// A machine built from `spec`.
pub(super) fn shaped(spec: RunSpec) -> Machine {
    shaped_with(spec, |_| {})
}

/// A machine built from `spec`, its did-2015 profile changed by `adapt`.
pub(super) fn shaped_with(spec: RunSpec, adapt: impl FnOnce(&mut CostProfile)) -> Machine {
    let mut profile = CostProfile::did_2015();
    // Every cost at its mean, so that a test can name the time it expects.
    profile.service_time = crate::service::ServiceTimes::default();
    adapt(&mut profile);
    match Machine::new(&spec, &profile, 1, false) {
        Ok(machine) => machine,
        Err(err) => panic!("fixture machine: {err}"),
    }
}

/// One VM of `vcpus` vCPUs, each on its own core, running `workload`
/// under `design`; vCPU 0 runs.
pub(super) fn one_vm(design: DesignKind, workload: WorkloadKind, vcpus: u32) -> Machine {
    let host = HostShape {
        cores: vcpus + 1,
        vms: 1,
        vcpus_per_vm: vcpus,
    };
    let mut m = machine(design, workload, host);
    running(&mut m, 0);
    m
}

/// One VM with one vCPU on core 1.
pub(super) fn single(design: DesignKind) -> Machine {
    machine(design, WorkloadKind::UdpRx, HostShape::default())
}

/// `vcpu` runs in guest mode on its home core, spinning in its background
/// loop with interrupts enabled, and its VF is routed as for a running VM.
pub(super) fn running(machine: &mut Machine, vcpu: usize) {
    let core = machine.vcpus[vcpu].home_core;
    machine.cores[core].current = Some(vcpu);
    machine.cores[core].mode = Mode::Guest;
    let v = &mut machine.vcpus[vcpu];
    v.state = VcpuState::Running;
    v.frames = vec![Frame::background(SPIN)];
    v.interruptible = true;
    v.step_running = true;
    machine.retarget_vf(vcpu);
}

/// The effects `mechanism` lists, not applied.
pub(super) fn listed(
    machine: &mut Machine,
    mechanism: impl FnOnce(&mut Machine, &mut Effects),
) -> Vec<Effect> {
    let mut fx = std::mem::take(&mut machine.fx);
    fx.listed_from = Effects::LIST_ALL;
    mechanism(machine, &mut fx);
    fx.listed_from = 0;
    let listed = std::mem::take(&mut fx.stack);
    machine.fx = fx;
    listed
}

/// The effects `model` lists on a list of its own, not applied: for a
/// model tested without a machine (what it returns besides is dropped).
pub(super) fn listed_alone<R>(model: impl FnOnce(&mut Effects) -> R) -> Vec<Effect> {
    let mut fx = Effects {
        listed_from: Effects::LIST_ALL,
        ..Effects::default()
    };
    model(&mut fx);
    fx.stack
}

/// The exit `reason` of `vcpu` at its profile cost.
pub(super) fn exit_of(machine: &Machine, vcpu: usize, reason: ExitReason) -> Effect {
    Effect::Exit {
        vcpu,
        reason,
        service_ns: machine.profile.exit_cost(reason),
    }
}

pub(super) fn scheduled(at: u64, event: impl Into<Event>) -> Effect {
    Effect::Schedule {
        at,
        event: event.into(),
    }
}

/// The running `vcpu` is at step `pc` of `program`, the handler of
/// `vector`, its clock stopped.
pub(super) fn in_handler(
    machine: &mut Machine,
    vcpu: usize,
    program: &'static [guest::Step],
    pc: usize,
    vector: u8,
) {
    running(machine, vcpu);
    let v = &mut machine.vcpus[vcpu];
    v.step_running = false;
    v.frames.push(Frame {
        program,
        pc,
        remaining: None,
        vector: Some(vector),
        eoi_done: false,
        saved_interruptible: true,
    });
}

/// Runs `mechanism` and applies its effects, as the engine does.
pub(super) fn applied(machine: &mut Machine, mechanism: impl FnOnce(&mut Machine, &mut Effects)) {
    let mut fx = std::mem::take(&mut machine.fx);
    mechanism(machine, &mut fx);
    machine.apply(&mut fx);
    machine.fx = fx;
}
