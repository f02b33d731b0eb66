//! What one ScaledObject's loop publishes after every cycle, and the rule that turns it into
//! an answer for KEDA (a decision, or "unavailable" naming the failing targets).

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use vllm_keda_core::policy::{Decision, Reason};
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
    /// The decision (its latest explanation).
    pub decision: Decision,
}

/// The state one loop publishes after each cycle; RPCs answer from it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    /// Completed cycles (0 until the first scrape finished).
    pub cycles: u64,
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
    /// Unavailable when no cycle has finished yet, or when targets exist but none has answered
    /// within `stale_after` (or none ever did). An empty target list is not an error: the fleet
    /// is empty and the policy decides what that means.
    pub fn answer(&self, now: Instant, stale_after: Duration) -> Result<&Decision, Unavailable> {
        let Some(decision) = self.decision.as_ref() else {
            return Err(Unavailable(
                "no scrape cycle has finished yet; retry shortly".into(),
            ));
        };
        if self.targets.is_empty() {
            return Ok(decision);
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
            "no scrape target answered {since}: {}",
            self.failing_summary(5)
        )))
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

    /// Appends `decision` at `unix_seconds` to the bounded history, folding repeats.
    pub fn push_history(&mut self, decision: &Decision, unix_seconds: f64, limit: usize) {
        if let Some(last) = self.history.back_mut() {
            if same_decision(&last.decision, decision) {
                last.last_unix_seconds = unix_seconds;
                last.cycles += 1;
                last.decision = decision.clone();
                return;
            }
        }
        self.history.push_back(DecisionRecord {
            first_unix_seconds: unix_seconds,
            last_unix_seconds: unix_seconds,
            cycles: 1,
            decision: decision.clone(),
        });
        while self.history.len() > limit.max(1) {
            self.history.pop_front();
        }
    }
}

fn same_decision(a: &Decision, b: &Decision) -> bool {
    a.target_replicas == b.target_replicas
        && a.desired_replicas == b.desired_replicas
        && a.active == b.active
        && a.reason == b.reason
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

    #[test]
    fn answers_until_targets_are_stale_then_names_them() {
        let stale_after = Duration::from_secs(6);
        let base = Instant::now();
        let mut s = Status::default();
        assert!(s.answer(base, stale_after).is_err());
        s.cycles = 1;
        s.decision = Some(decision(3));
        s.targets = vec![target("http://a/metrics", false)];
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
        let err = s
            .answer(base + Duration::from_secs(7), stale_after)
            .unwrap_err();
        assert!(err.0.contains("for 7.0 s"), "{err}");

        s.targets.clear();
        assert!(s.answer(base + Duration::from_secs(7), stale_after).is_ok());
    }

    #[test]
    fn history_folds_repeats_and_stays_bounded() {
        let mut s = Status::default();
        s.push_history(&decision(1), 1.0, 3);
        s.push_history(&decision(1), 2.0, 3);
        assert_eq!(s.history.len(), 1);
        assert_eq!(s.history[0].cycles, 2);
        assert_eq!(s.history[0].last_unix_seconds, 2.0);
        for (i, t) in [2, 3, 4, 5].into_iter().enumerate() {
            s.push_history(&decision(t), 3.0 + i as f64, 3);
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
