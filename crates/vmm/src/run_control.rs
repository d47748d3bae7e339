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

/// A control command out of the only order the VMM accepts: START, END,
/// DONE, each once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PhaseError {
    #[error("START came twice: the measured window was already open")]
    StartTwice,
    #[error("END came before START: no measured window was open")]
    EndWithoutStart,
    #[error("END came twice: the measured window was already closed")]
    EndTwice,
    #[error("DONE came before END: the measured window was never closed")]
    DoneBeforeEnd,
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

    /// Whether the measured window is open: started and not yet ended.
    pub fn window_open(&self) -> bool {
        self.lock()
            .window
            .as_ref()
            .is_some_and(|window| window.end.is_none())
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

    /// The guest's start marker: the window opens at `start`, once.
    pub(crate) fn open_window(&self, start: (Instant, ExitSnapshot)) -> Result<(), PhaseError> {
        let mut state = self.lock();
        if state.window.is_some() {
            return Err(PhaseError::StartTwice);
        }
        state.window = Some(Window { start, end: None });
        self.changed.notify_all();
        Ok(())
    }

    /// The guest's end marker: closes the open window, once.
    pub(crate) fn close_window(&self, end: (Instant, ExitSnapshot)) -> Result<(), PhaseError> {
        let mut state = self.lock();
        let window = state.window.as_mut().ok_or(PhaseError::EndWithoutStart)?;
        if window.end.is_some() {
            return Err(PhaseError::EndTwice);
        }
        window.end = Some(end);
        self.changed.notify_all();
        Ok(())
    }

    /// The guest said it finished: DONE only after END; FAILED at any time.
    pub(crate) fn end(&self, end: GuestEnd) -> Result<(), PhaseError> {
        let mut state = self.lock();
        let closed = state
            .window
            .as_ref()
            .is_some_and(|window| window.end.is_some());
        if end == GuestEnd::Done && !closed {
            return Err(PhaseError::DoneBeforeEnd);
        }
        state.guest_end = Some(end);
        self.changed.notify_all();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> (Instant, ExitSnapshot) {
        (Instant::now(), ExitSnapshot::default())
    }

    #[test]
    fn only_start_end_done_each_once_is_accepted() {
        let control = RunControl::default();
        assert_eq!(
            control.close_window(now()),
            Err(PhaseError::EndWithoutStart)
        );
        assert_eq!(control.end(GuestEnd::Done), Err(PhaseError::DoneBeforeEnd));
        control.open_window(now()).expect("first START");
        assert_eq!(control.open_window(now()), Err(PhaseError::StartTwice));
        assert_eq!(control.end(GuestEnd::Done), Err(PhaseError::DoneBeforeEnd));
        assert_eq!(control.guest_end(), None);
        control.close_window(now()).expect("first END");
        assert_eq!(control.close_window(now()), Err(PhaseError::EndTwice));
        control.end(GuestEnd::Done).expect("DONE after END");
        assert_eq!(control.guest_end(), Some(GuestEnd::Done));
    }

    #[test]
    fn a_failure_may_end_the_run_at_any_time() {
        let control = RunControl::default();
        control.end(GuestEnd::Failed).expect("FAILED before START");
        assert_eq!(control.guest_end(), Some(GuestEnd::Failed));
    }
}
