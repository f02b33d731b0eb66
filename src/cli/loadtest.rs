//! `loadtest` and `warmup` flags and their conversion into the tools' [`LoadtestOptions`] and
//! [`WarmupOptions`].

use std::path::PathBuf;

use vllm_keda_tools::loadtest::shape::Arrivals;
use vllm_keda_tools::loadtest::{LoadtestOptions, WarmupOptions};

/// `loadtest` arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LoadtestArgs {
    /// Base URL of the OpenAI-compatible server (e.g. http://vllm:8000).
    #[arg(long)]
    pub(crate) url: String,
    /// Model name to request.
    #[arg(long)]
    pub(crate) model: String,
    /// Offered rates in requests per second, comma separated (default 10,20,...,70).
    #[arg(long, value_delimiter = ',', conflicts_with = "rps_range")]
    pub(crate) rps: Vec<f64>,
    /// Offered rates as FROM:TO:STEP (e.g. 10:70:10).
    #[arg(long)]
    pub(crate) rps_range: Option<String>,
    /// Seconds of load per step.
    #[arg(long, default_value_t = 60.0)]
    pub(crate) step_seconds: f64,
    /// Seconds of rest between steps (and the drain after the last).
    #[arg(long, default_value_t = 30.0)]
    pub(crate) rest_seconds: f64,
    /// Sequential warm-up requests before the first step.
    #[arg(long, default_value_t = 100)]
    pub(crate) warmup: u32,
    /// Request sizes: fixed:PROMPT:OUTPUT, uniform:PLO-PHI:OLO-OHI or trace:FILE.
    #[arg(long, default_value = "fixed:512:128")]
    pub(crate) shape: String,
    /// Arrival spacing within a step.
    #[arg(long, value_enum, default_value_t = ArrivalsArg::Uniform)]
    pub(crate) arrivals: ArrivalsArg,
    /// A vLLM pod's /metrics URL (repeat for each pod; default URL/metrics).
    #[arg(long = "metrics-url")]
    pub(crate) metrics_urls: Vec<String>,
    /// Skip scraping /metrics (client-side measurements only).
    #[arg(long, conflicts_with = "metrics_urls")]
    pub(crate) no_metrics: bool,
    /// Replicas behind the URL (default: the number of metrics URLs).
    #[arg(long)]
    pub(crate) replicas: Option<usize>,
    /// Directory for the reports.
    #[arg(long, default_value = "loadtest-report")]
    pub(crate) out: PathBuf,
    /// Seconds between /metrics scrapes.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) scrape_interval_seconds: f64,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = 300.0)]
    pub(crate) request_timeout_seconds: f64,
    /// Most requests in flight; arrivals beyond it are counted as dropped.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) max_in_flight: u64,
    /// Queue depth per replica still counted as about zero.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) queue_tolerance: f64,
    /// Latency has bent when P95 e2e exceeds this factor of the best earlier step.
    #[arg(long, default_value_t = 2.0)]
    pub(crate) latency_bend: f64,
    /// Smallest queueDepthPerReplica to recommend.
    #[arg(long, default_value_t = 3)]
    pub(crate) min_queue_depth: u32,
    /// A P95 TTFT SLO in seconds: the capacity within it (and --itl-slo-seconds) is measured
    /// and becomes the proactive policy's prior in the ScaledObject snippet.
    #[arg(long)]
    pub(crate) ttft_slo_seconds: Option<f64>,
    /// A P95 ITL SLO in seconds (see --ttft-slo-seconds).
    #[arg(long)]
    pub(crate) itl_slo_seconds: Option<f64>,
    /// Seed for sizes and Poisson arrivals.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// scalerAddress written into the ScaledObject snippet.
    #[arg(long, default_value = "vllm-keda-scaler.keda.svc.cluster.local:9090")]
    pub(crate) scaler_address: String,
    /// No live progress line.
    #[arg(long)]
    pub(crate) quiet: bool,
}

/// The `--arrivals` values, one per [`Arrivals`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ArrivalsArg {
    /// Evenly spaced (a constant arrival rate, like k6's constant-arrival-rate).
    Uniform,
    /// A Poisson process (exponential gaps): bursts like real traffic.
    Poisson,
}

impl From<ArrivalsArg> for Arrivals {
    fn from(arrivals: ArrivalsArg) -> Self {
        match arrivals {
            ArrivalsArg::Uniform => Arrivals::Uniform,
            ArrivalsArg::Poisson => Arrivals::Poisson,
        }
    }
}

impl From<LoadtestArgs> for LoadtestOptions {
    fn from(args: LoadtestArgs) -> Self {
        Self {
            url: args.url,
            model: args.model,
            rps: args.rps,
            rps_range: args.rps_range,
            step_seconds: args.step_seconds,
            rest_seconds: args.rest_seconds,
            warmup: args.warmup,
            shape: args.shape,
            arrivals: args.arrivals.into(),
            metrics_urls: args.metrics_urls,
            no_metrics: args.no_metrics,
            replicas: args.replicas,
            out: args.out,
            scrape_interval_seconds: args.scrape_interval_seconds,
            request_timeout_seconds: args.request_timeout_seconds,
            max_in_flight: args.max_in_flight,
            queue_tolerance: args.queue_tolerance,
            latency_bend: args.latency_bend,
            min_queue_depth: args.min_queue_depth,
            ttft_slo_seconds: args.ttft_slo_seconds,
            itl_slo_seconds: args.itl_slo_seconds,
            seed: args.seed,
            scaler_address: args.scaler_address,
            quiet: args.quiet,
        }
    }
}

/// `warmup` arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WarmupArgs {
    /// Base URL of the OpenAI-compatible server (e.g. http://127.0.0.1:8000).
    #[arg(long)]
    pub(crate) url: String,
    /// Model name to request.
    #[arg(long)]
    pub(crate) model: String,
    /// Sequential requests to send once the server is healthy.
    #[arg(long, default_value_t = 100)]
    pub(crate) requests: u32,
    /// File written after the warm-up succeeded (for a readiness probe).
    #[arg(long)]
    pub(crate) ready_file: Option<PathBuf>,
    /// Give up (non-zero exit) when the server is not healthy and warmed up within this time.
    #[arg(long, default_value_t = 600.0)]
    pub(crate) timeout_seconds: f64,
    /// Prompt tokens per warm-up request.
    #[arg(long, default_value_t = 128)]
    pub(crate) prompt_tokens: u32,
    /// Output tokens per warm-up request.
    #[arg(long, default_value_t = 32)]
    pub(crate) output_tokens: u32,
    /// Health path polled before the first request.
    #[arg(long, default_value = "/health")]
    pub(crate) health_path: String,
}

impl From<WarmupArgs> for WarmupOptions {
    fn from(args: WarmupArgs) -> Self {
        Self {
            url: args.url,
            model: args.model,
            requests: args.requests,
            ready_file: args.ready_file,
            timeout_seconds: args.timeout_seconds,
            prompt_tokens: args.prompt_tokens,
            output_tokens: args.output_tokens,
            health_path: args.health_path,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(clap::Parser)]
    enum Cli {
        Loadtest(LoadtestArgs),
        Warmup(WarmupArgs),
    }

    fn loadtest(extra: &[&str]) -> Result<LoadtestOptions, clap::Error> {
        let argv = ["bin", "loadtest", "--url", "http://h:1", "--model", "m"];
        match Cli::try_parse_from(argv.iter().chain(extra))? {
            Cli::Loadtest(args) => Ok(args.into()),
            Cli::Warmup(_) => unreachable!("parsed loadtest"),
        }
    }

    fn warmup(extra: &[&str]) -> Result<WarmupOptions, clap::Error> {
        let argv = ["bin", "warmup", "--url", "http://h:1", "--model", "m"];
        match Cli::try_parse_from(argv.iter().chain(extra))? {
            Cli::Warmup(args) => Ok(args.into()),
            Cli::Loadtest(_) => unreachable!("parsed warmup"),
        }
    }

    #[test]
    fn loadtest_defaults_match_the_library() {
        assert_eq!(
            loadtest(&[]).unwrap(),
            LoadtestOptions {
                url: "http://h:1".into(),
                model: "m".into(),
                ..LoadtestOptions::default()
            }
        );
    }

    #[test]
    fn loadtest_flags_reach_the_options_and_conflicts_are_refused() {
        let options = loadtest(&[
            "--rps",
            "5,10",
            "--arrivals",
            "poisson",
            "--metrics-url",
            "http://a:1",
        ])
        .unwrap();
        assert_eq!(options.rps, [5.0, 10.0]);
        assert_eq!(options.arrivals, Arrivals::Poisson);
        assert_eq!(options.metrics_urls, ["http://a:1"]);
        assert!(loadtest(&["--rps", "5", "--rps-range", "1:2:1"]).is_err());
        assert!(loadtest(&["--no-metrics", "--metrics-url", "http://a:1"]).is_err());
        assert!(loadtest(&["--arrivals", "bursty"]).is_err());
        assert!(Cli::try_parse_from(["bin", "loadtest", "--url", "http://h:1"]).is_err());
    }

    #[test]
    fn warmup_defaults_match_the_library() {
        assert_eq!(
            warmup(&[]).unwrap(),
            WarmupOptions {
                url: "http://h:1".into(),
                model: "m".into(),
                ..WarmupOptions::default()
            }
        );
        let options = warmup(&["--requests", "3", "--ready-file", "r"]).unwrap();
        assert_eq!(options.requests, 3);
        assert_eq!(options.ready_file, Some(PathBuf::from("r")));
    }
}
