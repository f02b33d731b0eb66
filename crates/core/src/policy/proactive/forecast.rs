//! Demand and its forecast over the start-up horizon: arrivals estimated from what the fleet
//! finished plus how its in-flight requests grew, the trend over the last minutes, and the
//! recent peak. Pure: every method takes `now`.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

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
    /// When not zero, the in-flight growth is also measured over this last stretch, and the
    /// demand counts the larger of the two growths (`onset=S`).
    onset: Duration,
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
    /// A tracker that also measures the in-flight growth over the last `onset` (zero: over the
    /// rate window alone), so a burst's arrivals count within seconds.
    pub fn with_onset(onset: Duration) -> Self {
        Self {
            samples: VecDeque::new(),
            onset,
        }
    }

    /// The in-flight growth per second from the newest sample at least `window` old (or the
    /// oldest) to `in_flight` at `now`; 0 when that spans less than `least`.
    fn growth_over(&self, now: Duration, in_flight: f64, window: Duration, least: f64) -> f64 {
        self.samples
            .iter()
            .rev()
            .find(|s| s.at.saturating_add(window) <= now)
            .or_else(|| self.samples.front())
            .map(|s| {
                let dt = now.saturating_sub(s.at).as_secs_f64();
                if dt >= least && dt > 0.0 {
                    (in_flight - s.in_flight) / dt
                } else {
                    0.0
                }
            })
            .unwrap_or(0.0)
    }

    /// Records the fleet's finished requests per second and its in-flight requests at `now`,
    /// and returns the arrival estimate: finished plus the in-flight growth over the last
    /// `window` (the rate window; never negative; none before a sixth of it has passed), or over
    /// the onset stretch when that growth is larger.
    pub fn observe(
        &mut self,
        now: Duration,
        finished_per_second: f64,
        in_flight: f64,
        window: Duration,
    ) -> f64 {
        let finished = finite_or_zero(finished_per_second);
        let in_flight = finite_or_zero(in_flight);
        let growth = self.growth_over(now, in_flight, window, window.as_secs_f64() / 6.0);
        // The onset stretch counts only while the in-flight requests grow over it: a flat or
        // draining stretch after a drop would add nothing to a finished rate that still counts
        // the drained backlog, and the rate window's (negative) growth corrects that.
        let onset = if self.onset.is_zero() {
            growth
        } else {
            let short =
                self.growth_over(now, in_flight, self.onset, self.onset.as_secs_f64() / 2.0);
            if short > 0.0 {
                growth.max(short)
            } else {
                growth
            }
        };
        let demand = (finished + onset).max(0.0);
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

    /// How long a demand history there is at `now`: the seconds since the oldest sample kept
    /// (0 before any). The samples are kept for 900 s, so past that it reads at least 900 s.
    pub fn history_seconds(&self, now: Duration) -> f64 {
        self.samples
            .front()
            .map_or(0.0, |s| now.saturating_sub(s.at).as_secs_f64())
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
        self.trend_until(window, now)
    }

    /// The least-squares slope of the demand over the samples within `window` up to `end`; 0
    /// with fewer than a third of the window covered.
    pub fn trend_until(&self, window: Duration, end: Duration) -> f64 {
        let pts: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter(|s| s.at <= end && s.at.saturating_add(window) >= end)
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
        let minute = self.prune(now, window)?;
        highest(minute, self.minutes.iter().copied())
    }

    /// Drops the minutes older than `window` at `now`; the current minute's index, or `None`
    /// for a zero window (no floor).
    fn prune(&mut self, now: Duration, window: Duration) -> Option<u64> {
        let minute = now.as_secs() / 60;
        let keep = window.as_secs().div_ceil(60);
        while let Some(&(m, _)) = self.minutes.front() {
            if m.saturating_add(keep) < minute {
                self.minutes.pop_front();
            } else {
                break;
            }
        }
        (!window.is_zero()).then_some(minute)
    }

    /// As [`PeakFloor::peak`], but only minutes the demand fell from: those followed, within
    /// `within` (whole minutes), by a minute whose highest demand, or the demand `now_demand`
    /// at `now`, is below half of theirs. A load that stops falls that fast; a day's decline
    /// takes an hour to halve. Drops what is older than the window.
    pub fn dropped_peak(
        &mut self,
        now: Duration,
        window: Duration,
        within: Duration,
        now_demand: f64,
    ) -> Option<(f64, f64)> {
        let minute = self.prune(now, window)?;
        let span = within.as_secs().div_ceil(60).max(1);
        let now_demand = finite_or_zero(now_demand);
        let minutes = &self.minutes;
        let dropped = minutes.iter().enumerate().filter(|&(i, &(m, d))| {
            let fell_later = minutes
                .iter()
                .skip(i + 1)
                .take_while(|&&(n, _)| n <= m.saturating_add(span))
                .any(|&(_, later)| later < 0.5 * d);
            let falls_now = minute <= m.saturating_add(span) && now_demand < 0.5 * d;
            fell_later || falls_now
        });
        highest(minute, dropped.map(|(_, &x)| x))
    }
}

/// The highest of `(minute index, demand)` pairs (the oldest of equals), with its age in
/// seconds at `minute`.
fn highest(minute: u64, minutes: impl Iterator<Item = (u64, f64)>) -> Option<(f64, f64)> {
    minutes
        .fold(None, |best: Option<(u64, f64)>, (m, d)| match best {
            Some((_, b)) if b >= d => best,
            _ => Some((m, d)),
        })
        .map(|(m, d)| (d, (minute.saturating_sub(m) * 60) as f64))
}

/// Minutes of demand a [`Recurrence`] keeps (four hours: two periods of up to two hours).
const RECURRENCE_KEEP_MINUTES: u64 = 240;
/// The longest run of minutes without samples that carries the minute before (a missed scrape,
/// a stalled cycle). A longer hole (a scaler that was not running, a history inherited some
/// time after it was written) keeps its minutes in place but is not demand that was seen: a
/// pattern expects nothing from it.
const CARRIED_MINUTES: u64 = 2;
/// The shortest and longest period looked for, minutes.
const MIN_PERIOD_MINUTES: usize = 10;
const MAX_PERIOD_MINUTES: usize = 120;
/// The correlation of the demand's changes with themselves one period earlier that makes a
/// period, and how far above the correlation at half the period it must be (a smooth curve
/// correlates with itself at every short lag; a repeating pattern does at its period only).
const MIN_CORRELATION: f64 = 0.6;
const MIN_CORRELATION_OVER_HALF: f64 = 0.3;
/// How close to the best correlation a shorter lag must come to be the period under
/// `period=fundamental` and `period=divisor`: a pattern that repeats every 20 minutes repeats
/// every 40 and 60 as well, and once the history spans those, one of them can correlate a few
/// thousandths better by noise alone.
const FUNDAMENTAL_WITHIN: f64 = 0.05;
/// How far, in minutes, the best lag may be from two or more times a shorter lag for
/// `period=divisor` to read the shorter one as its period (a period between two whole minutes
/// reads at either).
const DIVISOR_WITHIN_MINUTES: f64 = 1.0;

/// Under `early=F`, what a pattern found before the history spans `periods` of it must show:
/// a correlation at least this high, over at least this many minutes of changes overlapping
/// their own one period earlier. Patterns read from half a period of overlap by chance (a
/// lull, a swell, a ramp, a crowd's two edges) correlated 0.61-0.70 on the training set's
/// first seed (`periods=1.5`, `docs/evaluation/proactive.md` section 102); the bursts and
/// on-phases that repeat, 0.94-0.99. A 10-minute "period" read from the first 18 minutes of
/// on-off traffic correlated 0.95, over 6 minutes of overlap.
const EARLY_CORRELATION: f64 = 0.9;
const EARLY_OVERLAP_MINUTES: usize = 20;

/// The levels a repeating pattern may be held to (`levels=F`): the share of the demand's
/// variation over the overlap that its own level one period earlier explains,
/// `1 - sum((x[t] - x[t - lag])^2) / sum((x[t] - mean)^2)`. 1 is an exact repeat; 0, no better
/// than the overlap's mean; a staircase, whose steps come at a steady interval, correlates in
/// its changes and reads below 0 in its levels.
pub const PATTERN_LEVELS: std::ops::RangeInclusive<f64> = 0.0..=1.0;

/// Minutes over which a change is measured (a burst's edge spreads over the rate window).
const CHANGE_LAG_MINUTES: usize = 2;

/// Which lag a repeating pattern's period is (`period=best|fundamental|divisor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PeriodPick {
    /// The lag whose changes correlate best with themselves, if it passes the half-period test.
    Best,
    /// The shortest lag that correlates within [`FUNDAMENTAL_WITHIN`] of the best and passes
    /// the half-period test itself.
    Fundamental,
    /// As `Fundamental`, among the best lag and the lags it is two or more times (within
    /// [`DIVISOR_WITHIN_MINUTES`]): a shorter lag that merely correlates nearly as well, by
    /// noise in a curve that does not repeat, is not the best lag's period.
    Divisor,
}

impl PeriodPick {
    /// Every value, in the order the metadata lists them.
    pub const ALL: [Self; 3] = [Self::Best, Self::Fundamental, Self::Divisor];

    /// The metadata's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Best => "best",
            Self::Fundamental => "fundamental",
            Self::Divisor => "divisor",
        }
    }
}

/// How many periods of history a pattern must span before it is found, by default.
pub const DEFAULT_PATTERN_PERIODS: f64 = 2.0;
/// The spans `periods=F` may set.
pub const PATTERN_PERIODS: std::ops::RangeInclusive<f64> = 1.2..=4.0;

/// Demand by minute over the last hours, and the period it repeats with when it does (batch
/// jobs every half hour, on/off traffic): a burst that came one period ago is expected again.
#[derive(Debug, Clone)]
pub struct Recurrence {
    /// How many periods the history must span for a period to be looked for (at least 1.2).
    periods: f64,
    /// Which lag the period is.
    pick: PeriodPick,
    /// Under `early=F`, how many periods of history (fewer than `periods`) a pattern that
    /// correlates at least [`EARLY_CORRELATION`] over [`EARLY_OVERLAP_MINUTES`] must span; 0
    /// for none.
    early: f64,
    /// Under `levels=F`, the share of the overlap's variation a period's levels one period
    /// earlier must explain (see [`level_skill`]); 0 for none.
    levels: f64,
    /// (minute index, sum of the demand estimates, their count), oldest first.
    minutes: VecDeque<(u64, f64, u32)>,
    /// The complete minutes' series and the period found in it, as of one minute: both change
    /// only when a minute completes, so decisions within a minute reuse them.
    cached: Option<Cached>,
}

/// What [`Recurrence`] computed at the start of a minute.
#[derive(Debug, Clone)]
struct Cached {
    minute: u64,
    series: Vec<f64>,
    /// Whether each minute of `series` was seen, or carried within [`CARRIED_MINUTES`].
    seen: Vec<bool>,
    period: Option<(usize, f64)>,
    /// Whether the period was found early (`early=F`), before the history spans `periods`.
    early: bool,
    /// The period's [`level_skill`].
    levels: f64,
}

/// A recurring pattern and what it expects next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recurring {
    /// The period, minutes.
    pub period_minutes: usize,
    /// The correlation of the demand's changes with those one period earlier.
    pub correlation: f64,
    /// Whether it was found before the history spans `periods` of it (`early=F`).
    pub early: bool,
    /// The share of the demand's variation over the overlap that its level one period
    /// earlier explains ([`level_skill`]).
    pub levels: f64,
    /// The highest minute of demand one period ago over the coming window, requests per second.
    pub expected: f64,
    /// The mean demand over the last period, requests per second: what the pattern's troughs
    /// are below and its bursts above.
    pub mean: f64,
}

impl Default for Recurrence {
    fn default() -> Self {
        Self::spanning(DEFAULT_PATTERN_PERIODS)
    }
}

impl Recurrence {
    /// A recurrence that looks for a period once the history spans `periods` of it (1.2 to
    /// 4; outside that range, the nearest end).
    pub fn spanning(periods: f64) -> Self {
        let periods = if periods.is_finite() {
            periods.clamp(*PATTERN_PERIODS.start(), *PATTERN_PERIODS.end())
        } else {
            DEFAULT_PATTERN_PERIODS
        };
        Self {
            periods,
            pick: PeriodPick::Best,
            early: 0.0,
            levels: 0.0,
            minutes: VecDeque::new(),
            cached: None,
        }
    }

    /// The same, the period picked as `pick` says (without it, as `period=best`: the policy
    /// sets it from its configuration).
    pub fn picking(mut self, pick: PeriodPick) -> Self {
        self.pick = pick;
        self
    }

    /// The same, a pattern that correlates at least [`EARLY_CORRELATION`] over
    /// [`EARLY_OVERLAP_MINUTES`] also found once the history spans `early` periods of it (0, not
    /// finite, or not fewer than `periods`, for none; below 1.2, 1.2, as for `periods`: a lag
    /// is never longer than the changes it correlates).
    pub fn early(mut self, early: f64) -> Self {
        self.early = if early.is_finite() && early > 0.0 {
            early.clamp(*PATTERN_PERIODS.start(), *PATTERN_PERIODS.end())
        } else {
            0.0
        };
        self
    }

    /// The same, a period kept only if its levels one period earlier explain at least
    /// `levels` of the demand's variation over the overlap ([`level_skill`]; 0, or outside
    /// [`PATTERN_LEVELS`], for none).
    pub fn levels(mut self, levels: f64) -> Self {
        self.levels = if PATTERN_LEVELS.contains(&levels) {
            levels
        } else {
            0.0
        };
        self
    }

    /// Records the demand estimated at `now`.
    pub fn observe(&mut self, now: Duration, demand: f64) {
        let demand = finite_or_zero(demand);
        let minute = now.as_secs() / 60;
        match self.minutes.back_mut() {
            Some((m, sum, n)) if *m == minute => {
                *sum += demand;
                *n += 1;
            }
            _ => self.minutes.push_back((minute, demand, 1)),
        }
        while let Some(&(m, _, _)) = self.minutes.front() {
            if m.saturating_add(RECURRENCE_KEEP_MINUTES) < minute {
                self.minutes.pop_front();
            } else {
                break;
            }
        }
    }

    /// The mean demand of every complete minute, oldest first, a minute without samples
    /// carrying the one before.
    #[cfg(test)]
    fn series(&self, now: Duration) -> Vec<f64> {
        self.series_seen(now).0
    }

    /// As `series`, with whether each minute was seen: a run of minutes without samples longer
    /// than [`CARRIED_MINUTES`] is a hole, carried in place but not seen.
    fn series_seen(&self, now: Duration) -> (Vec<f64>, Vec<bool>) {
        let current = now.as_secs() / 60;
        let (mut out, mut seen) = (Vec::new(), Vec::new());
        let mut last: Option<(u64, f64)> = None;
        // The minutes without samples after `last` and before minute `to`, carried.
        let carry = |out: &mut Vec<f64>, seen: &mut Vec<bool>, last: Option<(u64, f64)>, to| {
            if let Some((m, value)) = last {
                let missing: u64 = to - m - 1;
                out.extend(std::iter::repeat_n(value, missing as usize));
                seen.extend(std::iter::repeat_n(
                    missing <= CARRIED_MINUTES,
                    missing as usize,
                ));
            }
        };
        for &(m, sum, n) in self.minutes.iter().filter(|x| x.0 < current) {
            let mean = sum / f64::from(n.max(1));
            carry(&mut out, &mut seen, last, m);
            out.push(mean);
            seen.push(true);
            last = Some((m, mean));
        }
        // Up to the minute before `now`'s: minute `len` of the series is the current one.
        carry(&mut out, &mut seen, last, current);
        (out, seen)
    }

    /// The series and the period as of `now`'s minute, computed once per minute: the period
    /// (in minutes, with its correlation) is `None` until two periods have been seen, or when
    /// nothing repeats.
    fn analysed(&mut self, now: Duration) -> &Cached {
        let minute = now.as_secs() / 60;
        let fresh = match self.cached.take() {
            Some(c) if c.minute == minute => c,
            _ => {
                let (series, seen) = self.series_seen(now);
                let found =
                    find_period_or_early(&series, self.periods, self.early, self.levels, self.pick);
                let (period, early) = (found.map(|f| f.0), found.is_some_and(|f| f.1));
                let levels = period.map_or(0.0, |(lag, _)| level_skill(&series, lag));
                Cached {
                    minute,
                    series,
                    seen,
                    period,
                    early,
                    levels,
                }
            }
        };
        self.cached.insert(fresh)
    }

    /// The recurring pattern at `now`, if there is one: its period and the highest minute of
    /// demand one period ago over the next `ahead` (the start-up horizon and some slack).
    pub fn recurring(&mut self, now: Duration, ahead: Duration) -> Option<Recurring> {
        let Cached {
            series: x,
            seen,
            period,
            early,
            levels,
            ..
        } = self.analysed(now);
        let (early, levels) = (*early, *levels);
        let (period, correlation) = (*period)?;
        let len = x.len();
        // Minute `len` is the current one; one period ago is `len - period`.
        let from = len.checked_sub(period)?;
        // What it expects and its mean come from the last period: a hole there was not seen,
        // and read as demand it would expect a trough (its carried minutes) where anything
        // may have come. Nothing is expected until a whole period has been seen again.
        if seen[from..].contains(&false) {
            return None;
        }
        let span = usize::try_from(ahead.as_secs().div_ceil(60)).unwrap_or(usize::MAX);
        let to = from.saturating_add(span).min(len - 1);
        let expected = x[from..=to].iter().copied().fold(0.0, f64::max);
        let mean = x[from..].iter().sum::<f64>() / period as f64;
        Some(Recurring {
            period_minutes: period,
            correlation,
            early,
            levels,
            expected,
            mean,
        })
    }
}

/// The lag in [`MIN_PERIOD_MINUTES`, [`MAX_PERIOD_MINUTES`]] at which the minute-to-minute
/// changes of `x` correlate best with themselves, if that correlation is a period's; a lag is
/// looked at once the changes span `periods` of it. Under [`PeriodPick::Fundamental`] and
/// [`PeriodPick::Divisor`], the period is the shortest lag that correlates within
/// [`FUNDAMENTAL_WITHIN`] of the best and is a period's itself (under `Divisor`, the best lag
/// or one it is two or more times): the best lag can be a multiple of the period, and its
/// half, the period, then correlates as well as it does, which the half-period test reads as a
/// smooth curve.
#[cfg(test)]
fn find_period(x: &[f64], periods: f64, pick: PeriodPick) -> Option<(usize, f64)> {
    find_period_or_early(x, periods, 0.0, 0.0, pick).map(|f| f.0)
}

/// As [`find_period`], and failing that, under `early=F` (`early` > 0), a period the changes
/// span `early` of, taken only if it correlates at least [`EARLY_CORRELATION`] over at least
/// [`EARLY_OVERLAP_MINUTES`] of overlap; with whether it was found early. Each lag's
/// correlation is computed once for both searches. Under `levels=F` (`levels` > 0) a lag is a
/// period only if its [`level_skill`] is at least `levels`.
fn find_period_or_early(
    x: &[f64],
    periods: f64,
    early: f64,
    levels: f64,
    pick: PeriodPick,
) -> Option<((usize, f64), bool)> {
    if x.len() <= CHANGE_LAG_MINUTES {
        return None;
    }
    let d: Vec<f64> = x
        .windows(CHANGE_LAG_MINUTES + 1)
        .map(|w| w[CHANGE_LAG_MINUTES] - w[0])
        .collect();
    let at = |lag: usize| correlation(&d[lag..], &d[..d.len() - lag]);
    let longest = longest_lag(d.len(), periods);
    let longest_early = if early > 0.0 {
        longest_lag(d.len(), early)
    } else {
        0
    };
    let lags: Vec<(usize, f64)> = (MIN_PERIOD_MINUTES..=longest.max(longest_early))
        .map(|lag| (lag, at(lag)))
        .collect();
    let spanned = lags.partition_point(|l| l.0 <= longest);
    let repeats = |lag: usize| levels <= 0.0 || level_skill(x, lag) >= levels;
    if let Some(found) = pick_period(&lags[..spanned], at, repeats, pick) {
        return Some((found, false));
    }
    // With no lag beyond those, the early search would find what the first did.
    if longest_early <= longest {
        return None;
    }
    pick_period(&lags, at, repeats, pick)
        .filter(|&(lag, r)| {
            r >= EARLY_CORRELATION && d.len().saturating_sub(lag) >= EARLY_OVERLAP_MINUTES
        })
        .map(|found| (found, true))
}

/// The longest lag looked at once `changes` minutes of changes span `periods` of it.
fn longest_lag(changes: usize, periods: f64) -> usize {
    ((changes as f64 / periods).floor() as usize).min(MAX_PERIOD_MINUTES)
}

/// The period among `lags` (each with its correlation, shortest first) as `pick` says, `at`
/// giving the correlation at any lag for the half-period test and `repeats` whether a lag's
/// levels repeat as well (`levels=F`).
fn pick_period(
    lags: &[(usize, f64)],
    at: impl Fn(usize) -> f64,
    repeats: impl Fn(usize) -> bool,
    pick: PeriodPick,
) -> Option<(usize, f64)> {
    let mut best: Option<(usize, f64)> = None;
    for &(lag, r) in lags {
        if best.is_none_or(|(_, b)| r > b) {
            best = Some((lag, r));
        }
    }
    let (best_lag, best_r) = best?;
    let is_period = |(lag, r): (usize, f64)| {
        r >= MIN_CORRELATION && r - at(lag / 2) >= MIN_CORRELATION_OVER_HALF && repeats(lag)
    };
    // The best lag itself, or one it is two or more times (a neighbour of the best lag is not
    // its period).
    let divides_best = |lag: usize| {
        let times = (best_lag as f64 / lag as f64).round();
        lag == best_lag
            || (times >= 2.0
                && (best_lag as f64 - times * lag as f64).abs() <= DIVISOR_WITHIN_MINUTES)
    };
    match pick {
        PeriodPick::Best => best.filter(|&candidate| is_period(candidate)),
        PeriodPick::Fundamental | PeriodPick::Divisor => lags
            .iter()
            .copied()
            .filter(|&(_, r)| r >= best_r - FUNDAMENTAL_WITHIN)
            .filter(|&(lag, _)| pick == PeriodPick::Fundamental || divides_best(lag))
            .find(|&candidate| is_period(candidate)),
    }
}

/// 4 req/s with 6-minute bursts every 20 minutes from minute 15, the even bursts at 38 req/s
/// and the odd ones at 50, at `minute`: a pattern that repeats every 20 minutes, and every 40 a
/// little more exactly (the tests of `period=`).
#[cfg(test)]
pub(super) fn alternating_bursts(minute: u64) -> f64 {
    match minute.checked_sub(15) {
        Some(k) if k % 20 < 6 => {
            if (k / 20) % 2 == 0 {
                38.0
            } else {
                50.0
            }
        }
        _ => 4.0,
    }
}

/// The share of the variation of `x` over its last `len - lag` minutes that its own level
/// `lag` minutes earlier explains: `1 - sum((x[t] - x[t - lag])^2) / sum((x[t] - mean)^2)`
/// over that overlap, the skill of "as one period ago" over the overlap's mean. 1 is an exact
/// repeat, 0 no better than the mean, below 0 worse (a staircase: its changes repeat at the
/// steps' interval, its levels do not). 0 when the overlap is flat or shorter than two minutes.
fn level_skill(x: &[f64], lag: usize) -> f64 {
    let n = x.len().saturating_sub(lag);
    if n < 2 {
        return 0.0;
    }
    let (now, before) = (&x[lag..], &x[..n]);
    let mean = now.iter().sum::<f64>() / n as f64;
    let (mut missed, mut spread) = (0.0, 0.0);
    for (a, b) in now.iter().zip(before) {
        missed += (a - b).powi(2);
        spread += (a - mean).powi(2);
    }
    if spread > 0.0 {
        1.0 - missed / spread
    } else {
        0.0
    }
}

/// Pearson correlation of two equally long series (0 when either is flat).
fn correlation(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    if n < 2 {
        return 0.0;
    }
    let (a, b) = (&a[..n], &b[..n]);
    let ma = a.iter().sum::<f64>() / n as f64;
    let mb = b.iter().sum::<f64>() / n as f64;
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma).powi(2);
        sbb += (y - mb).powi(2);
    }
    if saa > 0.0 && sbb > 0.0 {
        sab / (saa * sbb).sqrt()
    } else {
        0.0
    }
}

fn finite_or_zero(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 { x } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn arrivals_are_finished_plus_in_flight_growth() {
        let mut d = DemandTracker::default();
        assert_eq!(d.observe(s(0), 10.0, 20.0, MINUTE), 10.0);
        // 60 s later the backlog grew by 120: 2 more arrivals per second than finished.
        for t in (2..60).step_by(2) {
            d.observe(s(t), 10.0, 20.0 + 2.0 * t as f64, MINUTE);
        }
        let est = d.observe(s(60), 10.0, 140.0, MINUTE);
        assert!((est - 12.0).abs() < 1e-9, "{est}");
        // Draining never makes demand negative.
        let est = d.observe(s(122), 0.0, 0.0, MINUTE);
        assert_eq!(est, 0.0);
    }

    #[test]
    fn with_an_onset_a_bursts_arrivals_count_within_seconds() {
        // 10 req/s finished with 20 in flight for two minutes, then 40 more arrivals per
        // second than finish: 10 s into the burst the rate window's growth reads a sixth of
        // it, the onset stretch (10 s) all of it.
        let run = |d: &mut DemandTracker| {
            let mut est = 0.0;
            for t in (0..=130u64).step_by(2) {
                let in_flight = 20.0 + 40.0 * t.saturating_sub(120) as f64;
                est = d.observe(s(t), 10.0, in_flight, MINUTE);
            }
            (est, d.growth())
        };
        let (plain, plain_growth) = run(&mut DemandTracker::default());
        let (onset, onset_growth) = run(&mut DemandTracker::with_onset(s(10)));
        assert!((plain - (10.0 + 400.0 / 60.0)).abs() < 1e-9, "{plain}");
        assert!((onset - 50.0).abs() < 1e-9, "{onset}");
        // The rate window's growth is what `growth()` reports either way.
        assert_eq!(plain_growth, onset_growth);
        // A falling or flat in-flight count over the onset stretch changes nothing: the rate
        // window's growth counts then, and a rising one counts when it is larger.
        let mut d = DemandTracker::with_onset(s(10));
        let mut p = DemandTracker::default();
        for t in (0..=130u64).step_by(2) {
            let in_flight = if t < 110 { 20.0 + t as f64 } else { 60.0 };
            let (with, without) = (
                d.observe(s(t), 10.0, in_flight, MINUTE),
                p.observe(s(t), 10.0, in_flight, MINUTE),
            );
            assert!(with >= without, "{t}: {with} < {without}");
            if t >= 110 {
                assert_eq!(with, without, "{t}");
            }
        }
    }

    #[test]
    fn a_linear_ramp_gives_its_slope_and_a_forecast_ahead() {
        let mut d = DemandTracker::default();
        for t in (0..=600).step_by(2) {
            // Steady in-flight: demand equals finished, rising 0.05 req/s per second.
            d.observe(s(t), 5.0 + 0.05 * t as f64, 30.0, MINUTE);
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
            d.observe(s(t), 40.0 - 0.05 * t as f64, 30.0, MINUTE);
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
    fn a_dropped_peak_is_one_the_demand_fell_from_to_below_half_within_the_span() {
        let (hour, ten) = (s(3600), s(600));
        // A day's decline: 40 req/s falling by 0.5 req/s a minute never halves within ten
        // minutes, so no minute is a dropped peak, where the plain floor holds the 40.
        let mut p = PeakFloor::default();
        for t in (0..1800).step_by(2) {
            p.observe(s(t), 40.0 - 0.5 * (t / 60) as f64);
        }
        let now = 40.0 - 0.5 * 29.0;
        assert_eq!(p.dropped_peak(s(1800), hour, ten, now), None);
        assert_eq!(p.peak(s(1800), hour).map(|x| x.0), Some(40.0));
        // A burst of 45 over 6 that ends at 240 s: its minutes are dropped peaks as soon as
        // the demand now reads below half of them, and stay so for the window.
        let mut p = PeakFloor::default();
        for t in (0..240).step_by(2) {
            p.observe(s(t), if t >= 120 { 45.0 } else { 6.0 });
        }
        assert_eq!(p.dropped_peak(s(240), hour, ten, 30.0), None);
        assert_eq!(p.dropped_peak(s(240), hour, ten, 6.0), Some((45.0, 120.0)));
        for t in (250..3000).step_by(2) {
            p.observe(s(t), 6.0);
        }
        assert_eq!(
            p.dropped_peak(s(3000), hour, ten, 6.0),
            Some((45.0, 2880.0))
        );
        // A fall that comes more than the span after the peak's minute does not make it one:
        // 45 held for twenty minutes, then 6; only the last minutes of the 45 count, and a
        // 30 that came before and never halved within ten minutes is not held.
        let mut p = PeakFloor::default();
        for t in (0..2400).step_by(2) {
            let d = match t {
                0..600 => 30.0,
                600..1800 => 45.0,
                _ => 6.0,
            };
            p.observe(s(t), d);
        }
        assert_eq!(
            p.dropped_peak(s(2400), hour, ten, 6.0).map(|x| x.0),
            Some(45.0)
        );
        let mut p = PeakFloor::default();
        for t in (0..2400).step_by(2) {
            p.observe(s(t), if t < 600 { 30.0 } else { 20.0 });
        }
        assert_eq!(p.dropped_peak(s(2400), hour, ten, 20.0), None);
        // A zero window is no floor.
        assert_eq!(p.dropped_peak(s(2400), Duration::ZERO, ten, 0.0), None);
    }

    /// Feeds `rate(minute)` every 2 s for `minutes` minutes.
    fn feed(r: &mut Recurrence, minutes: u64, rate: impl Fn(u64) -> f64) {
        for t in (0..minutes * 60).step_by(2) {
            r.observe(s(t), rate(t / 60));
        }
    }

    fn bursts(minute: u64) -> f64 {
        // 6 req/s with 8-minute bursts of 45 req/s every 45 minutes from minute 20.
        if minute >= 20 && (minute - 20) % 45 < 8 {
            45.0
        } else {
            6.0
        }
    }

    #[test]
    fn bursts_every_45_minutes_are_expected_a_start_up_ahead() {
        let mut r = Recurrence::default();
        // One burst seen: nothing repeats yet.
        feed(&mut r, 70, bursts);
        assert_eq!(r.recurring(s(70 * 60), s(420)), None);
        // Two periods of history after the second burst: the period is found. At minute 105
        // the next burst (minute 110) is within the next 7 minutes of one period ago.
        let mut r = Recurrence::default();
        feed(&mut r, 105, bursts);
        let got = r.recurring(s(105 * 60), s(420)).expect("a period");
        assert_eq!(got.period_minutes, 45);
        assert!(got.correlation > 0.9, "{got:?}");
        assert_eq!(got.expected, 45.0);
        // Ten minutes earlier, the burst is beyond the window: the base rate is expected.
        let mut r = Recurrence::default();
        feed(&mut r, 95, bursts);
        assert_eq!(
            r.recurring(s(95 * 60), s(420)).map(|g| g.expected),
            Some(6.0)
        );
    }

    #[test]
    fn a_shorter_span_finds_the_period_sooner_and_still_none_in_smooth_curves() {
        // Right after the second burst (minute 75) two periods of history have not passed:
        // the default finds nothing, a span of 1.5 periods finds the 45 minutes.
        let mut r = Recurrence::default();
        feed(&mut r, 75, bursts);
        assert_eq!(r.recurring(s(75 * 60), s(420)), None);
        let mut r = Recurrence::spanning(1.5);
        feed(&mut r, 75, bursts);
        let got = r.recurring(s(75 * 60), s(420)).expect("a period");
        assert_eq!(got.period_minutes, 45);
        // Out-of-range spans are held to 1.2-4.
        assert_eq!(Recurrence::spanning(0.1).periods, 1.2);
        assert_eq!(
            Recurrence::spanning(f64::NAN).periods,
            DEFAULT_PATTERN_PERIODS
        );
        // A ramp and a slow wave still repeat nothing.
        let mut r = Recurrence::spanning(1.2);
        feed(&mut r, 240, |m| 4.0 + 0.2 * m as f64);
        assert_eq!(r.recurring(s(240 * 60), s(300)), None);
        let mut r = Recurrence::spanning(1.2);
        feed(&mut r, 240, |m| {
            22.0 - 18.0 * (2.0 * std::f64::consts::PI * m as f64 / 240.0).cos()
        });
        assert_eq!(r.recurring(s(240 * 60), s(300)), None);
    }

    #[test]
    fn under_period_fundamental_a_multiple_that_correlates_better_is_read_as_its_period() {
        let rate = alternating_bursts;
        let x: Vec<f64> = (0..120).map(rate).collect();
        // With 120 minutes the 40-minute lag is looked at and correlates best; its half, the
        // 20 minutes, correlates nearly as well, so the best lag fails the half-period test.
        let best = find_period(&x, 2.0, PeriodPick::Best);
        assert_eq!(best, None);
        let (period, r) = find_period(&x, 2.0, PeriodPick::Fundamental).expect("the fundamental");
        assert_eq!(period, 20);
        assert!(r > 0.9, "{r}");
        // The 40 minutes are twice the 20: `divisor` reads the same.
        assert_eq!(find_period(&x, 2.0, PeriodPick::Divisor), Some((period, r)));
        // Before the history spans two 40-minute lags, all read 20 minutes.
        for pick in PeriodPick::ALL {
            assert_eq!(find_period(&x[..70], 2.0, pick).map(|p| p.0), Some(20));
        }
        // Through the recurrence: `period=fundamental` expects the next burst, `best` nothing.
        let mut fundamental = Recurrence::default().picking(PeriodPick::Fundamental);
        let mut best = Recurrence::default();
        feed(&mut fundamental, 114, rate);
        feed(&mut best, 114, rate);
        assert_eq!(best.recurring(s(114 * 60), s(300)), None);
        let got = fundamental
            .recurring(s(114 * 60), s(300))
            .expect("a period");
        assert_eq!(got.period_minutes, 20);
        assert_eq!(got.expected, 38.0);
        // Smooth curves still repeat nothing under any reading.
        let ramp: Vec<f64> = (0..240).map(|m| 4.0 + 0.2 * m as f64).collect();
        let wave: Vec<f64> = (0..240)
            .map(|m| 22.0 - 18.0 * (2.0 * std::f64::consts::PI * m as f64 / 240.0).cos())
            .collect();
        for pick in PeriodPick::ALL {
            assert_eq!(find_period(&ramp, 2.0, pick), None);
            assert_eq!(find_period(&wave, 2.0, pick), None);
        }
    }

    #[test]
    fn under_period_divisor_a_shorter_lag_is_the_period_only_if_the_best_is_its_multiple() {
        // The correlation at any lag, for the half-period test: at 8 minutes (16's half) and at
        // 20 (the half of 40 and 41) high, elsewhere low.
        fn half(lag: usize) -> f64 {
            match lag {
                8 => 0.6,
                20 => 0.92,
                _ => 0.1,
            }
        }
        // A 20-minute pattern whose 40- or 41-minute multiple correlates a little better: both
        // read 20, a minute's slack allowed; `best` reads none.
        for multiple in [40, 41] {
            let lags = [(20, 0.92), (30, 0.1), (multiple, 0.924)];
            for pick in [PeriodPick::Fundamental, PeriodPick::Divisor] {
                assert_eq!(pick_period(&lags, half, |_| true, pick), Some((20, 0.92)));
            }
            assert_eq!(pick_period(&lags, half, |_| true, PeriodPick::Best), None);
        }
        // The best lag is its own divisor.
        let lags = [(20, 0.95), (40, 0.92)];
        let want = Some((20, 0.95));
        assert_eq!(
            pick_period(&lags, half, |_| true, PeriodPick::Divisor),
            want
        );
        // Shorter lags within 0.05 of a best lag that fails the half-period test, which the best
        // lag is not two or more times: `fundamental` reads them, `divisor` and `best` do not.
        type Case = (&'static [(usize, f64)], fn(usize) -> f64, (usize, f64));
        let cases: [Case; 3] = [
            // Noise in a curve that does not repeat: the best lag, 16 minutes, fails the test.
            (&[(12, 0.61), (14, 0.2), (16, 0.63)], half, (12, 0.61)),
            // Three minutes off a multiple.
            (
                &[(20, 0.92), (43, 0.924)],
                |l| if l == 21 { 0.92 } else { 0.1 },
                (20, 0.92),
            ),
            // The best lag's neighbour.
            (
                &[(19, 0.92), (20, 0.924)],
                |l| if l == 10 { 0.9 } else { 0.1 },
                (19, 0.92),
            ),
        ];
        for (lags, at, fundamental) in cases {
            let got = pick_period(lags, at, |_| true, PeriodPick::Fundamental);
            assert_eq!(got, Some(fundamental), "{lags:?}");
            assert_eq!(
                pick_period(lags, at, |_| true, PeriodPick::Divisor),
                None,
                "{lags:?}"
            );
            assert_eq!(
                pick_period(lags, at, |_| true, PeriodPick::Best),
                None,
                "{lags:?}"
            );
        }
    }

    #[test]
    fn levels_refuse_a_staircase_whose_changes_repeat_and_keep_bursts_that_do() {
        // Steps up of 3, 4 and 5 req/s every 25 minutes: the changes repeat every 25 minutes
        // and correlate as a pattern's; the levels one period earlier are a step lower, worse
        // than the overlap's mean at reading it.
        let staircase = |m: u64| [2.0, 5.0, 9.0, 14.0][(m / 25).min(3) as usize];
        let mut r = Recurrence::default();
        feed(&mut r, 100, staircase);
        let got = r
            .recurring(s(100 * 60), s(420))
            .expect("the changes' period");
        assert_eq!(got.period_minutes, 25, "{got:?}");
        assert!(got.correlation >= MIN_CORRELATION, "{got:?}");
        assert!(got.levels < 0.0, "{got:?}");
        let mut r = Recurrence::default().levels(0.5);
        feed(&mut r, 100, staircase);
        assert_eq!(r.recurring(s(100 * 60), s(420)), None);
        // Early too: steps at minutes 10 and 50, read from 1.5 periods of 40 minutes.
        let tall = |m: u64| [2.0, 5.0, 9.0][((m + 30) / 40).min(2) as usize];
        let mut r = Recurrence::default().early(1.5);
        feed(&mut r, 64, tall);
        let got = r.recurring(s(64 * 60), s(420)).expect("an early period");
        assert_eq!((got.period_minutes, got.early), (40, true), "{got:?}");
        assert!(got.levels < 0.0, "{got:?}");
        let mut r = Recurrence::default().early(1.5).levels(0.5);
        feed(&mut r, 64, tall);
        assert_eq!(r.recurring(s(64 * 60), s(420)), None);
        // Bursts that repeat repeat in their levels: found as without it.
        let mut r = Recurrence::default().levels(0.5);
        feed(&mut r, 105, bursts);
        let got = r.recurring(s(105 * 60), s(420)).expect("a period");
        assert_eq!(got.period_minutes, 45);
        assert!(got.levels > 0.95, "{got:?}");
        // Outside 0 to 1, none.
        for bad in [-0.5, 1.5, f64::NAN] {
            let mut r = Recurrence::default().levels(bad);
            feed(&mut r, 100, staircase);
            assert!(r.recurring(s(100 * 60), s(420)).is_some(), "{bad}");
        }
        // The skill itself: an exact repeat 1, a flat overlap 0, a shift by a step below 0.
        assert_eq!(level_skill(&[1.0, 5.0, 1.0, 5.0, 1.0, 5.0], 2), 1.0);
        assert_eq!(level_skill(&[3.0; 6], 2), 0.0);
        assert_eq!(level_skill(&[1.0, 2.0], 2), 0.0);
        assert!(level_skill(&[1.0, 1.0, 2.0, 2.0, 3.0, 3.0], 2) < 0.0);
    }

    #[test]
    fn early_finds_a_strong_pattern_sooner_and_not_a_weak_or_short_one() {
        // Right after the second burst (minute 75) the default finds nothing; `early=1.5`
        // finds the 45 minutes, correlating above 0.9 over 28 minutes of overlap, and says so.
        let mut r = Recurrence::default().early(1.5);
        feed(&mut r, 75, bursts);
        let got = r.recurring(s(75 * 60), s(420)).expect("a period");
        assert_eq!((got.period_minutes, got.early), (45, true), "{got:?}");
        assert!(got.correlation >= EARLY_CORRELATION, "{got:?}");
        // Once two periods have passed it is found as always, not early.
        let mut r = Recurrence::default().early(1.5);
        feed(&mut r, 105, bursts);
        let got = r.recurring(s(105 * 60), s(420)).expect("a period");
        assert_eq!((got.period_minutes, got.early), (45, false), "{got:?}");
        // A second burst shorter and lower than the first: 1.5 periods read a 45-minute
        // pattern at 0.74, which `early` does not take.
        let uneven = |m: u64| match m {
            20..28 => 45.0,
            65..69 => 30.0,
            _ => 6.0,
        };
        let mut r = Recurrence::spanning(1.5);
        feed(&mut r, 72, uneven);
        let weak = r
            .recurring(s(72 * 60), s(420))
            .expect("a period at 1.5 periods");
        assert!(weak.correlation < EARLY_CORRELATION, "{weak:?}");
        let mut r = Recurrence::default().early(1.5);
        feed(&mut r, 72, uneven);
        assert_eq!(r.recurring(s(72 * 60), s(420)), None);
        // On-off traffic every 30 minutes at minute 50: 1.5 periods find it, over 18 minutes
        // of overlap, fewer than `early` asks.
        let on_off = |m: u64| if (m / 15) % 2 == 0 { 8.0 } else { 1.0 };
        let mut r = Recurrence::spanning(1.5);
        feed(&mut r, 50, on_off);
        assert_eq!(
            r.recurring(s(50 * 60), s(300)).map(|g| g.period_minutes),
            Some(30)
        );
        let mut r = Recurrence::default().early(1.5);
        feed(&mut r, 50, on_off);
        assert_eq!(r.recurring(s(50 * 60), s(300)), None);
        // Not fewer periods than `periods`, and 0 or not finite, it does nothing.
        let mut r = Recurrence::default().early(2.5);
        feed(&mut r, 75, bursts);
        assert_eq!(r.recurring(s(75 * 60), s(420)), None);
        assert_eq!(Recurrence::default().early(f64::NAN).early, 0.0);
        assert_eq!(Recurrence::default().early(0.0).early, 0.0);
        // Below 1.2 it is 1.2, so no lag is longer than the changes it correlates.
        let mut r = Recurrence::default().early(0.5);
        assert_eq!(r.early, 1.2);
        feed(&mut r, 75, bursts);
        assert_eq!(
            r.recurring(s(75 * 60), s(420)).map(|g| g.period_minutes),
            Some(45)
        );
    }

    #[test]
    fn on_off_traffic_has_its_period_and_smooth_curves_have_none() {
        let mut r = Recurrence::default();
        feed(&mut r, 130, |m| if (m / 15) % 2 == 0 { 8.0 } else { 1.0 });
        assert_eq!(
            r.recurring(s(130 * 60), s(300)).map(|g| g.period_minutes),
            Some(30)
        );
        // A ramp, a slow wave and flat noise repeat nothing.
        let mut r = Recurrence::default();
        feed(&mut r, 240, |m| 4.0 + 0.2 * m as f64);
        assert_eq!(r.recurring(s(240 * 60), s(300)), None);
        let mut r = Recurrence::default();
        feed(&mut r, 240, |m| {
            22.0 - 18.0 * (2.0 * std::f64::consts::PI * m as f64 / 240.0).cos()
        });
        assert_eq!(r.recurring(s(240 * 60), s(300)), None);
        let mut r = Recurrence::default();
        let mut noise = crate::rng::SplitMix64::new(7);
        let mut draws: Vec<f64> = (0..240).map(|_| 10.0 + noise.next_f64()).collect();
        draws.push(10.0);
        feed(&mut r, 240, |m| draws[m as usize]);
        assert_eq!(r.recurring(s(240 * 60), s(300)), None);
    }

    #[test]
    fn a_hole_in_the_history_is_not_read_as_a_trough() {
        // Ten minutes at 40 req/s every 30 minutes over 5 req/s for three hours, then an hour
        // with no samples (the scaler was not running), then the same bursts, in phase.
        let burst = |m: u64| {
            if m % 30 >= 10 && m % 30 < 20 {
                40.0
            } else {
                5.0
            }
        };
        let mut r = Recurrence::default();
        for m in 0..180 {
            r.observe(s(m * 60), burst(m));
        }
        // Before the hole the pattern is found and expects the next burst.
        let before = r.recurring(s(180 * 60), s(600)).unwrap();
        assert_eq!(before.period_minutes, 30);
        // After it, the last period is the hole's carried minutes: nothing is expected (it
        // would read a trough of 5 req/s where the next burst comes), until a whole period has
        // been seen again; then the pattern expects the bursts as before.
        for m in 240..250 {
            r.observe(s(m * 60), burst(m));
            assert_eq!(r.recurring(s((m + 1) * 60), s(600)), None, "minute {m}");
        }
        for m in 250..275 {
            r.observe(s(m * 60), burst(m));
        }
        let after = r.recurring(s(275 * 60), s(600)).unwrap();
        assert_eq!(after.period_minutes, 30);
        assert_eq!(after.expected, 40.0);
        // Two missed minutes are carried and seen; three are a hole, up to the current minute
        // too (a history inherited three minutes after it was written).
        let mut r = Recurrence::default();
        r.observe(s(0), 5.0);
        r.observe(s(180), 1.0);
        let (t, f) = (true, false);
        assert_eq!(
            r.series_seen(s(421)),
            (
                vec![5.0, 5.0, 5.0, 1.0, 1.0, 1.0, 1.0],
                vec![t, t, t, t, f, f, f]
            )
        );
        assert_eq!(
            r.series_seen(s(361)),
            (vec![5.0, 5.0, 5.0, 1.0, 1.0, 1.0], vec![t, t, t, t, t, t])
        );
        r.observe(s(420), 2.0);
        assert_eq!(
            r.series_seen(s(481)),
            (
                vec![5.0, 5.0, 5.0, 1.0, 1.0, 1.0, 1.0, 2.0],
                vec![t, t, t, t, f, f, f, t]
            )
        );
    }

    #[test]
    fn junk_demand_counts_as_none_and_a_gap_carries_the_minute_before() {
        let mut r = Recurrence::default();
        r.observe(s(0), 5.0);
        r.observe(s(30), f64::NAN);
        r.observe(s(180), -3.0);
        r.observe(s(240), 1.0);
        assert_eq!(r.series(s(241)), vec![2.5, 2.5, 2.5, 0.0]);
    }

    #[test]
    fn the_history_reads_from_the_oldest_sample_kept() {
        let mut d = DemandTracker::default();
        assert_eq!(d.history_seconds(s(50)), 0.0);
        for t in (10..=130).step_by(2) {
            d.observe(s(t), 5.0, 1.0, s(60));
        }
        assert_eq!(d.history_seconds(s(130)), 120.0);
        for t in (132..=1200).step_by(2) {
            d.observe(s(t), 5.0, 1.0, s(60));
        }
        // Only 900 s are kept.
        assert_eq!(d.history_seconds(s(1200)), 900.0);
    }

    #[test]
    fn too_little_history_has_no_trend() {
        let mut d = DemandTracker::default();
        d.observe(s(0), 1.0, 0.0, MINUTE);
        d.observe(s(2), 50.0, 0.0, MINUTE);
        assert_eq!(d.trend(s(2), s(300)), 0.0);
        assert_eq!(DemandTracker::default().trend(s(0), s(300)), 0.0);
    }
}
