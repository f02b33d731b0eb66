//! Demand and its forecast over the start-up horizon: arrivals estimated from what the fleet
//! finished plus how its in-flight requests grew, the trend over the last minutes, and the
//! recent peak. Pure: every method takes `now`.

use std::collections::VecDeque;
use std::time::Duration;

/// How far back the in-flight growth is measured (the signals' rate window).
const GROWTH_WINDOW: Duration = Duration::from_secs(60);
/// Samples kept (the trend and peak windows are shorter).
const KEEP: Duration = Duration::from_secs(900);

/// One observation of the fleet's load.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    at: Duration,
    /// Waiting plus running requests.
    in_flight: f64,
    /// Estimated arrivals per second at `at`.
    demand: f64,
    /// Growth of the in-flight requests per second over the growth window at `at`.
    growth: f64,
}

/// The demand history of one ScaledObject.
#[derive(Debug, Clone, Default)]
pub struct DemandTracker {
    samples: VecDeque<Sample>,
}

/// What the tracker reports for one decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Forecast {
    /// Estimated arrivals now, requests per second.
    pub now: f64,
    /// Least-squares slope of the demand over the trend window, requests per second per second.
    pub trend: f64,
    /// Demand expected at the horizon: now plus a rising trend over it (a falling trend is not
    /// extrapolated; scale-in waits for the calm period instead).
    pub at_horizon: f64,
    /// The horizon, seconds.
    pub horizon_seconds: f64,
    /// Highest demand over the peak window.
    pub peak: f64,
}

impl DemandTracker {
    /// Records the fleet's finished requests per second and its in-flight requests at `now`,
    /// and returns the arrival estimate: finished plus the in-flight growth over the last
    /// minute (never negative).
    pub fn observe(&mut self, now: Duration, finished_per_second: f64, in_flight: f64) -> f64 {
        let finished = finite_or_zero(finished_per_second);
        let in_flight = finite_or_zero(in_flight);
        let growth = self
            .samples
            .iter()
            .rev()
            .find(|s| s.at.saturating_add(GROWTH_WINDOW) <= now)
            .or_else(|| self.samples.front())
            .map(|s| {
                let dt = now.saturating_sub(s.at).as_secs_f64();
                if dt >= 10.0 {
                    (in_flight - s.in_flight) / dt
                } else {
                    0.0
                }
            })
            .unwrap_or(0.0);
        let demand = (finished + growth).max(0.0);
        self.samples.push_back(Sample {
            at: now,
            in_flight,
            demand,
            growth,
        });
        while let Some(front) = self.samples.front() {
            if front.at.saturating_add(KEEP) < now {
                self.samples.pop_front();
            } else {
                break;
            }
        }
        demand
    }

    /// The growth of the in-flight requests per second over the last minute, as of the latest
    /// observation (0 before any).
    pub fn growth(&self) -> f64 {
        self.samples.back().map_or(0.0, |s| s.growth)
    }

    /// The forecast at `now` over `horizon`, with the trend fitted over `trend_window` and the
    /// peak taken over `peak_window`.
    pub fn forecast(
        &self,
        now: Duration,
        horizon: Duration,
        trend_window: Duration,
        peak_window: Duration,
    ) -> Forecast {
        let current = self.samples.back().map_or(0.0, |s| s.demand);
        let trend = self.trend(now, trend_window);
        let h = horizon.as_secs_f64();
        let peak = self
            .samples
            .iter()
            .filter(|s| s.at.saturating_add(peak_window) >= now)
            .map(|s| s.demand)
            .fold(current, f64::max);
        Forecast {
            now: current,
            trend,
            at_horizon: current + trend.max(0.0) * h,
            horizon_seconds: h,
            peak,
        }
    }

    /// The least-squares slope of the demand over the samples within `window` of `now`; 0 with
    /// fewer than a third of the window covered.
    pub fn trend(&self, now: Duration, window: Duration) -> f64 {
        let pts: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter(|s| s.at.saturating_add(window) >= now)
            .map(|s| (s.at.as_secs_f64(), s.demand))
            .collect();
        let (Some(first), Some(last)) = (pts.first(), pts.last()) else {
            return 0.0;
        };
        if pts.len() < 3 || last.0 - first.0 < window.as_secs_f64() / 3.0 {
            return 0.0;
        }
        let n = pts.len() as f64;
        let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
        let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        if sxx > 0.0 { sxy / sxx } else { 0.0 }
    }
}

/// The highest demand over a long window (an hour, say), kept as one maximum per minute: the
/// floor that holds capacity for a burst seen recently until the window has passed without one.
#[derive(Debug, Clone, Default)]
pub struct PeakFloor {
    /// (minute index, highest demand within that minute), oldest first.
    minutes: VecDeque<(u64, f64)>,
}

impl PeakFloor {
    /// Records the demand estimated at `now`.
    pub fn observe(&mut self, now: Duration, demand: f64) {
        let demand = finite_or_zero(demand);
        let minute = now.as_secs() / 60;
        match self.minutes.back_mut() {
            Some((m, d)) if *m == minute => *d = d.max(demand),
            _ => self.minutes.push_back((minute, demand)),
        }
    }

    /// The highest demand over the last `window` at `now` (whole minutes, the current one
    /// included), with its age in seconds; `None` for an empty window. Drops what is older.
    pub fn peak(&mut self, now: Duration, window: Duration) -> Option<(f64, f64)> {
        let minute = now.as_secs() / 60;
        let keep = window.as_secs().div_ceil(60);
        while let Some(&(m, _)) = self.minutes.front() {
            if m.saturating_add(keep) < minute {
                self.minutes.pop_front();
            } else {
                break;
            }
        }
        if window.is_zero() {
            return None;
        }
        self.minutes
            .iter()
            .fold(None, |best: Option<(u64, f64)>, &(m, d)| match best {
                Some((_, b)) if b >= d => best,
                _ => Some((m, d)),
            })
            .map(|(m, d)| (d, (minute.saturating_sub(m) * 60) as f64))
    }
}

fn finite_or_zero(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 { x } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn arrivals_are_finished_plus_in_flight_growth() {
        let mut d = DemandTracker::default();
        assert_eq!(d.observe(s(0), 10.0, 20.0), 10.0);
        // 60 s later the backlog grew by 120: 2 more arrivals per second than finished.
        for t in (2..60).step_by(2) {
            d.observe(s(t), 10.0, 20.0 + 2.0 * t as f64);
        }
        let est = d.observe(s(60), 10.0, 140.0);
        assert!((est - 12.0).abs() < 1e-9, "{est}");
        // Draining never makes demand negative.
        let est = d.observe(s(122), 0.0, 0.0);
        assert_eq!(est, 0.0);
    }

    #[test]
    fn a_linear_ramp_gives_its_slope_and_a_forecast_ahead() {
        let mut d = DemandTracker::default();
        for t in (0..=600).step_by(2) {
            // Steady in-flight: demand equals finished, rising 0.05 req/s per second.
            d.observe(s(t), 5.0 + 0.05 * t as f64, 30.0);
        }
        let f = d.forecast(s(600), s(300), s(300), s(300));
        assert!((f.trend - 0.05).abs() < 1e-6, "{f:?}");
        assert!((f.now - 35.0).abs() < 1e-9);
        assert!((f.at_horizon - 50.0).abs() < 1e-3, "{f:?}");
        assert!((f.peak - 35.0).abs() < 1e-9);
    }

    #[test]
    fn a_falling_trend_is_not_extrapolated_and_the_peak_is_remembered() {
        let mut d = DemandTracker::default();
        for t in (0..=600).step_by(2) {
            d.observe(s(t), 40.0 - 0.05 * t as f64, 30.0);
        }
        let f = d.forecast(s(600), s(300), s(300), s(300));
        assert!(f.trend < 0.0);
        assert_eq!(f.at_horizon, f.now);
        assert!((f.peak - 25.0).abs() < 0.2, "{f:?}");
    }

    #[test]
    fn the_peak_floor_holds_the_highest_minute_for_its_window() {
        let mut p = PeakFloor::default();
        for t in (0..600).step_by(2) {
            p.observe(s(t), if (120..240).contains(&t) { 45.0 } else { 6.0 });
        }
        let hour = s(3600);
        assert_eq!(p.peak(s(600), hour), Some((45.0, 480.0)));
        // Still held just before the window ends, gone after it; the base rate remains.
        for t in (600..4000).step_by(2) {
            p.observe(s(t), 6.0);
        }
        assert_eq!(p.peak(s(3600 + 120), hour).map(|x| x.0), Some(45.0));
        assert_eq!(p.peak(s(3600 + 240 + 60), hour).map(|x| x.0), Some(6.0));
        // A zero window is no floor; junk demand counts as none.
        assert_eq!(p.peak(s(4000), Duration::ZERO), None);
        p.observe(s(4002), f64::NAN);
        assert_eq!(p.peak(s(4002), hour).map(|x| x.0), Some(6.0));
    }

    #[test]
    fn too_little_history_has_no_trend() {
        let mut d = DemandTracker::default();
        d.observe(s(0), 1.0, 0.0);
        d.observe(s(2), 50.0, 0.0);
        assert_eq!(d.trend(s(2), s(300)), 0.0);
        assert_eq!(DemandTracker::default().trend(s(0), s(300)), 0.0);
    }
}
