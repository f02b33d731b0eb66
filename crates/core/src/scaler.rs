//! The one entry point from scraped bodies to a decision: [`Scaler`].
//!
//! Every consumer hands the bodies of one scrape round to the same code: the service's control
//! loop, the simulator's `ours` policy, the load test's monitor and `check`. Each of them only
//! decides where the bodies come from (HTTP, the emulator's renderer, files) and what to do with
//! the answer; parsing, the fleet window, the signals and the policy run here, in this order:
//!
//! ```text
//! bodies --ScrapeRound::parse--> snapshots --Scaler::record--> fleet window
//!        --Scaler::signals--> FleetSignals --Scaler::decide--> Decision
//! ```
//!
//! [`ScrapeRound::parse`] is pure and stateless, so a caller may run it off its async workers
//! (the control loop does); [`Scaler::step`] records a round and decides in one call.
//!
//! Pure: no I/O, no clock (`now` is passed in, as everywhere in this crate).

use std::time::Duration;

use crate::config::ScalerConfig;
use crate::exposition::{self, ParseError};
use crate::policy::proactive::Proactive;
use crate::policy::{Decision, Policy, PolicyConfig, PolicyState};
use crate::signals::{FleetSignals, FleetWindow, GpuSnapshot, PodSnapshot, SignalSettings};

/// Why a target gave no snapshot this round: its fetch failed (the caller's error type), or its
/// body is not a metrics exposition.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetFailure<E> {
    /// The caller could not fetch the body.
    Fetch(E),
    /// The body is not in the Prometheus text format.
    Parse(ParseError),
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
    /// that model's series (vLLM labels them `model_name`). Pure: safe to run on any thread.
    pub fn parse<B: AsRef<str>>(
        pods: impl IntoIterator<Item = (String, Result<B, E>)>,
        gpus: impl IntoIterator<Item = (String, Result<B, E>)>,
        model: Option<&str>,
    ) -> Self {
        let pods = pods
            .into_iter()
            .map(|(target, body)| {
                let snapshot = body.map_err(TargetFailure::Fetch).and_then(|body| {
                    exposition::parse(body.as_ref())
                        .map(|parsed| PodSnapshot::from_exposition(&parsed, model))
                        .map_err(TargetFailure::Parse)
                });
                (target, snapshot)
            })
            .collect();
        let gpus = gpus
            .into_iter()
            .map(|(target, body)| {
                let snapshot = body.map_err(TargetFailure::Fetch).and_then(|body| {
                    exposition::parse(body.as_ref())
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

/// What one [`Scaler::step`] produced: the signals and the decision made from them.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The fleet's signals at the step's instant.
    pub signals: FleetSignals,
    /// The policy's decision on them.
    pub decision: Decision,
}

/// One ScaledObject's scaler: the fleet window of its targets and its policy with the state the
/// policy carries between decisions.
#[derive(Debug, Clone)]
pub struct Scaler {
    window: FleetWindow,
    policy: Policy,
    state: PolicyState,
    /// The proactive policy when the metadata selects it (`policy: proactive`).
    proactive: Option<Proactive>,
}

impl Scaler {
    /// The scaler a ScaledObject's validated metadata describes.
    pub fn new(config: &ScalerConfig) -> Self {
        Self::with_settings(
            SignalSettings {
                model: config.model.clone(),
                ..SignalSettings::default()
            },
            config.policy.clone(),
        )
    }

    /// A scaler from explicit signal settings and policy (a load test's windows, say).
    pub fn with_settings(signals: SignalSettings, policy: PolicyConfig) -> Self {
        Self {
            window: FleetWindow::new(signals),
            proactive: policy.proactive.clone().map(Proactive::new),
            policy: Policy::new(policy),
            state: PolicyState::default(),
        }
    }

    /// Starts the policy from a replica target held before (a scaler restart that remembers
    /// what it asked for), instead of from nothing.
    pub fn resume_from(mut self, previous_target: u32) -> Self {
        self.state = PolicyState::with_previous_target(previous_target);
        self
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
        for (target, outcome) in round.pods {
            self.window.record(now, &target, outcome.ok());
        }
        for (target, outcome) in round.gpus {
            self.window.record_gpu(now, &target, outcome.ok());
        }
    }

    /// The fleet's signals at `now` from what has been recorded.
    pub fn signals(&self, now: Duration) -> FleetSignals {
        self.window.compute(now)
    }

    /// Computes the signals at `now` and decides on them.
    pub fn decide(&mut self, now: Duration) -> Step {
        let signals = self.window.compute(now);
        let decision = match &mut self.proactive {
            Some(p) => p.decide(&self.policy, now, &signals, &mut self.state),
            None => self.policy.decide(now, &signals, &mut self.state),
        };
        Step { signals, decision }
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
