//! The simulated fleet: emulated engines in virtual time, a router, replicas that take a
//! start-up delay before they serve and drain before they go, and the loop that drives a
//! [`Autoscaler`] (a scaling policy with its actuation path) against them.
//!
//! Owns: virtual time (it never sleeps), replica lifecycles, routing, the per-request outcomes
//! and the replica-seconds bill. Does not own: the engine model ([`vllm_emulator`]) or any
//! scaling decision (see [`super::controllers`]).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use crate::trace::TraceRequest;
use vllm_emulator::{Engine, EngineConfig, Event, RequestId, RequestSpec, SplitMix64};
use vllm_keda_core::policy::proactive::Persisted;
use vllm_keda_core::policy::proactive::hindsight::StaticComparison;

use super::report::{RequestOutcome, ScaleEvent};

/// How the fleet behaves, whatever the policy.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetSettings {
    /// The engine model of every replica.
    pub engine: EngineConfig,
    /// From a replica being asked for to it serving (weights, CUDA graphs: 2-10 min), when
    /// `startup_spread` is [`StartupSpread::Fixed`]; the planning value of the clairvoyant
    /// planner otherwise.
    pub startup_delay: Duration,
    /// How start-up delays are drawn.
    pub startup_spread: StartupSpread,
    /// Seed of the start-up draws: under [`StartupDraws::Order`] the k-th replica asked for
    /// gets the k-th draw, whatever the policy, so every policy meets the same sequence of
    /// delays.
    pub startup_seed: u64,
    /// Which draw a replica asked for gets.
    pub startup_draws: StartupDraws,
    /// A client gives up this long after its request arrived: the request is a miss and the
    /// engine aborts it (as vLLM does on disconnect). None: clients wait forever.
    pub client_timeout: Option<Duration>,
    /// How often the time series for plots is sampled.
    pub sample_interval: Duration,
    /// How long after the last arrival the run goes on so requests in flight can finish.
    pub drain_limit: Duration,
}

impl Default for FleetSettings {
    fn default() -> Self {
        Self {
            engine: EngineConfig::default(),
            startup_delay: Duration::from_secs(300),
            startup_spread: StartupSpread::Fixed,
            startup_seed: 1,
            startup_draws: StartupDraws::Order,
            client_timeout: None,
            sample_interval: Duration::from_secs(10),
            drain_limit: Duration::from_secs(900),
        }
    }
}

/// Which start-up draw a replica asked for gets (`simulate --startup-draws`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartupDraws {
    /// The k-th replica asked for in the run gets the k-th draw (the evaluation's protocol):
    /// every policy meets the same sequence, and a policy that asks once more than another
    /// meets every later delay one draw further on.
    #[default]
    Order,
    /// A replica asked for as the fleet's n-th live one gets position n's m-th draw, the m-th
    /// time that position starts (common random numbers per position): two policies that ask
    /// for the same positions meet the same delays there, whatever either asked elsewhere.
    Slot,
}

impl StartupDraws {
    /// Every value, as `--startup-draws` spells it.
    pub const ALL: [(&'static str, Self); 2] = [("order", Self::Order), ("slot", Self::Slot)];
}

/// Mixed into the seed of the start-up draws, so they never shift the arrival process's.
const STARTUP_STREAM: u64 = 0x5354_4152_5455_5021;

/// How replica start-up delays are distributed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StartupSpread {
    /// Every replica takes `startup_delay`.
    Fixed,
    /// Uniform in [low, high] seconds.
    Uniform {
        /// Shortest delay, seconds.
        low: f64,
        /// Longest delay, seconds.
        high: f64,
    },
    /// Log-normal with this median (seconds) and log-space standard deviation.
    LogNormal {
        /// Median delay, seconds.
        median: f64,
        /// Standard deviation of the delay's logarithm.
        sigma: f64,
    },
}

impl StartupSpread {
    /// The `n` first delays drawn from `seed` (`fixed` for [`StartupSpread::Fixed`]).
    pub fn draws(&self, fixed: Duration, seed: u64, n: usize) -> Vec<Duration> {
        // A stream of its own, so start-up draws never shift the arrival process's.
        let mut rng = SplitMix64::new(seed ^ STARTUP_STREAM);
        (0..n).map(|_| self.sample(fixed, &mut rng)).collect()
    }

    /// The draw of fleet position `slot`'s `start`-th start (both from 0) under `seed`
    /// ([`StartupDraws::Slot`]): each (position, start) pair seeds a stream of its own.
    pub fn draw_at(&self, fixed: Duration, seed: u64, slot: usize, start: usize) -> Duration {
        let key = (seed ^ STARTUP_STREAM)
            .wrapping_add((slot as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .wrapping_add((start as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
        self.sample(fixed, &mut SplitMix64::new(key))
    }

    fn sample(&self, fixed: Duration, rng: &mut SplitMix64) -> Duration {
        match *self {
            Self::Fixed => fixed,
            Self::Uniform { low, high } => {
                Duration::from_secs_f64(low + (high - low) * rng.next_f64())
            }
            Self::LogNormal { median, sigma } => {
                // Box-Muller from two uniforms.
                let u1 = rng.next_f64().max(1e-12);
                let u2 = rng.next_f64();
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                Duration::from_secs_f64((median * (sigma * z).exp()).min(86_400.0))
            }
        }
    }

    /// A delay a planner that must not be late would plan with: the fixed delay, the longest
    /// uniform draw, or the log-normal's 95th percentile.
    pub fn planning_delay(&self, fixed: Duration) -> Duration {
        match *self {
            Self::Fixed => fixed,
            Self::Uniform { high, .. } => Duration::from_secs_f64(high),
            Self::LogNormal { median, sigma } => {
                Duration::from_secs_f64((median * (1.645 * sigma).exp()).min(86_400.0))
            }
        }
    }
}

/// Where a replica is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaState {
    /// Asked for, loading; serves from `ready_at` on.
    Starting {
        /// When it becomes ready.
        ready_at: Duration,
    },
    /// Serving and receiving new requests.
    Ready,
    /// Removed from service: finishes what it holds, then ends.
    Draining,
}

/// One replica of the simulated fleet.
#[derive(Debug, Clone)]
pub struct Replica {
    /// Stable identity (never reused in a run).
    pub id: u64,
    /// Its name as a scrape target.
    pub name: String,
    /// Its engine.
    pub engine: Engine,
    /// Where it is in its life.
    pub state: ReplicaState,
    /// When it was asked for (GPU time starts here).
    pub created: Duration,
    /// When it ended (GPU time stops here).
    pub ended: Option<Duration>,
}

/// The fleet as a controller sees it.
#[derive(Debug)]
pub struct VirtualFleet {
    settings: FleetSettings,
    replicas: Vec<Replica>,
    next_id: u64,
    round_robin: usize,
    gateway: VecDeque<usize>,
    in_flight: HashMap<(u64, u64), usize>,
    /// Where each routed, unfinished request runs: (replica slot, engine request id).
    placed: HashMap<usize, (usize, RequestId)>,
    /// Under [`StartupDraws::Order`], the draws so far and how many were taken.
    startup_draws: Vec<Duration>,
    started: usize,
    /// Under [`StartupDraws::Slot`], how many times each fleet position has started.
    slot_starts: Vec<usize>,
    outcomes: Vec<RequestOutcome>,
    prompt_tokens: Vec<u32>,
    events: Vec<Event>,
    /// The replica count asked for (the Deployment's `spec.replicas`).
    desired: u32,
}

impl VirtualFleet {
    fn new(settings: FleetSettings, requests: &[TraceRequest], initial: u32) -> Self {
        let mut fleet = Self {
            settings,
            replicas: Vec::new(),
            next_id: 0,
            round_robin: 0,
            gateway: VecDeque::new(),
            in_flight: HashMap::new(),
            placed: HashMap::new(),
            startup_draws: Vec::new(),
            started: 0,
            slot_starts: Vec::new(),
            outcomes: requests
                .iter()
                .map(|r| RequestOutcome {
                    arrival: r.arrival,
                    first_token: None,
                    finished: None,
                    output_tokens: r.output_tokens,
                    timed_out: false,
                    rejected: false,
                })
                .collect(),
            prompt_tokens: requests.iter().map(|r| r.prompt_tokens).collect(),
            events: Vec::new(),
            desired: 0,
        };
        for slot in 0..initial as usize {
            fleet.add_replica(Duration::ZERO, true, slot);
        }
        fleet.desired = initial;
        fleet
    }

    /// The replica count asked for.
    pub fn desired(&self) -> u32 {
        self.desired
    }

    /// Replicas serving now.
    pub fn ready(&self) -> impl Iterator<Item = &Replica> {
        self.replicas
            .iter()
            .filter(|r| r.state == ReplicaState::Ready)
    }

    /// Every replica that has not ended (starting, ready, draining).
    pub fn live(&self) -> impl Iterator<Item = &Replica> {
        self.replicas.iter().filter(|r| r.ended.is_none())
    }

    /// Replicas that ended since the run started.
    pub fn ended(&self) -> impl Iterator<Item = &Replica> {
        self.replicas.iter().filter(|r| r.ended.is_some())
    }

    /// The engine settings every replica runs.
    pub fn engine_config(&self) -> &EngineConfig {
        &self.settings.engine
    }

    /// The start-up delay of the next replica asked for, as the fleet's `slot`-th live one
    /// (from 0): the k-th draw for the k-th, or under [`StartupDraws::Slot`] the position's
    /// own next draw.
    fn next_startup_delay(&mut self, slot: usize) -> Duration {
        if self.settings.startup_draws == StartupDraws::Slot {
            if self.slot_starts.len() <= slot {
                self.slot_starts.resize(slot + 1, 0);
            }
            let start = self.slot_starts[slot];
            self.slot_starts[slot] += 1;
            return self.settings.startup_spread.draw_at(
                self.settings.startup_delay,
                self.settings.startup_seed,
                slot,
                start,
            );
        }
        if self.started >= self.startup_draws.len() {
            let n = (self.startup_draws.len() * 2).max(64);
            self.startup_draws = self.settings.startup_spread.draws(
                self.settings.startup_delay,
                self.settings.startup_seed,
                n,
            );
        }
        let d = self.startup_draws[self.started];
        self.started += 1;
        d
    }

    fn add_replica(&mut self, now: Duration, ready: bool, slot: usize) {
        let delay = if ready {
            Duration::ZERO
        } else {
            self.next_startup_delay(slot)
        };
        let id = self.next_id;
        self.next_id += 1;
        let engine = Engine::new(self.settings.engine.clone())
            .expect("engine settings are validated before the run starts");
        self.replicas.push(Replica {
            id,
            name: format!("replica-{id}"),
            engine,
            state: if ready {
                ReplicaState::Ready
            } else {
                ReplicaState::Starting {
                    ready_at: now + delay,
                }
            },
            created: now,
            ended: None,
        });
    }

    fn next_ready_at(&self) -> Option<Duration> {
        self.replicas
            .iter()
            .filter_map(|r| match r.state {
                ReplicaState::Starting { ready_at } if r.ended.is_none() => Some(ready_at),
                _ => None,
            })
            .min()
    }

    fn promote(&mut self, now: Duration) {
        let mut promoted = false;
        for r in &mut self.replicas {
            if let ReplicaState::Starting { ready_at } = r.state {
                if ready_at <= now && r.ended.is_none() {
                    r.state = ReplicaState::Ready;
                    promoted = true;
                }
            }
        }
        if promoted {
            while let Some(index) = self.gateway.pop_front() {
                if !self.route(now, index) {
                    self.gateway.push_front(index);
                    break;
                }
            }
        }
    }

    /// Sends request `index` to the next ready replica (round robin, as a Service spreads
    /// connections); false when no replica is ready.
    fn route(&mut self, now: Duration, index: usize) -> bool {
        let ready: Vec<usize> = (0..self.replicas.len())
            .filter(|&i| self.replicas[i].state == ReplicaState::Ready)
            .collect();
        if ready.is_empty() {
            return false;
        }
        let slot = ready[self.round_robin % ready.len()];
        self.round_robin = self.round_robin.wrapping_add(1);
        let outcome = self.outcomes[index];
        let prompt = self.prompt_tokens[index];
        let replica = &mut self.replicas[slot];
        let spec = RequestSpec::new(prompt.max(1), outcome.output_tokens.max(1));
        match replica.engine.add_request(now, spec) {
            Ok(id) => {
                self.in_flight.insert((replica.id, id), index);
                self.placed.insert(index, (slot, id));
            }
            Err(_) => {
                // vLLM answers 400 at once (prompt plus output beyond max_model_len).
                let outcome = &mut self.outcomes[index];
                outcome.rejected = true;
                outcome.finished = Some(now);
            }
        }
        true
    }

    fn collect(&mut self, slot: usize, now: Duration) {
        let replica = &mut self.replicas[slot];
        replica.engine.advance_to(now, &mut self.events);
        let replica_id = replica.id;
        let mut last_finish = None;
        for event in self.events.drain(..) {
            if let Event::Finished(record) = event {
                last_finish = Some(record.finished);
                if let Some(index) = self.in_flight.remove(&(replica_id, record.id)) {
                    self.placed.remove(&index);
                    let outcome = &mut self.outcomes[index];
                    outcome.first_token = record.first_token;
                    outcome.finished = Some(record.finished);
                }
            }
        }
        let replica = &mut self.replicas[slot];
        if replica.state == ReplicaState::Draining
            && replica.ended.is_none()
            && replica.engine.num_running() + replica.engine.num_waiting() == 0
        {
            replica.ended = Some(last_finish.unwrap_or(now).min(now));
        }
    }

    /// Brings every live engine to `now`, collecting finished requests.
    pub fn advance_all(&mut self, now: Duration) {
        for slot in 0..self.replicas.len() {
            if self.replicas[slot].ended.is_none() {
                self.collect(slot, now);
            }
        }
    }

    /// Asks for `desired` replicas: new ones start; surplus ones go, those still starting
    /// first, then the newest ready ones (as a ReplicaSet picks), draining what they hold.
    fn scale_to(&mut self, now: Duration, desired: u32) {
        let live = |r: &Replica| r.ended.is_none() && r.state != ReplicaState::Draining;
        let mut current = self.replicas.iter().filter(|r| live(r)).count() as u32;
        while current < desired {
            self.add_replica(now, false, current as usize);
            current += 1;
        }
        while current > desired {
            let victim = self
                .replicas
                .iter()
                .rposition(|r| live(r) && matches!(r.state, ReplicaState::Starting { .. }))
                .or_else(|| self.replicas.iter().rposition(&live));
            let Some(slot) = victim else { break };
            match self.replicas[slot].state {
                ReplicaState::Starting { .. } => self.replicas[slot].ended = Some(now),
                _ => {
                    self.replicas[slot].state = ReplicaState::Draining;
                    self.collect(slot, now);
                }
            }
            current -= 1;
        }
        self.desired = desired;
    }

    /// Waiting requests across serving and draining replicas, plus those held at the gateway.
    pub fn queue_depth(&self) -> usize {
        self.gateway.len()
            + self
                .replicas
                .iter()
                .filter(|r| r.ended.is_none())
                .map(|r| r.engine.num_waiting())
                .sum::<usize>()
    }

    /// Request `index`'s client gives up at `now`: a request still at the gateway leaves it,
    /// one in an engine is aborted there (unless it finished by `now`).
    fn time_out(&mut self, now: Duration, index: usize) {
        if self.outcomes[index].finished.is_some() {
            return;
        }
        if let Some(&(slot, id)) = self.placed.get(&index) {
            self.collect(slot, now);
            if self.outcomes[index].finished.is_some() {
                return;
            }
            let replica_id = self.replicas[slot].id;
            self.replicas[slot].engine.abort(now, id);
            self.in_flight.remove(&(replica_id, id));
            self.placed.remove(&index);
            // The abort may leave a draining replica empty.
            self.collect(slot, now);
        } else if self.gateway.front() == Some(&index) {
            self.gateway.pop_front();
        } else if let Some(pos) = self.gateway.iter().position(|&i| i == index) {
            self.gateway.remove(pos);
        } else {
            return;
        }
        let outcome = &mut self.outcomes[index];
        outcome.timed_out = true;
        outcome.finished = Some(now);
    }

    fn idle(&self) -> bool {
        self.in_flight.is_empty() && self.gateway.is_empty()
    }
}

/// A scaling policy with its actuation path, driven by the fleet loop.
pub trait Autoscaler {
    /// The next instant it wants to act, if any.
    fn next_wake(&self) -> Option<Duration>;
    /// Acts at `now` (every engine is advanced to `now` first); returns the replica count to
    /// ask for, if it sets one.
    fn wake(&mut self, now: Duration, fleet: &VirtualFleet) -> Option<u32>;
    /// The decisions it explained, handed over once at the end of a run (only our scaler
    /// explains its decisions; the peers' models do not).
    fn take_decisions(&mut self) -> Vec<DecisionNote> {
        Vec::new()
    }
    /// Its comparison with static fleets at the end of the run (only our scaler makes one).
    fn hindsight(&self) -> Option<StaticComparison> {
        None
    }
    /// What it learned by the end of the run, as a scaler pod keeps it for the next (only our
    /// scaler's proactive policy learns).
    fn learned_state(&self) -> Option<Persisted> {
        None
    }
}

/// One explained decision: kept when the target or the reason changed from the one before.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DecisionNote {
    /// Seconds since the run's start.
    pub t_seconds: f64,
    /// Replicas ready when it decided.
    pub ready: u32,
    /// The target it answered.
    pub target: u32,
    /// The reason code.
    pub reason: &'static str,
    /// The explanation with its numbers.
    pub explanation: String,
}

/// One point of the time series kept for plots.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SeriesPoint {
    /// Seconds since the run's start.
    pub t_seconds: f64,
    /// Requests per second offered over the last sample interval.
    pub offered_rps: f64,
    /// Waiting requests across the fleet.
    pub queue: usize,
    /// Replicas asked for.
    pub desired: u32,
    /// Replicas serving.
    pub ready: usize,
}

/// Everything a run produced.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// Per request, in trace order.
    pub outcomes: Vec<RequestOutcome>,
    /// Replica-seconds from the start until the fleet's work is done (the last request
    /// finished or gave up), counting starting replicas and draining ones until they drain.
    pub replica_seconds: f64,
    /// Of `replica_seconds`, those of replicas removed while still starting: asked for, then
    /// withdrawn before they served a request.
    pub withdrawn_seconds: f64,
    /// When the run's work was done (at least the last arrival).
    pub end: Duration,
    /// Changes of the replica count asked for.
    pub events: Vec<ScaleEvent>,
    /// Time series for plots.
    pub series: Vec<SeriesPoint>,
    /// The controller's explained decisions (changes only; empty for the peers).
    pub decisions: Vec<DecisionNote>,
    /// The controller's comparison with static fleets at the end (ours only).
    pub hindsight: Option<StaticComparison>,
    /// What the controller learned by the end, for a run that starts from it (ours only).
    pub learned_state: Option<Persisted>,
}

/// Replays `requests` (sorted by arrival) through a fleet of `initial` ready replicas under
/// `controller`, in virtual time, until every request finished (or gave up) or `drain_limit`
/// after the last arrival. GPU time is billed from the start until the work is done: a replica
/// until it ended (a draining one until it drained), a live one until the last request
/// finished.
pub fn run(
    requests: &[TraceRequest],
    settings: &FleetSettings,
    initial: u32,
    controller: &mut dyn Autoscaler,
) -> RunResult {
    let horizon = requests.last().map_or(Duration::ZERO, |r| r.arrival);
    let end = horizon + settings.drain_limit;
    let mut fleet = VirtualFleet::new(settings.clone(), requests, initial);
    let mut events = Vec::new();
    let mut series = Vec::new();
    let mut next_arrival = 0usize;
    let mut next_sample = Duration::ZERO;
    let mut arrivals_since_sample = 0usize;
    let timeout = settings.client_timeout;
    let mut next_timeout = 0usize;
    loop {
        let deadline = timeout.and_then(|t| {
            (next_timeout < next_arrival).then(|| requests[next_timeout].arrival + t)
        });
        let candidates = [
            deadline,
            requests.get(next_arrival).map(|r| r.arrival),
            fleet.next_ready_at(),
            controller.next_wake(),
            Some(next_sample),
        ];
        let Some(now) = candidates.into_iter().flatten().min() else {
            break;
        };
        if now > end || (now > horizon && next_arrival >= requests.len() && fleet.idle()) {
            break;
        }
        fleet.promote(now);
        if let Some(t) = timeout {
            while next_timeout < next_arrival && requests[next_timeout].arrival + t <= now {
                fleet.time_out(now, next_timeout);
                next_timeout += 1;
            }
        }
        while requests.get(next_arrival).is_some_and(|r| r.arrival <= now) {
            if !fleet.route(now, next_arrival) {
                fleet.gateway.push_back(next_arrival);
            }
            next_arrival += 1;
            arrivals_since_sample += 1;
        }
        if controller.next_wake().is_some_and(|w| w <= now) {
            fleet.advance_all(now);
            if let Some(desired) = controller.wake(now, &fleet) {
                if desired != fleet.desired {
                    events.push(ScaleEvent {
                        at_seconds: now.as_secs_f64(),
                        from: fleet.desired,
                        to: desired,
                    });
                    fleet.scale_to(now, desired);
                }
            }
        }
        if next_sample <= now {
            fleet.advance_all(now);
            series.push(SeriesPoint {
                t_seconds: now.as_secs_f64(),
                offered_rps: arrivals_since_sample as f64 / settings.sample_interval.as_secs_f64(),
                queue: fleet.queue_depth(),
                desired: fleet.desired,
                ready: fleet.ready().count(),
            });
            arrivals_since_sample = 0;
            next_sample += settings.sample_interval;
        }
    }
    fleet.advance_all(end);
    let done = fleet
        .outcomes
        .iter()
        .map(|o| o.finished.unwrap_or(end))
        .max()
        .unwrap_or(horizon)
        .max(horizon)
        .min(end);
    let billed = |r: &Replica| {
        let stop = r.ended.unwrap_or(done).min(done);
        stop.saturating_sub(r.created).as_secs_f64()
    };
    let replica_seconds = fleet.replicas.iter().map(billed).sum();
    let withdrawn_seconds = fleet
        .replicas
        .iter()
        .filter(|r| r.ended.is_some() && matches!(r.state, ReplicaState::Starting { .. }))
        .map(billed)
        .sum();
    RunResult {
        outcomes: fleet.outcomes,
        replica_seconds,
        withdrawn_seconds,
        end: done,
        events,
        series,
        decisions: controller.take_decisions(),
        hindsight: controller.hindsight(),
        learned_state: controller.learned_state(),
    }
}
