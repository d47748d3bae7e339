//! The machine's state: cores, vCPUs, VMs and the run's counters. Only
//! data lives here; the mechanism modules read and change it and the
//! engine applies the effects they return.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Guest,
    Host,
    Idle,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NmiMessage {
    /// A VF's event queue interrupted while its VM was not running; the
    /// guest vector it carries.
    AssignedInterrupt {
        pair: u32,
        vector: u8,
    },
    SliceEnd,
    Kick,
}

pub(super) struct Core {
    pub(super) lapic: Lapic,
    pub(super) mode: Mode,
    pub(super) mode_since: u64,
    /// The vCPU scheduled here (running, in an exit, or halted).
    pub(super) current: Option<usize>,
    pub(super) runqueue: Vec<usize>,
    /// The vCPU whose timer the physical LAPIC timer holds (pass-through).
    pub(super) timer_owner: Option<usize>,
    /// The timer is armed for a vCPU other than the current one.
    pub(super) timer_misowned: bool,
    pub(super) nmi_mailbox: Vec<NmiMessage>,
    /// Interrupts taken in host mode before the next entry are free up to
    /// this many (the exit that brought the core here already paid).
    pub(super) free_host_irqs: u32,
    pub(super) slice_due: bool,
    /// Host work the timer path owes before the next entry: KVM's hrtimer
    /// callback, kick and injection for the timers that expired here.
    pub(super) timer_work_ns: u64,
    /// Host halt polling: a wake-up before this time needs no sleep/wake.
    pub(super) halt_poll_until: u64,
    pub(super) guest_ns: u64,
    /// Time asleep: idle and past any halt-polling window.
    pub(super) asleep_ns: u64,
    pub(super) hosts_vcpus: bool,
    /// The VF event queues (queue pair, queue) whose host vectors this
    /// core allocated, in vector order from `HOST_VF_VECTOR_BASE`.
    pub(super) vf_vectors: Vec<(usize, VfVector)>,
}

impl AsRef<Lapic> for Core {
    fn as_ref(&self) -> &Lapic {
        &self.lapic
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum VcpuState {
    Running,
    Runnable,
    Halted,
}

pub(super) struct Vcpu {
    pub(super) vm: usize,
    pub(super) home_core: usize,
    /// The vCPU's LAPIC model, VMCS and posted-interrupt descriptor.
    pub(super) hw: VcpuHardware,
    /// The design's injection state for this vCPU.
    pub(super) injection: InjectionState,
    /// The design's timer state for this vCPU.
    pub(super) timer: TimerState,
    pub(super) frames: Vec<Frame>,
    pub(super) interruptible: bool,
    pub(super) state: VcpuState,
    pub(super) step_started: u64,
    /// A timed step (or the spin loop) is executing; `run_guest` must not
    /// start it again.
    pub(super) step_running: bool,
    pub(super) spin_since: Option<u64>,
    pub(super) spin_ns: u64,
    pub(super) halt_requested: bool,
    /// The queue pair this vCPU's driver polls: its own, or (if it owns
    /// none) its VM's first.
    pub(super) pair: usize,
    /// The accesses the running housekeeping pass has still to make.
    pub(super) housekeeping: Accesses,
}

/// The APIC bus of a VM routes over its vCPUs' virtual LAPICs.
impl AsRef<Lapic> for Vcpu {
    fn as_ref(&self) -> &Lapic {
        &self.hw.vlapic
    }
}

pub(super) struct Vm {
    pub(super) vcpus: Vec<usize>,
    /// The VM's vhost-net worker.
    pub(super) vhost: super::virtio::Vhost,
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
    /// Guest timer expiries that found their core in host mode.
    pub timer_irqs_in_host_mode: u64,
}

impl Counters {
    /// A request (a block read, a transaction) is done, `latency` after
    /// it started.
    pub(crate) fn request_done(&mut self, latency: u64) {
        self.latencies.push(latency);
        self.requests_done += 1;
    }
}
