//! `emulate`'s flags and their conversion into the emulator's [`EmulateOptions`].

use vllm_emulator::{EmulateOptions, MetricsShape};

/// `emulate` arguments: fleet size and ports, the served model, and every engine parameter
/// (defaults: Llama-3.1-8B on one H100, see `docs/emulator.md`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct EmulateArgs {
    /// Number of replicas.
    #[arg(long, default_value_t = 1)]
    pub(crate) replicas: usize,
    /// Replica i listens on 127.0.0.1:(base-port + i); 0 picks free ports.
    #[arg(long, default_value_t = 8000)]
    pub(crate) base_port: u16,
    /// Served model name.
    #[arg(long, default_value = "meta-llama/Llama-3.1-8B-Instruct")]
    pub(crate) model: String,
    /// /metrics layout: v1 (vLLM 0.9+) or v0 (vLLM 0.6 and older names).
    #[arg(long, value_enum, default_value_t = MetricsShapeArg::V1)]
    pub(crate) metrics_shape: MetricsShapeArg,
    /// Seed for fault-injection draws (replica i uses seed + i).
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// max_tokens for chat requests that give none.
    #[arg(long, default_value_t = 256)]
    pub(crate) default_max_tokens: u32,
    /// Most sequences per batch.
    #[arg(long)]
    pub(crate) max_num_seqs: Option<u32>,
    /// Token budget per engine step (prefills are chunked to fit).
    #[arg(long)]
    pub(crate) max_num_batched_tokens: Option<u32>,
    /// KV-cache capacity in blocks.
    #[arg(long)]
    pub(crate) num_gpu_blocks: Option<u32>,
    /// Tokens per KV-cache block.
    #[arg(long)]
    pub(crate) block_size: Option<u32>,
    /// Longest prompt plus output accepted.
    #[arg(long)]
    pub(crate) max_model_len: Option<u32>,
    /// Fixed cost of one engine step in seconds.
    #[arg(long)]
    pub(crate) step_base_seconds: Option<f64>,
    /// Cost of each scheduled token in seconds.
    #[arg(long)]
    pub(crate) per_token_seconds: Option<f64>,
    /// Cost per token of context read by a decoding sequence in seconds.
    #[arg(long)]
    pub(crate) per_context_token_seconds: Option<f64>,
    /// Step-time multiplier (a fault: 2.0 = twice as slow).
    #[arg(long)]
    pub(crate) slowdown: Option<f64>,
}

/// The `--metrics-shape` values, one per [`MetricsShape`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum MetricsShapeArg {
    /// vLLM V1 (0.12 line): `engine` label, `_created` gauges, `kv_cache_usage_perc`,
    /// `inter_token_latency_seconds`, long-tail buckets.
    V1,
    /// vLLM V0 (0.6 line, multiprocess collector): `model_name` only, no `_created`,
    /// `gpu_cache_usage_perc`, `time_per_output_token_seconds`, short buckets.
    V0,
}

impl From<MetricsShapeArg> for MetricsShape {
    fn from(shape: MetricsShapeArg) -> Self {
        match shape {
            MetricsShapeArg::V1 => MetricsShape::V1,
            MetricsShapeArg::V0 => MetricsShape::V0,
        }
    }
}

impl From<EmulateArgs> for EmulateOptions {
    fn from(args: EmulateArgs) -> Self {
        Self {
            replicas: args.replicas,
            base_port: args.base_port,
            model: args.model,
            metrics_shape: args.metrics_shape.into(),
            seed: args.seed,
            default_max_tokens: args.default_max_tokens,
            max_num_seqs: args.max_num_seqs,
            max_num_batched_tokens: args.max_num_batched_tokens,
            num_gpu_blocks: args.num_gpu_blocks,
            block_size: args.block_size,
            max_model_len: args.max_model_len,
            step_base_seconds: args.step_base_seconds,
            per_token_seconds: args.per_token_seconds,
            per_context_token_seconds: args.per_context_token_seconds,
            slowdown: args.slowdown,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: EmulateArgs,
    }

    fn parse(argv: &[&str]) -> EmulateOptions {
        let argv = std::iter::once("emulate").chain(argv.iter().copied());
        Cli::try_parse_from(argv).expect("parses").args.into()
    }

    #[test]
    fn no_flags_give_the_library_defaults() {
        assert_eq!(parse(&[]), EmulateOptions::default());
    }

    #[test]
    fn flags_reach_the_options() {
        let options = parse(&[
            "--replicas",
            "3",
            "--metrics-shape",
            "v0",
            "--slowdown",
            "2",
        ]);
        assert_eq!(options.replicas, 3);
        assert_eq!(options.metrics_shape, MetricsShape::V0);
        assert_eq!(options.slowdown, Some(2.0));
        assert!(Cli::try_parse_from(["emulate", "--metrics-shape", "v2"]).is_err());
    }
}
