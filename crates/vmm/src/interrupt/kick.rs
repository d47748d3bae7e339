//! Getting a vCPU out of KVM_RUN: a real-time signal to its thread. The
//! handler sets the thread's kvm_run.immediate_exit, so a kick that lands
//! just before KVM_RUN makes it return at once instead of being lost.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use kvm_bindings::kvm_run;
use vmm_sys_util::signal::{register_signal_handler, SIGRTMIN};

use super::InterruptError;

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

/// The vCPU threads of a run, by vCPU index, while they run. `default()`
/// installs no signal handler: only for machines without vCPU threads.
#[derive(Default)]
pub struct Kicker {
    threads: Mutex<Vec<Option<libc::pthread_t>>>,
    /// Signals sent to each vCPU's thread: every one costs the thread a
    /// handler run, and a running vCPU an exit.
    sent: Vec<AtomicU64>,
}

impl Kicker {
    pub fn new(vcpus: usize) -> Result<Self, InterruptError> {
        register_signal_handler(kick_signal(), on_kick_signal)
            .map_err(InterruptError::KickSignal)?;
        Ok(Kicker {
            threads: Mutex::new(vec![None; vcpus]),
            sent: (0..vcpus).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    fn threads(&self) -> MutexGuard<'_, Vec<Option<libc::pthread_t>>> {
        // Every update is one assignment: a panic cannot leave it half-done.
        self.threads
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes the calling thread, which runs vCPU `cpu` on `run`, the one
    /// `kick(cpu)` reaches, until the returned guard drops. `run` must stay
    /// mapped until then.
    pub fn register(&self, cpu: usize, run: *mut kvm_run) -> Kickable<'_> {
        KVM_RUN.with(|current| current.set(run));
        // SAFETY: pthread_self has no preconditions.
        let thread = unsafe { libc::pthread_self() };
        if let Some(slot) = self.threads().get_mut(cpu) {
            *slot = Some(thread);
        }
        Kickable { kicker: self, cpu }
    }

    pub fn kick(&self, cpu: usize) {
        let threads = self.threads();
        if let Some(Some(thread)) = threads.get(cpu) {
            // SAFETY: the thread is registered only while its run loop runs
            // (unregistered under this lock before it exits), and the
            // handler for this signal is installed.
            unsafe { libc::pthread_kill(*thread, kick_signal()) };
            if let Some(sent) = self.sent.get(cpu) {
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The kicks sent to vCPU `cpu` so far.
    pub fn sent(&self, cpu: usize) -> u64 {
        self.sent
            .get(cpu)
            .map_or(0, |sent| sent.load(Ordering::Relaxed))
    }

    pub fn kick_all(&self) {
        let count = self.threads().len();
        for cpu in 0..count {
            self.kick(cpu);
        }
    }
}

/// A registered vCPU thread; dropping it unregisters the thread.
pub struct Kickable<'a> {
    kicker: &'a Kicker,
    cpu: usize,
}

impl Drop for Kickable<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.kicker.threads().get_mut(self.cpu) {
            *slot = None;
        }
        KVM_RUN.with(|current| current.set(std::ptr::null_mut()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kick_reaches_a_registered_thread_only_while_it_is_registered() {
        let kicker = Kicker::new(1).expect("signal handler installs");
        let mut run = kvm_run::default();
        {
            let _kickable = kicker.register(0, &mut run);
            kicker.kick(0);
            // The signal is delivered to this thread before pthread_kill returns.
            assert_eq!(run.immediate_exit, 1);
            assert_eq!(kicker.sent(0), 1);
        }
        run.immediate_exit = 0;
        kicker.kick_all();
        assert_eq!(run.immediate_exit, 0, "kicked after unregistering");
        assert_eq!(
            kicker.sent(0),
            1,
            "a kick that reached no thread is not counted"
        );
        assert!(kicker.threads().iter().all(Option::is_none));
    }
}
