//! Traces generated from a rate curve: a non-homogeneous Poisson arrival process (by thinning)
//! whose request sizes are drawn from a pool, usually a bundled real trace.
//!
//! Owns: the rate curves (diurnal day, working day, flash crowd, periodic batch bursts, slow
//! ramp, on/off, piecewise-constant) and the seeded generator. Pure: the same curve, pool and
//! seed give the same requests, and another seed gives another arrival process.

use std::time::Duration;

use vllm_keda_core::rng::SplitMix64;

use super::TraceRequest;

/// Offered load over time, in requests per second.
#[derive(Debug, Clone, PartialEq)]
pub enum RateCurve {
    /// The same rate throughout.
    Constant(f64),
    /// A raised cosine: `low` at the start, `high` half a period later, `low` again after a
    /// period (one compressed day per period).
    Diurnal {
        /// Rate at the trough.
        low: f64,
        /// Rate at the peak.
        high: f64,
        /// Seconds per cycle.
        period_seconds: f64,
    },
    /// A working day: `night` outside office hours, two humps (morning and afternoon, peaking
    /// at `peak`) separated by a lunch dip to `lunch`; the day is `day_seconds` long and the
    /// office hours are its middle half.
    WorkingDay {
        /// Rate at night.
        night: f64,
        /// Rate at the two peaks.
        peak: f64,
        /// Rate at the lunch dip.
        lunch: f64,
        /// Seconds in the day.
        day_seconds: f64,
    },
    /// `base` throughout, with a crowd of `crowd` from `start` for `length` seconds (reached
    /// and left over `ramp` seconds).
    FlashCrowd {
        /// Background rate.
        base: f64,
        /// Rate during the crowd.
        crowd: f64,
        /// When the crowd starts, seconds.
        start_seconds: f64,
        /// How long it stays, seconds.
        length_seconds: f64,
        /// Seconds to reach and to leave the crowd's rate.
        ramp_seconds: f64,
    },
    /// `base`, with `burst` for `length` seconds every `every` seconds, the first at `first`.
    BatchBursts {
        /// Background rate.
        base: f64,
        /// Rate during a burst.
        burst: f64,
        /// Seconds between burst starts.
        every_seconds: f64,
        /// Seconds per burst.
        length_seconds: f64,
        /// When the first burst starts, seconds.
        first_seconds: f64,
    },
    /// `from` until `start`, a linear ramp to `to` at `end`, then `to`.
    Ramp {
        /// Rate before the ramp.
        from: f64,
        /// Rate after the ramp.
        to: f64,
        /// Ramp start, seconds.
        start_seconds: f64,
        /// Ramp end, seconds.
        end_seconds: f64,
    },
    /// `on` for `on_seconds`, then `off` for `off_seconds`, repeated (starting on).
    OnOff {
        /// Rate while on.
        on: f64,
        /// Rate while off.
        off: f64,
        /// Seconds on.
        on_seconds: f64,
        /// Seconds off.
        off_seconds: f64,
    },
    /// Piecewise constant: `rates[i]` over `[i x bucket, (i + 1) x bucket)`, 0 after.
    Buckets {
        /// Seconds per bucket.
        bucket_seconds: f64,
        /// Rate in each bucket.
        rates: Vec<f64>,
    },
}

fn smooth(x: f64) -> f64 {
    // 0 -> 0, 1 -> 1, raised cosine between.
    let x = x.clamp(0.0, 1.0);
    0.5 - 0.5 * (std::f64::consts::PI * x).cos()
}

impl RateCurve {
    /// The rate at `t` seconds (never negative).
    pub fn rate_at(&self, t: f64) -> f64 {
        let r = match self {
            Self::Constant(r) => *r,
            Self::Diurnal {
                low,
                high,
                period_seconds,
            } => {
                let phase = (t / period_seconds).fract();
                low + (high - low) * (0.5 - 0.5 * (std::f64::consts::TAU * phase).cos())
            }
            Self::WorkingDay {
                night,
                peak,
                lunch,
                day_seconds,
            } => {
                let x = (t / day_seconds).fract();
                // Office hours are [0.25, 0.75) of the day; lunch at 0.5.
                if !(0.25..0.75).contains(&x) {
                    *night
                } else {
                    let within = (x - 0.25) / 0.5; // 0..1
                    // Two humps: sin^2 over each half, dipping to `lunch` at the middle.
                    let hump = (std::f64::consts::TAU * within).sin().abs();
                    let floor = if (0.25..0.75).contains(&within) {
                        *lunch
                    } else {
                        *night
                    };
                    floor + (peak - floor) * hump.powi(2)
                }
            }
            Self::FlashCrowd {
                base,
                crowd,
                start_seconds,
                length_seconds,
                ramp_seconds,
            } => {
                let ramp = ramp_seconds.max(1e-9);
                let up = smooth((t - start_seconds) / ramp);
                let down = smooth((t - start_seconds - length_seconds) / ramp);
                base + (crowd - base) * (up - down)
            }
            Self::BatchBursts {
                base,
                burst,
                every_seconds,
                length_seconds,
                first_seconds,
            } => {
                if t < *first_seconds {
                    *base
                } else if (t - first_seconds) % every_seconds < *length_seconds {
                    *burst
                } else {
                    *base
                }
            }
            Self::Ramp {
                from,
                to,
                start_seconds,
                end_seconds,
            } => {
                let x =
                    ((t - start_seconds) / (end_seconds - start_seconds).max(1e-9)).clamp(0.0, 1.0);
                from + (to - from) * x
            }
            Self::OnOff {
                on,
                off,
                on_seconds,
                off_seconds,
            } => {
                if t % (on_seconds + off_seconds) < *on_seconds {
                    *on
                } else {
                    *off
                }
            }
            Self::Buckets {
                bucket_seconds,
                rates,
            } => {
                let i = (t / bucket_seconds).floor();
                if i < 0.0 {
                    0.0
                } else {
                    rates.get(i as usize).copied().unwrap_or(0.0)
                }
            }
        };
        if r.is_finite() { r.max(0.0) } else { 0.0 }
    }

    /// An upper bound of the rate over all time (for thinning).
    pub fn max_rate(&self) -> f64 {
        match self {
            Self::Constant(r) => *r,
            Self::Diurnal { low, high, .. } => low.max(*high),
            Self::WorkingDay {
                night, peak, lunch, ..
            } => night.max(*peak).max(*lunch),
            Self::FlashCrowd { base, crowd, .. } => base.max(*crowd),
            Self::BatchBursts { base, burst, .. } => base.max(*burst),
            Self::Ramp { from, to, .. } => from.max(*to),
            Self::OnOff { on, off, .. } => on.max(*off),
            Self::Buckets { rates, .. } => rates.iter().copied().fold(0.0, f64::max),
        }
        .max(0.0)
    }

    /// Expected arrivals over `[0, seconds)` (trapezoid rule on one-second steps).
    pub fn expected_arrivals(&self, seconds: f64) -> f64 {
        let n = seconds.ceil() as usize;
        (0..n).map(|i| self.rate_at(i as f64 + 0.5)).sum()
    }
}

/// `(prompt, output)` token pairs to draw request sizes from.
pub type SizePool = [(u32, u32)];

/// A Poisson arrival process with rate `curve` over `[0, seconds)`, drawn by thinning from
/// `seed`; each request's sizes are drawn uniformly from `sizes` with the same generator.
/// Returns no requests when `sizes` is empty or the curve is zero throughout.
pub fn poisson(curve: &RateCurve, seconds: f64, sizes: &SizePool, seed: u64) -> Vec<TraceRequest> {
    let max = curve.max_rate();
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if sizes.is_empty() || !positive(max) || !positive(seconds) {
        return Vec::new();
    }
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::with_capacity(curve.expected_arrivals(seconds) as usize + 16);
    let mut t = 0.0;
    loop {
        t += rng.next_exp(max);
        if t >= seconds {
            break;
        }
        let keep = rng.next_f64() * max < curve.rate_at(t);
        if !keep {
            continue;
        }
        let pick = ((rng.next_f64() * sizes.len() as f64) as usize).min(sizes.len() - 1);
        let (prompt_tokens, output_tokens) = sizes[pick];
        out.push(TraceRequest {
            arrival: Duration::from_secs_f64(t),
            prompt_tokens,
            output_tokens,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curves_take_their_documented_values() {
        let d = RateCurve::Diurnal {
            low: 2.0,
            high: 10.0,
            period_seconds: 100.0,
        };
        assert!((d.rate_at(0.0) - 2.0).abs() < 1e-9);
        assert!((d.rate_at(50.0) - 10.0).abs() < 1e-9);
        let f = RateCurve::FlashCrowd {
            base: 1.0,
            crowd: 9.0,
            start_seconds: 100.0,
            length_seconds: 50.0,
            ramp_seconds: 10.0,
        };
        assert_eq!(f.rate_at(50.0), 1.0);
        assert!((f.rate_at(130.0) - 9.0).abs() < 1e-9);
        assert!((f.rate_at(200.0) - 1.0).abs() < 1e-9);
        let b = RateCurve::BatchBursts {
            base: 1.0,
            burst: 5.0,
            every_seconds: 100.0,
            length_seconds: 10.0,
            first_seconds: 20.0,
        };
        assert_eq!(
            [0.0, 25.0, 35.0, 125.0].map(|t| b.rate_at(t)),
            [1.0, 5.0, 1.0, 5.0]
        );
        let r = RateCurve::Ramp {
            from: 1.0,
            to: 3.0,
            start_seconds: 10.0,
            end_seconds: 20.0,
        };
        assert_eq!([0.0, 15.0, 30.0].map(|t| r.rate_at(t)), [1.0, 2.0, 3.0]);
        let w = RateCurve::WorkingDay {
            night: 1.0,
            peak: 10.0,
            lunch: 4.0,
            day_seconds: 100.0,
        };
        assert_eq!(w.rate_at(10.0), 1.0);
        assert!((w.rate_at(37.5) - 10.0).abs() < 1e-9, "{}", w.rate_at(37.5));
        assert!((w.rate_at(50.0) - 4.0).abs() < 1e-9, "{}", w.rate_at(50.0));
    }

    #[test]
    fn poisson_follows_the_curve_and_the_seed() {
        let curve = RateCurve::OnOff {
            on: 20.0,
            off: 2.0,
            on_seconds: 100.0,
            off_seconds: 100.0,
        };
        let sizes = [(100, 10), (200, 20)];
        let a = poisson(&curve, 400.0, &sizes, 1);
        assert_eq!(a, poisson(&curve, 400.0, &sizes, 1));
        let b = poisson(&curve, 400.0, &sizes, 2);
        assert_ne!(a, b, "another seed, another arrival process");
        let on = a
            .iter()
            .filter(|r| r.arrival.as_secs_f64() % 200.0 < 100.0)
            .count() as f64;
        let off = a.len() as f64 - on;
        // Expected 4,000 on and 400 off; 5 standard deviations either way.
        assert!((on - 4000.0).abs() < 5.0 * 4000f64.sqrt(), "{on}");
        assert!((off - 400.0).abs() < 5.0 * 400f64.sqrt(), "{off}");
        assert!(a.windows(2).all(|w| w[0].arrival <= w[1].arrival));
        assert!(
            a.iter()
                .all(|r| sizes.contains(&(r.prompt_tokens, r.output_tokens)))
        );
        assert!(poisson(&curve, 400.0, &[], 1).is_empty());
    }
}
