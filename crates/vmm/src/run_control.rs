//! The state one run's threads share: whether to stop, the measured
//! window, how the guest ended. The vCPU threads, the device threads, the
//! interrupt controllers and the watchdog read it; the guest's control port
//! (`devices::control`) writes it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::exits::ExitSnapshot;

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

    /// The guest's start marker: the window opens at `start`.
    pub(crate) fn open_window(&self, start: (Instant, ExitSnapshot)) {
        self.lock().window = Some(Window { start, end: None });
        self.changed.notify_all();
    }

    /// The guest's end marker; false if no window was open.
    pub(crate) fn close_window(&self, end: (Instant, ExitSnapshot)) -> bool {
        let closed = self
            .lock()
            .window
            .as_mut()
            .map(|window| window.end = Some(end))
            .is_some();
        self.changed.notify_all();
        closed
    }

    /// The guest said it finished.
    pub(crate) fn end(&self, end: GuestEnd) {
        self.lock().guest_end = Some(end);
        self.changed.notify_all();
    }
}
