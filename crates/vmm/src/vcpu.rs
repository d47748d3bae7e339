//! A vCPU and its run loop: every KVM_RUN return is counted by reason and
//! dispatched to the bus; the run's interrupt controller injects before
//! each entry and serves the HLTs and EOIs that exit.

use std::time::Instant;

use kvm_ioctls::{VcpuExit, VcpuFd};

use crate::bus::{Bus, BusError};
use crate::exits::{ExitCounters, UserspaceExit};
use crate::interrupt::{InterruptController, InterruptError, Kicker};
use crate::run_control::RunControl;
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
        // The vCPU fd, and so this mapping, outlives the loop. A pointer,
        // not `get_kvm_run()` after the exit: kvm-ioctls' `VcpuExit`
        // borrows the fd until the exit is served, and the interrupt
        // controller must see the guest's CR8 (its TPR) before serving it.
        let kvm_run = std::ptr::from_mut(self.fd.get_kvm_run()).cast_const();
        while !ctx.control.should_stop() {
            ctx.interrupts
                .before_entry(cpu, &mut self.fd, ctx.control)
                .map_err(interrupt_error)?;
            let entered = ctx.trace.map(|_| Instant::now());
            let result = self.fd.run();
            let returned = Instant::now();
            // SAFETY: KVM wrote cr8 before KVM_RUN returned and nothing
            // writes it until the next entry; the exit borrows only the
            // exit's own data fields, not this one.
            let cr8 = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*kvm_run).cr8)) };
            ctx.interrupts
                .after_exit(cpu, cr8)
                .map_err(interrupt_error)?;
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
        // With an open bus a refused MSR access is the guest's #GP: a
        // non-zero `error` makes KVM inject it.
        VcpuExit::X86Rdmsr(access) => {
            match ctx.bus.msr_read(cpu, access.index) {
                Ok(value) => *access.data = value,
                Err(err) if ctx.bus.msr_faults_guest(&err) => *access.error = 1,
                Err(err) => return Err(bus_error(err)),
            }
            Next::Continue
        }
        VcpuExit::X86Wrmsr(access) => {
            match ctx.bus.msr_write(cpu, access.index, access.data) {
                Ok(()) => {}
                Err(err) if ctx.bus.msr_faults_guest(&err) => *access.error = 1,
                Err(err) => return Err(bus_error(err)),
            }
            Next::Continue
        }
        VcpuExit::IrqWindowOpen => Next::Continue,
        // Without KVM's LAPIC, a MOV to CR8 that lowers the TPR exits so
        // the VMM can deliver what it unmasks: the next entry's CR8 sync
        // and injection do.
        VcpuExit::SetTpr => Next::Continue,
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use kvm_ioctls::{MsrExitReason, ReadMsrExit, WriteMsrExit};

    use super::*;
    use crate::bus::{fill_le, le_value, DeviceError, MmioDevice, MsrDevice, PioDevice};
    use crate::interrupt::{InterruptSink, Path};

    const PORTS: std::ops::Range<u16> = 0x100..0x108;
    const MMIO: std::ops::Range<u64> = 0xd000_0000..0xd000_1000;
    const MSRS: std::ops::Range<u32> = 0x4b56_4d20..0x4b56_4d24;
    /// What the device answers every read with (its low bytes).
    const READ_VALUE: u64 = 0x1122_3344_5566_7788;
    const CPU: usize = 1;

    /// A device on all three buses: records each write as (cpu, offset or
    /// MSR, value) and answers reads with `READ_VALUE`.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<(usize, u64, u64)>>);

    impl Recorder {
        fn record(&self, cpu: usize, at: u64, value: u64) -> Result<(), DeviceError> {
            self.0.lock().expect("not poisoned").push((cpu, at, value));
            Ok(())
        }

        fn writes(&self) -> Vec<(usize, u64, u64)> {
            self.0.lock().expect("not poisoned").clone()
        }
    }

    impl PioDevice for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn read(&self, _cpu: usize, _offset: u16, data: &mut [u8]) -> Result<(), DeviceError> {
            fill_le(data, READ_VALUE);
            Ok(())
        }
        fn write(&self, cpu: usize, offset: u16, data: &[u8]) -> Result<(), DeviceError> {
            self.record(cpu, offset.into(), le_value(data))
        }
    }

    impl MmioDevice for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn read(&self, _cpu: usize, _offset: u64, data: &mut [u8]) -> Result<(), DeviceError> {
            fill_le(data, READ_VALUE);
            Ok(())
        }
        fn write(&self, cpu: usize, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
            self.record(cpu, offset, le_value(data))
        }
    }

    impl MsrDevice for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn read(&self, _cpu: usize, _msr: u32) -> Result<u64, DeviceError> {
            Ok(READ_VALUE)
        }
        fn write(&self, cpu: usize, msr: u32, value: u64) -> Result<(), DeviceError> {
            self.record(cpu, msr.into(), value)
        }
    }

    /// An interrupt controller that only records the IOAPIC EOIs it hears of.
    #[derive(Default)]
    struct EoiRecorder(Mutex<Vec<u8>>);

    impl InterruptController for EoiRecorder {
        fn sink(&self, _path: Path) -> Result<Box<dyn InterruptSink>, InterruptError> {
            Err(InterruptError::NoLapic(0))
        }
        fn halted(&self, _cpu: usize, _control: &RunControl) -> Result<(), InterruptError> {
            Ok(())
        }
        fn ioapic_eoi(&self, vector: u8) -> Result<(), InterruptError> {
            self.0.lock().expect("not poisoned").push(vector);
            Ok(())
        }
    }

    /// What `handle_exit` is given, with the recorder on every bus.
    struct Machine {
        bus: Bus,
        device: Arc<Recorder>,
        control: RunControl,
        counters: ExitCounters,
        kicker: Kicker,
        interrupts: EoiRecorder,
    }

    impl Machine {
        fn new() -> Self {
            let device = Arc::new(Recorder::default());
            let mut bus = Bus::default();
            bus.add_pio(PORTS, device.clone());
            bus.add_mmio(MMIO, device.clone());
            bus.add_msr(MSRS, device.clone());
            Machine {
                bus,
                device,
                control: RunControl::default(),
                counters: ExitCounters::default(),
                kicker: Kicker::default(),
                interrupts: EoiRecorder::default(),
            }
        }

        fn handle(&self, exit: VcpuExit) -> Result<(UserspaceExit, Next), VcpuError> {
            let ctx = VcpuContext {
                bus: &self.bus,
                control: &self.control,
                counters: &self.counters,
                kicker: &self.kicker,
                interrupts: &self.interrupts,
                trace: None,
            };
            handle_exit(CPU, exit, &ctx)
        }

        /// Handles an exit that must succeed and let the guest go on.
        fn continues(&self, exit: VcpuExit, reason: UserspaceExit) {
            let handled = self.handle(exit).expect("handled");
            assert_eq!(handled.0, reason);
            assert!(matches!(handled.1, Next::Continue), "{reason}");
        }

        fn counted(&self, reason: UserspaceExit) -> u64 {
            self.counters.snapshot()[&reason]
        }
    }

    /// The bus error a failed exit carries, after checking its vCPU.
    fn bus_error(result: Result<(UserspaceExit, Next), VcpuError>) -> BusError {
        match result {
            Err(VcpuError::Bus { cpu: CPU, source }) => source,
            Err(other) => panic!("expected a bus error on vCPU {CPU}, got {other}"),
            Ok((reason, _)) => panic!("expected a bus error, handled as {reason}"),
        }
    }

    #[test]
    fn port_io_reaches_the_owning_device_at_its_offset() {
        let machine = Machine::new();
        machine.continues(VcpuExit::IoOut(0x102, &[0x34, 0x12]), UserspaceExit::Io);
        let mut data = [0u8; 2];
        machine.continues(VcpuExit::IoIn(0x106, &mut data), UserspaceExit::Io);
        assert_eq!(data, [0x88, 0x77]);
        assert_eq!(machine.device.writes(), [(CPU, 2, 0x1234)]);
        assert_eq!(machine.counted(UserspaceExit::Io), 2);
    }

    #[test]
    fn port_io_nobody_owns_fails_naming_the_port_and_is_still_counted() {
        let machine = Machine::new();
        let err = bus_error(machine.handle(VcpuExit::IoOut(0x108, &[1])));
        assert!(
            matches!(err, BusError::UnownedPort { port: 0x108, .. }),
            "{err}"
        );
        let mut data = [0u8; 1];
        let err = bus_error(machine.handle(VcpuExit::IoIn(0xff, &mut data)));
        assert!(
            matches!(err, BusError::UnownedPort { port: 0xff, .. }),
            "{err}"
        );
        assert_eq!(machine.counted(UserspaceExit::Io), 2);
        assert!(machine.device.writes().is_empty());
    }

    #[test]
    fn mmio_reaches_the_owning_device_and_unbacked_addresses_fail() {
        let machine = Machine::new();
        machine.continues(
            VcpuExit::MmioWrite(0xd000_00b0, &[0, 0, 0, 0]),
            UserspaceExit::Mmio,
        );
        let mut data = [0u8; 4];
        machine.continues(
            VcpuExit::MmioRead(0xd000_0020, &mut data),
            UserspaceExit::Mmio,
        );
        assert_eq!(data, [0x88, 0x77, 0x66, 0x55]);
        assert_eq!(machine.device.writes(), [(CPU, 0xb0, 0)]);
        let err = bus_error(machine.handle(VcpuExit::MmioRead(0xd000_1000, &mut data)));
        assert!(
            matches!(
                err,
                BusError::UnownedMmio {
                    address: 0xd000_1000,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(machine.counted(UserspaceExit::Mmio), 3);
    }

    fn rdmsr<'a>(index: u32, error: &'a mut u8, data: &'a mut u64) -> VcpuExit<'a> {
        VcpuExit::X86Rdmsr(ReadMsrExit {
            error,
            reason: MsrExitReason::Unknown,
            index,
            data,
        })
    }

    #[test]
    fn msr_exits_read_and_write_the_owning_device() {
        let machine = Machine::new();
        let (mut error, mut value) = (0u8, 0u64);
        machine.continues(
            rdmsr(0x4b56_4d21, &mut error, &mut value),
            UserspaceExit::MsrRead,
        );
        assert_eq!(value, READ_VALUE);
        machine.continues(
            VcpuExit::X86Wrmsr(WriteMsrExit {
                error: &mut error,
                reason: MsrExitReason::Unknown,
                index: 0x4b56_4d23,
                data: 7,
            }),
            UserspaceExit::MsrWrite,
        );
        assert_eq!(machine.device.writes(), [(CPU, 0x4b56_4d23, 7)]);
        let err = bus_error(machine.handle(rdmsr(0x10, &mut error, &mut value)));
        assert!(
            matches!(err, BusError::UnownedMsr { msr: 0x10, .. }),
            "{err}"
        );
        assert_eq!(error, 0, "the VMM fails the run instead of injecting #GP");
    }

    #[test]
    fn hlt_hands_the_vcpu_to_the_controller_and_a_window_just_continues() {
        let machine = Machine::new();
        let (reason, next) = machine.handle(VcpuExit::Hlt).expect("handled");
        assert_eq!(reason, UserspaceExit::Hlt);
        assert!(matches!(next, Next::Halted));
        machine.continues(VcpuExit::IrqWindowOpen, UserspaceExit::IrqWindow);
        assert_eq!(machine.counted(UserspaceExit::Hlt), 1);
        assert_eq!(machine.counted(UserspaceExit::IrqWindow), 1);
    }

    #[test]
    fn an_ioapic_eoi_reaches_the_interrupt_controller() {
        let machine = Machine::new();
        machine.continues(VcpuExit::IoapicEoi(0x31), UserspaceExit::IoapicEoi);
        assert_eq!(*machine.interrupts.0.lock().expect("not poisoned"), [0x31]);
    }

    #[test]
    fn shutdown_and_internal_errors_stop_the_vcpu_with_their_cause() {
        let machine = Machine::new();
        let (reason, next) = machine.handle(VcpuExit::Shutdown).expect("handled");
        assert_eq!(reason, UserspaceExit::Other);
        let Next::Fault(make) = next else {
            panic!("a shutdown must fault the run");
        };
        assert!(matches!(
            make(CPU, 0x1000),
            VcpuError::TripleFault {
                cpu: CPU,
                rip: 0x1000
            }
        ));
        let (_, next) = machine.handle(VcpuExit::InternalError).expect("handled");
        assert!(matches!(next, Next::Internal));
        let err = machine
            .handle(VcpuExit::FailEntry(0x21, 0))
            .err()
            .expect("a failed entry fails at once");
        assert!(matches!(
            err,
            VcpuError::FailEntry {
                cpu: CPU,
                reason: 0x21
            }
        ));
        let (_, next) = machine.handle(VcpuExit::Unknown).expect("handled");
        assert!(matches!(next, Next::Unexpected(ref exit) if exit == "Unknown"));
        assert_eq!(machine.counted(UserspaceExit::Other), 4);
    }
}
