//! The proactive, capacity-aware policy (`policy: proactive`): replicas from what the fleet
//! will need by the time a new replica is ready, with the guide's reactive rules as a backstop.
//!
//! Each decision:
//! 1. runs the guide's rules ([`super::Policy::decide`]) on the same state, from the level this
//!    policy asked for last time: a trigger that fires (queue, TTFT, ITL, e2e, KV, preemptions)
//!    raises the level as under `policy: guide` while the in-flight requests still grow
//!    (`backstop=growing`, the default; `backstop=always`: whenever it fires);
//! 2. estimates demand ([`forecast`]): arrivals per second = finished requests per second plus
//!    the growth of waiting and running requests over the last minute, plus the backlog
//!    (waiting requests) to clear within a minute; with `onset=S` the growth over the last S
//!    seconds counts instead while it is larger and positive;
//! 3. learns the capacity of one replica within the SLO ([`capacity`]), from the throughput per
//!    ready replica (once the ready replicas stayed the same for the rate window) while P95
//!    TTFT and ITL stay within their SLOs, probed upwards while they stay below half their
//!    SLOs under load (by `probe`, 3 % per decision), corrected down when they break at a
//!    lower throughput while the in-flight requests do not shrink (`breachwhile=growing`, the
//!    default; with `breachwhile=queued`, also while a queue is left), and raised to at least
//!    `saturated` (80 %) of what a fleet completed per replica while requests queued beyond
//!    one per replica for the rate window; an optional prior
//!    starts it; with `attainment=F` "within" is at least F of
//!    the window's first tokens (and with `shares=both`, the default, of its inter-token gaps)
//!    within the SLOs instead of the P95s;
//! 4. forecasts demand over the start-up horizon (learned from how long asked-for replicas took
//!    to answer, or set): the current demand plus a rising trend over the horizon (at most the
//!    slope over the last `rise` seconds: a step that has happened is not a ramp; with
//!    `trendcap=pattern`, the default, at most a repeating pattern's level one period ago), and
//!    the recent
//!    peak for scale-in;
//! 5. needs `ceil(forecast / (capacity x utilisation))` replicas, and at least what the
//!    highest minute of demand over the peak floor's window needs (`peak=S`, half an hour by
//!    default; with `peakat=limit`, the default, at the most a saturated fleet completed per
//!    replica where that is above the capacity estimate; with `peakat=full` at the estimate; with
//!    `peakwhen=halved`, only once the demand has fallen below half that peak; set aside
//!    with the hindsight floor in a pattern's troughs), what a repeating pattern expects a
//!    start-up ahead (`periodic=on`), and the size of a static fleet the policy's own
//!    hindsight found beating it within the last day (`hindsight=floor`, [`hindsight`]; with
//!    `named=at99`, the default, the smallest serving 99 % of the demand if that one beats
//!    ours, with `named=cheapest` the smallest such fleet; with `troughs=pattern`, the
//!    default, set aside while a repeating pattern expects less than its mean over the next
//!    `ahead` start-ups, and with `holdtroughs=pattern` a passed burst's hold with it; with
//!    `ceiling=seen`, the default, also the most the need asks for while that fleet serves the
//!    demand within the SLO): one step up to that need
//!    (widened to the HPA's tolerance as the guide does); capacity still starting is withdrawn
//!    when the need falls to what is ready; below the ready replicas it scales in to the highest
//!    need of the calm period, once the need has stayed below the level that long with no
//!    trigger, at most once per scale-down period; a surplus of at least half the fleet (a
//!    burst that has passed) goes after `release` seconds, and never sooner than the start-up
//!    time in use, instead of the calm period. The backlog term may be capped at `backlog=K`
//!    replicas beyond the demand's own need, and with `settle=on` it is dropped once the ready
//!    replicas cover the demand's own need: the backlog drains on them, and replicas still
//!    starting beyond the need are withdrawn at once. With `hold=K` a surplus of at least half
//!    the fleet is held until the need has stayed below the level for K start-up times, at the
//!    highest need of the demand alone within them.
//!
//! Without a capacity estimate yet (no prior and nothing observed within the SLO) the guide
//! decides alone. Pure: time is an argument.

pub mod capacity;
pub mod forecast;
pub mod hindsight;

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

pub use self::capacity::{BreachCap, BreachLesson};
use self::capacity::{CapacityEstimate, Observation, Source};
pub use self::forecast::PeriodPick;
use self::forecast::{DemandTracker, Forecast, PeakFloor, Recurrence};
pub use self::hindsight::KeptMinute;
use self::hindsight::{Hindsight, StaticComparison, StaticFleet};
use super::explain::{num, pct};
use super::hpa::{hpa_would_act, smallest_acted_scale_up};
use super::{Decision, Mode, Policy, PolicyConfig, PolicyState, Reason};
use crate::signals::{FleetSignals, Latency, SignalSet};

/// The `finished_reason` of requests that ended without being served (vLLM's abort).
const ABORTED: &str = "abort";

/// What the engines counted over the latency window as not served within the SLO, requests per
/// second: those that finished aborted (clients that gave up, most in a queue), and the larger
/// of the first tokens over `ttft_slo` (the TTFT histogram's share above it) and the finished
/// requests whose own time per output token was over `itl_slo`
/// (`vllm:request_time_per_output_token_seconds`), each over the seconds the window's finished
/// requests were counted over. The larger, not the sum, of the two late counts, since a burst
/// makes the same requests late both ways (summed, they read a tenth to a fifth of the demand
/// below what the simulator counted on the crowd days; proactive.md section 96). A request
/// aborted after a late first token still counts twice; the comparison reads no share below none
/// of the demand served. `None` when the engines expose none of the counts.
fn counted_misses(f: &SignalSet, ttft_slo: Option<f64>, itl_slo: Option<f64>) -> Option<f64> {
    let aborted = aborted_per_second(f).map(finite);
    let span = f
        .finished_window_seconds
        .filter(|s| s.is_finite() && *s > 0.0);
    let over = |latency: Latency, slo: Option<f64>| {
        let (slo, span) = (slo?, span?);
        let share = f.share_within(latency, slo)?;
        Some(f.observations(latency)? * (1.0 - share) / span)
    };
    let late = match (
        over(Latency::Ttft, ttft_slo),
        over(Latency::RequestTpot, itl_slo),
    ) {
        (Some(first), Some(per_token)) => Some(first.max(per_token)),
        (first, per_token) => first.or(per_token),
    };
    let reasons_read = !f.finished_per_second_by_reason.is_empty();
    match (aborted, late) {
        (None, None) if !reasons_read => None,
        (a, l) => Some(a.unwrap_or(0.0) + l.unwrap_or(0.0)),
    }
}

/// Requests per second that finished aborted over the latency window (clients that gave up,
/// often while queued: asked for, not served); `None` when the engines report no such rate.
fn aborted_per_second(f: &SignalSet) -> Option<f64> {
    f.finished_per_second_by_reason
        .get(ABORTED)
        .copied()
        .filter(|r| r.is_finite())
}

/// The start-up horizon used until one is observed, seconds.
const DEFAULT_STARTUP_SECONDS: f64 = 300.0;
/// The most one interval between decisions adds to the learning's observed history: a longer
/// gap is missed cycles, not observation.
const OBSERVED_GAP: Duration = Duration::from_secs(30);
/// The windows that follow the signals' rate window (`rateWindowSeconds`, 60 s by default).
#[derive(Debug, Clone, Copy)]
struct Windows {
    /// The rate window: in-flight growth is measured over it, and the ready replicas seen
    /// over it size the throughput per replica.
    rate: Duration,
    /// The window the demand trend is fitted over: five rate windows (300 s).
    trend: Duration,
    /// The ready replicas must have stayed the same this long for a throughput to teach
    /// capacity, and a breach must have lasted this long to lower it: the rate window less a
    /// sixth of it for scrape slack (50 s).
    stable_for: Duration,
    /// Starting capacity is withdrawn only when the need stayed below it this long, and the
    /// backstop's ask is kept this long after its breach: one rate window (60 s).
    withdraw_after: Duration,
}

impl Windows {
    fn new(rate: Duration) -> Self {
        Self {
            rate,
            trend: rate * 5,
            stable_for: rate - rate / 6,
            withdraw_after: rate,
        }
    }
}

/// Settings of the proactive policy (the metadata key `policy`, see [`parse_policy`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProactiveConfig {
    /// Fraction of a replica's capacity within the SLO the fleet is sized to use (0..1].
    pub target_utilization: f64,
    /// Prior: requests per second one replica serves within the SLO (learned when unset).
    pub capacity_per_replica: Option<f64>,
    /// Seconds from asking for a replica to it answering (learned when unset).
    pub startup_seconds: Option<f64>,
    /// The peak floor's window, seconds: capacity for the highest demand seen this long ago or
    /// less is held (0: no floor).
    pub peak_window_seconds: f64,
    /// Waiting requests are sized to be cleared within this long, seconds (0: the backlog is
    /// not sized for; it drains once the capacity for the demand arrives).
    pub drain_seconds: f64,
    /// Whether the guide's scale-out triggers raise the level whenever they fire
    /// (`backstop=always`), or only while the fleet's in-flight requests still grow
    /// (`backstop=growing`: a backlog that drains needs no replica that arrives after it has).
    pub backstop_always: bool,
    /// How much of the rising trend is extrapolated over the start-up horizon (0: none, 1: all).
    pub trend_weight: f64,
    /// Whether a demand pattern that repeats (a period of 10 to 120 minutes, seen twice) is
    /// expected again: capacity for what came one period ago is asked for a start-up ahead.
    pub periodic: bool,
    /// Seconds a surplus of at least half the fleet (the need at most half the level: the
    /// capacity of a burst that has passed) must stay unneeded, with no trigger, before it is
    /// released, and never fewer than the start-up time in use (learned, set or the default:
    /// capacity released sooner would not be back for a load that returns within a start-up);
    /// 0: such a surplus waits for the calm period like any other.
    pub release_seconds: f64,
    /// The rising trend is the smaller of the slopes over the trend window and over the last
    /// this many seconds, so a step that has already happened is not extrapolated as a ramp;
    /// 0: the trend window's slope alone.
    pub rise_seconds: f64,
    /// At most this many replicas beyond the demand's own need are asked for to clear the
    /// backlog (`backlog=K`; unset: as many as the drain time asks for). Replicas take a
    /// start-up to come, while a burst's backlog is mostly served or timed out by then.
    pub backlog_replicas: Option<u32>,
    /// Whether the backlog is left to drain on the ready fleet once it covers the demand's
    /// own need (`settle=on|off|steady|band|stay`, see [`Settle`]).
    pub settle: Settle,
    /// A surplus of at least half the fleet (the capacity of a burst that has passed) is held
    /// until the need has stayed below the level for this many start-up times (`hold=K`), at
    /// the highest need the demand alone asked for within them; 0: released after the calm
    /// period or the release time, as any other surplus.
    pub hold_startups: f64,
    /// The in-flight growth is also measured over the last this many seconds, and the demand
    /// counts the larger of the two growths (`onset=S`): arrivals that outrun the fleet are
    /// seen within S seconds instead of over the rate window; 0: the rate window alone.
    pub onset_seconds: f64,
    /// Whether a P95 TTFT over its SLO says anything about capacity without a queue
    /// (`breach=any`), or only while requests queue beyond one per ready replica
    /// (`breach=queued`): with no queue, TTFT is the prompts' own prefill, which more replicas
    /// do not shorten, so it neither lowers the estimate nor keeps a throughput from raising
    /// it. An ITL breach counts either way (the decode batch is shared by every request).
    pub breach_needs_queue: bool,
    /// How the start-up time is learned when not set (`startups=ask|each`): `ask` (false), an
    /// ask is answered when the ready replicas reach it, and a withdrawal lowers what is
    /// waited for (so a cut-back ask times its fastest replicas); `each` (true), every replica
    /// asked is matched, oldest first, with the next replica that becomes ready, and the
    /// start-up is the mean over the first ten replicas, then a running mean that moves by a
    /// tenth per replica.
    pub startup_each: bool,
    /// What "within the SLO" means to the capacity estimate (`attainment=F`): `None` (the
    /// default), P95 TTFT and P95 ITL within their SLOs (the guide's measure); set, at least
    /// this share of the latency window's first tokens (and with `shares=both`, the default,
    /// of its inter-token gaps) within their SLOs, read from the histograms' buckets. A breach
    /// is fewer than that share within, and "comfortable" is that share within half the SLOs.
    /// `attainment=0.95` is the P95 test (the share at the SLO is the inverse of the
    /// quantile). Without buckets (no observation in the window) the P95 test decides. A share
    /// the traffic cannot attain at any load (long prompts whose prefill alone misses the
    /// TTFT) keeps every breach lowering the estimate to the throughput at the breach, and the
    /// need climbs by the utilisation's margin at each step up to `maxReplicas`.
    pub attainment: Option<f64>,
    /// Which latencies `attainment=F` reads as a share (`shares=both|ttft`): `both` (true),
    /// first tokens and inter-token gaps; `ttft` (false), first tokens only, and inter-token
    /// gaps keep the P95 test. A first token is one per request, the evaluation's unit; the
    /// ITL histogram counts gaps, and a share of gaps within the ITL SLO is not a share of
    /// requests within their time per output token.
    pub attainment_shares_itl: bool,
    /// Whether the policy acts on its own hindsight (`hindsight=floor|advice`): `floor` (true),
    /// once the once-a-minute comparison finds a static fleet that would have served at least
    /// one point more of the demand with at most 97 % of ours' replica-hours, that fleet's
    /// size is a floor under the need until no comparison has found it for a day (the
    /// comparison's window); a larger fleet found later raises it. `advice` (false): the
    /// comparison is reported and changes nothing.
    pub hindsight_floor: bool,
    /// Whether a repeating pattern bounds the rising trend (`trendcap=pattern|off`):
    /// `pattern` (true), while a pattern that repeats is found (`periodic=on`), the forecast
    /// over the horizon is at most the higher of the demand now and the highest minute of
    /// demand one period ago over the same stretch: a burst that repeats levels off where it
    /// did, and its onset's steep slope is not extrapolated as a ramp beyond it. `off`
    /// (false): the trend alone.
    pub trend_capped_by_pattern: bool,
    /// Whether the hindsight floor yields to a repeating pattern's troughs
    /// (`troughs=pattern|floor`): `pattern` (true), while a pattern that repeats is found
    /// (`periodic=on`) and the highest minute it expects over the next `ahead` start-up times
    /// and two minutes (one period ago) is below its mean over the last period, the hindsight
    /// floor is set aside and the pattern sizes the fleet: a floor learned from repeating
    /// bursts is held for the bursts, back `ahead` start-ups before them, and not paid for
    /// between them. `floor`
    /// (false): the floor holds throughout.
    pub floor_yields_to_troughs: bool,
    /// Under `troughs=pattern`, how many start-up times (plus two minutes) ahead the pattern
    /// must expect less than its mean for the floor to be set aside (`ahead=K`, 1 to 10): a
    /// learned start-up that reads short brings the floor back too late for replicas that
    /// start slower.
    pub trough_ahead_startups: f64,
    /// Whether the hindsight's fleet is also a ceiling within the demand it was judged on
    /// (`ceiling=off|seen|breach|history|at99`, [`Ceiling`]).
    pub ceiling: Ceiling,
    /// Which fleet the hindsight floor holds when comparisons name different ones
    /// (`floorsize=largest|latest`): `largest` (false), the largest named within the day, so a
    /// fleet named on a low capacity estimate stays after the estimate has risen; `latest`
    /// (true), the one the last comparison that named a fleet named (every comparison reads
    /// the whole day at the current estimate).
    pub floor_latest: bool,
    /// Which static fleet a comparison names as beating ours (`named=at99|cheapest`):
    /// `at99` (false), the smallest fleet serving 99 % of the demand if that one beats ours,
    /// else the largest that beats ours; `cheapest` (true), the smallest fleet that beats ours:
    /// the least capacity that, held all along, would have served at least a point more for at
    /// most 97 % of ours' replica-hours.
    pub name_cheapest: bool,
    /// Whether a passed burst's held capacity is also set aside in a repeating pattern's
    /// trough (`holdtroughs=pattern|keep`): `pattern` (true), while `troughs=pattern` sets the
    /// hindsight floor aside (the pattern expects less than its mean over the next `ahead`
    /// start-up times and two minutes), the hold is set aside too and the release waits only
    /// the start-up time; `keep` (false), the hold lasts its K start-ups in a trough as
    /// anywhere.
    pub hold_yields_to_troughs: bool,
    /// Whether a scale-in waits while in-flight requests grow (`scalein=any|steady`):
    /// `steady` (true), a scale-in that is due (the calm period, a release or a hold run out)
    /// is deferred while the in-flight requests grow, since the demand estimate lags a load
    /// that is returning and the need read from it is the trough's; `any` (false), it acts when
    /// due.
    pub scale_in_steady: bool,
    /// How the peak floor (`peak=S`) sizes the peak it holds (`peakat=need|full|limit`).
    /// Under `troughs=pattern` the peak floor is set aside in a repeating pattern's troughs as
    /// the hindsight floor is.
    pub peak_at: PeakAt,
    /// When the peak floor (`peak=S`) holds (`peakwhen=any|halved`): `any` (false), whenever
    /// its peak needs more than the demand's own need; `halved` (true), only once the demand
    /// has fallen below half that peak, as it does when a burst or an on-phase ends, and not
    /// while a load declines gradually, which the demand's own need follows.
    pub peak_when_halved: bool,
    /// Which peaks the peak floor (`peak=S`) holds (`peaks=any|dropped`): `any` (false), the
    /// highest minute of demand in its window; `dropped` (true), the highest the demand fell
    /// from to below half within [`PEAK_DROP_WITHIN`], as it does when a burst or an on-phase
    /// ends. A gradual decline, which the demand's own need follows down, holds no floor.
    pub peak_dropped_only: bool,
    /// When a sustained breach lowers the capacity estimate (`breachwhile=queued|growing`):
    /// `queued` (false), while a queue is left or the in-flight requests do not shrink;
    /// `growing` (true), only while the in-flight requests do not shrink. A queue that drains
    /// is a backlog's aftermath: it sits on the replicas that were ready when it arrived, so
    /// the fleet's throughput per replica then says nothing about what one replica serves.
    pub breach_while_growing: bool,
    /// How many periods of history a repeating pattern must span before it is found
    /// (`periods=F`, 1.2 to 4; default 2): fewer finds a pattern sooner, from a shorter overlap
    /// of the demand with itself one period earlier.
    pub pattern_periods: f64,
    /// How many periods of history a repeating pattern that correlates at least 0.9 over at
    /// least 20 minutes of overlap must span to be found before `periods` do (`early=F`, 1.2
    /// to 4, below `periods` to act; 0 for none; default 1.5): the bursts that repeat
    /// correlate 0.94-0.99, the chance patterns that half a period of overlap reads 0.6-0.7.
    pub pattern_early: f64,
    /// The share of the demand's variation over the overlap a repeating pattern's levels one
    /// period earlier must explain for it to be found (`levels=F`, 0 to 1; 0 for none, the
    /// default): a staircase whose steps come at a steady interval repeats in its changes, not
    /// in its levels.
    pub pattern_levels: f64,
    /// Which lag is a repeating pattern's period (`period=best|fundamental|divisor`): `best`,
    /// the lag whose changes correlate best with themselves; `fundamental`, the shortest lag
    /// within 0.05 of that correlation that passes the half-period test itself; `divisor`, as
    /// `fundamental` among the best lag and the lags it is two or more times (within a minute),
    /// since a shorter lag that merely comes close can be noise in a curve that does not repeat.
    /// Once the history spans twice a multiple of the period, that multiple can correlate a
    /// few thousandths better by noise, and its half, the period, correlates as well: the
    /// half-period test, there to tell a smooth curve, then finds no pattern at all. Default
    /// `divisor` since the seventy-fourth round, `fundamental` in the seventy-third, `best`
    /// before.
    pub period_pick: PeriodPick,
    /// How much the capacity estimate rises per decision while the fleet is comfortable (every
    /// P95 within half its SLO) and serves at least half the estimate per replica
    /// (`probe=F`, a fraction; 0 for none): a fleet sized below its capacity never shows a
    /// higher throughput by itself.
    pub probe: f64,
    /// The most the probe raises the capacity estimate to, as a multiple of the highest
    /// throughput per replica known to be served (`probecap=K`, 1 <= K <= 4; 0 for no bound;
    /// 1.5 by default since the thirty-seventh round, `capacity::DEFAULT_PROBE_CAP`): the
    /// prior, the most served within the SLO, or a saturated fleet's share.
    /// Without a bound the probe climbs until the fleet serves less than half the estimate per
    /// replica or latency passes half its SLO, which a load served at half a replica's
    /// capacity with room to spare reads as twice it.
    pub probe_cap: f64,
    /// What the throughput per replica of a sustained breach bounds until more than that is
    /// served within the SLO (`breachcap=off|probe|estimate`, off by default): `probe`, how far
    /// the probe raises the capacity estimate; `estimate`, that and the estimate itself, which
    /// a breach below it lowers to the breach's throughput at once instead of a tenth of the
    /// way. A load whose P95 flickers about its SLO breaches for less than a rate window at a
    /// time, while between breaches it reads comfortable and the probe climbs back.
    pub breach_cap: BreachCap,
    /// The share of a saturated fleet's throughput per replica the capacity estimate is raised
    /// to at least (`saturated=F`, 0 <= F <= 1; 0 for none; 0.8 by default since the
    /// thirty-third round, `capacity::DEFAULT_SATURATED`): requests that waited
    /// beyond one per ready replica for a whole rate window, the ready replicas unchanged,
    /// kept every replica busy, so the fleet served what its replicas can at most. A fleet
    /// kept above its need, as under a floor of replicas for availability, never serves half
    /// the estimate per replica, so the probe alone leaves the estimate low.
    pub saturated: f64,
    /// When a queue says the fleet is saturated (`saturation=window|queued`): `window`
    /// (false), once requests have waited beyond one per ready replica for a whole rate window;
    /// `queued` (true), as soon as they do, the ready replicas unchanged over the window. Over
    /// a window that still holds the calm before the queue, the throughput per replica reads
    /// low, so the floor it sets is lower than a full window's, never higher.
    pub saturation_queued: bool,
    /// The most replicas an untested capacity estimate asks for, as a multiple of the ready
    /// replicas (`untested=K`, 1 <= K <= 20; 0, the default, for no bound), and at least one
    /// more than are ready. Untested: no prior, nothing inherited, no sustained breach and no
    /// saturated fleet yet, so the estimate rests on what lighter load served, a lower bound
    /// that sizes a burst at many times its need. The bound holds until the burst itself tests
    /// the estimate (a rate window of queue or breach); it never bounds the hindsight's fleet
    /// or the guide's backstop.
    pub untested_bound: f64,
    /// The share of a sustained breach's throughput per replica (completed requests, aborted
    /// ones left out) the capacity estimate is raised to at least, where that throughput is
    /// above it (`breached=F`, 0 <= F <= 1; 0.8, the default, 0 for none): replicas whose P95 breaks its SLO while they serve it are at
    /// their limit, as a saturated fleet's are (`saturated=F`), before any queue has lasted a
    /// rate window; without it a breach only lowers the estimate, so one learned from light
    /// load stays a lower bound through the burst that breaks it.
    pub breached: f64,
    /// When a sustained breach above the capacity estimate raises it
    /// (`breachedif=always|untested|above|light`, for `breached=F`): `always`, whenever one
    /// is, or makes the first estimate; `untested`, only the breach that first tests an
    /// estimate no prior, inheritance, breach or saturated fleet has (or makes the first
    /// one); `above`, whenever one is above an estimate that exists, so a breach with none to
    /// raise makes none; `light`, the default, only the breach that first tests an estimate
    /// that exists, one light load set.
    pub breached_if: BreachLesson,
    /// What an inherited record's capacity starts the estimate at (`inherit=estimate|verified`):
    /// `estimate` (false), the estimate the other pod last held; `verified` (true), the lower of
    /// that and the most it knew to be served within the SLO, since on long-request loads the
    /// last estimate is wherever the probe and the last burst left it.
    pub inherit_verified: bool,
    /// How many replicas the hindsight floor holds (`floorat=named|estimate`): `named`
    /// (false), the fleet its comparison named; `estimate` (true), at most that many, and no
    /// more than carry, at the capacity estimate now, what that fleet carried at the estimate
    /// it was named at, so a floor named while the estimate was low shrinks as it rises.
    pub floor_at_estimate: bool,
    /// Whether the demand now can refute a repeating pattern's trough (`troughnow=any|below`):
    /// `any` (false), `troughs=pattern` sets the floors aside whenever the pattern expects less
    /// than its mean over the next `ahead` start-up times, whatever the demand now; `below`
    /// (true), only while the demand now is also below that mean, since a burst under way
    /// where the pattern expects a trough says the pattern's phase no longer holds (it moved,
    /// or it was inherited from a day whose bursts came at other times).
    pub trough_needs_low_now: bool,
    /// What one replica carries in the hindsight's fluid model
    /// (`hindsightat=estimate|limit|need`): `estimate`, the capacity estimate; `limit`, the
    /// most throughput per replica a saturated fleet completed, where that is above the
    /// estimate, since the model asks which static fleet would have carried the demand, and a
    /// replica carries up to its limit, of which the estimate is a share (`saturated=F`);
    /// `need`, the estimate at the target utilisation, as the demand's own need is sized,
    /// since a fleet at the estimate of the P95 test serves about 95 % of its requests within
    /// the SLO, where the comparison names the fleet that serves 99 %.
    pub hindsight_at: HindsightAt,
    /// What the demand's finished term reads (`arrivals=rate|count|history`): `rate`, the
    /// fleet's finished requests per second, the sum of each pod's rate over its own span;
    /// `count`, the finished requests the fleet counted over the rate window divided by that
    /// window's span, the stretch the in-flight growth is taken over; `history`, the rate for
    /// the need now and the count for the demand history (the peak floor, the repeating
    /// pattern and the hindsight). Arrivals are the finished plus the growth only when both
    /// cover one stretch: the rate counts a replica that became ready seconds ago, draining a
    /// backlog, at its current rate for the whole window, and so reads a backlog's drain as
    /// arrivals.
    pub arrivals: Arrivals,
    /// What caps the rising trend (`ramp=recent|halves`), with `rise=S`: `recent` (false), the
    /// slope over the last S seconds; `halves` (true), the smaller of the slopes over the two
    /// halves of those S seconds. A ramp rises in both halves; a step, which the demand's rate
    /// window smooths into a rise of a minute, rises in one and is flat in the other, so the
    /// trend it leaves is not carried over the start-up horizon while it is still in the last
    /// S seconds.
    pub ramp_in_halves: bool,
    /// How far ahead the rising trend is carried (`trendreach=horizon|history`): `horizon`
    /// (false), over the whole start-up horizon; `history` (true), over no more of it than the
    /// demand history the scaler has: a trend fitted on the first two minutes after a scaler
    /// starts, which include the seconds before the in-flight growth is counted, is carried two
    /// minutes ahead, not five. Past the horizon's length of history the two are the same.
    pub trend_reach_history: bool,
    /// How long the demand may stay within what `lapseif` asks before the hindsight floor is
    /// set aside (`floorlapse=S`, seconds; [`DEFAULT_FLOOR_LAPSE_SECONDS`] by default; 0: never,
    /// the floor is held for a day after a comparison last named it). The comparison
    /// looks back a day, so a fleet named for a crowd is named again every minute until the
    /// crowd is a day old; a floor whose demand has not come back within S seconds is held for
    /// a load that is gone, and it is held again as soon as the demand needs it.
    pub floor_lapse_seconds: f64,
    /// What `floorlapse=S` asks of the last S seconds' demand (`lapseif=fewer|peak`;
    /// [`DEFAULT_LAPSE_BELOW_PEAK`] by default): `fewer` (false), that it stayed within what one
    /// replica fewer than the floor's fleet carries; `peak` (true), that no minute of it reached
    /// half the highest minute of the history that named the fleet, so bursts that recur below
    /// one replica fewer's load keep their floor and a crowd that does not come back lets it go.
    pub lapse_below_peak: bool,
    /// How far apart the floor's bursts may be before `floorlapse=S` lets it go (`lapsegap=F`,
    /// 0 <= F <= 10, 0 for none; [`DEFAULT_LAPSE_GAP_FACTOR`] by default): a floor is set aside
    /// only once no minute reached half the peak of the history that named it for F times the
    /// longest stretch between two minutes that did, within the day the hindsight keeps, as
    /// well as for S seconds. A load whose bursts recur further apart than S seconds then keeps its
    /// floor from its second burst on; a crowd that came once has no such stretch, and lapses
    /// after S seconds as without it.
    pub lapse_gap_factor: f64,
    /// The longest stretch between the floor's bursts `lapsegap=F` counts (`lapsegapmax=S`,
    /// 0 <= S <= 86400 seconds; 0, any, by default): a longer one says nothing about when the
    /// next burst comes. The stretch from yesterday's last crowd to today's first, most of a day
    /// while yesterday's is still in the hindsight's day, would otherwise keep a floor the
    /// whole of today.
    pub lapse_gap_max_seconds: f64,
    /// The price of a missed request the hindsight floor is held against (`missprice=P`,
    /// GPU-seconds per missed request, 0 <= P <= 1,000,000; 0, none, by default): once the
    /// replica-seconds the floor has held beyond what the demand's own need and the peak floor
    /// ask, since the demand last needed it, exceed P times the requests its comparison says
    /// the named fleet would have served beyond ours, the floor is set aside until the demand
    /// needs it again. Holding it is rent paid against a crowd's return; the misses of a return
    /// are what not holding it costs; a floor held until the rent equals that cost, then let
    /// go, costs at most twice the better of the two whether the crowd returns or not (the
    /// ski-rental rule). A floor inherited from an earlier pod carries the count of requests
    /// it was named with (`PersistedFloor::served_beyond_requests`); one from a record written
    /// before that count was kept is held as without the setting.
    pub miss_price: f64,
    /// What the hindsight judges ours' share of the demand by (`oursby=fluid|counted`):
    /// `fluid` (false, the default), the fluid model's (each minute's demand served up to the
    /// ready replicas' capacity, nothing carried over); `counted` (true), the lower of that and
    /// what the engines counted (the demand less the requests aborted and the first tokens
    /// over the TTFT SLO), which holds the queue a burst leaves and the requests that time out
    /// in it. The count is read and explained either way; it names a fleet, and sizes the
    /// requests `missprice` prices, only under `counted`.
    pub ours_counted: bool,
    /// How long a step of one replica waits (`confirm=S`, 0 <= S <= 600 seconds; 0, none, by
    /// default): the need must have stayed above the target for S seconds before one more
    /// replica is asked for. A need that crosses a whole replica and falls back within S seconds
    /// (the demand's noise about the boundary, a trend the next minute caps) asks for nothing,
    /// where without it the replica is asked for and withdrawn while it still starts. A step of
    /// two or more replicas, a burst's, is taken at once, and the guide's backstop is not
    /// delayed.
    pub confirm_seconds: f64,
    /// The share of the capacity estimate the fleet must serve per replica for a sustained
    /// breach to lower the estimate (`breachload=F`, 0 <= F <= 1; 0, at any load, by default):
    /// a breach on replicas far below the load the estimate says they carry, such as a thin
    /// latency window's few slow first tokens on long prompts between bursts, is not their
    /// limit, and more replicas would not remove it. The probe's own bar is half the estimate.
    pub breach_load: f64,
    /// The most replicas one step of the guide's backstop adds while the demand's need is
    /// within the target already asked for (`backstopstep=K`, a whole number 0 <= K <= 20; 0,
    /// the guide's own step, by default). The forecast has sized the fleet and a latency
    /// trigger then says it is near its limit, not that a burst arrived (a burst raises the
    /// need above the target, and the guide's step stands then); a breach that lasts steps
    /// again once the replicas asked for are ready.
    pub backstop_step: u32,
    /// What a TTFT tail over its SLO says about capacity (`tail=p95|lighter`): `p95` (false),
    /// a breach whenever the P95 (or under `attainment=F`, the share) misses it; `lighter`
    /// (true), where the fleet at light load itself keeps fewer than the share the test asks
    /// for plus a margin within the SLO (prompts whose own prefill takes longer), a breach
    /// only when the share within it is more than the margin below light load's: a tail the
    /// traffic shows at any load is no evidence about what a replica serves.
    pub tail_lighter: bool,
    /// What the capacity estimate counts as served in every observation
    /// (`served=finished|completed`): `finished` (false), every finished request; `completed`
    /// (true), finished requests less those finished with reason `abort` (clients that gave
    /// up, often in a queue), which were not served. A saturated fleet's throughput
    /// (`saturated=F`) counts completed requests either way; the demand counts every finished
    /// request either way, since an aborted request was asked for.
    pub served_completed: bool,
    /// What the capacity estimate tests against `itlSloSeconds` (`itltest=p95|mean|request`).
    pub itl_test: ItlTest,
    /// What the guide's ITL trigger (the backstop) reads against `itlSloSeconds`
    /// (`backstopitl=p95|test`): `p95` (false), the gaps' P95, as under the guide's policy;
    /// `test` (true), the statistic `itltest` names, so the backstop and the capacity estimate
    /// agree on what is within the SLO. The guide's policy itself always reads the P95.
    pub backstop_itl_test: bool,
}

/// How the peak floor sizes the peak it holds (`peakat=need|full|limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PeakAt {
    /// At the target utilisation, as the demand's own need is sized.
    Need,
    /// At the capacity estimate itself: the fewest replicas that would carry that demand
    /// again.
    Full,
    /// At what one replica carries at most, the most throughput per replica a saturated fleet
    /// completed, where that is above the capacity estimate (the estimate until then): the
    /// floor asks how few replicas carry that demand again, not how many serve it with the
    /// estimate's margin.
    Limit,
}

impl PeakAt {
    /// Every value, in the order the metadata lists them.
    pub const ALL: [Self; 3] = [Self::Need, Self::Full, Self::Limit];

    /// The metadata's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Need => "need",
            Self::Full => "full",
            Self::Limit => "limit",
        }
    }
}

/// What one replica carries in the hindsight's fluid model (`hindsightat=estimate|limit|need`),
/// see [`ProactiveConfig::hindsight_at`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HindsightAt {
    /// The capacity estimate.
    Estimate,
    /// The most a saturated fleet completed per replica, where above the estimate.
    Limit,
    /// The capacity estimate at the target utilisation.
    Need,
}

impl HindsightAt {
    /// Every value, in the order the metadata lists them.
    pub const ALL: [Self; 3] = [Self::Estimate, Self::Limit, Self::Need];

    /// The metadata's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Estimate => "estimate",
            Self::Limit => "limit",
            Self::Need => "need",
        }
    }
}

/// What the demand's finished term reads (`arrivals=rate|count|history`), see
/// [`ProactiveConfig::arrivals`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrivals {
    /// The fleet's finished requests per second, the sum of the pods' rates.
    Rate,
    /// The fleet's finished count over the rate window's span.
    Count,
    /// The rate for the need now, the count for the demand history.
    History,
}

impl Arrivals {
    /// Every value, in the order the metadata lists them.
    pub const ALL: [Self; 3] = [Self::Rate, Self::Count, Self::History];

    /// The metadata's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rate => "rate",
            Self::Count => "count",
            Self::History => "history",
        }
    }
}

/// What the capacity estimate tests against the ITL SLO (`itltest=p95|mean|request`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ItlTest {
    /// The P95 of all inter-token gaps (or under `attainment=F` with `shares=both`, their
    /// share within the SLO): the guide's statistic.
    P95,
    /// The mean inter-token gap: a request-level SLO on the time per output token holds each
    /// request's own mean, and the gaps' mean weighs those by tokens.
    Mean,
    /// The P95 over finished requests of each one's own mean time per output token
    /// (`vllm:request_time_per_output_token_seconds`), a request-level SLO's own statistic;
    /// the gaps' P95 where the engine does not expose it.
    Request,
}

impl ItlTest {
    /// Every value, in the order the metadata lists them.
    pub const ALL: [Self; 3] = [Self::P95, Self::Mean, Self::Request];

    /// The metadata's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::P95 => "p95",
            Self::Mean => "mean",
            Self::Request => "request",
        }
    }

    /// What it reads in `f`, in words and its value (`None`: nothing observed). `request`
    /// falls back to the gaps' P95 where the engine does not expose the per-request histogram.
    pub fn read(self, f: &SignalSet) -> (&'static str, Option<f64>) {
        let gaps_p95 = ("the inter-token gaps' P95", f.itl_seconds.p95);
        match self {
            Self::P95 => gaps_p95,
            Self::Mean => ("the inter-token gaps' mean", f.itl_mean_seconds),
            Self::Request => match f.request_tpot_seconds.p95 {
                Some(p95) => (
                    "the P95 of each request's own time per output token",
                    Some(p95),
                ),
                None => gaps_p95,
            },
        }
    }
}

/// What a scaler pod keeps of the proactive policy's learning for the next pod serving the
/// same trigger (a restarted one, or its peer): the capacity estimate with the most known to be
/// served, the start-up time when it was learned rather than set, and the hindsight floor it
/// holds (`hindsight=floor`) with its age, so the next pod holds it for the rest of its day,
/// and the demand history by minute over the last day, which the peak floor, the patterns and
/// the hindsight read.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Persisted {
    /// The capacity estimate, requests per second per replica.
    pub capacity_per_replica: Option<f64>,
    /// The highest throughput per replica known to be served (the probe's bound follows it).
    pub capacity_verified: Option<f64>,
    /// The learned start-up time, seconds (`None` when set, or not learned yet).
    pub startup_seconds: Option<f64>,
    /// How long this learning has been observing: seconds of decisions with a stable fleet
    /// serving load, an earlier pod's included. Of two pods' records, the longer history is
    /// the one a running pod adopts (0 in records written before it was kept).
    #[serde(default)]
    pub observed_seconds: f64,
    /// The hindsight floor held (`hindsight=floor`), absent when none is (and in records
    /// written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hindsight_floor: Option<PersistedFloor>,
    /// Under `tail=lighter`: the share of first tokens within the TTFT SLO at light load, the
    /// bar a TTFT tail is judged by (absent before light load was seen, and in records
    /// written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub light_share: Option<f64>,
    /// The demand history: one entry per whole minute of the last day, oldest first (empty
    /// before a capacity estimate, and in records written before it was kept). At most about
    /// 40 KB of JSON for a whole day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub demand_history: Vec<KeptMinute>,
}

/// A hindsight floor as it is kept for the next pod: the static fleet a comparison found
/// beating ours, what it was judged on, and how long ago it was last found. It holds until a
/// day ([`hindsight::WINDOW`]) after that, whichever pod holds it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct PersistedFloor {
    /// The static fleet's replicas.
    pub replicas: u32,
    /// The share of the demand it would have served, percent, and its replica-hours.
    pub served_percent: f64,
    pub replica_hours: f64,
    /// Ours over the same history: share of the demand served, percent, and replica-hours.
    pub ours_served_percent: f64,
    pub ours_replica_hours: f64,
    /// Minutes of history compared.
    pub minutes: u32,
    /// The highest demand of that history, requests per second.
    pub peak_demand: f64,
    /// Seconds since a comparison last found it, when the record was taken.
    pub age_seconds: f64,
    /// The capacity estimate the comparison named it at, requests per second per replica
    /// (absent in records written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_per_replica: Option<f64>,
    /// The requests the named fleet would have served beyond ours over that history, what
    /// `missprice=P` prices (absent in records written before it was kept: such a floor is
    /// held as without the setting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_beyond_requests: Option<f64>,
}

impl PersistedFloor {
    /// The same floor `elapsed` seconds later (a record read some time after it was written).
    pub fn aged(self, elapsed: f64) -> Self {
        Self {
            age_seconds: self.age_seconds + elapsed.max(0.0),
            ..self
        }
    }

    /// Whether it can be held: at least one replica, finite numbers, younger than a day.
    fn holds(&self) -> bool {
        let numbers = [
            self.served_percent,
            self.replica_hours,
            self.ours_served_percent,
            self.ours_replica_hours,
            self.peak_demand,
            self.age_seconds,
        ];
        self.replicas >= 1
            && numbers.iter().all(|v| v.is_finite())
            && self.age_seconds >= 0.0
            && self.age_seconds < hindsight::WINDOW.as_secs_f64()
    }
}

impl Persisted {
    /// The same record `elapsed` seconds after it was taken: its hindsight floor and its
    /// demand history are that much older (the history to the second; what then began more
    /// than a day ago is dropped).
    pub fn aged(self, elapsed: f64) -> Self {
        let seconds = elapsed.max(0.0).round();
        let shift = if seconds.is_finite() {
            seconds.min(f64::from(u32::MAX)) as u32
        } else {
            0
        };
        Self {
            hindsight_floor: self.hindsight_floor.map(|f| f.aged(elapsed)),
            demand_history: self
                .demand_history
                .into_iter()
                .map(|m| KeptMinute(m.0.saturating_add(shift), m.1, m.2, m.3, m.4))
                .filter(KeptMinute::holds)
                .collect(),
            ..self
        }
    }
}

/// What the proactive policy has learned, as the scaler's gauges and `/debug` show it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Learned {
    /// Requests per second one replica serves within the SLO (`None` before any estimate).
    pub capacity_per_replica: Option<f64>,
    /// Where the estimate stands: `learned` (observations moved it), `prior` (the metadata's
    /// `capacity=R`, not moved yet), `inherited` (an earlier pod's, not moved yet) or `none`.
    pub capacity_source: &'static str,
    /// Whether the estimate has met a replica's limit: a prior, an inherited estimate, a
    /// sustained breach or a saturated fleet. Until then it rests on what lighter load served,
    /// a lower bound (`untested=K` bounds what it asks for, `breachedif=untested` when a breach
    /// teaches it).
    pub capacity_tested: bool,
    /// The start-up time in use, seconds.
    pub startup_seconds: f64,
    /// Where it comes from: `set` (`startup=S`), `learned`, `inherited` (an earlier pod's,
    /// no start-up observed since) or `default`.
    pub startup_source: &'static str,
    /// Seconds of decisions with a stable fleet serving load that the learning rests on,
    /// another pod's included when it was inherited.
    pub observed_seconds: f64,
}

/// What happens to the backlog once the ready replicas cover the demand's need without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Settle {
    /// The backlog is sized for as long as it stands (`settle=off`).
    Off,
    /// The backlog is left to drain on the ready fleet: it is not sized for, and replicas
    /// still starting beyond the need are withdrawn at once, without waiting for the need to
    /// stay low for the withdrawal window (`settle=on`).
    On,
    /// As `On`, and for a rate window after the last settled decision a need at most one
    /// replica above the ready ones stays settled: it asks for that replica rather than for
    /// the backlog's (`settle=steady`).
    Steady,
    /// As `Steady`, and replicas still starting are withdrawn only once the need has stayed at
    /// or below the ready ones for the withdrawal window, not at once (`settle=band`).
    Band,
    /// As `On`, and within a rate window of the ready replicas last covering the demand's need,
    /// a need one replica above them asks for nothing: the target stays at the ready ones, so
    /// a need that crosses a replica's boundary and back, as the demand's noise does, neither
    /// asks for a replica nor withdraws it seconds later (`settle=stay`). A need that stays
    /// one above for the window, or reads two above, asks as under `On`.
    Stay,
}

impl Settle {
    /// Whether the backlog is left to the ready fleet at all.
    pub fn is_on(self) -> bool {
        self != Self::Off
    }

    /// Whether a need one replica above the ready ones stays settled for a rate window.
    fn steady(self) -> bool {
        matches!(self, Self::Steady | Self::Band)
    }

    /// The setting's value as written in the metadata.
    fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::On => "on",
            Self::Steady => "steady",
            Self::Band => "band",
            Self::Stay => "stay",
        }
    }
}

/// Whether, and while what holds, the hindsight's fleet caps the need within the demand it was
/// judged on (`ceiling=`). The guide's backstop is never capped: its step stands on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Ceiling {
    /// The floor is a floor only (`ceiling=off`).
    Off,
    /// While a hindsight floor is held and the demand now is at most the highest demand of the
    /// history that named it and at most what that fleet serves at the capacity estimate (the
    /// fluid model's own measure), the need is at most that fleet's size: a static fleet of
    /// that size served that range of demand, so the forecast, the backlog and the pattern do
    /// not chase above it. The cap holds only while no latency is over its SLO, no request
    /// queues beyond one per ready replica and no guide trigger fires: a demand read from a
    /// fleet at its limit is what it served, not what arrived (`ceiling=seen`).
    Seen,
    /// As `Seen`, and the cap holds through a breach, a queue and a guide trigger too: the
    /// demand counts the in-flight growth, so a fleet at its limit still reads what arrives,
    /// and the comparison judged that fleet on the breaches of the demand it saw
    /// (`ceiling=breach`).
    Breach,
    /// As `Breach`, and the demand now need only be within the history's highest demand, not
    /// also within what the fleet serves at the capacity estimate now, which a breach lowers
    /// (`ceiling=history`).
    History,
    /// As `History` at a fleet the comparison that named it found serving at least 99 % of
    /// the demand, and as `Seen` at another: the largest fleet that merely beats ours, named
    /// when none serves 99 %, may not carry a crowd's return (`ceiling=at99`).
    At99,
}

impl Ceiling {
    /// Every value, in the order the metadata lists them.
    pub const ALL: [Self; 5] = [
        Self::Off,
        Self::Seen,
        Self::Breach,
        Self::History,
        Self::At99,
    ];

    /// The metadata's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Seen => "seen",
            Self::Breach => "breach",
            Self::History => "history",
            Self::At99 => "at99",
        }
    }
}

impl Default for ProactiveConfig {
    fn default() -> Self {
        Self {
            target_utilization: DEFAULT_UTILIZATION,
            capacity_per_replica: None,
            startup_seconds: None,
            peak_window_seconds: DEFAULT_PEAK_WINDOW_SECONDS,
            drain_seconds: DEFAULT_DRAIN_SECONDS,
            backstop_always: DEFAULT_BACKSTOP_ALWAYS,
            trend_weight: DEFAULT_TREND_WEIGHT,
            periodic: DEFAULT_PERIODIC,
            release_seconds: DEFAULT_RELEASE_SECONDS,
            rise_seconds: DEFAULT_RISE_SECONDS,
            backlog_replicas: DEFAULT_BACKLOG_REPLICAS,
            settle: DEFAULT_SETTLE,
            hold_startups: DEFAULT_HOLD_STARTUPS,
            onset_seconds: DEFAULT_ONSET_SECONDS,
            breach_needs_queue: DEFAULT_BREACH_NEEDS_QUEUE,
            startup_each: DEFAULT_STARTUP_EACH,
            attainment: DEFAULT_ATTAINMENT,
            attainment_shares_itl: DEFAULT_ATTAINMENT_SHARES_ITL,
            hindsight_floor: DEFAULT_HINDSIGHT_FLOOR,
            trend_capped_by_pattern: DEFAULT_TREND_CAPPED_BY_PATTERN,
            floor_yields_to_troughs: DEFAULT_FLOOR_YIELDS_TO_TROUGHS,
            trough_ahead_startups: DEFAULT_TROUGH_AHEAD_STARTUPS,
            ceiling: DEFAULT_CEILING,
            floor_latest: DEFAULT_FLOOR_LATEST,
            name_cheapest: DEFAULT_NAME_CHEAPEST,
            hold_yields_to_troughs: DEFAULT_HOLD_YIELDS_TO_TROUGHS,
            scale_in_steady: DEFAULT_SCALE_IN_STEADY,
            peak_at: DEFAULT_PEAK_AT,
            peak_when_halved: DEFAULT_PEAK_WHEN_HALVED,
            peak_dropped_only: DEFAULT_PEAK_DROPPED_ONLY,
            breach_while_growing: DEFAULT_BREACH_WHILE_GROWING,
            pattern_periods: forecast::DEFAULT_PATTERN_PERIODS,
            pattern_early: DEFAULT_PATTERN_EARLY,
            pattern_levels: DEFAULT_PATTERN_LEVELS,
            period_pick: DEFAULT_PERIOD_PICK,
            probe: capacity::DEFAULT_PROBE,
            probe_cap: capacity::DEFAULT_PROBE_CAP,
            breach_cap: BreachCap::Off,
            saturated: capacity::DEFAULT_SATURATED,
            tail_lighter: DEFAULT_TAIL_LIGHTER,
            served_completed: DEFAULT_SERVED_COMPLETED,
            ours_counted: false,
            itl_test: ItlTest::P95,
            backstop_itl_test: false,
            saturation_queued: false,
            untested_bound: 0.0,
            breached: DEFAULT_BREACHED,
            breached_if: DEFAULT_BREACHED_IF,
            inherit_verified: false,
            floor_at_estimate: false,
            trough_needs_low_now: DEFAULT_TROUGH_NEEDS_LOW_NOW,
            hindsight_at: HindsightAt::Estimate,
            arrivals: Arrivals::Rate,
            ramp_in_halves: false,
            trend_reach_history: false,
            lapse_below_peak: DEFAULT_LAPSE_BELOW_PEAK,
            floor_lapse_seconds: DEFAULT_FLOOR_LAPSE_SECONDS,
            lapse_gap_factor: DEFAULT_LAPSE_GAP_FACTOR,
            lapse_gap_max_seconds: 0.0,
            miss_price: 0.0,
            confirm_seconds: 0.0,
            breach_load: 0.0,
            backstop_step: 0,
        }
    }
}

/// The default target utilisation (chosen on the training scenarios, docs/policy.md).
pub const DEFAULT_UTILIZATION: f64 = 0.8;
/// The default peak floor window, seconds: half an hour since the thirtieth round, chosen with
/// `peakat=full;breachwhile=growing;named=at99;holdtroughs=keep` on the training scenarios
/// (`docs/evaluation/proactive.md`, section 42); 0 (no floor) before.
pub const DEFAULT_PEAK_WINDOW_SECONDS: f64 = 1800.0;
/// The default backlog drain time, seconds (chosen on the training scenarios).
pub const DEFAULT_DRAIN_SECONDS: f64 = 60.0;
/// The default backstop: `growing` since the fifth round, chosen with `settle` on the training
/// scenarios (`docs/evaluation/proactive.md`, section 11; `always` until then).
pub const DEFAULT_BACKSTOP_ALWAYS: bool = false;
/// The default weight of the trend over the horizon (chosen on the training scenarios).
pub const DEFAULT_TREND_WEIGHT: f64 = 1.0;
/// Whether repeating patterns are expected again by default (chosen on the training scenarios).
pub const DEFAULT_PERIODIC: bool = true;
/// Which lag a repeating pattern's period is by default: the shortest within 0.05 of the best
/// correlation that is a period itself and that the best lag is, or is two or more times
/// (`period=divisor`), since the seventy-fourth round (`docs/evaluation/proactive.md`, sections
/// 99 and 100, rules for a defect in the detector); any such shorter lag (`period=fundamental`)
/// in the seventy-third; the best lag (`period=best`) before.
pub const DEFAULT_PERIOD_PICK: PeriodPick = PeriodPick::Divisor;
/// The default release time of a burst's surplus, seconds (chosen on the training scenarios,
/// `docs/evaluation/proactive.md`, section 9). The release never comes sooner than the start-up
/// time in use, so 60 s means "after the start-up time, and never sooner than the rate window".
/// Without that floor, 60 s gave up capacity on a trace whose load dips for a minute and comes
/// back (section 8).
pub const DEFAULT_RELEASE_SECONDS: f64 = 60.0;
/// The default window of the recent slope that caps the trend, seconds (chosen on the training
/// scenarios together with the release, section 9).
pub const DEFAULT_RISE_SECONDS: f64 = 180.0;
/// The default cap on the replicas asked for the backlog beyond the demand's need (none).
pub const DEFAULT_BACKLOG_REPLICAS: Option<u32> = None;
/// Whether the backlog is left to the ready fleet once it covers the demand, by default: on
/// since the fifth round, chosen with `backstop=growing` on the training scenarios (section 11);
/// alone, a guide trigger on the remaining queue asked for the withdrawn replicas again.
pub const DEFAULT_SETTLE: Settle = Settle::On;
/// Start-up times a passed burst's capacity is held by default: 3 since the twenty-sixth round
/// (`docs/evaluation/proactive.md` sections 36-37), chosen with `tail=lighter` on the training
/// set's ten seeds, where it keeps on-off-mooncake's fleet through troughs shorter than three
/// start-ups that the tail's trigger no longer holds; 0 (not held beyond the release) before.
pub const DEFAULT_HOLD_STARTUPS: f64 = 3.0;
/// The onset stretch over which the in-flight growth is also measured by default, seconds (0:
/// the rate window alone).
pub const DEFAULT_ONSET_SECONDS: f64 = 0.0;
/// Whether a TTFT breach teaches capacity only while requests queue, by default (no: any
/// sustained breach does).
pub const DEFAULT_BREACH_NEEDS_QUEUE: bool = false;
/// Whether the start-up time is learned per replica by default (no: per ask).
pub const DEFAULT_STARTUP_EACH: bool = false;
/// The default share within the SLO the capacity estimate holds to: none, the P95 test. Round 17
/// chose 99 % of first tokens (`attainment=0.99;shares=ttft`) by its rule; the choice was
/// rescinded because a share the traffic cannot attain at any load ratchets the need up to
/// `maxReplicas` (`docs/evaluation/proactive.md`, sections 25 and 27).
pub const DEFAULT_ATTAINMENT: Option<f64> = None;
/// Whether `attainment=F` reads inter-token gaps as a share too, by default (yes: `both`).
pub const DEFAULT_ATTAINMENT_SHARES_ITL: bool = true;
/// Whether the hindsight's verdict sets a floor by default: yes (`floor`) since the eighteenth
/// round, chosen on the training scenarios (`docs/evaluation/proactive.md`, section 28).
pub const DEFAULT_HINDSIGHT_FLOOR: bool = true;
/// Whether a repeating pattern bounds the rising trend by default: yes (`pattern`) since the
/// fifty-ninth round, chosen with `breached=0.8;breachedif=light;peakat=limit` on the training
/// scenarios under floors of one and two (`docs/evaluation/proactive.md`, section 81); `off`
/// before.
pub const DEFAULT_TREND_CAPPED_BY_PATTERN: bool = true;
/// Whether the hindsight floor yields to a repeating pattern's troughs by default: yes
/// (`pattern`) since the twenty-second round, chosen with `ahead=2` and `ceiling=seen` on the
/// training scenarios (`docs/evaluation/proactive.md`, section 32; alone, with `ahead=1`, a
/// negative result in section 31).
pub const DEFAULT_FLOOR_YIELDS_TO_TROUGHS: bool = true;
/// Start-up times a trough must last ahead, by default, for `troughs=pattern` to set the floor
/// aside: two since the twenty-second round (section 32; one, as the periodic forecast looks
/// ahead, came back too late for replicas slower than the learned start-up, section 31).
pub const DEFAULT_TROUGH_AHEAD_STARTUPS: f64 = 2.0;
/// Whether the hindsight's fleet is a ceiling within the demand it was judged on, by default:
/// yes (`seen`) since the twenty-second round (section 32).
pub const DEFAULT_CEILING: Ceiling = Ceiling::Seen;

/// Periods of history a strongly repeating pattern must span to be found early, by default:
/// 1.5 since the seventy-seventh round, chosen on the training scenarios with floors of one
/// and two replicas (`docs/evaluation/proactive.md`, section 103); 0, none, before.
pub const DEFAULT_PATTERN_EARLY: f64 = 1.5;
/// The share of the overlap's variation a repeating pattern's levels must explain, by
/// default: none (0, `levels=0`).
pub const DEFAULT_PATTERN_LEVELS: f64 = 0.0;
/// Whether the hindsight floor is the latest fleet named rather than the largest within the
/// day, by default (no: `largest`).
pub const DEFAULT_FLOOR_LATEST: bool = false;
/// Whether a comparison names the smallest fleet that beats ours rather than the one serving
/// 99 %, by default: no (`at99`) again since the thirtieth round (`docs/evaluation/proactive.md`,
/// section 42); `cheapest` in the twenty-seventh to twenty-ninth (section 38).
pub const DEFAULT_NAME_CHEAPEST: bool = false;
/// Whether the demand now must be below a repeating pattern's mean for its trough to set the
/// floors aside, by default: yes (`below`) since the fifty-first round, judged cold on the
/// training scenarios under both floors (every seed as before) and warm with an hour between
/// the days, where a pattern out of phase had set the floors aside at the bursts
/// (`docs/evaluation/proactive.md`, section 72); `any` before.
pub const DEFAULT_TROUGH_NEEDS_LOW_NOW: bool = true;
/// Whether a passed burst's held capacity is set aside in a repeating pattern's trough, by
/// default: yes (`pattern`) since the seventy-fifth round (`docs/evaluation/proactive.md`,
/// section 101), as in the twenty-seventh to twenty-ninth (section 38); `keep` in the
/// thirtieth to seventy-fourth (section 42).
pub const DEFAULT_HOLD_YIELDS_TO_TROUGHS: bool = true;
/// Whether a due scale-in waits while in-flight requests grow, by default (no: `any`).
pub const DEFAULT_SCALE_IN_STEADY: bool = false;
/// How the peak floor holds its peak by default: at the most a saturated fleet completed per
/// replica, where that is above the capacity estimate (`limit`), since the fifty-ninth round
/// (section 81); at the capacity estimate (`full`) from the thirtieth round, chosen with
/// `peak=1800` (section 42); at the target utilisation before.
pub const DEFAULT_PEAK_AT: PeakAt = PeakAt::Limit;
/// The share of a sustained breach's throughput per replica the capacity estimate is raised to
/// at least, by default: 0.8 (`breached=0.8`) since the fifty-ninth round, with
/// [`DEFAULT_BREACHED_IF`] (section 81); 0, none, before.
pub const DEFAULT_BREACHED: f64 = 0.8;
/// When a breach's lesson is taken, by default: only at the breach that first tests an estimate
/// light load set (`light`) since the fifty-ninth round (section 81; alone, a result under the
/// rule's 2 % in section 63); `always` before.
pub const DEFAULT_BREACHED_IF: BreachLesson = BreachLesson::Light;
/// How long, by default, the demand may stay below half the peak of the history that named the
/// hindsight floor before the floor is set aside: 2,400 s (`floorlapse=2400`, with
/// [`DEFAULT_LAPSE_BELOW_PEAK`]) since the sixty-second round, chosen on the training scenarios
/// under floors of one and two (`docs/evaluation/proactive.md`, section 84); 0, never, before.
pub const DEFAULT_FLOOR_LAPSE_SECONDS: f64 = 2400.0;
/// What `floorlapse=S` asks of the demand by default: that no minute of it reached half the peak
/// that named the floor (`lapseif=peak`) since the sixty-second round (section 84).
pub const DEFAULT_LAPSE_BELOW_PEAK: bool = true;
/// How many times the longest stretch between the floor's bursts `floorlapse=S` also waits, by
/// default: 1.5 (`lapsegap=1.5`) since the sixty-third round, chosen by its clause for a change
/// the training scenarios cannot see, on batch-bursts-conv at half speed (section 85); 0 before.
pub const DEFAULT_LAPSE_GAP_FACTOR: f64 = 1.5;
/// Whether the peak floor holds only once the demand has fallen below half its peak, by
/// default (no: `any`).
pub const DEFAULT_PEAK_WHEN_HALVED: bool = false;
/// Whether the peak floor holds only peaks the demand dropped from, by default (no: `any`).
pub const DEFAULT_PEAK_DROPPED_ONLY: bool = false;
/// Under `peaks=dropped`, how soon after a minute the demand must fall below half of it for
/// that minute to be a peak the floor holds: ten minutes. A burst's or an on-phase's end, with
/// a minute's ramp and a rate window's lag, halves the demand within three; the steepest fall
/// of a day compressed into four hours takes about an hour.
pub const PEAK_DROP_WITHIN: Duration = Duration::from_secs(600);
/// Whether only a breach while the in-flight requests do not shrink lowers the capacity
/// estimate, by default: yes (`growing`) since the thirtieth round (section 42); `queued`, a
/// queue left counts too, before.
pub const DEFAULT_BREACH_WHILE_GROWING: bool = true;
/// Whether a TTFT breach is judged against light load's share within the SLO, by default: yes
/// (`lighter`) since round 26's choice was amended (`docs/evaluation/proactive.md` section 37),
/// chosen with `hold=3` on the training set's ten seeds against every static fleet; `p95`
/// before.
pub const DEFAULT_TAIL_LIGHTER: bool = true;
/// Whether the capacity estimate counts completed requests only (aborted ones left out), by
/// default: no (`finished`).
pub const DEFAULT_SERVED_COMPLETED: bool = false;
/// Under `tail=lighter`, a decision is at light load when the fleet is stable, nothing queues
/// beyond one request per ready replica and each replica serves at most this fraction of the
/// capacity estimate.
const LIGHT_LOAD: f64 = 0.6;
/// Under `tail=lighter`, how far (a share) below light load's share of first tokens within
/// the SLO the share must fall to count as a breach.
const TAIL_MARGIN: f64 = 0.02;
/// Under `tail=lighter`, light load's share is a running mean over light decisions that
/// forgets with this time constant (each decision weighs for at most `LIGHT_STEP_MAX`).
const LIGHT_MEMORY: Duration = Duration::from_secs(300);
const LIGHT_STEP_MAX: Duration = Duration::from_secs(10);
/// Under `startups=each` the learned start-up time is the mean of the first this many replicas'
/// start-ups, then moves by this fraction of it per replica (a running mean that forgets).
const STARTUP_EACH_WINDOW: u32 = 10;
/// Beyond the start-up horizon, how far ahead a repeating pattern is looked at: a replica
/// asked for a little early is ready even when its start-up runs long.
const PERIODIC_SLACK: Duration = Duration::from_secs(120);

/// A repeating pattern's trough in words, for the explanation: what it expects over the next
/// `ahead` against its mean over the last period.
fn trough_words(r: &forecast::Recurring, ahead: Duration) -> String {
    format!(
        "the repeating pattern expects at most {} req/s over the next {}, below its mean of {} req/s over the last period",
        num(r.expected),
        super::explain::dur(ahead),
        num(r.mean),
    )
}

/// The one of `all` whose word (`word`) is `v`, for the setting `k`; otherwise an error that
/// lists the words.
fn one_of<T: Copy>(
    k: &str,
    v: &str,
    all: &[T],
    word: fn(T) -> &'static str,
    expected: &str,
) -> Result<T, String> {
    all.iter().copied().find(|t| word(*t) == v).ok_or_else(|| {
        let words: Vec<String> = all.iter().map(|t| format!("`{}`", word(*t))).collect();
        let (last, rest) = words.split_last().expect("a setting has values");
        format!("{k}={v:?} is not {} or {last}; {expected}", rest.join(", "))
    })
}

/// Reads the value of the `policy` key: `guide` (`None`), or `proactive` optionally followed by
/// `;`- or space-separated settings `utilization=F` (0..1], `capacity=R` (requests per second
/// per replica), `startup=S` (seconds), `peak=S` (the peak floor's window, seconds, 0 for
/// none), `drain=S` (backlog drain time, seconds, 0 to size for demand only),
/// `trend=W` (weight of the rising trend, 0..1), `backstop=always|growing`, `periodic=on|off`,
/// `release=S` (seconds before a surplus of half the fleet is released, at least the start-up
/// time in use; 0 for none),
/// `rise=S` (window of the recent slope that caps the trend, seconds, 0 for none),
/// `backlog=K` (at most K replicas beyond the demand's need for the backlog, a whole number),
/// `settle=on|off|steady|band|stay` (once the ready replicas cover the demand, the backlog drains
/// on them and starting replicas beyond the need are withdrawn at once; `steady` and `band`
/// steady that, and `stay` keeps a need one above the ready ones at them, see [`Settle`]),
/// `hold=K` (start-up times a passed burst's capacity is held, 0 for none), `onset=S`
/// (seconds over which the in-flight growth is also measured, 0 for none),
/// `breach=any|queued` (whether a TTFT breach lowers the capacity estimate with no queue),
/// `startups=ask|each` (the start-up time learned per ask or per replica), `attainment=F`
/// (0 < F <= 1: the share of requests within the SLO the capacity estimate holds to, instead
/// of the P95 test), `shares=both|ttft` (which latencies `attainment` reads as a share),
/// `hindsight=advice|floor` (whether a static fleet found to beat ours becomes a floor),
/// `trendcap=off|pattern` (whether a repeating pattern bounds the rising trend),
/// `troughs=floor|pattern` (whether the hindsight floor yields to a repeating pattern's
/// troughs), `ahead=K` (1 <= K <= 10: start-up times ahead a trough must last for
/// `troughs=pattern`), `floorsize=largest|latest` (which named fleet the hindsight floor
/// holds), `named=at99|cheapest` (which fleet a comparison names), `holdtroughs=keep|pattern`
/// (whether a held burst's capacity yields to a pattern's trough), `scalein=any|steady`
/// (whether a due scale-in waits while in-flight requests grow), `periods=F` (1.2 <= F <= 4:
/// periods of history a repeating pattern must span before it is found),
/// `ceiling=off|seen|breach|history|at99` (whether, and while what holds, the hindsight's
/// fleet also caps the need within the demand it was judged on),
/// `tail=p95|lighter` (whether a TTFT tail that light load shows too counts against capacity
/// and as a guide trigger), `probe=F` (0 <= F <= 0.1: how much the capacity estimate rises
/// per comfortable decision), `saturated=F` (0 <= F <= 1: the share of a saturated fleet's
/// throughput per replica the capacity estimate is at least) and `served=finished|completed`
/// (whether the capacity estimate counts aborted requests as served), among others (the
/// error message lists them all).
pub fn parse_policy(value: &str) -> Result<Option<ProactiveConfig>, String> {
    let mut parts = value
        .split([';', ' ', '\t'])
        .map(str::trim)
        .filter(|p| !p.is_empty());
    let expected = "expected `guide`, or `proactive` optionally followed by `; utilization=F` (0 < F <= 1), `; capacity=R` (requests per second per replica), `; startup=S` (seconds), `; peak=S` (seconds, 0 for no peak floor), `; drain=S` (seconds, 0 to ignore the backlog), `; trend=W` (0 <= W <= 1), `; backstop=always|growing`, `; periodic=on|off`, `; release=S` (seconds, 0 for none), `; rise=S` (seconds, 0 for none), `; backlog=K` (at most K replicas beyond the demand's need for the backlog, a whole number >= 0), `; settle=on|off|steady|band|stay`, `; hold=K` (start-up times a passed burst's capacity is held, 0 <= K <= 100), `; onset=S` (seconds over which the in-flight growth is also measured, 0 for none), `; breach=any|queued` (whether a TTFT breach lowers the capacity estimate without a queue), `; startups=ask|each` (the start-up time learned per ask or per replica), `; attainment=F` (0 < F <= 1: the share of requests within the SLO the capacity estimate holds to; unset: P95 within the SLO), `; shares=both|ttft` (whether `attainment` reads inter-token gaps as a share too, or first tokens only), `; hindsight=advice|floor` (whether a static fleet the policy's hindsight finds beating ours becomes a floor), `; trendcap=off|pattern` (whether a repeating pattern bounds the rising trend), `; troughs=floor|pattern` (whether the hindsight floor is set aside in a repeating pattern's troughs), `; ahead=K` (1 <= K <= 10: start-up times ahead a trough must last for `troughs=pattern`), `; floorsize=largest|latest` (which fleet the hindsight floor holds when comparisons name different ones), `; named=at99|cheapest` (whether a comparison names the fleet serving 99 % or the smallest that beats ours), `; holdtroughs=keep|pattern` (whether a held burst's capacity is set aside in a repeating pattern's troughs), `; scalein=any|steady` (whether a due scale-in waits while in-flight requests grow), `; peakat=need|full|limit` (whether the peak floor holds its peak at the target utilisation, at the capacity estimate, or at what a saturated fleet completed per replica), `; peakwhen=any|halved` (whether the peak floor holds whenever it needs more, or only once the demand has fallen below half its peak), `; peaks=any|dropped` (whether the peak floor holds the highest minute of demand, or only one the demand fell from to below half within ten minutes), `; breachwhile=queued|growing` (whether a breach lowers the capacity estimate while a queue drains, or only while the in-flight requests do not shrink), `; periods=F` (1.2 <= F <= 4: periods of history a repeating pattern must span before it is found), `; early=F` (1.2 <= F <= 4, or 0 for none: periods of history a pattern correlating at least 0.9 over at least 20 minutes of overlap must span to be found sooner), `; levels=F` (0 <= F <= 1, 0 for none: the share of the demand's variation over the overlap a pattern's levels one period earlier must explain), `; ceiling=off|seen|breach|history|at99` (whether the hindsight's fleet also caps the need within the demand it was judged on: `seen` while the fleet is within its SLOs with no queue and no trigger, `breach` through those too, `history` through those and whatever the capacity estimate now, `at99` as `history` for a fleet found serving 99 % of the demand and as `seen` for another), `; tail=p95|lighter` (whether a TTFT tail that light load shows too counts against capacity and as a guide trigger), `; probe=F` (0 <= F <= 0.1: how much the capacity estimate rises per decision while the fleet is comfortable), `; probecap=K` (1 <= K <= 4, or 0 for none: the most the probe raises the capacity estimate to, as a multiple of the most known to be served per replica), `; breachcap=off|probe|estimate` (whether the throughput of a sustained breach bounds the probe, and the capacity estimate too, until more is served within the SLO), `; saturated=F` (0 <= F <= 1: the share of a saturated fleet's throughput per replica the capacity estimate is at least, 0 for none), `; served=finished|completed` (whether the capacity estimate counts aborted requests as served), `; itltest=p95|mean|request` (whether the capacity estimate tests the inter-token gaps' P95, their mean, or the P95 of each request's own time per output token), `; backstopitl=p95|test` (whether the guide's ITL trigger reads the gaps' P95 or what `itltest` names), `; saturation=window|queued` (whether a saturated fleet's throughput counts once the queue has lasted the rate window, or as soon as requests queue), `; untested=K` (1 <= K <= 20, or 0 for none: the most replicas a capacity estimate no breach or saturated fleet has tested asks for, as a multiple of the ready ones), `; breached=F` (0 <= F <= 1: the share of a sustained breach's throughput per replica above the capacity estimate that the estimate is raised to, 0 for none), `; breachedif=always|untested|above|light` (whether `breached` raises the estimate whenever a breach is above it or there is none, only at the breach that first tests it, only above an estimate that exists, or only at the breach that first tests an estimate that exists), `; inherit=estimate|verified` (whether an inherited record starts the capacity estimate at the other pod's last estimate, or at no more than the most it knew served), `; floorat=named|estimate` (whether the hindsight floor holds the fleet its comparison named, or no more than carry what that fleet carried at the estimate it was named at, at the estimate now), `; troughnow=any|below` (whether a repeating pattern's trough sets the floors aside whatever the demand now, or only while the demand now is below the pattern's mean), `; hindsightat=estimate|limit|need` (whether the hindsight's fluid model reads a replica's capacity at the estimate, at what a saturated fleet completed per replica, or at the estimate at the target utilisation), `; arrivals=rate|count|history` (whether the demand counts the fleet's finished requests as the sum of the pods' rates, as the fleet's count over the rate window's span, or as the rate for the need now and the count for the demand history), `; ramp=recent|halves` (whether the rising trend is at most the slope over the last `rise` seconds, or the smaller of the slopes over their two halves), `; trendreach=horizon|history` (whether the rising trend is carried over the whole start-up horizon, or over no more of it than the demand history there is), `; floorlapse=S` (seconds, 0 for never: how long the demand may stay within what `lapseif` asks before the hindsight floor is set aside), `; lapseif=fewer|peak` (whether `floorlapse` lapses a floor once the demand stayed within one replica fewer, or below half the peak of the history that named it), `; lapsegap=F` (0 <= F <= 10, 0 for none: a floor lapses only once no minute reached half its peak for F times the longest stretch between two that did), `; lapsegapmax=S` (0 <= S <= 86400 seconds, 0 for any: the longest stretch between bursts `lapsegap` counts), `; missprice=P` (0 <= P <= 1000000 GPU-seconds per missed request, 0 for none: the hindsight floor is set aside once what it held beyond the need since the demand last needed it exceeds P times the requests its fleet would have served beyond ours), `; backstopstep=K` (a whole number 0 <= K <= 20, 0 for the guide's step: the most replicas the guide's backstop adds in one step while the demand's need is within the target), `; oursby=fluid|counted` (whether the hindsight judges ours' share of the demand by its fluid model, or by the lower of that and what the engines counted: aborted requests, and first tokens over the TTFT SLO or requests over the ITL SLO per output token, whichever are more), `; confirm=S` (0 <= S <= 600 seconds, 0 for none: how long the need must stay above the target before a step of one replica is taken), `; breachload=F` (0 <= F <= 1, 0 for any load: the share of the capacity estimate the fleet must serve per replica for a sustained breach to lower it) and `; period=best|fundamental|divisor` (whether a repeating pattern's period is the lag that correlates best, the shortest within 0.05 of it that is a period itself, or such a lag the best is two or more times)";
    match parts.next() {
        Some("guide") => {
            if parts.next().is_some() {
                return Err(format!("`guide` takes no settings; {expected}"));
            }
            Ok(None)
        }
        Some("proactive") => {
            let mut c = ProactiveConfig::default();
            for part in parts {
                let (k, v) = part
                    .split_once('=')
                    .ok_or_else(|| format!("{part:?} is not KEY=VALUE; {expected}"))?;
                let (k, v) = (k.trim(), v.trim());
                // A setting with two values: true for the first.
                let two = |yes: &str, no: &str| {
                    if v == yes {
                        Ok(true)
                    } else if v == no {
                        Ok(false)
                    } else {
                        Err(format!("{k}={v:?} is not `{yes}` or `{no}`; {expected}"))
                    }
                };
                // The settings with two values: the field, and the value that sets it.
                let two_valued = match k {
                    "periodic" => Some((&mut c.periodic, "on", "off")),
                    "breach" => Some((&mut c.breach_needs_queue, "queued", "any")),
                    "backstop" => Some((&mut c.backstop_always, "always", "growing")),
                    "shares" => Some((&mut c.attainment_shares_itl, "both", "ttft")),
                    "startups" => Some((&mut c.startup_each, "each", "ask")),
                    "hindsight" => Some((&mut c.hindsight_floor, "floor", "advice")),
                    "trendcap" => Some((&mut c.trend_capped_by_pattern, "pattern", "off")),
                    "troughs" => Some((&mut c.floor_yields_to_troughs, "pattern", "floor")),
                    "floorsize" => Some((&mut c.floor_latest, "latest", "largest")),
                    "named" => Some((&mut c.name_cheapest, "cheapest", "at99")),
                    "holdtroughs" => Some((&mut c.hold_yields_to_troughs, "pattern", "keep")),
                    "scalein" => Some((&mut c.scale_in_steady, "steady", "any")),
                    "peakwhen" => Some((&mut c.peak_when_halved, "halved", "any")),
                    "peaks" => Some((&mut c.peak_dropped_only, "dropped", "any")),
                    "breachwhile" => Some((&mut c.breach_while_growing, "growing", "queued")),
                    "tail" => Some((&mut c.tail_lighter, "lighter", "p95")),
                    "served" => Some((&mut c.served_completed, "completed", "finished")),
                    "backstopitl" => Some((&mut c.backstop_itl_test, "test", "p95")),
                    "saturation" => Some((&mut c.saturation_queued, "queued", "window")),
                    "inherit" => Some((&mut c.inherit_verified, "verified", "estimate")),
                    "floorat" => Some((&mut c.floor_at_estimate, "estimate", "named")),
                    "troughnow" => Some((&mut c.trough_needs_low_now, "below", "any")),
                    "ramp" => Some((&mut c.ramp_in_halves, "halves", "recent")),
                    "trendreach" => Some((&mut c.trend_reach_history, "history", "horizon")),
                    "lapseif" => Some((&mut c.lapse_below_peak, "peak", "fewer")),
                    "oursby" => Some((&mut c.ours_counted, "counted", "fluid")),
                    _ => None,
                };
                if let Some((field, yes, no)) = two_valued {
                    *field = two(yes, no)?;
                    continue;
                }
                // The settings with one of several named values.
                match k {
                    "peakat" => {
                        c.peak_at = one_of(k, v, &PeakAt::ALL, PeakAt::as_str, expected)?;
                        continue;
                    }
                    "hindsightat" => {
                        c.hindsight_at =
                            one_of(k, v, &HindsightAt::ALL, HindsightAt::as_str, expected)?;
                        continue;
                    }
                    "period" => {
                        c.period_pick =
                            one_of(k, v, &PeriodPick::ALL, PeriodPick::as_str, expected)?;
                        continue;
                    }
                    "arrivals" => {
                        c.arrivals = one_of(k, v, &Arrivals::ALL, Arrivals::as_str, expected)?;
                        continue;
                    }
                    "breachedif" => {
                        c.breached_if =
                            one_of(k, v, &BreachLesson::ALL, BreachLesson::as_str, expected)?;
                        continue;
                    }
                    "itltest" => {
                        c.itl_test = one_of(k, v, &ItlTest::ALL, ItlTest::as_str, expected)?;
                        continue;
                    }
                    "breachcap" => {
                        c.breach_cap = one_of(k, v, &BreachCap::ALL, BreachCap::as_str, expected)?;
                        continue;
                    }
                    "ceiling" => {
                        c.ceiling = one_of(k, v, &Ceiling::ALL, Ceiling::as_str, expected)?;
                        continue;
                    }
                    "settle" => {
                        let all = [
                            Settle::On,
                            Settle::Off,
                            Settle::Steady,
                            Settle::Band,
                            Settle::Stay,
                        ];
                        c.settle = one_of(k, v, &all, Settle::as_str, expected)?;
                        continue;
                    }
                    _ => {}
                }
                if k == "backstopstep" {
                    c.backstop_step =
                        v.parse::<u32>().ok().filter(|k| *k <= 20).ok_or_else(|| {
                            format!(
                                "backstopstep={v:?} is not a whole number from 0 to 20; {expected}"
                            )
                        })?;
                    continue;
                }
                if k == "backlog" {
                    c.backlog_replicas = Some(
                        v.parse::<u32>()
                            .ok()
                            .filter(|k| *k <= 1000)
                            .ok_or_else(|| {
                                format!(
                                    "backlog={v:?} is not a whole number from 0 to 1000; {expected}"
                                )
                            })?,
                    );
                    continue;
                }
                let zero_ok = matches!(
                    k,
                    "peak"
                        | "drain"
                        | "trend"
                        | "release"
                        | "rise"
                        | "hold"
                        | "onset"
                        | "probe"
                        | "probecap"
                        | "saturated"
                        | "untested"
                        | "breached"
                        | "floorlapse"
                        | "lapsegap"
                        | "lapsegapmax"
                        | "confirm"
                        | "breachload"
                        | "missprice"
                        | "early"
                        | "levels"
                );
                let x: f64 = v
                    .parse()
                    .ok()
                    .filter(|x: &f64| x.is_finite() && (*x > 0.0 || (zero_ok && *x == 0.0)))
                    .ok_or_else(|| {
                        let what = if zero_ok {
                            "a number >= 0"
                        } else {
                            "a positive number"
                        };
                        format!("{k}={v:?} is not {what}; {expected}")
                    })?;
                match k {
                    "utilization" if x <= 1.0 => c.target_utilization = x,
                    "capacity" => c.capacity_per_replica = Some(x),
                    "startup" if x <= 86_400.0 => c.startup_seconds = Some(x),
                    "peak" if x <= 86_400.0 => c.peak_window_seconds = x,
                    "drain" if x <= 86_400.0 => c.drain_seconds = x,
                    "trend" if x <= 1.0 => c.trend_weight = x,
                    "release" if x <= 86_400.0 => c.release_seconds = x,
                    "rise" if x <= 86_400.0 => c.rise_seconds = x,
                    "hold" if x <= 100.0 => c.hold_startups = x,
                    "onset" if x <= 3_600.0 => c.onset_seconds = x,
                    "attainment" if x <= 1.0 => c.attainment = Some(x),
                    "probe" if x <= 0.1 => c.probe = x,
                    "probecap" if x == 0.0 || (1.0..=4.0).contains(&x) => c.probe_cap = x,
                    "saturated" if x <= 1.0 => c.saturated = x,
                    "untested" if x == 0.0 || (1.0..=20.0).contains(&x) => c.untested_bound = x,
                    "breached" if x <= 1.0 => c.breached = x,
                    "floorlapse" if x <= 86_400.0 => c.floor_lapse_seconds = x,
                    "lapsegap" if x <= 10.0 => c.lapse_gap_factor = x,
                    "lapsegapmax" if x <= 86_400.0 => c.lapse_gap_max_seconds = x,
                    "confirm" if x <= 600.0 => c.confirm_seconds = x,
                    "breachload" if x <= 1.0 => c.breach_load = x,
                    "missprice" if x <= 1_000_000.0 => c.miss_price = x,
                    "ahead" if (1.0..=10.0).contains(&x) => c.trough_ahead_startups = x,
                    "periods" if forecast::PATTERN_PERIODS.contains(&x) => c.pattern_periods = x,
                    "early" if x == 0.0 || forecast::PATTERN_PERIODS.contains(&x) => {
                        c.pattern_early = x
                    }
                    "levels" if forecast::PATTERN_LEVELS.contains(&x) => c.pattern_levels = x,
                    _ => {
                        return Err(format!(
                            "{part:?}: unknown setting or out of range; {expected}"
                        ));
                    }
                }
            }
            Ok(Some(c))
        }
        _ => Err(expected.to_owned()),
    }
}

/// The `capacity=R` setting for a measured capacity of one replica (requests per second within
/// the SLO), as [`parse_policy`] reads it back: four significant digits however small, since a
/// fixed number of decimals would write a slow engine's capacity as 0, which it refuses.
pub fn capacity_setting(capacity_rps: f64) -> String {
    let x = capacity_rps;
    if !(x.is_finite() && x > 0.0) {
        return format!("capacity={x}");
    }
    let decimals = (3 - x.log10().floor() as i32).max(0) as usize;
    format!("capacity={x:.decimals$}")
}

/// The proactive policy of one ScaledObject: its settings and what it has learned.
#[derive(Debug, Clone)]
pub struct Proactive {
    config: ProactiveConfig,
    demand: DemandTracker,
    /// The highest demand per minute over the peak floor's window.
    floor: PeakFloor,
    /// The highest demand by minute over the last `floorlapse` seconds (kept only under it),
    /// and since when this pod has recorded it: a floor lapses only once the whole window has
    /// been seen, so a pod that has just started (or inherited a floor) holds it meanwhile.
    lapse_demand: PeakFloor,
    lapse_seen_since: Option<Duration>,
    /// Under `missprice=P`: the replica-seconds the hindsight floor has held beyond the need
    /// since the demand last needed it, and when that was last added to.
    floor_rent: f64,
    floor_rent_at: Option<Duration>,
    /// Demand by minute, for a pattern that repeats.
    recurrence: Recurrence,
    capacity: CapacityEstimate,
    /// The oldest unanswered ask: when the level rose, and to what.
    pending_ask: Option<(Duration, u32)>,
    /// The start-up time learned from answered asks, seconds.
    startup_learned: Option<f64>,
    /// The learned start-up time came from an earlier pod and no ask has been seen since.
    startup_inherited: bool,
    /// Seconds of decisions with a stable fleet serving load, an inherited history included.
    observed_seconds: f64,
    /// The last decision that counted towards `observed_seconds`.
    observed_at: Option<Duration>,
    /// Under `startups=each`: when each replica still starting was asked for, oldest first.
    asks: VecDeque<Duration>,
    /// The ready replicas at the last decision.
    last_ready: Option<u32>,
    /// Replica start-ups learned from under `startups=each`.
    startups_seen: u32,
    /// Needs at the horizon over the calm period: (when, replicas).
    needs: VecDeque<(Duration, u32)>,
    /// The demand's own needs (without the backlog) over the hold (`hold=K` start-ups).
    own_needs: VecDeque<(Duration, u32)>,
    /// Ready replicas over the rate window: (when, ready).
    ready_seen: VecDeque<(Duration, u32)>,
    /// Since when the need has stayed below the level with no trigger.
    below_since: Option<Duration>,
    /// The last scale-in.
    last_down: Option<Duration>,
    /// Since when a P95 latency has stayed over its SLO.
    breach_since: Option<Duration>,
    /// Since when requests have waited beyond one per ready replica.
    queued_since: Option<Duration>,
    /// Under `tail=lighter`: the share of first tokens within the SLO at light load (a running
    /// mean), and when it last moved.
    light_share: Option<(f64, Duration)>,
    /// The last decision that left the backlog to the ready replicas (`settle`).
    settled_at: Option<Duration>,
    /// What the guide's backstop last asked for: the level, the trigger, and the last time its
    /// breach was seen (fired, stabilising, rate-limited, held for starting replicas or at
    /// max). Starting capacity is not withdrawn below that level while the breach is recent.
    backstop: Option<BackstopAsk>,
    /// The target the need has been above, and since when (`confirm=S`); a new target starts
    /// the wait again.
    need_above_since: Option<(u32, Duration)>,
    /// The demand, ready and held replicas per minute over the last day, and what a static
    /// fleet would have done with that demand (recomputed once a minute).
    hindsight: Hindsight,
    comparison: Option<StaticComparison>,
    /// Under `hindsight=floor`: the static fleet the comparison last found beating ours (the
    /// largest found within the last day), held as a floor.
    static_floor: Option<StaticFloor>,
    /// An earlier pod's hindsight floor, inherited and not yet taken up by a decision.
    inherited_floor: Option<PersistedFloor>,
    /// The time of the last decision.
    last_decided: Duration,
    /// What the demand history's clock (the peak floor's, the patterns' and the hindsight's)
    /// runs ahead of the decisions' by: zero, unless an earlier pod's history was put behind
    /// this one's first minute (whole minutes, so both clocks' minutes begin together).
    history_ahead: Duration,
}

/// A static fleet the hindsight found beating ours, kept as a floor (`hindsight=floor`).
#[derive(Debug, Clone, Copy)]
struct StaticFloor {
    /// The fleet, as the comparison that found it read it.
    fleet: StaticFleet,
    /// Ours over the same history: share of the demand served, replica-hours, minutes.
    ours_served_percent: f64,
    ours_replica_hours: f64,
    minutes: u32,
    /// The highest demand of the history that named it, requests per second.
    peak_demand: f64,
    /// The capacity estimate the comparison named the fleet at (NaN: not known).
    capacity: f64,
    /// The requests the named fleet would have served beyond ours over the history that named
    /// it, by the comparison (its fluid model; ours, under `oursby=counted`, by the lower of
    /// that and the engines' count; NaN: not known, as for a floor inherited from a record
    /// written before it was kept).
    served_beyond: f64,
    /// When a comparison last found a static fleet beating ours (for an inherited floor: when
    /// this policy took it up).
    seen: Duration,
    /// For a floor an earlier pod held: how long before `seen` its comparison found it.
    earlier: Duration,
}

impl StaticFloor {
    /// How long ago a comparison last found it, an earlier pod's time included.
    fn age(&self, now: Duration) -> Duration {
        now.saturating_sub(self.seen).saturating_add(self.earlier)
    }

    /// The replicas it holds at the capacity estimate `cap`: the named fleet, or under
    /// `floorat=estimate` no more than carry what it carried at the estimate it was named at.
    fn replicas_at(&self, cap: f64, at_estimate: bool) -> u32 {
        let k = self.fleet.replicas;
        if !(at_estimate && self.capacity.is_finite() && self.capacity > 0.0 && cap > 0.0) {
            return k;
        }
        let carried = f64::from(k) * self.capacity;
        let at_now = (carried / cap - 1e-9).ceil().max(1.0);
        k.min(at_now as u32)
    }

    fn kept(&self, now: Duration) -> PersistedFloor {
        PersistedFloor {
            replicas: self.fleet.replicas,
            served_percent: self.fleet.served_percent,
            replica_hours: self.fleet.replica_hours,
            ours_served_percent: self.ours_served_percent,
            ours_replica_hours: self.ours_replica_hours,
            minutes: self.minutes,
            peak_demand: self.peak_demand,
            age_seconds: self.age(now).as_secs_f64(),
            capacity_per_replica: Some(self.capacity).filter(|c| c.is_finite() && *c > 0.0),
            served_beyond_requests: Some(self.served_beyond).filter(|r| r.is_finite() && *r >= 0.0),
        }
    }

    fn taken_up(p: &PersistedFloor, now: Duration) -> Self {
        Self {
            fleet: StaticFleet {
                replicas: p.replicas,
                served_percent: p.served_percent,
                replica_hours: p.replica_hours,
            },
            ours_served_percent: p.ours_served_percent,
            ours_replica_hours: p.ours_replica_hours,
            minutes: p.minutes,
            peak_demand: p.peak_demand,
            capacity: p.capacity_per_replica.unwrap_or(f64::NAN),
            served_beyond: p
                .served_beyond_requests
                .filter(|r| r.is_finite() && *r >= 0.0)
                .unwrap_or(f64::NAN),
            seen: now,
            earlier: Duration::from_secs_f64(p.age_seconds),
        }
    }
}

/// A level the guide's backstop raised, kept while its breach lasts.
#[derive(Debug, Clone, Copy)]
struct BackstopAsk {
    level: u32,
    reason: Reason,
    seen: Duration,
}

impl Proactive {
    /// A fresh policy with these settings.
    pub fn new(config: ProactiveConfig) -> Self {
        Self {
            capacity: CapacityEstimate::with_prior(config.capacity_per_replica)
                .probing(config.probe)
                .probing_at_most(config.probe_cap)
                .bounded_by_breaches(config.breach_cap)
                .breaching(config.breached)
                .breaching_if(config.breached_if)
                .saturating(config.saturated)
                .lowering_at_load(config.breach_load),
            demand: DemandTracker::with_onset(Duration::from_secs_f64(config.onset_seconds)),
            recurrence: Recurrence::spanning(config.pattern_periods)
                .picking(config.period_pick)
                .early(config.pattern_early)
                .levels(config.pattern_levels),
            config,
            floor: PeakFloor::default(),
            lapse_demand: PeakFloor::default(),
            lapse_seen_since: None,
            floor_rent: 0.0,
            floor_rent_at: None,
            pending_ask: None,
            startup_learned: None,
            startup_inherited: false,
            observed_seconds: 0.0,
            observed_at: None,
            asks: VecDeque::new(),
            last_ready: None,
            startups_seen: 0,
            needs: VecDeque::new(),
            own_needs: VecDeque::new(),
            ready_seen: VecDeque::new(),
            below_since: None,
            last_down: None,
            breach_since: None,
            queued_since: None,
            light_share: None,
            settled_at: None,
            backstop: None,
            need_above_since: None,
            hindsight: Hindsight::default(),
            comparison: None,
            static_floor: None,
            inherited_floor: None,
            last_decided: Duration::ZERO,
            history_ahead: Duration::ZERO,
        }
    }

    /// Ours against static fleets over the last day, by the fluid model at the current capacity
    /// estimate ([`hindsight`]); recomputed once a minute, `None` before half an hour.
    pub fn hindsight(&self) -> Option<&StaticComparison> {
        self.comparison.as_ref()
    }

    /// The current capacity estimate (requests per second per replica within the SLO).
    pub fn capacity(&self) -> Option<f64> {
        self.capacity.value()
    }

    /// What the next scaler pod serving this trigger may start from ([`Self::inherit`]).
    pub fn persisted(&self) -> Persisted {
        Persisted {
            capacity_per_replica: self.capacity.value(),
            capacity_verified: self.capacity.verified(),
            startup_seconds: self
                .startup_learned
                .filter(|_| self.config.startup_seconds.is_none()),
            observed_seconds: self.observed_seconds,
            hindsight_floor: self
                .static_floor
                .map(|f| f.kept(self.last_decided))
                .or(self.inherited_floor),
            light_share: self.light_share.map(|(share, _)| share),
            demand_history: self.hindsight.kept(self.history_now(self.last_decided)),
        }
    }

    /// Starts from what another scaler pod learned for the same trigger (an earlier pod's, at
    /// start-up, or a running peer's with a longer history): its capacity estimate
    /// (observations move it as any estimate), its learned start-up time unless `startup=S`
    /// sets one (later asks blend in as they do into a learned one), and the history they rest
    /// on. Values that are not finite and positive are ignored.
    pub fn inherit(&mut self, p: &Persisted) {
        if let Some(c) = p.capacity_per_replica {
            // Under `inherit=verified`, no higher than the most the other pod knew served.
            let start = match p.capacity_verified {
                Some(v) if self.config.inherit_verified && v.is_finite() && v > 0.0 => c.min(v),
                _ => c,
            };
            self.capacity.inherit(start, p.capacity_verified);
        }
        if p.observed_seconds.is_finite() && p.observed_seconds > 0.0 {
            self.observed_seconds = p.observed_seconds;
        }
        // Light load's share of first tokens within the SLO, which a pod restarted under load
        // would otherwise not see until the load is light again.
        if self.config.tail_lighter
            && let Some(share) = p.light_share.filter(|x| (0.0..=1.0).contains(x))
        {
            self.light_share = Some((share, self.last_decided));
        }
        // The next decision takes the floor up, for what is left of its day.
        if self.config.hindsight_floor
            && let Some(f) = p.hindsight_floor.filter(PersistedFloor::holds)
        {
            self.inherited_floor = Some(f);
        }
        if self.config.startup_seconds.is_none()
            && let Some(s) = p.startup_seconds.filter(|s| s.is_finite() && *s > 0.0)
        {
            self.startup_learned = Some(s);
            self.startup_inherited = true;
        }
        self.inherit_history(&p.demand_history);
    }

    /// Puts an earlier pod's demand history behind this one's first minute, so the peak
    /// floor, the patterns and the hindsight read it as the minutes before their own. Only a
    /// pod with no history of its own takes it (a running pod that adopts a peer's record
    /// keeps its own, which saw the same fleet); entries out of order or unreadable are left
    /// out.
    fn inherit_history(&mut self, kept: &[KeptMinute]) {
        if !self.hindsight.is_empty() {
            return;
        }
        let kept = kept.iter().filter(|m| m.holds());
        let Some(oldest) = kept.clone().map(KeptMinute::seconds_ago).max() else {
            return;
        };
        // Whole minutes ahead, far enough that the oldest minute falls at or after the clock's
        // minute 0.
        self.history_ahead = Duration::from_secs(60 * (u64::from(oldest).div_ceil(60) + 1));
        let now = self.history_now(self.last_decided);
        // The hindsight takes each entry in order or leaves it out; the peak floor and the
        // patterns take the same minutes.
        for m in kept {
            if let Some(minute) = self.hindsight.restore(now, m) {
                let at = Duration::from_secs(60 * minute);
                self.floor.observe(at, f64::from(m.2.max(m.1)));
                self.recurrence.observe(at, f64::from(m.1));
            }
        }
    }

    /// `now` on the demand history's clock.
    fn history_now(&self, now: Duration) -> Duration {
        now.saturating_add(self.history_ahead)
    }

    /// What this policy has learned from its own history: two scaler pods (or one that
    /// restarted) learn separately, and this is what they may disagree on.
    pub fn learned(&self) -> Learned {
        Learned {
            capacity_per_replica: self.capacity.value(),
            capacity_source: if self.capacity.source() == Source::Inherited {
                "inherited"
            } else if self.capacity.learned() {
                "learned"
            } else if self.capacity.value().is_some() {
                "prior"
            } else {
                "none"
            },
            capacity_tested: self.capacity.tested(),
            startup_seconds: self.horizon_seconds(),
            startup_source: if self.config.startup_seconds.is_some() {
                "set"
            } else if self.startup_inherited {
                "inherited"
            } else if self.startup_learned.is_some() {
                "learned"
            } else {
                "default"
            },
            observed_seconds: self.observed_seconds,
        }
    }

    /// Under `tail=lighter`: moves light load's share of first tokens within the SLO when this
    /// decision is at light load (`calm`: a stable fleet with no queue beyond one per ready
    /// replica; each replica serving at most [`LIGHT_LOAD`] of the estimate), and returns the
    /// share below which a TTFT tail counts as a breach when light load's share, less
    /// [`TAIL_MARGIN`], is below the test's own (95 %, or `attainment=F`); `None`: the test's
    /// own.
    fn tail_bar(
        &mut self,
        now: Duration,
        calm: bool,
        per_replica: f64,
        share: Option<f64>,
    ) -> Option<f64> {
        if !self.config.tail_lighter {
            return None;
        }
        let light = calm
            && self
                .capacity
                .value()
                .is_some_and(|c| per_replica <= LIGHT_LOAD * c);
        if light && let Some(x) = share.filter(|x| x.is_finite()) {
            self.light_share = Some(match self.light_share {
                None => (x, now),
                Some((mean, at)) => {
                    let step = now.saturating_sub(at).min(LIGHT_STEP_MAX);
                    let weight = 1.0 - (-step.as_secs_f64() / LIGHT_MEMORY.as_secs_f64()).exp();
                    (mean + weight * (x - mean), now)
                }
            });
        }
        self.light_bar()
    }

    /// Under `tail=lighter`, light load's share less [`TAIL_MARGIN`] when that is below the
    /// test's own share (95 %, or `attainment=F`): the bar a TTFT tail is judged by.
    fn light_bar(&self) -> Option<f64> {
        let own = self.config.attainment.unwrap_or(0.95);
        let bar = self.light_share?.0 - TAIL_MARGIN;
        (self.config.tail_lighter && bar < own).then_some(bar)
    }

    /// Under `backstopitl=test` with `itltest` other than `p95`: what the guide's ITL trigger
    /// reads in place of the gaps' P95, in words and its value (`None` inside: nothing
    /// observed, which the guide reads as calm).
    fn backstop_itl(&self, f: &SignalSet) -> Option<(&'static str, Option<f64>)> {
        let test = self.config.itl_test;
        (self.config.backstop_itl_test && test != ItlTest::P95).then(|| test.read(f))
    }

    /// Under `tail=lighter`, when the P95 TTFT is over its SLO but the share of first tokens
    /// within it is at or above the bar light load sets (as of the last decision): that share
    /// and the bar.
    fn background_tail(&self, signals: &FleetSignals, slo: Option<f64>) -> Option<(f64, f64)> {
        let bar = self.light_bar()?;
        let slo = slo?;
        let p95 = signals.fleet.ttft_seconds.p95?;
        let share = signals.fleet.share_within(Latency::Ttft, slo)?;
        (p95.is_finite() && p95 > slo && share >= bar).then_some((share, bar))
    }

    /// Under `untested=K`, while the capacity estimate has met no replica's limit: the most
    /// replicas it may ask for, K times the `ready` ones and at least one more than them,
    /// within the bounds.
    fn untested_cap(&self, ready: u32, c: &PolicyConfig) -> Option<u32> {
        let k = self.config.untested_bound;
        if k <= 0.0 || self.capacity.tested() {
            return None;
        }
        let times = (k * f64::from(ready)).floor().min(f64::from(u32::MAX)) as u32;
        Some(clamp(times.max(ready.saturating_add(1)), c))
    }

    /// The start-up horizon in use, seconds.
    pub fn horizon_seconds(&self) -> f64 {
        self.config
            .startup_seconds
            .or(self.startup_learned)
            .unwrap_or(DEFAULT_STARTUP_SECONDS)
    }

    /// Decides at `now`: the guide's rules on `state` as a backstop, then the forecast's need.
    pub fn decide(
        &mut self,
        policy: &Policy,
        now: Duration,
        signals: &FleetSignals,
        state: &mut PolicyState,
    ) -> Decision {
        let c = &policy.config;
        let before = state.level;
        self.last_decided = now;
        // Under `tail=lighter`, a P95 TTFT over its SLO that light load shows too is no
        // trigger: the guide's backstop reads the fleet without it.
        let background_tail = self.background_tail(signals, c.ttft_slo_seconds);
        // Under `backstopitl=test`, what the guide's ITL trigger reads in place of the gaps' P95.
        let backstop_itl = self.backstop_itl(&signals.fleet);
        let guide = if background_tail.is_some() || backstop_itl.is_some() {
            let mut read = signals.clone();
            if background_tail.is_some() {
                read.fleet.ttft_seconds.p95 = None;
            }
            if let Some((_, value)) = backstop_itl {
                read.fleet.itl_seconds.p95 = value;
            }
            policy.decide(now, &read, state)
        } else {
            policy.decide(now, signals, state)
        };
        if signals.pods_healthy == 0 {
            return guide;
        }
        let ready = u32::try_from(signals.pods_healthy).unwrap_or(u32::MAX);
        let prev = clamp(before.unwrap_or(guide.desired_replicas), c);
        self.learn_startup(now, ready);

        let w = Windows::new(c.rate_window);
        let f = &signals.fleet;
        let queue = finite(f.queue_depth);
        let in_flight = queue + finite(f.running);
        let finished = f.requests_per_second.map_or(0.0, finite);
        // `arrivals=count|history`: the finished requests over the span the growth is taken
        // over.
        let counted = f
            .finished_window_seconds
            .filter(|span| span.is_finite() && *span > 0.0)
            .filter(|_| self.config.arrivals != Arrivals::Rate)
            .map(|span| finite(f.requests_finished_in_window) / span);
        let live = match self.config.arrivals {
            Arrivals::Count => counted,
            Arrivals::Rate | Arrivals::History => None,
        };
        // No pod has been scraped twice yet (a scaler that has just started, or a fleet whose
        // pods are all new): the finished rate is unknown, not zero. Recorded as zero, it would
        // sit at the head of the demand history and tilt the trend for minutes: a scaler that
        // restarts on a fleet serving 30 req/s would forecast 40 a hundred seconds later. No
        // sample is recorded until the rate is known.
        let rate_known = live.is_some() || f.requests_per_second.is_some();
        if rate_known {
            self.demand
                .observe(now, live.unwrap_or(finished), in_flight, w.rate);
        }
        // What the demand history records: under `arrivals=history` the count in place of the
        // rate, the growth the same.
        let arrivals = self.config.arrivals;
        let recorded = move |demand: f64| match (arrivals, counted) {
            (Arrivals::History, Some(count)) => (demand - finished + count).max(0.0),
            _ => demand,
        };

        // Capacity: throughput per replica that was ready over the rate window.
        self.ready_seen.push_back((now, ready));
        prune(&mut self.ready_seen, now, w.rate);
        let replicas = self.ready_seen.iter().map(|r| r.1).max().unwrap_or(ready);
        // The throughput per replica means something only when the ready replicas stayed the
        // same over the whole rate window: right after replicas arrive, the rate still counts
        // the smaller fleet's work while latency still shows the backlog of the shortage.
        let stable = self.ready_seen.iter().all(|r| r.1 == ready)
            && self
                .ready_seen
                .front()
                .is_some_and(|r| r.0.saturating_add(w.stable_for) <= now);
        // A latency over `slo`: its P95, or under `attainment=F` fewer than F of the window's
        // observations within it.
        let attainment = self.config.attainment;
        // Under `itltest=mean|request` the ITL SLO is tested by that statistic, never a share.
        let test = self.config.itl_test;
        let shares_itl = self.config.attainment_shares_itl && test == ItlTest::P95;
        let (_, itl) = test.read(f);
        let over = |latency: Latency, q: Option<f64>, slo: Option<f64>| {
            let Some(s) = slo else { return false };
            match attainment
                .filter(|_| latency == Latency::Ttft || shares_itl)
                .zip(f.share_within(latency, s))
            {
                Some((a, share)) => share < a,
                None => q.is_some_and(|q| q.is_finite() && q > s),
            }
        };
        let queued = queue > f64::from(ready);
        // What a fleet completed: aborted requests (clients that gave up, often while queued)
        // finish too, but were not served.
        let aborted = aborted_per_second(f).map_or(0.0, finite);
        let completed = (finished - aborted).max(0.0);
        let served = if self.config.served_completed {
            completed
        } else {
            finished
        };
        let per_replica = served / f64::from(replicas.max(1));
        // Under `breach=queued` a TTFT over its SLO with no queue is the prompts' own
        // prefill: it is not a replica at its limit.
        let ttft_counts = !self.config.breach_needs_queue || queued;
        // Read only under `tail=lighter`, the one user of the share here.
        let ttft_share = c
            .ttft_slo_seconds
            .filter(|_| self.config.tail_lighter)
            .and_then(|s| f.share_within(Latency::Ttft, s));
        // Under `tail=lighter`, the bar light load sets, where it is below the test's own.
        let tail_bar = self.tail_bar(now, stable && !queued, per_replica, ttft_share);
        let ttft_over = match (tail_bar, ttft_share) {
            (Some(bar), Some(share)) => share < bar,
            _ => over(Latency::Ttft, f.ttft_seconds.p95, c.ttft_slo_seconds),
        };
        let breached = (ttft_counts && ttft_over) || over(Latency::Itl, itl, c.itl_slo_seconds);
        // A breach says what a replica serves only once it has lasted the whole rate window:
        // at a burst's onset the rate still counts the calm before it.
        let sustained = lasted(&mut self.breach_since, breached, now, w.stable_for);
        // Likewise a queue: one that lasted the whole rate window kept every replica busy.
        // Under `saturation=queued` one that has just formed counts too: the window's rate
        // then still holds the calm before it and reads lower than a replica serves.
        let queue_lasted = lasted(&mut self.queued_since, queued, now, w.stable_for);
        let saturated = ((queue_lasted || (queued && self.config.saturation_queued)) && stable)
            .then(|| completed / f64::from(replicas.max(1)));
        let half = |slo: Option<f64>| slo.map(|s| s / 2.0);
        // Under `tail=lighter`, first tokens are comfortable when as many are within the SLO
        // as at light load.
        let ttft_comfortable = match (tail_bar, ttft_share, self.light_share) {
            (Some(_), Some(share), Some((light, _))) => share >= light,
            _ => !over(Latency::Ttft, f.ttft_seconds.p95, half(c.ttft_slo_seconds)),
        };
        let comfortable = ttft_comfortable && !over(Latency::Itl, itl, half(c.itl_slo_seconds));
        // How long the learning has been observing: the time between consecutive decisions
        // that each saw a stable fleet serving load (a gap of missed cycles counts at most
        // `OBSERVED_GAP`).
        let observing = stable && per_replica > 0.0;
        if let Some(at) = self.observed_at.filter(|_| observing) {
            self.observed_seconds += now.saturating_sub(at).min(OBSERVED_GAP).as_secs_f64();
        }
        self.observed_at = observing.then_some(now);
        self.capacity.observe(Observation {
            per_replica,
            within_slo: stable && !breached && !queued,
            // Latency over the SLO while the in-flight requests shrink and no queue is left
            // is the aftermath of a backlog, not a replica at its limit; under
            // `breachwhile=growing`, so is a queue that drains.
            breached: stable
                && sustained
                && ((queued && !self.config.breach_while_growing) || self.demand.growth() >= 0.0),
            comfortable,
            saturated,
            completed: completed / f64::from(replicas.max(1)),
        });
        let Some(cap) = self.capacity.value() else {
            let mut d = guide;
            d.explanation = format!(
                "{}; proactive: no capacity estimate yet (no prior, nothing served within the SLO), the guide decides",
                d.explanation
            );
            return d;
        };

        // What one replica carries at most (`peakat=limit`, `hindsightat=limit`): the most a
        // saturated fleet completed per replica, where that is above the estimate.
        let carry = self.capacity.limit().map_or(cap, |l| l.max(cap));
        let horizon = Duration::from_secs_f64(self.horizon_seconds());
        let mut fc = self
            .demand
            .forecast(now, horizon, w.trend, c.scale_down_stabilization);
        // A step that has already happened keeps the trend window's slope high for minutes
        // after the demand has levelled off; the slope over the last `rise` seconds says
        // whether it still rises.
        // (A `rise` as long as the trend window, which follows the rate window, changes
        // nothing.)
        // Under `ramp=halves` the rise must show in both halves of those seconds: a step the
        // rate window smoothed into a minute's rise shows in one.
        let mut recent_slope = None;
        let rise = Duration::from_secs_f64(self.config.rise_seconds);
        if !rise.is_zero() && rise < w.trend {
            let (recent, halves) = if self.config.ramp_in_halves {
                let half = rise / 2;
                let older = self.demand.trend_until(half, now.saturating_sub(half));
                let newer = self.demand.trend(now, half);
                (older.min(newer), Some((older, newer)))
            } else {
                (self.demand.trend(now, rise), None)
            };
            if fc.trend > 0.0 && fc.trend - recent > 1e-9 {
                recent_slope = Some((fc.trend, recent, halves));
                fc.trend = recent;
                fc.at_horizon = fc.now + recent.max(0.0) * fc.horizon_seconds;
            }
        }
        // `trendreach=history`: a trend is carried no further ahead than the history it was
        // fitted on.
        let mut reach = None;
        if self.config.trend_reach_history && fc.trend > 0.0 {
            let history = self.demand.history_seconds(now);
            if history < fc.horizon_seconds {
                reach = Some(history);
                fc.at_horizon = fc.now + fc.trend * history;
            }
        }
        fc.at_horizon = fc.now + self.config.trend_weight * (fc.at_horizon - fc.now);
        let per = cap * self.config.target_utilization;
        // The demand history's clock: an earlier pod's minutes, when inherited, come before it.
        let history_now = self.history_now(now);
        let history_demand = recorded(fc.now);
        // The per-minute histories (the patterns and the peak floor here, the lapse and the
        // hindsight below) take no sample either while the finished rate is unknown: the
        // forecast's `now` then reads the samples before (none, at a scaler's first decision),
        // not the fleet.
        if rate_known {
            self.recurrence.observe(history_now, history_demand);
            self.floor.observe(history_now, history_demand);
        }
        let recurring = if self.config.periodic {
            self.recurrence
                .recurring(history_now, horizon.saturating_add(PERIODIC_SLACK))
                .map(|r| (r, replicas_for(r.expected, per, c)))
        } else {
            None
        };
        // `trendcap=pattern`: a burst that repeats levels off where it did one period ago.
        let mut pattern_cap = None;
        if self.config.trend_capped_by_pattern
            && let Some((r, _)) = recurring
        {
            let bound = r.expected.max(fc.now);
            if fc.at_horizon > bound + 1e-9 {
                pattern_cap = Some((fc.at_horizon, bound));
                fc.at_horizon = bound;
            }
        }
        let backlog = if self.config.drain_seconds > 0.0 {
            queue / self.config.drain_seconds
        } else {
            0.0
        };
        // The demand's own need, and with the backlog term: capped at `backlog=K` replicas
        // beyond the demand's need, and dropped once the ready replicas cover the demand
        // (`settle=on`: the backlog then drains on the ready fleet).
        let own_need = replicas_for(fc.at_horizon, per, c);
        let sized_need = replicas_for(fc.at_horizon + backlog, per, c);
        // `settle=steady`: settled a rate window ago or less, a need one replica above the
        // ready ones stays settled.
        let steady = self.config.settle.steady()
            && self
                .settled_at
                .is_some_and(|t| t.saturating_add(w.withdraw_after) >= now)
            && ready.saturating_add(1) >= own_need;
        // `settle=stay`: the ready replicas covered the demand's need a rate window ago or
        // less (under `stay` a decision settles only when they cover it), and the need is one
        // above them: it stays at them.
        let staying = self.config.settle == Settle::Stay
            && sized_need > own_need
            && ready.saturating_add(1) == own_need
            && self
                .settled_at
                .is_some_and(|t| t.saturating_add(w.withdraw_after) >= now);
        let settled =
            self.config.settle.is_on() && sized_need > own_need && (ready >= own_need || steady);
        if settled {
            self.settled_at = Some(now);
        }
        // `hold=K`: the highest need of the demand alone (as it was, without the trend and the
        // backlog) within the last K start-ups, at which a burst's surplus is held.
        let hold = horizon.mul_f64(self.config.hold_startups);
        let held = if hold.is_zero() {
            self.own_needs.clear();
            None
        } else {
            self.own_needs
                .push_back((now, replicas_for(fc.now, per, c)));
            prune(&mut self.own_needs, now, hold);
            self.own_needs.iter().map(|n| n.1).max()
        };
        let capped = self
            .config
            .backlog_replicas
            .map(|k| own_need.saturating_add(k))
            .filter(|cap| sized_need > *cap && !settled && !staying);
        let demand_need = if staying {
            ready
        } else if settled {
            own_need
        } else {
            capped.map_or(sized_need, |cap| clamp(cap, c))
        };
        let window = Duration::from_secs_f64(self.config.peak_window_seconds);
        let floor = if self.config.peak_dropped_only {
            self.floor
                .dropped_peak(history_now, window, PEAK_DROP_WITHIN, fc.now)
        } else {
            self.floor.peak(history_now, window)
        };
        let floor = floor.map(|(peak, age)| {
            let at = match self.config.peak_at {
                PeakAt::Limit => carry,
                PeakAt::Full => cap,
                PeakAt::Need => per,
            };
            (peak, age, replicas_for(peak, at, c))
        });
        // `peakwhen=halved`: a demand still above half its peak is a gradual decline, not a
        // burst's end, and its own need sizes the fleet.
        let peak_unfallen =
            floor.filter(|&(peak, _, _)| self.config.peak_when_halved && fc.now >= 0.5 * peak);
        let floor = floor.filter(|_| peak_unfallen.is_none());
        // `hindsight=floor`: a static fleet found beating ours within the last day.
        // An inherited floor is held as this policy's own, unless its own is as large.
        if let Some(p) = self.inherited_floor.take() {
            let inherited = StaticFloor::taken_up(&p, now);
            self.static_floor = Some(match self.static_floor {
                Some(own) if own.fleet.replicas >= inherited.fleet.replicas => own,
                _ => inherited,
            });
        }
        self.static_floor = self.static_floor.filter(|f| f.age(now) < hindsight::WINDOW);
        // One replica in the hindsight's fluid model, and what the named fleet carries: the
        // estimate; under `hindsightat=limit` a replica's limit; under `hindsightat=need` the
        // estimate at the target utilisation.
        let hindsight_carry = match self.config.hindsight_at {
            HindsightAt::Estimate => cap,
            HindsightAt::Limit => carry,
            HindsightAt::Need => per,
        };
        // The named fleet's size within the bounds, and what the history that named it held.
        let named = self.static_floor.map(|f| {
            (
                clamp(
                    f.replicas_at(hindsight_carry, self.config.floor_at_estimate),
                    c,
                ),
                f.peak_demand,
            )
        });
        let static_floor = named.map(|(k, _)| k);
        // `floorlapse=S`: a floor whose demand has stayed within what one replica fewer carries
        // for S seconds is set aside until the demand needs it again.
        let lapse = Duration::from_secs_f64(self.config.floor_lapse_seconds);
        let lapsed = if lapse.is_zero() {
            None
        } else {
            if rate_known {
                self.lapse_demand.observe(history_now, history_demand);
                self.lapse_seen_since.get_or_insert(history_now);
            }
            let seen_for = self
                .lapse_seen_since
                .map(|since| history_now.saturating_sub(since));
            let recent = self
                .lapse_demand
                .peak(history_now, lapse)
                .filter(|_| seen_for.is_some_and(|seen| seen >= lapse));
            named
                .filter(|&(k, _)| k > c.min_replicas)
                .zip(recent)
                .filter(|&((k, named_peak), (peak, _))| {
                    if self.config.lapse_below_peak {
                        peak < 0.5 * named_peak
                    } else {
                        peak <= f64::from(k - 1) * hindsight_carry
                    }
                })
                .map(|((k, named_peak), (peak, _))| (k, peak, named_peak))
        };
        // `lapsegap=F`: not before F times the longest stretch between the minutes that reached
        // half the named peak has passed since the last of them (`lapsegapmax=S`: a stretch
        // longer than S seconds not counted).
        let mut kept_by_gap = None;
        let mut gap_not_counted = None;
        let lapsed = lapsed.filter(|&(k, _, named_peak)| {
            if self.config.lapse_gap_factor <= 0.0 {
                return true;
            }
            let at_most = (self.config.lapse_gap_max_seconds > 0.0)
                .then(|| Duration::from_secs_f64(self.config.lapse_gap_max_seconds));
            let stretches = |at_most| {
                self.hindsight
                    .stretches_between(0.5 * named_peak, history_now, at_most)
            };
            // The longest stretch and the time since the last burst, while they keep the floor.
            let factor = self.config.lapse_gap_factor;
            let keeps = |stretch: Option<(Option<Duration>, Duration)>| match stretch {
                Some((Some(longest), since)) if since < longest.mul_f64(factor) => {
                    Some((longest, since))
                }
                _ => None,
            };
            if let Some((longest, since)) = keeps(stretches(at_most)) {
                kept_by_gap = Some((k, longest, since, at_most));
                return false;
            }
            // Said in the decision when a stretch the bound left out would have kept it.
            if let Some(bound) = at_most {
                gap_not_counted = keeps(stretches(None)).map(|(longest, _)| (longest, bound));
            }
            true
        });
        let static_floor = static_floor.filter(|_| lapsed.is_none());
        // `missprice=P`: the floor's rent, the replica-seconds it holds beyond what the
        // demand's own need and the peak floor ask, runs until the demand needs it again; once
        // it exceeds P times the requests its fleet would have served beyond ours, the floor is
        // set aside.
        let mut rent = None;
        let mut priced_out = None;
        if self.config.miss_price > 0.0 {
            let since = self.floor_rent_at.replace(now);
            let others = demand_need.max(floor.map_or(0, |f| f.2));
            let served_beyond = self.static_floor.map_or(f64::NAN, |f| f.served_beyond);
            match named {
                Some((k, _)) if k > others && served_beyond.is_finite() => {
                    let budget = self.config.miss_price * served_beyond;
                    // Rent runs while the floor is held: not once its price has set it aside.
                    if static_floor.is_some() && self.floor_rent <= budget {
                        let held = since.map_or(0.0, |t| now.saturating_sub(t).as_secs_f64());
                        self.floor_rent += f64::from(k - others) * held;
                    }
                    if self.floor_rent > budget {
                        priced_out = Some((k, served_beyond));
                    } else {
                        rent = Some((k, budget));
                    }
                }
                _ => self.floor_rent = 0.0,
            }
        }
        let static_floor = static_floor.filter(|_| priced_out.is_none());
        // `troughs=pattern`: in a repeating pattern's trough the pattern sizes the fleet.
        let trough_ahead = horizon
            .mul_f64(self.config.trough_ahead_startups)
            .saturating_add(PERIODIC_SLACK);
        let trough = if self.config.periodic
            && self.config.floor_yields_to_troughs
            && (static_floor.is_some() || floor.is_some())
        {
            self.recurrence
                .recurring(history_now, trough_ahead)
                .filter(|r| r.expected < r.mean)
        } else {
            None
        };
        // `troughnow=below`: a demand now at or above the pattern's mean refutes its trough.
        let trough_refuted =
            trough.filter(|r| self.config.trough_needs_low_now && fc.now >= r.mean);
        let trough = trough.filter(|_| trough_refuted.is_none());
        let static_floor = static_floor.filter(|_| trough.is_none());
        // The peak floor yields to the trough as the hindsight floor does.
        let peak_aside = floor.filter(|_| trough.is_some());
        let floor = floor.filter(|_| trough.is_none());
        // `holdtroughs=pattern`: the hold yields to the trough as the floor does.
        let hold_aside = trough.is_some() && self.config.hold_yields_to_troughs && held.is_some();
        let (hold, held) = if hold_aside {
            (Duration::ZERO, None)
        } else {
            (hold, held)
        };
        let estimated = demand_need
            .max(floor.map_or(0, |f| f.2))
            .max(recurring.map_or(0, |r| r.1));
        // `untested=K`: an estimate that has met no replica's limit sizes from a lower bound.
        let untested = self.untested_cap(ready, c).filter(|b| estimated > *b);
        let uncapped = untested.unwrap_or(estimated).max(static_floor.unwrap_or(0));
        // `ceiling=seen`: within the demand the hindsight's fleet was judged on, that fleet
        // is enough, while the fleet is within the SLO with no queue and no trigger fires (a
        // demand read from a fleet at its limit is what it served, not what arrived: a cap
        // on that would confirm itself).
        // `ceiling=breach` holds through a breach, a queue and a trigger; `ceiling=history`
        // besides asks only that the demand be within the history's; `ceiling=at99` is
        // `history` at a fleet found serving 99 % of the demand and `seen` at another.
        let at99 = self
            .static_floor
            .is_some_and(|f| f.fleet.served_percent >= hindsight::AT99_PERCENT);
        // Whether the cap asks the demand now to be within what the fleet carries at the
        // estimate now.
        let asks_within = match self.config.ceiling {
            Ceiling::History => false,
            Ceiling::At99 => !at99,
            _ => true,
        };
        let ceiling = named.filter(|&(k, peak)| {
            let within = !asks_within || fc.now <= f64::from(k) * hindsight_carry;
            let calm = !breached && !queued && !guide.reason.is_scale_out();
            uncapped > k
                && fc.now <= peak
                && within
                && match self.config.ceiling {
                    Ceiling::Off => false,
                    Ceiling::Seen => calm,
                    Ceiling::Breach | Ceiling::History => true,
                    Ceiling::At99 => at99 || calm,
                }
        });
        let need = ceiling.map_or(uncapped, |(k, _)| k);
        self.needs.push_back((now, need));
        prune(&mut self.needs, now, c.scale_down_stabilization);
        let window_need = self.needs.iter().map(|n| n.1).max().unwrap_or(need);
        // With the backlog left to the ready fleet (`settle=on`), starting capacity beyond
        // the need is withdrawn at once; otherwise the need must stay below it for the
        // withdrawal window.
        let settled_now = settled && need <= ready && self.config.settle != Settle::Band;
        let recent_need = if settled_now {
            need
        } else {
            self.needs
                .iter()
                .filter(|n| n.0.saturating_add(w.withdraw_after) >= now)
                .map(|n| n.1)
                .max()
                .unwrap_or(need)
        };

        let guide_asked = state.level.unwrap_or(prev);
        // `backstopstep=K`: with the need within the target, the backstop's step is at most K.
        let backstop_cap = (self.config.backstop_step > 0 && need <= prev)
            .then(|| prev.saturating_add(self.config.backstop_step))
            .filter(|&cap| guide_asked > cap);
        let guide_level = backstop_cap.unwrap_or(guide_asked);
        let growth = self.demand.growth();
        // The backstop's step does not stack on replicas asked for and still starting: the
        // forecast sized those for the demand and the backlog, and more would not start any
        // sooner (the guide's own rule for latency triggers while replicas start, applied to
        // every trigger here).
        let on_the_way = prev > ready;
        let reactive = guide.reason.is_scale_out()
            && guide_level > prev
            && !on_the_way
            && (self.config.backstop_always || growth > 0.0);
        let quiet = !guide.reason.is_scale_out() && guide.reason != Reason::HoldStabilizing;
        if reactive {
            self.backstop = Some(BackstopAsk {
                level: guide_level,
                reason: guide.reason,
                seen: now,
            });
        } else if let Some(ask) = &mut self.backstop {
            if is_breach(guide.reason) && (self.config.backstop_always || growth > 0.0) {
                ask.seen = now;
            }
        }
        // Capacity the backstop asked for is not withdrawn while its breach is recent (else
        // each reactive step would be undone a decision later and its replicas would restart
        // their start-up).
        self.backstop = self
            .backstop
            .filter(|ask| ask.seen.saturating_add(w.withdraw_after) > now);
        if need < prev && quiet {
            self.below_since.get_or_insert(now);
        } else {
            self.below_since = None;
        }

        let mut level = prev;
        let mut step = String::new();
        let kept = self.need_above_since.filter(|&(target, _)| target == prev);
        self.need_above_since = (need > prev).then_some(kept.unwrap_or((prev, now)));
        let above_since = self.need_above_since.map(|(_, since)| since);
        // `confirm=S`: a step of one replica waits until the need has stayed above the target
        // for S seconds.
        let confirm = Duration::from_secs_f64(self.config.confirm_seconds);
        let unconfirmed = above_since
            .map(|since| now.saturating_sub(since))
            .filter(|&above| need == prev + 1 && prev >= ready && above < confirm);
        if let Some(above) = unconfirmed {
            step = format!(
                "need {need} above the target {prev} for {} of the {} a step of one replica waits (confirm={})",
                super::explain::dur(above),
                super::explain::dur(confirm),
                num(self.config.confirm_seconds),
            );
        } else if need > prev {
            let current = prev.max(ready);
            let want = need.max(current);
            level = if want > current && !hpa_would_act(current, want, c.hpa_tolerance) {
                smallest_acted_scale_up(current, want, c.max_replicas, c.hpa_tolerance)
                    .unwrap_or(prev)
            } else {
                want
            };
            if level > prev {
                step = format!("one step up to the need: target {prev} -> {level}");
            }
        } else if prev > ready
            && recent_need < prev
            // A withdrawal the HPA would ignore only undoes a step widened to its tolerance.
            && hpa_would_act(prev, recent_need.max(ready), c.hpa_tolerance)
        {
            let to = recent_need.max(ready);
            match self.backstop.filter(|ask| ask.level > to) {
                Some(ask) if ask.level >= prev => {
                    step = format!(
                        "{} replicas still starting are kept although the need is {recent_need}: the guide's backstop asked for {} ({}), its breach seen {} ago (kept until {} after)",
                        prev - ready,
                        ask.level,
                        ask.reason.as_str(),
                        super::explain::dur(now.saturating_sub(ask.seen)),
                        super::explain::dur(w.withdraw_after)
                    );
                }
                Some(ask) => {
                    level = ask.level;
                    step = format!(
                        "{} replicas still starting are no longer needed (need {recent_need} for {}), down to the {} the guide's backstop asked for ({}): target {prev} -> {level}",
                        prev - level,
                        super::explain::dur(w.withdraw_after),
                        ask.level,
                        ask.reason.as_str()
                    );
                }
                None if settled_now => {
                    level = to;
                    step = format!(
                        "{} replicas still starting are no longer needed: the {ready} ready cover the demand's need of {own_need} and the backlog drains on them (settle): target {prev} -> {level}",
                        prev - ready,
                    );
                }
                None => {
                    level = to;
                    step = format!(
                        "{} replicas still starting are no longer needed (need {recent_need} for {}): target {prev} -> {level}",
                        prev - ready,
                        super::explain::dur(w.withdraw_after)
                    );
                }
            }
        } else if let Some(since) = self.below_since {
            let last_down = self.last_down;
            let calm_for = now.saturating_sub(since);
            let spaced = self
                .last_down
                .is_none_or(|t| t.saturating_add(c.scale_down_period) <= now);
            // A released replica takes a start-up time to come back, so a release is never
            // sooner than the start-up time in use (learned, set, or the default): a load that
            // returns within that time finds the capacity still there.
            let startup = Duration::from_secs_f64(self.horizon_seconds());
            let set_release = Duration::from_secs_f64(self.config.release_seconds);
            let release = if set_release.is_zero() {
                set_release
            } else {
                set_release.max(startup).max(hold)
            };
            // While the hold lasts, a surplus of at least half the fleet (a burst that has
            // passed) goes no lower than the highest need the demand alone asked for within it.
            let held_at = |to: u32| match held {
                Some(h) if calm_for < hold && to.saturating_mul(2) <= prev => Some(h.max(to)),
                _ => None,
            };
            // `hold=K`, in words: "900 s (3 start-up times of 300 s, hold)".
            let hold_words = || {
                format!(
                    "{} ({} start-up times of {}, hold)",
                    super::explain::dur(hold),
                    num(self.config.hold_startups),
                    super::explain::dur(startup),
                )
            };
            let held_for = |h: u32| {
                format!(
                    "the capacity of a burst that has passed is held at {h}, the highest need of the demand alone within the last {}, for {} more",
                    hold_words(),
                    super::explain::dur(hold.saturating_sub(calm_for)),
                )
            };
            // The highest need over the last `release` seconds, looked up only when a release
            // is set and due.
            let release_need = || {
                self.needs
                    .iter()
                    .filter(|n| n.0.saturating_add(release) >= now)
                    .map(|n| n.1)
                    .max()
                    .unwrap_or(need)
            };
            if calm_for >= c.scale_down_stabilization && spaced && window_need < prev {
                match held_at(window_need) {
                    Some(h) if h >= prev => {
                        step = format!(
                            "need at most {window_need} for {} with no trigger; {}",
                            super::explain::dur(calm_for),
                            held_for(h)
                        );
                    }
                    Some(h) => {
                        level = h;
                        self.last_down = Some(now);
                        step = format!(
                            "need at most {window_need} for {} with no trigger; {}: scale in {prev} -> {level}",
                            super::explain::dur(calm_for),
                            held_for(h)
                        );
                    }
                    None => {
                        level = window_need;
                        self.last_down = Some(now);
                        let after_hold = if held.is_some() && window_need.saturating_mul(2) <= prev
                        {
                            format!(" (a passed burst's capacity, held {})", hold_words())
                        } else {
                            String::new()
                        };
                        step = format!(
                            "need at most {window_need} for {} with no trigger: scale in {prev} -> {level}{after_hold}",
                            super::explain::dur(calm_for)
                        );
                    }
                }
            } else if let Some(release_need) = (!release.is_zero() && calm_for >= release && spaced)
                .then(release_need)
                .filter(|n| n.saturating_mul(2) <= prev)
            {
                // At most half the fleet is needed: the capacity of a burst that has passed
                // (or that arrived after it), released before the whole calm period.
                level = release_need;
                self.last_down = Some(now);
                let startup_source = if self.config.startup_seconds.is_some() {
                    "set"
                } else if self.startup_learned.is_some() {
                    "learned"
                } else {
                    "default"
                };
                let after = if !hold.is_zero() && release == hold && hold > set_release {
                    hold_words()
                } else if set_release >= startup {
                    format!(
                        "{} (release, no shorter than the {startup_source} start-up time of {})",
                        super::explain::dur(release),
                        super::explain::dur(startup),
                    )
                } else {
                    format!(
                        "{}, the {startup_source} start-up time (release of {} is shorter: capacity released sooner would not be back for a load that returns within a start-up)",
                        super::explain::dur(release),
                        super::explain::dur(set_release),
                    )
                };
                step = format!(
                    "need at most {release_need} for {} with no trigger, at most half of the {prev} replicas: the surplus of a burst that has passed is released after {after}, not the calm period of {}: scale in {prev} -> {level}",
                    super::explain::dur(calm_for),
                    super::explain::dur(c.scale_down_stabilization),
                );
            }
            // `scalein=steady`: a load that is returning shows in the in-flight requests
            // before the demand estimate, which still reads the trough.
            if self.config.scale_in_steady && level < prev && growth > 0.0 {
                level = prev;
                self.last_down = last_down;
                step = format!(
                    "in-flight requests growing ({} per s): the scale-in waits until they stop (scalein=steady); due: {step}",
                    num(growth)
                );
            }
        }
        if reactive && guide_level > level {
            level = guide_level;
        }
        let level = clamp(level, c);
        state.level = Some(level);
        // While the rate is unknown the hindsight records nothing: not the demand, and not the
        // misses, which would fall into the minute before (an inherited one, after a restart).
        let closed = rate_known
            && self
                .hindsight
                .observe(history_now, history_demand, ready, level.max(ready));
        if rate_known && let Some(missed) = counted_misses(f, c.ttft_slo_seconds, c.itl_slo_seconds)
        {
            self.hindsight.count_missed(missed);
        }
        if closed {
            self.comparison = self.hindsight.compare_by(
                hindsight_carry,
                c.min_replicas,
                c.max_replicas,
                self.config.ours_counted,
            );
            if self.config.hindsight_floor
                && let Some(cmp) = &self.comparison
                && let Some(by) = if self.config.name_cheapest {
                    cmp.cheapest_beating
                } else {
                    cmp.beaten_by
                }
            {
                // A larger fleet found earlier within the day stays the floor, unless the
                // latest is what counts (`floorsize=latest`).
                let found = StaticFloor {
                    fleet: by,
                    ours_served_percent: cmp.ours_served_percent,
                    ours_replica_hours: cmp.ours_replica_hours,
                    minutes: cmp.minutes,
                    peak_demand: cmp.peak_demand,
                    capacity: cmp.capacity_per_replica,
                    served_beyond: (by.served_percent - cmp.ours_served_percent).max(0.0) / 100.0
                        * self.hindsight.demand_requests(),
                    seen: now,
                    earlier: Duration::ZERO,
                };
                self.static_floor = Some(match self.static_floor {
                    Some(kept)
                        if kept.fleet.replicas > by.replicas && !self.config.floor_latest =>
                    {
                        StaticFloor {
                            seen: now,
                            earlier: Duration::ZERO,
                            peak_demand: kept.peak_demand.max(cmp.peak_demand),
                            ..kept
                        }
                    }
                    _ => found,
                });
            }
        }
        if self.config.startup_each {
            // One entry per replica asked beyond the ready ones: a withdrawal takes back the
            // newest asks, a new ask adds entries stamped now.
            let starting = level.saturating_sub(ready) as usize;
            self.asks.truncate(starting);
            while self.asks.len() < starting {
                self.asks.push_back(now);
            }
        }
        if level <= ready {
            self.pending_ask = None;
        } else if let Some((_, asked)) = &mut self.pending_ask {
            *asked = (*asked).min(level);
        } else if level > prev {
            self.pending_ask = Some((now, level));
        }

        let mut numbers = explain(
            &fc,
            backlog,
            cap,
            &self.capacity,
            self.config.target_utilization,
            demand_need,
            self.startup_learned.is_some() || self.config.startup_seconds.is_some(),
        );
        if !ttft_counts
            && let (Some(q), Some(slo)) = (f.ttft_seconds.p95, c.ttft_slo_seconds)
            && q.is_finite()
            && q > slo
        {
            numbers.push_str(&format!(
                "; P95 TTFT {} s over the SLO of {} s with no queue: the prompts' own prefill, not counted against capacity (breach=queued)",
                num(q),
                num(slo)
            ));
        }
        if let Some((what, value)) = self.backstop_itl(f) {
            numbers.push_str(&format!(
                "; the guide's ITL trigger read {what}, {} s (backstopitl=test)",
                value.map_or_else(|| "none observed".to_owned(), num)
            ));
        }
        if let (Some((share, bar)), Some(q)) = (background_tail, f.ttft_seconds.p95) {
            numbers.push_str(&format!(
                "; P95 TTFT {} s over the SLO is the tail light load shows too ({} within, at least {}): no guide trigger (tail=lighter)",
                num(q),
                pct(share),
                pct(bar)
            ));
        } else if let (Some(bar), Some((light, _))) = (tail_bar, self.light_share) {
            let now_share = ttft_share.map_or_else(|| "no observation".to_owned(), pct);
            numbers.push_str(&format!(
                "; first tokens within the SLO: {now_share}, at light load {}: a TTFT tail counts against capacity below {} (tail=lighter)",
                pct(light),
                pct(bar)
            ));
        }
        if let Some(a) = self.config.attainment {
            let share =
                |latency, slo: Option<f64>| match slo.and_then(|s| f.share_within(latency, s)) {
                    Some(x) => pct(x),
                    None => "no observation".to_owned(),
                };
            let ttft = share(Latency::Ttft, c.ttft_slo_seconds);
            numbers.push_str(&if self.config.attainment_shares_itl {
                format!(
                    "; within the SLO: TTFT {ttft}, ITL {} (capacity holds to {})",
                    share(Latency::Itl, c.itl_slo_seconds),
                    pct(a)
                )
            } else {
                format!(
                    "; first tokens within the SLO: {ttft} (capacity holds to {})",
                    pct(a)
                )
            });
        }
        if staying {
            numbers.push_str(&format!(
                "; backlog not sized for: the demand's need of {own_need} is one replica above the {ready} ready, which covered it within a rate window: staying at them (settle=stay; with the backlog {sized_need} replicas)"
            ));
        } else if settled && ready < own_need {
            numbers.push_str(&format!(
                "; backlog not sized for: the demand's need of {own_need} is one replica above the {ready} ready, within a rate window of settling (settle={}; with the backlog {sized_need} replicas)",
                self.config.settle.as_str()
            ));
        } else if settled {
            numbers.push_str(&format!(
                "; backlog not sized for: the {ready} ready replicas cover the demand's need of {own_need}, the backlog drains on them (settle; with it {sized_need} replicas)"
            ));
        } else if let Some(cap) = capped {
            let beyond = cap - own_need;
            numbers.push_str(&format!(
                "; backlog capped at {beyond} replicas beyond the demand's {own_need} (backlog={beyond}): {sized_need} -> {} replicas",
                clamp(cap, c),
            ));
        }
        if self.config.arrivals == Arrivals::History && (history_demand - fc.now).abs() >= 0.005 {
            numbers.push_str(&format!(
                "; the demand history records {} req/s, the fleet's finished count over the window in place of the pods' rates (arrivals=history)",
                num(history_demand),
            ));
        }
        if let Some((window_slope, recent, halves)) = recent_slope {
            let from = match halves {
                Some((older, newer)) => format!(
                    "the slower half of the last {} ({} then {} req/s per s; ramp=halves)",
                    super::explain::dur(rise),
                    num(older),
                    num(newer),
                ),
                None => format!("the last {}", super::explain::dur(rise)),
            };
            numbers.push_str(&format!(
                "; trend from {from}: {} req/s per s, below the {} slope of {} req/s per s (a step that has happened is not a ramp)",
                num(recent),
                super::explain::dur(w.trend),
                num(window_slope),
            ));
        }
        if !rate_known {
            numbers.push_str(
                "; no demand sample recorded: the fleet's finished requests per second are not known yet (no pod scraped twice)",
            );
        }
        if let Some(history) = reach {
            numbers.push_str(&format!(
                "; trend carried {} ahead, not the {} horizon: the demand history is no longer (trendreach=history)",
                super::explain::dur(Duration::from_secs_f64(history)),
                super::explain::dur(Duration::from_secs_f64(fc.horizon_seconds)),
            ));
        }
        if let Some((peak, age, floor_need)) = floor {
            numbers.push_str(&format!(
                "; floor: peak {} req/s {} ago{} (window {}){} -> {floor_need} replicas",
                num(peak),
                super::explain::dur(Duration::from_secs_f64(age)),
                if self.config.peak_dropped_only {
                    format!(
                        ", which the demand fell from to below half within {} (peaks=dropped)",
                        super::explain::dur(PEAK_DROP_WITHIN)
                    )
                } else {
                    String::new()
                },
                super::explain::dur(Duration::from_secs_f64(self.config.peak_window_seconds)),
                match self.config.peak_at {
                    PeakAt::Limit if carry > cap => format!(
                        " at {} req/s per replica, the most a saturated fleet completed (peakat=limit)",
                        num(carry)
                    ),
                    PeakAt::Limit => " at the full capacity estimate, no saturated fleet having completed more (peakat=limit)"
                        .to_owned(),
                    PeakAt::Full => " at the full capacity estimate (peakat=full)".to_owned(),
                    PeakAt::Need => String::new(),
                },
            ));
        }
        if let Some((peak, _, floor_need)) = peak_unfallen {
            numbers.push_str(&format!(
                "; peak floor of {floor_need} replicas (peak {} req/s) set aside: the demand, {} req/s, is at least half its peak (peakwhen=halved)",
                num(peak),
                num(fc.now),
            ));
        }
        if let Some(r) = trough_refuted {
            numbers.push_str(&format!(
                "; {}, but the demand now, {} req/s, is not: no trough, the floors hold (troughnow=below)",
                trough_words(&r, trough_ahead),
                num(fc.now),
            ));
        }
        if let (Some((peak, _, floor_need)), Some(r)) = (peak_aside, trough) {
            numbers.push_str(&format!(
                "; peak floor of {floor_need} replicas (peak {} req/s) set aside: {} (troughs=pattern)",
                num(peak),
                trough_words(&r, trough_ahead),
            ));
        }
        if let (Some(f), Some(n)) = (self.static_floor, static_floor) {
            numbers.push_str(&format!(
                "; hindsight floor: over {} min a static fleet of {} replicas would have served {} % of the demand for {} replica-hours, ours {} % for {} ({}{}; last found {} ago{}, kept for a day after){} -> {n} replicas",
                f.minutes,
                f.fleet.replicas,
                num(f.fleet.served_percent),
                num(f.fleet.replica_hours),
                num(f.ours_served_percent),
                num(f.ours_replica_hours),
                if self.config.ours_counted {
                    "fluid model, ours by the lower of it and the engines' count, oursby=counted"
                } else {
                    "fluid model"
                },
                match self.config.hindsight_at {
                    HindsightAt::Estimate => String::new(),
                    at => format!(
                        " at {} req/s per replica (hindsightat={})",
                        num(f.capacity),
                        at.as_str()
                    ),
                },
                super::explain::dur(f.age(now)),
                if f.earlier.is_zero() {
                    ""
                } else {
                    " by an earlier pod, whose floor this is"
                },
                if f.replicas_at(hindsight_carry, self.config.floor_at_estimate) < f.fleet.replicas {
                    format!(
                        "; named at {} req/s per replica, what it carried needs fewer at {} now (floorat=estimate)",
                        num(f.capacity),
                        num(hindsight_carry)
                    )
                } else {
                    String::new()
                },
            ));
        }
        if let Some((k, peak, named_peak)) = lapsed {
            // What the demand stayed within, by `lapseif`.
            let within = if self.config.lapse_below_peak {
                format!(
                    "below half the {} req/s of the history that named it (floorlapse={}; lapseif=peak)",
                    num(named_peak),
                    num(self.config.floor_lapse_seconds),
                )
            } else {
                format!(
                    "within what {} replicas carry ({} req/s; floorlapse={})",
                    k - 1,
                    num(f64::from(k - 1) * hindsight_carry),
                    num(self.config.floor_lapse_seconds),
                )
            };
            numbers.push_str(&format!(
                "; hindsight floor of {k} replicas set aside: the demand over the last {} peaked at {} req/s, {within}",
                super::explain::dur(lapse),
                num(peak),
            ));
        }
        if let Some((k, served_beyond)) = priced_out {
            numbers.push_str(&format!(
                "; hindsight floor of {k} replicas set aside: it held {} replica-seconds beyond the need since the demand last needed it, more than {} GPU-seconds per missed request times the {} requests its fleet would have served beyond ours (missprice={})",
                num(self.floor_rent),
                num(self.config.miss_price),
                num(served_beyond),
                num(self.config.miss_price),
            ));
        } else if let Some((k, budget)) = rent.filter(|_| static_floor.is_some()) {
            numbers.push_str(&format!(
                "; hindsight floor of {k} replicas held beyond the need for {} of its {} replica-seconds (missprice={})",
                num(self.floor_rent),
                num(budget),
                num(self.config.miss_price),
            ));
        }
        if let Some((k, longest, since, at_most)) = kept_by_gap {
            numbers.push_str(&format!(
                "; hindsight floor of {k} replicas kept: the demand last reached half the peak of the history that named it {} ago, and its bursts came up to {} apart (lapsegap={}{})",
                super::explain::dur(since),
                super::explain::dur(longest),
                num(self.config.lapse_gap_factor),
                at_most.map_or(String::new(), |bound| format!(
                    ", stretches up to {} counted",
                    super::explain::dur(bound)
                )),
            ));
        }
        if let Some((longest, bound)) = gap_not_counted {
            numbers.push_str(&format!(
                "; its bursts came {} apart, longer than the {} stretch lapsegap counts (lapsegapmax={}), so that stretch is not waited for",
                super::explain::dur(longest),
                super::explain::dur(bound),
                num(self.config.lapse_gap_max_seconds),
            ));
        }
        if let Some(bound) = untested {
            numbers.push_str(&format!(
                "; need capped at {bound} replicas ({} times the {ready} ready, at least one more): the capacity estimate has met no replica's limit yet (no breach or saturated fleet), so it is a lower bound (untested={}; uncapped {estimated} replicas)",
                num(self.config.untested_bound),
                num(self.config.untested_bound),
            ));
        }
        if let Some((k, peak)) = ceiling {
            let carried = if !asks_within {
                String::new()
            } else {
                format!(
                    " within what they serve at the capacity estimate ({} req/s) and",
                    num(f64::from(k) * hindsight_carry)
                )
            };
            numbers.push_str(&format!(
                "; need capped at the hindsight's fleet of {k} replicas: the demand now, {} req/s, is{carried} within the {} req/s of the history they were judged on (ceiling={}; uncapped {uncapped} replicas)",
                num(fc.now),
                num(peak),
                self.config.ceiling.as_str(),
            ));
        }
        if let (Some((k, _)), Some(r)) = (named, trough) {
            numbers.push_str(&format!(
                "; hindsight floor of {k} replicas set aside: {} (troughs=pattern)",
                trough_words(&r, trough_ahead),
            ));
            if hold_aside {
                numbers.push_str(
                    "; the hold of a passed burst set aside with it (holdtroughs=pattern)",
                );
            }
        }
        if let Some((uncapped, bound)) = pattern_cap {
            numbers.push_str(&format!(
                "; forecast capped at {} req/s, the higher of the demand now and the repeating pattern's level one period ago, not the trend's {} req/s (trendcap=pattern)",
                num(bound),
                num(uncapped),
            ));
        }
        if let Some((r, periodic_need)) = recurring {
            numbers.push_str(&format!(
                "; repeats every {} min (correlation {}, levels {}{}{}): {} req/s one period ago over the next {} -> {periodic_need} replicas",
                r.period_minutes,
                num(r.correlation),
                num(r.levels),
                if self.config.pattern_levels > 0.0 {
                    format!(" >= {} (levels)", num(self.config.pattern_levels))
                } else {
                    String::new()
                },
                if r.early {
                    format!(
                        ", found from {} periods of history (early={})",
                        num(self.config.pattern_early),
                        num(self.config.pattern_early)
                    )
                } else {
                    String::new()
                },
                num(r.expected),
                super::explain::dur(horizon.saturating_add(PERIODIC_SLACK)),
            ));
        }
        if guide.reason.is_scale_out() && guide_level > prev && on_the_way {
            numbers.push_str(&format!(
                "; guide trigger ({}) not stacked: {} replicas asked for are still starting",
                guide.reason.as_str(),
                prev - ready
            ));
        } else if guide.reason.is_scale_out() && guide_level > prev && !reactive {
            numbers.push_str(&format!(
                "; guide trigger ({}) not followed: in-flight requests not growing ({} per s), the backlog drains",
                guide.reason.as_str(),
                num(growth)
            ));
        }
        let (reason, explanation) = if reactive && level == guide_level && guide_level > prev {
            let capped = backstop_cap.map_or(String::new(), |cap| {
                format!(
                    "; the backstop steps to {cap}, not the guide's {guide_asked}: the demand's need of {need} is within the target of {prev} (backstopstep={})",
                    self.config.backstop_step
                )
            });
            (
                guide.reason,
                format!("{}{capped}; {numbers}", guide.explanation),
            )
        } else if level < prev && prev <= ready {
            (Reason::ScaleInCalm, format!("{numbers}; {step}"))
        } else if level != prev {
            (Reason::Hold, format!("{numbers}; {step}"))
        } else if level == c.max_replicas && need > level {
            (Reason::AtMax, format!("{numbers}; at max {level}"))
        } else if !step.is_empty() {
            (
                Reason::Hold,
                format!("{numbers}; {step}; holding at {level}"),
            )
        } else {
            (Reason::Hold, format!("{numbers}; holding at {level}"))
        };
        Decision {
            target_replicas: match c.mode {
                Mode::Active => level,
                Mode::Advisory => guide.target_replicas,
            },
            desired_replicas: level,
            reason,
            explanation,
            ..guide
        }
    }

    /// Learns the start-up time: an ask is answered when the ready replicas reach its level;
    /// under `startups=each`, each replica that became ready answers the oldest ask.
    fn learn_startup(&mut self, now: Duration, ready: u32) {
        let arrived = self
            .last_ready
            .map_or(0, |before| ready.saturating_sub(before));
        self.last_ready = Some(ready);
        if self.config.startup_each {
            // Each replica that became ready answers the oldest ask still waiting.
            for _ in 0..arrived {
                let Some(at) = self.asks.pop_front() else {
                    break;
                };
                let sample = now.saturating_sub(at).as_secs_f64();
                self.startups_seen = self.startups_seen.saturating_add(1);
                let weight = 1.0 / f64::from(self.startups_seen.min(STARTUP_EACH_WINDOW));
                let s = self.startup_learned.unwrap_or(sample);
                self.startup_learned = Some(s + weight * (sample - s));
                self.startup_inherited = false;
            }
            return;
        }
        if let Some((at, level)) = self.pending_ask
            && ready >= level
        {
            let sample = now.saturating_sub(at).as_secs_f64();
            self.startup_learned = Some(match self.startup_learned {
                Some(s) => 0.7 * s + 0.3 * sample,
                None => sample,
            });
            self.startup_inherited = false;
            self.pending_ask = None;
        }
    }
}

fn explain(
    fc: &Forecast,
    backlog: f64,
    cap: f64,
    est: &CapacityEstimate,
    u: f64,
    need: u32,
    startup_known: bool,
) -> String {
    let sign = if fc.trend >= 0.0 { "+" } else { "" };
    format!(
        "demand {} req/s{}; forecast {} req/s in {} s ({}; trend {sign}{} req/s per s; peak {} req/s); capacity {} req/s per replica ({}) at {} -> {need} replicas",
        num(fc.now),
        if backlog > 0.0 {
            format!(" + backlog {} req/s", num(backlog))
        } else {
            String::new()
        },
        num(fc.at_horizon),
        num(fc.horizon_seconds),
        if startup_known {
            "start-up observed or set"
        } else {
            "default start-up"
        },
        num(fc.trend),
        num(fc.peak),
        num(cap),
        match est.source() {
            Source::Prior => "prior".to_owned(),
            Source::Inherited => "inherited from another scaler pod".to_owned(),
            Source::Served => "learned".to_owned(),
            Source::Saturated(x) => format!(
                "learned: {} of the {} req/s per replica a saturated fleet served",
                pct(est.saturated_share()),
                num(x)
            ),
            Source::Breached(x) => format!(
                "learned: {} of the {} req/s per replica completed through a sustained breach (breached)",
                pct(est.breached_share()),
                num(x)
            ),
            Source::ProbeBound(x) => format!(
                "learned: probed up to {} times the {} req/s per replica served (probecap)",
                num(est.probe_cap()),
                num(x)
            ),
            Source::BreachBound(x) => format!(
                "learned: probed up to the {} req/s per replica a sustained breach was seen at (breachcap)",
                num(x)
            ),
        } + &est.held_back().map_or(String::new(), |x| {
            format!(
                "; a sustained breach at {} req/s per replica, below {} of the estimate, does not lower it (breachload)",
                num(x),
                pct(est.lowering_load())
            )
        }),
        pct(u),
    )
}

/// Whether a condition that `holds` now has held for at least `long`, keeping in `since` when
/// it started (cleared when it does not hold).
fn lasted(since: &mut Option<Duration>, holds: bool, now: Duration, long: Duration) -> bool {
    if !holds {
        *since = None;
        return false;
    }
    since.get_or_insert(now).saturating_add(long) <= now
}

fn replicas_for(demand: f64, per_replica: f64, c: &PolicyConfig) -> u32 {
    let n = (demand / per_replica).ceil();
    let n = if n.is_finite() && n > 0.0 {
        n.min(f64::from(u32::MAX)) as u32
    } else {
        0
    };
    clamp(n, c)
}

/// Whether the guide's answer says one of its triggers is breached: it fired, is stabilising,
/// is rate-limited, is held while replicas start, or is at max.
fn is_breach(reason: Reason) -> bool {
    reason.is_scale_out()
        || matches!(
            reason,
            Reason::HoldStabilizing
                | Reason::HoldRateLimited
                | Reason::HoldStartingUp
                | Reason::AtMax
        )
}

fn clamp(v: u32, c: &PolicyConfig) -> u32 {
    v.max(c.min_replicas)
        .min(c.max_replicas.max(c.min_replicas))
}

fn finite(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 { x } else { 0.0 }
}

fn prune<T>(q: &mut VecDeque<(Duration, T)>, now: Duration, keep: Duration) {
    while let Some(front) = q.front() {
        if front.0.saturating_add(keep) < now {
            q.pop_front();
        } else {
            break;
        }
    }
}

#[cfg(test)]
mod tests;
