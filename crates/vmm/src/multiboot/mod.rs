//! Boots a Multiboot v1 kernel that is not dirq's own (kvm-unit-tests'
//! `.flat` files, ELF32 or ELF64) on the minimal PC those kernels expect,
//! through any of dirq's interrupt paths, and counts its exits as dirq's
//! own runs are counted.
//!
//! The PC: RAM from 0 (at least 64 MiB), the boot CPU in 32-bit protected
//! mode at the kernel's entry (`boot32`) and the others waiting for
//! INIT/SIPI; serial at 0x3f8, the PICs' mask registers and the ELCR,
//! fw_cfg (CPU count, RAM size), an `isa-debug-exit` port at 0xf4 (the
//! run ends at its first write), pc-testdev's IRQ lines at 0x2000,
//! RSDP/RSDT/FADT with the PM timer at 0x608 (`acpi`), and the run's
//! interrupt controllers. dirq's own control ports are absent. Unclaimed
//! ports and MMIO answer as an open PC bus does, and unclaimed MSRs raise
//! #GP (`bus::OpenBus`): such a kernel probes for hardware.

pub mod acpi;
pub mod boot32;
pub mod loader;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kvm_bindings::KVM_MAX_CPUID_ENTRIES;
use kvm_ioctls::Kvm;
use serde::{Deserialize, Serialize};
use vm_memory::{GuestAddress, GuestMemoryMmap};

use crate::abi;
use crate::boot::CpuidOptions;
use crate::bus::{OpenBus, UnclaimedAccess};
use crate::config::{HaltMode, Irqchip, Pin};
use crate::devices::debug_exit::{self, DebugExit};
use crate::devices::fw_cfg::{self, FwCfg};
use crate::devices::pic_masks::{self, Elcr, PicMasks};
use crate::devices::pm_timer::{self, PmTimer};
use crate::devices::testdev::{self, TestDevIrqLines};
use crate::exec::HostExec;
use crate::exits::{ExitSummary, ExitsError};
use crate::interrupt::{self, InterruptError};
use crate::machine::{vcpus_with, RunPlumbing};
use crate::memory::{GuestMemory, MemoryError};
use crate::placement::PlacementError;
use crate::report::with_causes;
use crate::stats::StatsError;
use crate::vm::{Vm, VmError};

/// The least RAM a Multiboot run gets: kvm-unit-tests' kernels alone
/// reach past 16 MiB (their .bss).
pub const MIN_RAM_MIB: u32 = 64;
pub const DEFAULT_RAM_MIB: u32 = 128;
/// Below the 3 GiB the IOAPIC and LAPIC pages sit above.
pub const MAX_RAM_MIB: u32 = 3072;

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error(transparent)]
    Vm(#[from] VmError),
    #[error(transparent)]
    Memory(#[from] MemoryError),
    #[error("cannot load the kernel")]
    Load(#[from] loader::LoaderError),
    #[error("cannot write the ACPI tables")]
    Acpi(#[source] vm_memory::GuestMemoryError),
    #[error(transparent)]
    Boot(#[from] boot32::Boot32Error),
    #[error(transparent)]
    Interrupt(#[from] InterruptError),
    #[error("cannot open a vCPU stats fd")]
    Stats(#[from] StatsError),
    #[error("cannot read the exit counters")]
    Exits(#[from] ExitsError),
    #[error(transparent)]
    Placement(#[from] PlacementError),
    #[error("KVM_GET_SUPPORTED_CPUID failed")]
    Cpuid(#[source] kvm_ioctls::Error),
    #[error("KVM_GET_TSC_KHZ failed")]
    TscKhz(#[source] kvm_ioctls::Error),
    #[error("RAM must be {MIN_RAM_MIB}-{MAX_RAM_MIB} MiB, got {0}")]
    RamSize(u32),
    #[error("vCPUs must be 1-{max}, got {0}", max = abi::MAX_CPUS)]
    Vcpus(u32),
}

/// One boot of a Multiboot kernel.
#[derive(Clone, Debug)]
pub struct KernelConfig {
    pub kernel: Vec<u8>,
    pub cmdline: String,
    /// The one Multiboot module (kvm-unit-tests: its environment).
    pub module: Option<Vec<u8>>,
    pub irqchip: Irqchip,
    pub halt: HaltMode,
    pub vcpus: u32,
    pub ram_mib: u32,
    pub timeout: Duration,
    pub pin: Pin,
}

/// How the kernel's run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "detail")]
pub enum KernelEnd {
    /// It wrote the exit port: QEMU's exit status `(value << 1) | 1`.
    Exited(u32),
    /// The watchdog stopped it.
    TimedOut,
    /// A vCPU stopped on an error (triple fault, emulation failure...).
    Failed(String),
}

/// What one boot produced.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KernelOutcome {
    pub end: KernelEnd,
    pub console: String,
    /// From the boot CPU's first entry to the end.
    pub exits: ExitSummary,
    /// Accesses the open bus answered, by address.
    pub unclaimed: Vec<(String, u64)>,
    pub elapsed_s: f64,
    /// The guest TSC's rate, for figures a kernel prints in cycles.
    pub tsc_khz: u64,
}

/// Boots `config`'s kernel and runs it until it writes the exit port, a
/// vCPU fails, or the watchdog fires; never longer than the timeout plus
/// the threads' stop grace.
pub fn run(config: &KernelConfig, echo_console: bool) -> Result<KernelOutcome, KernelError> {
    if !(MIN_RAM_MIB..=MAX_RAM_MIB).contains(&config.ram_mib) {
        return Err(KernelError::RamSize(config.ram_mib));
    }
    if config.vcpus == 0 || config.vcpus as usize > abi::MAX_CPUS {
        return Err(KernelError::Vcpus(config.vcpus));
    }
    let kvm = Kvm::new().map_err(VmError::OpenKvm)?;
    let ram = u64::from(config.ram_mib) << 20;
    let memory: GuestMemory =
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), (config.ram_mib as usize) << 20)])
            .map_err(MemoryError::Allocate)?;
    let loaded = loader::load(
        &memory,
        &config.kernel,
        &config.cmdline,
        config.module.as_deref(),
    )?;
    acpi::write_tables(&memory).map_err(KernelError::Acpi)?;

    let vm = Arc::new(Vm::new(&kvm, &memory, config.halt)?);
    interrupt::prepare_vm(config.irqchip, &vm)?;
    let supported = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(KernelError::Cpuid)?;
    let options = CpuidOptions {
        tsc_deadline: interrupt::offers_tsc_deadline(config.irqchip, &kvm),
        pv_eoi: false,
        pv_send_ipi: false,
    };
    let vcpus = vcpus_with(
        &vm,
        config.vcpus as usize,
        &supported,
        &options,
        |fd, cpu, cpuid| -> Result<(), KernelError> {
            Ok(boot32::configure(
                fd,
                cpu,
                cpuid,
                (cpu == 0).then_some(loaded),
            )?)
        },
    )?;
    if HostExec::detect_on(&vcpus[0].fd).is_pvm() {
        // A VMCALL then raises #UD at once instead of livelocking.
        vm.disable_hypercall_patching()?;
    }
    let tsc_khz = u64::from(vcpus[0].fd.get_tsc_khz().map_err(KernelError::TscKhz)?);

    let (plumbing, mut bus) = RunPlumbing::new::<KernelError>(&vcpus, config.pin, echo_console)?;
    let exit_port = Arc::new(DebugExit::new(plumbing.control.clone()));
    let open_bus = Arc::new(OpenBus::default());
    bus.set_open_bus(open_bus.clone());
    bus.add_pio(
        debug_exit::PORT..debug_exit::PORT + debug_exit::PORTS,
        exit_port.clone(),
    );
    bus.add_pio(
        fw_cfg::PORT..fw_cfg::PORT + fw_cfg::PORTS,
        Arc::new(FwCfg::new(
            u16::try_from(config.vcpus).unwrap_or(u16::MAX),
            ram,
        )),
    );
    for port in [pic_masks::MASTER_PORT, pic_masks::SLAVE_PORT] {
        bus.add_pio(
            port..port + pic_masks::PIC_PORTS,
            Arc::new(PicMasks::default()),
        );
    }
    bus.add_pio(
        pic_masks::ELCR_PORT..pic_masks::ELCR_PORT + pic_masks::ELCR_PORTS,
        Arc::new(Elcr::default()),
    );
    bus.add_pio(
        pm_timer::PORT..pm_timer::PORT + pm_timer::PORTS,
        Arc::new(PmTimer::new()),
    );
    let interrupts = plumbing.interrupts(config.irqchip, &vm, &mut bus, &vcpus, tsc_khz)?;
    interrupts.hold_application_processors();
    bus.add_pio(
        testdev::IRQ_PORT..testdev::IRQ_PORT + testdev::IRQ_LINES,
        Arc::new(TestDevIrqLines {
            interrupts: interrupts.clone(),
        }),
    );

    let start = plumbing.accounting.snapshot()?;
    let started = Instant::now();
    let running = plumbing.start(vcpus, Arc::new(bus), interrupts, None);
    let finished = running.stop_at(&plumbing, started + config.timeout, []);
    let elapsed = started.elapsed();
    let end = plumbing.accounting.snapshot()?;

    let mut failures = Vec::new();
    for (cpu, thread) in running.vcpus.into_iter().enumerate() {
        if !thread.is_finished() {
            failures.push(format!("vCPU {cpu} did not stop (left running)"));
            continue;
        }
        match thread.join() {
            Ok((Ok(()), _)) => {}
            Ok((Err(err), rip)) => failures.push(match rip {
                Some(rip) => format!("{} (rip {rip:#x})", with_causes(&err)),
                None => with_causes(&err),
            }),
            Err(_) => failures.push(format!("vCPU {cpu} panicked")),
        }
    }
    let end_state = match (exit_port.status(), finished) {
        (Some(status), _) => KernelEnd::Exited(status),
        (None, _) if !failures.is_empty() => KernelEnd::Failed(failures.join("; ")),
        (None, false) => KernelEnd::TimedOut,
        (None, true) => KernelEnd::Failed("the run stopped without an exit status".into()),
    };
    Ok(KernelOutcome {
        end: end_state,
        console: plumbing.serial.output(),
        exits: ExitSummary::between(&start, &end, 0),
        unclaimed: open_bus
            .counts()
            .into_iter()
            .map(|(access, count): (UnclaimedAccess, u64)| (access.to_string(), count))
            .collect(),
        elapsed_s: elapsed.as_secs_f64(),
        tsc_khz,
    })
}
