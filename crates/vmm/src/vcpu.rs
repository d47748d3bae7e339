//! A vCPU and its run loop: every KVM_RUN return is counted by reason and
//! dispatched to the bus; the run's interrupt controller injects before
//! each entry and serves the HLTs and EOIs that exit.

use std::time::Instant;

use kvm_ioctls::{VcpuExit, VcpuFd};

use crate::devices::control::RunControl;
use crate::devices::{Bus, BusError};
use crate::exits::{ExitCounters, UserspaceExit};
use crate::interrupt::{InterruptController, InterruptError, Kicker};
use crate::trace::TraceRecorder;

/// KVM_INTERNAL_ERROR_EMULATION: KVM could not emulate an instruction.
const INTERNAL_ERROR_EMULATION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum VcpuError {
    #[error("vCPU {cpu}: KVM_RUN failed")]
    Run {
        cpu: usize,
        #[source]
        source: kvm_ioctls::Error,
    },
    #[error("vCPU {cpu}")]
    Bus {
        cpu: usize,
        #[source]
        source: BusError,
    },
    #[error("vCPU {cpu}: the guest triple-faulted (KVM_EXIT_SHUTDOWN) at rip {rip:#x}")]
    TripleFault { cpu: usize, rip: u64 },
    #[error("vCPU {cpu}: KVM internal error{}, suberror {suberror} (data {data:x?}) at rip {rip:#x}", if *.suberror == INTERNAL_ERROR_EMULATION { " (instruction emulation failed)" } else { "" })]
    Internal {
        cpu: usize,
        suberror: u32,
        data: Vec<u64>,
        rip: u64,
    },
    #[error("vCPU {cpu}: VM entry failed, hardware reason {reason:#x}")]
    FailEntry { cpu: usize, reason: u64 },
    #[error("vCPU {cpu}: unexpected exit {exit} at rip {rip:#x}")]
    UnexpectedExit { cpu: usize, exit: String, rip: u64 },
    #[error("vCPU {cpu}: cannot read registers")]
    Registers {
        cpu: usize,
        #[source]
        source: kvm_ioctls::Error,
    },
    #[error("vCPU {cpu}: the interrupt controller failed")]
    Interrupt {
        cpu: usize,
        #[source]
        source: InterruptError,
    },
    #[error(transparent)]
    Placement(#[from] crate::placement::PlacementError),
}

/// What a run loop needs besides its vCPU.
pub struct VcpuContext<'a> {
    pub bus: &'a Bus,
    pub control: &'a RunControl,
    pub counters: &'a ExitCounters,
    pub kicker: &'a Kicker,
    pub interrupts: &'a dyn InterruptController,
    /// Set when the run records its timeline.
    pub trace: Option<&'a TraceRecorder>,
}

pub struct Vcpu {
    pub index: usize,
    pub fd: VcpuFd,
}

/// An exit reduced to what needs the vCPU fd after the exit data is released.
enum Next {
    Continue,
    Halted,
    Fault(fn(usize, u64) -> VcpuError),
    Internal,
    Unexpected(String),
}

impl Vcpu {
    /// Runs the guest until the run is asked to stop or something fails.
    pub fn run(&mut self, ctx: &VcpuContext) -> Result<(), VcpuError> {
        // The vCPU fd, and so its kvm_run mapping, outlives the registration.
        let _kickable = ctx.kicker.register(self.index, self.fd.get_kvm_run());
        ctx.counters.track_this_thread();
        self.run_loop(ctx)
    }

    fn run_loop(&mut self, ctx: &VcpuContext) -> Result<(), VcpuError> {
        let cpu = self.index;
        let interrupt_error = |source| VcpuError::Interrupt { cpu, source };
        while !ctx.control.should_stop() {
            ctx.interrupts
                .before_entry(cpu, &mut self.fd)
                .map_err(interrupt_error)?;
            let entered = ctx.trace.map(|_| Instant::now());
            let result = self.fd.run();
            let returned = Instant::now();
            let (exit, next) = match result {
                Ok(exit) => {
                    let (reason, next) = handle_exit(cpu, exit, ctx)?;
                    (Some(reason), next)
                }
                Err(err) if err.errno() == libc::EINTR => {
                    ctx.counters.count(UserspaceExit::Interrupted);
                    self.fd.set_kvm_immediate_exit(0);
                    (Some(UserspaceExit::Interrupted), Next::Continue)
                }
                Err(err) if err.errno() == libc::EAGAIN => (None, Next::Continue),
                Err(source) => return Err(VcpuError::Run { cpu, source }),
            };
            if let (Some(trace), Some(entered), Some(exit)) = (ctx.trace, entered, exit) {
                trace.kvm_run(cpu, entered, returned, exit);
            }
            match next {
                Next::Continue => {}
                Next::Halted => ctx
                    .interrupts
                    .halted(cpu, ctx.control)
                    .map_err(interrupt_error)?,
                Next::Fault(make) => return Err(make(cpu, self.rip()?)),
                Next::Internal => return Err(self.internal_error()),
                Next::Unexpected(exit) => return Err(self.unexpected(exit)),
            }
            ctx.counters.time_last(returned.elapsed());
        }
        Ok(())
    }

    fn rip(&self) -> Result<u64, VcpuError> {
        self.fd
            .get_regs()
            .map(|regs| regs.rip)
            .map_err(|source| VcpuError::Registers {
                cpu: self.index,
                source,
            })
    }

    fn unexpected(&self, exit: String) -> VcpuError {
        VcpuError::UnexpectedExit {
            cpu: self.index,
            exit,
            rip: self.rip().unwrap_or(0),
        }
    }

    fn internal_error(&mut self) -> VcpuError {
        let rip = self.rip().unwrap_or(0);
        let run = self.fd.get_kvm_run();
        // SAFETY: exit_reason was KVM_EXIT_INTERNAL_ERROR, so `internal` is
        // the active member of the exit union.
        let internal = unsafe { run.__bindgen_anon_1.internal };
        let count = (internal.ndata as usize).min(internal.data.len());
        VcpuError::Internal {
            cpu: self.index,
            suberror: internal.suberror,
            data: internal.data[..count].to_vec(),
            rip,
        }
    }

    /// The instruction pointer, for reporting where a stopped guest was.
    pub fn current_rip(&self) -> Option<u64> {
        self.rip().ok()
    }
}

/// The reason the run loop counts an exit under.
fn exit_reason(exit: &VcpuExit) -> UserspaceExit {
    match exit {
        VcpuExit::IoOut(..) | VcpuExit::IoIn(..) => UserspaceExit::Io,
        VcpuExit::MmioWrite(..) | VcpuExit::MmioRead(..) => UserspaceExit::Mmio,
        VcpuExit::X86Rdmsr(_) => UserspaceExit::MsrRead,
        VcpuExit::X86Wrmsr(_) => UserspaceExit::MsrWrite,
        VcpuExit::IrqWindowOpen => UserspaceExit::IrqWindow,
        VcpuExit::Hlt => UserspaceExit::Hlt,
        VcpuExit::IoapicEoi(_) => UserspaceExit::IoapicEoi,
        _ => UserspaceExit::Other,
    }
}

/// Counts one exit (before handling it: the window markers' snapshots
/// include their own exit) and handles it; returns its reason.
fn handle_exit(
    cpu: usize,
    exit: VcpuExit,
    ctx: &VcpuContext,
) -> Result<(UserspaceExit, Next), VcpuError> {
    let reason = exit_reason(&exit);
    ctx.counters.count(reason);
    let bus_error = |source| VcpuError::Bus { cpu, source };
    let next = match exit {
        VcpuExit::IoOut(port, data) => {
            ctx.bus.pio_write(cpu, port, data).map_err(bus_error)?;
            Next::Continue
        }
        VcpuExit::IoIn(port, data) => {
            ctx.bus.pio_read(cpu, port, data).map_err(bus_error)?;
            Next::Continue
        }
        VcpuExit::MmioWrite(address, data) => {
            ctx.bus.mmio_write(cpu, address, data).map_err(bus_error)?;
            Next::Continue
        }
        VcpuExit::MmioRead(address, data) => {
            ctx.bus.mmio_read(cpu, address, data).map_err(bus_error)?;
            Next::Continue
        }
        VcpuExit::X86Rdmsr(access) => {
            *access.data = ctx.bus.msr_read(cpu, access.index).map_err(bus_error)?;
            Next::Continue
        }
        VcpuExit::X86Wrmsr(access) => {
            ctx.bus
                .msr_write(cpu, access.index, access.data)
                .map_err(bus_error)?;
            Next::Continue
        }
        VcpuExit::IrqWindowOpen => Next::Continue,
        VcpuExit::Hlt => Next::Halted,
        VcpuExit::IoapicEoi(vector) => {
            ctx.interrupts
                .ioapic_eoi(vector)
                .map_err(|source| VcpuError::Interrupt { cpu, source })?;
            Next::Continue
        }
        VcpuExit::Shutdown => Next::Fault(|cpu, rip| VcpuError::TripleFault { cpu, rip }),
        VcpuExit::InternalError => Next::Internal,
        VcpuExit::FailEntry(reason, _) => {
            return Err(VcpuError::FailEntry { cpu, reason });
        }
        other => Next::Unexpected(format!("{other:?}")),
    };
    Ok((reason, next))
}
