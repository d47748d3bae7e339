//! The NIC's interrupt throttling (82599 datasheet 7.3.2.1, EITR): a queue's
//! interrupt waits until the throttling interval has passed since the
//! previous one. The interval is fixed (`itr_us`) or adaptive, as the
//! ixgbe/ixgbevf drivers set it after each interrupt from the bytes it
//! brought (`ixgbe_update_itr`): at most 10 MB/s since the last interrupt
//! keeps the lowest latency class (100,000 interrupts/s), up to 20 MB/s
//! the low latency class (20,000/s), above that the bulk class (8,000/s),
//! moving towards the new class's interval by exponential smoothing.
//!
//! The UDP receive workloads keep the coalescing fitted to them
//! (`scenario::NicCoalescing`, see scenarios/did-udp-rx.toml); every other
//! network workload's VF interrupts are throttled here.

use super::devices::Coalescing;

/// How the interval is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ItrMode {
    Fixed { interval_ns: u64 },
    Adaptive,
}

/// ixgbe's latency classes and their intervals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LatencyClass {
    Lowest,
    Low,
    Bulk,
}

impl LatencyClass {
    fn interval_ns(self) -> u64 {
        match self {
            LatencyClass::Lowest => 10_000,
            LatencyClass::Low => 50_000,
            LatencyClass::Bulk => 125_000,
        }
    }

    /// `ixgbe_update_itr`'s thresholds, in bytes per microsecond (MB/s).
    fn next(self, bytes_per_us: u64) -> LatencyClass {
        match self {
            LatencyClass::Lowest if bytes_per_us > 10 => LatencyClass::Low,
            LatencyClass::Low if bytes_per_us > 20 => LatencyClass::Bulk,
            LatencyClass::Low if bytes_per_us <= 10 => LatencyClass::Lowest,
            LatencyClass::Bulk if bytes_per_us <= 20 => LatencyClass::Low,
            class => class,
        }
    }
}

/// One queue's throttle.
#[derive(Clone, Copy, Debug)]
pub(super) struct Throttle {
    mode: ItrMode,
    class: LatencyClass,
    interval_ns: u64,
    last_fire: Option<u64>,
    /// Bytes received since the last interrupt.
    bytes: u64,
}

impl Throttle {
    pub(super) fn new(mode: ItrMode) -> Throttle {
        let interval_ns = match mode {
            ItrMode::Fixed { interval_ns } => interval_ns,
            ItrMode::Adaptive => LatencyClass::Lowest.interval_ns(),
        };
        Throttle {
            mode,
            class: LatencyClass::Lowest,
            interval_ns,
            last_fire: None,
            bytes: 0,
        }
    }

    #[cfg(test)]
    fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// A frame of `bytes` arrived.
    pub(super) fn received(&mut self, bytes: u64) {
        self.bytes += bytes;
    }

    /// Whether a queue with packets waiting (and its interrupt unmasked)
    /// may interrupt at `now`, or when.
    pub(super) fn decide(&self, now: u64, timeout_armed: bool) -> Coalescing {
        let earliest = self
            .last_fire
            .map_or(now, |last| last.saturating_add(self.interval_ns));
        if earliest <= now {
            Coalescing::Fire
        } else if timeout_armed {
            Coalescing::Wait
        } else {
            Coalescing::ArmTimeout(earliest)
        }
    }

    /// The interrupt fired at `now`: the adaptive interval follows the
    /// bytes it brought, per microsecond of the interval that held it.
    pub(super) fn fired(&mut self, now: u64) {
        if self.mode == ItrMode::Adaptive {
            let interval_us = (self.interval_ns / 1_000).max(1);
            self.class = self.class.next(self.bytes / interval_us);
            let target = self.class.interval_ns();
            if target != self.interval_ns {
                // ixgbe's smoothing: new = 10 new cur / (9 new + cur).
                let current = self.interval_ns;
                self.interval_ns = 10 * target * current / (9 * target + current);
            }
        }
        self.bytes = 0;
        self.last_fire = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Interrupts a throttle gives for `frames` frames of `bytes` arriving
    /// every `gap_ns`, each served at once (the driver unmasks at once).
    fn interrupts(mode: ItrMode, frames: u64, bytes: u64, gap_ns: u64) -> u64 {
        let mut throttle = Throttle::new(mode);
        let (mut fired, mut pending_since, mut armed) = (0, None, None::<u64>);
        for frame in 0..frames {
            let now = frame * gap_ns;
            if armed.is_some_and(|at| at <= now) {
                throttle.fired(armed.unwrap_or(now));
                fired += 1;
                armed = None;
                pending_since = None;
            }
            throttle.received(bytes);
            pending_since.get_or_insert(now);
            match throttle.decide(now, armed.is_some()) {
                Coalescing::Fire => {
                    throttle.fired(now);
                    fired += 1;
                    pending_since = None;
                }
                Coalescing::ArmTimeout(at) => armed = Some(at),
                Coalescing::Wait => {}
            }
        }
        fired
    }

    #[test]
    fn a_fixed_interval_spaces_interrupts_by_at_least_the_interval() {
        let mut throttle = Throttle::new(ItrMode::Fixed { interval_ns: 5_000 });
        assert_eq!(throttle.decide(100, false), Coalescing::Fire);
        throttle.fired(100);
        assert_eq!(throttle.decide(200, false), Coalescing::ArmTimeout(5_100));
        assert_eq!(throttle.decide(300, true), Coalescing::Wait);
        assert_eq!(throttle.decide(5_100, true), Coalescing::Fire);
        // A fixed interval never adapts.
        throttle.received(1 << 30);
        throttle.fired(5_100);
        assert_eq!(throttle.interval_ns(), 5_000);
    }

    #[test]
    fn adaptive_itr_lowers_the_interrupt_rate_under_load() {
        // 1500-byte frames at 800K/s (1.2 GB/s): bulk traffic.
        let (frames, bytes, gap) = (20_000, 1_500, 1_250);
        let lowest = ItrMode::Fixed {
            interval_ns: LatencyClass::Lowest.interval_ns(),
        };
        let adaptive = interrupts(ItrMode::Adaptive, frames, bytes, gap);
        assert!(adaptive < interrupts(lowest, frames, bytes, gap));
        let mut throttle = Throttle::new(ItrMode::Adaptive);
        for _ in 0..50 {
            throttle.received(1_000_000);
            throttle.fired(0);
        }
        assert!(throttle.interval_ns() > LatencyClass::Low.interval_ns());
    }

    #[test]
    fn adaptive_itr_keeps_the_lowest_latency_when_traffic_is_light() {
        let mut throttle = Throttle::new(ItrMode::Adaptive);
        for _ in 0..50 {
            throttle.received(100);
            throttle.fired(0);
        }
        assert_eq!(throttle.interval_ns(), LatencyClass::Lowest.interval_ns());
    }

    #[test]
    fn the_classes_step_one_at_a_time_both_ways() {
        assert_eq!(LatencyClass::Lowest.next(100), LatencyClass::Low);
        assert_eq!(LatencyClass::Low.next(100), LatencyClass::Bulk);
        assert_eq!(LatencyClass::Bulk.next(15), LatencyClass::Low);
        assert_eq!(LatencyClass::Low.next(5), LatencyClass::Lowest);
        assert_eq!(LatencyClass::Low.next(15), LatencyClass::Low);
    }
}
