//! A vLLM-like replica (engine model, OpenAI-compatible HTTP, vLLM-shaped /metrics) and a fleet
//! of them on loopback.
//!
//! Owns: the engine model ([`engine`], pure and steppable in virtual or real time), its
//! parameters and calibration ([`config`]), vLLM's counters ([`stats`]) and their rendering
//! ([`metrics`]). Does not own scraping or parsing `/metrics` (see [`vllm_keda_service::scrape`],
//! [`vllm_keda_core::exposition`]) or any scaling decision.

pub mod config;
pub mod engine;
pub mod fleet;
pub mod http_stats;
pub mod metrics;
pub mod openai;
pub mod request;
mod routes;
pub mod server;
pub mod stats;
pub mod text;

pub use config::{
    ConfigError, DEFAULT_PROFILE, EngineConfig, EngineProfile, MetricsShape, PROFILES,
    RequestShape, SaturationLimit, SaturationPrediction,
};
pub use engine::{Engine, PublishedGauges};
pub use fleet::{LoopbackFleet, ReplicaHandle};
pub use http_stats::{HttpObservation, HttpStats};
pub use metrics::{RenderInfo, render, render_string};
pub use request::{Event, FinishReason, RejectError, RequestId, RequestRecord, RequestSpec};
pub use server::{FaultState, FaultUpdate, Replica, ReplicaConfig, ReplicaSnapshot};
pub use text::py_float;
/// The seeded generator for fault injection and tests, so a `--seed` reproduces a run exactly.
pub use vllm_keda_core::rng::SplitMix64;

/// What `emulate` runs: fleet size and ports, the served model, and every engine parameter
/// (`None` keeps the calibrated default: Llama-3.1-8B on one H100, see `docs/emulator.md`).
/// [`Default`] is the command line's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct EmulateOptions {
    /// Number of replicas.
    pub replicas: usize,
    /// Replica i listens on 127.0.0.1:(base_port + i); 0 picks free ports.
    pub base_port: u16,
    /// Served model name.
    pub model: String,
    /// /metrics layout.
    pub metrics_shape: MetricsShape,
    /// Seed for fault-injection draws (replica i uses seed + i).
    pub seed: u64,
    /// max_tokens for chat requests that give none.
    pub default_max_tokens: u32,
    /// Most sequences per batch.
    pub max_num_seqs: Option<u32>,
    /// Token budget per engine step (prefills are chunked to fit).
    pub max_num_batched_tokens: Option<u32>,
    /// KV-cache capacity in blocks.
    pub num_gpu_blocks: Option<u32>,
    /// Tokens per KV-cache block.
    pub block_size: Option<u32>,
    /// Longest prompt plus output accepted.
    pub max_model_len: Option<u32>,
    /// Fixed cost of one engine step in seconds.
    pub step_base_seconds: Option<f64>,
    /// Cost of each scheduled token in seconds.
    pub per_token_seconds: Option<f64>,
    /// Cost per token of context read by a decoding sequence in seconds.
    pub per_context_token_seconds: Option<f64>,
    /// Step-time multiplier (a fault: 2.0 = twice as slow).
    pub slowdown: Option<f64>,
}

impl Default for EmulateOptions {
    fn default() -> Self {
        Self {
            replicas: 1,
            base_port: 8000,
            model: "meta-llama/Llama-3.1-8B-Instruct".to_owned(),
            metrics_shape: MetricsShape::V1,
            seed: 0,
            default_max_tokens: 256,
            max_num_seqs: None,
            max_num_batched_tokens: None,
            num_gpu_blocks: None,
            block_size: None,
            max_model_len: None,
            step_base_seconds: None,
            per_token_seconds: None,
            per_context_token_seconds: None,
            slowdown: None,
        }
    }
}

impl EmulateOptions {
    /// The validated replica configuration these options describe.
    pub fn replica_config(&self) -> Result<ReplicaConfig, ConfigError> {
        let d = EngineConfig::default();
        let engine = EngineConfig {
            block_size: self.block_size.unwrap_or(d.block_size),
            num_gpu_blocks: self.num_gpu_blocks.unwrap_or(d.num_gpu_blocks),
            max_num_seqs: self.max_num_seqs.unwrap_or(d.max_num_seqs),
            max_num_batched_tokens: self
                .max_num_batched_tokens
                .unwrap_or(d.max_num_batched_tokens),
            max_model_len: self.max_model_len.unwrap_or(d.max_model_len),
            step_base_seconds: self.step_base_seconds.unwrap_or(d.step_base_seconds),
            per_token_seconds: self.per_token_seconds.unwrap_or(d.per_token_seconds),
            per_context_token_seconds: self
                .per_context_token_seconds
                .unwrap_or(d.per_context_token_seconds),
            slowdown: self.slowdown.unwrap_or(d.slowdown),
            metrics_shape: self.metrics_shape,
        };
        engine.validate()?;
        Ok(ReplicaConfig {
            model: self.model.clone(),
            engine,
            seed: self.seed,
            default_max_tokens: self.default_max_tokens.max(1),
        })
    }
}

/// Runs `emulate`: starts the fleet and serves until SIGINT or SIGTERM.
pub fn run(options: EmulateOptions) -> anyhow::Result<()> {
    let config = options.replica_config()?;
    if options.replicas == 0 {
        anyhow::bail!("--replicas must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let fleet =
            LoopbackFleet::start(options.replicas, options.base_port, config.clone()).await?;
        let urls = fleet.urls();
        let shown = if urls.len() <= 4 {
            urls.join(" ")
        } else {
            format!("{} ... {}", urls[0], urls[urls.len() - 1])
        };
        let shape = config.engine.predicted_saturation(RequestShape {
            prompt_tokens: 512,
            output_tokens: 128,
        });
        println!(
            "emulating {} replica(s) of {} ({:?} metrics): {shown}",
            fleet.len(),
            config.model,
            config.engine.metrics_shape
        );
        println!(
            "each saturates near {:.1} req/s for 512-token prompts and 128-token outputs; \
             routes: /v1/completions /v1/chat/completions /v1/models /health /metrics /admin/fault",
            shape.requests_per_second
        );
        shutdown_signal().await;
        println!("stopping {} replica(s)", fleet.len());
        fleet.shutdown().await;
        anyhow::Ok(())
    })
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
