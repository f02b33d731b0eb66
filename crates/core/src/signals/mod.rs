//! Scaling signals from consecutive scrapes: tier 1 (service quality), tier 2 (engine state),
//! tier 3 (GPU, from DCGM).
//!
//! Owns: extracting what matters from a parsed body into an owned per-pod snapshot, keeping
//! the per-pod history a window needs, and aggregating over healthy pods. Does not own:
//! fetching or parsing. Pure: every function takes `now` (time since the caller's origin).
//!
//! Layout: [`snapshot`] (one body -> [`PodSnapshot`]), [`histogram`] (bucket deltas and PromQL's
//! `histogram_quantile`), [`window`] (per-pod history, restarts and health in [`FleetWindow`]),
//! `aggregate` (two samples of a pod to its signals, and the fleet sums) and [`gpu`] (DCGM
//! exporter readings, tier 3).
//!
//! Semantics in one place:
//! - A window compares the latest sample of a pod with the one at or just before
//!   `now - window` (the oldest kept sample while history is shorter than the window). Memory
//!   stays small: full samples (histograms) are kept only inside the latency window and at most
//!   16 per window (scraped faster than that, the latency window spans 15/16 to all of its
//!   length); older samples keep only their time and preemption counter. After a scrape gap
//!   longer than the window (a baseline older than `now - 2 * window`), the first sample inside
//!   the window is the baseline: a delta never averages over the whole gap.
//! - Quantiles are PromQL's `histogram_quantile(q, sum(rate(x_bucket[w])) by (le))` computed on
//!   per-`le` bucket deltas summed across pods (quantiles are ratio-invariant, so rates and
//!   deltas give the same answer); no observation in the window gives `None` (undefined, calm).
//! - Rates are difference quotients of the two samples (no extrapolation, unlike `rate`).
//! - A restart between any two samples of the window (a counter, `_count` or bucket going down,
//!   `process_start_time_seconds` or a `_created` value changing, or an `le` set changing) drops
//!   that pod's deltas for that window: never a negative rate. Its gauges still count.
//! - A failed scrape makes the pod unknown: it counts in `pods_total`, not in `pods_healthy`,
//!   and in no aggregate (never zero load). So does a body whose values cannot be true
//!   ([`SnapshotError`]), and a pod whose latest usable sample is older than
//!   [`SignalSettings::stale_after`] at `now` (stale data is not current).

use std::time::Duration;

use serde::Serialize;

mod aggregate;
pub mod gpu;
pub mod histogram;
pub mod snapshot;
pub mod window;

pub use gpu::{GpuDevice, GpuSnapshot};
pub use histogram::{
    Bucket, Histogram, histogram_observations, histogram_quantile, histogram_share_at_most,
};
pub use snapshot::{Generation, PodSnapshot, SnapshotError, SnapshotInfo};
pub use window::FleetWindow;

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
    /// Mean inter-token latency over the latency window (the histogram's `_sum` over its
    /// `_count`): the statistic of a request-level SLO on the time per output token.
    pub itl_mean_seconds: Option<f64>,
    /// Queue-time quantiles over the latency window.
    pub queue_time_seconds: Quantiles,
    /// Quantiles of each finished request's own mean time per output token over the latency
    /// window (`vllm:request_time_per_output_token_seconds`): the statistic of a request-level
    /// SLO on the time per output token. Empty where the engine does not expose it.
    pub request_tpot_seconds: Quantiles,
    /// The TTFT histogram over the latency window (cumulative bucket deltas, summed across
    /// pods): what [`SignalSet::share_within`] reads the share of requests within a TTFT from.
    /// Kept in the fleet's set only (empty in a pod's: nothing reads a pod's share, and the
    /// signals run for every pod on every tick). Not serialised (the quantiles above are its
    /// summary).
    #[serde(skip)]
    pub ttft_buckets: Vec<Bucket>,
    /// The inter-token latency histogram over the latency window, as `ttft_buckets`.
    #[serde(skip)]
    pub itl_buckets: Vec<Bucket>,
    /// The histogram of each finished request's own mean time per output token over the
    /// latency window, as `ttft_buckets` (empty where the engine does not expose it).
    #[serde(skip)]
    pub request_tpot_buckets: Vec<Bucket>,
    /// Finished requests per second over the latency window.
    pub requests_per_second: Option<f64>,
    /// Finished requests within the latency window (for activity).
    pub requests_finished_in_window: f64,
    /// The seconds those finished requests were counted over: a pod's latency window (shorter
    /// for a pod scraped for less than the window, a replica that just became ready), the
    /// fleet's the longest of its pods'. `requests_per_second` sums each pod's rate over its
    /// own span, which counts a replica ready for ten seconds at its rate of those ten seconds
    /// for the whole window; the finished count over this span does not.
    pub finished_window_seconds: Option<f64>,
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

impl SignalSet {
    /// The share (0..1) of the window's TTFT observations (`Latency::Ttft`), inter-token gaps
    /// (`Latency::Itl`) or finished requests' own times per output token
    /// (`Latency::RequestTpot`) at or below `seconds`; `None` with no observation in the
    /// window.
    pub fn share_within(&self, latency: Latency, seconds: f64) -> Option<f64> {
        histogram_share_at_most(seconds, self.buckets(latency))
    }

    /// How many observations of `latency` the window holds (first tokens, inter-token gaps or
    /// finished requests); `None` with none.
    pub fn observations(&self, latency: Latency) -> Option<f64> {
        histogram_observations(self.buckets(latency))
    }

    /// The window's histogram of `latency`.
    fn buckets(&self, latency: Latency) -> &[Bucket] {
        match latency {
            Latency::Ttft => &self.ttft_buckets,
            Latency::Itl => &self.itl_buckets,
            Latency::RequestTpot => &self.request_tpot_buckets,
        }
    }
}

/// A latency whose histogram the signals keep whole, for [`SignalSet::share_within`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Latency {
    /// Time to first token.
    Ttft,
    /// Inter-token latency.
    Itl,
    /// A finished request's own mean time per output token.
    RequestTpot,
}

/// Signals of one pod, with its health.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PodSignals {
    /// The pod's target identity (URL).
    pub pod: String,
    /// Whether its latest scrape gave usable data that is current (not older than
    /// [`SignalSettings::stale_after`]).
    pub healthy: bool,
    /// The pod's own signals (meaningful when healthy).
    pub signals: SignalSet,
    /// A restart was detected inside a window: the pod's rates and quantiles were dropped.
    pub reset_in_window: bool,
    /// Its GPUs, when a DCGM exporter maps GPUs to this pod by the `pod` label.
    pub gpu: Option<GpuSignals>,
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
    /// A pod whose latest usable sample is older than this at `now` is unknown, not current
    /// (default [`STALE_AFTER_INTERVALS`] times the default 2 s scrape interval;
    /// [`crate::Scaler::new`] uses that many of the ScaledObject's own intervals).
    pub stale_after: Duration,
}

/// Scrape intervals after which a pod's latest usable data is stale.
pub const STALE_AFTER_INTERVALS: u32 = 3;

impl Default for SignalSettings {
    fn default() -> Self {
        Self {
            latency_window: Duration::from_secs(60),
            preemption_window: Duration::from_secs(300),
            model: None,
            stale_after: Duration::from_secs(2) * STALE_AFTER_INTERVALS,
        }
    }
}
