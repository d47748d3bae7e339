//! The guest's control port: it opens and closes the measured window and
//! reports completion or failure. Also the no-op port `dirq probe` times.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{check_access_size, le_u32, DeviceError, Direction, PioDevice};
use crate::abi;
use crate::exits::{ExitAccounting, ExitSnapshot};

/// How the guest ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestEnd {
    Done,
    Failed,
}

/// The measured window: counters and time at the guest's start and end markers.
#[derive(Clone, Debug)]
pub struct Window {
    pub start: (Instant, ExitSnapshot),
    pub end: Option<(Instant, ExitSnapshot)>,
}

#[derive(Default)]
struct State {
    window: Option<Window>,
    guest_end: Option<GuestEnd>,
}

/// Shared by the vCPU threads, the device threads and the watchdog.
#[derive(Default)]
pub struct RunControl {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
}

impl RunControl {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking holder cannot leave State inconsistent: every update is one assignment.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether every thread of the run should wind down.
    pub fn should_stop(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Asks every thread to wind down (the caller kicks the vCPUs).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.changed.notify_all();
    }

    /// Waits until the guest ends or a stop is requested; false on timeout.
    pub fn wait_for_end(&self, deadline: Instant) -> bool {
        let mut state = self.lock();
        while state.guest_end.is_none() && !self.should_stop() {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        true
    }

    /// Waits until the measured window opens; false if the run stops first.
    pub fn wait_for_window(&self) -> bool {
        let mut state = self.lock();
        while state.window.is_none() && !self.should_stop() {
            state = self
                .changed
                .wait_timeout(state, Duration::from_millis(50))
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        state.window.is_some() && !self.should_stop()
    }

    /// Whether the guest closed the measured window.
    pub fn window_closed(&self) -> bool {
        self.lock()
            .window
            .as_ref()
            .is_some_and(|window| window.end.is_some())
    }

    pub fn window(&self) -> Option<Window> {
        self.lock().window.clone()
    }

    pub fn guest_end(&self) -> Option<GuestEnd> {
        self.lock().guest_end
    }
}

/// The device behind `abi::PORT_CONTROL`.
pub struct ControlPort {
    control: Arc<RunControl>,
    accounting: Arc<ExitAccounting>,
}

impl ControlPort {
    pub fn new(control: Arc<RunControl>, accounting: Arc<ExitAccounting>) -> Self {
        ControlPort {
            control,
            accounting,
        }
    }

    fn snapshot(&self) -> Result<(Instant, ExitSnapshot), DeviceError> {
        let snapshot = self.accounting.snapshot()?;
        Ok((Instant::now(), snapshot))
    }
}

impl PioDevice for ControlPort {
    fn name(&self) -> &'static str {
        "control port"
    }

    fn read(&self, _cpu: usize, _offset: u16, data: &mut [u8]) -> Result<(), DeviceError> {
        data.fill(0);
        Ok(())
    }

    fn write(&self, _cpu: usize, _offset: u16, data: &[u8]) -> Result<(), DeviceError> {
        check_access_size("the control port", Direction::Write, data.len(), 4)?;
        let command = le_u32(data);
        match command {
            abi::CONTROL_BENCH_START => {
                let start = self.snapshot()?;
                self.control.lock().window = Some(Window { start, end: None });
            }
            abi::CONTROL_BENCH_END => {
                let end = self.snapshot()?;
                let mut state = self.control.lock();
                let window = state.window.as_mut().ok_or(DeviceError::WindowNotOpen)?;
                window.end = Some(end);
            }
            abi::CONTROL_DONE => self.control.lock().guest_end = Some(GuestEnd::Done),
            abi::CONTROL_FAILED => self.control.lock().guest_end = Some(GuestEnd::Failed),
            other => return Err(DeviceError::UnknownControlCommand(other)),
        }
        self.control.changed.notify_all();
        Ok(())
    }
}

/// The port behind `abi::PORT_NOOP`: an exit the VMM handles by doing nothing.
pub struct NoopPort;

impl PioDevice for NoopPort {
    fn name(&self) -> &'static str {
        "no-op port"
    }

    fn read(&self, _cpu: usize, _offset: u16, data: &mut [u8]) -> Result<(), DeviceError> {
        data.fill(0);
        Ok(())
    }

    fn write(&self, _cpu: usize, _offset: u16, _data: &[u8]) -> Result<(), DeviceError> {
        Ok(())
    }
}
