//! Service-time distributions: a paper publishes a mean (an exit's service
//! time, the bare-metal invocation latency); the profile states the shape
//! around it, so that latency has a real distribution (p50 < p99 < max).
//! Every draw comes from the run's seeded [`Rng`], so a run stays a pure
//! function of its seed.

use dirq_stats::{f64_of, round_u64};
use serde::{Deserialize, Serialize};

use crate::rng::Rng;

/// The shape of a service time around its mean; every shape keeps the mean.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "shape", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ServiceShape {
    /// Always the mean.
    #[default]
    Fixed,
    /// Exponential with the mean (coefficient of variation 1).
    Exponential,
    /// Lognormal with the mean and coefficient of variation `cv`
    /// (standard deviation over mean).
    Lognormal { cv: f64 },
    /// A fixed part of `fixed_fraction` of the mean plus an exponential
    /// tail carrying the rest: a path that always runs, and waits that
    /// sometimes do not.
    FixedPlusExponential { fixed_fraction: f64 },
}

/// The largest coefficient of variation a lognormal shape may state.
pub const MAX_CV: f64 = 10.0;

impl ServiceShape {
    /// Whether the shape's parameter is usable (finite, in range).
    pub fn is_valid(self) -> bool {
        match self {
            ServiceShape::Fixed | ServiceShape::Exponential => true,
            ServiceShape::Lognormal { cv } => cv.is_finite() && (0.0..=MAX_CV).contains(&cv),
            ServiceShape::FixedPlusExponential { fixed_fraction } => {
                fixed_fraction.is_finite() && (0.0..=1.0).contains(&fixed_fraction)
            }
        }
    }

    /// The shape with its constants worked out once, ready to draw.
    pub fn sampler(self) -> Sampler {
        match self {
            ServiceShape::Fixed => Sampler::Fixed,
            ServiceShape::Exponential => Sampler::Exponential,
            ServiceShape::Lognormal { cv } => {
                // cv^2 = exp(sigma^2) - 1; the mean is kept by scaling
                // exp(sigma z) by exp(-sigma^2 / 2).
                let sigma2 = (1.0 + cv * cv).ln();
                Sampler::Lognormal {
                    sigma: sigma2.sqrt(),
                    half_sigma2: sigma2 / 2.0,
                }
            }
            ServiceShape::FixedPlusExponential { fixed_fraction } => {
                Sampler::FixedPlusExponential { fixed_fraction }
            }
        }
    }
}

/// A [`ServiceShape`] ready to draw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampler {
    Fixed,
    Exponential,
    Lognormal { sigma: f64, half_sigma2: f64 },
    FixedPlusExponential { fixed_fraction: f64 },
}

impl Sampler {
    /// One service time of mean `mean_ns`, in whole ns (at least 1 unless
    /// the mean is 0, so a zero cost stays free). Inlined: a guest step
    /// and an exit each draw one (hot path).
    #[inline]
    pub fn draw(self, mean_ns: u64, rng: &mut Rng) -> u64 {
        if mean_ns == 0 {
            return 0;
        }
        let mean = f64_of(mean_ns);
        let drawn = match self {
            Sampler::Fixed => return mean_ns,
            Sampler::Exponential => return rng.exponential_ns(mean),
            Sampler::Lognormal { sigma, half_sigma2 } => {
                mean * (sigma * rng.standard_normal() - half_sigma2).exp()
            }
            Sampler::FixedPlusExponential { fixed_fraction } => {
                let fixed = mean * fixed_fraction;
                fixed + f64_of(rng.exponential_ns(mean - fixed))
            }
        };
        round_u64(drawn).clamp(1, MAX_DRAW_FACTOR * mean_ns)
    }
}

/// A draw is capped at this many means, which keeps every sum of costs far
/// from overflowing (a lognormal tail is unbounded).
const MAX_DRAW_FACTOR: u64 = 1_000;

/// Which shape applies to which published mean; by default every time is
/// at its mean.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceTimes {
    /// Every exit's service time (exit to re-entry).
    pub exit: ServiceShape,
    /// The guest's handler and user work (interrupt entry, the wake-up of
    /// the user task, a request's work).
    pub guest: ServiceShape,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(shape: ServiceShape, mean: u64) -> (f64, u64, u64, u64) {
        let mut rng = Rng::new(3);
        let mut samples: Vec<u64> = (0..100_000)
            .map(|_| shape.sampler().draw(mean, &mut rng))
            .collect();
        samples.sort_unstable();
        let average = f64_of(samples.iter().sum::<u64>()) / f64_of(samples.len() as u64);
        let p50 = samples[samples.len() / 2];
        let p99 = samples[samples.len() * 99 / 100];
        (average, p50, p99, samples[samples.len() - 1])
    }

    #[test]
    fn every_shape_keeps_the_mean() {
        for shape in [
            ServiceShape::Fixed,
            ServiceShape::Exponential,
            ServiceShape::Lognormal { cv: 0.5 },
            ServiceShape::FixedPlusExponential {
                fixed_fraction: 0.7,
            },
        ] {
            let (average, ..) = stats(shape, 10_000);
            assert!((average - 10_000.0).abs() < 150.0, "{shape:?}: {average}");
        }
    }

    #[test]
    fn a_spread_shape_has_a_tail_and_fixed_has_none() {
        let (_, p50, p99, max) = stats(ServiceShape::Lognormal { cv: 0.5 }, 2_000);
        assert!(p50 < p99 && p99 < max, "{p50} {p99} {max}");
        assert!(p50 < 2_000, "a lognormal's median is below its mean");
        let (_, p50, p99, max) = stats(ServiceShape::Fixed, 2_000);
        assert_eq!((p50, p99, max), (2_000, 2_000, 2_000));
        let tail = ServiceShape::FixedPlusExponential {
            fixed_fraction: 0.5,
        };
        let (_, p50, _, _) = stats(tail, 2_000);
        assert!(p50 >= 1_000, "never below the fixed part");
    }

    #[test]
    fn a_zero_cost_stays_free_and_the_same_seed_draws_the_same() {
        let mut rng = Rng::new(1);
        assert_eq!(ServiceShape::Exponential.sampler().draw(0, &mut rng), 0);
        let shape = ServiceShape::Lognormal { cv: 1.0 };
        let a: Vec<u64> = (0..10)
            .map(|_| shape.sampler().draw(500, &mut Rng::new(9)))
            .collect();
        let b: Vec<u64> = (0..10)
            .map(|_| shape.sampler().draw(500, &mut Rng::new(9)))
            .collect();
        assert_eq!(a, b);
    }

    #[test]
    fn out_of_range_parameters_are_invalid() {
        assert!(!ServiceShape::Lognormal { cv: -1.0 }.is_valid());
        assert!(!ServiceShape::Lognormal { cv: f64::NAN }.is_valid());
        assert!(!ServiceShape::FixedPlusExponential {
            fixed_fraction: 1.5
        }
        .is_valid());
        assert!(ServiceShape::Lognormal { cv: 0.5 }.is_valid());
    }
}
