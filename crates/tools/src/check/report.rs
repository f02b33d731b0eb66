//! The `check` report: signals from two rounds, what was found, go-live warnings, and the
//! table and JSON renderings.
//!
//! Owns: the advice a platform engineer wants before going live (vLLM generation and names,
//! data-parallel engines, `gpu_memory_utilization` against 0.85, bucket resolution against the
//! SLOs). Does not own: gathering the bodies (see the parent module) or the math.

use std::time::Duration;

use serde::Serialize;

use vllm_keda_core::policy::PolicyConfig;
use vllm_keda_core::signals::{
    FleetSignals, Generation, GpuSignals, Quantiles, SignalSet, SignalSettings, SnapshotInfo,
};
use vllm_keda_core::{Scaler, ScrapeRound, TargetFailure};

use super::{Gathered, Rounds};

/// `gpu_memory_utilization` above this leaves little headroom (the advised setting).
pub const ADVISED_GPU_MEMORY_UTILIZATION: f64 = 0.85;

/// SLOs to judge bucket resolution against (all optional).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Slos {
    /// End-to-end latency SLO.
    pub latency_seconds: Option<f64>,
    /// Time-to-first-token SLO.
    pub ttft_seconds: Option<f64>,
    /// Inter-token latency SLO.
    pub itl_seconds: Option<f64>,
}

/// Highest finite bucket bound of each latency histogram, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct BucketTops {
    /// End-to-end latency.
    pub e2e_seconds: Option<f64>,
    /// Time to first token.
    pub ttft_seconds: Option<f64>,
    /// Inter-token latency.
    pub itl_seconds: Option<f64>,
}

/// One target in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodReport {
    /// The target (URL or file).
    pub pod: String,
    /// Whether the later round gave a usable body.
    pub healthy: bool,
    /// Scrape or parse errors, per round.
    pub errors: Vec<String>,
    /// vLLM generation found.
    pub generation: Generation,
    /// Data-parallel engines (0 when there is no `engine` label).
    pub engines: usize,
    /// `model_name` values served.
    pub models: Vec<String>,
    /// KV-cache usage name used.
    pub kv_cache_metric: Option<&'static str>,
    /// Inter-token latency name used.
    pub itl_metric: Option<&'static str>,
    /// From `vllm:cache_config_info`.
    pub gpu_memory_utilization: Option<f64>,
    /// Highest finite latency buckets.
    pub latency_buckets_top: BucketTops,
    /// A restart between the two rounds dropped this pod's rates and quantiles.
    pub reset_in_window: bool,
    /// The pod's own signals.
    pub signals: SignalSet,
    /// Its GPUs, when DCGM maps GPUs to it.
    pub gpu: Option<GpuSignals>,
}

/// The whole report (the `--json` object).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Time between the two rounds.
    pub elapsed_seconds: f64,
    /// Targets checked.
    pub pods_total: usize,
    /// Targets with a usable later body.
    pub pods_healthy: usize,
    /// Aggregates over healthy pods.
    pub fleet: SignalSet,
    /// GPU aggregates (DCGM), when given.
    pub gpu: Option<GpuSignals>,
    /// Per target.
    pub pods: Vec<PodReport>,
    /// What was found (informational).
    pub found: Vec<String>,
    /// Things to fix or know before going live.
    pub warnings: Vec<String>,
    /// The computed signals.
    #[serde(skip)]
    pub signals: FleetSignals,
}

/// Which of a target's two bodies a round takes.
type PickBody = fn(&Rounds) -> &Result<String, String>;

/// One round of every target as the core parses it: `earlier` or `later` of each.
fn parse_round(gathered: &Gathered, model: Option<&str>, pick: PickBody) -> ScrapeRound<String> {
    let bodies = |list: &[Rounds]| -> Vec<(String, Result<String, String>)> {
        list.iter()
            .map(|r| (r.target.clone(), pick(r).clone()))
            .collect()
    };
    ScrapeRound::parse(bodies(&gathered.pods), bodies(&gathered.gpus), model)
}

/// The text of a failed target in a round.
fn failure_text(failure: &TargetFailure<String>) -> String {
    match failure {
        TargetFailure::Fetch(e) => e.clone(),
        TargetFailure::Parse(e) => format!("not a metrics body: {e}"),
        TargetFailure::Invalid(e) => format!("unusable body: {e}"),
    }
}

struct Seen {
    info: SnapshotInfo,
    tops: BucketTops,
    has_waiting: bool,
    has_running: bool,
    parsed: bool,
}

/// Warnings keyed by text, with the targets they apply to (so 50 pods give one line).
#[derive(Default)]
struct Notes(Vec<(String, Vec<String>)>);

impl Notes {
    fn add(&mut self, pod: &str, text: String) {
        match self.0.iter_mut().find(|(t, _)| *t == text) {
            Some((_, pods)) => pods.push(pod.to_owned()),
            None => self.0.push((text, vec![pod.to_owned()])),
        }
    }

    fn lines(self, total: usize) -> Vec<String> {
        self.0
            .into_iter()
            .map(|(text, pods)| match pods.len() {
                1 => format!("{}: {text}", pods[0]),
                n if n == total => format!("all {n} targets: {text}"),
                n => format!("{n} targets ({}): {text}", pods.join(", ")),
            })
            .collect()
    }
}

impl Report {
    /// Feeds both rounds through the core's [`Scaler`] with windows spanning them and collects
    /// the advice.
    pub fn build(gathered: &Gathered, model: Option<&str>, slo: &Slos) -> Report {
        let end = gathered.elapsed;
        // Only the signals are read; the policy (the defaults) decides nothing here.
        let mut scaler = Scaler::with_settings(
            SignalSettings {
                latency_window: end,
                preemption_window: end,
                model: model.map(str::to_owned),
                ..SignalSettings::default()
            },
            PolicyConfig::default(),
        );
        let mut found = Notes::default();
        let mut warnings = Notes::default();
        let mut pods: Vec<(String, Vec<String>, Option<Seen>)> = gathered
            .pods
            .iter()
            .map(|r| (r.target.clone(), Vec::new(), None))
            .collect();
        let rounds: [(Duration, &str, PickBody); 2] = [
            (Duration::ZERO, "earlier", |r| &r.earlier),
            (end, "later", |r| &r.later),
        ];
        for (at, name, pick) in rounds {
            let round = parse_round(gathered, model, pick);
            for ((target, outcome), (_, errors, seen)) in round.pods.iter().zip(&mut pods) {
                match outcome {
                    Ok(snapshot) => {
                        *seen = Some(Seen {
                            info: snapshot.info.clone(),
                            tops: BucketTops {
                                e2e_seconds: top(&snapshot.e2e_latency),
                                ttft_seconds: top(&snapshot.ttft),
                                itl_seconds: top(&snapshot.itl),
                            },
                            has_waiting: snapshot.waiting.is_some(),
                            has_running: snapshot.running.is_some(),
                            parsed: true,
                        });
                    }
                    Err(failure) => {
                        let e = failure_text(failure);
                        warnings.add(target, format!("{name} round failed: {e}"));
                        errors.push(format!("{name}: {e}"));
                    }
                }
            }
            for (target, outcome) in &round.gpus {
                if let Err(failure) = outcome {
                    let e = failure_text(failure);
                    warnings.add(target, format!("DCGM {name} round failed: {e}"));
                }
            }
            scaler.record(at, round);
        }
        let signals = scaler.signals(end);
        let total = pods.len();
        let mut reports = Vec::with_capacity(total);
        let unknown = vllm_keda_core::signals::PodSignals::default();
        for (target, errors, seen) in pods {
            let computed = signals
                .pods
                .iter()
                .find(|p| p.pod == target)
                .unwrap_or(&unknown);
            let seen = seen.unwrap_or(Seen {
                info: SnapshotInfo::default(),
                tops: BucketTops::default(),
                has_waiting: false,
                has_running: false,
                parsed: false,
            });
            advise(
                &target,
                &seen,
                &computed.signals,
                model,
                slo,
                &mut found,
                &mut warnings,
            );
            if computed.reset_in_window {
                warnings.add(
                    &target,
                    "restarted between the two rounds (a counter went down or a restart marker \
                     changed): its rates and quantiles are dropped for this window"
                        .into(),
                );
            }
            reports.push(PodReport {
                pod: target,
                healthy: computed.healthy,
                errors,
                generation: seen.info.generation,
                engines: seen.info.engines,
                gpu_memory_utilization: seen.info.gpu_memory_utilization(),
                models: seen.info.models,
                kv_cache_metric: seen.info.kv_cache_metric,
                itl_metric: seen.info.itl_metric,
                latency_buckets_top: seen.tops,
                reset_in_window: computed.reset_in_window,
                signals: computed.signals.clone(),
                gpu: computed.gpu.clone(),
            });
        }
        if signals.pods_healthy > 0 && signals.fleet.requests_finished_in_window == 0.0 {
            found.add(
                "fleet",
                "no request finished between the rounds: latency quantiles are undefined \
                 (idle reads as calm); send traffic or widen the interval to see them"
                    .into(),
            );
        }
        Report {
            elapsed_seconds: end.as_secs_f64(),
            pods_total: signals.pods_total,
            pods_healthy: signals.pods_healthy,
            fleet: signals.fleet.clone(),
            gpu: signals.gpu.clone(),
            pods: reports,
            found: found.lines(total),
            warnings: warnings.lines(total),
            signals,
        }
    }
}

fn top(hist: &Option<vllm_keda_core::signals::Histogram>) -> Option<f64> {
    hist.as_ref().and_then(|h| h.top_finite_bound())
}

fn advise(
    pod: &str,
    seen: &Seen,
    signals: &SignalSet,
    model: Option<&str>,
    slo: &Slos,
    found: &mut Notes,
    warnings: &mut Notes,
) {
    let info = &seen.info;
    if info.vllm_samples == 0 {
        if seen.parsed {
            warnings.add(
                pod,
                "no vllm: series found, so the target counts as unknown: is this a vLLM \
                 /metrics endpoint (port 8000 by default)?"
                    .into(),
            );
        }
        return;
    }
    let generation = match info.generation {
        Generation::V0 => "vLLM V0",
        Generation::V1 => "vLLM V1",
        Generation::Unknown => "vLLM (generation not recognised)",
    };
    let names: Vec<&str> = [info.kv_cache_metric, info.itl_metric]
        .into_iter()
        .flatten()
        .collect();
    let engines = match info.engines {
        0 => "no engine label".to_string(),
        1 => "1 engine".to_string(),
        n => format!("{n} data-parallel engines"),
    };
    found.add(
        pod,
        format!("{generation}, {engines}, names {}", names.join(", ")),
    );
    for twin in &info.ignored_twins {
        found.add(
            pod,
            format!("{twin} also present (same data under the older name): ignored, never added"),
        );
    }
    match model {
        Some(m) if !info.models.iter().any(|x| x == m) => warnings.add(
            pod,
            format!(
                "no series for model {m:?}; models served: {}",
                info.models.join(", ")
            ),
        ),
        None if info.models.len() > 1 => warnings.add(
            pod,
            format!(
                "serves {} models ({}): signals add them up; pass --model to pick one",
                info.models.len(),
                info.models.join(", ")
            ),
        ),
        _ => {}
    }
    if !seen.has_waiting && model.is_none_or(|m| info.models.iter().any(|x| x == m)) {
        let text = if seen.has_running {
            "vllm:num_requests_waiting not found: queue depth reads as 0"
        } else {
            "neither vllm:num_requests_waiting nor vllm:num_requests_running found: the target \
             counts as unknown"
        };
        warnings.add(pod, text.into());
    }
    if info.engines > 1 {
        warnings.add(
            pod,
            format!(
                "{} data-parallel engines: queue, running, rates and buckets are summed over \
                 engines; KV-cache usage is the max across engines",
                info.engines
            ),
        );
    }
    match info.gpu_memory_utilization() {
        Some(u) if u > ADVISED_GPU_MEMORY_UTILIZATION => warnings.add(
            pod,
            format!(
                "gpu_memory_utilization {u} (vllm:cache_config_info) is above the advised \
                 {ADVISED_GPU_MEMORY_UTILIZATION}: little headroom for activation peaks and \
                 other processes on the GPU"
            ),
        ),
        Some(u) => found.add(pod, format!("gpu_memory_utilization {u}")),
        None => warnings.add(
            pod,
            "vllm:cache_config_info not found: gpu_memory_utilization cannot be checked".into(),
        ),
    }
    let hists = [
        (
            "e2e latency",
            seen.tops.e2e_seconds,
            slo.latency_seconds,
            signals.e2e_latency_seconds,
            60.0,
        ),
        (
            "TTFT",
            seen.tops.ttft_seconds,
            slo.ttft_seconds,
            signals.ttft_seconds,
            10.0,
        ),
        (
            "ITL",
            seen.tops.itl_seconds,
            slo.itl_seconds,
            signals.itl_seconds,
            f64::NEG_INFINITY,
        ),
    ];
    for (name, top, slo, quantiles, v0_top) in hists {
        if let Some(text) = bucket_advice(name, top, slo, &quantiles, v0_top) {
            warnings.add(pod, text);
        }
    }
}

/// Advice on one histogram's resolution, if any.
fn bucket_advice(
    name: &str,
    top: Option<f64>,
    slo: Option<f64>,
    quantiles: &Quantiles,
    v0_top: f64,
) -> Option<String> {
    let top = top?;
    if let Some(slo) = slo {
        if slo > top {
            return Some(format!(
                "{name} buckets stop at {top} s, below the {slo} s SLO: anything slower reads \
                 as {top} s, so a breach cannot be seen (vLLM V1's buckets reach further)"
            ));
        }
    }
    if top <= v0_top {
        return Some(format!(
            "{name} buckets stop at {top} s (the vLLM V0 layout): anything slower reads as \
             {top} s; keep the {name} SLO well below it"
        ));
    }
    if quantiles.p99 == Some(top) {
        return Some(format!(
            "P99 {name} is at the highest finite bucket ({top} s): the true value is at least that"
        ));
    }
    None
}
