//! The guest's programs: its instruction set ([`Step`]), the kernel's
//! handlers and background loops, and which program serves what in a run
//! ([`Handlers`]: the workload's own where it has them).

use crate::machine::workload::{Programs, WorkloadStep};
use crate::scenario::IdleMode;

/// Guest work whose length comes from the profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum Work {
    IrqEntry,
    /// The switch to a woken thread and its return from the wait.
    TimerToUserRest,
    Request,
    /// A housekeeping section with interrupts disabled.
    IrqsOffSection,
    /// A block read's way down the guest's block layer to virtio-blk.
    BlockSubmit,
    /// A block read's completion, from its interrupt to the reader.
    BlockComplete,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum TimerWrite {
    /// The timer thread's periodic timer re-armed for its next tick.
    NextTick,
    /// A guard timer far enough never to fire (fio's).
    ArmGuard,
    Cancel,
}

/// One instruction of the guest model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::machine) enum Step {
    Work(Work),
    /// Background loop that never ends (idle=poll, whileloop).
    Spin,
    MaskRx,
    UnmaskRx,
    Eoi,
    Cli,
    Sti,
    /// Housekeeping: the pass's next I/O or EPT-faulting access.
    DeviceAccess,
    /// Housekeeping: back to the start while accesses are left.
    NextAccess,
    /// NAPI poll: one packet at a time until the ring is empty.
    PollRx,
    /// A driver without NAPI takes every frame the ring holds and
    /// re-enables the queue's interrupt.
    TakeRx,
    /// be2net's transmit poll: every completion reaped, the event queue
    /// re-armed (its work per packet is the sender's `tx_packet`).
    ReapTx,
    WriteTimer(TimerWrite),
    /// The timer handler wakes the timer thread; the scheduler runs it
    /// when the last handler returns.
    WakeTimerThread,
    /// The timer thread reads the clock: the workload hears how late.
    TimerThreadReadsClock,
    /// The timer handler's `irq_exit`: if the guest's tick expired, its
    /// timer softirq runs the housekeeping pass that waits for it.
    TickSoftirq,
    Halt,
    Iret,
    /// A step of the run's workload.
    Workload(WorkloadStep),
}

pub(in crate::machine) const RX_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::MaskRx,
    Step::Eoi,
    Step::Sti,
    Step::PollRx,
    Step::UnmaskRx,
    Step::Iret,
];
/// A receive interrupt without NAPI (`RxHandler::PerInterrupt`): the
/// frames are taken as the handler is entered.
pub(in crate::machine) const RX_EACH_HANDLER: &[Step] = &[
    Step::TakeRx,
    Step::Work(Work::IrqEntry),
    Step::Eoi,
    Step::Iret,
];
/// be2net's transmit event queue's interrupt (`be_msix_tx_mcc`, then
/// `be_poll_tx_mcc`; `tx_completion`).
pub(super) const TX_HANDLER: &[Step] = &[
    Step::Work(Work::IrqEntry),
    Step::Eoi,
    Step::ReapTx,
    Step::Iret,
];
/// A guard-timer expiry (fio), a stray tick or an IPI no workload waits
/// for: acknowledge and return.
pub(in crate::machine) const PLAIN_HANDLER: &[Step] =
    &[Step::Work(Work::IrqEntry), Step::Eoi, Step::Iret];
pub(in crate::machine) const SPIN: &[Step] = &[Step::Spin];
pub(in crate::machine) const HALT_LOOP: &[Step] = &[Step::Halt];

/// The programs a run's guest runs: the workload's where it has its own,
/// the kernel's otherwise. Fixed for the run.
#[derive(Clone, Copy, Debug)]
pub(in crate::machine) struct Handlers {
    background: Option<&'static [Step]>,
    lead: Option<&'static [Step]>,
    pub(super) device: &'static [Step],
    pub(super) ipi: &'static [Step],
}

impl Handlers {
    pub(in crate::machine) fn of(programs: Programs) -> Handlers {
        Handlers {
            background: programs.background,
            lead: programs.lead,
            device: programs.device_handler.unwrap_or(RX_HANDLER),
            ipi: programs.ipi_handler.unwrap_or(PLAIN_HANDLER),
        }
    }

    /// The program of a VM's vCPU `index` when idle vCPUs do `idle`.
    pub(super) fn program(&self, index: usize, idle: IdleMode) -> &'static [Step] {
        match (self.lead, index) {
            (Some(lead), 0) => lead,
            _ => self.background.unwrap_or(match idle {
                IdleMode::Poll => SPIN,
                _ => HALT_LOOP,
            }),
        }
    }
}
