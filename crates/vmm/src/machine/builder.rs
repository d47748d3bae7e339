//! Assembly: the VM, its memory and vCPUs booted to the guest's entry,
//! the interrupt controllers its irqchip mode asks for, and the devices
//! on the bus (the standard ones, then the bench's). Nothing runs yet.

use std::sync::Arc;

use kvm_bindings::{CpuId, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Kvm, VcpuFd};
use vm_memory::{Bytes, GuestAddress};

use super::{Attach, AttachDevices, MachineError};
use crate::abi::{self, SharedPage};
use crate::boot::{self, CpuidOptions};
use crate::bus::Bus;
use crate::config::params::IpiParams;
use crate::config::{
    ApicMode, BenchConfig, BenchParams, GuestExec, GuestIdle, IrqSource, Irqchip, Pin, Watchdog,
};
use crate::devices::control::{ControlPort, NoopPort, REGISTER32_PORTS};
use crate::devices::serial::{Serial, SERIAL_PORTS};
use crate::exec::HostExec;
use crate::exits::ExitAccounting;
use crate::interrupt::{
    self, fixed_msi, DeviceLine, InterruptController, InterruptError, InterruptSink, Kicker, Path,
    Setup, APIC_TIMER_HZ,
};
use crate::memory::{self, GuestMemory};
use crate::placement::{Placement, PlacementError};
use crate::run_control::RunControl;
use crate::stats::{StatsError, StatsFd};
use crate::trace::{TraceRecorder, TracedSink, Tracing};
use crate::vcpu::Vcpu;
use crate::vm::{Vm, VmError};

/// A machine built and booted to its first instruction, nothing running.
pub(super) struct Assembled<'c> {
    pub(super) config: &'c BenchConfig,
    pub(super) memory: GuestMemory,
    pub(super) vm: Arc<Vm>,
    pub(super) vcpus: Vec<Vcpu>,
    pub(super) guest_exec: GuestExec,
    pub(super) tsc_khz: u64,
    /// KVM's `irq_injections` counts every delivery on this host.
    pub(super) injections_counted: bool,
    pub(super) watchdog: Watchdog,
    pub(super) plumbing: RunPlumbing,
    pub(super) bus: Arc<Bus>,
    pub(super) interrupts: Arc<dyn InterruptController>,
    /// Where the bench's device raises its interrupts.
    pub(super) sink: Box<dyn InterruptSink>,
    pub(super) recorder: Option<Arc<TraceRecorder>>,
}

/// What every run of a VM has, whichever kernel it boots (dirq's guest or
/// a Multiboot one): where its threads run, the exit counters, the run's
/// control, the kicker that gets a vCPU thread out of KVM_RUN, and the
/// serial console.
#[derive(Clone)]
pub(crate) struct RunPlumbing {
    pub placement: Arc<Placement>,
    pub accounting: Arc<ExitAccounting>,
    pub control: Arc<RunControl>,
    pub kicker: Arc<Kicker>,
    pub serial: Arc<Serial>,
}

impl RunPlumbing {
    /// The plumbing of a run of `vcpus` placed as `pin` asks, and its bus
    /// with the serial console on it.
    pub(crate) fn new<E>(vcpus: &[Vcpu], pin: Pin, echo_console: bool) -> Result<(Self, Bus), E>
    where
        E: From<PlacementError> + From<StatsError> + From<InterruptError>,
    {
        let placement = Placement::plan(vcpus.len(), pin)?;
        let stats = vcpus
            .iter()
            .map(|vcpu| StatsFd::open(&vcpu.fd))
            .collect::<Result<_, _>>()?;
        let kicker = Arc::new(Kicker::new(vcpus.len())?);
        let plumbing = RunPlumbing {
            placement: Arc::new(placement),
            accounting: Arc::new(ExitAccounting::new(stats, kicker.clone())),
            control: Arc::new(RunControl::default()),
            kicker,
            serial: Arc::new(Serial::new(echo_console)),
        };
        let mut bus = Bus::default();
        bus.add_pio(
            abi::PORT_SERIAL..abi::PORT_SERIAL + SERIAL_PORTS,
            plumbing.serial.clone(),
        );
        Ok((plumbing, bus))
    }

    /// The interrupt controllers `irqchip` asks for, their devices on `bus`.
    pub(crate) fn interrupts(
        &self,
        irqchip: Irqchip,
        vm: &Arc<Vm>,
        bus: &mut Bus,
        vcpus: &[Vcpu],
        tsc_khz: u64,
    ) -> Result<Arc<dyn InterruptController>, InterruptError> {
        interrupt::create(
            irqchip,
            Setup {
                vm,
                bus,
                boot_vcpu: &vcpus[0].fd,
                vcpus: vcpus.len(),
                tsc_khz,
                kicker: &self.kicker,
            },
        )
    }
}

impl<'c> Assembled<'c> {
    pub(super) fn new(
        config: &'c BenchConfig,
        echo_console: bool,
        attach: Option<AttachDevices<'_>>,
        trace: Option<Tracing>,
    ) -> Result<Self, MachineError> {
        let kvm = Kvm::new().map_err(VmError::OpenKvm)?;
        let memory = memory::create_guest_memory()?;
        let entry = memory::load_guest_kernel(&memory)?;
        boot::write_boot_structures(&memory)?;

        let common = &config.common;
        let vm = Arc::new(Vm::new(&kvm, &memory, common.halt)?);
        interrupt::prepare_vm(common.irqchip, &vm)?;
        let vcpus = create_vcpus(&kvm, &vm, config, entry)?;
        let host = HostExec::detect_on(&vcpus[0].fd);
        let guest_exec = host.resolve(common.guest_exec)?;
        if let (true, Some(why)) = (pv_send_ipi(config), host.hypercalls_unavailable()) {
            return Err(MachineError::Unavailable {
                feature: "PV send-IPI",
                why,
            });
        }
        if host.is_pvm() {
            vm.disable_hypercall_patching()?;
        }
        let tsc_khz = u64::from(vcpus[0].fd.get_tsc_khz().map_err(MachineError::TscKhz)?);
        let watchdog = config.watchdog();
        memory.write_obj(
            boot_parameters(config, guest_exec, tsc_khz, &watchdog),
            GuestAddress(abi::SHARED_GPA),
        )?;

        let (plumbing, mut bus) =
            RunPlumbing::new::<MachineError>(&vcpus, common.pin, echo_console)?;
        bus.add_pio(
            abi::PORT_CONTROL..abi::PORT_CONTROL + REGISTER32_PORTS,
            Arc::new(ControlPort::new(
                plumbing.control.clone(),
                plumbing.accounting.clone(),
            )),
        );
        bus.add_pio(
            abi::PORT_NOOP..abi::PORT_NOOP + REGISTER32_PORTS,
            Arc::new(NoopPort),
        );
        let interrupts = plumbing.interrupts(common.irqchip, &vm, &mut bus, &vcpus, tsc_khz)?;
        if let Some(attach) = attach {
            attach(&mut Attach {
                bus: &mut bus,
                vm: &vm,
                memory: &memory,
                control: &plumbing.control,
                interrupts: &*interrupts,
            })?;
        }
        let sink = interrupts.sink(Path::choose(
            common.irqchip,
            device_line(&config.params),
            common.inject,
        ))?;
        let recorder = trace.map(|tracing| {
            Arc::new(TraceRecorder::new(
                vcpus.len(),
                tracing,
                plumbing.accounting.clone(),
            ))
        });
        let sink: Box<dyn InterruptSink> = match &recorder {
            Some(recorder) => Box::new(TracedSink {
                inner: sink,
                recorder: recorder.clone(),
            }),
            None => sink,
        };
        Ok(Assembled {
            config,
            memory,
            vm,
            vcpus,
            guest_exec,
            tsc_khz,
            injections_counted: host.injections_count_every_delivery(),
            watchdog,
            plumbing,
            bus: Arc::new(bus),
            interrupts,
            sink,
            recorder,
        })
    }
}

/// The config's vCPUs in long mode at the guest's entry, with its CPUID.
fn create_vcpus(
    kvm: &Kvm,
    vm: &Vm,
    config: &BenchConfig,
    entry: GuestAddress,
) -> Result<Vec<Vcpu>, MachineError> {
    let supported = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(MachineError::Cpuid)?;
    let cpuid_options = CpuidOptions {
        tsc_deadline: interrupt::offers_tsc_deadline(config.common.irqchip, kvm),
        pv_eoi: config.common.pv_eoi,
        pv_send_ipi: pv_send_ipi(config),
    };
    vcpus_with(
        vm,
        config.common.vcpus as usize,
        &supported,
        &cpuid_options,
        |fd, cpu, cpuid| Ok(boot::configure_vcpu(fd, cpu, entry, cpuid)?),
    )
}

/// `count` vCPUs, each with its CPUID (`supported` as `options` allow)
/// and set up by `configure` for the kernel's entry.
pub(crate) fn vcpus_with<E: From<VmError>>(
    vm: &Vm,
    count: usize,
    supported: &CpuId,
    options: &CpuidOptions,
    mut configure: impl FnMut(&VcpuFd, usize, &CpuId) -> Result<(), E>,
) -> Result<Vec<Vcpu>, E> {
    (0..count)
        .map(|cpu| {
            let fd = vm
                .fd
                .create_vcpu(cpu as u64)
                .map_err(|source| VmError::Kvm {
                    what: "KVM_CREATE_VCPU",
                    source,
                })?;
            configure(&fd, cpu, &boot::vcpu_cpuid(supported, cpu, options))?;
            Ok(Vcpu { index: cpu, fd })
        })
        .collect()
}

fn boot_parameters(
    config: &BenchConfig,
    guest_exec: GuestExec,
    tsc_khz: u64,
    watchdog: &Watchdog,
) -> SharedPage {
    let common = &config.common;
    let mut page = SharedPage {
        magic: abi::MAGIC,
        abi_version: abi::VERSION,
        x2apic: u32::from(common.apic == ApicMode::X2apic),
        pv_eoi: u32::from(common.pv_eoi),
        idle_busy: u32::from(common.guest_idle == GuestIdle::Busy),
        num_cpus: common.vcpus,
        guest_exec: if guest_exec == GuestExec::Native {
            abi::EXEC_PVM_NATIVE
        } else {
            abi::EXEC_PLAIN
        },
        tsc_khz,
        // A guest that bounds its loops gives up in time to report why.
        give_up_ms: u32::try_from(watchdog.timeout.as_millis() / 2).unwrap_or(u32::MAX),
        apic_timer_hz: APIC_TIMER_HZ,
        samples_gpa: memory::SAMPLES_GPA,
        samples_capacity: memory::SAMPLES_CAPACITY,
        ..SharedPage::default()
    };
    config.params.boot(&mut page);
    if let Some(attack) = common.attack {
        attack.plan().write(&mut page);
    }
    page
}

/// Whether the guest sends its broadcast IPIs by hypercall.
fn pv_send_ipi(config: &BenchConfig) -> bool {
    matches!(
        config.params,
        BenchParams::Ipi(IpiParams {
            pv_send_ipi: true,
            ..
        })
    )
}

/// What the benchmark device is wired to: an MSI to vCPU 0, or (as
/// irq-latency's `--source` may say) the IOAPIC input the guest routes to
/// the same vector.
fn device_line(params: &BenchParams) -> DeviceLine {
    let source = match params {
        BenchParams::IrqLatency(params) => params.source,
        _ => IrqSource::Msi,
    };
    match source {
        IrqSource::Msi => DeviceLine::Msi(fixed_msi(0, abi::VECTOR_DEVICE)),
        IrqSource::Ioapic => DeviceLine::IoapicPin(abi::DEVICE_IOAPIC_PIN),
    }
}
