//! The one entry point from scraped bodies to a decision: [`Scaler`].
//!
//! Every consumer hands the bodies of one scrape round to the same code: the service's control
//! loop, the simulator's `ours` policy, the load test's monitor and `check`. Each of them only
//! decides where the bodies come from (HTTP, the emulator's renderer, files) and what to do with
//! the answer; parsing, the fleet window, the signals and the policy run here, in this order:
//!
//! ```text
//! bodies --ScrapeRound::parse--> snapshots --Scaler::record--> fleet window
//!        --Scaler::signals--> FleetSignals --Scaler::decide--> Step { signals, decision, view, hindsight }
//! ```
//!
//! [`ScrapeRound::parse`] is pure and stateless, so a caller may run it off its async workers
//! (the control loop does); [`Scaler::step`] records a round and decides in one call.
//!
//! # Never a partial view as if it were complete
//!
//! Every [`Step`] carries a [`View`]: which known targets gave usable, current data this round
//! ([`View::observed`]), which did not and why ([`View::unobserved`]: the fetch failed, the body
//! is not an exposition, the body is [`TargetFailure::Invalid`], or the data is older than the
//! staleness bound), and the [`Completeness`] of the answer:
//!
//! - [`Completeness::Full`]: every known target answered; the decision is a measurement.
//! - [`Completeness::PartialHeld`]: some targets answered, some did not. The decision is made
//!   on the answering pods, scale-out still happens, but the policy never scales in (a target
//!   that does not answer counts as loaded, so the calm clock restarts).
//! - [`Completeness::Unavailable`]: targets are known but none gave usable data: the level is
//!   held ([`crate::policy::Reason::NoData`]) and the answer is no measurement; the service
//!   answers KEDA `Unavailable` so its `fallback` applies.
//! - [`Completeness::NoTargets`]: the round named no target. Whether that is a fleet scaled to
//!   zero (discovery answered with nothing) or an unknown fleet (discovery never succeeded) is
//!   the caller's to judge.
//!
//! Restart safety: a fresh scaler never scales in before it has observed a full calm period
//! itself, and, told the scale target's current replicas ([`Scaler::set_current_replicas`]),
//! never answers below them until then (replicas asked for but not ready are capacity on the
//! way, not idle capacity).
//!
//! Pure: no I/O, no clock (`now` is passed in, as everywhere in this crate).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::config::ScalerConfig;
use crate::exposition::{self, ParseError};
use crate::policy::proactive::hindsight::StaticComparison;
use crate::policy::proactive::{Learned, Persisted, Proactive};
use crate::policy::{CurrentReplicas, Decision, Policy, PolicyConfig, PolicyState};
use crate::signals::{
    FleetSignals, FleetWindow, GpuSnapshot, PodSnapshot, STALE_AFTER_INTERVALS, SignalSettings,
    SnapshotError,
};

/// Why a target gave no snapshot this round: its fetch failed (the caller's error type), its
/// body is not a metrics exposition, or the body parsed but cannot be used.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetFailure<E> {
    /// The caller could not fetch the body.
    Fetch(E),
    /// The body is not in the Prometheus text format.
    Parse(ParseError),
    /// The body parsed but gives no usable sample: values that cannot be true, duplicate
    /// series, a broken histogram, no vLLM series, or no series for the configured model.
    Invalid(SnapshotError),
}

/// One target's outcome in a round: its snapshot, or why there is none.
pub type TargetOutcome<T, E> = (String, Result<T, TargetFailure<E>>);

/// The parsed bodies of one scrape round: every vLLM target and every DCGM target in the order
/// given, each with its snapshot or its failure.
#[derive(Debug, Clone)]
pub struct ScrapeRound<E> {
    /// vLLM targets (URLs or replica names) and their snapshots.
    pub pods: Vec<TargetOutcome<PodSnapshot, E>>,
    /// DCGM exporter targets and their snapshots.
    pub gpus: Vec<TargetOutcome<GpuSnapshot, E>>,
}

impl<E> Default for ScrapeRound<E> {
    fn default() -> Self {
        Self {
            pods: Vec::new(),
            gpus: Vec::new(),
        }
    }
}

impl<E> ScrapeRound<E> {
    /// Parses each fetched body into its snapshot; a failed fetch stays failed. `model` keeps only
    /// that model's series (vLLM labels them `model_name`); a body without them is
    /// [`TargetFailure::Invalid`]. Pure: safe to run on any thread.
    pub fn parse<B: AsRef<str>>(
        pods: impl IntoIterator<Item = (String, Result<B, E>)>,
        gpus: impl IntoIterator<Item = (String, Result<B, E>)>,
        model: Option<&str>,
    ) -> Self {
        Self::parse_with_limits(pods, gpus, model, &exposition::Limits::NONE)
    }

    /// [`ScrapeRound::parse`], with each body held to `limits` (a body past them is a parse
    /// failure of its target, [`exposition::ParseErrorKind::LimitExceeded`]).
    pub fn parse_with_limits<B: AsRef<str>>(
        pods: impl IntoIterator<Item = (String, Result<B, E>)>,
        gpus: impl IntoIterator<Item = (String, Result<B, E>)>,
        model: Option<&str>,
        limits: &exposition::Limits,
    ) -> Self {
        let pods = pods
            .into_iter()
            .map(|(target, body)| {
                let snapshot = body.map_err(TargetFailure::Fetch).and_then(|body| {
                    let parsed = exposition::parse_with_limits(body.as_ref(), limits)
                        .map_err(TargetFailure::Parse)?;
                    PodSnapshot::from_exposition(&parsed, model).map_err(TargetFailure::Invalid)
                });
                (target, snapshot)
            })
            .collect();
        let gpus = gpus
            .into_iter()
            .map(|(target, body)| {
                let snapshot = body.map_err(TargetFailure::Fetch).and_then(|body| {
                    exposition::parse_with_limits(body.as_ref(), limits)
                        .map(|parsed| GpuSnapshot::from_exposition(&parsed))
                        .map_err(TargetFailure::Parse)
                });
                (target, snapshot)
            })
            .collect();
        Self { pods, gpus }
    }

    /// How many vLLM targets gave a snapshot.
    pub fn healthy_pods(&self) -> usize {
        self.pods.iter().filter(|(_, r)| r.is_ok()).count()
    }
}

/// How complete the view behind a [`Step`] is (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Completeness {
    /// Every known target gave usable, current data this round.
    Full,
    /// Some known targets did not: the decision uses the answering pods, scale-out still
    /// happens, scale-in is held.
    PartialHeld,
    /// Targets are known but none gave usable, current data: the level is held and the answer
    /// is no measurement (KEDA should get `Unavailable`).
    Unavailable,
    /// The round named no target; the caller knows whether that is a fleet of zero.
    NoTargets,
}

impl Completeness {
    /// `full`, `partial_held`, `unavailable` or `no_targets` (the serde form).
    pub fn as_str(self) -> &'static str {
        match self {
            Completeness::Full => "full",
            Completeness::PartialHeld => "partial_held",
            Completeness::Unavailable => "unavailable",
            Completeness::NoTargets => "no_targets",
        }
    }
}

impl std::fmt::Display for Completeness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a known target's data is not part of a step. The texts are the core's own (metric
/// family names from the catalog, numbers, capped model names): never body bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum Missing {
    /// Its fetch failed this round (the caller holds the error).
    Fetch,
    /// Its body is not in the Prometheus text format (the caller holds the error; `line` is
    /// where parsing stopped).
    Parse {
        /// 1-based line of the body where parsing failed.
        line: usize,
    },
    /// Its body parsed but cannot be used ([`SnapshotError`]'s text).
    Invalid {
        /// What is wrong, naming the series.
        error: String,
    },
    /// No data this round, and its last usable data is older than the staleness bound.
    Stale {
        /// Age of its last usable data, seconds (`None`: it never gave any).
        age_seconds: Option<f64>,
        /// The bound, seconds.
        stale_after_seconds: f64,
    },
}

impl Missing {
    /// `fetch`, `parse`, `invalid` or `stale` (the serde tag).
    pub fn as_str(&self) -> &'static str {
        match self {
            Missing::Fetch => "fetch",
            Missing::Parse { .. } => "parse",
            Missing::Invalid { .. } => "invalid",
            Missing::Stale { .. } => "stale",
        }
    }
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missing::Fetch => f.write_str("fetch failed"),
            Missing::Parse { line } => write!(f, "not a metrics body (line {line})"),
            Missing::Invalid { error } => write!(f, "unusable body: {error}"),
            Missing::Stale {
                age_seconds: Some(age),
                stale_after_seconds,
            } => write!(
                f,
                "stale: last usable data {age:.1} s old > {stale_after_seconds:.1} s"
            ),
            Missing::Stale {
                age_seconds: None, ..
            } => f.write_str("never gave usable data"),
        }
    }
}

/// A known target whose data is not part of a step, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unobserved {
    /// The target (URL or replica name).
    pub target: String,
    /// Why.
    pub why: Missing,
}

/// Which known vLLM targets a step saw, and how complete that is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct View {
    /// Full, partial (scale-in held), unavailable or no targets.
    pub completeness: Completeness,
    /// Targets whose data this round is part of the signals, in target order.
    pub observed: Vec<String>,
    /// Known targets whose data is not, with the reason, in target order.
    pub unobserved: Vec<Unobserved>,
}

impl View {
    /// Whether the step's decision is a measurement of the whole fleet.
    pub fn is_full(&self) -> bool {
        self.completeness == Completeness::Full
    }

    /// One line for logs and explanations: "2 of 3 targets observed; not observed: b (fetch
    /// failed); c (stale: ...)" (at most 5 targets named).
    pub fn summary(&self) -> String {
        let known = self.observed.len() + self.unobserved.len();
        let mut text = format!(
            "{}: {} of {known} targets observed",
            self.completeness,
            self.observed.len()
        );
        if !self.unobserved.is_empty() {
            let named: Vec<String> = self
                .unobserved
                .iter()
                .take(5)
                .map(|u| format!("{} ({})", u.target, u.why))
                .collect();
            text.push_str("; not observed: ");
            text.push_str(&named.join("; "));
            if self.unobserved.len() > 5 {
                text.push_str(&format!("; and {} more", self.unobserved.len() - 5));
            }
        }
        text
    }
}

/// What one [`Scaler::step`] (or [`Scaler::decide`]) produced: the signals, the decision made
/// from them, and the view of the fleet behind both.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The fleet's signals at the step's instant.
    pub signals: FleetSignals,
    /// The policy's decision on them.
    pub decision: Decision,
    /// Which targets were observed, which were not and why, and the answer's completeness.
    pub view: View,
    /// The proactive policy's comparison with static fleets over the last day (`None` under
    /// the guide's policy, and before half an hour of history).
    pub hindsight: Option<StaticComparison>,
    /// What the proactive policy has learned (`None` under the guide's policy).
    pub learned: Option<Learned>,
}

/// One ScaledObject's scaler: the fleet window of its targets and its policy with the state the
/// policy carries between decisions.
#[derive(Debug, Clone)]
pub struct Scaler {
    window: FleetWindow,
    policy: Policy,
    state: PolicyState,
    /// Why each vLLM target of the last recorded round gave no snapshot.
    failures: BTreeMap<String, Missing>,
    /// The proactive policy when the metadata selects it (`policy: proactive`).
    proactive: Option<Proactive>,
}

impl Scaler {
    /// The scaler a ScaledObject's validated metadata describes. A pod's data is stale after
    /// [`STALE_AFTER_INTERVALS`] scrape intervals.
    pub fn new(config: &ScalerConfig) -> Self {
        Self::with_settings(
            SignalSettings {
                model: config.model.clone(),
                stale_after: config.scrape_interval * STALE_AFTER_INTERVALS,
                latency_window: config.policy.rate_window,
                ..SignalSettings::default()
            },
            config.policy.clone(),
        )
    }

    /// A scaler from explicit signal settings and policy (a load test's windows, say). The
    /// signals' rate window is the one window: the policy's `rate_window` is set to it, so the
    /// proactive policy's windows never disagree with the rates they read.
    pub fn with_settings(signals: SignalSettings, policy: PolicyConfig) -> Self {
        let policy = PolicyConfig {
            rate_window: signals.latency_window,
            ..policy
        };
        Self {
            window: FleetWindow::new(signals),
            proactive: policy.proactive.clone().map(Proactive::new),
            policy: Policy::new(policy),
            state: PolicyState::default(),
            failures: BTreeMap::new(),
        }
    }

    /// Starts the policy from a replica target held before (a scaler restart that remembers
    /// what it asked for), instead of from nothing. The calm clock still starts at the first
    /// decision: no scale-in before a full calm period observed by this scaler.
    pub fn resume_from(mut self, previous_target: u32) -> Self {
        self.state = PolicyState::with_previous_target(previous_target);
        self
    }

    /// Tells the policy the scale target's replicas now (its `/scale` subresource, or the pods
    /// the caller observes when it cannot read that); `None` forgets them. Until this scaler
    /// has observed a full calm period itself, it never answers below `spec` (clamped to
    /// min/max), and says so in the explanation; replicas asked for but not ready count as
    /// capacity on the way. Call it before [`Scaler::step`] whenever the caller learns them.
    pub fn set_current_replicas(&mut self, current: Option<CurrentReplicas>) {
        self.state.set_current_replicas(current);
    }

    /// The policy's configuration.
    pub fn policy_config(&self) -> &PolicyConfig {
        &self.policy.config
    }

    /// Records one round at `now`: the fleet becomes exactly the round's targets (pods that left
    /// are forgotten), and each target's snapshot, or its failure, enters the window.
    pub fn record<E>(&mut self, now: Duration, round: ScrapeRound<E>) {
        let pods: Vec<String> = round.pods.iter().map(|(t, _)| t.clone()).collect();
        let gpus: Vec<String> = round.gpus.iter().map(|(t, _)| t.clone()).collect();
        self.window.retain_pods(&pods);
        self.window.retain_gpu_targets(&gpus);
        self.failures.clear();
        for (target, outcome) in round.pods {
            let snapshot = match outcome {
                Ok(snapshot) => Some(snapshot),
                Err(failure) => {
                    let why = match failure {
                        TargetFailure::Fetch(_) => Missing::Fetch,
                        TargetFailure::Parse(error) => Missing::Parse { line: error.line },
                        TargetFailure::Invalid(error) => Missing::Invalid {
                            error: error.to_string(),
                        },
                    };
                    self.failures.insert(target.clone(), why);
                    None
                }
            };
            self.window.record(now, &target, snapshot);
        }
        for (target, outcome) in round.gpus {
            self.window.record_gpu(now, &target, outcome.ok());
        }
    }

    /// The fleet's signals at `now` from what has been recorded.
    pub fn signals(&self, now: Duration) -> FleetSignals {
        self.window.compute(now)
    }

    /// The view behind `signals` (computed at `signals.at`).
    pub fn view(&self, signals: &FleetSignals) -> View {
        let stale_after = self.window.settings().stale_after;
        let mut observed = Vec::new();
        let mut unobserved = Vec::new();
        for pod in &signals.pods {
            if pod.healthy {
                observed.push(pod.pod.clone());
                continue;
            }
            let why = match self.failures.get(&pod.pod) {
                Some(why) => why.clone(),
                None => Missing::Stale {
                    age_seconds: self
                        .window
                        .latest_at(&pod.pod)
                        .map(|at| signals.at.saturating_sub(at).as_secs_f64()),
                    stale_after_seconds: stale_after.as_secs_f64(),
                },
            };
            unobserved.push(Unobserved {
                target: pod.pod.clone(),
                why,
            });
        }
        let completeness = if observed.is_empty() && unobserved.is_empty() {
            Completeness::NoTargets
        } else if observed.is_empty() {
            Completeness::Unavailable
        } else if unobserved.is_empty() {
            Completeness::Full
        } else {
            Completeness::PartialHeld
        };
        View {
            completeness,
            observed,
            unobserved,
        }
    }

    /// Computes the signals at `now` and decides on them.
    pub fn decide(&mut self, now: Duration) -> Step {
        let signals = self.window.compute(now);
        let view = self.view(&signals);
        // The proactive policy decides only from a full view; from a partial or empty one the
        // guide's rules answer, and they never scale in while a known target is unobserved.
        let decision = match &mut self.proactive {
            Some(p) if view.is_full() => p.decide(&self.policy, now, &signals, &mut self.state),
            _ => self.policy.decide(now, &signals, &mut self.state),
        };
        Step {
            signals,
            decision,
            view,
            hindsight: self.hindsight().cloned(),
            learned: self.learned(),
        }
    }

    /// What the proactive policy has learned (`None` under the guide's policy).
    pub fn learned(&self) -> Option<Learned> {
        self.proactive.as_ref().map(Proactive::learned)
    }

    /// What the next scaler pod serving this trigger may start from (`None` under the guide's
    /// policy).
    pub fn persisted(&self) -> Option<Persisted> {
        self.proactive.as_ref().map(Proactive::persisted)
    }

    /// Starts the proactive policy from what an earlier pod learned for this trigger (nothing
    /// under the guide's policy).
    pub fn inherit(&mut self, p: &Persisted) {
        if let Some(proactive) = self.proactive.as_mut() {
            proactive.inherit(p);
        }
    }

    /// The proactive policy's comparison with static fleets over the last day (`None` under
    /// the guide's policy, and before half an hour of history).
    pub fn hindsight(&self) -> Option<&StaticComparison> {
        self.proactive.as_ref()?.hindsight()
    }

    /// Records one round and decides: the whole pipeline for one scrape interval.
    pub fn step<E>(&mut self, now: Duration, round: ScrapeRound<E>) -> Step {
        self.record(now, round);
        self.decide(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn the_rate_window_is_one_setting_for_signals_and_policy() {
        let mut metadata: HashMap<String, String> = HashMap::new();
        metadata.insert("endpoints".into(), "http://a/metrics".into());
        metadata.insert("rateWindowSeconds".into(), "20".into());
        let scaler = Scaler::new(&ScalerConfig::from_metadata(&metadata).unwrap());
        assert_eq!(
            scaler.window.settings().latency_window,
            Duration::from_secs(20)
        );
        assert_eq!(scaler.policy_config().rate_window, Duration::from_secs(20));
        // Explicit signal settings win over a policy that says otherwise.
        let scaler = Scaler::with_settings(
            SignalSettings {
                latency_window: Duration::from_secs(30),
                ..SignalSettings::default()
            },
            PolicyConfig::default(),
        );
        assert_eq!(scaler.policy_config().rate_window, Duration::from_secs(30));
    }

    const IDLE: &str = include_str!("../../../data/fixtures/vllm-v1-idle.prom");
    const LOADED: &str = include_str!("../../../data/fixtures/vllm-v1-loaded.prom");

    fn config() -> ScalerConfig {
        let metadata: HashMap<String, String> = [("endpoints", "http://a/metrics")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        ScalerConfig::from_metadata(&metadata).unwrap()
    }

    #[test]
    fn a_round_is_parsed_per_target_and_failures_are_kept_apart() {
        let round: ScrapeRound<&str> = ScrapeRound::parse(
            [
                ("a".to_owned(), Ok(IDLE)),
                ("b".to_owned(), Err("connection refused")),
                ("c".to_owned(), Ok("this is { not a metrics body")),
            ],
            [],
            None,
        );
        assert_eq!(round.healthy_pods(), 1);
        assert!(round.pods[0].1.is_ok());
        assert_eq!(
            round.pods[1].1.as_ref().unwrap_err(),
            &TargetFailure::Fetch("connection refused")
        );
        assert!(matches!(round.pods[2].1, Err(TargetFailure::Parse(_))));
    }

    #[test]
    fn step_equals_record_then_decide_and_the_fleet_is_the_round() {
        let mut one = Scaler::new(&config());
        let mut two = Scaler::new(&config());
        let round = |body: &str| -> ScrapeRound<()> {
            ScrapeRound::parse(
                [("a".to_owned(), Ok(body)), ("b".to_owned(), Ok(body))],
                [],
                None,
            )
        };
        for (i, body) in [IDLE, LOADED, LOADED].into_iter().enumerate() {
            let now = Duration::from_secs(2 * i as u64);
            let stepped = one.step(now, round(body));
            two.record(now, round(body));
            assert_eq!(stepped, two.decide(now));
        }
        // Pod "b" leaves: the fleet is the last round's targets only.
        let now = Duration::from_secs(6);
        let step = one.step(
            now,
            ScrapeRound::<()>::parse([("a".to_owned(), Ok(LOADED))], [], None),
        );
        assert_eq!(step.signals.pods_total, 1);
    }
}
