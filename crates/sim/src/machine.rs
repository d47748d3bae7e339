//! The x86 machine, a model on the simulator's engine (`crate::engine`,
//! which also runs the VIOAPIC paper's core): dispatch and the one place
//! that applies effects. Its parts live in the submodules: the hardware
//! (`devices`: NIC rings, coalescing, vhost, the guest's IPIs through the
//! ICR and `dirq_arch::bus`; `tx_completion`: the VF's transmit event
//! queue; `delivery`: physical LAPICs and the IOMMU),
//! the guest model (`guest`, `periodic`, `timer_thread`), the hypervisor
//! (`host`: exits, entry, scheduling; `injection`, `timers`) and the
//! `checker`. The run's workload is behind one interface
//! (`workload::Workload`): its programs, its start, its own events, the
//! guest's workload steps, the IPIs its guest sent, the packets NAPI takes
//! and its results; no other module asks which workload runs.
//! Each module changes its own state and lists [`Effect`]s for the
//! engine instead of calling another (a guest's ICR write too: `Ipi` and
//! `IpiCall` list `Effect::WriteIcr`), as a `dirq_arch::lapic::Lapic`
//! returns bus messages. A design's behaviour is its table
//! (`crate::design::<design>`) plus the types of
//! `crate::design::mechanism` the table names; the machine calls them and
//! never branches on a table field. The mechanisms carry the decisions
//! out on the hardware models of `dirq_arch` (every physical LAPIC and
//! every vCPU's virtual LAPIC is a `dirq_arch::lapic::Lapic`; VMCS, IOMMU
//! and posted-interrupt descriptors are the `dirq_arch` models too).
//!
//! ```text
//!  engine::run --pop--> Running::handle(Event)
//!      ^                   |
//!      |                   +-- Event (hardware, hypervisor) --> machine/
//!      |                   |     devices, delivery, guest, host,  |
//!      |                   |     timers, periodic                 |
//!      |                   +-- Event::Workload(WorkloadEvent) --> |
//!      |                         the run's `dyn Workload`, with a |
//!      |                         `Ctx`: UdpRx, Fio, Ipi, IpiCall, |
//!      |                         Remote, Streams, Servers, L2fwd, |
//!      |                         Sip, Cyclictest                  |
//!      |                                  |  calls the design's   |
//!      |                                  v  mechanisms           |
//!      |                   design::mechanism::{injection, signal, |
//!      |                     timer, host_tick, host_interrupt,    |
//!      |                     preemption, irte, vmcs}              |
//!      |                     state: InjectionState, TimerState    |
//!      |                     returns Signal / TimerEffect /       |
//!      |                     merged vectors / costs               |
//!      |                                  |                       |
//!      |                                  v                       v
//!      +--Schedule/Cancel-- apply(Effects) <-- listed Effects (depth first)
//!                              |
//!                              +--> hardware: cores' Lapic, VcpuHardware
//!                              |    {vlapic, vmcs, pid}, IOMMU, APIC bus
//!                              |    (WriteIcr: vLAPIC -> bus::route ->
//!                              |    the workload's on_ipi_sent, then
//!                              |    the design's IPI sender)
//!                              +--> the next mechanism (PrepareEntry,
//!                              |    EnterGuest, QueueVirtual, Timer ...)
//!                              +--> Checker (every interrupt's fate)
//! ```
//!
//! The queue under the engine is a 4-ary heap (`crate::queue`): the
//! hottest code of a run, so kept to one integer comparison per step.

mod checker;
mod delivery;
mod devices;
mod effects;
#[cfg(test)]
mod fixture;
mod guest;
mod host;
mod injection;
mod itr;
mod napi;
mod network;
mod periodic;
mod posting;
mod setup;
mod state;
mod timer_thread;
mod timers;
mod topology;
mod tx_completion;
mod virtio;
mod workload;

use std::collections::BTreeMap;

use dirq_arch::bus;
use dirq_arch::clock::Clock;
use dirq_arch::interrupt::{ApicBusMessage, DeliveryMode, TriggerMode};
use dirq_arch::iommu::{InterruptRemappingTable, Remapped};
use dirq_arch::lapic::{
    x2apic_msr, AcceptOutcome, Lapic, LapicConfig, APIC_BASE_GLOBAL_ENABLE,
    APIC_BASE_X2APIC_ENABLE, APIC_LVT_TIMER, APIC_TIMER_DIVIDE_CONFIG, DEFAULT_MMIO_BASE,
    SVR_APIC_SOFTWARE_ENABLE,
};
use dirq_arch::msi::{MsiMessage, RemappableMsi};
use dirq_arch::posted::PostedInterruptDescriptor;
use dirq_arch::vmcs::{MsrWriteAction, CPU_INTERRUPT_WINDOW_EXITING};
use dirq_stats::f64_of;

use crate::design::mechanism::injection::InjectionState;
use crate::design::mechanism::posting::PostSource;
use crate::design::mechanism::signal::{Signal, Whereabouts};
use crate::design::mechanism::timer::{TimerEffect, TimerEffects, TimerState};
use crate::design::mechanism::VcpuHardware;
use crate::design::{msrs, Design, VfRoute, NOT_PRESENT_EXCEPTION};
use crate::engine;
use crate::metrics::{ExitReason, Throughput, WorkloadFigures};
use crate::profile::CostProfile;
use crate::queue::{EventQueue, Keyed};
use crate::rng::Rng;
use crate::scenario::{IdleMode, RunSpec};
#[cfg(test)]
use crate::scenario::{Transport, WorkloadKind};
use crate::service::Sampler;
use crate::trace::Trace;
use crate::SimError;

pub(crate) use checker::Checker;
use devices::Ring;
use devices::{vf_requester, BackendJob, QueuePair, RxRing};
use effects::{Effect, Effects};
use guest::{Frame, Handlers, TimerWrite};
use network::Network;
use periodic::Accesses;
pub(crate) use state::Counters;
use state::{Core, Mode, NmiMessage, Vcpu, VcpuState, Vm};
use timer_thread::TimerThreads;
use topology::Topology;
use tx_completion::{TxEq, VfVector};
use workload::{Ctx, MachineState, Traffic, Workload, WorkloadEvent};

// Guest vectors (what the guest OS programmed), in Linux's layout.
pub(crate) const GUEST_VF_VECTOR: u8 = 0x41;
/// The VF's transmit event queue's vector (`tx_completion`): the next one
/// after the receive queue's that Linux's allocator of the time hands
/// out (`__assign_irq_vector` steps by 8).
pub(crate) const GUEST_VF_TX_VECTOR: u8 = 0x49;
pub(crate) const GUEST_VIRTIO_VECTOR: u8 = 0x51;
pub(crate) const GUEST_TIMER_VECTOR: u8 = 0xEC;
pub(crate) const GUEST_IPI_VECTOR: u8 = 0xFB;
// Host vectors.
/// VF host vectors are allocated per core from here up, as Linux's
/// per-CPU vector matrix does (`scenario::HOST_VECTORS_PER_CORE` of them).
const HOST_VF_VECTOR_BASE: u8 = 0x60;
const HOST_TIMER_VECTOR: u8 = 0xEF;
const HOST_KICK_VECTOR: u8 = 0xFD;
const POSTED_NOTIFICATION_VECTOR: u8 = 0xF2;
/// VT-d posting's NV while a vCPU is blocked (Linux's
/// POSTED_INTR_WAKEUP_VECTOR).
const POSTED_WAKEUP_VECTOR: u8 = 0xF1;
/// The AMD IOMMU's GA log interrupt, on the housekeeping core.
const GA_LOG_VECTOR: u8 = 0xE1;

/// The housekeeping core: backends, DID's designated timer core.
const HOUSEKEEPING_CORE: usize = 0;
/// The LAPIC bus clock: 1 GHz so that one timer count is one ns.
const BUS_HZ: u64 = 1_000_000_000;
const TSC_HZ: u64 = 3_400_000_000;
/// TDCR value for divide-by-1 (SDM 10.5.4 figure 10-10).
const TDCR_DIVIDE_BY_1: u64 = 0b1011;

fn is_guest_vector(vector: u8) -> bool {
    matches!(
        vector,
        GUEST_VF_VECTOR
            | GUEST_VF_TX_VECTOR
            | GUEST_VIRTIO_VECTOR
            | GUEST_TIMER_VECTOR
            | GUEST_IPI_VECTOR
    )
}

/// A core, vCPU, VM or queue-pair index as the u32 an event, a trace or a
/// register field carries: the scenario's counts are u32, so every index
/// fits.
pub(crate) fn index_u32(index: usize) -> u32 {
    u32::try_from(index).expect("indices come from u32 counts")
}

struct At(u64);
impl Clock for At {
    fn now_ns(&self) -> u64 {
        self.0
    }
}

/// What happens at a time: an event of the hardware or of the
/// hypervisor's mechanisms, or a workload's own event, which the workload
/// that owns it handles ([`workload::WorkloadEvent`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    CoalesceTimeout {
        pair: u32,
    },
    /// The VF posts a transmit completion (`tx_completion`).
    TxCompletion {
        pair: u32,
    },
    /// The transmit event queue's delay has passed.
    TxCoalesceTimeout {
        pair: u32,
    },
    BackendDone {
        pair: u32,
        job: BackendJob,
    },
    HostDone {
        core: u32,
    },
    GuestStep {
        vcpu: u32,
    },
    PhysicalTimer {
        core: u32,
    },
    HostTimer {
        vcpu: u32,
    },
    SliceEnd {
        core: u32,
    },
    /// The host's scheduler tick on a guest core.
    HostTick {
        core: u32,
    },
    /// The guest's housekeeping pass is due.
    Housekeeping {
        vcpu: u32,
    },
    /// The hypervisor, done emulating an ICR write, sends the IPI.
    GuestIpi {
        vcpu: u32,
    },
    /// A guest IPI the sending CPU posts itself (IPIv, AVIC) arrives.
    PostedIpi {
        vcpu: u32,
    },
    /// The throttling interval of the host NIC queue carrying a VM's PV
    /// traffic ran out (`virtio`).
    HostNicTimeout {
        vm: u32,
    },
    Workload(WorkloadEvent),
}

/// How many kinds of event are cancellable (see [`Keyed for Event`]).
const CANCELLABLE_KINDS: usize = 8;
/// The kind of a cancellable workload event ([`WorkloadEvent::slot`]).
const WORKLOAD_KIND: usize = 6;

/// The cancellable events: one pending at most per (kind, core, vCPU or
/// queue pair); rescheduling one replaces it.
impl Keyed for Event {
    fn key(&self) -> Option<usize> {
        let (kind, id) = match *self {
            Event::CoalesceTimeout { pair } => (0, pair),
            Event::HostDone { core } => (1, core),
            Event::GuestStep { vcpu } => (2, vcpu),
            Event::PhysicalTimer { core } => (3, core),
            Event::HostTimer { vcpu } => (4, vcpu),
            Event::SliceEnd { core } => (5, core),
            Event::Workload(event) => (WORKLOAD_KIND, event.slot()?),
            Event::TxCoalesceTimeout { pair } => (7, pair),
            _ => return None,
        };
        Some(id as usize * CANCELLABLE_KINDS + kind)
    }
}

/// The machine on the engine: its effects taken out while it runs, so
/// that a mechanism can change the machine and list effects at once.
struct Running<'m> {
    machine: &'m mut Machine,
    fx: Effects,
}

impl engine::Model for Running<'_> {
    type Event = Event;

    fn queue(&mut self) -> &mut EventQueue<Event> {
        &mut self.fx.queue
    }

    fn handle(&mut self, now: u64, event: Event) {
        let machine = &mut *self.machine;
        machine.now = now;
        machine.dispatch(event, &mut self.fx);
        // Hot path: many events list no effect; skip the call then.
        if !self.fx.stack.is_empty() {
            machine.apply(&mut self.fx);
        }
        machine.checker.event_done();
    }
}

pub(crate) struct Machine {
    now: u64,
    end: u64,
    /// The event queue and the effects not yet applied; taken out while
    /// the engine runs mechanisms.
    fx: Effects,
    rng: Rng,
    profile: CostProfile,
    /// The profile's service-time shapes, ready to draw.
    exit_times: Sampler,
    guest_times: Sampler,
    design: &'static Design,
    spec: RunSpec,
    /// Where every vCPU, VM and queue pair is.
    topology: Topology,
    /// The run's workload, its programs and its traffic.
    workload: Box<dyn Workload>,
    handlers: Handlers,
    traffic: Traffic,
    net: Network,
    /// The guest's timer threads (cyclictest's, or a group's `with_timer`).
    timer_threads: TimerThreads,
    cores: Vec<Core>,
    vcpus: Vec<Vcpu>,
    vms: Vec<Vm>,
    pairs: Vec<QueuePair>,
    iommu: InterruptRemappingTable,
    pub(crate) counters: Counters,
    pub(crate) checker: Checker,
    pub(crate) trace: Option<Trace>,
}

impl Machine {
    /// The queue pair and event queue whose VF MSI-X vector a host
    /// vector on `core` is.
    fn host_vf_vector(&self, core: usize, vector: u8) -> Option<(usize, VfVector)> {
        let index = vector.checked_sub(HOST_VF_VECTOR_BASE)?;
        self.cores[core].vf_vectors.get(usize::from(index)).copied()
    }

    /// Lists an exit of `vcpu` for `reason` at the profile's cost.
    fn list_exit(&self, vcpu: usize, reason: ExitReason, fx: &mut Effects) {
        fx.exit(vcpu, reason, self.profile.exit_cost(reason));
    }

    /// Calls the run's workload with the context it is handed.
    fn with_workload<R>(&mut self, call: impl FnOnce(&mut dyn Workload, &mut Ctx) -> R) -> R {
        let state = Live {
            vcpus: &self.vcpus,
            cores: &self.cores,
            pairs: &self.pairs,
        };
        let mut ctx = Ctx {
            now: self.now,
            rng: &mut self.rng,
            record: &mut self.counters,
            topology: &self.topology,
            state: &state,
        };
        call(&mut *self.workload, &mut ctx)
    }

    pub(crate) fn run(&mut self) {
        let fx = std::mem::take(&mut self.fx);
        let end = self.end;
        let mut running = Running { machine: self, fx };
        let events = engine::run(&mut running, end);
        self.fx = running.fx;
        self.counters.events += events;
        self.now = self.end;
        self.finish();
    }

    /// The one place effects take place: what `fx` lists since the last
    /// call. Each effect's own effects are applied before the next one
    /// (depth first), so a mechanism's effects happen in the order it
    /// listed them.
    fn apply(&mut self, fx: &mut Effects) {
        loop {
            // What the last mechanism listed, put in order (most list one
            // effect or none: nothing to reverse).
            if fx.stack.len() - fx.listed_from > 1 {
                fx.stack[fx.listed_from..].reverse();
            }
            let Some(effect) = fx.stack.pop() else {
                break;
            };
            fx.listed_from = fx.stack.len();
            self.perform(effect, fx);
        }
        fx.listed_from = 0;
    }

    fn perform(&mut self, effect: Effect, fx: &mut Effects) {
        match effect {
            Effect::Schedule { at, event } => fx.queue.schedule(at, event),
            Effect::Cancel(event) => {
                if let Some(key) = event.key() {
                    fx.queue.cancel(key);
                }
            }
            Effect::Exit {
                vcpu,
                reason,
                service_ns,
            } => self.exit(vcpu, reason, service_ns, fx),
            Effect::RunGuest(vcpu) => self.run_guest(vcpu, fx),
            Effect::TryDeliver(vcpu) => self.try_deliver(vcpu, fx),
            Effect::GuestEoi(vcpu) => self.guest_eoi(vcpu, fx),
            Effect::TimerWrite { vcpu, write } => self.guest_timer_write(vcpu, write, fx),
            Effect::DeviceAccess(vcpu) => self.device_access(vcpu, fx),
            Effect::WriteIcr { vcpu, icr } => self.write_icr(vcpu, icr, fx),
            Effect::GuestHalt(vcpu) => self.guest_halt(vcpu, fx),
            Effect::VirtioKick(vcpu) => self.virtio_kick(vcpu, fx),
            Effect::Notify(vcpu) => self.io_notify(vcpu, fx),
            Effect::RxPacket { pair, ring } => self.packet_arrival(pair, ring, fx),
            Effect::RxBurst { pair, frames } => self.rx_burst(pair, frames, fx),
            Effect::RingTaken { pair, ring, frames } => {
                let rx = self.pairs[pair].rx(ring);
                rx.ring = rx.ring.saturating_sub(frames);
            }
            Effect::VfSent { pair, start, bytes } => self.vf_sent(pair, start, bytes, fx),
            Effect::BackendStart { pair, job } => self.backend_start(pair, job, fx),
            Effect::NapiComplete { pair } => self.napi_complete(pair, fx),
            Effect::TxReaped { pair } => self.tx_reaped(pair, fx),
            Effect::Poke(vcpu) => {
                self.suspend(vcpu, fx);
                self.run_guest(vcpu, fx);
            }
            Effect::DeliverPhysical { core, vector } => self.deliver_physical(core, vector, fx),
            Effect::PhysicalPending(core) => self.physical_pending(core, fx),
            Effect::HostInterrupt { core, message } => self.host_interrupt(core, message, fx),
            Effect::Nmi { core, message } => self.send_nmi(core, message, fx),
            Effect::HostVector { core, vector } => self.host_handle_vector(core, vector, fx),
            Effect::QueueVirtual { vcpu, vector } => self.queue_virtual(vcpu, vector, fx),
            Effect::SignalVirtual { vcpu, vector } => self.signal_virtual(vcpu, vector, fx),
            Effect::Wake(vcpu) => self.wake(vcpu, fx),
            Effect::Timer { vcpu, effect } => self.apply_timer_effect(vcpu, effect, fx),
            Effect::PrepareEntry(vcpu) => self.prepare_entry(vcpu),
            Effect::EnterGuest(core) => self.enter_guest(core, fx),
            Effect::FinishHostWork { core, extra_ns } => self.finish_host_work(core, extra_ns, fx),
        }
    }

    fn dispatch(&mut self, event: Event, fx: &mut Effects) {
        match event {
            Event::CoalesceTimeout { pair } => self.maybe_fire_vf(pair as usize, true, fx),
            Event::TxCompletion { pair } => self.tx_completed(pair as usize, fx),
            Event::TxCoalesceTimeout { pair } => self.maybe_fire_tx(pair as usize, fx),
            Event::BackendDone { pair, job } => self.backend_done(pair as usize, job, fx),
            Event::HostDone { core } => {
                let core = core as usize;
                if self.cores[core].mode == Mode::Host {
                    self.host_done(core, fx);
                }
            }
            Event::GuestStep { vcpu } => self.finish_timed_step(vcpu as usize, fx),
            Event::PhysicalTimer { core } => self.physical_timer(core as usize, fx),
            Event::HostTimer { vcpu } => self.host_timer(vcpu as usize, fx),
            Event::SliceEnd { core } => {
                self.host_interrupt(core as usize, NmiMessage::SliceEnd, fx)
            }
            Event::HostTick { core } => self.host_tick(core as usize, fx),
            Event::Housekeeping { vcpu } => self.housekeeping_due(vcpu as usize, fx),
            Event::GuestIpi { vcpu } => {
                let vcpu = vcpu as usize;
                let vm = self.vcpus[vcpu].vm;
                self.raise(vm, GUEST_IPI_VECTOR);
                fx.push(Effect::SignalVirtual {
                    vcpu,
                    vector: GUEST_IPI_VECTOR,
                });
            }
            Event::PostedIpi { vcpu } => {
                let vcpu = vcpu as usize;
                self.raise(self.vcpus[vcpu].vm, GUEST_IPI_VECTOR);
                self.hardware_post(vcpu, GUEST_IPI_VECTOR, PostSource::Cpu, fx);
            }
            Event::HostNicTimeout { vm } => self.host_nic_timeout(vm as usize, fx),
            Event::Workload(event) => {
                self.with_workload(|workload, ctx| workload.on_event(event, ctx, fx))
            }
        }
    }

    fn in_guest(&self, vcpu: usize) -> bool {
        in_guest(&self.vcpus, &self.cores, vcpu)
    }

    fn raise(&mut self, vm: usize, vector: u8) {
        self.checker.raise(vm, vector);
        if let Some(trace) = &mut self.trace {
            let core = self.vcpus[self.vms[vm].vcpus[0]].home_core;
            trace.instant(core, self.now, "raise", vector);
        }
    }

    /// A structure holding one instance per vector merged a second request.
    fn merged(&mut self, vm: usize, vector: u8) {
        self.checker.merged(vm, vector);
    }

    /// Re-evaluates DID's timer invariant for `core` after its LAPIC timer,
    /// its timer owner or its current vCPU changed.
    fn recheck_timer_ownership(&mut self, core: usize) {
        if core == HOUSEKEEPING_CORE || !self.design.guest_timer.physical_timer_has_owner() {
            return;
        }
        let c = &mut self.cores[core];
        let misowned = c.lapic.timer_deadline_ns().is_some() && c.timer_owner != c.current;
        if misowned != c.timer_misowned {
            c.timer_misowned = misowned;
            self.checker.timer_misowned(misowned);
        }
    }

    /// Outstanding interrupts that no structure holds any more were lost.
    fn count_lost(&mut self) {
        for vm in 0..self.vms.len() {
            let outstanding: Vec<(u8, u32)> = self.checker.outstanding(vm).collect();
            for (vector, count) in outstanding {
                let held = self.vms[vm].vcpus.iter().any(|&vcpu| {
                    let v = &self.vcpus[vcpu];
                    let lapic = &self.cores[v.home_core].lapic;
                    let pair = &self.pairs[v.pair];
                    let host_form = match vector {
                        GUEST_VF_VECTOR => Some(pair.vf_host_vector),
                        GUEST_VF_TX_VECTOR => pair.tx_eq.map(|eq| eq.host_vector),
                        _ => None,
                    };
                    v.hw.vlapic.irr().contains(vector)
                        || v.hw.pid.pir.contains(vector)
                        || v.injection.holds(vector)
                        || lapic.irr().contains(vector)
                        || host_form.is_some_and(|host| lapic.irr().contains(host))
                        || !self.cores[v.home_core].nmi_mailbox.is_empty()
                });
                self.checker.settle(count, held);
            }
        }
    }

    fn set_mode(&mut self, core: usize, mode: Mode) {
        let now = self.now;
        let c = &mut self.cores[core];
        match c.mode {
            Mode::Guest => c.guest_ns += now - c.mode_since,
            Mode::Idle => c.asleep_ns += now.saturating_sub(c.mode_since.max(c.halt_poll_until)),
            Mode::Host => {}
        }
        if let Some(trace) = &mut self.trace {
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

    fn finish(&mut self) {
        for core in 0..self.cores.len() {
            self.set_mode(core, self.cores[core].mode);
        }
        let guest_cores: Vec<usize> = (0..self.cores.len())
            .filter(|&core| self.cores[core].hosts_vcpus)
            .collect();
        self.counters.guest_ns = guest_cores
            .iter()
            .map(|&core| self.cores[core].guest_ns)
            .sum();
        self.counters.asleep_ns = guest_cores
            .iter()
            .map(|&core| self.cores[core].asleep_ns)
            .sum();
        self.counters.guest_core_ns = guest_cores.len() as u64 * self.end;
        let mut fx = std::mem::take(&mut self.fx);
        for vcpu in 0..self.vcpus.len() {
            self.suspend(vcpu, &mut fx);
        }
        self.apply(&mut fx);
        self.fx = fx;
        self.counters.spin_ns = self.vcpus.iter().map(|v| v.spin_ns).sum();
        self.count_lost();
        self.count_unwoken_sleepers();
    }

    pub(crate) fn iommu_blocked(&self) -> u64 {
        self.iommu.blocked()
    }

    /// The workload's figures beyond the common ones.
    pub(crate) fn workload_figures(&self) -> WorkloadFigures {
        self.workload.figures(&self.counters)
    }

    /// The workload's throughput over the run, if it has one.
    pub(crate) fn throughput(&self) -> Option<Throughput> {
        let seconds = f64_of(self.end) / 1e9;
        self.workload.throughput(&self.counters, seconds)
    }

    /// Parameters the workload adds to the run's.
    pub(crate) fn workload_params(&self, params: &mut BTreeMap<String, serde_json::Value>) {
        self.workload.params(params);
    }

    pub(crate) fn dropped_packets(&self) -> u64 {
        self.pairs
            .iter()
            .map(|pair| pair.vf.dropped + pair.virtio.dropped)
            .sum()
    }
}

/// `vcpu` runs in guest mode on its core.
fn in_guest(vcpus: &[Vcpu], cores: &[Core], vcpu: usize) -> bool {
    let v = &vcpus[vcpu];
    v.state == VcpuState::Running
        && cores[v.home_core].current == Some(vcpu)
        && cores[v.home_core].mode == Mode::Guest
}

/// What the run's workload may read of the machine's live state.
struct Live<'a> {
    vcpus: &'a [Vcpu],
    cores: &'a [Core],
    pairs: &'a [QueuePair],
}

impl MachineState for Live<'_> {
    fn in_guest(&self, vcpu: usize) -> bool {
        in_guest(self.vcpus, self.cores, vcpu)
    }

    fn spinning(&self, vcpu: usize) -> bool {
        self.vcpus[vcpu].spin_since.is_some()
    }

    fn ring_level(&self, pair: usize, ring: Ring) -> u32 {
        self.pairs[pair].ring(ring).ring
    }
}
