//! Scaling signals from consecutive scrapes: tier 1 (service quality), tier 2 (engine state),
//! tier 3 (GPU, from DCGM).
//!
//! Owns: extracting what matters from a parsed body into an owned per-pod snapshot, keeping
//! the per-pod history a window needs, and aggregating over healthy pods. Does not own:
//! fetching or parsing. Pure: every function takes `now` (time since the caller's origin).
//!
//! INTERFACE STUB: the types and signatures below are the contract other modules build on.

use std::time::Duration;

use serde::Serialize;

use crate::exposition::Exposition;

/// P50/P95/P99 of a latency histogram over the window; `None` when no observation fell in it
/// (undefined, which downstream treats as calm).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Quantiles {
    /// Median, seconds.
    pub p50: Option<f64>,
    /// 95th percentile, seconds.
    pub p95: Option<f64>,
    /// 99th percentile, seconds.
    pub p99: Option<f64>,
}

/// Aggregates of two or more numbers across pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MaxMean {
    /// Largest value across pods.
    pub max: Option<f64>,
    /// Mean across pods.
    pub mean: Option<f64>,
}

/// Tier 3 signals from the DCGM exporter.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GpuSignals {
    /// GPU frame-buffer memory used / (used + free), 0..1, across GPUs.
    pub memory_used_fraction: MaxMean,
    /// GPU utilisation 0..1 across GPUs (reported, never a scale input).
    pub utilization: MaxMean,
    /// Total power draw in watts.
    pub power_watts_total: Option<f64>,
    /// Single-bit ECC errors per second, summed across GPUs.
    pub ecc_errors_per_second: Option<f64>,
    /// GPUs seen.
    pub gpus: usize,
}

/// Signals for a set of pods (one pod, or the fleet of healthy pods).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SignalSet {
    /// Requests waiting (sum of `vllm:num_requests_waiting`).
    pub queue_depth: f64,
    /// Requests running (sum of `vllm:num_requests_running`).
    pub running: f64,
    /// End-to-end request latency quantiles over the latency window.
    pub e2e_latency_seconds: Quantiles,
    /// Time to first token quantiles over the latency window.
    pub ttft_seconds: Quantiles,
    /// Inter-token latency (TPOT) quantiles over the latency window.
    pub itl_seconds: Quantiles,
    /// Finished requests per second over the latency window.
    pub requests_per_second: Option<f64>,
    /// Finished requests within the latency window (for activity).
    pub requests_finished_in_window: f64,
    /// Finished requests per second by `finished_reason`.
    pub finished_per_second_by_reason: std::collections::BTreeMap<String, f64>,
    /// KV-cache usage 0..1.
    pub kv_cache_usage: MaxMean,
    /// Preemptions per second over the preemption window.
    pub preemptions_per_second: Option<f64>,
    /// Prompt (prefill) tokens per second.
    pub prompt_tokens_per_second: Option<f64>,
    /// Generation (decode) tokens per second.
    pub generation_tokens_per_second: Option<f64>,
    /// Mean tokens per engine step (batch efficiency).
    pub batch_tokens_per_step: Option<f64>,
}

/// Signals of one pod, with its health.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodSignals {
    /// The pod's target identity (URL).
    pub pod: String,
    /// Whether the latest scrape succeeded.
    pub healthy: bool,
    /// The pod's own signals (meaningful when healthy).
    pub signals: SignalSet,
}

/// Everything the policy reads, computed at one instant.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FleetSignals {
    /// When computed (time since the caller's origin).
    #[serde(skip)]
    pub at: Duration,
    /// Pods known (healthy or not).
    pub pods_total: usize,
    /// Pods whose latest scrape succeeded: the ready replicas.
    pub pods_healthy: usize,
    /// Aggregates over healthy pods.
    pub fleet: SignalSet,
    /// Tier 3, when DCGM targets are configured and answered.
    pub gpu: Option<GpuSignals>,
    /// Per pod.
    pub pods: Vec<PodSignals>,
}

/// Window lengths and filters.
#[derive(Debug, Clone, PartialEq)]
pub struct SignalSettings {
    /// Window for latency quantiles and request/token rates (default 60 s).
    pub latency_window: Duration,
    /// Window for the preemption rate (default 300 s).
    pub preemption_window: Duration,
    /// Only series whose `model_name` equals this (all when `None`).
    pub model: Option<String>,
}

impl Default for SignalSettings {
    fn default() -> Self {
        Self {
            latency_window: Duration::from_secs(60),
            preemption_window: Duration::from_secs(300),
            model: None,
        }
    }
}

/// What one scrape of one vLLM pod contributed, owned (the body is gone after extraction).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodSnapshot {}

impl PodSnapshot {
    /// Extracts the series that signals use from a parsed body.
    pub fn from_exposition(exposition: &Exposition<'_>, model: Option<&str>) -> Self {
        let _ = (exposition, model);
        Self {}
    }
}

/// Per-pod history for a fleet, and the aggregation over it.
#[derive(Debug, Clone, Default)]
pub struct FleetWindow {
    settings: SignalSettings,
}

impl FleetWindow {
    /// A window with these settings.
    pub fn new(settings: SignalSettings) -> Self {
        Self { settings }
    }

    /// Records one pod's scrape at `now`: `Some` when it succeeded, `None` when it failed
    /// (the pod becomes unknown, never zero load).
    pub fn record(&mut self, now: Duration, pod: &str, snapshot: Option<PodSnapshot>) {
        let _ = (now, pod, snapshot, &self.settings);
    }

    /// Forgets pods not in `pods` (gone from discovery).
    pub fn retain_pods(&mut self, pods: &[String]) {
        let _ = pods;
    }

    /// Signals at `now`.
    pub fn compute(&self, now: Duration) -> FleetSignals {
        FleetSignals {
            at: now,
            ..FleetSignals::default()
        }
    }
}
