//! A vCPU and its run loop: every KVM_RUN return is counted by reason and
//! dispatched to the bus; the VMM kicks a vCPU out of KVM_RUN with a signal.

use std::cell::Cell;
use std::sync::Mutex;
use std::time::Instant;

use kvm_bindings::{kvm_interrupt, kvm_run};
use kvm_ioctls::{VcpuExit, VcpuFd};
use vmm_sys_util::ioctl::ioctl_with_ref;
use vmm_sys_util::ioctl_iow_nr;
use vmm_sys_util::signal::{register_signal_handler, SIGRTMIN};

use crate::devices::control::RunControl;
use crate::devices::ioapic::IoapicDevice;
use crate::devices::{Bus, BusError};
use crate::exits::{ExitCounters, UserspaceExit};

const KVMIO: u32 = 0xae;
ioctl_iow_nr!(KVM_INTERRUPT, KVMIO, 0x86, kvm_interrupt);

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
    #[error("vCPU {cpu}: KVM_INTERRUPT failed")]
    Inject {
        cpu: usize,
        #[source]
        source: std::io::Error,
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
    #[error("vCPU {cpu}: the userspace irqchip failed: {message}")]
    Irqchip { cpu: usize, message: String },
    #[error(transparent)]
    Placement(#[from] crate::placement::PlacementError),
    #[error("cannot install the vCPU kick signal handler")]
    Signal(#[source] vmm_sys_util::errno::Error),
}

/// The interrupt controller the run loop consults when KVM has none: it
/// decides what to inject before each entry and what a HLT waits for.
pub trait UserspaceInterruptController: Send + Sync {
    /// The highest-priority interrupt the LAPIC would dispatch now.
    fn pending_vector(&self, cpu: usize) -> Result<Option<u8>, String>;
    /// The vector was handed to KVM_INTERRUPT: move it from IRR to ISR.
    fn acknowledge(&self, cpu: usize, vector: u8) -> Result<(), String>;
    /// The guest halted: block until it has an interrupt or the run stops.
    fn wait_for_interrupt(&self, cpu: usize, control: &RunControl) -> Result<(), String>;
}

thread_local! {
    /// This thread's kvm_run, so the kick signal handler can set immediate_exit.
    static KVM_RUN: Cell<*mut kvm_run> = const { Cell::new(std::ptr::null_mut()) };
}

extern "C" fn on_kick_signal(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let run = KVM_RUN.with(Cell::get);
    if !run.is_null() {
        // SAFETY: the pointer is this thread's live kvm_run mapping; it is
        // cleared before the vCPU fd is dropped. A signal handler on the
        // same thread is the only other writer of this byte.
        unsafe { (*run).immediate_exit = 1 };
    }
}

fn kick_signal() -> libc::c_int {
    SIGRTMIN()
}

/// Kicks vCPU threads out of KVM_RUN. Setting immediate_exit in the
/// handler closes the race with a kick that lands just before KVM_RUN.
#[derive(Default)]
pub struct Kicker {
    threads: Mutex<Vec<Option<libc::pthread_t>>>,
}

impl Kicker {
    pub fn new(vcpus: usize) -> Result<Self, VcpuError> {
        register_signal_handler(kick_signal(), on_kick_signal).map_err(VcpuError::Signal)?;
        Ok(Kicker {
            threads: Mutex::new(vec![None; vcpus]),
        })
    }

    fn set_thread(&self, cpu: usize, thread: Option<libc::pthread_t>) {
        let mut threads = self
            .threads
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(slot) = threads.get_mut(cpu) {
            *slot = thread;
        }
    }

    pub fn kick(&self, cpu: usize) {
        let threads = self
            .threads
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(Some(thread)) = threads.get(cpu) {
            // SAFETY: the thread is registered only while its run loop runs
            // (unregistered under this lock before it exits), and the
            // handler for this signal is installed.
            unsafe { libc::pthread_kill(*thread, kick_signal()) };
        }
    }

    pub fn kick_all(&self) {
        let count = self
            .threads
            .lock()
            .map(|threads| threads.len())
            .unwrap_or(0);
        for cpu in 0..count {
            self.kick(cpu);
        }
    }
}

/// What a run loop needs besides its vCPU.
pub struct VcpuContext<'a> {
    pub bus: &'a Bus,
    pub control: &'a RunControl,
    pub counters: &'a ExitCounters,
    pub kicker: &'a Kicker,
    pub irqchip: Option<&'a dyn UserspaceInterruptController>,
    /// Split mode's IOAPIC, told of KVM_EXIT_IOAPIC_EOI.
    pub ioapic: Option<&'a IoapicDevice>,
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
        KVM_RUN.with(|run| run.set(self.fd.get_kvm_run()));
        // SAFETY: pthread_self has no preconditions.
        ctx.kicker
            .set_thread(self.index, Some(unsafe { libc::pthread_self() }));
        ctx.counters.track_this_thread();
        let result = self.run_loop(ctx);
        ctx.kicker.set_thread(self.index, None);
        KVM_RUN.with(|run| run.set(std::ptr::null_mut()));
        result
    }

    fn run_loop(&mut self, ctx: &VcpuContext) -> Result<(), VcpuError> {
        let cpu = self.index;
        while !ctx.control.should_stop() {
            if let Some(irqchip) = ctx.irqchip {
                self.prepare_injection(irqchip)?;
            }
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
                Next::Halted => match ctx.irqchip {
                    Some(irqchip) => irqchip
                        .wait_for_interrupt(cpu, ctx.control)
                        .map_err(|message| VcpuError::Irqchip { cpu, message })?,
                    None => return Err(self.unexpected("HLT with KVM's LAPIC".into())),
                },
                Next::Fault(make) => return Err(make(cpu, self.rip()?)),
                Next::Internal => return Err(self.internal_error()),
                Next::Unexpected(exit) => return Err(self.unexpected(exit)),
            }
            ctx.counters.time_last(returned.elapsed());
        }
        Ok(())
    }

    /// KVM_INTERRUPT the highest pending vector if the guest can take it
    /// now; otherwise ask KVM for an interrupt-window exit.
    fn prepare_injection(
        &mut self,
        irqchip: &dyn UserspaceInterruptController,
    ) -> Result<(), VcpuError> {
        let cpu = self.index;
        let irqchip_error = |message| VcpuError::Irqchip { cpu, message };
        let pending = irqchip.pending_vector(cpu).map_err(irqchip_error)?;
        let run = self.fd.get_kvm_run();
        let Some(vector) = pending else {
            run.request_interrupt_window = 0;
            return Ok(());
        };
        // KVM derives ready_for_interrupt_injection from the guest's
        // interruptibility (RFLAGS.IF and the interrupt shadow on VT-x/SVM,
        // the VIF flag under kvm_pvm), so it alone decides. if_flag does
        // not: in kvm_pvm's native mode it never shows the VIF.
        if run.ready_for_interrupt_injection == 0 {
            run.request_interrupt_window = 1;
            return Ok(());
        }
        run.request_interrupt_window = 0;
        let request = kvm_interrupt {
            irq: u32::from(vector),
        };
        // SAFETY: KVM_INTERRUPT reads one kvm_interrupt from the valid
        // reference; the vCPU fd is ours and not running (same thread).
        let ret = unsafe { ioctl_with_ref(&self.fd, KVM_INTERRUPT(), &request) };
        if ret < 0 {
            return Err(VcpuError::Inject {
                cpu,
                source: std::io::Error::last_os_error(),
            });
        }
        irqchip.acknowledge(cpu, vector).map_err(irqchip_error)
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
            if let Some(ioapic) = ctx.ioapic {
                ioapic
                    .end_of_interrupt(vector)
                    .map_err(|message| VcpuError::Irqchip { cpu, message })?;
            }
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
