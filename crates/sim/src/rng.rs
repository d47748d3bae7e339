//! A small seeded PRNG (SplitMix64, Steele et al. 2014) so that a run is a
//! pure function of its seed, on every platform and toolchain.

use dirq_stats::f64_of;

/// SplitMix64: one 64-bit state word, full period, passes BigCrush.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
    /// The second deviate of the last Box-Muller pair, not yet used.
    spare_normal: Option<f64>,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng {
            state: seed,
            spare_normal: None,
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        f64_of(self.next_u64() >> 11) * (1.0 / f64_of(1u64 << 53))
    }

    /// Exponentially distributed gap with the given mean, in whole ns, at
    /// least 1 so that a Poisson source always advances time.
    pub fn exponential_ns(&mut self, mean_ns: f64) -> u64 {
        let uniform = 1.0 - self.next_f64(); // (0, 1]
        whole_ns(-uniform.ln() * mean_ns).max(1)
    }

    /// A standard normal deviate (Marsaglia's polar method: a pair per
    /// accepted point of the unit disc, the second kept for the next call).
    pub fn standard_normal(&mut self) -> f64 {
        if let Some(spare) = self.spare_normal.take() {
            return spare;
        }
        loop {
            let u = 2.0 * self.next_f64() - 1.0;
            let v = 2.0 * self.next_f64() - 1.0;
            let s = u * u + v * v;
            if s > 0.0 && s < 1.0 {
                let factor = (-2.0 * s.ln() / s).sqrt();
                self.spare_normal = Some(v * factor);
                return u * factor;
            }
        }
    }
}

/// `ns` in whole ns, rounded toward zero (saturating; negative and NaN give
/// 0): a drawn gap keeps only its whole ns, as it always has.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Truncation is the intent.
fn whole_ns(ns: f64) -> u64 {
    ns as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(Rng::new(7).next_u64(), Rng::new(8).next_u64());
    }

    #[test]
    fn normal_deviates_have_mean_0_and_variance_1() {
        let mut rng = Rng::new(5);
        let n = 200_000;
        let samples: Vec<f64> = (0..n).map(|_| rng.standard_normal()).collect();
        let mean = samples.iter().sum::<f64>() / n as f64;
        let variance = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.01, "{mean}");
        assert!((variance - 1.0).abs() < 0.02, "{variance}");
    }

    #[test]
    fn exponential_mean_is_close() {
        let mut rng = Rng::new(1);
        let n = 200_000;
        let sum: u64 = (0..n).map(|_| rng.exponential_ns(10_000.0)).sum();
        let mean = f64_of(sum) / n as f64;
        assert!((mean - 10_000.0).abs() < 100.0, "mean {mean}");
    }
}
