//! The rules read from one sample: which scale-out triggers fire, and whether the fleet is
//! calm. Updates only the KV-critical clock.

use std::time::Duration;

use super::explain::{dur, num, pct, secs};
use super::{PolicyConfig, PolicyState, Reason};
use crate::signals::FleetSignals;

/// The signal values the policy reads, cleaned: non-finite or negative values are absent
/// (quantiles, fractions, rates) or zero (counts).
pub(super) struct Observed {
    pub(super) ready: u32,
    /// Known targets that gave no usable, current data (failed, invalid or stale).
    pub(super) unknown: u32,
    pub(super) queue: f64,
    pub(super) running: f64,
    pub(super) finished: f64,
    pub(super) e2e_p95: Option<f64>,
    pub(super) ttft_p95: Option<f64>,
    pub(super) itl_p95: Option<f64>,
    pub(super) kv_max: Option<f64>,
    pub(super) preemptions_per_second: Option<f64>,
    pub(super) gpu_memory_max: Option<f64>,
}

fn clean(x: Option<f64>) -> Option<f64> {
    x.filter(|v| v.is_finite() && *v >= 0.0)
}

fn count(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 { x } else { 0.0 }
}

pub(super) fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl Observed {
    pub(super) fn new(s: &FleetSignals) -> Self {
        let f = &s.fleet;
        Self {
            ready: to_u32(s.pods_healthy),
            unknown: to_u32(s.pods_total.saturating_sub(s.pods_healthy)),
            queue: count(f.queue_depth),
            running: count(f.running),
            finished: count(f.requests_finished_in_window),
            e2e_p95: clean(f.e2e_latency_seconds.p95),
            ttft_p95: clean(f.ttft_seconds.p95),
            itl_p95: clean(f.itl_seconds.p95),
            kv_max: clean(f.kv_cache_usage.max),
            preemptions_per_second: clean(f.preemptions_per_second),
            gpu_memory_max: s
                .gpu
                .as_ref()
                .and_then(|g| clean(g.memory_used_fraction.max)),
        }
    }

    pub(super) fn active(&self) -> bool {
        self.queue > 0.0 || self.running > 0.0 || self.finished > 0.0
    }
}

/// A scale-out trigger that fires now.
pub(super) struct Trigger {
    pub(super) reason: Reason,
    pub(super) text: String,
    /// Absolute demand (queue), or `None` for a guardrail (one step above the level).
    pub(super) demand: Option<u32>,
}

/// The triggers that fire now, and the text of a KV breach still inside its 30 s.
pub(super) fn triggers(
    c: &PolicyConfig,
    now: Duration,
    o: &Observed,
    st: &mut PolicyState,
) -> (Vec<Trigger>, Option<String>) {
    let mut out = Vec::new();
    let ready = f64::from(o.ready);
    let n = c.queue_depth_per_replica;
    if n > 0.0 && o.queue / ready > n {
        let demand = (o.queue / n).ceil().min(f64::from(u32::MAX)) as u32;
        out.push(Trigger {
            reason: Reason::QueueDepth,
            text: format!(
                "queue {} over {} ready replicas = {} per replica > {} per replica (demand {demand} replicas)",
                num(o.queue),
                o.ready,
                num(o.queue / ready),
                num(n)
            ),
            demand: Some(demand),
        });
    }
    let latencies = [
        (
            Reason::E2eLatencySlo,
            "e2e",
            o.e2e_p95,
            c.e2e_latency_slo_seconds,
        ),
        (Reason::TtftSlo, "TTFT", o.ttft_p95, c.ttft_slo_seconds),
        (Reason::ItlSlo, "ITL", o.itl_p95, c.itl_slo_seconds),
    ];
    for (reason, name, p95, slo) in latencies {
        if let (Some(p95), Some(slo)) = (p95, slo) {
            if p95 > slo {
                out.push(Trigger {
                    reason,
                    text: format!("P95 {name} {} > SLO {}", secs(p95), secs(slo)),
                    demand: None,
                });
            }
        }
    }
    let mut kv_pending = None;
    match o.kv_max {
        Some(kv) if kv > c.kv_cache_critical => {
            let since = *st.kv_critical_since.get_or_insert(now);
            let held = now.saturating_sub(since);
            let text = format!(
                "KV cache max {} > critical {} for {}",
                pct(kv),
                pct(c.kv_cache_critical),
                dur(held)
            );
            if held >= c.kv_cache_critical_for {
                out.push(Trigger {
                    reason: Reason::KvCacheCritical,
                    text,
                    demand: None,
                });
            } else {
                kv_pending = Some(format!("{text} of {}", dur(c.kv_cache_critical_for)));
            }
        }
        _ => st.kv_critical_since = None,
    }
    if let Some(rate) = o.preemptions_per_second {
        let per = rate / ready;
        if per > c.preemptions_per_second_per_replica {
            out.push(Trigger {
                reason: Reason::PreemptionRate,
                text: format!(
                    "preemptions {}/s over {} ready replicas = {}/s per replica > {}/s",
                    num(rate),
                    o.ready,
                    num(per),
                    num(c.preemptions_per_second_per_replica)
                ),
                demand: None,
            });
        }
    }
    (out, kv_pending)
}

/// Why the fleet is not calm (empty when calm), and the calm facts for the explanation.
pub(super) fn calm_check(c: &PolicyConfig, o: &Observed) -> (Vec<String>, Vec<String>) {
    let mut not_calm = Vec::new();
    let mut facts = Vec::new();
    if o.unknown > 0 {
        // Unknown pods are not calm: a pod whose /metrics stops answering is often the one
        // that is overloaded, so it counts as loaded and scale-in waits for a full view.
        not_calm.push(format!(
            "{} of {} known targets not observed (a target that does not answer counts as loaded: no scale-in on a partial view)",
            o.unknown,
            o.unknown.saturating_add(o.ready)
        ));
    }
    if o.queue > 0.0 {
        not_calm.push(format!(
            "queue {} > 0, {} per ready replica",
            num(o.queue),
            num(o.queue / f64::from(o.ready.max(1)))
        ));
    } else {
        facts.push("queue 0".to_owned());
    }
    let latencies = [
        ("e2e", o.e2e_p95, c.e2e_latency_slo_seconds),
        ("TTFT", o.ttft_p95, c.ttft_slo_seconds),
        ("ITL", o.itl_p95, c.itl_slo_seconds),
    ];
    for (name, p95, slo) in latencies {
        // An SLO that is off is not part of the calm check (and not mentioned).
        let Some(slo) = slo else { continue };
        let half = slo / 2.0;
        match p95 {
            None => facts.push(format!("P95 {name} undefined")),
            Some(p) if p < half => {
                facts.push(format!("P95 {name} {} < SLO/2 {}", secs(p), secs(half)));
            }
            Some(p) => not_calm.push(format!("P95 {name} {} >= SLO/2 {}", secs(p), secs(half))),
        }
    }
    if let Some(kv) = o.kv_max {
        if kv >= c.kv_cache_warning {
            not_calm.push(format!(
                "KV cache max {} >= warning {}",
                pct(kv),
                pct(c.kv_cache_warning)
            ));
        } else {
            facts.push(format!(
                "KV cache max {} < warning {}",
                pct(kv),
                pct(c.kv_cache_warning)
            ));
        }
    }
    if o.gpu_memory_max.is_none() && c.gpu_memory_required {
        not_calm.push("GPU memory unknown (DCGM configured but not answering)".to_owned());
    }
    if let Some(mem) = o.gpu_memory_max {
        if mem >= c.gpu_memory_calm_below {
            not_calm.push(format!(
                "GPU memory max {} >= {}",
                pct(mem),
                pct(c.gpu_memory_calm_below)
            ));
        } else {
            facts.push(format!(
                "GPU memory max {} < {}",
                pct(mem),
                pct(c.gpu_memory_calm_below)
            ));
        }
    }
    (not_calm, facts)
}
