//! A small deterministic random number generator, shared by everything that needs repeatable
//! randomness (the emulator's fault injection, the simulator's arrivals, the load test's request
//! sizes) so a seed reproduces a run exactly, without a dependency.
//!
//! The stream for a seed is part of the contract: recorded simulator and load-test results
//! depend on it, so the algorithm and the derived draws must not change.

/// SplitMix64 (Steele, Lea and Flood, 2014): a 64-bit state advanced by a constant and mixed.
/// Not for cryptography.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform number in [0, 1): the top 53 bits of [`SplitMix64::next_u64`].
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An exponentially distributed number with the given rate (mean `1 / rate`).
    pub fn next_exp(&mut self, rate: f64) -> f64 {
        -(1.0 - self.next_f64()).ln() / rate
    }

    /// A whole number uniform in [lo, hi] (`lo <= hi`), by the remainder of
    /// [`SplitMix64::next_u64`].
    pub fn between(&mut self, lo: u32, hi: u32) -> u32 {
        let span = u64::from(hi - lo) + 1;
        lo + (self.next_u64() % span) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_for_a_seed_is_pinned() {
        let mut r = SplitMix64::new(0);
        assert_eq!(
            [r.next_u64(), r.next_u64(), r.next_u64()],
            [
                0xE220_A839_7B1D_CDAF,
                0x6E78_9E6A_A1B9_65F4,
                0x06C4_5D18_8009_454F
            ]
        );
        let mut r = SplitMix64::new(42);
        assert_eq!(r.next_u64(), 0xBDD7_3226_2FEB_6E95);
        assert_eq!(SplitMix64::new(7).next_f64(), 0.389_829_748_391_271_5);
        let mut r = SplitMix64::new(9);
        let drawn: Vec<u32> = (0..5).map(|_| r.between(10, 20)).collect();
        assert_eq!(drawn, [12, 14, 13, 14, 13]);
    }

    #[test]
    fn derived_draws_stay_in_range_and_repeat() {
        let mut a = SplitMix64::new(9);
        let mut b = a.clone();
        for _ in 0..1000 {
            let x = a.between(10, 20);
            assert!((10..=20).contains(&x));
            assert_eq!(x, b.between(10, 20));
        }
        assert_eq!(SplitMix64::new(3).between(5, 5), 5);
        let e = SplitMix64::new(1).next_exp(2.0);
        assert!(e.is_finite() && e >= 0.0);
    }
}
