//! Model against reality: the simulator's predictions for configurations the
//! real VMM also ran, side by side with the measurements, every miss shown.

use serde::Serialize;

use crate::report::collect::spread::Spread;

/// The goal of issue 5: predictions within 20% of measurements.
pub const TOLERANCE: f64 = 0.20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    ExitsPerInterrupt,
    LatencyP50Ns,
    TimeInGuest,
    /// Whileloop: the loop's lost time per handled interrupt, which stays
    /// well-conditioned where time in guest nears zero at saturation.
    LostPerInterruptNs,
}

impl Metric {
    pub const ALL: [Metric; 4] = [
        Metric::ExitsPerInterrupt,
        Metric::LatencyP50Ns,
        Metric::TimeInGuest,
        Metric::LostPerInterruptNs,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Metric::ExitsPerInterrupt => "exits per interrupt",
            Metric::LatencyP50Ns => "latency p50 (us)",
            Metric::TimeInGuest => "time in guest",
            Metric::LostPerInterruptNs => "loop time lost per handled interrupt (us)",
        }
    }
}

/// One measured number and the model's prediction of it.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The real configuration, e.g. "irq-latency, kernel + irqfd + PV EOI".
    pub configuration: String,
    pub metric: Metric,
    /// The median of the real runs.
    pub measured: f64,
    /// The median and range of the real runs.
    pub measured_spread: Spread,
    pub predicted: f64,
    /// (predicted - measured) / measured; absent when nothing was measured
    /// to divide by.
    pub relative_error: Option<f64>,
    pub within_tolerance: bool,
}

impl Comparison {
    pub fn new(configuration: String, metric: Metric, measured: Spread, predicted: f64) -> Self {
        let measured_spread = measured;
        let measured = measured.median;
        let relative_error = (measured != 0.0).then(|| (predicted - measured) / measured);
        let within_tolerance = match relative_error {
            Some(error) => error.abs() <= TOLERANCE,
            // Nothing measured: only a prediction of nothing is right.
            None => predicted == 0.0,
        };
        Self {
            configuration,
            metric,
            measured,
            measured_spread,
            predicted,
            relative_error,
            within_tolerance,
        }
    }
}

/// How many of one metric's predictions fell within the tolerance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Score {
    pub metric: Metric,
    pub hits: usize,
    pub of: usize,
}

/// Per metric with any comparison, in [`Metric::ALL`]'s order.
pub fn scores(comparisons: &[Comparison]) -> Vec<Score> {
    Metric::ALL
        .iter()
        .filter_map(|&metric| {
            let of_metric = comparisons.iter().filter(|c| c.metric == metric);
            let (hits, of) = of_metric.fold((0, 0), |(hits, of), c| {
                (hits + usize::from(c.within_tolerance), of + 1)
            });
            (of > 0).then_some(Score { metric, hits, of })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_relative_to_the_measurement_and_misses_are_flagged() {
        let once = |v: f64| Spread::of([v]).expect("value");
        let close = Comparison::new("a".into(), Metric::LatencyP50Ns, once(10_000.0), 11_500.0);
        assert_eq!(close.relative_error, Some(0.15));
        assert!(close.within_tolerance);
        let miss = Comparison::new("b".into(), Metric::ExitsPerInterrupt, once(2.0), 1.0);
        assert_eq!(miss.relative_error, Some(-0.5));
        assert!(!miss.within_tolerance);
        let zero = Comparison::new("c".into(), Metric::ExitsPerInterrupt, once(0.0), 0.0);
        assert!(zero.relative_error.is_none() && zero.within_tolerance);
        let phantom = Comparison::new("d".into(), Metric::ExitsPerInterrupt, once(0.0), 0.3);
        assert!(!phantom.within_tolerance);
    }
}
