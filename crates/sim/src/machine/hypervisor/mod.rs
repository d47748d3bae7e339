//! The hypervisor (or its absence: bare metal is a design too): per core
//! what the host does there (guest, host or idle, the vCPU scheduled, its
//! run queue, the host work it owes, its NMI mailbox) and per vCPU what
//! virtualizes it (its virtual LAPIC, VMCS and posted-interrupt
//! descriptor, the design's injection and timer state, whether it runs).
//! Every decision that differs between designs is a call to a mechanism
//! the design's table names (`crate::design::mechanism`).
//!
//! Its parts: exits, VM entry and scheduling (`exits`); physical delivery
//! at a core, guest mode or not (`delivery`); virtual interrupts
//! (`injection`); the guest's LAPIC timer and the host's tick (`timers`);
//! hardware posting (`posting`); the guest's IPIs (`ipi`); KVM's adaptive
//! halt polling (`halt_poll`). It drives the
//! platform's LAPICs and IOMMU table through the `&mut` it is handed, and
//! lists what another part must do (a handler to start, the guest to run
//! on) as effects.

mod delivery;
mod exits;
mod halt_poll;
mod injection;
mod ipi;
mod posting;
mod timers;

use dirq_arch::lapic::Lapic;
use dirq_arch::posted::PostedInterruptDescriptor;

use super::effects::Effects;
use super::ledger::Ledger;
use super::platform::{Platform, VfVector};
use super::topology::Topology;
use super::{
    index_u32, is_guest_vector, Event, GUEST_VF_TX_VECTOR, GUEST_VF_VECTOR, HOUSEKEEPING_CORE,
    POSTED_NOTIFICATION_VECTOR,
};
use crate::design::mechanism::injection::InjectionState;
use crate::design::mechanism::pv_eoi::PvEoiState;
use crate::design::mechanism::timer::TimerState;
use crate::design::mechanism::VcpuHardware;
use crate::design::Design;
use crate::metrics::ExitReason;
use crate::profile::CostProfile;
use crate::scenario::{IdleMode, RunSpec};
use crate::service::Sampler;

pub(super) use delivery::Delivery;
pub(super) use exits::Halt;

/// The APIC bus of a VM routes over its vCPUs' virtual LAPICs.
impl AsRef<Lapic> for VirtCpu {
    fn as_ref(&self) -> &Lapic {
        &self.hw.vlapic
    }
}

/// What a core is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Guest,
    Host,
    Idle,
}

/// A message the host's NMI carries in the core's mailbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum NmiMessage {
    /// A VF's event queue interrupted while its VM was not running: the
    /// queue's owner and the guest vector it carries.
    AssignedInterrupt {
        vcpu: u32,
        vector: u8,
    },
    SliceEnd,
    Kick,
}

/// One core as the host sees it.
struct HostCore {
    mode: Mode,
    mode_since: u64,
    /// The vCPU scheduled here (running, in an exit, or halted).
    current: Option<usize>,
    runqueue: Vec<usize>,
    /// The vCPU whose timer the physical LAPIC timer holds (pass-through).
    timer_owner: Option<usize>,
    /// The timer is armed for a vCPU other than the current one.
    timer_misowned: bool,
    nmi_mailbox: Vec<NmiMessage>,
    /// Interrupts taken in host mode before the next entry are free up to
    /// this many (the exit that brought the core here already paid).
    free_host_irqs: u32,
    slice_due: bool,
    /// Host work the timers that fired here owe before the next entry:
    /// KVM's hrtimer callback, kick and injection for each guest timer
    /// that expired, and the host tick's own work.
    timer_work_ns: u64,
    /// Host halt polling: a wake-up before this time needs no sleep/wake.
    halt_poll_until: u64,
    guest_ns: u64,
    /// Time asleep: idle and past any halt-polling window.
    asleep_ns: u64,
    /// The VF vectors (queue pair, vector) whose host vectors this core
    /// allocated, in vector order from `HOST_VF_VECTOR_BASE`.
    vf_vectors: Vec<(usize, VfVector)>,
}

/// Whether a vCPU runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum VcpuState {
    Running,
    Runnable,
    Halted,
}

/// One vCPU as the hypervisor virtualizes it.
struct VirtCpu {
    vm: usize,
    home_core: usize,
    /// Its LAPIC model, VMCS and posted-interrupt descriptor.
    hw: VcpuHardware,
    /// The design's injection state for this vCPU.
    injection: InjectionState,
    /// The design's timer state for this vCPU.
    timer: TimerState,
    /// Its guest's PV EOI flag, as the design keeps it.
    pv_eoi: PvEoiState,
    state: VcpuState,
    halt_requested: bool,
    /// When it last halted in the host (its block's start).
    halted_at: u64,
    /// Its adaptive halt-polling window.
    poll_window: halt_poll::PollWindow,
}

/// A queue pair's VF vectors' host vectors, on its owner's home core.
#[derive(Clone, Copy, Debug)]
struct PairVectors {
    owner: usize,
    rx: u8,
    /// The transmit event queue's, if the VF has one.
    tx: Option<u8>,
}

pub(super) struct Hypervisor {
    design: &'static Design,
    topology: Topology,
    cores: Vec<HostCore>,
    vcpus: Vec<VirtCpu>,
    pairs: Vec<PairVectors>,
    profile: CostProfile,
    /// The profile's exit service-time shape, ready to draw.
    exit_times: Sampler,
    /// What an idle vCPU does, and the most the host polls one
    /// (`halt_poll_ns`).
    idle: IdleMode,
    halt_poll_ns: u64,
}

/// VF host vectors are allocated per core from here up, as Linux's
/// per-CPU vector matrix does (`scenario::HOST_VECTORS_PER_CORE` of them).
const HOST_VF_VECTOR_BASE: u8 = 0x60;

impl Hypervisor {
    /// The hypervisor of `spec`'s host: every vCPU runnable on its home
    /// core with its design's VMCS, a host vector for each VF vector of
    /// the queue pairs its owner's core hosts; `vlapics` are the vCPUs'
    /// virtual LAPICs; `platform` says which VFs have a transmit event
    /// queue.
    pub(super) fn new(
        spec: &RunSpec,
        profile: &CostProfile,
        topology: &Topology,
        vlapics: Vec<Lapic>,
        platform: &Platform,
    ) -> Hypervisor {
        let design = spec.design.table();
        let mut cores: Vec<HostCore> = (0..spec.group.host.cores)
            .map(|_| HostCore {
                mode: Mode::Idle,
                mode_since: 0,
                current: None,
                runqueue: Vec::new(),
                timer_owner: None,
                timer_misowned: false,
                nmi_mailbox: Vec::new(),
                free_host_irqs: 0,
                slice_due: false,
                timer_work_ns: 0,
                halt_poll_until: 0,
                guest_ns: 0,
                asleep_ns: 0,
                vf_vectors: Vec::new(),
            })
            .collect();
        let vcpus: Vec<VirtCpu> = vlapics
            .into_iter()
            .enumerate()
            .map(|(vcpu, vlapic)| {
                let home_core = topology.home_core(vcpu);
                cores[home_core].runqueue.push(vcpu);
                VirtCpu {
                    vm: topology.vm_of(vcpu),
                    home_core,
                    hw: VcpuHardware {
                        vlapic,
                        vmcs: design.vmcs.build(),
                        pid: PostedInterruptDescriptor::new(
                            POSTED_NOTIFICATION_VECTOR,
                            index_u32(home_core),
                        ),
                    },
                    injection: InjectionState::default(),
                    timer: TimerState::default(),
                    pv_eoi: design.pv_eoi.state(spec.group.pv_eoi),
                    state: VcpuState::Runnable,
                    halt_requested: false,
                    halted_at: 0,
                    poll_window: halt_poll::PollWindow::default(),
                }
            })
            .collect();
        let pairs = (0..topology.pair_count())
            .map(|pair| {
                let owner = topology.owner(pair);
                // Validation keeps every core within its vector range.
                let core = &mut cores[topology.home_core(owner)];
                let mut allocate = |queue: VfVector| {
                    let vector = HOST_VF_VECTOR_BASE
                        + u8::try_from(core.vf_vectors.len())
                            .expect("at most HOST_VECTORS_PER_CORE");
                    core.vf_vectors.push((pair, queue));
                    vector
                };
                let rx = allocate(VfVector::Rx);
                let tx = platform.has_tx_eq(pair).then(|| allocate(VfVector::Tx));
                PairVectors { owner, rx, tx }
            })
            .collect();
        Hypervisor {
            design,
            topology: topology.clone(),
            cores,
            vcpus,
            pairs,
            profile: profile.clone(),
            exit_times: profile.service_time.exit.sampler(),
            idle: spec.group.idle,
            halt_poll_ns: spec.group.halt_poll_ns.unwrap_or(profile.host_ns.halt_poll),
        }
    }

    pub(super) fn home_core(&self, vcpu: usize) -> usize {
        self.vcpus[vcpu].home_core
    }

    pub(super) fn mode(&self, core: usize) -> Mode {
        self.cores[core].mode
    }

    /// `vcpu` runs in guest mode on its core.
    pub(super) fn in_guest(&self, vcpu: usize) -> bool {
        let v = &self.vcpus[vcpu];
        v.state == VcpuState::Running
            && self.cores[v.home_core].current == Some(vcpu)
            && self.cores[v.home_core].mode == Mode::Guest
    }

    /// `vcpu` sleeps in HLT.
    pub(super) fn halted(&self, vcpu: usize) -> bool {
        self.vcpus[vcpu].state == VcpuState::Halted
    }

    /// `vcpu`'s HLT exits (it sleeps in the host, not in guest mode).
    pub(super) fn hlt_exits(&self, vcpu: usize) -> bool {
        self.vcpus[vcpu].hw.vmcs.hlt_exits()
    }

    /// The exit of `vcpu` for `reason` at the profile's cost.
    pub(super) fn list_exit(&self, vcpu: usize, reason: ExitReason, fx: &mut Effects) {
        fx.exit(vcpu, reason, self.profile.exit_cost(reason));
    }

    /// `core` changes to `mode` at `now`: the time in the old one is
    /// counted and traced.
    pub(super) fn set_mode(&mut self, core: usize, mode: Mode, now: u64, ledger: &mut Ledger) {
        let c = &mut self.cores[core];
        match c.mode {
            Mode::Guest => c.guest_ns += now - c.mode_since,
            Mode::Idle => c.asleep_ns += now.saturating_sub(c.mode_since.max(c.halt_poll_until)),
            Mode::Host => {}
        }
        if let Some(trace) = &mut ledger.trace {
            let name = match c.mode {
                Mode::Guest => "guest",
                Mode::Host => "host",
                Mode::Idle => "idle",
            };
            trace.span(core, c.mode_since, now, name);
        }
        c.mode = mode;
        c.mode_since = now;
    }

    /// The host is busy on `core` for `ns` from `now`.
    pub(super) fn host_busy(&self, core: usize, now: u64, ns: u64, fx: &mut Effects) {
        fx.schedule(
            now + ns,
            Event::HostDone {
                core: index_u32(core),
            },
        );
    }

    /// The queue pair and VF vector a host vector on `core` is.
    pub(super) fn host_vf_vector(&self, core: usize, vector: u8) -> Option<(usize, VfVector)> {
        let index = vector.checked_sub(HOST_VF_VECTOR_BASE)?;
        self.cores[core].vf_vectors.get(usize::from(index)).copied()
    }

    /// The VM and guest vector a physical vector on `core` stands for.
    pub(super) fn physical_owner(&self, core: usize, vector: u8) -> Option<(usize, u8)> {
        if let Some((pair, queue)) = self.host_vf_vector(core, vector) {
            let owner = self.pairs[pair].owner;
            return Some((self.vcpus[owner].vm, queue.guest_vector()));
        }
        if is_guest_vector(vector) {
            return self.cores[core]
                .current
                .map(|vcpu| (self.vcpus[vcpu].vm, vector));
        }
        None
    }

    /// End of run at `now`: every core's time in its mode is counted.
    /// Returns the guest cores' time in guest mode and asleep, and their
    /// count.
    pub(super) fn close(&mut self, now: u64, ledger: &mut Ledger) -> (u64, u64, u64) {
        for core in 0..self.cores.len() {
            self.set_mode(core, self.cores[core].mode, now, ledger);
        }
        let guest_cores: Vec<&HostCore> = self
            .cores
            .iter()
            .filter(|core| !core.runqueue.is_empty())
            .collect();
        (
            guest_cores.iter().map(|core| core.guest_ns).sum(),
            guest_cores.iter().map(|core| core.asleep_ns).sum(),
            guest_cores.len() as u64,
        )
    }

    /// End of run: outstanding interrupts that no structure holds any
    /// more were lost; those a vCPU's LAPICs, descriptor, injection or
    /// its core's mailbox still hold are pending.
    pub(super) fn count_lost(&self, platform: &Platform, ledger: &mut Ledger) {
        for vm in 0..self.topology.vm_count() {
            let outstanding: Vec<(u8, u32)> = ledger.checker.outstanding(vm).collect();
            for (vector, count) in outstanding {
                let held = self.topology.vcpus_of(vm).any(|vcpu| {
                    let v = &self.vcpus[vcpu];
                    let lapic = platform.lapic(v.home_core);
                    let pair = &self.pairs[self.topology.pair_of(vcpu)];
                    let host_form = match vector {
                        GUEST_VF_VECTOR => Some(pair.rx),
                        GUEST_VF_TX_VECTOR => pair.tx,
                        _ => None,
                    };
                    v.hw.vlapic.irr().contains(vector)
                        || v.hw.pid.pir.contains(vector)
                        || v.injection.holds(vector)
                        || lapic.irr().contains(vector)
                        || host_form.is_some_and(|host| lapic.irr().contains(host))
                        || !self.cores[v.home_core].nmi_mailbox.is_empty()
                });
                ledger.checker.settle(count, held);
            }
        }
    }

    /// Re-evaluates the design's timer invariant for `core` after its LAPIC timer,
    /// its timer owner or its current vCPU changed.
    pub(super) fn recheck_timer_ownership(
        &mut self,
        core: usize,
        lapic: &Lapic,
        ledger: &mut Ledger,
    ) {
        if core == HOUSEKEEPING_CORE {
            return;
        }
        let c = &mut self.cores[core];
        let armed = lapic.timer_deadline_ns().is_some();
        let misowned = self
            .design
            .guest_timer
            .misowned(armed, c.timer_owner, c.current);
        if misowned != c.timer_misowned {
            c.timer_misowned = misowned;
            ledger.checker.timer_misowned(misowned);
        }
    }
}
