//! Hindsight: what a static fleet would have done with the demand this policy saw.
//!
//! The policy keeps, per minute over the last day, the demand it estimated, the ready replicas
//! and the replicas it held (asked for, ready or not: what the GPUs are billed for). Once a
//! minute it compares itself with every static fleet from `minReplicas` to `maxReplicas` by a
//! fluid model at the current capacity estimate: in a minute with demand `d` and `n` replicas
//! serving, `min(d, n x capacity)` is served and the rest is not. That answers the question a
//! platform team asks of any autoscaler: would a fixed number of replicas, chosen in
//! hindsight, have served as much for fewer GPU-hours? The answer is advice for the operator
//! (and a floor to set, `minReplicas`); under `hindsight=floor` (the default) the policy also
//! holds the fleet the comparison names as a floor for a day
//! (`StaticComparison::beaten_by` under `named=at99`, the default;
//! `StaticComparison::cheapest_beating` under `named=cheapest`).
//!
//! It is a model: queueing, start-up and a capacity estimate that is itself learned are not in
//! it, so it reads a static fleet's attainment higher than a simulator would at the edge of
//! its capacity, and ours' lower while its replicas are still starting. Ours' it also reads
//! from what the engines counted (`StaticComparison::ours_counted_percent`: requests aborted,
//! and the first tokens over the TTFT SLO or the requests over the ITL SLO per output token,
//! whichever are more), which holds the queue a burst leaves and the requests that time out in
//! it, where the fluid model serves each minute's demand up to the ready replicas' capacity and
//! carries nothing over; under `oursby=counted` the comparison judges ours by the lower of the
//! two.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

/// How far back the comparison looks: a day, so a daily pattern is judged whole.
pub const WINDOW: Duration = Duration::from_secs(24 * 3600);
/// The bucket of the history.
const MINUTE: Duration = Duration::from_secs(60);
/// The comparison needs at least this much history to say anything.
const AT_LEAST: Duration = Duration::from_secs(30 * 60);
/// The rule for "beaten": at least one point more of the demand served, with at most
/// this share of ours' GPU-hours.
const BEATEN_SHARE: f64 = 0.97;
/// The share of the demand (percent) a fleet must serve for the comparison to name it as
/// serving the demand (`named=at99`), and for `ceiling=at99` to cap at it.
pub const AT99_PERCENT: f64 = 99.0;

/// The rule: whether a plan that served `percent` (of the demand, or of requests within
/// the SLO) for `hours` beats ours, which served `ours_percent` for `ours_hours`: at least one
/// point more with at most 97 % of the GPU-hours. The hindsight and the simulator both judge by
/// it.
pub fn beats(percent: f64, hours: f64, ours_percent: f64, ours_hours: f64) -> bool {
    percent >= ours_percent + 1.0 && hours <= BEATEN_SHARE * ours_hours
}

/// The most of ours' GPU-hours a plan that beats ours may spend ([`beats`]).
pub fn beaten_share() -> f64 {
    BEATEN_SHARE
}

/// One minute of history: sums over its decisions.
#[derive(Debug, Clone, Copy)]
struct Minute {
    index: u64,
    samples: u32,
    demand: f32,
    /// The highest demand estimate among its decisions.
    peak: f32,
    ready: f32,
    held: f32,
    /// The sum of the requests per second the engines counted as not served within the SLO
    /// (aborted, and late first tokens or slow requests) over the decisions that read a count.
    missed: f32,
    /// How many of its decisions read that count (none in a minute inherited from an earlier
    /// pod: the learned state keeps no count).
    counted: u32,
}

/// The per-minute history the comparison reads.
#[derive(Debug, Clone, Default)]
pub struct Hindsight {
    minutes: VecDeque<Minute>,
}

/// One whole minute of the history as the learned state keeps it for the next scaler pod, a
/// JSON array `[seconds_ago, demand, peak, ready, held]`: how many seconds before the record
/// was taken it began (at least 60: the minute still filling is not kept; in seconds, since
/// the next pod's minutes need not begin where this pod's did), the mean and the highest
/// demand estimate within it (requests per second), and the mean ready and held replicas.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct KeptMinute(pub u32, pub f32, pub f32, pub f32, pub f32);

impl KeptMinute {
    /// How many seconds before the record was taken it began.
    pub fn seconds_ago(&self) -> u32 {
        self.0
    }

    /// Whether it can be read back: begun within the last day and complete, numbers finite
    /// and not negative.
    pub fn holds(&self) -> bool {
        let age = u64::from(self.0);
        age >= MINUTE.as_secs()
            && age <= WINDOW.as_secs()
            && [self.1, self.2, self.3, self.4]
                .iter()
                .all(|v| v.is_finite() && *v >= 0.0)
    }
}

/// The minute of `now`'s clock a kept minute, taken `now`, began in (`None`: before the clock
/// began). On another pod's clock its minutes begin elsewhere within the minute; it counts for
/// the one it began in.
fn began_in(now: Duration, kept: &KeptMinute) -> Option<u64> {
    now.as_secs()
        .checked_sub(u64::from(kept.0))
        .map(|began| began / MINUTE.as_secs())
}

/// `x` to two decimals: what the record keeps (a hundredth of a request per second, or of a
/// replica, is below anything the policy reads).
fn two_decimals(x: f32) -> f32 {
    (x * 100.0).round() / 100.0
}

/// A static fleet as the fluid model reads it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StaticFleet {
    /// Replicas.
    pub replicas: u32,
    /// Share of the demand served, percent.
    pub served_percent: f64,
    /// Replica-hours over the history.
    pub replica_hours: f64,
}

/// Ours against static fleets over the history, at one capacity estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StaticComparison {
    /// Minutes of history compared.
    pub minutes: u32,
    /// The capacity estimate the model used, requests per second per replica.
    pub capacity_per_replica: f64,
    /// Share of the demand ours served, percent: what the comparison judges ours by. The
    /// fluid model's share (`ours_fluid_percent`), or under `oursby=counted` the lower of that
    /// and `ours_counted_percent`.
    pub ours_served_percent: f64,
    /// Share of the demand ours' ready replicas served by the fluid model, percent.
    pub ours_fluid_percent: f64,
    /// Share of the demand ours served by what the engines counted, percent: the demand less
    /// the requests counted as not served within the SLO (aborted, and the first tokens over the
    /// TTFT SLO or the requests over the ITL SLO per output token, whichever are more), with a
    /// minute that read no count (inherited from an earlier pod) at its fluid share. `None` when
    /// no minute read a count.
    pub ours_counted_percent: Option<f64>,
    /// Replica-hours ours held (asked for, ready or starting).
    pub ours_replica_hours: f64,
    /// The smallest static fleet that serves at least as much of the demand as ours did.
    pub as_much: StaticFleet,
    /// The smallest static fleet that serves at least 99 % of the demand (none when even
    /// `maxReplicas` does not).
    pub at_99: Option<StaticFleet>,
    /// Whether some static fleet served at least one point more of the demand with at most
    /// 97 % of ours' replica-hours (the evaluation's rule for a policy not worth running).
    pub static_beats_ours: bool,
    /// The highest demand estimate of any compared minute, requests per second: the range of
    /// demand the named fleets are judged on.
    pub peak_demand: f64,
    /// The static fleet named as beating ours: the smallest fleet serving 99 % if that one
    /// beats ours, else the largest that beats ours (every fleet that beats ours costs at most
    /// 97 % of ours' replica-hours). `None` when none beats ours; `static_beats_ours` is
    /// `beaten_by.is_some()`, kept as its own field for the gauge and the JSON.
    pub beaten_by: Option<StaticFleet>,
    /// The smallest static fleet that beats ours (`named=cheapest` names it); `None` when none
    /// does.
    pub cheapest_beating: Option<StaticFleet>,
}

impl Hindsight {
    /// Records one decision: the demand estimate (requests per second), the ready replicas and
    /// the replicas held. Returns whether a minute closed (the comparison is due).
    pub fn observe(&mut self, now: Duration, demand: f64, ready: u32, held: u32) -> bool {
        let index = now.as_secs() / MINUTE.as_secs();
        let demand = if demand.is_finite() && demand > 0.0 {
            demand as f32
        } else {
            0.0
        };
        let closed = match self.minutes.back_mut() {
            Some(m) if m.index == index => {
                m.samples += 1;
                m.demand += demand;
                m.peak = m.peak.max(demand);
                m.ready += ready as f32;
                m.held += held as f32;
                false
            }
            last => {
                let closed = last.is_some();
                self.minutes.push_back(Minute {
                    index,
                    samples: 1,
                    demand,
                    peak: demand,
                    ready: ready as f32,
                    held: held as f32,
                    missed: 0.0,
                    counted: 0,
                });
                closed
            }
        };
        let oldest = index.saturating_sub(WINDOW.as_secs() / MINUTE.as_secs());
        while self.minutes.front().is_some_and(|m| m.index < oldest) {
            self.minutes.pop_front();
        }
        closed
    }

    /// Adds to the minute of the last [`Hindsight::observe`] what the engines counted at that
    /// decision as not served within the SLO, requests per second (aborted requests and first
    /// tokens over the TTFT SLO); left out when not finite or negative.
    pub fn count_missed(&mut self, missed: f64) {
        if let Some(m) = self.minutes.back_mut()
            && missed.is_finite()
            && missed >= 0.0
        {
            m.missed += missed as f32;
            m.counted += 1;
        }
    }

    /// The minutes of the history whose highest demand reached `level` (requests per second),
    /// read at `now`: the longest stretch between two of them (from the end of one to the start
    /// of the next; `None` with fewer than two, or when every stretch is longer than `at_most`),
    /// and how long before `now` the last of them ended. `None` when no minute reached it.
    pub fn stretches_between(
        &self,
        level: f64,
        now: Duration,
        at_most: Option<Duration>,
    ) -> Option<(Option<Duration>, Duration)> {
        let minute = MINUTE.as_secs();
        let bound = at_most.map(|d| d.as_secs() / minute);
        let mut last: Option<u64> = None;
        let mut longest: Option<u64> = None;
        for m in self.minutes.iter().filter(|m| f64::from(m.peak) >= level) {
            if let Some(before) = last {
                let gap = m.index.saturating_sub(before + 1);
                if bound.is_none_or(|b| gap <= b) {
                    longest = Some(longest.map_or(gap, |g| g.max(gap)));
                }
            }
            last = Some(m.index);
        }
        let ended = (last? + 1) * minute;
        Some((
            longest.map(|g| Duration::from_secs(g * minute)),
            Duration::from_secs(now.as_secs().saturating_sub(ended)),
        ))
    }

    /// Whether no minute has been recorded.
    pub fn is_empty(&self) -> bool {
        self.minutes.is_empty()
    }

    /// The whole minutes before `now`'s, oldest first, as the learned state keeps them.
    pub fn kept(&self, now: Duration) -> Vec<KeptMinute> {
        let current = now.as_secs() / MINUTE.as_secs();
        self.minutes
            .iter()
            .filter(|m| m.index < current)
            .map(|m| {
                let n = m.samples.max(1) as f32;
                let began = m.index * MINUTE.as_secs();
                KeptMinute(
                    u32::try_from(now.as_secs() - began).unwrap_or(u32::MAX),
                    two_decimals(m.demand / n),
                    two_decimals(m.peak),
                    two_decimals(m.ready / n),
                    two_decimals(m.held / n),
                )
            })
            .filter(KeptMinute::holds)
            .collect()
    }

    /// Puts a kept minute back as the minute of `now`'s clock it began in, taken `now`, as one
    /// decision with its means (the caller gives them oldest first, before any minute of its
    /// own); that minute's index. A minute that falls on or before one already recorded, or
    /// before the clock began, is left out (`None`).
    pub fn restore(&mut self, now: Duration, kept: &KeptMinute) -> Option<u64> {
        let index = began_in(now, kept)?;
        if self.minutes.back().is_some_and(|m| m.index >= index) {
            return None;
        }
        self.minutes.push_back(Minute {
            index,
            samples: 1,
            demand: kept.1,
            peak: kept.2.max(kept.1),
            ready: kept.3,
            held: kept.4,
            missed: 0.0,
            counted: 0,
        });
        Some(index)
    }

    /// The whole minutes of the history (the one still filling left out), each as its mean
    /// demand (requests per second), ready and held replicas.
    fn whole_minutes(&self) -> impl Iterator<Item = (f64, f64, f64)> + '_ {
        self.whole().map(|m| {
            let n = f64::from(m.samples.max(1));
            (
                f64::from(m.demand) / n,
                f64::from(m.ready) / n,
                f64::from(m.held) / n,
            )
        })
    }

    fn whole(&self) -> impl Iterator<Item = &Minute> + '_ {
        self.minutes
            .iter()
            .take(self.minutes.len().saturating_sub(1))
    }

    /// The requests the whole minutes of the history hold: each minute's mean demand over its
    /// sixty seconds, what [`Hindsight::compare`]'s shares are shares of.
    pub fn demand_requests(&self) -> f64 {
        self.whole_minutes()
            .map(|m| m.0 * MINUTE.as_secs_f64())
            .sum()
    }

    /// Ours against every static fleet from `min` to `max` replicas at `capacity` requests per
    /// second per replica, ours read by the fluid model; `None` with less than half an hour of
    /// history, no demand, no capacity, or no replica held.
    pub fn compare(&self, capacity: f64, min: u32, max: u32) -> Option<StaticComparison> {
        self.compare_by(capacity, min, max, false)
    }

    /// As [`Hindsight::compare`], ours read, with `by_count`, by the lower of the fluid
    /// model's share and what the engines counted (`oursby=counted`).
    pub fn compare_by(
        &self,
        capacity: f64,
        min: u32,
        max: u32,
        by_count: bool,
    ) -> Option<StaticComparison> {
        if !(capacity.is_finite() && capacity > 0.0) {
            return None;
        }
        let minutes: Vec<(f64, f64, f64)> = self.whole_minutes().collect();
        let count = u32::try_from(minutes.len()).unwrap_or(u32::MAX);
        if u64::from(count) * MINUTE.as_secs() < AT_LEAST.as_secs() {
            return None;
        }
        let total: f64 = minutes.iter().map(|m| m.0).sum();
        if total <= 0.0 {
            return None;
        }
        let hours = |replica_minutes: f64| replica_minutes / 60.0;
        let served = |replicas: &dyn Fn(&(f64, f64, f64)) -> f64| {
            100.0
                * minutes
                    .iter()
                    .map(|m| m.0.min(replicas(m) * capacity))
                    .sum::<f64>()
                / total
        };
        let peak_demand = self
            .minutes
            .iter()
            .take(minutes.len())
            .map(|m| f64::from(m.peak))
            .fold(0.0, f64::max);
        let ours_fluid = served(&|m| m.1);
        // What the engines counted as not served, in requests: a minute with no count at what
        // the fluid model leaves unserved; no share at all when no minute read a count.
        let (unserved, any_count) =
            self.whole()
                .zip(&minutes)
                .fold((0.0, false), |(sum, any), (kept, m)| {
                    if kept.counted > 0 {
                        (sum + f64::from(kept.missed) / f64::from(kept.counted), true)
                    } else {
                        (sum + (m.0 - m.1 * capacity).max(0.0), any)
                    }
                });
        let ours_counted = any_count.then(|| (100.0 * (1.0 - unserved / total)).clamp(0.0, 100.0));
        let ours_served = match ours_counted {
            Some(counted) if by_count => ours_fluid.min(counted),
            _ => ours_fluid,
        };
        let ours_hours = hours(minutes.iter().map(|m| m.2).sum());
        // Scaled to zero all along: nothing was spent to compare with.
        if ours_hours <= 0.0 {
            return None;
        }
        let fleet = |k: u32| StaticFleet {
            replicas: k,
            served_percent: served(&|_| f64::from(k)),
            replica_hours: hours(f64::from(k) * minutes.len() as f64),
        };
        let max = max.max(min).max(1);
        let fleets: Vec<StaticFleet> = (min.max(1)..=max).map(fleet).collect();
        let as_much = fleets
            .iter()
            .find(|f| f.served_percent >= ours_served - 1e-9)
            .or(fleets.last())
            .copied()?;
        let at_99 = fleets
            .iter()
            .find(|f| f.served_percent >= AT99_PERCENT)
            .copied();
        let beats =
            |f: &StaticFleet| beats(f.served_percent, f.replica_hours, ours_served, ours_hours);
        let beaten_by = at_99
            .filter(beats)
            .or_else(|| fleets.iter().rev().find(|f| beats(f)).copied());
        Some(StaticComparison {
            minutes: count,
            capacity_per_replica: capacity,
            ours_served_percent: ours_served,
            ours_fluid_percent: ours_fluid,
            ours_counted_percent: ours_counted,
            ours_replica_hours: ours_hours,
            as_much,
            at_99,
            static_beats_ours: beaten_by.is_some(),
            peak_demand,
            beaten_by,
            cheapest_beating: fleets.iter().find(|f| beats(f)).copied(),
        })
    }
}

impl StaticComparison {
    /// In words, for the log and the debug page.
    pub fn describe(&self) -> String {
        use super::super::explain::num;
        let fleet = |f: &StaticFleet| {
            format!(
                "{} replicas would have served {} % for {} replica-hours ({} % of ours')",
                f.replicas,
                num(f.served_percent),
                num(f.replica_hours),
                num((100.0 * f.replica_hours / self.ours_replica_hours).round()),
            )
        };
        let at_99 = match &self.at_99 {
            Some(f) if f.replicas != self.as_much.replicas => format!("; {}", fleet(f)),
            Some(_) => String::new(),
            None => "; no fleet up to maxReplicas serves 99 %".to_owned(),
        };
        // What the engines counted, beside the model's share, and which one judges ours.
        let counted = match self.ours_counted_percent {
            Some(_) if self.ours_served_percent < self.ours_fluid_percent => format!(
                " ({} % by the fluid model, judged by the engines' count: aborted requests, and first tokens over the TTFT SLO or requests over the ITL SLO per output token, whichever are more)",
                num(self.ours_fluid_percent)
            ),
            Some(c) => format!(
                " ({} % by the engines' count: aborted requests, and first tokens over the TTFT SLO or requests over the ITL SLO per output token, whichever are more)",
                num(c)
            ),
            None => String::new(),
        };
        format!(
            "hindsight over {} min at {} req/s per replica (fluid model): ours served {} % of the demand{counted} for {} replica-hours; a static fleet of {}{at_99}{}",
            self.minutes,
            num(self.capacity_per_replica),
            num(self.ours_served_percent),
            num(self.ours_replica_hours),
            fleet(&self.as_much),
            if self.static_beats_ours {
                ": a static fleet beats ours (1 point more for at most 97 % of the replica-hours); consider minReplicas"
            } else if self.as_much.replica_hours < self.ours_replica_hours {
                ": a static fleet serves as much for fewer replica-hours"
            } else {
                ""
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds one decision every 2 s: `demand(t)` req/s, `ready(t)` ready and `held(t)` held.
    fn history(
        seconds: u64,
        demand: impl Fn(u64) -> f64,
        ready: impl Fn(u64) -> u32,
        held: impl Fn(u64) -> u32,
    ) -> Hindsight {
        let mut h = Hindsight::default();
        for t in (0..seconds).step_by(2) {
            h.observe(Duration::from_secs(t), demand(t), ready(t), held(t));
        }
        h
    }

    #[test]
    fn the_stretches_between_minutes_that_reached_a_level_are_measured_between_them() {
        // 40 req/s in minutes 10-14, 30-31 and 80 (a single decision at 80:30), 5 otherwise.
        let demand = |t: u64| match t / 60 {
            10..15 | 30..32 => 40.0,
            80 if t % 60 == 30 => 40.0,
            _ => 5.0,
        };
        let h = history(100 * 60, demand, |_| 1, |_| 1);
        let at = Duration::from_secs(100 * 60);
        // From the end of minute 31 to the start of minute 80: 48 minutes; the last ended at 81.
        assert_eq!(
            h.stretches_between(20.0, at, None),
            Some((
                Some(Duration::from_secs(48 * 60)),
                Duration::from_secs(19 * 60)
            ))
        );
        // Bounded at half an hour, the 48 minutes are not counted and the 15 before them are;
        // bounded below both, only the none between a burst's own minutes is, and the last
        // minute's age is still read.
        assert_eq!(
            h.stretches_between(20.0, at, Some(Duration::from_secs(30 * 60))),
            Some((
                Some(Duration::from_secs(15 * 60)),
                Duration::from_secs(19 * 60)
            ))
        );
        assert_eq!(
            h.stretches_between(20.0, at, Some(Duration::from_secs(10 * 60))),
            Some((Some(Duration::ZERO), Duration::from_secs(19 * 60)))
        );
        // One stretch of minutes reaching the level has no stretch between; none, nothing.
        let once = history(
            60 * 60,
            |t| if t / 60 == 10 { 40.0 } else { 5.0 },
            |_| 1,
            |_| 1,
        );
        assert_eq!(
            once.stretches_between(20.0, Duration::from_secs(3600), None),
            Some((None, Duration::from_secs(49 * 60)))
        );
        assert_eq!(h.stretches_between(50.0, at, None), None);
    }

    #[test]
    fn what_the_engines_counted_reads_the_misses_the_fluid_model_serves() {
        // 40 min: 10 req/s on 2 replicas of 10 req/s, then a 10-min burst of 30 req/s on the
        // same 2 (the fluid model serves 20 of it), then 20 min of 10 req/s as the queue it
        // left times out: the engines count 4 req/s aborted there and 1 req/s of first tokens
        // over the SLO through the burst.
        let missed = |t: u64| match t / 60 {
            40..50 => 1.0,
            50..70 => 4.0,
            _ => 0.0,
        };
        // The day with `scale` times those counts.
        let day = |scale: f64| {
            let mut h = Hindsight::default();
            for t in (0..70 * 60 + 2).step_by(2) {
                let burst = (40 * 60..50 * 60).contains(&t);
                let demand = if burst { 30.0 } else { 10.0 };
                h.observe(Duration::from_secs(t), demand, 2, 2);
                h.count_missed(scale * missed(t));
            }
            h
        };
        let h = day(1.0);
        // Demand: 60 min at 10 and 10 at 30, 900 req/s-minutes; unserved by the fluid model
        // 10 x 10 = 100, by the count 10 x 1 + 20 x 4 = 90.
        let fluid = h.compare(10.0, 1, 20).unwrap();
        assert!((fluid.ours_fluid_percent - 100.0 * 800.0 / 900.0).abs() < 1e-6);
        assert_eq!(fluid.ours_served_percent, fluid.ours_fluid_percent);
        let counted = fluid.ours_counted_percent.unwrap();
        assert!((counted - 100.0 * 810.0 / 900.0).abs() < 1e-4, "{counted}");
        // The fluid model reads less here, so it judges ours under `counted` too.
        let by_count = h.compare_by(10.0, 1, 20, true).unwrap();
        assert_eq!(by_count.ours_served_percent, fluid.ours_fluid_percent);
        // Twice the aborts: the count reads below the model and judges ours; a fleet of 3,
        // which serves the whole demand for 1.5 times ours' replica-hours, still does not beat
        // ours, and the explanation says which share judged it.
        let h2 = day(2.0);
        let by_count = h2.compare_by(10.0, 1, 20, true).unwrap();
        assert!((by_count.ours_served_percent - 100.0 * 720.0 / 900.0).abs() < 1e-4);
        assert!(by_count.ours_fluid_percent > by_count.ours_served_percent);
        assert!(!by_count.static_beats_ours);
        assert!(
            by_count
                .describe()
                .contains("% by the fluid model, judged by the engines' count"),
            "{}",
            by_count.describe()
        );
        assert!(
            h2.compare(10.0, 1, 20)
                .unwrap()
                .describe()
                .contains("% by the engines' count: aborted requests"),
        );
        // A minute with no count (inherited) reads at the fluid model's share; a history with
        // none has no count at all.
        let none = history(40 * 60, |_| 10.0, |_| 1, |_| 1);
        assert_eq!(
            none.compare(10.0, 1, 20).unwrap().ours_counted_percent,
            None
        );
        // 20 req/s on 1 replica of 10 for 10 min, then 10 for 30: the fluid model leaves 100
        // of 500 unserved; a count of none in minute 5 leaves 90.
        let mut some = Hindsight::default();
        for t in (0..40 * 60 + 2).step_by(2) {
            some.observe(
                Duration::from_secs(t),
                if t < 600 { 20.0 } else { 10.0 },
                1,
                1,
            );
            if t / 60 == 5 {
                some.count_missed(0.0);
            }
        }
        let c = some.compare(10.0, 1, 20).unwrap();
        assert!((c.ours_fluid_percent - 80.0).abs() < 1e-9);
        assert!((c.ours_counted_percent.unwrap() - 82.0).abs() < 1e-9);
    }

    #[test]
    fn kept_minutes_read_back_as_the_history_they_were_taken_from() {
        // An hour of 10 req/s on 1 replica, then 30 min of 30 req/s on 3 (4 held).
        let h = history(
            90 * 60 + 30,
            |t| if t < 3600 { 10.0 } else { 30.0 },
            |t| if t < 3600 { 1 } else { 3 },
            |t| if t < 3600 { 1 } else { 4 },
        );
        let now = Duration::from_secs(90 * 60 + 30);
        let kept = h.kept(now);
        // Whole minutes only: 90 of them, the oldest begun 90 minutes and 30 s ago.
        assert_eq!(kept.len(), 90);
        assert_eq!(kept[0], KeptMinute(5_430, 10.0, 10.0, 1.0, 1.0));
        assert_eq!(kept[89], KeptMinute(90, 30.0, 30.0, 3.0, 4.0));
        // Restored on another clock, 2 h ahead, it compares as the original does.
        let later = Duration::from_secs(2 * 3600);
        let mut restored = Hindsight::default();
        for m in &kept {
            restored.restore(later, m);
        }
        // The minute still filling at `later`, which the comparison leaves out.
        restored.observe(later, 30.0, 3, 4);
        assert_eq!(restored.compare(10.0, 1, 20), h.compare(10.0, 1, 20));
        // Nothing is restored over a minute already kept, or before the clock began.
        let mut short = Hindsight::default();
        assert_eq!(short.restore(Duration::from_secs(600), &kept[0]), None);
        assert!(short.is_empty());
        // 600 s on this clock is minute 10; the newest kept minute began 90 s before: minute 8.
        assert_eq!(short.restore(Duration::from_secs(600), &kept[89]), Some(8));
        assert_eq!(short.restore(Duration::from_secs(600), &kept[88]), None);
        assert_eq!(short.kept(Duration::from_secs(600)).len(), 1);
    }

    #[test]
    fn a_whole_day_kept_is_about_forty_kilobytes_of_json() {
        // The worst case for its size: every minute of the day with two-digit demand with
        // decimals, and fleets that change within each minute.
        let h = history(
            86_400 + 60,
            |t| 10.0 + (t % 8_999) as f64 / 100.0,
            |t| 10 + (t / 2 % 3) as u32,
            |t| 11 + (t / 2 % 3) as u32,
        );
        let kept = h.kept(Duration::from_secs(86_400 + 60));
        assert_eq!(kept.len(), 1440);
        let bytes = serde_json::to_string(&kept).unwrap().len();
        assert!((30_000..48_000).contains(&bytes), "{bytes}");
    }

    #[test]
    fn nothing_is_said_before_half_an_hour_or_without_capacity() {
        let h = history(29 * 60, |_| 10.0, |_| 1, |_| 1);
        assert_eq!(h.compare(10.0, 1, 20), None);
        let h = history(40 * 60, |_| 10.0, |_| 1, |_| 1);
        assert!(h.compare(10.0, 1, 20).is_some());
        assert_eq!(h.compare(0.0, 1, 20), None);
        assert_eq!(h.compare(f64::NAN, 1, 20), None);
        let none_held = history(40 * 60, |_| 10.0, |_| 0, |_| 0);
        assert_eq!(none_held.compare(10.0, 0, 20), None);
    }

    #[test]
    fn a_fleet_that_follows_a_slow_day_is_not_beaten() {
        // Demand rises from 5 to 45 req/s and falls back over 4 h; ours follows it with the
        // replicas it needs (10 req/s each) and holds them.
        let demand = |t: u64| 5.0 + 40.0 * (std::f64::consts::PI * t as f64 / 14_400.0).sin();
        let need = move |t: u64| (demand(t) / 10.0).ceil() as u32;
        let h = history(14_400, demand, need, need);
        let c = h.compare(10.0, 1, 20).unwrap();
        assert!(c.ours_served_percent > 99.9, "{c:?}");
        assert_eq!(c.as_much.replicas, 5);
        assert!(
            c.ours_replica_hours < 0.8 * c.as_much.replica_hours,
            "{c:?}"
        );
        assert!(!c.static_beats_ours);
        assert_eq!(c.beaten_by, None);
        assert_eq!(c.cheapest_beating, None);
        assert!(
            !c.describe().contains("fewer replica-hours"),
            "{}",
            c.describe()
        );
    }

    #[test]
    fn a_fleet_that_serves_everything_at_a_cost_hears_of_the_cheaper_static_one() {
        // 10 req/s all along (one replica's capacity), but ours holds 2 replicas.
        let h = history(3600, |_| 10.0, |_| 2, |_| 2);
        let c = h.compare(10.0, 1, 20).unwrap();
        assert_eq!(c.as_much.replicas, 1);
        assert!(!c.static_beats_ours, "as much, not one point more");
        assert_eq!(c.beaten_by, None);
        assert_eq!(c.cheapest_beating, None);
        assert!(
            c.describe().ends_with(
                "(50 % of ours'): a static fleet serves as much for fewer replica-hours"
            ),
            "{}",
            c.describe()
        );
    }

    #[test]
    fn a_fleet_that_chases_bursts_too_late_is_beaten_and_told_so() {
        // 10-minute bursts of 40 req/s every 30 minutes over 5 req/s, 3 h. Ours holds 1
        // replica, asks for 8 at each burst and has them ready 5 minutes in, held 10 minutes
        // after the burst: it serves half of each burst and pays for 8 replicas for 20 minutes.
        let burst = |t: u64| t % 1800 < 600;
        let demand = move |t: u64| if burst(t) { 40.0 } else { 5.0 };
        let ready = move |t: u64| {
            let p = t % 1800;
            if (300..1200).contains(&p) { 8 } else { 1 }
        };
        let held = move |t: u64| if t % 1800 < 1200 { 8 } else { 1 };
        let h = history(3 * 3600, demand, ready, held);
        let c = h.compare(10.0, 1, 20).unwrap();
        // Served: the lulls, and each burst's last 5 minutes (its first 5 at 10 req/s): 70 %.
        assert!(
            (69.0..71.0).contains(&c.ours_served_percent),
            "{}",
            c.describe()
        );
        // Three replicas serve as much (80 %); four serve every burst in full, for 12
        // replica-hours against ours' 17.
        assert_eq!(c.as_much.replicas, 3);
        assert!((c.ours_replica_hours - 16.9).abs() < 0.1, "{c:?}");
        let at_99 = c.at_99.unwrap();
        assert_eq!(at_99.replicas, 4);
        assert!((at_99.served_percent - 100.0).abs() < 1e-9);
        assert!((at_99.replica_hours - 12.0).abs() < 0.1, "{at_99:?}");
        assert!(c.static_beats_ours);
        assert_eq!(
            c.beaten_by,
            Some(at_99),
            "the fleet serving 99 % beats ours"
        );
        // The cheapest fleet that beats ours is smaller: three replicas serve 80 % (each burst's
        // 40 req/s at 30) for 9 replica-hours, nine points above ours for about half of its
        // replica-hours; two serve 60 %, less than ours (`named=cheapest` names three).
        let cheapest = c.cheapest_beating.expect("a cheapest fleet beating ours");
        assert_eq!(cheapest.replicas, 3, "{cheapest:?}");
        assert!((cheapest.served_percent - 80.0).abs() < 0.5, "{cheapest:?}");
        assert!(beats(
            cheapest.served_percent,
            cheapest.replica_hours,
            c.ours_served_percent,
            c.ours_replica_hours
        ));
        let words = c.describe();
        assert!(
            words.contains("a static fleet of 3 replicas")
                && words.contains(
                    "4 replicas would have served 100 % for 11.93 replica-hours (70 % of ours')"
                )
                && words.contains("consider minReplicas"),
            "{words}"
        );
    }

    #[test]
    fn where_the_fleet_serving_99_percent_costs_too_much_the_largest_that_beats_ours_is_named() {
        // 20 req/s for 50 minutes, then 60 req/s for 10 (10 req/s per replica). Ours holds 2
        // and meets each peak with 5 held for the last 30 minutes of every hour, none ready in
        // time: it serves 2 replicas' worth throughout and pays for 3.5 on average.
        let demand = |t: u64| if t % 3600 >= 3000 { 60.0 } else { 20.0 };
        let held = |t: u64| if t % 3600 >= 1800 { 5 } else { 2 };
        let h = history(4 * 3600, demand, |_| 2, held);
        let c = h.compare(10.0, 1, 10).unwrap();
        // Ours serves 20 req/s all along: 1,200 of each hour's 1,600 req/s-minutes, 75 %.
        assert!(
            (c.ours_served_percent - 75.0).abs() < 0.5,
            "{}",
            c.describe()
        );
        // Six replicas serve it all for 24 replica-hours, more than ours' 14: not "beating".
        let at_99 = c.at_99.unwrap();
        assert_eq!(at_99.replicas, 6);
        // Three replicas (1,300 of 1,600, 81 %, for 12 replica-hours) beat ours; four (88 %)
        // cost 16, more than 97 % of ours' 14.
        let by = c.beaten_by.expect("a static fleet beats ours");
        assert_eq!(by.replicas, 3, "{}", c.describe());
        assert!(by.replica_hours <= 0.97 * c.ours_replica_hours);
        assert!(by.served_percent >= c.ours_served_percent + 1.0);
        // Two replicas serve what ours served: three is also the cheapest that beats ours.
        assert_eq!(c.cheapest_beating, Some(by));
    }

    #[test]
    fn the_history_keeps_a_day_and_no_more() {
        let mut h = Hindsight::default();
        let mut closed = 0;
        for t in (0..(26 * 3600)).step_by(2) {
            closed += u32::from(h.observe(Duration::from_secs(t), 1.0, 1, 1));
        }
        assert_eq!(closed, 26 * 60 - 1, "a minute closes when the next begins");
        assert!(h.minutes.len() <= 24 * 60 + 1, "{}", h.minutes.len());
        let c = h.compare(1.0, 1, 4).unwrap();
        assert_eq!(c.minutes, 24 * 60);
    }
}
