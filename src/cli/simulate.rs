//! `simulate`'s flags and their conversion into the tools' [`SimulateOptions`].

use std::path::PathBuf;

use vllm_keda_tools::simulate::SimulateOptions;

/// Command-line arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SimulateArgs {
    /// Trace to replay: a file (Azure 2023 CSV or Mooncake JSONL) or a built-in scenario:
    /// azure-code, azure-conv, mooncake (bundled traces) or step (the guide's load test).
    /// Repeat for several scenarios.
    #[arg(long = "trace", default_value = "azure-conv")]
    pub(crate) traces: Vec<String>,
    /// Multiply the trace's request rate (requests are replicated).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) rate_multiplier: f64,
    /// Divide the trace's timestamps (same requests, faster).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) time_compression: f64,
    /// Only the first this many seconds of each trace (after reshaping).
    #[arg(long)]
    pub(crate) duration_seconds: Option<f64>,
    /// Policies to compare: ours, prometheus-keda, kpa (Knative's concurrency autoscaler,
    /// target 256 in-flight requests per replica at 70 % utilisation), kpa:TARGET, static:N,
    /// oracle.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ours,prometheus-keda,static:4,oracle"
    )]
    pub(crate) policies: Vec<String>,
    /// Scaler metadata for `ours` (repeatable `key=value`, as in a ScaledObject trigger).
    #[arg(long = "metadata", value_name = "KEY=VALUE")]
    pub(crate) metadata: Vec<String>,
    /// Lowest replica count for every policy.
    #[arg(long, default_value_t = 1)]
    pub(crate) min_replicas: u32,
    /// Highest replica count for every policy.
    #[arg(long, default_value_t = 20)]
    pub(crate) max_replicas: u32,
    /// Seconds from asking for a replica to it serving (the guide: 2-10 minutes).
    #[arg(long, default_value_t = 300.0)]
    pub(crate) startup_delay_seconds: f64,
    /// Prometheus scrape interval of the prometheus-keda chain (the guide: 15-30 s).
    #[arg(long, default_value_t = 15.0)]
    pub(crate) prometheus_scrape_seconds: f64,
    /// SLO: time to first token, seconds.
    #[arg(long, default_value_t = 2.0)]
    pub(crate) ttft_slo_seconds: f64,
    /// SLO: mean time per output token, seconds.
    #[arg(long, default_value_t = 0.1)]
    pub(crate) tpot_slo_seconds: f64,
    /// End-to-end target reported beside the SLO, seconds.
    #[arg(long, default_value_t = 5.0)]
    pub(crate) e2e_slo_seconds: f64,
    /// Seed of the arrival jitter given to requests replicated by --rate-multiplier.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Print one JSON list (one object per policy and scenario) instead of Markdown.
    #[arg(long)]
    pub(crate) json: bool,
    /// Write report.md, report.json and one SVG plot per scenario into this directory.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
}

impl From<SimulateArgs> for SimulateOptions {
    fn from(args: SimulateArgs) -> Self {
        Self {
            traces: args.traces,
            rate_multiplier: args.rate_multiplier,
            time_compression: args.time_compression,
            duration_seconds: args.duration_seconds,
            policies: args.policies,
            metadata: args.metadata,
            min_replicas: args.min_replicas,
            max_replicas: args.max_replicas,
            startup_delay_seconds: args.startup_delay_seconds,
            prometheus_scrape_seconds: args.prometheus_scrape_seconds,
            ttft_slo_seconds: args.ttft_slo_seconds,
            tpot_slo_seconds: args.tpot_slo_seconds,
            e2e_slo_seconds: args.e2e_slo_seconds,
            seed: args.seed,
            json: args.json,
            out: args.out,
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
        args: SimulateArgs,
    }

    fn parse(argv: &[&str]) -> SimulateOptions {
        let argv = std::iter::once("simulate").chain(argv.iter().copied());
        Cli::try_parse_from(argv).expect("parses").args.into()
    }

    #[test]
    fn no_flags_give_the_library_defaults() {
        assert_eq!(parse(&[]), SimulateOptions::default());
    }

    #[test]
    fn repeated_and_delimited_flags_collect() {
        let options = parse(&[
            "--trace",
            "step",
            "--trace",
            "mooncake",
            "--policies",
            "ours,kpa:64",
            "--metadata",
            "a=1",
            "--metadata",
            "b=2",
        ]);
        assert_eq!(options.traces, ["step", "mooncake"]);
        assert_eq!(options.policies, ["ours", "kpa:64"]);
        assert_eq!(options.metadata, ["a=1", "b=2"]);
    }
}
