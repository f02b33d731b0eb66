//! The verdict: which step saturated the deployment, the queue-depth threshold to scale on and
//! the per-replica capacity, from measured step results.
//!
//! Owns: the step-result data model and the pure decision rules. Does not own: measuring
//! (see the generator, client and monitor) or presenting (see the report). Pure: no I/O, no clock.
//!
//! Rules, following the source guide's method: a step is saturated when the queue no longer
//! returns to about zero while load is offered (mean queue per replica over the second half of
//! the step above a tolerance), or when latency bends (client P95 e2e above a factor of the best
//! earlier step), or when more than 1 % of requests fail. The saturation point is the first
//! saturated step; the threshold N is the queue depth seen in the step just before it (never
//! below a floor); the capacity is what that last healthy step carried.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// P50/P95/P99 in seconds; `None` when nothing was observed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median, seconds.
    pub p50: Option<f64>,
    /// 95th percentile, seconds.
    pub p95: Option<f64>,
    /// 99th percentile, seconds.
    pub p99: Option<f64>,
}

/// Queue depth (`vllm:num_requests_waiting`, summed over pods) seen during one step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueStats {
    /// Scrapes that answered during the load window.
    pub samples: usize,
    /// Mean over the load window.
    pub mean: Option<f64>,
    /// Largest value seen in the load window.
    pub max: Option<f64>,
    /// Mean over the second half of the load window (the trend after start-up).
    pub second_half_mean: Option<f64>,
    /// Last value seen in the load window.
    pub at_end: Option<f64>,
    /// Last value seen in the rest after the step (did it drain?).
    pub after_rest: Option<f64>,
}

/// What the servers' own `/metrics` said about one step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerStep {
    /// Pods whose scrape answered (mean over the step, rounded).
    pub pods_healthy: usize,
    /// Queue depth.
    pub queue: QueueStats,
    /// Mean running requests.
    pub running_mean: Option<f64>,
    /// Largest running requests.
    pub running_max: Option<f64>,
    /// Mean KV-cache usage 0..1 (max across pods at each scrape).
    pub kv_usage_mean: Option<f64>,
    /// Largest KV-cache usage 0..1.
    pub kv_usage_max: Option<f64>,
    /// Server-side time to first token over the step.
    pub ttft: Percentiles,
    /// Server-side inter-token latency over the step.
    pub itl: Percentiles,
    /// Server-side end-to-end latency over the step.
    pub e2e: Percentiles,
    /// Finished requests per second (server side).
    pub requests_per_second: Option<f64>,
    /// Prompt tokens per second (server side).
    pub prompt_tokens_per_second: Option<f64>,
    /// Generation tokens per second (server side).
    pub generation_tokens_per_second: Option<f64>,
}

/// Everything measured in one step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    /// 0-based step number.
    pub index: usize,
    /// Offered requests per second.
    pub offered_rps: f64,
    /// Length of the load window actually run, seconds (shorter when interrupted).
    pub duration_seconds: f64,
    /// The step was cut short (Ctrl-C).
    pub partial: bool,
    /// Requests sent.
    pub sent: u64,
    /// Requests sent per second over the span between the step's first and last send (the
    /// offered rate when every request left on time).
    pub achieved_rps: f64,
    /// Requests that completed successfully.
    pub ok: u64,
    /// Requests that failed.
    pub errors: u64,
    /// Failures by kind (`connect`, `timeout`, `status_503`, `stream`, ...).
    pub error_kinds: BTreeMap<String, u64>,
    /// Requests not sent because the in-flight limit was reached.
    pub dropped: u64,
    /// Requests still unanswered when the step's rest ended.
    pub unfinished: u64,
    /// Successful completions per second (ok / duration).
    pub ok_rps: f64,
    /// Successful completions per second during the load window, whichever step sent them
    /// (the throughput; the capacity when saturated).
    pub completed_rps: f64,
    /// Prompt tokens per second of the successful requests.
    pub prompt_tokens_per_second: f64,
    /// Output tokens per second of the successful requests.
    pub output_tokens_per_second: f64,
    /// Client-side time to first token.
    pub ttft: Percentiles,
    /// Client-side inter-token latency.
    pub itl: Percentiles,
    /// Client-side end-to-end latency.
    pub e2e: Percentiles,
    /// Lateness of dispatch against the schedule (the generator's own timing).
    pub send_lag: Percentiles,
    /// Lateness of the request tasks' start against the schedule (includes a busy client
    /// runtime: the actual send time).
    pub start_lag: Percentiles,
    /// Server-side view, when `/metrics` answered.
    pub server: Option<ServerStep>,
}

impl StepResult {
    /// Failed plus dropped requests as a fraction of requests due.
    pub fn error_rate(&self) -> f64 {
        let due = self.sent + self.dropped;
        if due == 0 {
            0.0
        } else {
            (self.errors + self.dropped) as f64 / due as f64
        }
    }
}

/// Tunables of the rules.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerdictSettings {
    /// Replicas behind the URL (capacity and queue are divided by it).
    pub replicas: usize,
    /// Queue depth per replica still counted as "about zero".
    pub queue_zero_tolerance: f64,
    /// Latency has bent when client P95 e2e exceeds this factor times the best earlier step.
    pub latency_bend_factor: f64,
    /// Largest tolerated error rate (0..1).
    pub max_error_rate: f64,
    /// The smallest queueDepthPerReplica recommended (a smaller one makes scaling jumpy).
    pub min_queue_depth_per_replica: u32,
    /// The latency SLO the capacity within the SLO is measured at (none: not measured).
    pub slo: Option<LatencySlo>,
}

/// A P95 latency SLO: TTFT, ITL or both (client side, seconds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencySlo {
    /// P95 time to first token at most this, seconds.
    pub ttft_seconds: Option<f64>,
    /// P95 inter-token latency at most this, seconds.
    pub itl_seconds: Option<f64>,
}

impl LatencySlo {
    /// "P95 TTFT <= 2 s, P95 ITL <= 0.07 s".
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(t) = self.ttft_seconds {
            parts.push(format!("P95 TTFT <= {t} s"));
        }
        if let Some(t) = self.itl_seconds {
            parts.push(format!("P95 ITL <= {t} s"));
        }
        parts.join(", ")
    }
}

/// What one replica serves within a latency SLO: the rate of the last step, in order, whose
/// client-side P95 TTFT and ITL stayed within it (and whose errors stayed within the limit),
/// before the first step that broke it. The guide's saturation (queue, e2e bend) does not
/// enter it: it is the capacity "at the SLO" the proactive policy learns from the fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloCapacity {
    /// The SLO.
    pub slo: LatencySlo,
    /// The last step within it (none: the first step already broke it).
    pub step: Option<usize>,
    /// Its offered rate.
    pub offered_rps: Option<f64>,
    /// Successful completions per second per replica at that step.
    pub rps_per_replica: Option<f64>,
    /// The first step that broke the SLO (none: every step held it).
    pub broken_at: Option<usize>,
    /// Its offered rate.
    pub broken_rps: Option<f64>,
    /// Why it broke (empty when every step held it).
    pub reasons: Vec<String>,
}

impl Default for VerdictSettings {
    fn default() -> Self {
        Self {
            replicas: 1,
            queue_zero_tolerance: 1.0,
            latency_bend_factor: 2.0,
            max_error_rate: 0.01,
            min_queue_depth_per_replica: 3,
            slo: None,
        }
    }
}

/// The judgement of one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepJudgement {
    /// 0-based step number.
    pub index: usize,
    /// Offered requests per second.
    pub offered_rps: f64,
    /// Whether the step saturated the deployment.
    pub saturated: bool,
    /// Why (empty when healthy).
    pub reasons: Vec<String>,
}

/// The outcome of a load test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The first saturated step.
    pub saturation_step: Option<usize>,
    /// Its offered rate.
    pub saturation_rps: Option<f64>,
    /// The last healthy step before saturation (or the last step when none saturated).
    pub last_healthy_step: Option<usize>,
    /// Recommended `queueDepthPerReplica`.
    pub queue_depth_per_replica: Option<u32>,
    /// How the recommendation was derived.
    pub queue_depth_basis: String,
    /// Requests per second one replica carried at the last healthy step.
    pub capacity_rps_per_replica: Option<f64>,
    /// Prompt plus output tokens per second one replica carried then.
    pub capacity_tokens_per_second_per_replica: Option<f64>,
    /// Output tokens per second one replica carried then.
    pub capacity_output_tokens_per_second_per_replica: Option<f64>,
    /// Best completion rate per replica during any step's load window (the ceiling when
    /// saturated).
    pub peak_ok_rps_per_replica: Option<f64>,
    /// Client P95 e2e latency at the last healthy step, seconds.
    pub healthy_e2e_p95_seconds: Option<f64>,
    /// Client P95 time to first token at the last healthy step, seconds.
    pub healthy_ttft_p95_seconds: Option<f64>,
    /// Client P95 inter-token latency at the last healthy step, seconds.
    pub healthy_itl_p95_seconds: Option<f64>,
    /// One-line summary.
    pub summary: String,
    /// Per step.
    pub steps: Vec<StepJudgement>,
    /// The capacity within the latency SLO, when one was given.
    #[serde(default)]
    pub slo_capacity: Option<SloCapacity>,
}

/// Why `step` breaks `slo` (empty: within it).
fn slo_breaks(step: &StepResult, slo: &LatencySlo, max_error_rate: f64) -> Vec<String> {
    let mut reasons = Vec::new();
    for (what, limit, p95) in [
        ("TTFT", slo.ttft_seconds, step.ttft.p95),
        ("ITL", slo.itl_seconds, step.itl.p95),
    ] {
        let Some(limit) = limit else { continue };
        match p95 {
            Some(p) if p <= limit => {}
            Some(p) => reasons.push(format!("P95 {what} {p:.3} s > SLO {limit} s")),
            None => reasons.push(format!("no {what} measured")),
        }
    }
    reasons.extend(errors_over(step, max_error_rate));
    reasons
}

/// Why `step` failed too many requests, if it did.
fn errors_over(step: &StepResult, max_error_rate: f64) -> Option<String> {
    let rate = step.error_rate();
    (rate > max_error_rate).then(|| {
        format!(
            "errors: {:.1} % of requests failed (limit {:.1} %)",
            rate * 100.0,
            max_error_rate * 100.0
        )
    })
}

/// The capacity within `slo`: see [`SloCapacity`].
pub fn slo_capacity(steps: &[StepResult], settings: &VerdictSettings) -> Option<SloCapacity> {
    let slo = settings.slo?;
    let replicas = settings.replicas.max(1) as f64;
    let broken = steps.iter().enumerate().find_map(|(i, s)| {
        let r = slo_breaks(s, &slo, settings.max_error_rate);
        (!r.is_empty()).then_some((i, r))
    });
    let within = match &broken {
        Some((i, _)) => i.checked_sub(1),
        None => steps.len().checked_sub(1),
    };
    Some(SloCapacity {
        slo,
        step: within,
        offered_rps: within.map(|i| steps[i].offered_rps),
        rps_per_replica: within.map(|i| steps[i].ok_rps / replicas),
        broken_at: broken.as_ref().map(|b| b.0),
        broken_rps: broken.as_ref().map(|b| steps[b.0].offered_rps),
        reasons: broken.map(|b| b.1).unwrap_or_default(),
    })
}

/// Judges one step against the earlier ones.
pub fn judge_step(
    step: &StepResult,
    earlier: &[StepResult],
    settings: &VerdictSettings,
) -> StepJudgement {
    let replicas = settings.replicas.max(1) as f64;
    let mut reasons = Vec::new();
    if let Some(queue) = step.server.as_ref().and_then(|s| s.queue.second_half_mean) {
        let per_replica = queue / replicas;
        if per_replica > settings.queue_zero_tolerance {
            reasons.push(format!(
                "queue stayed up: mean {per_replica:.1} per replica over the second half of the step (tolerance {})",
                settings.queue_zero_tolerance
            ));
        }
    }
    let best_earlier = earlier
        .iter()
        .filter_map(|s| s.e2e.p95)
        .filter(|v| *v > 0.0)
        .min_by(f64::total_cmp);
    let bent = match (step.e2e.p95, best_earlier) {
        (Some(p95), Some(best)) if p95 > settings.latency_bend_factor * best => Some((p95, best)),
        _ => None,
    };
    if let Some((p95, best)) = bent {
        reasons.push(format!(
            "latency bent: P95 e2e {p95:.3} s is {:.1}x the best earlier step ({best:.3} s)",
            p95 / best
        ));
    }
    reasons.extend(errors_over(step, settings.max_error_rate));
    StepJudgement {
        index: step.index,
        offered_rps: step.offered_rps,
        saturated: !reasons.is_empty(),
        reasons,
    }
}

/// Judges every step and derives the recommendation.
pub fn decide(steps: &[StepResult], settings: &VerdictSettings) -> Verdict {
    let replicas = settings.replicas.max(1) as f64;
    let judgements: Vec<StepJudgement> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| judge_step(s, &steps[..i], settings))
        .collect();
    let first_saturated = judgements.iter().position(|j| j.saturated);
    let healthy_index = match first_saturated {
        Some(0) => None,
        Some(i) => Some(i - 1),
        None if steps.is_empty() => None,
        None => Some(steps.len() - 1),
    };
    let healthy = healthy_index.map(|i| &steps[i]);
    let peak_ok_rps_per_replica = steps
        .iter()
        .map(|s| s.completed_rps / replicas)
        .filter(|v| *v > 0.0)
        .max_by(f64::total_cmp);

    let floor = settings.min_queue_depth_per_replica.max(1);
    let (queue_depth_per_replica, queue_depth_basis) = match healthy {
        None if steps.is_empty() => (None, "no steps were measured".to_string()),
        None => (
            None,
            "the first step already saturated: rerun with lower rates to find the threshold"
                .to_string(),
        ),
        Some(h) => match h.server.as_ref().and_then(|s| s.queue.max) {
            Some(max) => {
                let per_replica = (max / replicas).ceil().max(0.0) as u32;
                let n = per_replica.max(floor);
                let basis = if per_replica >= floor {
                    format!(
                        "largest queue per replica at {} req/s, the last step before saturation",
                        h.offered_rps
                    )
                } else {
                    format!(
                        "the queue stayed at {per_replica} per replica at {} req/s (the last step before saturation); \
                         raised to the floor of {floor}",
                        h.offered_rps
                    )
                };
                (Some(n), basis)
            }
            None => (
                None,
                "no queue depth was scraped: pass --metrics-url for each vLLM pod".to_string(),
            ),
        },
    };

    let summary = match (first_saturated, healthy) {
        (Some(i), Some(h)) => format!(
            "saturation at {} req/s (step {}): {}; last healthy step {} req/s",
            steps[i].offered_rps,
            i + 1,
            judgements[i].reasons.join("; "),
            h.offered_rps
        ),
        (Some(i), None) => format!(
            "saturated at the first step ({} req/s): {}; rerun with lower rates",
            steps[i].offered_rps,
            judgements[i].reasons.join("; ")
        ),
        (None, Some(h)) => format!(
            "no saturation up to {} req/s: capacity is at least that; rerun with higher rates to find it",
            h.offered_rps
        ),
        (None, None) => "no steps were measured".to_string(),
    };

    Verdict {
        saturation_step: first_saturated,
        saturation_rps: first_saturated.map(|i| steps[i].offered_rps),
        last_healthy_step: healthy_index,
        queue_depth_per_replica,
        queue_depth_basis,
        capacity_rps_per_replica: healthy.map(|h| h.ok_rps / replicas),
        capacity_tokens_per_second_per_replica: healthy
            .map(|h| (h.prompt_tokens_per_second + h.output_tokens_per_second) / replicas),
        capacity_output_tokens_per_second_per_replica: healthy
            .map(|h| h.output_tokens_per_second / replicas),
        peak_ok_rps_per_replica,
        healthy_e2e_p95_seconds: healthy.and_then(|h| h.e2e.p95),
        healthy_ttft_p95_seconds: healthy.and_then(|h| h.ttft.p95),
        healthy_itl_p95_seconds: healthy.and_then(|h| h.itl.p95),
        summary,
        steps: judgements,
        slo_capacity: slo_capacity(steps, settings),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic step: below `capacity` the queue stays near zero and latency flat; above it
    /// the queue grows by the excess over the step and latency climbs.
    fn step(index: usize, rps: f64, capacity: f64) -> StepResult {
        let excess = (rps - capacity).max(0.0);
        let queue_growth = excess * 30.0;
        let ok_rps = rps.min(capacity);
        StepResult {
            index,
            offered_rps: rps,
            duration_seconds: 60.0,
            sent: (rps * 60.0) as u64,
            achieved_rps: rps,
            ok: (ok_rps * 60.0) as u64,
            ok_rps,
            completed_rps: ok_rps,
            prompt_tokens_per_second: ok_rps * 100.0,
            output_tokens_per_second: ok_rps * 20.0,
            e2e: Percentiles {
                p50: Some(1.0),
                p95: Some(1.2 + queue_growth / capacity),
                p99: Some(1.3 + queue_growth / capacity),
            },
            server: Some(ServerStep {
                pods_healthy: 1,
                queue: QueueStats {
                    samples: 60,
                    mean: Some(queue_growth / 2.0 + rps / capacity),
                    max: Some(queue_growth + 2.0 * rps / capacity),
                    second_half_mean: Some(queue_growth * 0.75 + 0.2 * rps / capacity),
                    at_end: Some(queue_growth),
                    after_rest: Some(0.0),
                },
                ..ServerStep::default()
            }),
            ..StepResult::default()
        }
    }

    fn steps(capacity: f64) -> Vec<StepResult> {
        (1..=7)
            .map(|k| step(k - 1, 10.0 * k as f64, capacity))
            .collect()
    }

    #[test]
    fn saturation_is_the_first_step_past_capacity() {
        let v = decide(&steps(35.0), &VerdictSettings::default());
        assert_eq!(v.saturation_step, Some(3));
        assert_eq!(v.saturation_rps, Some(40.0));
        assert_eq!(v.last_healthy_step, Some(2));
        assert_eq!(v.capacity_rps_per_replica, Some(30.0));
        assert_eq!(v.capacity_tokens_per_second_per_replica, Some(3600.0));
        assert_eq!(v.peak_ok_rps_per_replica, Some(35.0));
        // Queue max at 30 req/s is 2 * 30/35 = 1.7 -> 2, raised to the floor of 3.
        assert_eq!(v.queue_depth_per_replica, Some(3));
        assert!(v.queue_depth_basis.contains("floor"));
        assert!(
            v.steps[3].reasons[0].contains("queue stayed up"),
            "{:?}",
            v.steps[3]
        );
        assert!(v.summary.contains("40 req/s"));
    }

    #[test]
    fn replicas_divide_queue_and_capacity() {
        let mut s = steps(35.0);
        for st in &mut s {
            let server = st.server.as_mut().unwrap();
            server.queue.max = server.queue.max.map(|q| q * 10.0);
        }
        let settings = VerdictSettings {
            replicas: 2,
            ..VerdictSettings::default()
        };
        let v = decide(&s, &settings);
        // Per replica the second-half queue halves: 40 req/s still crosses the tolerance.
        assert_eq!(v.saturation_step, Some(3));
        assert_eq!(v.capacity_rps_per_replica, Some(15.0));
        // Queue max at 30 req/s: 10 * 1.71 / 2 replicas = 8.6 -> 9.
        assert_eq!(v.queue_depth_per_replica, Some(9));
    }

    #[test]
    fn latency_bend_alone_marks_saturation() {
        let mut s = steps(1000.0);
        for st in &mut s {
            st.server = None;
        }
        s[5].e2e.p95 = Some(3.0);
        let v = decide(&s, &VerdictSettings::default());
        assert_eq!(v.saturation_step, Some(5));
        assert!(v.steps[5].reasons[0].contains("latency bent"));
        assert_eq!(v.queue_depth_per_replica, None);
        assert!(v.queue_depth_basis.contains("--metrics-url"));
    }

    #[test]
    fn the_capacity_within_the_slo_is_the_last_step_before_a_p95_breaks_it() {
        // TTFT P95 0.1 s per 10 req/s offered; ITL flat at 20 ms; the guide's saturation (the
        // queue) comes at 40 req/s.
        let mut s = steps(35.0);
        for st in &mut s {
            st.ttft.p95 = Some(st.offered_rps / 100.0);
            st.itl.p95 = Some(0.02);
        }
        let slo = |ttft, itl| VerdictSettings {
            slo: Some(LatencySlo {
                ttft_seconds: ttft,
                itl_seconds: itl,
            }),
            ..VerdictSettings::default()
        };
        let v = decide(&s, &slo(Some(0.25), Some(0.05)));
        let c = v.slo_capacity.unwrap();
        assert_eq!((c.step, c.broken_at), (Some(1), Some(2)));
        assert_eq!(c.rps_per_replica, Some(20.0));
        assert_eq!(c.reasons, vec!["P95 TTFT 0.300 s > SLO 0.25 s"]);
        // The guide's verdict is unchanged by an SLO.
        assert_eq!(v.capacity_rps_per_replica, Some(30.0));
        assert_eq!(c.slo.describe(), "P95 TTFT <= 0.25 s, P95 ITL <= 0.05 s");
        // A looser SLO reads past the guide's saturation: at 40 req/s the server completes
        // its capacity, 35 req/s.
        let c = decide(&s, &slo(Some(0.45), None)).slo_capacity.unwrap();
        assert_eq!((c.step, c.broken_at), (Some(3), Some(4)));
        assert_eq!(c.rps_per_replica, Some(35.0));
        // ITL alone; every step within it.
        let c = decide(&s, &slo(None, Some(0.05))).slo_capacity.unwrap();
        assert_eq!((c.step, c.broken_at), (Some(6), None));
        assert!(c.reasons.is_empty());
        // The first step already over it; a step with nothing measured breaks it too.
        let c = decide(&s, &slo(Some(0.05), None)).slo_capacity.unwrap();
        assert_eq!(
            (c.step, c.rps_per_replica, c.broken_at),
            (None, None, Some(0))
        );
        s[1].itl.p95 = None;
        let c = decide(&s, &slo(None, Some(0.05))).slo_capacity.unwrap();
        assert_eq!(c.broken_at, Some(1));
        assert_eq!(c.reasons, vec!["no ITL measured"]);
        // No SLO, no such capacity.
        assert_eq!(decide(&s, &VerdictSettings::default()).slo_capacity, None);
    }

    #[test]
    fn errors_mark_saturation_and_edge_cases_are_explained() {
        let mut s = steps(1000.0);
        s[2].errors = s[2].sent / 10;
        let v = decide(&s, &VerdictSettings::default());
        assert_eq!(v.saturation_step, Some(2));
        assert!(v.steps[2].reasons[0].contains("errors"));

        let v = decide(&steps(5.0), &VerdictSettings::default());
        assert_eq!(v.saturation_step, Some(0));
        assert_eq!(v.last_healthy_step, None);
        assert_eq!(v.queue_depth_per_replica, None);
        assert!(v.summary.contains("lower rates"));

        let v = decide(&steps(1000.0), &VerdictSettings::default());
        assert_eq!(v.saturation_step, None);
        assert_eq!(v.last_healthy_step, Some(6));
        assert!(v.summary.contains("at least"));

        let v = decide(&[], &VerdictSettings::default());
        assert_eq!(v.summary, "no steps were measured");
    }
}
