//! One boot of the guest: builds the VM, its vCPUs and devices for a
//! `BenchConfig`, runs them on their own threads under a watchdog, and
//! hands back what the guest and the device measured.
//!
//! A run goes through three states, each a type in a module of its own:
//! `builder` assembles the machine (memory, vCPUs, interrupt controllers,
//! devices on the bus) and boots it to its first instruction; `threads`
//! runs a thread per vCPU (each in `vcpu`'s run loop) and the device's,
//! and stops them all; `checks` reads what the guest claims after the run
//! and holds it to what the VMM itself saw.

mod builder;
mod checks;
mod threads;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::abi::SharedPage;
use crate::boot::BootError;
use crate::bus::{Bus, DeviceError};
use crate::config::{Bench, BenchConfig, GuestExec, Irqchip, Watchdog, MAX_TIMEOUT_MS};
use crate::devices::msi_device::{DeviceEnv, MsiDeviceError};
use crate::exec::ExecError;
use crate::exits::{ExitSnapshot, ExitsError};
use crate::interrupt::{InterruptController, InterruptError};
use crate::memory::{GuestMemory, MemoryError};
use crate::placement::{Placement, PlacementError};
use crate::results::Evidence;
use crate::run_control::{RunControl, Window};
use crate::stats::StatsError;
use crate::trace::{RunTrace, Tracing};
use crate::vcpu::VcpuError;
use crate::vm::{Vm, VmError};

pub(crate) use builder::{vcpus_with, RunPlumbing};
pub use checks::{check_claims, describe_failure, Observation};

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
    #[error("VMM thread(s) {threads} did not stop within {} ms of the stop request: left running", threads::STOP_GRACE.as_millis())]
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
    builder::Assembled::new(config, echo_console, attach, trace)?
        .run(device)?
        .output()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What the run's error says when `watchdog` fires.
    fn timeout(watchdog: Watchdog) -> String {
        MachineError::Timeout {
            watchdog,
            progress: "the guest never opened its measured window".into(),
            rips: "vCPU 0 rip 0x1000".into(),
        }
        .to_string()
    }

    #[test]
    fn a_timeout_says_how_long_the_run_was_expected_to_take() {
        let watchdog = |timeout: Duration, expected_s, explicit| Watchdog {
            timeout,
            expected: Duration::from_secs(expected_s),
            explicit,
        };
        assert_eq!(
            timeout(watchdog(Duration::from_secs(40), 30, false)),
            "the guest did not finish within 40.0 s (watchdog scaled to the work, expected to take at most 30.0 s on a slow host; --timeout sets it): it hung, or runs far slower than expected; the guest never opened its measured window; vCPUs stopped at vCPU 0 rip 0x1000"
        );
        // irq-latency --count 1572864: a slow host's bound is past the hour.
        assert!(timeout(watchdog(Duration::from_secs(3_600), 39_321, false))
            .contains("within 3600.0 s (watchdog scaled to the work, expected to take at most 39321.0 s on a slow host, capped at the 3600 s maximum"));
        assert!(timeout(watchdog(Duration::from_millis(1), 0, true))
            .starts_with("the guest did not finish within 1 ms (watchdog, set for this run):"));
        assert!(timeout(watchdog(Duration::from_secs(2), 315, true)).contains(
            "within 2.0 s (watchdog, set for this run; the work was expected to take at most 315.0 s)"
        ));
    }
}
