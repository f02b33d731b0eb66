//! What a simulated run cost and what users got: SLO attainment, latency percentiles,
//! GPU-hours, scale events, flaps and reaction time, per policy; rendered as Markdown or JSON.
//!
//! Owns: the per-request SLO judgement and the summary numbers. Does not own: running the
//! fleet ([`super::fleet`]) or plotting.

use std::time::Duration;

use serde::Serialize;
use vllm_keda_core::policy::proactive::hindsight::StaticComparison;

/// What happened to one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestOutcome {
    /// When it arrived.
    pub arrival: Duration,
    /// When its first token was produced (`None` if never).
    pub first_token: Option<Duration>,
    /// When it finished (`None` if it had not finished when the run ended).
    pub finished: Option<Duration>,
    /// Output tokens it asked for.
    pub output_tokens: u32,
    /// The client gave up (its timeout passed) before the request finished; the engine aborted
    /// it. A timed-out request is a miss.
    pub timed_out: bool,
    /// The engine refused it (longer than the model's context): a miss.
    pub rejected: bool,
}

impl RequestOutcome {
    /// Time to first token, seconds.
    pub fn ttft_seconds(&self) -> Option<f64> {
        self.first_token
            .map(|t| t.saturating_sub(self.arrival).as_secs_f64())
    }

    /// End-to-end latency, seconds.
    pub fn e2e_seconds(&self) -> Option<f64> {
        self.finished
            .map(|t| t.saturating_sub(self.arrival).as_secs_f64())
    }

    /// Mean time per output token after the first, seconds (0 for single-token outputs).
    pub fn tpot_seconds(&self) -> Option<f64> {
        let (first, finished) = (self.first_token?, self.finished?);
        if self.output_tokens <= 1 {
            return Some(0.0);
        }
        Some(finished.saturating_sub(first).as_secs_f64() / f64::from(self.output_tokens - 1))
    }
}

/// The service-level objective a request is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SloTargets {
    /// Time to first token (the source guide's normal range tops at 2 s... 3 s; default 2 s).
    pub ttft_seconds: f64,
    /// Mean time per output token (the guide's normal range 30-100 ms; default 100 ms).
    pub tpot_seconds: f64,
    /// End-to-end latency, reported beside the SLO (the guide's example SLO, 5 s).
    pub e2e_seconds: f64,
}

impl Default for SloTargets {
    fn default() -> Self {
        Self {
            ttft_seconds: 2.0,
            tpot_seconds: 0.1,
            e2e_seconds: 5.0,
        }
    }
}

impl SloTargets {
    /// Whether a request met the SLO: finished, TTFT and TPOT both within target.
    pub fn met(&self, outcome: &RequestOutcome) -> bool {
        if outcome.timed_out || outcome.rejected {
            return false;
        }
        match (outcome.ttft_seconds(), outcome.tpot_seconds()) {
            (Some(ttft), Some(tpot)) => ttft <= self.ttft_seconds && tpot <= self.tpot_seconds,
            _ => false,
        }
    }
}

/// A change of the replica count the fleet was asked to run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScaleEvent {
    /// When, seconds since the run's start.
    pub at_seconds: f64,
    /// Replicas before.
    pub from: u32,
    /// Replicas after.
    pub to: u32,
}

/// A scale-in followed by a scale-out within this long counts as a flap.
pub const FLAP_WINDOW: Duration = Duration::from_secs(300);

/// Counts flaps: scale-ins followed by a scale-out within [`FLAP_WINDOW`].
pub fn count_flaps(events: &[ScaleEvent]) -> usize {
    events
        .iter()
        .enumerate()
        .filter(|(i, e)| {
            e.to < e.from
                && events[i + 1..].iter().any(|later| {
                    later.to > later.from
                        && later.at_seconds - e.at_seconds <= FLAP_WINDOW.as_secs_f64()
                })
        })
        .count()
}

/// Seconds from each load step's start to the first scale-out at or after it (steps with no
/// scale-out before the next step are left out).
pub fn reaction_times(steps: &[Duration], events: &[ScaleEvent]) -> Vec<f64> {
    steps
        .iter()
        .enumerate()
        .filter_map(|(i, step)| {
            let start = step.as_secs_f64();
            let end = steps.get(i + 1).map_or(f64::INFINITY, |s| s.as_secs_f64());
            events
                .iter()
                .find(|e| e.to > e.from && e.at_seconds >= start && e.at_seconds < end)
                .map(|e| e.at_seconds - start)
        })
        .collect()
}

/// P50/P95/P99 of a sample set (nearest rank), `None` when empty.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: Option<f64>,
    /// 95th percentile.
    pub p95: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
}

impl Percentiles {
    /// Percentiles of `values` (sorted in place).
    pub fn of(values: &mut [f64]) -> Self {
        values.sort_by(f64::total_cmp);
        let pick = |q: f64| {
            if values.is_empty() {
                return None;
            }
            let rank = (q * values.len() as f64).ceil() as usize;
            Some(values[rank.clamp(1, values.len()) - 1])
        };
        Self {
            p50: pick(0.5),
            p95: pick(0.95),
            p99: pick(0.99),
        }
    }
}

/// One policy's result on one scenario (the JSON object of `simulate --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyReport {
    /// The policy's name (`ours`, `prometheus-keda`, `static:N`, `clairvoyant`, ...).
    pub policy: String,
    /// The scenario's name.
    pub scenario: String,
    /// The seed of the scenario's arrival process (and of the start-up delays).
    pub seed: u64,
    /// The fluid lower bound on GPU-hours for serving every request of the scenario: its work
    /// at a replica's best throughput (see `controllers::fluid_lower_bound_hours`). Not a
    /// policy: no plan serves every request with fewer GPU-hours.
    pub gpu_hours_lower_bound: f64,
    /// The fleet size of a static plan (`static:N`, `static:best`, a static plan the
    /// clairvoyant planner picked); none for autoscaled plans.
    pub static_replicas: Option<u32>,
    /// Requests in the scenario.
    pub requests: usize,
    /// Requests finished before the run ended.
    pub completed: usize,
    /// Requests whose client timed out (each a miss).
    pub timed_out: usize,
    /// Requests the engine refused as longer than its context (each a miss).
    pub rejected: usize,
    /// Share of requests within the TTFT and TPOT targets, 0..1.
    pub slo_attainment: f64,
    /// Share of requests within the end-to-end target, 0..1.
    pub e2e_slo_attainment: f64,
    /// Replica-hours, counting replicas still starting and draining.
    pub gpu_hours: f64,
    /// Of `gpu_hours`, those of replicas withdrawn while still starting (asked for, then
    /// removed before they served a request).
    pub gpu_hours_withdrawn: f64,
    /// Changes of the replica count.
    pub scale_events: usize,
    /// Scale-ins followed by a scale-out within 5 minutes.
    pub flaps: usize,
    /// Largest replica count asked for.
    pub max_replicas: u32,
    /// P95 time to first token, seconds. Requests that never received a first token count
    /// with the time they waited (until their timeout or the run's end): a lower bound on
    /// their TTFT, so the percentile is never flattered by the requests it misses.
    pub ttft_p95_seconds: Option<f64>,
    /// P95 end-to-end latency, seconds.
    pub e2e_p95_seconds: Option<f64>,
    /// TTFT percentiles, seconds.
    pub ttft_seconds: Percentiles,
    /// End-to-end percentiles, seconds.
    pub e2e_seconds: Percentiles,
    /// Mean seconds from a load step to the first scale-out after it (step scenarios).
    pub reaction_seconds_mean: Option<f64>,
    /// The scale events themselves.
    pub events: Vec<ScaleEvent>,
    /// Our policy's own comparison with static fleets at the end of the run (its fluid model
    /// over the demand it saw; compare with the `static:N` rows); absent for the peers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hindsight: Option<StaticComparison>,
    /// For every autoscaled row (ours, the guide's policy and the peers): every static fleet
    /// that dominates it on this scenario and seed by the evaluation's rule (at least 1 point
    /// more SLO attainment with at most 97 % of its GPU-hours), smallest first, each simulated
    /// for the check (`static:best` is the fleet that meets the SLO target, and can be larger
    /// than one that beats a row on both axes); empty when none does, and for the static fleets
    /// and the clairvoyant plan, which are references.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dominated_by_static: Vec<DominatingFleet>,
    /// An autoscaled row the run did not judge against static fleets (`--no-static-judging`):
    /// its empty `dominated_by_static` says nothing.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub statics_not_judged: bool,
}

/// A static fleet that dominates a policy's run: its size and what it reached.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DominatingFleet {
    /// Replicas.
    pub replicas: u32,
    /// Share of requests within the SLO, 0..1.
    pub slo_attainment: f64,
    /// Replica-hours.
    pub gpu_hours: f64,
}

/// Summarises one run.
///
/// `end` is when the run stopped: a request that never received a first token enters the TTFT
/// percentiles with the time it waited, until its timeout or `end`.
pub fn summarise(
    policy: &str,
    outcomes: &[RequestOutcome],
    slo: &SloTargets,
    replica_seconds: f64,
    events: Vec<ScaleEvent>,
    load_steps: &[Duration],
    end: Duration,
) -> PolicyReport {
    let completed = outcomes
        .iter()
        .filter(|o| o.finished.is_some() && !o.timed_out && !o.rejected)
        .count();
    let share = |n: usize| {
        if outcomes.is_empty() {
            1.0
        } else {
            n as f64 / outcomes.len() as f64
        }
    };
    let met = outcomes.iter().filter(|o| slo.met(o)).count();
    let e2e_met = outcomes
        .iter()
        .filter(|o| {
            !o.timed_out && !o.rejected && o.e2e_seconds().is_some_and(|e| e <= slo.e2e_seconds)
        })
        .count();
    let mut ttft: Vec<f64> = outcomes
        .iter()
        .map(|o| {
            o.ttft_seconds().unwrap_or_else(|| {
                // Censored: waited until it gave up or the run ended.
                let until = o.finished.unwrap_or(end).max(o.arrival);
                until.saturating_sub(o.arrival).as_secs_f64()
            })
        })
        .collect();
    let mut e2e: Vec<f64> = outcomes
        .iter()
        .filter_map(RequestOutcome::e2e_seconds)
        .collect();
    let ttft = Percentiles::of(&mut ttft);
    let e2e = Percentiles::of(&mut e2e);
    let reactions = reaction_times(load_steps, &events);
    PolicyReport {
        policy: policy.to_string(),
        scenario: String::new(),
        seed: 0,
        gpu_hours_lower_bound: 0.0,
        static_replicas: None,
        requests: outcomes.len(),
        completed,
        timed_out: outcomes.iter().filter(|o| o.timed_out).count(),
        rejected: outcomes.iter().filter(|o| o.rejected).count(),
        slo_attainment: share(met),
        e2e_slo_attainment: share(e2e_met),
        gpu_hours: replica_seconds / 3600.0,
        gpu_hours_withdrawn: 0.0,
        scale_events: events.len(),
        flaps: count_flaps(&events),
        max_replicas: events.iter().map(|e| e.to.max(e.from)).max().unwrap_or(0),
        ttft_p95_seconds: ttft.p95,
        e2e_p95_seconds: e2e.p95,
        ttft_seconds: ttft,
        e2e_seconds: e2e,
        reaction_seconds_mean: if reactions.is_empty() {
            None
        } else {
            Some(reactions.iter().sum::<f64>() / reactions.len() as f64)
        },
        events,
        hindsight: None,
        dominated_by_static: Vec::new(),
        statics_not_judged: false,
    }
}

fn seconds(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"))
}

/// A Markdown table of one scenario's reports.
pub fn markdown_table(scenario: &str, reports: &[PolicyReport]) -> String {
    let mut out = format!(
        "### {scenario}\n\n| policy | SLO attainment | e2e attainment | GPU-hours | scale events | flaps | max replicas | TTFT p50/p95/p99 s | e2e p50/p95/p99 s | reaction s | static size | timed out |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for r in reports {
        out.push_str(&format!(
            "| {} | {:.2} % | {:.2} % | {:.2} | {} | {} | {} | {} / {} / {} | {} / {} / {} | {} | {} | {} |\n",
            r.policy,
            r.slo_attainment * 100.0,
            r.e2e_slo_attainment * 100.0,
            r.gpu_hours,
            r.scale_events,
            r.flaps,
            r.max_replicas,
            seconds(r.ttft_seconds.p50),
            seconds(r.ttft_seconds.p95),
            seconds(r.ttft_seconds.p99),
            seconds(r.e2e_seconds.p50),
            seconds(r.e2e_seconds.p95),
            seconds(r.e2e_seconds.p99),
            seconds(r.reaction_seconds_mean),
            r.static_replicas.map_or_else(|| "-".to_string(), |n| n.to_string()),
            r.timed_out,
        ));
    }
    if let Some(first) = reports.first() {
        out.push_str(&format!(
            "\nFluid lower bound on GPU-hours: {:.2} (seed {}).\n",
            first.gpu_hours_lower_bound, first.seed
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    #[test]
    fn slo_needs_both_ttft_and_tpot() {
        let slo = SloTargets::default();
        let ok = RequestOutcome {
            arrival: s(0.0),
            first_token: Some(s(1.0)),
            finished: Some(s(10.9)),
            output_tokens: 100,
            timed_out: false,
            rejected: false,
        };
        assert!(slo.met(&ok));
        let slow_first = RequestOutcome {
            first_token: Some(s(2.5)),
            finished: Some(s(5.0)),
            ..ok
        };
        assert!(!slo.met(&slow_first));
        let slow_decode = RequestOutcome {
            finished: Some(s(12.0)),
            ..ok
        };
        assert!(!slo.met(&slow_decode), "tpot = 11 / 99 > 0.1");
        let unfinished = RequestOutcome {
            finished: None,
            ..ok
        };
        assert!(!slo.met(&unfinished));
        let gave_up = RequestOutcome {
            timed_out: true,
            ..ok
        };
        assert!(!slo.met(&gave_up), "a timed-out request is a miss");
    }

    #[test]
    fn flaps_are_scale_in_then_out_within_five_minutes() {
        let e = |at_seconds, from, to| ScaleEvent {
            at_seconds,
            from,
            to,
        };
        let events = [
            e(0.0, 1, 3),
            e(100.0, 3, 2),
            e(350.0, 2, 3),
            e(400.0, 3, 2),
            e(800.0, 2, 3),
        ];
        assert_eq!(count_flaps(&events), 1);
        assert_eq!(
            reaction_times(&[s(0.0), s(300.0)], &events),
            vec![0.0, 50.0]
        );
    }

    #[test]
    fn summary_counts_gpu_hours_and_percentiles() {
        let outcomes: Vec<RequestOutcome> = (0..100)
            .map(|i| RequestOutcome {
                arrival: s(f64::from(i)),
                first_token: Some(s(f64::from(i) + 0.5)),
                finished: Some(s(f64::from(i) + 1.0 + f64::from(i) / 100.0)),
                output_tokens: 100,
                timed_out: false,
                rejected: false,
            })
            .collect();
        let report = summarise(
            "static:2",
            &outcomes,
            &SloTargets::default(),
            7200.0,
            vec![],
            &[],
            s(200.0),
        );
        assert_eq!(report.gpu_hours, 2.0);
        assert_eq!(report.slo_attainment, 1.0);
        assert_eq!(report.e2e_slo_attainment, 1.0);
        assert_eq!(report.ttft_seconds.p95, Some(0.5));
        assert!((report.e2e_seconds.p95.unwrap() - 1.94).abs() < 1e-9);
        assert!(markdown_table("x", &[report]).contains("| static:2 | 100.00 %"));
    }

    #[test]
    fn ttft_percentiles_count_requests_that_never_got_a_first_token() {
        // 90 served at 0.5 s; 10 never got a first token: 5 gave up at 30 s, 5 still waited at
        // the end (t = 100 s, having arrived at 0).
        let mut outcomes: Vec<RequestOutcome> = (0..90)
            .map(|i| RequestOutcome {
                arrival: s(f64::from(i)),
                first_token: Some(s(f64::from(i) + 0.5)),
                finished: Some(s(f64::from(i) + 1.0)),
                output_tokens: 10,
                timed_out: false,
                rejected: false,
            })
            .collect();
        for _ in 0..5 {
            outcomes.push(RequestOutcome {
                arrival: s(0.0),
                first_token: None,
                finished: Some(s(30.0)),
                output_tokens: 10,
                timed_out: true,
                rejected: false,
            });
            outcomes.push(RequestOutcome {
                arrival: s(0.0),
                first_token: None,
                finished: None,
                output_tokens: 10,
                timed_out: false,
                rejected: false,
            });
        }
        let report = summarise(
            "x",
            &outcomes,
            &SloTargets::default(),
            0.0,
            vec![],
            &[],
            s(100.0),
        );
        assert_eq!(report.timed_out, 5);
        assert_eq!(report.completed, 90);
        assert_eq!(report.slo_attainment, 0.9);
        // Nearest rank 95 of 100: past the 90 served and the five 30 s ones.
        assert_eq!(report.ttft_seconds.p95, Some(30.0));
        assert_eq!(report.ttft_seconds.p99, Some(100.0));
    }
}
