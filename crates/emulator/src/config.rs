//! Engine parameters, their calibrated defaults, and the closed-form saturation prediction.
//!
//! Owns: [`EngineConfig`] (every knob of the engine model, validated once by
//! [`EngineConfig::validate`]) and [`EngineConfig::predicted_saturation`]. Does not own the
//! stepping itself (see [`super::engine`]). The calibration and its sources are written down in
//! `docs/emulator.md`.

/// Which vLLM `/metrics` layout a replica renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetricsShape {
    /// vLLM V1 (0.12 line): `engine` label, `_created` gauges, `kv_cache_usage_perc`,
    /// `inter_token_latency_seconds`, long-tail buckets.
    #[default]
    V1,
    /// vLLM V0 (0.6 line, multiprocess collector): `model_name` only, no `_created`,
    /// `gpu_cache_usage_perc`, `time_per_output_token_seconds`, short buckets.
    V0,
}

/// Every parameter of the engine model. [`Default`] is Llama-3.1-8B-Instruct in BF16 on one
/// H100 80GB SXM under vLLM with `gpu_memory_utilization=0.9` (see `docs/emulator.md`).
///
/// Step time model: one engine step that schedules `t` tokens (prefill chunks plus one token per
/// decoding sequence) while the decoding sequences hold `c` tokens of context in total takes
/// `(step_base_seconds + t * per_token_seconds + c * per_context_token_seconds) * slowdown`.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Tokens per KV-cache block (vLLM `--block-size`, 16).
    pub block_size: u32,
    /// KV-cache capacity in blocks (vLLM's `num_gpu_blocks`).
    pub num_gpu_blocks: u32,
    /// Most sequences in one batch (vLLM `--max-num-seqs`).
    pub max_num_seqs: u32,
    /// Token budget of one step (vLLM `--max-num-batched-tokens`); prefills are chunked to fit.
    pub max_num_batched_tokens: u32,
    /// Longest prompt plus output accepted (vLLM `--max-model-len`).
    pub max_model_len: u32,
    /// Fixed cost of one step in seconds: reading the weights once, launch overhead.
    pub step_base_seconds: f64,
    /// Cost of each scheduled token (prefill or decode) in seconds: the matmul FLOPs.
    pub per_token_seconds: f64,
    /// Cost per token of context attended by a decoding sequence in seconds: the KV-cache read.
    pub per_context_token_seconds: f64,
    /// Multiplier on every step's duration (1.0 = calibrated speed; a fault control).
    pub slowdown: f64,
    /// Histogram bucket layout kept by the engine's statistics.
    pub metrics_shape: MetricsShape,
}

/// Llama-3.1-8B BF16 weights: 8.03e9 parameters x 2 bytes.
const WEIGHT_BYTES: f64 = 16.06e9;
/// H100 SXM HBM3 bandwidth in bytes per second.
const HBM_BYTES_PER_SECOND: f64 = 3.35e12;
/// Fraction of peak bandwidth a decode step reaches.
const BANDWIDTH_EFFICIENCY: f64 = 0.77;
/// H100 SXM dense BF16 peak FLOP/s.
const PEAK_FLOPS: f64 = 989e12;
/// Model FLOP utilisation reached on large token batches.
const MFU: f64 = 0.5;
/// KV bytes per token: 2 (K and V) x 32 layers x 8 KV heads x 128 head dim x 2 bytes.
const KV_BYTES_PER_TOKEN: f64 = 131_072.0;

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            block_size: 16,
            // (80 GiB x 0.9 - 15 GiB weights - ~1.9 GiB activations) / 2 MiB per block.
            num_gpu_blocks: 28_000,
            max_num_seqs: 256,
            max_num_batched_tokens: 8192,
            max_model_len: 131_072,
            step_base_seconds: WEIGHT_BYTES / (HBM_BYTES_PER_SECOND * BANDWIDTH_EFFICIENCY),
            per_token_seconds: 2.0 * 8.03e9 / (PEAK_FLOPS * MFU),
            per_context_token_seconds: KV_BYTES_PER_TOKEN
                / (HBM_BYTES_PER_SECOND * BANDWIDTH_EFFICIENCY),
            slowdown: 1.0,
            metrics_shape: MetricsShape::V1,
        }
    }
}

/// A named engine configuration: a model on a GPU class under vLLM's defaults for that class.
/// The numbers and their sources are in `docs/emulator.md`.
#[derive(Debug, Clone, Copy)]
pub struct EngineProfile {
    /// The name `--engine` takes.
    pub name: &'static str,
    /// One line for `--help`.
    pub description: &'static str,
    /// The configuration.
    pub config: fn() -> EngineConfig,
}

/// The hardware and model numbers a profile's step-time model is derived from, the same way
/// as [`EngineConfig::default`]'s: the fixed step cost reads the weights once at a share of the
/// HBM bandwidth, each token costs its matmul FLOPs at a model FLOP utilisation, each token of
/// context its KV bytes at the same share of the bandwidth.
struct Roofline {
    params: f64,
    weight_bytes: f64,
    hbm_bytes_per_second: f64,
    bandwidth_efficiency: f64,
    peak_flops: f64,
    mfu: f64,
    kv_bytes_per_token: f64,
}

impl Roofline {
    fn config(
        &self,
        num_gpu_blocks: u32,
        max_num_seqs: u32,
        max_num_batched_tokens: u32,
        max_model_len: u32,
    ) -> EngineConfig {
        let bandwidth = self.hbm_bytes_per_second * self.bandwidth_efficiency;
        EngineConfig {
            block_size: 16,
            num_gpu_blocks,
            max_num_seqs,
            max_num_batched_tokens,
            max_model_len,
            step_base_seconds: self.weight_bytes / bandwidth,
            per_token_seconds: 2.0 * self.params / (self.peak_flops * self.mfu),
            per_context_token_seconds: self.kv_bytes_per_token / bandwidth,
            slowdown: 1.0,
            metrics_shape: MetricsShape::V1,
        }
    }
}

/// Llama-3.1-8B in BF16 on a GPU with this bandwidth and peak BF16 FLOP/s.
fn llama8b_on(hbm_bytes_per_second: f64, peak_flops: f64) -> Roofline {
    Roofline {
        params: 8.03e9,
        weight_bytes: WEIGHT_BYTES,
        hbm_bytes_per_second,
        bandwidth_efficiency: BANDWIDTH_EFFICIENCY,
        peak_flops,
        mfu: MFU,
        kv_bytes_per_token: KV_BYTES_PER_TOKEN,
    }
}

/// The simulator's default profile.
pub const DEFAULT_PROFILE: &str = "h100-llama3.1-8b";

/// Every engine profile (`--engine NAME`).
pub const PROFILES: &[EngineProfile] = &[
    EngineProfile {
        name: "h100-llama3.1-8b",
        description: "Llama-3.1-8B BF16 on one H100 80GB SXM, vLLM's H100 defaults (max_num_seqs 1024, max_num_batched_tokens 8192)",
        config: || EngineConfig {
            max_num_seqs: 1024,
            max_num_batched_tokens: 8192,
            ..EngineConfig::default()
        },
    },
    EngineProfile {
        name: "emulator-default",
        description: "the emulator's default: Llama-3.1-8B BF16 on one H100 with max_num_seqs 256 (vLLM's pre-0.9 default)",
        config: EngineConfig::default,
    },
    EngineProfile {
        name: "l40s-llama3.2-3b",
        description: "a small model (Llama-3.2-3B BF16) on one L40S 48GB (AWS g6e), vLLM's defaults below 70 GiB (256, 2048)",
        config: || {
            Roofline {
                params: 3.21e9,
                weight_bytes: 6.43e9,
                hbm_bytes_per_second: 864e9,
                bandwidth_efficiency: BANDWIDTH_EFFICIENCY,
                peak_flops: 362e12,
                mfu: MFU,
                // 28 layers x 8 KV heads x 128 head dim x 2 (K, V) x 2 bytes.
                kv_bytes_per_token: 114_688.0,
            }
            // (44.4 GiB x 0.9 - 6.0 GiB weights - ~1.5 GiB activations) / 1.75 MiB per block.
            .config(18_500, 256, 2048, 131_072)
        },
    },
    EngineProfile {
        name: "a10g-llama3.1-8b",
        description: "Llama-3.1-8B BF16 on one A10G 24GB (AWS g5), vLLM's defaults below 70 GiB (256, 2048), max_model_len 16384",
        // (22.0 GiB x 0.9 - 15.0 GiB weights - ~0.9 GiB activations) / 2 MiB per block.
        config: || llama8b_on(600e9, 125e12).config(1_950, 256, 2048, 16_384),
    },
    EngineProfile {
        name: "l4-llama3.1-8b",
        description: "Llama-3.1-8B BF16 on one L4 24GB (AWS g6), vLLM's defaults below 70 GiB (256, 2048), max_model_len 16384",
        config: || llama8b_on(300e9, 121e12).config(1_950, 256, 2048, 16_384),
    },
    EngineProfile {
        name: "4xh100-llama3.1-70b",
        description: "Llama-3.1-70B BF16 on four H100 80GB SXM (tensor parallel 4), vLLM's H100 defaults (1024, 8192)",
        config: || {
            Roofline {
                params: 70.6e9,
                weight_bytes: 141.1e9,
                hbm_bytes_per_second: 4.0 * HBM_BYTES_PER_SECOND,
                // Tensor-parallel all-reduces cost a share of each step.
                bandwidth_efficiency: 0.6,
                peak_flops: 4.0 * PEAK_FLOPS,
                mfu: 0.4,
                // 80 layers x 8 KV heads x 128 head dim x 2 (K, V) x 2 bytes.
                kv_bytes_per_token: 327_680.0,
            }
            // (4 x 80 GiB x 0.9 - 131.4 GiB weights - ~8 GiB activations) / 5 MiB per block.
            .config(29_000, 1024, 8192, 131_072)
        },
    },
];

impl EngineConfig {
    /// The configuration of a named profile ([`PROFILES`]).
    pub fn profile(name: &str) -> Option<EngineConfig> {
        PROFILES
            .iter()
            .find(|p| p.name == name.trim())
            .map(|p| (p.config)())
    }
}

/// A configuration value that cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("engine config {field}: {problem}")]
pub struct ConfigError {
    /// The offending field (CLI flag spelling).
    pub field: &'static str,
    /// What is wrong and how to fix it.
    pub problem: String,
}

impl EngineConfig {
    /// Checks that the engine can run with these values.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field, problem: &str| ConfigError {
            field,
            problem: problem.to_string(),
        };
        if self.block_size == 0 {
            return Err(err("block-size", "must be at least 1"));
        }
        if self.num_gpu_blocks == 0 {
            return Err(err("num-gpu-blocks", "must be at least 1"));
        }
        if self.max_num_seqs == 0 {
            return Err(err("max-num-seqs", "must be at least 1"));
        }
        if self.max_num_batched_tokens == 0 {
            return Err(err("max-num-batched-tokens", "must be at least 1"));
        }
        if self.max_model_len < 2 {
            return Err(err("max-model-len", "must be at least 2"));
        }
        let capacity = u64::from(self.num_gpu_blocks) * u64::from(self.block_size);
        if u64::from(self.max_model_len) > capacity {
            return Err(ConfigError {
                field: "max-model-len",
                problem: format!(
                    "{} tokens do not fit in the KV cache ({} blocks x {} tokens = {capacity}); \
                     lower --max-model-len or raise --num-gpu-blocks",
                    self.max_model_len, self.num_gpu_blocks, self.block_size
                ),
            });
        }
        // Upper bounds far beyond any GPU keep a step's time within what a duration holds.
        let positive = |v: f64, most: f64| v.is_finite() && v > 0.0 && v <= most;
        let non_negative = |v: f64, most: f64| v.is_finite() && (0.0..=most).contains(&v);
        if !positive(self.step_base_seconds, 60.0) {
            return Err(err(
                "step-base-seconds",
                "must be a positive number of seconds, at most 60",
            ));
        }
        if !non_negative(self.per_token_seconds, 1.0) {
            return Err(err(
                "per-token-seconds",
                "must be zero or a positive number of seconds, at most 1",
            ));
        }
        if !non_negative(self.per_context_token_seconds, 1.0) {
            return Err(err(
                "per-context-token-seconds",
                "must be zero or a positive number of seconds, at most 1",
            ));
        }
        if !positive(self.slowdown, 1000.0) {
            return Err(err(
                "slowdown",
                "must be a positive number (1.0 = normal), at most 1000",
            ));
        }
        Ok(())
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: u32) -> u32 {
        tokens.div_ceil(self.block_size)
    }

    /// Duration in seconds of one step scheduling `tokens` tokens while decoding sequences
    /// attend `context_tokens` tokens of context in total (slowdown included).
    pub fn step_seconds(&self, tokens: u64, context_tokens: u64) -> f64 {
        (self.step_base_seconds
            + tokens as f64 * self.per_token_seconds
            + context_tokens as f64 * self.per_context_token_seconds)
            * self.slowdown
    }

    /// The throughput at which one replica saturates for a stream of identical requests, from
    /// the step-time model (see `docs/emulator.md` for the derivation).
    pub fn predicted_saturation(&self, shape: RequestShape) -> SaturationPrediction {
        let p = f64::from(shape.prompt_tokens.max(1));
        let o = f64::from(shape.output_tokens.max(1));
        // Concurrency limits: sequences, KV cache (average footprint over a request's life),
        // and the per-step token budget (decode tokens plus the prefill share).
        let by_seqs = f64::from(self.max_num_seqs);
        let avg_blocks = (p + o / 2.0) / f64::from(self.block_size) + 0.5;
        let by_kv = f64::from(self.num_gpu_blocks) / avg_blocks;
        let by_budget = f64::from(self.max_num_batched_tokens) * o / (p + o);
        let (concurrency, limited_by) = if by_seqs <= by_kv && by_seqs <= by_budget {
            (by_seqs, SaturationLimit::MaxNumSeqs)
        } else if by_kv <= by_budget {
            (by_kv, SaturationLimit::KvCache)
        } else {
            (by_budget, SaturationLimit::TokenBudget)
        };
        // Each request costs its tokens, its decode-time context reads, and a 1/B share of the
        // fixed cost of the O steps during which it holds a batch slot.
        let per_request_seconds = self.slowdown
            * ((p + o - 1.0) * self.per_token_seconds
                + (o - 1.0) * (p + o / 2.0) * self.per_context_token_seconds
                + o * self.step_base_seconds / concurrency);
        let requests_per_second = 1.0 / per_request_seconds;
        SaturationPrediction {
            requests_per_second,
            output_tokens_per_second: requests_per_second * o,
            concurrency,
            limited_by,
            step_seconds: concurrency / (requests_per_second * o),
        }
    }
}

/// A request shape for [`EngineConfig::predicted_saturation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestShape {
    /// Prompt tokens per request.
    pub prompt_tokens: u32,
    /// Output tokens per request.
    pub output_tokens: u32,
}

/// What bounds the batch at saturation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaturationLimit {
    /// `max_num_seqs` sequences are running.
    MaxNumSeqs,
    /// The KV cache is full (preemptions start near this point).
    KvCache,
    /// The per-step token budget is used up.
    TokenBudget,
}

/// The model's prediction of one replica's capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SaturationPrediction {
    /// Completed requests per second at saturation.
    pub requests_per_second: f64,
    /// Output tokens per second at saturation.
    pub output_tokens_per_second: f64,
    /// Sequences in the batch at saturation.
    pub concurrency: f64,
    /// What bounds the batch.
    pub limited_by: SaturationLimit,
    /// Mean step duration at saturation in seconds (the inter-token latency).
    pub step_seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_the_calibration() {
        let c = EngineConfig::default();
        c.validate().unwrap();
        // One sequence, 1k context: ~6.3 ms per token (~160 tokens/s single stream).
        let single = c.step_seconds(1, 1024);
        assert!((0.0058..0.0070).contains(&single), "{single}");
        // A 1024-token prefill alone: ~40 ms.
        let prefill = c.step_seconds(1024, 0);
        assert!((0.030..0.050).contains(&prefill), "{prefill}");
    }

    #[test]
    fn validation_names_the_field() {
        let c = EngineConfig {
            max_model_len: 1_000_000,
            ..EngineConfig::default()
        };
        let e = c.validate().unwrap_err();
        assert_eq!(e.field, "max-model-len");
        assert!(e.to_string().contains("--num-gpu-blocks"), "{e}");
        let c = EngineConfig {
            slowdown: 0.0,
            ..EngineConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "slowdown");
        // A cost too large for a step's duration is refused, not left to panic mid-request.
        type Set = fn(&mut EngineConfig);
        let costs: [(Set, &str); 4] = [
            (|c| c.per_token_seconds = 1e300, "per-token-seconds"),
            (
                |c| c.per_context_token_seconds = 2.0,
                "per-context-token-seconds",
            ),
            (|c| c.step_base_seconds = 1e300, "step-base-seconds"),
            (|c| c.slowdown = 1e300, "slowdown"),
        ];
        for (set, field) in costs {
            let mut c = EngineConfig::default();
            set(&mut c);
            let e = c.validate().unwrap_err();
            assert_eq!(e.field, field);
            assert!(e.to_string().contains("at most"), "{e}");
        }
    }

    #[test]
    fn every_profile_is_valid_and_ordered_by_speed() {
        for p in PROFILES {
            let c = (p.config)();
            c.validate()
                .unwrap_or_else(|e| panic!("profile {}: {e}", p.name));
        }
        assert_eq!(
            EngineConfig::profile("emulator-default"),
            Some(EngineConfig::default())
        );
        assert!(EngineConfig::profile(DEFAULT_PROFILE).is_some());
        assert!(EngineConfig::profile("nope").is_none());
        let single = |name: &str| EngineConfig::profile(name).unwrap().step_seconds(1, 1024);
        // One decoding sequence: the L4 (300 GB/s) is slowest, then the A10G, then the H100.
        assert!(single("l4-llama3.1-8b") > single("a10g-llama3.1-8b"));
        assert!(single("a10g-llama3.1-8b") > single("h100-llama3.1-8b"));
        // ~69 ms per token on an L4: about 14.5 tokens/s single stream.
        let l4 = single("l4-llama3.1-8b");
        assert!((0.060..0.080).contains(&l4), "{l4}");
    }

    #[test]
    fn prediction_picks_the_binding_limit() {
        let c = EngineConfig::default();
        let short = c.predicted_saturation(RequestShape {
            prompt_tokens: 512,
            output_tokens: 128,
        });
        assert_eq!(short.limited_by, SaturationLimit::MaxNumSeqs);
        let long = c.predicted_saturation(RequestShape {
            prompt_tokens: 3000,
            output_tokens: 1000,
        });
        assert_eq!(long.limited_by, SaturationLimit::KvCache);
        assert!(long.requests_per_second < short.requests_per_second);
    }
}
