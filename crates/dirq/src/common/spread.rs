//! A measurement repeated over runs, as every analysis reads it.

use serde::Serialize;

/// A measurement repeated `runs` times: its median and range.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: usize,
}

impl Spread {
    /// None when there is no finite value.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut values: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
        values.sort_by(f64::total_cmp);
        let (&min, &max) = (values.first()?, values.last()?);
        let middle = values.len() / 2;
        let median = if values.len() % 2 == 1 {
            values[middle]
        } else {
            (values[middle - 1] + values[middle]) / 2.0
        };
        Some(Spread {
            median,
            min,
            max,
            runs: values.len(),
        })
    }

    /// The same runs in another unit: `scale` applied to each figure.
    pub fn map(self, scale: impl Fn(f64) -> f64) -> Spread {
        Spread {
            median: scale(self.median),
            min: scale(self.min),
            max: scale(self.max),
            runs: self.runs,
        }
    }

    /// "41.2K (39.8K-44.0K)": the median, and the range when the runs differ.
    pub fn text(&self, format: impl Fn(f64) -> String) -> String {
        if self.min != self.max {
            format!(
                "{} ({}\u{2013}{})",
                format(self.median),
                format(self.min),
                format(self.max)
            )
        } else {
            format(self.median)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_the_median_and_range_of_the_finite_values() {
        let odd = Spread::of([3.0, 1.0, f64::NAN, 2.0]).expect("values");
        assert_eq!((odd.median, odd.min, odd.max, odd.runs), (2.0, 1.0, 3.0, 3));
        let even = Spread::of([4.0, 1.0, 2.0, 3.0]).expect("values");
        assert_eq!(even.median, 2.5);
        assert!(Spread::of([]).is_none());
        let format = |v: f64| format!("{v:.0}");
        assert_eq!(odd.text(format), "2 (1\u{2013}3)");
        assert_eq!(Spread::of([5.0]).expect("one").text(format), "5");
        assert_eq!(Spread::of([5.0, 5.0]).expect("same").text(format), "5");
    }
}
