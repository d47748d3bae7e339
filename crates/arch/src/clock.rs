//! Time is injected into every model: a model never reads the wall clock.
//! The simulator supplies its event time, the VMM a monotonic host clock.

/// A source of the current time in nanoseconds since an arbitrary epoch.
pub trait Clock {
    fn now_ns(&self) -> u64;
}
