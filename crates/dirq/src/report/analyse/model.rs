//! Model against reality: the simulator's predictions for configurations the
//! real VMM also ran, side by side with the measurements, every miss shown.

use serde::Serialize;

use crate::common::spread::Spread;

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
    /// Host cores the VM's vCPU threads kept busy (what polling costs).
    HostCpuCores,
}

impl Metric {
    pub const ALL: [Metric; 5] = [
        Metric::ExitsPerInterrupt,
        Metric::LatencyP50Ns,
        Metric::TimeInGuest,
        Metric::LostPerInterruptNs,
        Metric::HostCpuCores,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Metric::ExitsPerInterrupt => "exits per interrupt",
            Metric::LatencyP50Ns => "latency p50 (us)",
            Metric::TimeInGuest => "time in guest",
            Metric::LostPerInterruptNs => "loop time lost per handled interrupt (us)",
            Metric::HostCpuCores => "host CPU (cores)",
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

impl Score {
    /// Whether the model is trusted for this metric: two thirds of its
    /// predictions fell within the tolerance.
    pub fn trusted(&self) -> bool {
        3 * self.hits >= 2 * self.of
    }
}

/// How far the model is trusted, over all metrics and per metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelVerdict {
    /// Predictions within the tolerance, of all compared.
    pub hits: usize,
    pub of: usize,
    /// The metrics the model is trusted for, then those it is not, each in
    /// [`Metric::ALL`]'s order.
    pub trusted: Vec<Score>,
    pub not_trusted: Vec<Score>,
    /// Whether whileloop was also compared by the loop time it lost per
    /// handled interrupt.
    pub compares_lost_time: bool,
}

/// The verdict on `comparisons`; none without any.
pub fn verdict(comparisons: &[Comparison]) -> Option<ModelVerdict> {
    let scores = scores(comparisons);
    if scores.is_empty() {
        return None;
    }
    let compares_lost_time = scores
        .iter()
        .any(|score| score.metric == Metric::LostPerInterruptNs);
    let (trusted, not_trusted) = scores.iter().partition(|score| score.trusted());
    Some(ModelVerdict {
        hits: scores.iter().map(|score| score.hits).sum(),
        of: scores.iter().map(|score| score.of).sum(),
        trusted,
        not_trusted,
        compares_lost_time,
    })
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

    #[test]
    fn a_metric_is_trusted_where_two_thirds_of_its_predictions_hit() {
        let once = |v: f64| Spread::of([v]).expect("value");
        let compare = |metric: Metric, predicted: f64| {
            Comparison::new("x".into(), metric, once(10.0), predicted)
        };
        let comparisons = [
            // Exits: 2 of 3 within 20%, trusted.
            compare(Metric::ExitsPerInterrupt, 10.0),
            compare(Metric::ExitsPerInterrupt, 11.0),
            compare(Metric::ExitsPerInterrupt, 20.0),
            // Latency: 1 of 2, not trusted.
            compare(Metric::LatencyP50Ns, 10.0),
            compare(Metric::LatencyP50Ns, 5.0),
        ];
        let verdict = verdict(&comparisons).expect("compared");
        assert_eq!((verdict.hits, verdict.of), (3, 5));
        let metrics = |scores: &[Score]| scores.iter().map(|s| s.metric).collect::<Vec<_>>();
        assert_eq!(metrics(&verdict.trusted), [Metric::ExitsPerInterrupt]);
        assert_eq!(metrics(&verdict.not_trusted), [Metric::LatencyP50Ns]);
        assert!(!verdict.compares_lost_time);
        let lost = [compare(Metric::LostPerInterruptNs, 10.0)];
        assert!(super::verdict(&lost).expect("compared").compares_lost_time);
        assert_eq!(super::verdict(&[]), None);
    }
}
