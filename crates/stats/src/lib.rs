//! `dirq-stats`: one latency summary for the real runs and the simulator,
//! so a measured and a predicted distribution read (and plot) alike.
#![forbid(unsafe_code)]

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// `count` as an f64, for statistics over counts, ns and cycles. Exact
/// below 2^53 (about 104 days in ns), far above any count a run produces;
/// beyond that it rounds to the nearest f64, which a statistic tolerates.
#[allow(clippy::cast_precision_loss)] // Exact below 2^53, see above.
pub fn f64_of(count: u64) -> f64 {
    count as f64
}

/// `numerator / denominator` as an f64 (see [`f64_of`]); infinite or NaN
/// when `denominator` is 0, as float division is.
pub fn ratio(numerator: u64, denominator: u64) -> f64 {
    f64_of(numerator) / f64_of(denominator)
}

/// `value` rounded to the nearest integer and clamped to `0..=u64::MAX`
/// (NaN gives 0): a computed ns value, count or cycle figure back as an
/// integer.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // `as` saturates; round first.
pub fn round_u64(value: f64) -> u64 {
    value.round() as u64
}

/// The nearest-rank `percent`ile of `sorted` (ascending): the smallest
/// sample with at least `percent` % of the samples at or below it. None
/// for no samples.
pub fn nearest_rank(sorted: &[u64], percent: u64) -> Option<u64> {
    let len = u64::try_from(sorted.len()).ok()?;
    let rank = len.saturating_mul(percent.min(100)).div_ceil(100).max(1);
    sorted.get(usize::try_from(rank).ok()? - 1).copied()
}

/// Log-spaced histogram buckets: the first ends at this many ns, each
/// next one is 5% wider, so a CDF drawn from them is within 5% in latency.
const FIRST_BUCKET_NS: u64 = 100;
const BUCKET_GROWTH: f64 = 1.05;

/// One bucket of a latency histogram: `count` samples above the previous
/// bucket's `le_ns` and at most this one's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub le_ns: u64,
    pub count: u64,
}

/// A latency distribution in ns: exact order statistics of the samples
/// and their HdrHistogram log buckets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub samples: u64,
    pub mean: f64,
    pub min: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
    /// The non-empty log buckets, in ascending order.
    #[serde(default)]
    pub histogram: Vec<Bucket>,
}

impl LatencySummary {
    /// None when there are no samples.
    pub fn from_samples_ns(samples: &[u64]) -> Option<Self> {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let (&min, &max) = (sorted.first()?, sorted.last()?);
        let len = sorted.len() as u64;
        let mut histogram = Histogram::<u64>::new_with_max(max.max(2), 3).ok()?;
        for &sample in &sorted {
            histogram.record(sample).ok()?;
        }
        let buckets = histogram
            .iter_log(FIRST_BUCKET_NS, BUCKET_GROWTH)
            .filter(|step| step.count_since_last_iteration() > 0)
            .map(|step| Bucket {
                le_ns: step.value_iterated_to(),
                count: step.count_since_last_iteration(),
            })
            .collect();
        Some(LatencySummary {
            samples: len,
            mean: sorted.iter().map(|&ns| f64_of(ns)).sum::<f64>() / f64_of(len),
            min,
            p50: nearest_rank(&sorted, 50)?,
            p90: nearest_rank(&sorted, 90)?,
            p99: nearest_rank(&sorted, 99)?,
            max,
            histogram: buckets,
        })
    }

    /// What makes this summary impossible for any set of samples, if
    /// anything does: a summary read from a file is checked before use.
    pub fn inconsistency(&self) -> Option<&'static str> {
        let order = [self.min, self.p50, self.p90, self.p99, self.max];
        let bucketed = self
            .histogram
            .iter()
            .try_fold(0u64, |sum, bucket| sum.checked_add(bucket.count));
        if self.samples == 0 {
            Some("a summary of no samples")
        } else if order.windows(2).any(|pair| pair[0] > pair[1]) {
            Some("min <= p50 <= p90 <= p99 <= max does not hold")
        } else if !(f64_of(self.min)..=f64_of(self.max)).contains(&self.mean) {
            Some("the mean is not between min and max")
        } else if !self.histogram.is_empty() && bucketed != Some(self.samples) {
            Some("the histogram's buckets do not hold every sample once")
        } else if self
            .histogram
            .windows(2)
            .any(|pair| pair[0].le_ns >= pair[1].le_ns)
        {
            Some("the histogram's buckets are not in ascending order")
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_summary_of_samples_is_consistent_and_a_forged_one_is_not() {
        let samples: Vec<u64> = (1..=500).map(|i| i * 37).collect();
        let summary = LatencySummary::from_samples_ns(&samples).expect("non-empty");
        assert_eq!(summary.inconsistency(), None);
        let forged = |edit: fn(&mut LatencySummary)| {
            let mut forged = summary.clone();
            edit(&mut forged);
            forged.inconsistency()
        };
        assert!(forged(|s| s.min = s.max + 1).is_some());
        assert!(forged(|s| s.p50 = u64::MAX).is_some());
        assert!(forged(|s| s.mean = f64::NAN).is_some());
        assert!(forged(|s| s.mean = -1.0).is_some());
        assert!(forged(|s| s.samples = 0).is_some());
        assert!(forged(|s| s.samples += 1).is_some());
        assert!(forged(|s| s.histogram[0].count = u64::MAX).is_some());
        assert!(forged(|s| s.histogram.swap(0, 1)).is_some());
    }

    #[test]
    fn nothing_to_summarize_is_none() {
        assert_eq!(LatencySummary::from_samples_ns(&[]), None);
    }

    #[test]
    fn the_nearest_rank_is_the_smallest_sample_covering_the_share() {
        let sorted: Vec<u64> = (1..=20).collect();
        assert_eq!(nearest_rank(&sorted, 95), Some(19));
        assert_eq!(nearest_rank(&sorted, 96), Some(20));
        assert_eq!(nearest_rank(&sorted, 0), Some(1));
        assert_eq!(nearest_rank(&[7], 50), Some(7));
        assert_eq!(nearest_rank(&[], 95), None);
    }

    #[test]
    fn percentiles_are_nearest_rank_samples() {
        let samples: Vec<u64> = (1..=100).rev().collect();
        let summary = LatencySummary::from_samples_ns(&samples).unwrap();
        assert_eq!(
            (
                summary.min,
                summary.p50,
                summary.p90,
                summary.p99,
                summary.max
            ),
            (1, 50, 90, 99, 100)
        );
        assert_eq!(summary.mean, 50.5);
    }

    #[test]
    fn histogram_buckets_hold_every_sample_in_ascending_log_buckets() {
        let samples: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        let summary = LatencySummary::from_samples_ns(&samples).expect("non-empty");
        let buckets = &summary.histogram;
        assert_eq!(buckets.iter().map(|b| b.count).sum::<u64>(), 1000);
        assert!(buckets.windows(2).all(|pair| pair[0].le_ns < pair[1].le_ns));
        // 1 us to 1 ms in 5% steps is about 142 buckets; below 20 us some
        // fall between two samples 1 us apart and are left out.
        assert!((90..=145).contains(&buckets.len()), "{}", buckets.len());
        assert!(buckets.iter().all(|b| b.count > 0));
        let below_10us: u64 = buckets
            .iter()
            .filter(|b| b.le_ns <= 10_000)
            .map(|b| b.count)
            .sum();
        assert!((9..=10).contains(&below_10us), "{below_10us}");
    }

    proptest! {
        #[test]
        fn buckets_hold_every_sample_in_ascending_order(
            samples in proptest::collection::vec(1u64..10_000_000, 1..300)
        ) {
            let summary = LatencySummary::from_samples_ns(&samples).unwrap();
            let buckets = &summary.histogram;
            prop_assert_eq!(buckets.iter().map(|b| b.count).sum::<u64>(), samples.len() as u64);
            prop_assert!(buckets.windows(2).all(|pair| pair[0].le_ns < pair[1].le_ns));
            prop_assert!(summary.min <= summary.p50 && summary.p50 <= summary.p90);
            prop_assert!(summary.p90 <= summary.p99 && summary.p99 <= summary.max);
            // HdrHistogram keeps 3 significant digits: the last bucket ends
            // at the maximum, within 0.1%.
            let last = f64_of(buckets.last().unwrap().le_ns);
            prop_assert!(last >= f64_of(summary.max) * 0.999);
        }
    }
}
