//! The engine's cumulative statistics: vLLM's counters and histograms, with vLLM's bucket lists.
//!
//! Owns: [`EngineHistogram`] and [`EngineStats`]. Bucket tables come from
//! [`vllm_keda_core::catalog`]. Updated by [`super::engine`] as it steps; read by
//! [`super::metrics`] to render a body. Does not render.

use vllm_keda_core::catalog::{Metric, Version};

use super::config::MetricsShape;
use super::engine::FinishReason;

/// One of the engine's histograms as vLLM keeps it: counts per fixed upper bound (`le`), like
/// `prometheus_client`'s (the scraped, parsed side is the core's `signals::Histogram`).
#[derive(Debug, Clone, PartialEq)]
pub struct EngineHistogram {
    bounds: &'static [f64],
    /// Per-bucket (non-cumulative) counts; the last entry is the `+Inf` bucket.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl EngineHistogram {
    /// An empty histogram with these finite upper bounds (ascending).
    pub fn new(bounds: &'static [f64]) -> Self {
        EngineHistogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one observation.
    pub fn observe(&mut self, value: f64) {
        self.observe_n(value, 1);
    }

    /// Records `n` observations of the same value.
    pub fn observe_n(&mut self, value: f64, n: u64) {
        if n == 0 {
            return;
        }
        let i = self.bounds.partition_point(|b| *b < value);
        self.counts[i] += n;
        self.sum += value * n as f64;
        self.count += n;
    }

    /// The finite upper bounds.
    pub fn bounds(&self) -> &'static [f64] {
        self.bounds
    }

    /// Cumulative counts, one per finite bound and a last one for `+Inf` (equal to the count).
    pub fn cumulative(&self) -> impl Iterator<Item = u64> + '_ {
        self.counts.iter().scan(0u64, |acc, c| {
            *acc += c;
            Some(*acc)
        })
    }

    /// Sum of the observations.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.count
    }
}

impl From<MetricsShape> for Version {
    fn from(shape: MetricsShape) -> Self {
        match shape {
            MetricsShape::V1 => Version::V1,
            MetricsShape::V0 => Version::V0,
        }
    }
}

/// Everything vLLM counts, cumulative since the engine started.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineStats {
    /// Prompt tokens, credited when a request produces its first token.
    pub prompt_tokens_total: u64,
    /// Generated tokens.
    pub generation_tokens_total: u64,
    /// Preemptions (a running request sent back to the waiting queue).
    pub num_preemptions_total: u64,
    /// Prompt tokens looked up in the prefix cache (no hits are modelled).
    pub prefix_cache_queries_total: u64,
    /// Finished requests by reason: stop, length, abort.
    pub request_success_total: [u64; 3],
    /// Engine steps taken.
    pub steps_total: u64,
    /// Prompt tokens per finished request.
    pub request_prompt_tokens: EngineHistogram,
    /// Generated tokens per finished request.
    pub request_generation_tokens: EngineHistogram,
    /// Tokens per step (prompt credited plus generated).
    pub iteration_tokens: EngineHistogram,
    /// `max_tokens` per finished request.
    pub request_max_num_generation_tokens: EngineHistogram,
    /// `n` per finished request (always 1 here).
    pub request_params_n: EngineHistogram,
    /// `max_tokens` parameter per finished request.
    pub request_params_max_tokens: EngineHistogram,
    /// Time to first token per request that produced one.
    pub time_to_first_token: EngineHistogram,
    /// Time between consecutive tokens of a request.
    pub inter_token_latency: EngineHistogram,
    /// Mean time per output token per finished request.
    pub request_time_per_output_token: EngineHistogram,
    /// Arrival to finish per finished request.
    pub e2e_request_latency: EngineHistogram,
    /// Arrival to first scheduled.
    pub request_queue_time: EngineHistogram,
    /// First scheduled to finish.
    pub request_inference_time: EngineHistogram,
    /// First scheduled to first token.
    pub request_prefill_time: EngineHistogram,
    /// First token to finish.
    pub request_decode_time: EngineHistogram,
}

impl EngineStats {
    /// Empty statistics with the bucket lists of `shape` (from the catalog).
    pub fn new(shape: MetricsShape) -> Self {
        let version = Version::from(shape);
        let histogram = |metric: Metric| EngineHistogram::new(metric.family().buckets(version));
        EngineStats {
            prompt_tokens_total: 0,
            generation_tokens_total: 0,
            num_preemptions_total: 0,
            prefix_cache_queries_total: 0,
            request_success_total: [0; 3],
            steps_total: 0,
            request_prompt_tokens: histogram(Metric::RequestPromptTokens),
            request_generation_tokens: histogram(Metric::RequestGenerationTokens),
            iteration_tokens: histogram(Metric::IterationTokens),
            request_max_num_generation_tokens: histogram(Metric::RequestMaxNumGenerationTokens),
            request_params_n: histogram(Metric::RequestParamsN),
            request_params_max_tokens: histogram(Metric::RequestParamsMaxTokens),
            time_to_first_token: histogram(Metric::TimeToFirstToken),
            inter_token_latency: histogram(Metric::InterTokenLatency),
            // V1's per-request TPOT shares the inter-token buckets; V0 exposes no such family
            // and keeps its time-per-output-token buckets.
            request_time_per_output_token: histogram(Metric::InterTokenLatency),
            e2e_request_latency: histogram(Metric::E2eRequestLatency),
            request_queue_time: histogram(Metric::RequestQueueTime),
            request_inference_time: histogram(Metric::RequestInferenceTime),
            request_prefill_time: histogram(Metric::RequestPrefillTime),
            request_decode_time: histogram(Metric::RequestDecodeTime),
        }
    }

    /// Finished requests for one reason.
    pub fn finished(&self, reason: FinishReason) -> u64 {
        self.request_success_total[reason as usize]
    }

    /// Finished requests over every reason.
    pub fn finished_total(&self) -> u64 {
        self.request_success_total.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_use_le_semantics_and_stay_cumulative() {
        let mut h = EngineHistogram::new(&[1.0, 2.0]);
        h.observe(1.0);
        h.observe(1.5);
        h.observe_n(5.0, 3);
        assert_eq!(h.cumulative().collect::<Vec<_>>(), vec![1, 2, 5]);
        assert_eq!(h.count(), 5);
        assert!((h.sum() - 17.5).abs() < 1e-12);
    }
}
