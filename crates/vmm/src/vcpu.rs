//! A vCPU and its run loop: every KVM_RUN return is counted by reason and
//! dispatched to the bus; the run's interrupt controller injects before
//! each entry and serves the HLTs and EOIs that exit.

use std::time::Instant;

use kvm_ioctls::{VcpuExit, VcpuFd};

use crate::devices::control::RunControl;
use crate::devices::{Bus, BusError};
use crate::exits::{ExitCounters, UserspaceExit};
use crate::interrupt::{InterruptController, InterruptError, Kicker};

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
            let result = self.fd.run();
            let returned = Instant::now();
            let next = match result {
                Ok(exit) => handle_exit(cpu, exit, ctx)?,
                Err(err) if err.errno() == libc::EINTR => {
                    ctx.counters.count(UserspaceExit::Interrupted);
                    self.fd.set_kvm_immediate_exit(0);
                    Next::Continue
                }
                Err(err) if err.errno() == libc::EAGAIN => Next::Continue,
                Err(source) => return Err(VcpuError::Run { cpu, source }),
            };
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

fn handle_exit(cpu: usize, exit: VcpuExit, ctx: &VcpuContext) -> Result<Next, VcpuError> {
    let count = |reason| ctx.counters.count(reason);
    let bus_error = |source| VcpuError::Bus { cpu, source };
    let next = match exit {
        VcpuExit::IoOut(port, data) => {
            count(UserspaceExit::Io);
            ctx.bus.pio_write(cpu, port, data).map_err(bus_error)?;
            Next::Continue
        }
        VcpuExit::IoIn(port, data) => {
            count(UserspaceExit::Io);
            ctx.bus.pio_read(cpu, port, data).map_err(bus_error)?;
            Next::Continue
        }
        VcpuExit::MmioWrite(address, data) => {
            count(UserspaceExit::Mmio);
            ctx.bus.mmio_write(cpu, address, data).map_err(bus_error)?;
            Next::Continue
        }
        VcpuExit::MmioRead(address, data) => {
            count(UserspaceExit::Mmio);
            ctx.bus.mmio_read(cpu, address, data).map_err(bus_error)?;
            Next::Continue
        }
        VcpuExit::X86Rdmsr(access) => {
            count(UserspaceExit::MsrRead);
            *access.data = ctx.bus.msr_read(cpu, access.index).map_err(bus_error)?;
            Next::Continue
        }
        VcpuExit::X86Wrmsr(access) => {
            count(UserspaceExit::MsrWrite);
            ctx.bus
                .msr_write(cpu, access.index, access.data)
                .map_err(bus_error)?;
            Next::Continue
        }
        VcpuExit::IrqWindowOpen => {
            count(UserspaceExit::IrqWindow);
            Next::Continue
        }
        VcpuExit::Hlt => {
            count(UserspaceExit::Hlt);
            Next::Halted
        }
        VcpuExit::IoapicEoi(vector) => {
            count(UserspaceExit::IoapicEoi);
            ctx.interrupts
                .ioapic_eoi(vector)
                .map_err(|source| VcpuError::Interrupt { cpu, source })?;
            Next::Continue
        }
        VcpuExit::Shutdown => {
            count(UserspaceExit::Other);
            Next::Fault(|cpu, rip| VcpuError::TripleFault { cpu, rip })
        }
        VcpuExit::InternalError => {
            count(UserspaceExit::Other);
            Next::Internal
        }
        VcpuExit::FailEntry(reason, _) => {
            count(UserspaceExit::Other);
            return Err(VcpuError::FailEntry { cpu, reason });
        }
        other => {
            count(UserspaceExit::Other);
            Next::Unexpected(format!("{other:?}"))
        }
    };
    Ok(next)
}
