//! One boot of the guest: builds the VM, its vCPUs and devices for a
//! `BenchConfig`, runs them on their own threads under a watchdog, and
//! hands back what the guest and the device measured.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dirq_stats::f64_of;
use serde::{Deserialize, Serialize};

use kvm_bindings::{CpuId, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Kvm, VcpuFd};
use vm_memory::{Bytes, GuestAddress};

use crate::abi::{self, SharedPage};
use crate::bench::cycles_to_ns;
use crate::boot::{self, BootError, CpuidOptions};
use crate::bus::{Bus, DeviceError};
use crate::config::params::IpiParams;
use crate::config::{
    ApicMode, Bench, BenchConfig, BenchParams, GuestExec, GuestIdle, IrqSource, Irqchip, Pin,
    Watchdog, MAX_TIMEOUT_MS,
};
use crate::devices::control::{ControlPort, NoopPort, REGISTER32_PORTS};
use crate::devices::msi_device::{DeviceEnv, MsiDeviceError};
use crate::devices::serial::{Serial, SERIAL_PORTS};
use crate::exec::{ExecError, ExecEvidence, HostExec, VcpuExecStats, NATIVE_MIN_EXITS};
use crate::exits::{ExitAccounting, ExitSnapshot, ExitSummary, ExitsError, KvmStat, UserspaceExit};
use crate::interrupt::{
    self, fixed_msi, DeviceLine, InterruptController, InterruptError, InterruptSink, Kicker, Path,
    Setup, APIC_TIMER_HZ,
};
use crate::memory::{self, GuestMemory, MemoryError};
use crate::placement::{Placement, PlacementError};
use crate::results::{below_resolution, beyond_window, Evidence};
use crate::run_control::{GuestEnd, RunControl, Window};
use crate::stats::{StatsError, StatsFd};
use crate::trace::{RunTrace, TraceRecorder, TracedSink, Tracing};
use crate::vcpu::{Vcpu, VcpuContext, VcpuError};
use crate::vm::{Vm, VmError};

#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    #[error(transparent)]
    Vm(#[from] VmError),
    #[error(transparent)]
    Memory(#[from] MemoryError),
    #[error(transparent)]
    Boot(#[from] BootError),
    #[error(transparent)]
    Vcpu(#[from] VcpuError),
    #[error("cannot open a vCPU stats fd")]
    Stats(#[from] StatsError),
    #[error("cannot access guest memory")]
    GuestMemory(#[from] vm_memory::GuestMemoryError),
    #[error("KVM_GET_SUPPORTED_CPUID failed")]
    Cpuid(#[source] kvm_ioctls::Error),
    #[error("KVM_GET_TSC_KHZ failed")]
    TscKhz(#[source] kvm_ioctls::Error),
    #[error(
        "the guest did not finish within {} (watchdog{}): it hung, or runs far slower than expected; {progress}; vCPUs stopped at {rips}",
        watchdog_length(.watchdog.timeout),
        watchdog_origin(.watchdog)
    )]
    Timeout {
        watchdog: Watchdog,
        /// What the guest had done by then, as its shared page said.
        progress: String,
        rips: String,
    },
    #[error("the guest reported a failure: {0}")]
    Guest(String),
    #[error("the benchmark device failed")]
    Device(#[from] MsiDeviceError),
    #[error("the guest claims {written} samples written; the run asked for {expected} (--count) and its buffer holds {capacity}")]
    SampleCount {
        written: u64,
        expected: u64,
        capacity: u64,
    },
    #[error("sample {index} is {cycles} TSC cycles ({ns} ns), {rule}")]
    SampleBeyondWindow {
        index: usize,
        cycles: u64,
        ns: u64,
        rule: String,
    },
    #[error("the guest finished without {0}")]
    Protocol(&'static str),
    #[error(transparent)]
    Interrupt(#[from] InterruptError),
    #[error("cannot set up the {device}")]
    DeviceSetup {
        device: &'static str,
        #[source]
        source: DeviceError,
    },
    #[error("the {0} irqchip has no IOAPIC in the VMM, which this bench drives")]
    NoVmmIoapic(Irqchip),
    #[error("VMM thread(s) {threads} did not stop within {} ms of the stop request: left running", STOP_GRACE.as_millis())]
    ThreadsHung { threads: String },
    #[error("a VMM thread panicked: {0}")]
    ThreadPanic(&'static str),
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error(transparent)]
    Placement(#[from] PlacementError),
    #[error("{feature} is unavailable on this host: {why}")]
    Unavailable {
        feature: &'static str,
        why: &'static str,
    },
    #[error(transparent)]
    Exits(#[from] ExitsError),
    #[error("vCPU {cpu}, which the {bench} bench leaves halted, made {exits} exits of its own in the measured window ({detail}): another vCPU interfered, so the bench's figures are not its own")]
    Interference {
        cpu: usize,
        bench: Bench,
        exits: u64,
        detail: String,
    },
    #[error("the guest closed its measured window {window_ns} ns after opening it, with no exit on any vCPU in between: it measured nothing there")]
    EmptyWindow { window_ns: u64 },
}

/// How the guest actually executed, and why it differs from what was
/// asked, if it does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecOutcome {
    pub guest_exec: GuestExec,
    /// Set when native mode was asked for and some vCPU stayed emulated,
    /// or when KVM's counts were too few to tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// The mode is the guest's word alone: the window was too short for
    /// KVM's counts to tell native execution from emulation.
    #[serde(default)]
    pub unconfirmed: bool,
}

/// The host side of a benchmark: runs on its own thread while the guest runs.
pub type DeviceThread<'a, T> = Box<dyn FnOnce(&DeviceEnv) -> Result<T, MsiDeviceError> + Send + 'a>;

/// What a run report records of the machine itself.
pub struct MachineFacts {
    pub exec: ExecOutcome,
    pub placement: Placement,
    pub console: String,
    /// What the VMM saw of the run, which the guest's figures must fit.
    pub evidence: Evidence,
}

/// What one boot produced.
pub struct MachineOutput<T> {
    pub facts: MachineFacts,
    pub shared: SharedPage,
    /// The guest's samples, in TSC cycles.
    pub samples: Vec<u64>,
    pub window: Window,
    /// Every vCPU's counters once the guest stopped: the whole VM's exits,
    /// of which the window's are a part.
    pub lifetime: ExitSnapshot,
    pub tsc_khz: u64,
    pub device: Option<T>,
    /// The timeline, when the run asked for one.
    pub trace: Option<RunTrace>,
}

/// What a bench may add devices to before the guest starts.
pub struct Attach<'a> {
    pub bus: &'a mut Bus,
    pub vm: &'a Arc<Vm>,
    pub memory: &'a GuestMemory,
    /// The run's stop flag: a device that waits on the guest must watch it.
    pub control: &'a Arc<RunControl>,
    /// The run's interrupt controllers.
    pub interrupts: &'a dyn InterruptController,
}

/// A bench's extra devices: called once, after the standard devices are on the bus.
pub type AttachDevices<'a> = &'a dyn Fn(&mut Attach) -> Result<(), MachineError>;

/// The host side of a run beyond the standard machine.
pub struct Extensions<'a, T> {
    pub attach: Option<AttachDevices<'a>>,
    pub device: Option<DeviceThread<'a, T>>,
    /// Record the run's timeline.
    pub trace: Option<Tracing>,
}

impl<T> Default for Extensions<'_, T> {
    fn default() -> Self {
        Extensions {
            attach: None,
            device: None,
            trace: None,
        }
    }
}

impl<'a, T> Extensions<'a, T> {
    /// Devices a bench attaches to the bus, driven by its device thread.
    pub fn attached(attach: AttachDevices<'a>, device: DeviceThread<'a, T>) -> Self {
        Extensions {
            attach: Some(attach),
            device: Some(device),
            trace: None,
        }
    }
}

/// Boots the guest for `config` and runs it to completion. A machine goes
/// through three states, each a type: assembled (the VM, its vCPUs and
/// devices, nothing running), stopped (every thread joined, or left
/// running if it would not stop), and its output (what the guest claims,
/// checked against how the run ended).
pub fn run<T: Send>(
    config: &BenchConfig,
    echo_console: bool,
    extensions: Extensions<'_, T>,
) -> Result<MachineOutput<T>, MachineError> {
    let Extensions {
        attach,
        device,
        trace,
    } = extensions;
    Assembled::new(config, echo_console, attach, trace)?
        .run(device)?
        .output()
}

/// A machine built and booted to its first instruction, nothing running.
struct Assembled<'c> {
    config: &'c BenchConfig,
    memory: GuestMemory,
    vm: Arc<Vm>,
    vcpus: Vec<Vcpu>,
    guest_exec: GuestExec,
    tsc_khz: u64,
    /// KVM's `irq_injections` counts every delivery on this host.
    injections_counted: bool,
    watchdog: Watchdog,
    plumbing: RunPlumbing,
    bus: Arc<Bus>,
    interrupts: Arc<dyn InterruptController>,
    /// Where the bench's device raises its interrupts.
    sink: Box<dyn InterruptSink>,
    recorder: Option<Arc<TraceRecorder>>,
}

/// How a vCPU thread ended, and where its vCPU stopped.
pub(crate) type VcpuVerdict = (Result<(), VcpuError>, Option<u64>);

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

    /// Starts a thread per vCPU, pinned as planned, and the LAPIC timers'
    /// thread in the modes that have one. The threads own what they use:
    /// one stuck where the VMM cannot interrupt it (in KVM_RUN) is left
    /// running, not joined forever.
    pub(crate) fn start(
        &self,
        vcpus: Vec<Vcpu>,
        bus: Arc<Bus>,
        interrupts: Arc<dyn InterruptController>,
        recorder: Option<Arc<TraceRecorder>>,
    ) -> Running {
        let threads = Threads {
            plumbing: self.clone(),
            bus,
            interrupts,
            recorder,
        };
        Running {
            vcpus: threads.spawn_vcpus(vcpus),
            timers: threads.spawn_timers(),
        }
    }
}

/// What the vCPU and timer threads of a run share.
struct Threads {
    plumbing: RunPlumbing,
    bus: Arc<Bus>,
    interrupts: Arc<dyn InterruptController>,
    recorder: Option<Arc<TraceRecorder>>,
}

impl Threads {
    /// One thread per vCPU, running until the run stops; a vCPU that fails
    /// stops the run.
    fn spawn_vcpus(&self, vcpus: Vec<Vcpu>) -> Vec<std::thread::JoinHandle<VcpuVerdict>> {
        vcpus
            .into_iter()
            .map(|mut vcpu| {
                let RunPlumbing {
                    placement,
                    accounting,
                    control,
                    kicker,
                    ..
                } = self.plumbing.clone();
                let (bus, interrupts) = (self.bus.clone(), self.interrupts.clone());
                let recorder = self.recorder.clone();
                std::thread::spawn(move || {
                    let ctx = VcpuContext {
                        bus: &bus,
                        control: &control,
                        counters: &accounting.counters[vcpu.index],
                        kicker: &kicker,
                        interrupts: &*interrupts,
                        trace: recorder.as_deref(),
                    };
                    let result = placement
                        .pin_this_thread(vcpu.index)
                        .map_err(VcpuError::from)
                        .and_then(|()| vcpu.run(&ctx));
                    if result.is_err() {
                        control.request_stop();
                        kicker.kick_all();
                    }
                    (result, vcpu.current_rip())
                })
            })
            .collect()
    }

    /// The LAPIC timers' thread, in the modes that have one.
    fn spawn_timers(&self) -> Option<std::thread::JoinHandle<()>> {
        self.interrupts.clone().timer_loop().map(|timers| {
            let control = self.plumbing.control.clone();
            std::thread::spawn(move || {
                // Refused, the timers keep the default slack: late, never wrong.
                let _ = crate::placement::wake_on_time();
                timers(&control)
            })
        })
    }
}

/// The vCPU threads and the timers' thread of a started run.
pub(crate) struct Running {
    pub vcpus: Vec<std::thread::JoinHandle<VcpuVerdict>>,
    pub timers: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Waits until the guest ends the run or `deadline` passes, then stops
    /// the run and waits for these threads and `others` as
    /// [`wait_for_threads`] does. True when the guest ended the run.
    pub(crate) fn stop_at<'a>(
        &'a self,
        plumbing: &RunPlumbing,
        deadline: Instant,
        others: impl IntoIterator<Item = (String, &'a dyn IsFinished)>,
    ) -> bool {
        let finished = plumbing.control.wait_for_end(deadline);
        plumbing.control.request_stop();
        let mut threads: Vec<(String, &dyn IsFinished)> = self
            .vcpus
            .iter()
            .enumerate()
            .map(|(cpu, thread)| (format!("vCPU {cpu}"), thread as &dyn IsFinished))
            .collect();
        threads.extend(
            self.timers
                .iter()
                .map(|thread| ("LAPIC timer".into(), thread as &dyn IsFinished)),
        );
        threads.extend(others);
        wait_for_threads(&threads, &plumbing.kicker);
        finished
    }
}

/// A machine whose threads have stopped: each thread's verdict, `None`
/// for one that did not stop and was left running.
struct Stopped<'c, T> {
    config: &'c BenchConfig,
    memory: GuestMemory,
    /// Kept until the output is read, as the hung threads' KVM fds are.
    _vm: Arc<Vm>,
    guest_exec: GuestExec,
    tsc_khz: u64,
    injections_counted: bool,
    watchdog: Watchdog,
    plumbing: RunPlumbing,
    recorder: Option<Arc<TraceRecorder>>,
    vcpus: Vec<Option<std::thread::Result<VcpuVerdict>>>,
    device: Option<std::thread::Result<Result<T, MsiDeviceError>>>,
    /// `None` without a timer thread; `Some(None)` when it did not stop.
    timers: Option<Option<bool>>,
    timed_out: bool,
}

impl<'c> Assembled<'c> {
    fn new(
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

    /// Runs every thread until the guest ends, a thread fails or the
    /// watchdog fires, then stops them all.
    fn run<T: Send>(
        self,
        device: Option<DeviceThread<'_, T>>,
    ) -> Result<Stopped<'c, T>, MachineError> {
        let Assembled {
            config,
            memory,
            vm,
            vcpus,
            guest_exec,
            tsc_khz,
            injections_counted,
            watchdog,
            plumbing,
            bus,
            interrupts,
            sink,
            recorder,
        } = self;
        let deadline = Instant::now() + watchdog.timeout;
        let running = plumbing.start(vcpus, bus, interrupts, recorder.clone());
        // The device thread borrows the bench's state, so it is scoped;
        // every device loop watches the stop flag.
        let (vcpu_results, device_result, timers, timed_out) = std::thread::scope(|scope| {
            let device_thread = device.map(|device| {
                let env = DeviceEnv {
                    memory: &memory,
                    control: &plumbing.control,
                    sink: &*sink,
                };
                let plumbing = &plumbing;
                scope.spawn(move || {
                    let result = plumbing
                        .placement
                        .pin_device_thread()
                        .map_err(MsiDeviceError::from)
                        .and_then(|()| device(&env));
                    // The device's verdict ends the run now, not at the watchdog.
                    if result.is_err() {
                        plumbing.control.request_stop();
                        plumbing.kicker.kick_all();
                    }
                    result
                })
            });
            let finished = running.stop_at(
                &plumbing,
                deadline,
                device_thread
                    .iter()
                    .map(|t| ("device".to_string(), t as &dyn IsFinished)),
            );
            let Running { vcpus, timers } = running;
            let vcpu_results: Vec<_> = vcpus
                .into_iter()
                .map(|thread| thread.is_finished().then(|| thread.join()))
                .collect();
            let device_result = device_thread.map(|thread| thread.join());
            let timers = timers.map(|thread| thread.is_finished().then(|| thread.join().is_ok()));
            (vcpu_results, device_result, timers, !finished)
        });
        Ok(Stopped {
            config,
            memory,
            _vm: vm,
            guest_exec,
            tsc_khz,
            injections_counted,
            watchdog,
            plumbing,
            recorder,
            vcpus: vcpu_results,
            device: device_result,
            timers,
            timed_out,
        })
    }
}

impl<T> Stopped<'_, T> {
    /// The run's output, or why there is none: a thread that failed, hung
    /// or panicked, the watchdog, or a guest that failed or broke the
    /// protocol.
    fn output(self) -> Result<MachineOutput<T>, MachineError> {
        let mut hung = Vec::new();
        match self.timers {
            Some(Some(false)) => return Err(MachineError::ThreadPanic("LAPIC timer")),
            Some(None) => hung.push("LAPIC timer".to_string()),
            Some(Some(true)) | None => {}
        }
        let mut rips = Vec::new();
        for (cpu, joined) in self.vcpus.into_iter().enumerate() {
            let Some(joined) = joined else {
                hung.push(format!("vCPU {cpu}"));
                continue;
            };
            let (result, rip) = joined.map_err(|_| MachineError::ThreadPanic("vCPU"))?;
            result?;
            rips.push(match rip {
                Some(rip) => format!("vCPU {cpu} rip {rip:#x}"),
                None => format!("vCPU {cpu} rip unknown"),
            });
        }
        if !hung.is_empty() {
            return Err(MachineError::ThreadsHung {
                threads: hung.join(", "),
            });
        }
        // The counters as the run left them, the whole VM's exits: the
        // window's end if it never closed, and every interrupt KVM injected.
        let lifetime = self.plumbing.accounting.snapshot()?;
        // Another vCPU's meddling explains what the bench then saw (a lost
        // or doubled interrupt, a storm, a stall): it is named first.
        if let Some(window) = self.plumbing.control.window() {
            let end = window.end.as_ref().map_or(&lifetime, |(_, end)| end);
            check_idle_vcpus(self.config.bench(), &window.start.1, end)?;
        }
        // A lost or doubled interrupt is the device's verdict: it names the
        // cause better than the watchdog that the lost interrupt then trips.
        let device = match self.device {
            Some(joined) => Some(joined.map_err(|_| MachineError::ThreadPanic("device"))??),
            None => None,
        };
        let shared: SharedPage = self.memory.read_obj(GuestAddress(abi::SHARED_GPA))?;
        if self.timed_out {
            return Err(MachineError::Timeout {
                watchdog: self.watchdog,
                progress: progress(
                    &shared,
                    self.config,
                    self.plumbing.control.window().is_some(),
                ),
                rips: rips.join(", "),
            });
        }
        let console = self.plumbing.serial.output();
        if self.plumbing.control.guest_end() == Some(GuestEnd::Failed) {
            return Err(MachineError::Guest(describe_failure(&shared)));
        }
        let window = self
            .plumbing
            .control
            .window()
            .ok_or(MachineError::Protocol("opening its measured window"))?;
        let Some((_, end)) = &window.end else {
            return Err(MachineError::Protocol("closing its measured window"));
        };
        if self.config.bench().has_figures() {
            check_window_not_empty(&window, end)?;
        }
        let evidence = evidence(
            &window,
            end,
            &lifetime,
            self.tsc_khz,
            self.injections_counted,
        );
        let stats = window_exec_stats(&window.start.1, end);
        let (exec, samples) = check_claims(
            self.config,
            &shared,
            &self.memory,
            &Observation {
                asked: self.guest_exec,
                stats: &stats,
                tsc_khz: self.tsc_khz,
                window_ns: window_ns(&window),
            },
        )?;
        Ok(MachineOutput {
            facts: MachineFacts {
                exec,
                placement: Arc::unwrap_or_clone(self.plumbing.placement),
                console,
                evidence,
            },
            shared,
            samples,
            window,
            lifetime,
            tsc_khz: self.tsc_khz,
            device,
            trace: self.recorder.map(|recorder| recorder.finish()),
        })
    }
}

/// What the VMM saw of the window (`start` to `end`) and of the whole run
/// (`lifetime`, the counters as it left them), with the TSC rate it gave the
/// guest; injections only where they count every delivery.
fn evidence(
    window: &Window,
    end: &ExitSnapshot,
    lifetime: &ExitSnapshot,
    tsc_khz: u64,
    injections_counted: bool,
) -> Evidence {
    let exits = ExitSummary::between(&window.start.1, end, crate::bench::WINDOW_MARKER_EXITS);
    let io = UserspaceExit::Io;
    Evidence {
        window_ns: window_ns(window),
        tsc_khz,
        injected: injections_counted.then(|| lifetime.kvm_stat(KvmStat::IrqInjections)),
        port_exits: exits.userspace_by_reason.get(&io).copied().unwrap_or(0),
        port_exit_vmm_min_ns: exits.userspace_time.get(&io).map(|time| time.min_ns),
        kernel_exits: exits.kernel,
        pit: None,
    }
}

/// What the VMM itself observed of a run that ended: what the guest's
/// claims are held to.
pub struct Observation<'a> {
    /// The execution mode the VMM told the guest to use.
    pub asked: GuestExec,
    /// KVM's per-vCPU statistics over the measured window.
    pub stats: &'a [VcpuExecStats],
    pub tsc_khz: u64,
    /// Host time from the guest's START to its END.
    pub window_ns: u64,
}

/// The claims of the guest's page that every bench shares, checked against
/// the run's configuration and what the VMM observed: how it executed
/// (`native_cpus`) and its samples (`samples_written` and the samples
/// themselves, in `memory`). Anything else the page holds is each bench's
/// to check.
pub fn check_claims(
    config: &BenchConfig,
    shared: &SharedPage,
    memory: &GuestMemory,
    observed: &Observation,
) -> Result<(ExecOutcome, Vec<u64>), MachineError> {
    let exec = exec_outcome(observed.asked, shared.native_cpus, observed.stats)?;
    let samples = read_samples(
        memory,
        shared.samples_written,
        config.params.expected_samples(),
    )?;
    check_samples_fit(&samples, observed.tsc_khz, observed.window_ns)?;
    Ok((exec, samples))
}

/// A watchdog's length as it was set: milliseconds under a second.
fn watchdog_length(timeout: Duration) -> String {
    if timeout < Duration::from_secs(1) {
        format!("{} ms", timeout.as_millis())
    } else {
        format!("{:.1} s", timeout.as_secs_f64())
    }
}

/// Where a watchdog's length came from, for its message.
fn watchdog_origin(watchdog: &Watchdog) -> String {
    if watchdog.explicit && watchdog.expected.is_zero() {
        ", set for this run".into()
    } else if watchdog.explicit {
        format!(
            ", set for this run; the work was expected to take at most {:.1} s",
            watchdog.expected.as_secs_f64()
        )
    } else if watchdog.expected >= watchdog.timeout {
        format!(
            " scaled to the work, expected to take at most {:.1} s on a slow host, capped at the {} s maximum; --timeout sets it",
            watchdog.expected.as_secs_f64(),
            MAX_TIMEOUT_MS / 1000
        )
    } else {
        format!(
            " scaled to the work, expected to take at most {:.1} s on a slow host; --timeout sets it",
            watchdog.expected.as_secs_f64()
        )
    }
}

/// What a stopped guest had done: its window, interrupts and device
/// events, as it last wrote them, against what the run asked for (from
/// `config`, not from the page the guest could have rewritten).
fn progress(shared: &SharedPage, config: &BenchConfig, window_opened: bool) -> String {
    if !window_opened {
        return "the guest never opened its measured window".into();
    }
    let cpus = usize::try_from(config.common.vcpus)
        .unwrap_or(abi::MAX_CPUS)
        .min(abi::MAX_CPUS);
    let handled: Vec<String> = shared.handled[..cpus].iter().map(u64::to_string).collect();
    let mut text = format!(
        "by then the guest had handled {} interrupts (per vCPU)",
        handled.join("/")
    );
    if shared.ack_seq > 0 {
        text += &format!(" and acknowledged {} device events", shared.ack_seq);
    }
    let mut asked = SharedPage::default();
    config.params.boot(&mut asked);
    if asked.count > 0 {
        text += &format!(", of the {} events the run asked for", asked.count);
    }
    text
}

/// How long the VMM's threads have to stop once asked to.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// Between two kicks of the vCPUs while waiting for them to stop: a kick
/// sent just before a thread entered KVM_RUN is lost.
const STOP_KICK_INTERVAL: Duration = Duration::from_millis(10);

/// A thread the run waits for.
pub(crate) trait IsFinished {
    fn is_finished(&self) -> bool;
}

impl<T> IsFinished for std::thread::ScopedJoinHandle<'_, T> {
    fn is_finished(&self) -> bool {
        std::thread::ScopedJoinHandle::is_finished(self)
    }
}

impl<T> IsFinished for std::thread::JoinHandle<T> {
    fn is_finished(&self) -> bool {
        std::thread::JoinHandle::is_finished(self)
    }
}

/// Kicks the vCPUs until every thread has stopped, for at most
/// `STOP_GRACE`; the caller leaves running, and reports, those that have
/// not (stuck in a call the VMM cannot interrupt).
pub(crate) fn wait_for_threads(threads: &[(String, &dyn IsFinished)], kicker: &Kicker) {
    let asked = Instant::now();
    while threads.iter().any(|(_, thread)| !thread.is_finished()) && asked.elapsed() < STOP_GRACE {
        kicker.kick_all();
        std::thread::sleep(STOP_KICK_INTERVAL);
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

/// How the guest executed, as KVM's statistics over the window tell it.
/// The guest's claim (`native_cpus`) is never believed alone: a vCPU that
/// admits emulation is taken at its word (that claim can only cost it), one
/// that claims native mode must have been told to switch and must not look
/// emulated to KVM. A window too short to tell keeps the mode asked for.
fn exec_outcome(
    asked: GuestExec,
    native_cpus: u64,
    stats: &[VcpuExecStats],
) -> Result<ExecOutcome, ExecError> {
    let claims_native = |cpu: usize| native_cpus & (1u64 << cpu) != 0;
    let booted = u32::try_from(stats.len())
        .ok()
        .and_then(|vcpus| native_cpus.checked_shr(vcpus));
    if booted.is_some_and(|beyond| beyond != 0) {
        return Err(ExecError::ClaimBeyondVcpus {
            native_cpus,
            vcpus: stats.len(),
        });
    }
    if asked == GuestExec::Hardware {
        return Ok(ExecOutcome {
            guest_exec: asked,
            warning: None,
            unconfirmed: false,
        });
    }
    for (cpu, stats) in stats.iter().enumerate() {
        if !claims_native(cpu) {
            continue;
        }
        if asked != GuestExec::Native {
            return Err(ExecError::UnaskedNativeClaim { cpu, asked });
        }
        if stats.evidence() == ExecEvidence::Emulated {
            return Err(ExecError::ForgedNativeClaim { cpu, stats: *stats });
        }
    }
    let refused: Vec<String> = (0..stats.len())
        .filter(|&cpu| !claims_native(cpu))
        .map(|cpu| cpu.to_string())
        .collect();
    if asked == GuestExec::Emulated {
        return Ok(ExecOutcome {
            guest_exec: asked,
            warning: None,
            unconfirmed: false,
        });
    }
    if !refused.is_empty() {
        return Ok(ExecOutcome {
            guest_exec: GuestExec::Emulated,
            warning: Some(format!(
                "kvm_pvm refused native mode on vCPU {}: the run fell back to emulation",
                refused.join(", ")
            )),
            unconfirmed: false,
        });
    }
    // Every vCPU claims native, none is contradicted: KVM must also have
    // seen one of them run natively, or the mode is the guest's word.
    if stats
        .iter()
        .any(|stats| stats.evidence() == ExecEvidence::Native)
    {
        return Ok(ExecOutcome {
            guest_exec: GuestExec::Native,
            warning: None,
            unconfirmed: false,
        });
    }
    let counts: Vec<String> = stats
        .iter()
        .enumerate()
        .map(|(cpu, stats)| {
            format!(
                "vCPU {cpu}: {} exits, {} emulated instructions",
                stats.exits, stats.insn_emulation
            )
        })
        .collect();
    Ok(ExecOutcome {
        guest_exec: GuestExec::Native,
        warning: Some(format!(
            "the measured window is too short for KVM's counts to tell native execution from emulation ({}; it takes {NATIVE_MIN_EXITS} exits on one vCPU): native is the guest's claim",
            counts.join("; ")
        )),
        unconfirmed: true,
    })
}

/// Refuses a run in which a vCPU the bench leaves halted trapped during
/// the window: beyond the host's interrupts and the VMM's kicks, which
/// find a halted vCPU as well, every exit is the guest's doing there.
fn check_idle_vcpus(
    bench: Bench,
    start: &ExitSnapshot,
    end: &ExitSnapshot,
) -> Result<(), MachineError> {
    if !bench.runs_on_vcpu0_alone() {
        return Ok(());
    }
    let window = ExitSummary::between(start, end, 0);
    for vcpu in window.per_vcpu.iter().skip(1) {
        let stats = &vcpu.kvm_stats;
        let not_its_own = stats.get(KvmStat::IrqExits) + stats.get(KvmStat::SignalExits);
        let exits = vcpu.total.saturating_sub(not_its_own);
        let emulated = stats.get(KvmStat::InsnEmulation);
        if exits == 0 && emulated == 0 {
            continue;
        }
        let mut detail: Vec<String> = stats
            .read
            .iter()
            .filter(|(stat, _)| {
                !matches!(
                    stat,
                    KvmStat::Exits | KvmStat::IrqExits | KvmStat::SignalExits
                )
            })
            .map(|(stat, count)| format!("{stat} {count}"))
            .collect();
        detail.extend(
            vcpu.userspace_by_reason
                .iter()
                .map(|(reason, count)| format!("{count} returned to the VMM as {reason}")),
        );
        return Err(MachineError::Interference {
            cpu: vcpu.cpu,
            bench,
            exits,
            detail: detail.join(", "),
        });
    }
    Ok(())
}

/// Every bench's measured events trap on every backend dirq runs on (an
/// interrupt, a port access, a timer, a halt): a window with no exit at
/// all, its END marker aside, was closed before anything was measured.
fn check_window_not_empty(window: &Window, end: &ExitSnapshot) -> Result<(), MachineError> {
    let exits = ExitSummary::between(&window.start.1, end, crate::bench::WINDOW_MARKER_EXITS);
    if exits.total == 0 {
        return Err(MachineError::EmptyWindow {
            window_ns: window_ns(window),
        });
    }
    Ok(())
}

/// Each vCPU's exits and emulated instructions between `start` and `end`.
fn window_exec_stats(start: &ExitSnapshot, end: &ExitSnapshot) -> Vec<VcpuExecStats> {
    ExitSummary::between(start, end, 0)
        .per_vcpu
        .iter()
        .map(|vcpu| VcpuExecStats {
            exits: vcpu.kvm_stats.get(KvmStat::Exits),
            insn_emulation: vcpu.kvm_stats.get(KvmStat::InsnEmulation),
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

/// The guest's samples. It wrote the count, so a count other than the run
/// asked for is refused: more is forged, fewer (or none) measured less
/// than was asked.
fn read_samples(
    memory: &GuestMemory,
    written: u64,
    expected: u64,
) -> Result<Vec<u64>, MachineError> {
    let miscounted = MachineError::SampleCount {
        written,
        expected,
        capacity: memory::SAMPLES_CAPACITY,
    };
    if written != expected || written > memory::SAMPLES_CAPACITY {
        return Err(miscounted);
    }
    let count = usize::try_from(written).map_err(|_| miscounted)?;
    let mut bytes = vec![0u8; count * 8];
    memory.read_slice(&mut bytes, GuestAddress(memory::SAMPLES_GPA))?;
    Ok(bytes
        .chunks_exact(8)
        .map(|chunk| u64::from_le_bytes(chunk.try_into().unwrap_or_default()))
        .collect())
}

/// The host time from the guest's START to its END, as the VMM saw them.
pub(crate) fn window_ns(window: &Window) -> u64 {
    window.end.as_ref().map_or(0, |(end, _)| {
        u64::try_from((*end - window.start.0).as_nanos()).unwrap_or(u64::MAX)
    })
}

/// Every sample was timed inside the window, so none can be longer, and
/// between two TSC reads, so none can be shorter than reading the TSC.
fn check_samples_fit(samples: &[u64], tsc_khz: u64, window_ns: u64) -> Result<(), MachineError> {
    for (index, &cycles) in samples.iter().enumerate() {
        let ns = cycles_to_ns(cycles, tsc_khz);
        let rule =
            beyond_window(f64_of(ns), f64_of(window_ns)).or_else(|| below_resolution(cycles));
        if let Some(rule) = rule {
            return Err(MachineError::SampleBeyondWindow {
                index,
                cycles,
                ns,
                rule,
            });
        }
    }
    Ok(())
}

fn exception_name(vector: u64) -> &'static str {
    const NAMES: [&str; 21] = [
        "#DE",
        "#DB",
        "NMI",
        "#BP",
        "#OF",
        "#BR",
        "#UD",
        "#NM",
        "#DF",
        "coprocessor overrun",
        "#TS",
        "#NP",
        "#SS",
        "#GP",
        "#PF",
        "reserved",
        "#MF",
        "#AC",
        "#MC",
        "#XM",
        "#VE",
    ];
    usize::try_from(vector)
        .ok()
        .and_then(|vector| NAMES.get(vector))
        .copied()
        .unwrap_or("interrupt")
}

/// The guest's own account of its failure (`failure`, `failure_detail`),
/// whatever those fields hold.
pub fn describe_failure(shared: &SharedPage) -> String {
    let [d0, d1, d2, d3] = shared.failure_detail;
    match shared.failure {
        abi::FAILURE_EXCEPTION => format!(
            "unexpected {} (vector {d0}, error code {d1:#x}) at rip {d2:#x} on CPU {d3}",
            exception_name(d0)
        ),
        abi::FAILURE_MISSING_FEATURE => {
            format!(
                "the guest needs CPUID leaf {d0:#x} bits {d1:#x}, which this vCPU does not offer"
            )
        }
        abi::FAILURE_UNKNOWN_BENCH => format!("the guest does not know benchmark {d0}"),
        abi::FAILURE_ABI_MISMATCH => format!(
            "the guest expects a different boot page (it read magic {d0:#x}, version {d1}; the VMM writes {:#x}, version {})",
            abi::MAGIC,
            abi::VERSION
        ),
        abi::FAILURE_HYPERCALL_REFUSED => format!(
            "KVM refused the guest's hypercall {d0:#x} (it returned {})",
            d1.cast_signed()
        ),
        other => format!("unknown failure code {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NATIVE: VcpuExecStats = VcpuExecStats {
        exits: 1502,
        insn_emulation: 901,
    };
    const EMULATED: VcpuExecStats = VcpuExecStats {
        exits: 310,
        insn_emulation: 43217,
    };
    const IDLE: VcpuExecStats = VcpuExecStats {
        exits: 0,
        insn_emulation: 0,
    };

    #[test]
    fn a_timeout_says_how_long_the_run_was_expected_to_take() {
        let watchdog = |timeout_s, expected_s, explicit| Watchdog {
            timeout: Duration::from_secs(timeout_s),
            expected: Duration::from_secs(expected_s),
            explicit,
        };
        assert_eq!(
            watchdog_origin(&watchdog(40, 30, false)),
            " scaled to the work, expected to take at most 30.0 s on a slow host; --timeout sets it"
        );
        // irq-latency --count 1572864: a slow host's bound is past the hour.
        assert!(watchdog_origin(&watchdog(3_600, 39_321, false))
            .contains("at most 39321.0 s on a slow host, capped at the 3600 s maximum"));
        assert_eq!(watchdog_length(Duration::from_millis(1)), "1 ms");
        assert_eq!(watchdog_length(Duration::from_secs(4)), "4.0 s");
        assert_eq!(
            watchdog_origin(&watchdog(2, 315, true)),
            ", set for this run; the work was expected to take at most 315.0 s"
        );
    }

    #[test]
    fn a_native_claim_that_kvm_saw_emulated_is_refused_naming_both() {
        let err =
            exec_outcome(GuestExec::Native, 0b11, &[EMULATED, IDLE]).expect_err("forged claim");
        let message = err.to_string();
        assert!(
            message.starts_with("vCPU 0: the guest claims native execution"),
            "{message}"
        );
        assert!(
            message.contains("KVM emulated 43217 instructions in 310 exits"),
            "{message}"
        );
        let err = exec_outcome(GuestExec::Emulated, 0b10, &[EMULATED, IDLE])
            .expect_err("never told to switch");
        assert!(err.to_string().starts_with("vCPU 1: "), "{err}");
        let err =
            exec_outcome(GuestExec::Native, 0b111, &[NATIVE, NATIVE]).expect_err("a third vCPU");
        assert!(
            err.to_string()
                .contains("never booted (native_cpus 0x7, 2 vCPUs)"),
            "{err}"
        );
    }

    #[test]
    fn native_is_reported_only_for_claims_kvm_does_not_contradict() {
        let native = exec_outcome(GuestExec::Native, 0b11, &[NATIVE, IDLE]).expect("honest");
        assert_eq!(native.guest_exec, GuestExec::Native);
        assert_eq!(native.warning, None);
        let fell_back =
            exec_outcome(GuestExec::Native, 0b01, &[NATIVE, EMULATED]).expect("admitted");
        assert_eq!(fell_back.guest_exec, GuestExec::Emulated);
        assert!(fell_back.warning.expect("says why").contains("vCPU 1"));
        let emulated = exec_outcome(GuestExec::Emulated, 0, &[EMULATED, IDLE]).expect("asked");
        assert_eq!(emulated.guest_exec, GuestExec::Emulated);
        assert!(!native.unconfirmed && !fell_back.unconfirmed && !emulated.unconfirmed);
    }

    fn kvm(vcpus: &[&[(&str, u64)]]) -> ExitSnapshot {
        ExitSnapshot::of_kvm(
            vcpus
                .iter()
                .map(|stats| {
                    stats
                        .iter()
                        .map(|(name, n)| (name.to_string(), *n))
                        .collect()
                })
                .collect(),
        )
    }

    #[test]
    fn a_vcpu_the_bench_leaves_halted_that_traps_in_the_window_is_named() {
        let start = kvm(&[&[("exits", 10)], &[("exits", 3), ("irq_exits", 1)]]);
        // vCPU 1 took two host interrupts and a kick: not its doing.
        let quiet = kvm(&[
            &[("exits", 900)],
            &[("exits", 6), ("irq_exits", 3), ("signal_exits", 1)],
        ]);
        check_idle_vcpus(Bench::TimerLatency, &start, &quiet).expect("idle");
        // vCPU 1 sent IPIs: exits of its own, and emulated instructions.
        let storm = kvm(&[
            &[("exits", 900)],
            &[
                ("exits", 5_006),
                ("irq_exits", 3),
                ("insn_emulation", 5_000),
            ],
        ]);
        let err = check_idle_vcpus(Bench::Vioapic, &start, &storm).expect_err("interfered");
        let message = err.to_string();
        assert!(
            message.starts_with(
                "vCPU 1, which the vioapic bench leaves halted, made 5001 exits of its own in the measured window (insn_emulation 5000)"
            ),
            "{message}"
        );
        // The ipi bench gives vCPU 1 work of its own.
        check_idle_vcpus(Bench::Ipi, &start, &storm).expect("its responder");
    }

    #[test]
    fn a_window_with_no_exit_but_its_end_measured_nothing() {
        let start = kvm(&[&[("exits", 10)], &[("exits", 3)]]);
        let at_once = Window {
            start: (Instant::now(), start.clone()),
            end: None,
        };
        let only_end = kvm(&[&[("exits", 11)], &[("exits", 3)]]);
        let err = check_window_not_empty(&at_once, &only_end).expect_err("empty");
        assert!(
            err.to_string()
                .ends_with("with no exit on any vCPU in between: it measured nothing there"),
            "{err}"
        );
        let worked = kvm(&[&[("exits", 12)], &[("exits", 3)]]);
        check_window_not_empty(&at_once, &worked).expect("one exit of the bench's");
    }

    #[test]
    fn a_window_too_short_to_tell_leaves_native_as_the_guests_claim() {
        let barely = VcpuExecStats {
            exits: 3,
            insn_emulation: 2,
        };
        let outcome = exec_outcome(GuestExec::Native, 0b11, &[barely, IDLE]).expect("not refuted");
        assert_eq!(outcome.guest_exec, GuestExec::Native);
        assert!(outcome.unconfirmed);
        let warning = outcome.warning.expect("says so");
        assert!(
            warning.contains("too short for KVM's counts to tell")
                && warning.contains("vCPU 0: 3 exits, 2 emulated instructions")
                && warning.ends_with("native is the guest's claim"),
            "{warning}"
        );
        // Ten interrupts under the emulator: refused, however short.
        let short_emulated = VcpuExecStats {
            exits: 35,
            insn_emulation: 640,
        };
        assert!(exec_outcome(GuestExec::Native, 0b11, &[short_emulated, IDLE]).is_err());
    }
}
