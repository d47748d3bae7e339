//! The running machine: a thread per vCPU, each in `vcpu`'s run loop,
//! the LAPIC timers' thread where the irqchip mode has one, and the
//! bench's device thread; the watchdog, and the stop that kicks every vCPU
//! out of KVM_RUN and leaves running (and reports) a thread that will not
//! stop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::builder::{Assembled, RunPlumbing};
use super::{DeviceThread, MachineError};
use crate::bus::Bus;
use crate::config::{BenchConfig, GuestExec, Watchdog};
use crate::devices::msi_device::{DeviceEnv, MsiDeviceError};
use crate::interrupt::{InterruptController, Kicker};
use crate::memory::GuestMemory;
use crate::trace::TraceRecorder;
use crate::vcpu::{Vcpu, VcpuContext, VcpuError};
use crate::vm::Vm;

/// How a vCPU thread ended, and where its vCPU stopped.
pub(crate) type VcpuVerdict = (Result<(), VcpuError>, Option<u64>);

impl RunPlumbing {
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
pub(super) struct Stopped<'c, T> {
    pub(super) config: &'c BenchConfig,
    pub(super) memory: GuestMemory,
    /// Kept until the output is read, as the hung threads' KVM fds are.
    pub(super) _vm: Arc<Vm>,
    pub(super) guest_exec: GuestExec,
    pub(super) tsc_khz: u64,
    pub(super) injections_counted: bool,
    pub(super) watchdog: Watchdog,
    pub(super) plumbing: RunPlumbing,
    pub(super) recorder: Option<Arc<TraceRecorder>>,
    pub(super) vcpus: Vec<Option<std::thread::Result<VcpuVerdict>>>,
    pub(super) device: Option<std::thread::Result<Result<T, MsiDeviceError>>>,
    /// `None` without a timer thread; `Some(None)` when it did not stop.
    pub(super) timers: Option<Option<bool>>,
    pub(super) timed_out: bool,
}

impl<'c> Assembled<'c> {
    /// Runs every thread until the guest ends, a thread fails or the
    /// watchdog fires, then stops them all.
    pub(super) fn run<T: Send>(
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

/// How long the VMM's threads have to stop once asked to.
pub(super) const STOP_GRACE: Duration = Duration::from_secs(2);
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
