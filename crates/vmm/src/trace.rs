//! A real run's timeline, recorded only when a run asks for it: each vCPU
//! thread's KVM_RUN calls (entry, return, the exit that ended it), the
//! device thread's interrupt raises, and each acknowledgement it saw with
//! what KVM's statistics counted since the last one (the exits KVM handled
//! itself, which no KVM_RUN return shows). Every track keeps at most `cap`
//! records, allocated up front, and counts what it drops beyond that, so a
//! long run costs bounded memory. A run without it pays one `Option` test
//! per exit.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::config::Named;
use crate::exits::{ExitAccounting, KvmStat, KvmStats, UserspaceExit};
use crate::interrupt::{InterruptError, InterruptSink};

/// Records kept per track when a run asks for a trace: 20 ms of exits at
/// the fastest rates dirq runs, and a few hundred KiB per track.
pub const DEFAULT_TRACE_CAP: usize = 20_000;

/// A run's request for a trace: how many records each track keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tracing {
    pub cap: usize,
}

impl Default for Tracing {
    fn default() -> Self {
        Tracing {
            cap: DEFAULT_TRACE_CAP,
        }
    }
}

/// One KVM_RUN call of a vCPU thread: the guest ran (or KVM handled exits
/// in the kernel) from `entered_ns` until KVM_RUN returned at
/// `returned_ns` with `exit`, which the VMM then handled until the next
/// entry. Times are ns since the recorder started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvmRun {
    pub entered_ns: u64,
    pub returned_ns: u64,
    pub exit: UserspaceExit,
}

/// A track's records, oldest first, and how many it had no room for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Track<T> {
    pub records: Vec<T>,
    pub dropped: u64,
}

impl<T> Track<T> {
    fn with_capacity(cap: usize) -> Self {
        Track {
            records: Vec::with_capacity(cap),
            dropped: 0,
        }
    }

    fn push(&mut self, record: T) {
        if self.records.len() < self.records.capacity() {
            self.records.push(record);
        } else {
            self.dropped += 1;
        }
    }
}

/// The device saw the guest acknowledge an interrupt at `at_ns`; KVM's
/// statistics moved by `kvm` since the last acknowledgement (or the first
/// raise): per vCPU, each statistic that moved and by how much.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ack {
    pub at_ns: u64,
    pub kvm: Vec<(usize, KvmStat, u64)>,
}

/// What a traced run recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunTrace {
    /// One track per vCPU, by index.
    pub vcpus: Vec<Track<KvmRun>>,
    /// The device thread's raises, ns since the recorder started.
    pub raises: Track<u64>,
    /// The acknowledgements the device saw, in order.
    pub acks: Track<Ack>,
}

/// The recorder a traced run shares between its threads. Each track has
/// its own lock, taken only by the thread that records it (and once at
/// the end), so recording never contends.
pub struct TraceRecorder {
    start: Instant,
    vcpus: Vec<Mutex<Track<KvmRun>>>,
    raises: Mutex<Track<u64>>,
    acks: Mutex<Track<Ack>>,
    /// Where KVM's statistics are read, and their last reading.
    accounting: Arc<ExitAccounting>,
    last_stats: Mutex<Option<Vec<KvmStats>>>,
}

fn lock<T>(track: &Mutex<T>) -> MutexGuard<'_, T> {
    track
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl TraceRecorder {
    pub fn new(vcpus: usize, tracing: Tracing, accounting: Arc<ExitAccounting>) -> Self {
        TraceRecorder {
            start: Instant::now(),
            vcpus: (0..vcpus)
                .map(|_| Mutex::new(Track::with_capacity(tracing.cap)))
                .collect(),
            raises: Mutex::new(Track::with_capacity(tracing.cap)),
            acks: Mutex::new(Track::with_capacity(tracing.cap)),
            accounting,
            last_stats: Mutex::new(None),
        }
    }

    /// KVM's statistics that moved since the last reading, per vCPU; the
    /// first reading only sets the baseline. A failed read records nothing
    /// (the run's own accounting reports it).
    fn kvm_since_last(&self) -> Vec<(usize, KvmStat, u64)> {
        let Ok(now) = self.accounting.kvm_stats() else {
            return Vec::new();
        };
        let mut last = lock(&self.last_stats);
        let moved = last.as_ref().map_or_else(Vec::new, |before| {
            before
                .iter()
                .zip(&now)
                .enumerate()
                .flat_map(|(cpu, (before, after))| {
                    KvmStat::ALL.iter().filter_map(move |&stat| {
                        let delta = after.get(stat).saturating_sub(before.get(stat));
                        (delta > 0).then_some((cpu, stat, delta))
                    })
                })
                .collect()
        });
        *last = Some(now);
        moved
    }

    fn ns(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX)
    }

    /// vCPU `cpu`'s KVM_RUN from `entered` returned at `returned` with `exit`.
    pub fn kvm_run(&self, cpu: usize, entered: Instant, returned: Instant, exit: UserspaceExit) {
        if let Some(track) = self.vcpus.get(cpu) {
            let run = KvmRun {
                entered_ns: self.ns(entered),
                returned_ns: self.ns(returned),
                exit,
            };
            lock(track).push(run);
        }
    }

    /// The device thread raised an interrupt now. The first raise reads
    /// KVM's statistics for the first acknowledgement to count from.
    pub fn raise(&self) {
        if lock(&self.last_stats).is_none() {
            self.kvm_since_last();
        }
        let at = self.ns(Instant::now());
        lock(&self.raises).push(at);
    }

    /// The device saw the guest acknowledge its interrupt now.
    pub fn acknowledged(&self) {
        let at_ns = self.ns(Instant::now());
        let kvm = self.kvm_since_last();
        lock(&self.acks).push(Ack { at_ns, kvm });
    }

    /// Everything recorded so far.
    pub fn finish(&self) -> RunTrace {
        RunTrace {
            vcpus: self.vcpus.iter().map(|track| lock(track).clone()).collect(),
            raises: lock(&self.raises).clone(),
            acks: lock(&self.acks).clone(),
        }
    }
}

/// A device's sink that records each raise before passing it on.
pub struct TracedSink {
    pub inner: Box<dyn InterruptSink>,
    pub recorder: Arc<TraceRecorder>,
}

impl InterruptSink for TracedSink {
    fn raise(&self) -> Result<(), InterruptError> {
        self.recorder.raise();
        self.inner.raise()
    }

    fn acknowledged(&self) {
        self.recorder.acknowledged();
        self.inner.acknowledged();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicU64, Ordering};

    struct Counting(Arc<AtomicU64>);

    impl InterruptSink for Counting {
        fn raise(&self) -> Result<(), InterruptError> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    #[test]
    fn tracks_keep_their_cap_and_count_the_rest() {
        // No vCPU stats fd: acknowledgements record no KVM statistics.
        let accounting = Arc::new(ExitAccounting::new(Vec::new(), Default::default()));
        let recorder = Arc::new(TraceRecorder::new(2, Tracing { cap: 3 }, accounting));
        let now = Instant::now();
        for _ in 0..5 {
            recorder.kvm_run(1, now, now, UserspaceExit::Io);
        }
        recorder.kvm_run(7, now, now, UserspaceExit::Io);
        let passed_on = Arc::new(AtomicU64::new(0));
        let sink = TracedSink {
            inner: Box::new(Counting(passed_on.clone())),
            recorder: recorder.clone(),
        };
        for _ in 0..4 {
            sink.raise().expect("raises");
            sink.acknowledged();
        }
        let trace = recorder.finish();
        assert_eq!((trace.acks.records.len(), trace.acks.dropped), (3, 1));
        assert!(trace.acks.records.iter().all(|ack| ack.kvm.is_empty()));
        assert!(trace
            .acks
            .records
            .windows(2)
            .all(|w| w[0].at_ns <= w[1].at_ns));
        assert_eq!(
            passed_on.load(Ordering::Relaxed),
            4,
            "every raise reaches the guest"
        );
        assert_eq!(trace.vcpus.len(), 2);
        assert!(trace.vcpus[0].records.is_empty());
        assert_eq!(
            (trace.vcpus[1].records.len(), trace.vcpus[1].dropped),
            (3, 2)
        );
        assert_eq!((trace.raises.records.len(), trace.raises.dropped), (3, 1));
        assert!(trace.raises.records.windows(2).all(|w| w[0] <= w[1]));
    }
}
