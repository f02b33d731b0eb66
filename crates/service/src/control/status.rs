//! What one ScaledObject's loop publishes after every cycle, and the rule that turns it into
//! an answer for KEDA (a decision, or "unavailable" naming the failing targets).

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::scale_target::{Replicas, ScaleTargetRef};
use vllm_keda_core::policy::proactive::Learned;
use vllm_keda_core::policy::proactive::hindsight::StaticComparison;
use vllm_keda_core::policy::{CurrentReplicas, Decision, Reason, ReplicaSource};
use vllm_keda_core::scaler::{Completeness, View};
use vllm_keda_core::signals::FleetSignals;

/// Health of one scrape target after the latest cycle.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetHealth {
    /// The target's URL.
    pub url: String,
    /// Whether the latest scrape and parse succeeded.
    pub healthy: bool,
    /// Result label of the latest scrape (`ok`, `timeout`, `connect_error`, ...).
    pub result: &'static str,
    /// The latest error, when failing.
    pub error: Option<String>,
    /// Consecutive failed cycles (0 when healthy).
    pub consecutive_failures: u32,
    /// Unix time of the last successful scrape, if any.
    pub last_success_unix_seconds: Option<f64>,
}

/// One entry of the decision history: a decision and how long it has held.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionRecord {
    /// Unix time when this decision (target, desired, activity, reason) was first made.
    pub first_unix_seconds: f64,
    /// Unix time when it was last repeated.
    pub last_unix_seconds: f64,
    /// Cycles that produced it.
    pub cycles: u64,
    /// What KEDA was told: full, partial-held or unavailable.
    pub answer: AnswerKind,
    /// Why the answer was `Unavailable`, or which targets a partial-held answer lacked.
    pub answer_detail: Option<String>,
    /// Which targets were observed, which were not and why (the latest cycle's).
    pub view: Option<View>,
    /// The decision (its latest explanation).
    pub decision: Decision,
}

/// The scale target as read through the Kubernetes API (shown on `/debug`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ScaleTargetStatus {
    /// The ScaledObject's `spec.scaleTargetRef`, once read.
    pub target: Option<ScaleTargetRef>,
    /// Its `/scale` subresource at the last successful read.
    pub replicas: Option<Replicas>,
    /// Unix time of that read.
    pub read_unix_seconds: Option<f64>,
    /// Why the latest read failed (`None` after a success).
    pub error: Option<String>,
}

/// The proactive policy's learning kept in a ConfigMap (`--learned-state-configmap`), as
/// `/debug` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LearnedStateStatus {
    /// `NAMESPACE/NAME` of the ConfigMap.
    pub configmap: String,
    /// This trigger's key in it.
    pub key: String,
    /// What the read at the loop's start found: what was inherited, that nothing was kept,
    /// that the record was too old, or why the read failed (`None` before it finished).
    pub read: Option<String>,
    /// Unix time of this loop's last successful write.
    pub written_unix_seconds: Option<f64>,
    /// How many of the demand history's oldest minutes the last write left out, so that the
    /// ConfigMap, shared by every trigger, stays under its size limit (0: none).
    pub history_minutes_left_out: usize,
    /// The last record adopted while running: a peer's, with a longer history (`None` before
    /// any).
    pub adopted: Option<String>,
    /// How many records this loop adopted while running.
    pub adoptions: u64,
    /// How many other keys' records, written more than a day before and so never inherited,
    /// this loop's writes removed from the ConfigMap.
    pub expired_records_removed: u64,
    /// How many of this loop's writes found that another pod had written the ConfigMap since
    /// the read they were based on, and were not made (each followed by a new read).
    pub conflicts: u64,
    /// Why the latest exchange (a read, then a write) failed (`None` after a success).
    pub error: Option<String>,
}

/// What KEDA is told, as `/debug` and the decision log name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerKind {
    /// A decision made on every known target.
    Full,
    /// A decision made on the targets that answered, scale-in held while some do not.
    PartialHeld,
    /// `Unavailable`: no decision can be trusted (KEDA's `fallback` applies).
    Unavailable,
}

impl AnswerKind {
    /// `full`, `partial_held` or `unavailable`.
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerKind::Full => "full",
            AnswerKind::PartialHeld => "partial_held",
            AnswerKind::Unavailable => "unavailable",
        }
    }
}

/// The state one loop publishes after each cycle; RPCs answer from it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    /// Completed cycles (0 until the first scrape finished).
    pub cycles: u64,
    /// Whether discovery of the vLLM targets has succeeded at least once since the loop
    /// started (until then the fleet is unknown, not empty).
    pub discovered: bool,
    /// Which targets the latest decision observed, which it did not and why.
    pub view: Option<View>,
    /// The scale target's replicas given to the policy as its restart floor (from the
    /// Kubernetes API, or the pods observed when it cannot be read).
    pub current_replicas: Option<CurrentReplicas>,
    /// The scale target as read through the Kubernetes API (`None` without an API).
    pub scale_target: Option<ScaleTargetStatus>,
    /// Every vLLM target of the latest cycle with its health.
    pub targets: Vec<TargetHealth>,
    /// Every DCGM exporter target of the latest cycle with its health.
    pub gpu_targets: Vec<TargetHealth>,
    /// Set while discovery fails (the previous target list stays in use).
    pub discovery_error: Option<String>,
    /// Signals of the latest cycle.
    pub signals: Option<FleetSignals>,
    /// The latest decision.
    pub decision: Option<Decision>,
    /// The proactive policy's comparison with static fleets over the last day.
    pub hindsight: Option<StaticComparison>,
    /// What the proactive policy has learned (`None` under the guide's policy).
    pub learned: Option<Learned>,
    /// Where that learning is kept (`None` without `--learned-state-configmap`).
    pub learned_state: Option<LearnedStateStatus>,
    /// Distinct decisions, oldest first (bounded).
    pub history: VecDeque<DecisionRecord>,
    /// When the last cycle with at least one healthy target finished.
    #[serde(skip)]
    pub last_healthy_at: Option<Instant>,
    /// The same, as Unix time.
    pub last_healthy_unix_seconds: Option<f64>,
}

/// Why there is no answer to give KEDA.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

impl Status {
    /// The latest decision if it can be trusted at `now`, else why not.
    ///
    /// The rule: the scaler never answers a replica target from a partial or empty view of the
    /// fleet as if it were complete. `Unavailable` (so KEDA's `fallback` applies) when no
    /// cycle has finished yet; when discovery has never succeeded (the fleet is unknown); when
    /// discovery finds no pod, unless the Kubernetes API says the scale target asks for zero
    /// replicas; and when targets are known but none gave usable data within `stale_after`
    /// (or none ever did). A partial view answers the decision, which holds scale-in.
    pub fn answer(&self, now: Instant, stale_after: Duration) -> Result<&Decision, Unavailable> {
        let Some(decision) = self.decision.as_ref() else {
            return Err(Unavailable(
                "no scrape cycle has finished yet; retry shortly".into(),
            ));
        };
        if !self.discovered {
            return Err(Unavailable(format!(
                "target discovery has not succeeded since this loop started ({}): the fleet is \
                 unknown, not empty",
                self.discovery_error
                    .as_deref()
                    .unwrap_or("no discovery error recorded")
            )));
        }
        let completeness = self
            .view
            .as_ref()
            .map_or(Completeness::NoTargets, |v| v.completeness);
        if completeness == Completeness::NoTargets || self.targets.is_empty() {
            if self.scale_target_asks_for_zero() {
                return Ok(decision);
            }
            let mut why = "discovery found no vLLM pod: an empty list cannot be told from pods \
                           that are all starting or not ready"
                .to_owned();
            if let Some(error) = &self.discovery_error {
                why.push_str(&format!(" (the latest discovery failed: {error})"));
            }
            if self
                .current_replicas
                .is_none_or(|c| c.source != ReplicaSource::ScaleSubresource)
            {
                why.push_str(
                    "; with --kube-api and permission to read the scale target, a target at \
                     zero replicas is answered as such",
                );
            }
            return Err(Unavailable(why));
        }
        let stale = match self.last_healthy_at {
            None => true,
            Some(at) => now.saturating_duration_since(at) > stale_after,
        };
        if !stale {
            return Ok(decision);
        }
        let since = match self.last_healthy_at {
            None => "since start".to_owned(),
            Some(at) => format!(
                "for {:.1} s",
                now.saturating_duration_since(at).as_secs_f64()
            ),
        };
        Err(Unavailable(format!(
            "no known target gave usable data {since}: {}",
            self.failing_summary(5)
        )))
    }

    /// What KEDA is told at `now`: full, partial-held or unavailable (with the reason).
    pub fn answer_kind(&self, now: Instant, stale_after: Duration) -> (AnswerKind, Option<String>) {
        match self.answer(now, stale_after) {
            Err(Unavailable(why)) => (AnswerKind::Unavailable, Some(why)),
            Ok(_) => match self.view.as_ref().map(|v| v.completeness) {
                Some(Completeness::Full) | Some(Completeness::NoTargets) => {
                    (AnswerKind::Full, None)
                }
                _ => (
                    AnswerKind::PartialHeld,
                    self.view.as_ref().map(View::summary),
                ),
            },
        }
    }

    /// Whether the scale target, read through the Kubernetes API, asks for zero replicas.
    fn scale_target_asks_for_zero(&self) -> bool {
        self.current_replicas
            .is_some_and(|c| c.source == ReplicaSource::ScaleSubresource && c.spec == 0)
    }

    /// "url (result: error), ..." for the first `limit` failing targets.
    pub fn failing_summary(&self, limit: usize) -> String {
        let failing: Vec<&TargetHealth> = self.targets.iter().filter(|t| !t.healthy).collect();
        let mut parts: Vec<String> = failing
            .iter()
            .take(limit)
            .map(|t| match &t.error {
                Some(e) => format!("[{}] {e}", t.result),
                None => format!("[{}] {}", t.result, t.url),
            })
            .collect();
        if failing.len() > limit {
            parts.push(format!("and {} more", failing.len() - limit));
        }
        parts.join(", ")
    }

    /// Appends `decision` (answered as `answer`, over `view`) at `unix_seconds` to the
    /// bounded history, folding repeats of the same decision, answer and unobserved targets.
    pub fn push_history(
        &mut self,
        decision: &Decision,
        answer: AnswerKind,
        answer_detail: Option<String>,
        view: Option<View>,
        unix_seconds: f64,
        limit: usize,
    ) {
        let record = DecisionRecord {
            first_unix_seconds: unix_seconds,
            last_unix_seconds: unix_seconds,
            cycles: 1,
            answer,
            answer_detail,
            view,
            decision: decision.clone(),
        };
        if let Some(last) = self.history.back_mut() {
            if same_record(last, &record) {
                last.last_unix_seconds = unix_seconds;
                last.cycles += 1;
                last.decision = record.decision;
                last.answer_detail = record.answer_detail;
                last.view = record.view;
                return;
            }
        }
        self.history.push_back(record);
        while self.history.len() > limit.max(1) {
            self.history.pop_front();
        }
    }
}

fn unobserved_targets(view: Option<&View>) -> Vec<&str> {
    view.map(|v| v.unobserved.iter().map(|u| u.target.as_str()).collect())
        .unwrap_or_default()
}

fn same_record(a: &DecisionRecord, b: &DecisionRecord) -> bool {
    let (x, y) = (&a.decision, &b.decision);
    x.target_replicas == y.target_replicas
        && x.desired_replicas == y.desired_replicas
        && x.active == y.active
        && x.reason == y.reason
        && a.answer == b.answer
        && unobserved_targets(a.view.as_ref()) == unobserved_targets(b.view.as_ref())
}

/// The reason code as its snake_case label (`hold`, `queue_depth`, ...).
pub fn reason_label(reason: Reason) -> String {
    reason.as_str().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(target: u32) -> Decision {
        Decision {
            at: Duration::ZERO,
            target_replicas: target,
            desired_replicas: target,
            ready_replicas: target,
            active: true,
            mode: vllm_keda_core::config::Mode::Active,
            reason: Reason::Hold,
            explanation: String::new(),
        }
    }

    fn target(url: &str, healthy: bool) -> TargetHealth {
        TargetHealth {
            url: url.into(),
            healthy,
            result: if healthy { "ok" } else { "connect_error" },
            error: (!healthy).then(|| "scraping http://a/metrics: cannot connect".to_owned()),
            consecutive_failures: u32::from(!healthy),
            last_success_unix_seconds: None,
        }
    }

    fn view(completeness: Completeness, observed: &[&str], unobserved: &[&str]) -> View {
        View {
            completeness,
            observed: observed.iter().map(|t| (*t).to_owned()).collect(),
            unobserved: unobserved
                .iter()
                .map(|t| vllm_keda_core::scaler::Unobserved {
                    target: (*t).to_owned(),
                    why: vllm_keda_core::scaler::Missing::Fetch,
                })
                .collect(),
        }
    }

    /// A status after one cycle over `targets`, discovery having succeeded.
    fn cycled(targets: Vec<TargetHealth>, completeness: Completeness) -> Status {
        let observed: Vec<&str> = targets
            .iter()
            .filter(|t| t.healthy)
            .map(|t| t.url.as_str())
            .collect();
        let unobserved: Vec<&str> = targets
            .iter()
            .filter(|t| !t.healthy)
            .map(|t| t.url.as_str())
            .collect();
        let view = view(completeness, &observed, &unobserved);
        Status {
            cycles: 1,
            discovered: true,
            decision: Some(decision(3)),
            view: Some(view),
            targets,
            ..Status::default()
        }
    }

    #[test]
    fn answers_until_targets_are_stale_then_names_them() {
        let stale_after = Duration::from_secs(6);
        let base = Instant::now();
        let s = Status::default();
        assert!(s.answer(base, stale_after).is_err());
        let mut s = cycled(
            vec![target("http://a/metrics", false)],
            Completeness::Unavailable,
        );
        let err = s.answer(base, stale_after).unwrap_err();
        assert!(err.0.contains("since start"), "{err}");
        assert!(
            err.0
                .contains("[connect_error] scraping http://a/metrics: cannot connect"),
            "{err}"
        );

        s.last_healthy_at = Some(base);
        let later = base + Duration::from_secs(6);
        assert_eq!(s.answer(later, stale_after).unwrap().target_replicas, 3);
        let (kind, _) = s.answer_kind(later, stale_after);
        assert_eq!(kind, AnswerKind::PartialHeld);
        let err = s
            .answer(base + Duration::from_secs(7), stale_after)
            .unwrap_err();
        assert!(err.0.contains("for 7.0 s"), "{err}");
    }

    #[test]
    fn discovery_that_never_succeeded_is_unavailable_naming_the_error() {
        let mut s = cycled(Vec::new(), Completeness::NoTargets);
        s.discovered = false;
        s.discovery_error = Some("resolving \"vllm.svc\": dns lookup failed".into());
        let err = s
            .answer(Instant::now(), Duration::from_secs(6))
            .unwrap_err();
        assert!(err.0.contains("has not succeeded"), "{err}");
        assert!(err.0.contains("dns lookup failed"), "{err}");
    }

    #[test]
    fn an_empty_fleet_is_unavailable_unless_the_scale_target_asks_for_zero() {
        let now = Instant::now();
        let stale_after = Duration::from_secs(6);
        let mut s = cycled(Vec::new(), Completeness::NoTargets);
        let err = s.answer(now, stale_after).unwrap_err();
        assert!(err.0.contains("discovery found no vLLM pod"), "{err}");
        assert!(err.0.contains("--kube-api"), "{err}");
        s.current_replicas = Some(CurrentReplicas {
            spec: 2,
            ready: None,
            source: ReplicaSource::ScaleSubresource,
        });
        assert!(s.answer(now, stale_after).is_err());
        s.current_replicas = Some(CurrentReplicas {
            spec: 0,
            ready: None,
            source: ReplicaSource::ScaleSubresource,
        });
        assert_eq!(s.answer(now, stale_after).unwrap().target_replicas, 3);
        s.current_replicas = Some(CurrentReplicas {
            spec: 0,
            ready: None,
            source: ReplicaSource::ObservedPods,
        });
        assert!(s.answer(now, stale_after).is_err());
    }

    #[test]
    fn a_partial_view_answers_held_and_a_full_one_full() {
        let now = Instant::now();
        let stale_after = Duration::from_secs(6);
        let mut s = cycled(
            vec![
                target("http://a/metrics", true),
                target("http://b/metrics", false),
            ],
            Completeness::PartialHeld,
        );
        s.last_healthy_at = Some(now);
        let (kind, detail) = s.answer_kind(now, stale_after);
        assert_eq!(kind, AnswerKind::PartialHeld);
        assert!(detail.unwrap().contains("http://b/metrics"));
        let mut s = cycled(vec![target("http://a/metrics", true)], Completeness::Full);
        s.last_healthy_at = Some(now);
        assert_eq!(s.answer_kind(now, stale_after), (AnswerKind::Full, None));
    }

    #[test]
    fn history_folds_repeats_and_stays_bounded() {
        let mut s = Status::default();
        let push = |s: &mut Status, target: u32, answer: AnswerKind, at: f64| {
            s.push_history(&decision(target), answer, None, None, at, 3);
        };
        push(&mut s, 1, AnswerKind::Full, 1.0);
        push(&mut s, 1, AnswerKind::Full, 2.0);
        assert_eq!(s.history.len(), 1);
        assert_eq!(s.history[0].cycles, 2);
        assert_eq!(s.history[0].last_unix_seconds, 2.0);
        // The same decision answered differently is a new record.
        push(&mut s, 1, AnswerKind::Unavailable, 2.5);
        assert_eq!(s.history.len(), 2);
        for (i, t) in [2, 3, 4, 5].into_iter().enumerate() {
            push(&mut s, t, AnswerKind::Full, 3.0 + i as f64);
        }
        let targets: Vec<u32> = s
            .history
            .iter()
            .map(|r| r.decision.target_replicas)
            .collect();
        assert_eq!(targets, vec![3, 4, 5]);
    }

    #[test]
    fn reason_labels_are_snake_case() {
        assert_eq!(reason_label(Reason::Hold), "hold");
    }
}
