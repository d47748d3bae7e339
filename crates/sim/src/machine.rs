//! The discrete-event engine: cores, vCPUs, devices, the hypervisor's
//! mechanisms and the guest model. A policy (`crate::policy`) decides; this
//! module carries the decisions out on the hardware models of `dirq_arch`
//! (every physical LAPIC and every vCPU's virtual LAPIC is a
//! `dirq_arch::lapic::Lapic`; VMCS, IOMMU and posted-interrupt descriptors
//! are the `dirq_arch` models too).

mod checker;
mod delivery;
mod devices;
mod guest;
mod host;
mod injection;
mod setup;
mod timers;

use dirq_arch::bus;
use dirq_arch::clock::Clock;
use dirq_arch::interrupt::{DeliveryMode, TriggerMode};
use dirq_arch::iommu::{InterruptRemappingTable, Remapped};
use dirq_arch::lapic::{
    x2apic_msr, AcceptOutcome, Lapic, LapicConfig, APIC_BASE_GLOBAL_ENABLE,
    APIC_BASE_X2APIC_ENABLE, APIC_LVT_TIMER, APIC_TIMER_DIVIDE_CONFIG, DEFAULT_MMIO_BASE,
    SVR_APIC_SOFTWARE_ENABLE,
};
use dirq_arch::msi::{MsiMessage, RemappableMsi};
use dirq_arch::posted::PostedInterruptDescriptor;
use dirq_arch::vectors::VectorSet;
use dirq_arch::vmcs::{MsrWriteAction, Vmcs, CPU_INTERRUPT_WINDOW_EXITING};

use crate::metrics::ExitReason;
use crate::policy::{
    msrs, Design, Injection, InjectionMode, TimerPath, VfRoute, VirtualSignal,
    NOT_PRESENT_EXCEPTION,
};
use crate::profile::CostProfile;
use crate::queue::{EventQueue, Keyed};
use crate::rng::Rng;
use crate::scenario::{IdleMode, IpiMode, RunSpec, Transport, WorkloadKind};
use crate::trace::Trace;
use crate::SimError;

pub(crate) use checker::Checker;
use devices::{BackendJob, RxQueue, RxQueueKind};
use guest::{Frame, TimerWrite, HALT_LOOP, IPI_SENDER, SPIN};

// Guest vectors (what the guest OS programmed), in Linux's layout.
pub(crate) const GUEST_VF_VECTOR: u8 = 0x41;
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

/// The housekeeping core: backends, DID's designated timer core.
const HOUSEKEEPING_CORE: usize = 0;
/// Descriptors per receive ring; packets beyond are dropped.
const RX_RING_SIZE: u32 = 1024;
/// 10 GbE line rate in 1500-byte frames (1538 bytes on the wire).
const LINE_RATE_MTU_PPS: u64 = 812_744;
const CYCLICTEST_PERIOD_NS: u64 = 1_000_000;
/// The LAPIC bus clock: 1 GHz so that one timer count is one ns.
const BUS_HZ: u64 = 1_000_000_000;
const TSC_HZ: u64 = 3_400_000_000;
/// TDCR value for divide-by-1 (SDM 10.5.4 figure 10-10).
const TDCR_DIVIDE_BY_1: u64 = 0b1011;

fn is_guest_vector(vector: u8) -> bool {
    matches!(
        vector,
        GUEST_VF_VECTOR | GUEST_VIRTIO_VECTOR | GUEST_TIMER_VECTOR | GUEST_IPI_VECTOR
    )
}

struct At(u64);
impl Clock for At {
    fn now_ns(&self) -> u64 {
        self.0
    }
}

#[derive(Clone, Copy, Debug)]
enum Event {
    PacketArrival {
        vm: u32,
        queue: RxQueueKind,
    },
    CoalesceTimeout {
        vm: u32,
    },
    BackendDone {
        vm: u32,
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
    BackgroundExit {
        vcpu: u32,
        reason: ExitReason,
    },
    RemoteRequest {
        vm: u32,
    },
    /// The hypervisor, done emulating an ICR write, sends the IPI.
    GuestIpi {
        vcpu: u32,
    },
}

/// How many kinds of event are cancellable (see [`Keyed for Event`]).
const CANCELLABLE_KINDS: usize = 6;

/// The cancellable events: one pending at most per (kind, core, vCPU or
/// VM); rescheduling one replaces it.
impl Keyed for Event {
    fn key(&self) -> Option<usize> {
        let (kind, id) = match *self {
            Event::CoalesceTimeout { vm } => (0, vm),
            Event::HostDone { core } => (1, core),
            Event::GuestStep { vcpu } => (2, vcpu),
            Event::PhysicalTimer { core } => (3, core),
            Event::HostTimer { vcpu } => (4, vcpu),
            Event::SliceEnd { core } => (5, core),
            _ => return None,
        };
        Some(id as usize * CANCELLABLE_KINDS + kind)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Guest,
    Host,
    Idle,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NmiMessage {
    AssignedInterrupt { vm: u32 },
    SliceEnd,
    Kick,
}

struct Core {
    lapic: Lapic,
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
    /// Host halt polling: a wake-up before this time needs no sleep/wake.
    halt_poll_until: u64,
    guest_ns: u64,
    /// Time asleep: idle and past any halt-polling window.
    asleep_ns: u64,
    hosts_vcpus: bool,
    /// The VMs whose VF host vectors this core allocated, in vector order
    /// from `HOST_VF_VECTOR_BASE`.
    vf_vectors: Vec<usize>,
}

impl AsRef<Lapic> for Core {
    fn as_ref(&self) -> &Lapic {
        &self.lapic
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum VcpuState {
    Running,
    Runnable,
    Halted,
}

struct Vcpu {
    vm: usize,
    index_in_vm: usize,
    home_core: usize,
    vlapic: Lapic,
    vmcs: Vmcs,
    pid: PostedInterruptDescriptor,
    /// DID's queue of virtual interrupts awaiting self-IPI injection.
    virtual_pending: VectorSet,
    frames: Vec<Frame>,
    interruptible: bool,
    state: VcpuState,
    step_started: u64,
    /// A timed step (or the spin loop) is executing; `run_guest` must not
    /// start it again.
    step_running: bool,
    spin_since: Option<u64>,
    spin_ns: u64,
    /// DID: the guest's timer while the vCPU is descheduled, kept on the
    /// designated core.
    parked_timer: Option<u64>,
    /// The expiry the guest asked for (cyclictest's target time).
    timer_target: Option<u64>,
    ipi_sent_at: Option<u64>,
    halt_requested: bool,
    /// A vector acknowledged from the software LAPIC, injected at entry.
    injecting: Option<u8>,
}

struct Vm {
    vcpus: Vec<usize>,
    /// The host vector of the VF's MSI on its vCPU 0's home core.
    vf_host_vector: u8,
    vf: RxQueue,
    virtio: RxQueue,
    request_sent_at: Option<u64>,
    backend_busy_until: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub exits: [u64; ExitReason::ALL.len()],
    pub packets_processed: u64,
    pub requests_done: u64,
    pub latencies: Vec<u64>,
    pub guest_ns: u64,
    pub asleep_ns: u64,
    pub guest_core_ns: u64,
    pub spin_ns: u64,
    pub events: u64,
}

pub(crate) struct Machine {
    now: u64,
    end: u64,
    queue: EventQueue<Event>,
    rng: Rng,
    profile: CostProfile,
    design: &'static Design,
    spec: RunSpec,
    cores: Vec<Core>,
    vcpus: Vec<Vcpu>,
    vms: Vec<Vm>,
    iommu: InterruptRemappingTable,
    pub(crate) counters: Counters,
    pub(crate) checker: Checker,
    pub(crate) trace: Option<Trace>,
}

impl Machine {
    /// The VM whose VF a host vector on `core` belongs to.
    fn host_vf_vm(&self, core: usize, vector: u8) -> Option<usize> {
        let index = vector.checked_sub(HOST_VF_VECTOR_BASE)?;
        self.cores[core].vf_vectors.get(usize::from(index)).copied()
    }

    /// Schedules `event` `delay` ns from now (replacing a pending
    /// cancellable one).
    fn schedule_in_ns(&mut self, delay: u64, event: Event) {
        self.queue.schedule(self.now + delay, event);
    }

    /// Withdraws the pending event `event` names the key of.
    fn cancel(&mut self, event: Event) {
        if let Some(key) = event.key() {
            self.queue.cancel(key);
        }
    }

    /// Schedules the keyed `event` at `at`, or cancels it when `at` is None.
    fn reschedule(&mut self, at: Option<u64>, event: Event) {
        match at {
            Some(at) => self.queue.schedule(at, event),
            None => self.cancel(event),
        }
    }

    fn arm_slice(&mut self, core: usize, delay: u64) {
        self.schedule_in_ns(delay, Event::SliceEnd { core: core as u32 });
    }

    pub(crate) fn run(&mut self) {
        while let Some((time, event)) = self.queue.pop() {
            if time > self.end {
                break;
            }
            self.now = time;
            self.counters.events += 1;
            self.dispatch(event);
            self.checker.event_done();
        }
        self.now = self.end;
        self.finish();
    }

    fn dispatch(&mut self, event: Event) {
        match event {
            Event::PacketArrival { vm, queue } => self.packet_arrival(vm as usize, queue),
            Event::CoalesceTimeout { vm } => self.maybe_fire_vf(vm as usize, true),
            Event::BackendDone { vm, job } => self.backend_done(vm as usize, job),
            Event::HostDone { core } => {
                let core = core as usize;
                if self.cores[core].mode == Mode::Host {
                    self.host_done(core);
                }
            }
            Event::GuestStep { vcpu } => self.finish_timed_step(vcpu as usize),
            Event::PhysicalTimer { core } => self.physical_timer(core as usize),
            Event::HostTimer { vcpu } => self.host_timer(vcpu as usize),
            Event::SliceEnd { core } => self.host_interrupt(core as usize, NmiMessage::SliceEnd),
            Event::BackgroundExit { vcpu, reason } => {
                let vcpu = vcpu as usize;
                if self.in_guest(vcpu) {
                    self.exit(vcpu, reason, self.profile.exit_cost(reason));
                }
                self.schedule_background_exit(vcpu, reason);
            }
            Event::GuestIpi { vcpu } => {
                let vcpu = vcpu as usize;
                let vm = self.vcpus[vcpu].vm;
                self.raise(vm, GUEST_IPI_VECTOR);
                self.signal_virtual(vcpu, GUEST_IPI_VECTOR);
            }
            Event::RemoteRequest { vm } => {
                let vm = vm as usize;
                // The remote answers each response at once: the time since
                // its previous request is one full round trip.
                if let Some(sent) = self.vms[vm].request_sent_at.replace(self.now) {
                    self.counters.latencies.push((self.now - sent) / 2);
                    self.counters.requests_done += 1;
                }
                match self.spec.group.transport {
                    Transport::Pv => self.backend_start(vm, BackendJob::RxPacket),
                    _ => self.rx_packet(vm, RxQueueKind::Vf),
                }
            }
        }
    }

    fn in_guest(&self, vcpu: usize) -> bool {
        let v = &self.vcpus[vcpu];
        v.state == VcpuState::Running
            && self.cores[v.home_core].current == Some(vcpu)
            && self.cores[v.home_core].mode == Mode::Guest
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
        if core == HOUSEKEEPING_CORE || self.design.timer_path != TimerPath::PassThrough {
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
                    let host_form = self.vms[vm].vf_host_vector;
                    v.vlapic.irr().contains(vector)
                        || v.pid.pir.contains(vector)
                        || v.virtual_pending.contains(vector)
                        || v.injecting == Some(vector)
                        || lapic.irr().contains(vector)
                        || (vector == GUEST_VF_VECTOR && lapic.irr().contains(host_form))
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
        for vcpu in 0..self.vcpus.len() {
            self.suspend(vcpu);
        }
        self.counters.spin_ns = self.vcpus.iter().map(|v| v.spin_ns).sum();
        self.count_lost();
    }

    pub(crate) fn iommu_blocked(&self) -> u64 {
        self.iommu.blocked()
    }

    pub(crate) fn dropped_packets(&self) -> u64 {
        self.vms
            .iter()
            .map(|vm| vm.vf.dropped + vm.virtio.dropped)
            .sum()
    }
}
