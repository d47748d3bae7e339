//! A server's QoS target: the peak request rate at which 95 % of requests
//! finish within the target time. One run's clients first send back to
//! back (every connection busy: the saturated rate), which bounds the
//! search; its own latency is no test of the target (a closed loop's is
//! Little's law's, connections / rate, whatever the server does). The
//! offered load is then bisected between zero and the saturated rate: the
//! clients offer requests at that rate, each timed from its offer (one
//! waiting for a free connection counts its wait), and a load meets the
//! target when the 95th percentile is within it and the server keeps up
//! (answers at least `KEEPS_UP` of the load). Deterministic: every run
//! has the same seed.

use dirq_stats::{f64_of, round_u64};

use crate::machine::Machine;
use crate::scenario::RunSpec;
use crate::SimError;

/// Bisection steps: the peak to within 1/2^7 of the saturated rate.
const STEPS: u32 = 7;
/// The share of the offered load a server must answer to keep up.
const KEEPS_UP: f64 = 0.97;

/// What one run at one load gave.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Point {
    pub(crate) achieved_per_s: f64,
    pub(crate) p95_ns: u64,
}

impl Point {
    fn of(spec: &RunSpec, machine: &Machine) -> Point {
        let seconds = f64_of(spec.duration_ns) / 1e9;
        let mut latencies = machine.counters().latencies.clone();
        latencies.sort_unstable();
        let p95_ns = match latencies.len() {
            0 => u64::MAX,
            n => latencies[(n * 95).div_ceil(100) - 1],
        };
        Point {
            achieved_per_s: f64_of(machine.counters().requests_done) / seconds,
            p95_ns,
        }
    }
}

/// The bisection over offered load, on any `measure` of a load (None:
/// back to back). Returns the load that gave the peak, and its point.
pub(crate) fn search(
    target_ns: u64,
    mut measure: impl FnMut(Option<u64>) -> Result<Point, SimError>,
) -> Result<(Option<u64>, Point), SimError> {
    let saturated = measure(None)?;
    let (mut low, mut high) = (0.0, saturated.achieved_per_s);
    let mut best = (
        Some(0),
        Point {
            achieved_per_s: 0.0,
            p95_ns: 0,
        },
    );
    for _ in 0..STEPS {
        let load = round_u64((low + high) / 2.0).max(1);
        let point = measure(Some(load))?;
        let meets = point.p95_ns <= target_ns && point.achieved_per_s >= KEEPS_UP * f64_of(load);
        if meets {
            low = f64_of(load);
            best = (Some(load), point);
        } else {
            high = f64_of(load);
        }
    }
    Ok(best)
}

/// The run whose load gave `spec`'s peak rate within `target_ms`: its
/// spec (with that load) and its machine.
pub(crate) fn peak_rate(
    spec: &RunSpec,
    target_ms: u64,
    run: impl Fn(&RunSpec) -> Result<Machine, SimError>,
) -> Result<(RunSpec, Machine), SimError> {
    let at = |load: Option<u64>| RunSpec {
        offered_per_s: load,
        ..spec.clone()
    };
    let (load, _) = search(target_ms * 1_000_000, |load| {
        let spec = at(load);
        Ok(Point::of(&spec, &run(&spec)?))
    })?;
    let spec = at(load);
    let machine = run(&spec)?;
    Ok((spec, machine))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server of `capacity` requests/s whose latency explodes past 90 %
    /// of it.
    fn server(capacity: f64) -> impl FnMut(Option<u64>) -> Result<Point, SimError> {
        move |load| {
            let offered = load.map_or(f64::INFINITY, f64_of);
            let achieved = offered.min(capacity);
            let p95_ns = if offered > 0.9 * capacity {
                50_000_000
            } else {
                1_000_000
            };
            Ok(Point {
                achieved_per_s: achieved,
                p95_ns,
            })
        }
    }

    #[test]
    fn the_search_finds_the_highest_load_that_meets_the_target() {
        let (load, point) = search(10_000_000, server(100_000.0)).expect("search");
        let load = f64_of(load.expect("bisected"));
        assert!(
            load <= 90_000.0 && load > 90_000.0 * (1.0 - 2.0 / 128.0),
            "{load}"
        );
        assert!(point.p95_ns <= 10_000_000);
    }

    #[test]
    fn a_closed_loop_within_the_target_only_bounds_the_search() {
        // Back to back the p95 meets the target, but an offered load past
        // 90 % of capacity does not: the peak is the open load's.
        let mut server = server(100_000.0);
        let measure = |load: Option<u64>| match load {
            None => Ok(Point {
                achieved_per_s: 100_000.0,
                p95_ns: 1_000_000,
            }),
            Some(_) => server(load),
        };
        let (load, _) = search(10_000_000, measure).expect("search");
        assert!(load.is_some_and(|load| load <= 90_000), "{load:?}");
    }
}
