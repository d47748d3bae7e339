//! The discrete-event engine: cores, vCPUs, devices, the hypervisor's
//! mechanisms and the guest model. A policy (`crate::policy`) decides; this
//! module carries the decisions out on the hardware models of `dirq_arch`
//! (every physical LAPIC and every vCPU's virtual LAPIC is a
//! `dirq_arch::lapic::Lapic`; VMCS, IOMMU and posted-interrupt descriptors
//! are the `dirq_arch` models too).

use dirq_arch::clock::Clock;
use dirq_arch::iommu::{InterruptRemappingTable, Remapped};
use dirq_arch::lapic::{
    x2apic_msr, AcceptOutcome, DeliveryMode, Lapic, LapicConfig, TriggerMode,
    APIC_BASE_GLOBAL_ENABLE, APIC_BASE_X2APIC_ENABLE, APIC_LVT_TIMER, APIC_TIMER_DIVIDE_CONFIG,
    DEFAULT_MMIO_BASE, SVR_APIC_SOFTWARE_ENABLE,
};
use dirq_arch::msi::{MsiMessage, RemappableMsi};
use dirq_arch::posted::PostedInterruptDescriptor;
use dirq_arch::vectors::VectorSet;
use dirq_arch::vmcs::{MsrWriteAction, Vmcs, CPU_INTERRUPT_WINDOW_EXITING};

use crate::metrics::{ExitReason, Invariant};
use crate::policy::{
    msrs, Injection, Policy, TimerPath, VfRoute, VirtualSignal, NOT_PRESENT_EXCEPTION,
};
use crate::profile::CostProfile;
use crate::queue::EventQueue;
use crate::rng::Rng;
use crate::scenario::{IdleMode, IpiMode, RunSpec, Transport, WorkloadKind};
use crate::trace::Trace;
use crate::SimError;

// Guest vectors (what the guest OS programmed), in Linux's layout.
pub(crate) const GUEST_VF_VECTOR: u8 = 0x41;
pub(crate) const GUEST_VIRTIO_VECTOR: u8 = 0x51;
pub(crate) const GUEST_TIMER_VECTOR: u8 = 0xEC;
pub(crate) const GUEST_IPI_VECTOR: u8 = 0xFB;
// Host vectors.
/// KVM gives each VM's VF its own host vector: 0x60 + VM index.
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

/// The VM whose VF a host vector belongs to.
fn host_vf_vm(vector: u8) -> Option<usize> {
    let index = vector.checked_sub(HOST_VF_VECTOR_BASE)?;
    (u32::from(index) < crate::scenario::MAX_VMS).then_some(index as usize)
}

fn class(vector: u8) -> u8 {
    vector >> 4
}

struct At(u64);
impl Clock for At {
    fn now_ns(&self) -> u64 {
        self.0
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RxQueueKind {
    Vf,
    Virtio,
}

#[derive(Clone, Copy, Debug)]
enum Event {
    PacketArrival {
        vm: u16,
        queue: RxQueueKind,
    },
    CoalesceTimeout {
        vm: u16,
        gen: u32,
    },
    BackendDone {
        vm: u16,
        job: BackendJob,
    },
    HostDone {
        core: u16,
        gen: u32,
    },
    GuestStep {
        vcpu: u16,
        gen: u32,
    },
    PhysicalTimer {
        core: u16,
        gen: u32,
    },
    HostTimer {
        vcpu: u16,
        gen: u32,
    },
    SliceEnd {
        core: u16,
        gen: u32,
    },
    BackgroundExit {
        vcpu: u16,
        reason: ExitReason,
    },
    RemoteRequest {
        vm: u16,
    },
    /// The hypervisor, done emulating an ICR write, sends the IPI.
    GuestIpi {
        vcpu: u16,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BackendJob {
    RxPacket,
    TxPacket,
    BlockRead,
}

/// Guest work whose length comes from the profile.
#[derive(Clone, Copy, Debug)]
enum Work {
    IrqEntry,
    TimerToUserRest,
    Request,
    IpiGap,
}

#[derive(Clone, Copy, Debug)]
enum TimerWrite {
    NextTick,
    ArmGuard,
    Cancel,
}

/// One instruction of the guest model.
#[derive(Clone, Copy, Debug)]
enum Step {
    Work(Work),
    /// Background loop that never ends (idle=poll, whileloop).
    Spin,
    MaskRx,
    UnmaskRx,
    Eoi,
    Sti,
    /// NAPI poll: one packet at a time until the ring is empty.
    PollRx,
    WriteTimer(TimerWrite),
    RecordTimerLatency,
    RecordRequestLatency,
    RecordIpiLatency,
    SubmitBlock,
    SendIpi,
    Halt,
    Iret,
}

const RX_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::MaskRx,
    Step::Eoi,
    Step::Sti,
    Step::PollRx,
    Step::UnmaskRx,
    Step::Iret,
];
const TIMER_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::WriteTimer(TimerWrite::NextTick),
    Step::Eoi,
    Step::Work(Work::TimerToUserRest),
    Step::RecordTimerLatency,
    Step::Iret,
];
/// fio completion: 3 MSR writes per request (EOI, TMICT cancel, TMICT arm).
const BLOCK_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::WriteTimer(TimerWrite::Cancel),
    Step::Eoi,
    Step::Sti,
    Step::Work(Work::Request),
    Step::RecordRequestLatency,
    Step::WriteTimer(TimerWrite::ArmGuard),
    Step::SubmitBlock,
    Step::Iret,
];
const IPI_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::Eoi,
    Step::RecordIpiLatency,
    Step::Iret,
];
/// A guard-timer expiry (fio) or a stray tick: acknowledge and return.
const PLAIN_HANDLER: &[Step] = &[Step::Work(Work::IrqEntry), Step::Eoi, Step::Iret];
const SPIN: &[Step] = &[Step::Spin];
const HALT_LOOP: &[Step] = &[Step::Halt];
const IPI_SENDER: &[Step] = &[Step::Work(Work::IpiGap), Step::SendIpi];

#[derive(Clone, Copy, Debug)]
struct Frame {
    program: &'static [Step],
    pc: usize,
    /// Remaining ns of the current timed step, when it has started.
    remaining: Option<u64>,
    /// The vector this handler serves (None: the background task).
    vector: Option<u8>,
    eoi_done: bool,
    saved_interruptible: bool,
}

impl Frame {
    fn background(program: &'static [Step]) -> Frame {
        Frame {
            program,
            pc: 0,
            remaining: None,
            vector: None,
            eoi_done: true,
            saved_interruptible: true,
        }
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
    AssignedInterrupt { vm: u16 },
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
    host_gen: u32,
    timer_gen: u32,
    slice_gen: u32,
    /// The vCPU whose timer the physical LAPIC timer holds (pass-through).
    timer_owner: Option<usize>,
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
    step_gen: u32,
    step_started: u64,
    /// A timed step (or the spin loop) is executing; `run_guest` must not
    /// start it again.
    step_running: bool,
    spin_since: Option<u64>,
    spin_ns: u64,
    host_timer_gen: u32,
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

#[derive(Default)]
struct RxQueue {
    ring: u32,
    since_interrupt: u32,
    first_unsignalled: Option<u64>,
    masked: bool,
    signalled: bool,
    timeout_gen: u32,
    timeout_armed: bool,
    dropped: u64,
}

struct Vm {
    vcpus: Vec<usize>,
    vf: RxQueue,
    virtio: RxQueue,
    /// Raised and not yet handled, per vector (the checker's ledger).
    outstanding: [u32; 256],
    request_sent_at: Option<u64>,
    backend_busy_until: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub exits: [u64; 10],
    pub violations: [u64; 7],
    pub raised: u64,
    pub handled: u64,
    pub coalesced: u64,
    pub pending_at_end: u64,
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
    policy: Box<dyn Policy>,
    injection: Injection,
    signal: VirtualSignal,
    timer_path: TimerPath,
    host_interrupt_mode: DeliveryMode,
    virtualized: bool,
    spec: RunSpec,
    cores: Vec<Core>,
    vcpus: Vec<Vcpu>,
    vms: Vec<Vm>,
    iommu: InterruptRemappingTable,
    pub(crate) counters: Counters,
    pub(crate) trace: Option<Trace>,
}

fn enabled_lapic(apic_id: u32) -> Result<Lapic, SimError> {
    let config = LapicConfig::new(BUS_HZ, TSC_HZ).map_err(SimError::Model)?;
    let mut lapic = Lapic::new(apic_id, config);
    lapic
        .set_apic_base(DEFAULT_MMIO_BASE | APIC_BASE_GLOBAL_ENABLE | APIC_BASE_X2APIC_ENABLE)
        .map_err(SimError::Model)?;
    // Software-enabled, spurious vector 0xFF (SDM 10.9).
    lapic.set_svr(SVR_APIC_SOFTWARE_ENABLE | 0xFF);
    let clock = At(0);
    lapic
        .write_msr(
            x2apic_msr(APIC_LVT_TIMER),
            u64::from(GUEST_TIMER_VECTOR),
            &clock,
        )
        .map_err(SimError::Model)?;
    lapic
        .write_msr(
            x2apic_msr(APIC_TIMER_DIVIDE_CONFIG),
            TDCR_DIVIDE_BY_1,
            &clock,
        )
        .map_err(SimError::Model)?;
    Ok(lapic)
}

impl Machine {
    pub(crate) fn new(
        spec: &RunSpec,
        profile: &CostProfile,
        seed: u64,
        trace: bool,
    ) -> Result<Machine, SimError> {
        let policy = spec.policy.build();
        let host = spec.group.host;
        let core_count = host.cores as usize;
        let mut cores = Vec::with_capacity(core_count);
        for id in 0..core_count {
            cores.push(Core {
                lapic: enabled_lapic(id as u32)?,
                mode: Mode::Idle,
                mode_since: 0,
                current: None,
                runqueue: Vec::new(),
                host_gen: 0,
                timer_gen: 0,
                slice_gen: 0,
                timer_owner: None,
                nmi_mailbox: Vec::new(),
                free_host_irqs: 0,
                slice_due: false,
                halt_poll_until: 0,
                guest_ns: 0,
                asleep_ns: 0,
                hosts_vcpus: false,
            });
        }
        let guest_cores = core_count - 1;
        let mut vcpus = Vec::new();
        let mut vms = Vec::new();
        let background = match (spec.workload, spec.group.idle) {
            (_, IdleMode::Poll) => SPIN,
            (WorkloadKind::Whileloop, _) => SPIN,
            _ => HALT_LOOP,
        };
        for vm in 0..host.vms as usize {
            let mut ids = Vec::new();
            for index in 0..host.vcpus_per_vm as usize {
                let id = vcpus.len();
                let home_core = 1 + id % guest_cores;
                let program = if spec.workload == WorkloadKind::Ipi && index == 0 {
                    IPI_SENDER
                } else {
                    background
                };
                vcpus.push(Vcpu {
                    vm,
                    index_in_vm: index,
                    home_core,
                    vlapic: enabled_lapic(index as u32)?,
                    vmcs: policy.initial_vmcs(),
                    pid: PostedInterruptDescriptor::new(
                        POSTED_NOTIFICATION_VECTOR,
                        home_core as u32,
                    ),
                    virtual_pending: VectorSet::EMPTY,
                    frames: vec![Frame::background(program)],
                    interruptible: true,
                    state: VcpuState::Runnable,
                    step_gen: 0,
                    step_started: 0,
                    step_running: false,
                    spin_since: None,
                    spin_ns: 0,
                    host_timer_gen: 0,
                    parked_timer: None,
                    timer_target: None,
                    ipi_sent_at: None,
                    halt_requested: false,
                    injecting: None,
                });
                cores[home_core].runqueue.push(id);
                cores[home_core].hosts_vcpus = true;
                ids.push(id);
            }
            vms.push(Vm {
                vcpus: ids,
                vf: RxQueue::default(),
                virtio: RxQueue::default(),
                outstanding: [0; 256],
                request_sent_at: None,
                backend_busy_until: 0,
            });
        }
        let mut machine = Machine {
            now: 0,
            end: spec.duration_ns,
            queue: EventQueue::new(),
            rng: Rng::new(seed),
            injection: policy.injection(),
            signal: policy.virtual_signal(),
            timer_path: policy.timer_path(),
            host_interrupt_mode: policy.host_interrupt_mode(),
            virtualized: policy.virtualized(),
            policy,
            profile: profile.clone(),
            spec: spec.clone(),
            cores,
            vcpus,
            vms,
            iommu: InterruptRemappingTable::new(host.vms),
            counters: Counters::default(),
            trace: trace.then(Trace::default),
        };
        machine.start();
        Ok(machine)
    }

    // --- setup ---------------------------------------------------------------

    fn start(&mut self) {
        // Every VF's IRTE is valid from the start: routed as for a VM that
        // is not running until its vCPU is first scheduled in.
        for vcpu in 0..self.vcpus.len() {
            self.retarget_vf(vcpu);
        }
        for core in 1..self.cores.len() {
            if let Some(&first) = self.cores[core].runqueue.first() {
                self.cores[core].current = Some(first);
                self.vcpus[first].state = VcpuState::Running;
                self.schedule_in(first);
                self.enter_guest(core);
                if self.cores[core].runqueue.len() > 1 {
                    self.arm_slice(core);
                }
            }
        }
        for vm in 0..self.vms.len() {
            self.start_workload(vm);
        }
        if self.virtualized {
            for vcpu in 0..self.vcpus.len() {
                self.schedule_background_exit(vcpu, ExitReason::IoInsr);
                self.schedule_background_exit(vcpu, ExitReason::EptViolation);
            }
        }
    }

    fn start_workload(&mut self, vm: usize) {
        let vcpu = self.vms[vm].vcpus[0];
        let group = self.spec.group.clone();
        let rx = matches!(
            self.spec.workload,
            WorkloadKind::UdpRx | WorkloadKind::Whileloop | WorkloadKind::Iperf
        );
        if rx {
            let transport = if self.spec.workload == WorkloadKind::Whileloop {
                Transport::Sriov
            } else {
                group.transport
            };
            if matches!(transport, Transport::Sriov | Transport::Both) {
                self.schedule_packet(vm, RxQueueKind::Vf);
            }
            if matches!(transport, Transport::Pv | Transport::Both) {
                self.schedule_packet(vm, RxQueueKind::Virtio);
            }
        }
        match self.spec.workload {
            WorkloadKind::Cyclictest => self.arm_first_tick(vcpu),
            WorkloadKind::NetperfRr => self.queue.push(0, Event::RemoteRequest { vm: vm as u16 }),
            WorkloadKind::Fio => self.submit_block(vm),
            _ => {}
        }
        if group.with_timer && self.spec.workload != WorkloadKind::Cyclictest {
            self.arm_first_tick(vcpu);
        }
    }

    fn arm_first_tick(&mut self, vcpu: usize) {
        // Stagger VMs so that their ticks do not all coincide.
        let offset = self.rng.next_u64() % CYCLICTEST_PERIOD_NS;
        let target = CYCLICTEST_PERIOD_NS + offset;
        self.vcpus[vcpu].timer_target = Some(target);
        self.program_guest_timer(vcpu, target);
    }

    fn packet_rate(&self, queue: RxQueueKind) -> f64 {
        match self.spec.workload {
            WorkloadKind::Iperf => LINE_RATE_MTU_PPS as f64,
            _ => match (queue, self.spec.rate_pps) {
                (_, Some(rate)) => rate as f64,
                (_, None) => 0.0,
            },
        }
    }

    fn schedule_packet(&mut self, vm: usize, queue: RxQueueKind) {
        let rate = self.packet_rate(queue);
        if rate <= 0.0 {
            return;
        }
        let gap = self.rng.exponential_ns(1e9 / rate);
        self.queue.push(
            self.now + gap,
            Event::PacketArrival {
                vm: vm as u16,
                queue,
            },
        );
    }

    fn schedule_background_exit(&mut self, vcpu: usize, reason: ExitReason) {
        let rate = match reason {
            ExitReason::IoInsr => self.profile.idle_exits_per_s.io_instruction,
            _ => self.profile.idle_exits_per_s.ept_violation,
        };
        if rate <= 0.0 {
            return;
        }
        let gap = self.rng.exponential_ns(1e9 / rate);
        self.queue.push(
            self.now + gap,
            Event::BackgroundExit {
                vcpu: vcpu as u16,
                reason,
            },
        );
    }

    fn arm_slice(&mut self, core: usize) {
        self.cores[core].slice_gen += 1;
        let gen = self.cores[core].slice_gen;
        self.queue.push(
            self.now + self.profile.host_ns.sched_quantum,
            Event::SliceEnd {
                core: core as u16,
                gen,
            },
        );
    }

    // --- the event loop ------------------------------------------------------

    pub(crate) fn run(&mut self) {
        while let Some((time, event)) = self.queue.pop() {
            if time > self.end {
                break;
            }
            self.now = time;
            self.counters.events += 1;
            self.dispatch(event);
            if self.timer_path == TimerPath::PassThrough && self.virtualized {
                for core in 1..self.cores.len() {
                    self.check_timer_ownership(core);
                }
            }
        }
        self.now = self.end;
        self.finish();
    }

    fn dispatch(&mut self, event: Event) {
        match event {
            Event::PacketArrival { vm, queue } => self.packet_arrival(vm as usize, queue),
            Event::CoalesceTimeout { vm, gen } => {
                let vm = vm as usize;
                if self.vms[vm].vf.timeout_gen == gen {
                    self.vms[vm].vf.timeout_armed = false;
                    self.maybe_fire_vf(vm, true);
                }
            }
            Event::BackendDone { vm, job } => self.backend_done(vm as usize, job),
            Event::HostDone { core, gen } => {
                let core = core as usize;
                if self.cores[core].host_gen == gen && self.cores[core].mode == Mode::Host {
                    self.host_done(core);
                }
            }
            Event::GuestStep { vcpu, gen } => {
                let vcpu = vcpu as usize;
                if self.vcpus[vcpu].step_gen == gen {
                    self.finish_timed_step(vcpu);
                }
            }
            Event::PhysicalTimer { core, gen } => {
                let core = core as usize;
                if self.cores[core].timer_gen == gen {
                    self.physical_timer(core);
                }
            }
            Event::HostTimer { vcpu, gen } => {
                let vcpu = vcpu as usize;
                if self.vcpus[vcpu].host_timer_gen == gen {
                    self.host_timer(vcpu);
                }
            }
            Event::SliceEnd { core, gen } => {
                let core = core as usize;
                if self.cores[core].slice_gen == gen {
                    self.host_interrupt(core, NmiMessage::SliceEnd);
                }
            }
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

    // --- invariants ----------------------------------------------------------

    fn violation(&mut self, invariant: Invariant) {
        self.counters.violations[invariant as usize] += 1;
    }

    fn raise(&mut self, vm: usize, vector: u8) {
        self.counters.raised += 1;
        self.vms[vm].outstanding[vector as usize] += 1;
        if let Some(trace) = &mut self.trace {
            let core = self.vcpus[self.vms[vm].vcpus[0]].home_core;
            trace.instant(core, self.now, "raise", vector);
        }
    }

    /// A structure holding one instance per vector merged a second request.
    fn merged(&mut self, vm: usize, vector: u8) {
        let slot = &mut self.vms[vm].outstanding[vector as usize];
        if *slot > 0 {
            *slot -= 1;
            self.counters.coalesced += 1;
        }
    }

    /// The checker's view of a handler starting in the guest.
    fn check_delivery(&mut self, vcpu: usize, vector: u8) {
        let vm = self.vcpus[vcpu].vm;
        if !is_guest_vector(vector) {
            self.violation(Invariant::MisDelivery);
            return;
        }
        if self.vms[vm].outstanding[vector as usize] > 0 {
            self.vms[vm].outstanding[vector as usize] -= 1;
            self.counters.handled += 1;
        } else if self
            .vms
            .iter()
            .any(|other| other.outstanding[vector as usize] > 0)
        {
            self.violation(Invariant::MisDelivery);
        } else {
            self.violation(Invariant::Doubled);
        }
        let in_service = self.vcpus[vcpu]
            .frames
            .iter()
            .filter(|frame| !frame.eoi_done)
            .filter_map(|frame| frame.vector)
            .max();
        if in_service.is_some_and(|current| class(current) >= class(vector)) {
            self.violation(Invariant::PriorityInversion);
        }
    }

    /// DID's timer invariant: outside the designated core, a LAPIC timer
    /// only ever holds the timer of the vCPU scheduled on that core.
    fn check_timer_ownership(&mut self, core: usize) {
        if core == HOUSEKEEPING_CORE || self.timer_path != TimerPath::PassThrough {
            return;
        }
        let c = &self.cores[core];
        if c.lapic.timer_deadline_ns().is_some() && c.timer_owner != c.current {
            self.violation(Invariant::TimerOwnership);
        }
    }

    // --- mode transitions ----------------------------------------------------

    fn enter_guest(&mut self, core: usize) {
        let Some(vcpu) = self.cores[core].current else {
            self.set_mode(core, Mode::Idle);
            return;
        };
        self.set_mode(core, Mode::Guest);
        self.cores[core].free_host_irqs = 0;
        if let Some(vector) = self.vcpus[vcpu].injecting.take() {
            self.deliver_to_guest(vcpu, vector);
        }
        self.try_deliver(vcpu);
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

    /// A VM exit on the vCPU's core; the host is busy for `service_ns`.
    fn exit(&mut self, vcpu: usize, reason: ExitReason, service_ns: u64) {
        let core = self.vcpus[vcpu].home_core;
        self.suspend(vcpu);
        self.counters.exits[reason.index()] += 1;
        if let Some(trace) = &mut self.trace {
            trace.instant(core, self.now, reason.name(), 0);
        }
        self.set_mode(core, Mode::Host);
        if matches!(
            reason,
            ExitReason::ExtInt | ExitReason::Nmi | ExitReason::Exception
        ) {
            self.cores[core].free_host_irqs = 1;
        }
        self.host_busy(core, service_ns);
    }

    fn host_busy(&mut self, core: usize, ns: u64) {
        let c = &mut self.cores[core];
        c.host_gen += 1;
        let gen = c.host_gen;
        self.queue.push(
            self.now + ns,
            Event::HostDone {
                core: core as u16,
                gen,
            },
        );
    }

    /// The host finished the work of an exit: take pending interrupts,
    /// reschedule if due, inject, and re-enter.
    fn host_done(&mut self, core: usize) {
        let mut extra = 0;
        while let Some(vector) = self.cores[core].lapic.acknowledge() {
            self.cores[core].lapic.eoi();
            extra += self.host_irq_cost(core);
            self.host_handle_vector(core, vector);
        }
        let mailbox = std::mem::take(&mut self.cores[core].nmi_mailbox);
        for message in mailbox {
            extra += self.host_irq_cost(core);
            self.host_handle_nmi(core, message);
        }
        if let Some(vcpu) = self.cores[core].current {
            if std::mem::take(&mut self.vcpus[vcpu].halt_requested) {
                self.halt(vcpu);
            }
        }
        if std::mem::take(&mut self.cores[core].slice_due) {
            extra += self.end_slice(core);
        }
        if extra > 0 {
            self.host_busy(core, extra);
            return;
        }
        match self.cores[core].current {
            Some(vcpu) if self.vcpus[vcpu].state == VcpuState::Running => {
                self.prepare_entry(vcpu);
                self.enter_guest(core);
            }
            _ => self.set_mode(core, Mode::Idle),
        }
    }

    fn host_irq_cost(&mut self, core: usize) -> u64 {
        let c = &mut self.cores[core];
        if c.free_host_irqs > 0 {
            c.free_host_irqs -= 1;
            0
        } else {
            self.profile.host_ns.irq_in_host_mode
        }
    }

    fn host_handle_vector(&mut self, core: usize, vector: u8) {
        if let Some(trace) = &mut self.trace {
            trace.instant(core, self.now, "host-irq", vector);
        }
        if let Some(vm) = host_vf_vm(vector) {
            // KVM's handler for the assigned device: inject the guest vector.
            if let Some(&vcpu) = self.vms.get(vm).and_then(|vm| vm.vcpus.first()) {
                self.queue_virtual(vcpu, GUEST_VF_VECTOR);
            }
            return;
        }
        match vector {
            HOST_TIMER_VECTOR => self.expire_software_timers(core),
            v if is_guest_vector(v) => {
                // DID's race: an interrupt for the VM scheduled here arrived
                // while the core was in host mode; make it virtual.
                if let Some(vcpu) = self.cores[core].current {
                    self.queue_virtual(vcpu, v);
                }
            }
            _ => {}
        }
    }

    fn host_handle_nmi(&mut self, core: usize, message: NmiMessage) {
        match message {
            NmiMessage::AssignedInterrupt { vm } => {
                let vcpu = self.vms[vm as usize].vcpus[0];
                self.queue_virtual(vcpu, GUEST_VF_VECTOR);
            }
            NmiMessage::SliceEnd => self.cores[core].slice_due = true,
            NmiMessage::Kick => {}
        }
    }

    /// KVM's hrtimer callback for the emulated LAPIC timers of the vCPUs
    /// homed on this core.
    fn expire_software_timers(&mut self, core: usize) {
        let clock = At(self.now);
        let homed = self.cores[core].runqueue.clone();
        for vcpu in homed {
            let due = self.vcpus[vcpu]
                .vlapic
                .timer_deadline_ns()
                .is_some_and(|deadline| deadline <= self.now);
            if !due {
                continue;
            }
            let vm = self.vcpus[vcpu].vm;
            let already = self.vcpus[vcpu].vlapic.irr().contains(GUEST_TIMER_VECTOR);
            if self.vcpus[vcpu].vlapic.expire_timer(&clock) {
                self.raise(vm, GUEST_TIMER_VECTOR);
                if already {
                    self.merged(vm, GUEST_TIMER_VECTOR);
                }
                // With APICv the software LAPIC is the virtual-APIC page, so
                // every injection path finds the vector there.
                self.wake(vcpu);
            }
        }
    }

    /// Virtual interrupts enter at VM entry.
    fn prepare_entry(&mut self, vcpu: usize) {
        let core = self.vcpus[vcpu].home_core;
        let vm = self.vcpus[vcpu].vm;
        match self.injection {
            Injection::Posted => {
                let requests = self.vcpus[vcpu].pid.take_requests();
                for vector in requests.iter() {
                    if self.vcpus[vcpu].vlapic.accept(vector, TriggerMode::Edge)
                        == AcceptOutcome::Coalesced
                    {
                        self.merged(vm, vector);
                    }
                }
            }
            Injection::SelfIpi => {
                let pending = self.vcpus[vcpu].virtual_pending.take();
                for vector in pending.iter() {
                    // A self-IPI with the guest vector, sent with host
                    // interrupts disabled just before entry.
                    if self.cores[core].lapic.accept(vector, TriggerMode::Edge)
                        == AcceptOutcome::Coalesced
                    {
                        self.merged(vm, vector);
                    }
                }
            }
            Injection::Classic | Injection::ClassicUntracked => {
                let Some(vector) = self.vcpus[vcpu].vlapic.pending_vector() else {
                    return;
                };
                let v = &mut self.vcpus[vcpu];
                if !self
                    .policy
                    .prepare_injection(&mut v.vmcs, self.cores[core].lapic.isr(), vector)
                {
                    return;
                }
                if v.interruptible {
                    v.injecting = v.vlapic.acknowledge();
                    if self.injection == Injection::ClassicUntracked {
                        v.vlapic.eoi();
                    }
                } else {
                    v.vmcs.set_primary(CPU_INTERRUPT_WINDOW_EXITING, true);
                }
            }
        }
    }

    // --- physical interrupt delivery ----------------------------------------

    /// A fixed interrupt arrives at a core's LAPIC (NMIs go through
    /// [`Self::send_nmi`]).
    fn deliver_physical(&mut self, core: usize, vector: u8) {
        if self.cores[core].lapic.accept(vector, TriggerMode::Edge) == AcceptOutcome::Coalesced {
            if let Some((vm, guest_vector)) = self.physical_owner(core, vector) {
                self.merged(vm, guest_vector);
            }
        }
        self.physical_pending(core);
    }

    /// The VM and guest vector a physical vector on `core` stands for.
    fn physical_owner(&self, core: usize, vector: u8) -> Option<(usize, u8)> {
        if let Some(vm) = host_vf_vm(vector) {
            return Some((vm, GUEST_VF_VECTOR));
        }
        if is_guest_vector(vector) {
            return self.cores[core]
                .current
                .map(|vcpu| (self.vcpus[vcpu].vm, vector));
        }
        None
    }

    /// Something is pending in the core's IRR.
    fn physical_pending(&mut self, core: usize) {
        match self.cores[core].mode {
            Mode::Guest => {
                let Some(vcpu) = self.cores[core].current else {
                    return;
                };
                if self.process_posted_notification(vcpu) {
                    return;
                }
                if self.vcpus[vcpu].vmcs.external_interrupt_exits() && self.virtualized {
                    self.exit(
                        vcpu,
                        ExitReason::ExtInt,
                        self.profile.exit_cost(ExitReason::ExtInt),
                    );
                } else {
                    self.try_deliver(vcpu);
                }
            }
            Mode::Host => {}
            Mode::Idle => self.wake_core(core),
        }
    }

    /// SDM 29.6: the notification vector arriving in guest mode is
    /// acknowledged, EOIed and PIR merged into the virtual IRR, no exit.
    fn process_posted_notification(&mut self, vcpu: usize) -> bool {
        let core = self.vcpus[vcpu].home_core;
        if !self.vcpus[vcpu].vmcs.processes_posted_interrupts()
            || self.cores[core].lapic.pending_vector() != Some(POSTED_NOTIFICATION_VECTOR)
        {
            return false;
        }
        self.cores[core].lapic.acknowledge();
        self.cores[core].lapic.eoi();
        let vm = self.vcpus[vcpu].vm;
        let requests = self.vcpus[vcpu].pid.take_requests();
        for vector in requests.iter() {
            if self.vcpus[vcpu].vlapic.accept(vector, TriggerMode::Edge) == AcceptOutcome::Coalesced
            {
                self.merged(vm, vector);
            }
        }
        self.try_deliver(vcpu);
        true
    }

    /// An idle core takes an interrupt: bare metal resumes the OS at once;
    /// a host runs its handler (and wakes a vCPU if it was for one).
    fn wake_core(&mut self, core: usize) {
        if !self.virtualized {
            if let Some(vcpu) = self.cores[core].current {
                self.vcpus[vcpu].state = VcpuState::Running;
                self.enter_guest(core);
            }
            return;
        }
        // The core sleeps with a halted vCPU: its thread must wake to run
        // the host handler and, if the interrupt is the guest's, the vCPU.
        let cost = self.wakeup_cost(core);
        self.set_mode(core, Mode::Host);
        self.cores[core].free_host_irqs = 0;
        self.host_busy(core, cost);
    }

    fn send_nmi(&mut self, core: usize, message: NmiMessage) {
        self.cores[core].nmi_mailbox.push(message);
        if self.cores[core].mode == Mode::Idle {
            self.wake_core(core);
            return;
        }
        if let (Mode::Guest, Some(vcpu)) = (self.cores[core].mode, self.cores[core].current) {
            if self.vcpus[vcpu].vmcs.nmi_exits() {
                self.exit(
                    vcpu,
                    ExitReason::Nmi,
                    self.profile.exit_cost(ExitReason::Nmi),
                );
            }
        }
    }

    /// A host IPI or hypervisor tick for a core that may be running a guest.
    fn host_interrupt(&mut self, core: usize, message: NmiMessage) {
        if self.host_interrupt_mode == DeliveryMode::Nmi {
            self.send_nmi(core, message);
            return;
        }
        let vector = match message {
            NmiMessage::SliceEnd => {
                self.cores[core].slice_due = true;
                HOST_TIMER_VECTOR
            }
            _ => HOST_KICK_VECTOR,
        };
        self.deliver_physical(core, vector);
    }

    /// Delivers whatever the guest can take now, in guest mode.
    fn try_deliver(&mut self, vcpu: usize) {
        let core = self.vcpus[vcpu].home_core;
        while self.in_guest(vcpu) && self.vcpus[vcpu].interruptible {
            let direct = !self.vcpus[vcpu].vmcs.external_interrupt_exits() || !self.virtualized;
            if direct {
                if let Some(vector) = self.cores[core].lapic.pending_vector() {
                    if vector == POSTED_NOTIFICATION_VECTOR
                        && self.process_posted_notification(vcpu)
                    {
                        continue;
                    }
                    self.cores[core].lapic.acknowledge();
                    if is_guest_vector(vector) {
                        self.deliver_to_guest(vcpu, vector);
                        continue;
                    }
                    // A host vector reached guest code.
                    if self.vcpus[vcpu].vmcs.exception_exits(NOT_PRESENT_EXCEPTION) {
                        // ELI's shadow IDT: not present, #NP exits, the host
                        // handles it (it stays in service for the host).
                        self.exit(
                            vcpu,
                            ExitReason::Exception,
                            self.profile.exit_cost(ExitReason::Exception),
                        );
                        self.cores[core].lapic.eoi();
                        self.host_handle_vector(core, vector);
                        return;
                    }
                    self.violation(Invariant::MisDelivery);
                    self.cores[core].lapic.eoi();
                    self.host_handle_vector(core, vector);
                    continue;
                }
            }
            let v = &mut self.vcpus[vcpu];
            match v
                .vmcs
                .deliver_virtual_interrupt(&mut v.vlapic, v.interruptible)
            {
                Some(vector) => self.deliver_to_guest(vcpu, vector),
                None => break,
            }
        }
        // A new handler (or nothing new: then this is a no-op) runs.
        if self.in_guest(vcpu) {
            self.run_guest(vcpu);
        }
    }

    /// The guest starts the handler for `vector`.
    fn deliver_to_guest(&mut self, vcpu: usize, vector: u8) {
        self.check_delivery(vcpu, vector);
        if let Some(trace) = &mut self.trace {
            trace.instant(self.vcpus[vcpu].home_core, self.now, "handle", vector);
        }
        self.suspend(vcpu);
        let program = match vector {
            GUEST_VF_VECTOR | GUEST_VIRTIO_VECTOR if self.spec.workload == WorkloadKind::Fio => {
                BLOCK_HANDLER
            }
            GUEST_VF_VECTOR | GUEST_VIRTIO_VECTOR => RX_HANDLER,
            GUEST_TIMER_VECTOR if self.vcpus[vcpu].timer_target.is_some() => TIMER_HANDLER,
            GUEST_IPI_VECTOR => IPI_HANDLER,
            _ => PLAIN_HANDLER,
        };
        let nested = self.spec.group.nested_interrupts;
        let v = &mut self.vcpus[vcpu];
        v.frames.push(Frame {
            program,
            pc: 0,
            remaining: None,
            vector: Some(vector),
            eoi_done: false,
            saved_interruptible: v.interruptible,
        });
        // The CPU clears IF on delivery; a nesting guest sets it again.
        v.interruptible = nested;
    }

    // --- the guest model -----------------------------------------------------

    /// Stops the clock of the step in progress (exit or nested interrupt).
    fn suspend(&mut self, vcpu: usize) {
        let now = self.now;
        let v = &mut self.vcpus[vcpu];
        v.step_gen = v.step_gen.wrapping_add(1);
        if !std::mem::replace(&mut v.step_running, false) {
            // Already stopped: its remaining time is already up to date.
            return;
        }
        if let Some(since) = v.spin_since.take() {
            v.spin_ns += now - since;
        }
        let started = v.step_started;
        if let Some(frame) = v.frames.last_mut() {
            if let Some(remaining) = frame.remaining.as_mut() {
                *remaining = remaining.saturating_sub(now - started);
            }
        }
    }

    fn work_ns(&self, work: Work) -> u64 {
        let guest = &self.profile.guest_ns;
        match work {
            Work::IrqEntry => guest.irq_entry,
            Work::TimerToUserRest => guest.timer_irq_to_user.saturating_sub(guest.irq_entry),
            Work::Request => guest.request_work,
            Work::IpiGap => {
                let rate = self.spec.group.ipi_rate_per_s.max(1);
                1_000_000_000 / rate
            }
        }
    }

    fn packet_work_ns(&self) -> u64 {
        match self.spec.workload {
            WorkloadKind::Iperf => self.profile.guest_ns.rx_mtu_packet,
            WorkloadKind::NetperfRr => self.profile.guest_ns.request_work,
            _ => self.profile.guest_ns.rx_packet,
        }
    }

    /// Runs guest steps until one takes time, the guest exits or halts.
    fn run_guest(&mut self, vcpu: usize) {
        while self.in_guest(vcpu) && !self.vcpus[vcpu].step_running {
            let Some(frame) = self.vcpus[vcpu].frames.last().copied() else {
                return;
            };
            let step = frame.program[frame.pc];
            match step {
                Step::Work(work) => {
                    let remaining = frame.remaining.unwrap_or_else(|| self.work_ns(work));
                    self.start_timed(vcpu, remaining);
                    return;
                }
                Step::PollRx => {
                    let queue = self.rx_queue_of(frame.vector);
                    if self.rx(self.vcpus[vcpu].vm, queue).ring == 0 {
                        self.advance(vcpu);
                        continue;
                    }
                    let remaining = frame.remaining.unwrap_or_else(|| self.packet_work_ns());
                    self.start_timed(vcpu, remaining);
                    return;
                }
                Step::Spin => {
                    self.vcpus[vcpu].spin_since = Some(self.now);
                    self.vcpus[vcpu].step_running = true;
                    return;
                }
                Step::MaskRx => {
                    let vm = self.vcpus[vcpu].vm;
                    let queue = self.rx_queue_of(frame.vector);
                    self.rx_mut(vm, queue).masked = true;
                    self.advance(vcpu);
                }
                Step::UnmaskRx => {
                    let vm = self.vcpus[vcpu].vm;
                    let queue = self.rx_queue_of(frame.vector);
                    let rx = self.rx_mut(vm, queue);
                    rx.masked = false;
                    rx.signalled = false;
                    rx.since_interrupt = 0;
                    rx.first_unsignalled = None;
                    self.advance(vcpu);
                }
                Step::Eoi => {
                    self.advance(vcpu);
                    self.guest_eoi(vcpu);
                }
                Step::Sti => {
                    self.advance(vcpu);
                    self.set_interruptible(vcpu, true);
                }
                Step::Iret => {
                    let v = &mut self.vcpus[vcpu];
                    let popped = v.frames.pop();
                    let restored = popped.is_none_or(|frame| frame.saved_interruptible);
                    if v.frames.is_empty() {
                        v.frames.push(Frame::background(SPIN));
                    }
                    self.set_interruptible(vcpu, restored);
                }
                Step::WriteTimer(write) => {
                    self.advance(vcpu);
                    self.guest_timer_write(vcpu, write);
                }
                Step::RecordTimerLatency => {
                    self.advance(vcpu);
                    // The handler already re-armed for the next period.
                    let expired = self.vcpus[vcpu]
                        .timer_target
                        .map(|next| next.saturating_sub(CYCLICTEST_PERIOD_NS));
                    if let (Some(expired), WorkloadKind::Cyclictest) = (expired, self.spec.workload)
                    {
                        self.counters
                            .latencies
                            .push(self.now.saturating_sub(expired));
                    }
                }
                Step::RecordRequestLatency => {
                    self.advance(vcpu);
                    let vm = self.vcpus[vcpu].vm;
                    if let Some(sent) = self.vms[vm].request_sent_at.take() {
                        self.counters.latencies.push(self.now - sent);
                        self.counters.requests_done += 1;
                    }
                }
                Step::RecordIpiLatency => {
                    self.advance(vcpu);
                    if let Some(sent) = self.vcpus[vcpu].ipi_sent_at.take() {
                        self.counters.latencies.push(self.now - sent);
                        self.counters.requests_done += 1;
                    }
                }
                Step::SubmitBlock => {
                    self.advance(vcpu);
                    let vm = self.vcpus[vcpu].vm;
                    self.submit_block(vm);
                    self.io_notify(vcpu);
                }
                Step::SendIpi => {
                    self.advance(vcpu);
                    self.guest_send_ipi(vcpu);
                }
                Step::Halt => {
                    self.guest_halt(vcpu);
                    return;
                }
            }
        }
    }

    fn start_timed(&mut self, vcpu: usize, remaining: u64) {
        let v = &mut self.vcpus[vcpu];
        if let Some(frame) = v.frames.last_mut() {
            frame.remaining = Some(remaining);
        }
        v.step_started = self.now;
        v.step_gen = v.step_gen.wrapping_add(1);
        v.step_running = true;
        let gen = v.step_gen;
        self.queue.push(
            self.now + remaining,
            Event::GuestStep {
                vcpu: vcpu as u16,
                gen,
            },
        );
    }

    fn finish_timed_step(&mut self, vcpu: usize) {
        self.vcpus[vcpu].step_running = false;
        let Some(frame) = self.vcpus[vcpu].frames.last().copied() else {
            return;
        };
        if let Step::PollRx = frame.program[frame.pc] {
            // One packet done; the step repeats until the ring is empty.
            let vm = self.vcpus[vcpu].vm;
            let queue = self.rx_queue_of(frame.vector);
            let rx = self.rx_mut(vm, queue);
            rx.ring = rx.ring.saturating_sub(1);
            self.counters.packets_processed += 1;
            if let Some(top) = self.vcpus[vcpu].frames.last_mut() {
                top.remaining = None;
            }
            if self.spec.workload == WorkloadKind::NetperfRr {
                self.netperf_respond(vcpu, queue);
            }
        } else {
            self.advance(vcpu);
        }
        self.run_guest(vcpu);
    }

    fn advance(&mut self, vcpu: usize) {
        if let Some(frame) = self.vcpus[vcpu].frames.last_mut() {
            frame.pc = (frame.pc + 1) % frame.program.len();
            frame.remaining = None;
        }
    }

    fn set_interruptible(&mut self, vcpu: usize, on: bool) {
        self.vcpus[vcpu].interruptible = on;
        if !on {
            return;
        }
        if self.vcpus[vcpu].vmcs.interrupt_window_exits(true) && self.virtualized {
            self.vcpus[vcpu]
                .vmcs
                .set_primary(CPU_INTERRUPT_WINDOW_EXITING, false);
            self.exit(
                vcpu,
                ExitReason::PendVInt,
                self.profile.exit_cost(ExitReason::PendVInt),
            );
            return;
        }
        self.try_deliver(vcpu);
    }

    /// The guest writes the x2APIC EOI MSR for the handler it is in.
    fn guest_eoi(&mut self, vcpu: usize) {
        let core = self.vcpus[vcpu].home_core;
        let believed = self.vcpus[vcpu]
            .frames
            .iter_mut()
            .rev()
            .find(|frame| !frame.eoi_done)
            .and_then(|frame| {
                frame.eoi_done = true;
                frame.vector
            });
        let completed = match self.vcpus[vcpu].vmcs.msr_write(msrs::EOI) {
            MsrWriteAction::Exit if self.virtualized => {
                self.exit(
                    vcpu,
                    ExitReason::MsrWr,
                    self.profile.exit_cost(ExitReason::MsrWr),
                );
                self.emulate_eoi(vcpu)
            }
            MsrWriteAction::VirtualizedApicWrite => {
                let v = &mut self.vcpus[vcpu];
                let outcome = v.vmcs.virtualize_eoi(&mut v.vlapic);
                if outcome.exits {
                    self.exit(
                        vcpu,
                        ExitReason::Other,
                        self.profile.exit_cost(ExitReason::Other),
                    );
                }
                outcome.completed
            }
            _ => self.cores[core].lapic.eoi().completed,
        };
        match (believed, completed) {
            (_, None) => self.violation(Invariant::EoiNothingInService),
            (Some(expected), Some(done)) if expected != done => {
                self.violation(Invariant::EoiWrongVector)
            }
            _ => {}
        }
        if self.in_guest(vcpu) {
            self.try_deliver(vcpu);
        }
    }

    /// The hypervisor completes a trapped EOI: the guest completes its
    /// highest-priority in-service interrupt, which is in the software
    /// LAPIC or, for directly delivered ones, in the physical LAPIC.
    fn emulate_eoi(&mut self, vcpu: usize) -> Option<u8> {
        let core = self.vcpus[vcpu].home_core;
        let virtual_top = self.vcpus[vcpu].vlapic.isr().highest();
        let physical_top = self.cores[core]
            .lapic
            .isr()
            .highest()
            .filter(|&v| is_guest_vector(v));
        let completed = if physical_top > virtual_top {
            self.cores[core].lapic.eoi().completed
        } else {
            self.vcpus[vcpu].vlapic.eoi().completed
        };
        let v = &mut self.vcpus[vcpu];
        let outstanding = !v.vlapic.isr().is_empty() || !v.vlapic.irr().is_empty();
        self.policy.after_emulated_eoi(&mut v.vmcs, outstanding);
        completed
    }

    // --- timers ---------------------------------------------------------------

    fn guest_timer_write(&mut self, vcpu: usize, write: TimerWrite) {
        let deadline = match write {
            TimerWrite::NextTick => {
                let target =
                    self.vcpus[vcpu].timer_target.unwrap_or(self.now) + CYCLICTEST_PERIOD_NS;
                let target = target.max(self.now + 1);
                self.vcpus[vcpu].timer_target = Some(target);
                Some(target)
            }
            // fio's guard timer: far enough never to fire.
            TimerWrite::ArmGuard => Some(self.now + 100_000_000),
            TimerWrite::Cancel => None,
        };
        match self.vcpus[vcpu].vmcs.msr_write(msrs::TMICT) {
            MsrWriteAction::Exit if self.virtualized => {
                self.exit(
                    vcpu,
                    ExitReason::MsrWr,
                    self.profile.exit_service_ns.timer_write
                        + self.profile.host_ns.exit_entry_transition,
                );
            }
            _ => {}
        }
        match deadline {
            Some(deadline) => self.program_guest_timer(vcpu, deadline),
            None => self.cancel_guest_timer(vcpu),
        }
    }

    fn tmict_write(lapic: &mut Lapic, count: u64, now: u64) {
        // TMICT is a writable LAPIC register: this cannot fail.
        let _ = lapic.write_msr(msrs::TMICT, count.min(u64::from(u32::MAX)), &At(now));
    }

    fn program_guest_timer(&mut self, vcpu: usize, deadline: u64) {
        let count = deadline.saturating_sub(self.now).max(1);
        match self.timer_path {
            TimerPath::HostHrtimer => {
                Self::tmict_write(&mut self.vcpus[vcpu].vlapic, count, self.now);
                self.arm_host_timer(vcpu);
            }
            TimerPath::PassThrough => {
                let core = self.vcpus[vcpu].home_core;
                if self.cores[core].current == Some(vcpu) {
                    self.program_physical_timer(core, vcpu, count);
                } else {
                    self.park_timer(vcpu, Some(deadline));
                }
            }
        }
    }

    fn cancel_guest_timer(&mut self, vcpu: usize) {
        match self.timer_path {
            TimerPath::HostHrtimer => {
                Self::tmict_write(&mut self.vcpus[vcpu].vlapic, 0, self.now);
                self.vcpus[vcpu].host_timer_gen += 1;
            }
            TimerPath::PassThrough => {
                let core = self.vcpus[vcpu].home_core;
                if self.cores[core].timer_owner == Some(vcpu) {
                    Self::tmict_write(&mut self.cores[core].lapic, 0, self.now);
                    self.cores[core].timer_gen += 1;
                    self.cores[core].timer_owner = None;
                }
                self.park_timer(vcpu, None);
            }
        }
    }

    fn arm_host_timer(&mut self, vcpu: usize) {
        let v = &mut self.vcpus[vcpu];
        v.host_timer_gen += 1;
        if let Some(deadline) = v.vlapic.timer_deadline_ns() {
            let gen = v.host_timer_gen;
            self.queue.push(
                deadline,
                Event::HostTimer {
                    vcpu: vcpu as u16,
                    gen,
                },
            );
        }
    }

    fn program_physical_timer(&mut self, core: usize, vcpu: usize, count: u64) {
        Self::tmict_write(&mut self.cores[core].lapic, count, self.now);
        self.cores[core].timer_owner = Some(vcpu);
        self.cores[core].timer_gen += 1;
        if let Some(deadline) = self.cores[core].lapic.timer_deadline_ns() {
            let gen = self.cores[core].timer_gen;
            self.queue.push(
                deadline,
                Event::PhysicalTimer {
                    core: core as u16,
                    gen,
                },
            );
        }
    }

    /// DID: the timer of a descheduled vCPU lives on the designated core.
    fn park_timer(&mut self, vcpu: usize, deadline: Option<u64>) {
        let v = &mut self.vcpus[vcpu];
        v.parked_timer = deadline;
        v.host_timer_gen += 1;
        if let Some(deadline) = deadline {
            let gen = v.host_timer_gen;
            self.queue.push(
                deadline,
                Event::HostTimer {
                    vcpu: vcpu as u16,
                    gen,
                },
            );
        }
    }

    fn physical_timer(&mut self, core: usize) {
        let already = self.cores[core].lapic.irr().contains(GUEST_TIMER_VECTOR);
        if !self.cores[core].lapic.expire_timer(&At(self.now)) {
            return;
        }
        let owner = self.cores[core].timer_owner.take();
        if let Some(vcpu) = owner {
            let vm = self.vcpus[vcpu].vm;
            self.raise(vm, GUEST_TIMER_VECTOR);
            if already {
                self.merged(vm, GUEST_TIMER_VECTOR);
            }
        }
        self.physical_pending(core);
    }

    /// A host-side timer of a vCPU: KVM's hrtimer for the emulated LAPIC
    /// timer (fires as a host interrupt on the vCPU's core), or DID's
    /// parked timer on the designated core (becomes a virtual interrupt).
    fn host_timer(&mut self, vcpu: usize) {
        match self.timer_path {
            TimerPath::HostHrtimer => {
                let core = self.vcpus[vcpu].home_core;
                self.deliver_physical(core, HOST_TIMER_VECTOR);
            }
            TimerPath::PassThrough => {
                if self.vcpus[vcpu].parked_timer.take().is_some() {
                    let vm = self.vcpus[vcpu].vm;
                    self.raise(vm, GUEST_TIMER_VECTOR);
                    self.queue_virtual(vcpu, GUEST_TIMER_VECTOR);
                }
            }
        }
    }

    // --- virtual interrupts -----------------------------------------------------

    /// The hypervisor queues a virtual interrupt for `vcpu`.
    fn queue_virtual(&mut self, vcpu: usize, vector: u8) {
        let vm = self.vcpus[vcpu].vm;
        let merged = match self.injection {
            Injection::Classic | Injection::ClassicUntracked => {
                self.vcpus[vcpu].vlapic.accept(vector, TriggerMode::Edge)
                    == AcceptOutcome::Coalesced
            }
            Injection::Posted => {
                let already = self.vcpus[vcpu].pid.pir.contains(vector);
                self.vcpus[vcpu].pid.post(vector);
                already
            }
            Injection::SelfIpi => !self.vcpus[vcpu].virtual_pending.set(vector),
        };
        if merged {
            self.merged(vm, vector);
        }
        self.wake(vcpu);
    }

    /// A sender outside the vCPU's core signals a virtual interrupt.
    fn signal_virtual(&mut self, vcpu: usize, vector: u8) {
        let core = self.vcpus[vcpu].home_core;
        let scheduled =
            self.cores[core].current == Some(vcpu) && self.vcpus[vcpu].state == VcpuState::Running;
        if !self.virtualized {
            self.deliver_physical(core, vector);
            return;
        }
        match self.signal {
            VirtualSignal::KickAndInject => {
                self.queue_virtual(vcpu, vector);
                if scheduled && self.cores[core].mode == Mode::Guest {
                    self.host_interrupt(core, NmiMessage::Kick);
                }
            }
            VirtualSignal::Posted => {
                let vm = self.vcpus[vcpu].vm;
                let already = self.vcpus[vcpu].pid.pir.contains(vector);
                let notification = self.vcpus[vcpu].pid.post(vector);
                if already {
                    self.merged(vm, vector);
                }
                if notification.is_some() && scheduled {
                    self.deliver_physical(core, POSTED_NOTIFICATION_VECTOR);
                }
                self.wake(vcpu);
            }
            VirtualSignal::DirectIpi => {
                if scheduled {
                    self.deliver_physical(core, vector);
                } else {
                    self.queue_virtual(vcpu, vector);
                }
            }
        }
    }

    // --- scheduling -------------------------------------------------------------

    fn wake(&mut self, vcpu: usize) {
        if self.vcpus[vcpu].state != VcpuState::Halted {
            return;
        }
        let core = self.vcpus[vcpu].home_core;
        self.vcpus[vcpu].state = VcpuState::Running;
        if self.cores[core].current != Some(vcpu) {
            self.vcpus[vcpu].state = VcpuState::Runnable;
            return;
        }
        if self.cores[core].mode == Mode::Idle {
            let cost = self.wakeup_cost(core);
            self.set_mode(core, Mode::Host);
            self.host_busy(core, cost);
        }
    }

    /// Waking a sleeping vCPU thread, unless the host is still halt-polling.
    fn wakeup_cost(&self, core: usize) -> u64 {
        if self.now < self.cores[core].halt_poll_until {
            0
        } else {
            self.profile.host_ns.wakeup
        }
    }

    fn guest_halt(&mut self, vcpu: usize) {
        let core = self.vcpus[vcpu].home_core;
        if !self.virtualized {
            // Bare metal: the core sleeps until an interrupt.
            if self.cores[core].lapic.pending_vector().is_some() {
                self.try_deliver(vcpu);
                return;
            }
            self.vcpus[vcpu].state = VcpuState::Halted;
            self.suspend(vcpu);
            self.set_mode(core, Mode::Idle);
            return;
        }
        if self.vcpus[vcpu].vmcs.hlt_exits() {
            self.vcpus[vcpu].halt_requested = true;
            self.exit(
                vcpu,
                ExitReason::Hlt,
                self.profile.exit_cost(ExitReason::Hlt),
            );
        }
    }

    /// HLT exit handling: sleep unless something is pending.
    fn halt(&mut self, vcpu: usize) {
        let core = self.vcpus[vcpu].home_core;
        let v = &self.vcpus[vcpu];
        let pending = v.vlapic.pending_vector().is_some()
            || !v.pid.pir.is_empty()
            || !v.virtual_pending.is_empty()
            || self.cores[core].lapic.pending_vector().is_some();
        if pending {
            return;
        }
        self.vcpus[vcpu].state = VcpuState::Halted;
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
    fn end_slice(&mut self, core: usize) -> u64 {
        if self.cores[core].runqueue.len() > 1 {
            self.arm_slice(core);
        }
        let Some(current) = self.cores[core].current else {
            return 0;
        };
        let guest_in_service = self.cores[core].lapic.isr().iter().any(is_guest_vector);
        if guest_in_service && self.policy.defers_preemption_in_handler() {
            // The guest is inside a handler whose EOI goes to this LAPIC:
            // let it finish and try again shortly.
            self.cores[core].slice_gen += 1;
            let gen = self.cores[core].slice_gen;
            self.queue.push(
                self.now + self.profile.host_ns.preemption_retry,
                Event::SliceEnd {
                    core: core as u16,
                    gen,
                },
            );
            return 0;
        }
        let queue = &self.cores[core].runqueue;
        let position = queue.iter().position(|&id| id == current).unwrap_or(0);
        let next = (1..=queue.len())
            .map(|step| queue[(position + step) % queue.len()])
            .find(|&id| id == current || self.vcpus[id].state != VcpuState::Halted);
        let Some(next) = next.filter(|&next| next != current) else {
            return 0;
        };
        self.schedule_out(current);
        if self.vcpus[current].state == VcpuState::Running {
            self.vcpus[current].state = VcpuState::Runnable;
        }
        self.cores[core].current = Some(next);
        self.vcpus[next].state = VcpuState::Running;
        self.schedule_in(next);
        self.profile.host_ns.context_switch
    }

    fn vf_route(&self, vcpu: usize) -> VfRoute {
        let v = &self.vcpus[vcpu];
        let running = self.cores[v.home_core].current == Some(vcpu);
        VfRoute {
            running_on: running.then_some(v.home_core as u32),
            home_core: v.home_core as u32,
            guest_vector: GUEST_VF_VECTOR,
            host_vector: HOST_VF_VECTOR_BASE + v.vm as u8,
            requester_id: 0x0100 + v.vm as u16,
        }
    }

    fn retarget_vf(&mut self, vcpu: usize) {
        let v = &self.vcpus[vcpu];
        if v.index_in_vm != 0 {
            return;
        }
        let irte = self.policy.vf_irte(&self.vf_route(vcpu));
        // The table has one entry per VM.
        let _ = self.iommu.set_entry(v.vm as u32, irte);
    }

    fn schedule_in(&mut self, vcpu: usize) {
        self.retarget_vf(vcpu);
        self.vcpus[vcpu].pid.suppress = false;
        if self.timer_path == TimerPath::PassThrough && self.virtualized {
            if let Some(deadline) = self.vcpus[vcpu].parked_timer.take() {
                self.vcpus[vcpu].host_timer_gen += 1;
                let core = self.vcpus[vcpu].home_core;
                let count = deadline.saturating_sub(self.now).max(1);
                self.program_physical_timer(core, vcpu, count);
            }
        }
    }

    fn schedule_out(&mut self, vcpu: usize) {
        let core = self.vcpus[vcpu].home_core;
        // The IRTE must stop pointing at this core before anything else.
        self.cores[core].current = None;
        self.retarget_vf(vcpu);
        self.cores[core].current = Some(vcpu);
        self.vcpus[vcpu].pid.suppress = true;
        if self.timer_path == TimerPath::PassThrough && self.cores[core].timer_owner == Some(vcpu) {
            let deadline = self.cores[core].lapic.timer_deadline_ns();
            Self::tmict_write(&mut self.cores[core].lapic, 0, self.now);
            self.cores[core].timer_gen += 1;
            self.cores[core].timer_owner = None;
            self.park_timer(vcpu, deadline);
        }
    }

    // --- devices ---------------------------------------------------------------

    fn rx(&self, vm: usize, queue: RxQueueKind) -> &RxQueue {
        match queue {
            RxQueueKind::Vf => &self.vms[vm].vf,
            RxQueueKind::Virtio => &self.vms[vm].virtio,
        }
    }

    fn rx_mut(&mut self, vm: usize, queue: RxQueueKind) -> &mut RxQueue {
        match queue {
            RxQueueKind::Vf => &mut self.vms[vm].vf,
            RxQueueKind::Virtio => &mut self.vms[vm].virtio,
        }
    }

    fn rx_queue_of(&self, vector: Option<u8>) -> RxQueueKind {
        match vector {
            Some(GUEST_VIRTIO_VECTOR) => RxQueueKind::Virtio,
            _ => RxQueueKind::Vf,
        }
    }

    fn packet_arrival(&mut self, vm: usize, queue: RxQueueKind) {
        self.schedule_packet(vm, queue);
        match queue {
            RxQueueKind::Vf => self.rx_packet(vm, RxQueueKind::Vf),
            RxQueueKind::Virtio => self.backend_start(vm, BackendJob::RxPacket),
        }
    }

    /// A packet lands in a receive ring.
    fn rx_packet(&mut self, vm: usize, queue: RxQueueKind) {
        let now = self.now;
        let rx = self.rx_mut(vm, queue);
        if rx.ring >= RX_RING_SIZE {
            rx.dropped += 1;
            return;
        }
        rx.ring += 1;
        rx.since_interrupt += 1;
        rx.first_unsignalled.get_or_insert(now);
        match queue {
            RxQueueKind::Vf => self.maybe_fire_vf(vm, false),
            RxQueueKind::Virtio => {
                let rx = &mut self.vms[vm].virtio;
                if !rx.masked && !rx.signalled {
                    rx.signalled = true;
                    self.raise(vm, GUEST_VIRTIO_VECTOR);
                    let vcpu = self.vms[vm].vcpus[0];
                    self.signal_virtual(vcpu, GUEST_VIRTIO_VECTOR);
                }
            }
        }
    }

    /// The VF's coalescing logic: fire at the packet threshold, or when the
    /// timeout armed at the first unsignalled packet runs out.
    fn maybe_fire_vf(&mut self, vm: usize, timed_out: bool) {
        let coalescing = self.spec.nic;
        let now = self.now;
        let rx = &mut self.vms[vm].vf;
        if rx.masked || rx.ring == 0 || rx.since_interrupt == 0 {
            return;
        }
        let threshold = rx.since_interrupt >= coalescing.packets_per_interrupt;
        if !threshold && !timed_out {
            if !rx.timeout_armed {
                rx.timeout_armed = true;
                rx.timeout_gen += 1;
                let at = rx.first_unsignalled.unwrap_or(now) + coalescing.interrupt_timeout_ns;
                let gen = rx.timeout_gen;
                self.queue
                    .push(at.max(now), Event::CoalesceTimeout { vm: vm as u16, gen });
            }
            return;
        }
        rx.since_interrupt = 0;
        rx.first_unsignalled = None;
        rx.timeout_armed = false;
        rx.timeout_gen += 1;
        self.fire_vf_msi(vm);
    }

    /// The VF writes its MSI; the IOMMU remaps it.
    fn fire_vf_msi(&mut self, vm: usize) {
        let message = MsiMessage::compose_remappable(&RemappableMsi {
            handle: vm as u16,
            subhandle: None,
        });
        let requester = 0x0100 + vm as u16;
        let Ok(remapped) = self.iommu.remap(&message, requester) else {
            // Blocked requests are counted by the IOMMU model.
            return;
        };
        self.raise(vm, GUEST_VF_VECTOR);
        match remapped {
            Remapped::Interrupt(interrupt) => {
                let core = match interrupt.destination {
                    dirq_arch::lapic::Destination::Physical(id) => id as usize,
                    _ => return,
                };
                if core >= self.cores.len() {
                    return;
                }
                if interrupt.delivery_mode == DeliveryMode::Nmi {
                    self.send_nmi(core, NmiMessage::AssignedInterrupt { vm: vm as u16 });
                } else {
                    self.deliver_physical(core, interrupt.vector);
                }
            }
            Remapped::Post { vector, .. } => {
                let vcpu = self.vms[vm].vcpus[0];
                self.signal_virtual(vcpu, vector);
            }
        }
    }

    fn backend_start(&mut self, vm: usize, job: BackendJob) {
        let mut service = self.profile.host_ns.virtio_backend_per_request;
        if job == BackendJob::BlockRead {
            service += self.profile.host_ns.block_device_service;
        }
        let start = self.now.max(self.vms[vm].backend_busy_until);
        let done = start + service;
        self.vms[vm].backend_busy_until = done;
        self.queue
            .push(done, Event::BackendDone { vm: vm as u16, job });
    }

    fn backend_done(&mut self, vm: usize, job: BackendJob) {
        match job {
            BackendJob::RxPacket => self.rx_packet(vm, RxQueueKind::Virtio),
            BackendJob::TxPacket => {
                let at = self.now + self.profile.guest_ns.wire_one_way;
                self.queue.push(at, Event::RemoteRequest { vm: vm as u16 });
            }
            BackendJob::BlockRead => {
                self.raise(vm, GUEST_VIRTIO_VECTOR);
                let vcpu = self.vms[vm].vcpus[0];
                self.signal_virtual(vcpu, GUEST_VIRTIO_VECTOR);
            }
        }
    }

    fn submit_block(&mut self, vm: usize) {
        self.vms[vm].request_sent_at = Some(self.now);
        self.backend_start(vm, BackendJob::BlockRead);
    }

    /// A virtio notify: a port write that exits under every hypervisor.
    fn io_notify(&mut self, vcpu: usize) {
        if self.virtualized {
            self.exit(
                vcpu,
                ExitReason::IoInsr,
                self.profile.exit_cost(ExitReason::IoInsr),
            );
        }
    }

    /// netperf-rr: the guest answered; the response goes out and the remote
    /// sends the next request.
    fn netperf_respond(&mut self, vcpu: usize, queue: RxQueueKind) {
        let vm = self.vcpus[vcpu].vm;
        match queue {
            RxQueueKind::Virtio => {
                self.backend_start(vm, BackendJob::TxPacket);
                self.io_notify(vcpu);
            }
            RxQueueKind::Vf => {
                // The VF's doorbell is a passed-through MMIO write.
                let at = self.now + self.profile.guest_ns.wire_one_way;
                self.queue.push(at, Event::RemoteRequest { vm: vm as u16 });
            }
        }
    }

    /// The guest writes the ICR: every hypervisor traps it; bare metal
    /// sends the IPI itself.
    fn guest_send_ipi(&mut self, vcpu: usize) {
        let vm = self.vcpus[vcpu].vm;
        let targets: Vec<usize> = match self.spec.group.ipi_mode {
            IpiMode::Unicast => self.vms[vm].vcpus.iter().copied().skip(1).take(1).collect(),
            IpiMode::Broadcast => self.vms[vm].vcpus.iter().copied().skip(1).collect(),
        };
        let trapped =
            self.virtualized && self.vcpus[vcpu].vmcs.msr_write(msrs::ICR) == MsrWriteAction::Exit;
        let mut send_at = self.now;
        if trapped {
            let cost = self.profile.exit_service_ns.icr_write
                + self.profile.host_ns.exit_entry_transition
                + self.profile.host_ns.send_ipi * targets.len() as u64;
            self.exit(vcpu, ExitReason::MsrWr, cost);
            send_at += self.profile.exit_service_ns.icr_write;
        }
        for target in targets {
            self.vcpus[target].ipi_sent_at = Some(self.now);
            self.queue.push(
                send_at,
                Event::GuestIpi {
                    vcpu: target as u16,
                },
            );
        }
    }

    // --- end of run ------------------------------------------------------------

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

    /// Outstanding interrupts that no structure holds any more were lost.
    fn count_lost(&mut self) {
        for vm in 0..self.vms.len() {
            for vector in 0..=255u8 {
                let outstanding = self.vms[vm].outstanding[vector as usize];
                if outstanding == 0 {
                    continue;
                }
                let held = self.vms[vm].vcpus.iter().any(|&vcpu| {
                    let v = &self.vcpus[vcpu];
                    let lapic = &self.cores[v.home_core].lapic;
                    let host_form = HOST_VF_VECTOR_BASE + vm as u8;
                    v.vlapic.irr().contains(vector)
                        || v.pid.pir.contains(vector)
                        || v.virtual_pending.contains(vector)
                        || v.injecting == Some(vector)
                        || lapic.irr().contains(vector)
                        || (vector == GUEST_VF_VECTOR && lapic.irr().contains(host_form))
                        || !self.cores[v.home_core].nmi_mailbox.is_empty()
                });
                if held {
                    self.counters.pending_at_end += u64::from(outstanding);
                } else {
                    self.counters.violations[Invariant::Lost as usize] += u64::from(outstanding);
                }
            }
        }
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
