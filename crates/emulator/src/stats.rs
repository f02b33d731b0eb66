//! The engine's cumulative statistics: vLLM's counters and histograms, with vLLM's bucket lists.
//!
//! Owns: [`Histogram`], [`EngineStats`] and the bucket tables of both metric shapes. Updated by
//! [`super::engine`] as it steps; read by [`super::metrics`] to render a body. Does not render.

use super::config::MetricsShape;
use super::engine::FinishReason;

/// A cumulative histogram with fixed upper bounds (`le`), like `prometheus_client`'s.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Per-bucket (non-cumulative) counts; the last entry is the `+Inf` bucket.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram with these finite upper bounds (ascending).
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
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

/// vLLM 1-2-5 token buckets (as served for the fixture's model length).
pub const TOKEN_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0,
];
/// `request_params_n` buckets.
pub const N_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0];
/// V1 `iteration_tokens_total` buckets.
pub const V1_ITERATION_BUCKETS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];
/// V0 `iteration_tokens_total` buckets.
pub const V0_ITERATION_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 24.0, 32.0, 40.0, 48.0, 56.0, 64.0, 72.0, 80.0, 88.0, 96.0, 104.0,
    112.0, 120.0, 128.0, 136.0, 144.0, 152.0, 160.0, 168.0, 176.0, 184.0, 192.0, 200.0, 208.0,
    216.0, 224.0, 232.0, 240.0, 248.0, 256.0,
];
/// V1 time-to-first-token buckets.
pub const V1_TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// V0 time-to-first-token buckets.
pub const V0_TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// V1 inter-token latency (and per-request TPOT) buckets.
pub const V1_ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// V0 time-per-output-token buckets.
pub const V0_ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];
/// V1 request latency buckets (e2e, queue, inference, prefill, decode).
pub const V1_LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// V0 request latency buckets.
pub const V0_LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
];
/// V0 model forward/execute time buckets (milliseconds).
pub const V0_MODEL_TIME_MS_BUCKETS: &[f64] = &[
    1.0, 2.0, 3.0, 5.0, 8.0, 10.0, 20.0, 30.0, 50.0, 80.0, 100.0, 200.0, 300.0, 500.0, 800.0,
    1000.0, 2000.0, 3000.0,
];

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
    pub request_prompt_tokens: Histogram,
    /// Generated tokens per finished request.
    pub request_generation_tokens: Histogram,
    /// Tokens per step (prompt credited plus generated).
    pub iteration_tokens: Histogram,
    /// `max_tokens` per finished request.
    pub request_max_num_generation_tokens: Histogram,
    /// `n` per finished request (always 1 here).
    pub request_params_n: Histogram,
    /// `max_tokens` parameter per finished request.
    pub request_params_max_tokens: Histogram,
    /// Time to first token per request that produced one.
    pub time_to_first_token: Histogram,
    /// Time between consecutive tokens of a request.
    pub inter_token_latency: Histogram,
    /// Mean time per output token per finished request.
    pub request_time_per_output_token: Histogram,
    /// Arrival to finish per finished request.
    pub e2e_request_latency: Histogram,
    /// Arrival to first scheduled.
    pub request_queue_time: Histogram,
    /// First scheduled to finish.
    pub request_inference_time: Histogram,
    /// First scheduled to first token.
    pub request_prefill_time: Histogram,
    /// First token to finish.
    pub request_decode_time: Histogram,
}

impl EngineStats {
    /// Empty statistics with the bucket lists of `shape`.
    pub fn new(shape: MetricsShape) -> Self {
        let (iteration, ttft, itl, latency) = match shape {
            MetricsShape::V1 => (
                V1_ITERATION_BUCKETS,
                V1_TTFT_BUCKETS,
                V1_ITL_BUCKETS,
                V1_LATENCY_BUCKETS,
            ),
            MetricsShape::V0 => (
                V0_ITERATION_BUCKETS,
                V0_TTFT_BUCKETS,
                V0_ITL_BUCKETS,
                V0_LATENCY_BUCKETS,
            ),
        };
        EngineStats {
            prompt_tokens_total: 0,
            generation_tokens_total: 0,
            num_preemptions_total: 0,
            prefix_cache_queries_total: 0,
            request_success_total: [0; 3],
            steps_total: 0,
            request_prompt_tokens: Histogram::new(TOKEN_BUCKETS),
            request_generation_tokens: Histogram::new(TOKEN_BUCKETS),
            iteration_tokens: Histogram::new(iteration),
            request_max_num_generation_tokens: Histogram::new(TOKEN_BUCKETS),
            request_params_n: Histogram::new(N_BUCKETS),
            request_params_max_tokens: Histogram::new(TOKEN_BUCKETS),
            time_to_first_token: Histogram::new(ttft),
            inter_token_latency: Histogram::new(itl),
            request_time_per_output_token: Histogram::new(itl),
            e2e_request_latency: Histogram::new(latency),
            request_queue_time: Histogram::new(latency),
            request_inference_time: Histogram::new(latency),
            request_prefill_time: Histogram::new(latency),
            request_decode_time: Histogram::new(latency),
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
        let mut h = Histogram::new(&[1.0, 2.0]);
        h.observe(1.0);
        h.observe(1.5);
        h.observe_n(5.0, 3);
        assert_eq!(h.cumulative().collect::<Vec<_>>(), vec![1, 2, 5]);
        assert_eq!(h.count(), 5);
        assert!((h.sum() - 17.5).abs() < 1e-12);
    }
}
