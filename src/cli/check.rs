//! `check`'s flags and their conversion into the tools' [`CheckOptions`].

use std::path::PathBuf;

use vllm_keda_tools::check::CheckOptions;
use vllm_keda_tools::check::report::Slos;

/// Command-line arguments.
#[derive(Debug, clap::Args)]
#[command(group(
    clap::ArgGroup::new("source").required(true).args(["endpoints", "files"])
))]
pub(crate) struct CheckArgs {
    /// vLLM `/metrics` endpoints, comma-separated (`http://host:port/metrics` or `host:port`).
    #[arg(long, value_delimiter = ',', num_args = 1.., value_name = "URL")]
    pub(crate) endpoints: Vec<String>,
    /// Seconds between the two scrapes (with --endpoints).
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub(crate) interval: f64,
    /// Two saved bodies of one pod, the earlier first (instead of --endpoints).
    #[arg(long, num_args = 2, value_names = ["EARLIER", "LATER"])]
    pub(crate) files: Vec<PathBuf>,
    /// Seconds between the two saved bodies (required with --files).
    #[arg(long, value_name = "SECONDS")]
    pub(crate) elapsed: Option<f64>,
    /// Only series whose `model_name` is this (all models when absent).
    #[arg(long, value_name = "M")]
    pub(crate) model: Option<String>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// DCGM exporter endpoints for GPU signals, comma-separated (with --endpoints).
    #[arg(long, value_delimiter = ',', value_name = "URL")]
    pub(crate) dcgm_endpoints: Vec<String>,
    /// Two saved DCGM exporter bodies, the earlier first (with --files).
    #[arg(long, num_args = 2, value_names = ["EARLIER", "LATER"])]
    pub(crate) dcgm_files: Vec<PathBuf>,
    /// SLOs to judge the latency bucket resolution against.
    #[command(flatten)]
    pub(crate) slo: SloArgs,
    /// Per-endpoint scrape timeout.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    pub(crate) timeout: f64,
}

/// Optional SLOs for the bucket-resolution warnings.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct SloArgs {
    /// End-to-end latency SLO to check the bucket resolution against.
    #[arg(long, value_name = "SECONDS")]
    pub(crate) latency_slo_seconds: Option<f64>,
    /// Time-to-first-token SLO to check the bucket resolution against.
    #[arg(long, value_name = "SECONDS")]
    pub(crate) ttft_slo_seconds: Option<f64>,
    /// Inter-token latency SLO to check the bucket resolution against.
    #[arg(long, value_name = "SECONDS")]
    pub(crate) itl_slo_seconds: Option<f64>,
}

impl From<CheckArgs> for CheckOptions {
    fn from(args: CheckArgs) -> Self {
        Self {
            endpoints: args.endpoints,
            interval: args.interval,
            files: args.files,
            elapsed: args.elapsed,
            model: args.model,
            json: args.json,
            dcgm_endpoints: args.dcgm_endpoints,
            dcgm_files: args.dcgm_files,
            slo: Slos {
                latency_seconds: args.slo.latency_slo_seconds,
                ttft_seconds: args.slo.ttft_slo_seconds,
                itl_seconds: args.slo.itl_slo_seconds,
            },
            timeout: args.timeout,
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
        args: CheckArgs,
    }

    fn parse(argv: &[&str]) -> Result<CheckOptions, clap::Error> {
        let argv = std::iter::once("check").chain(argv.iter().copied());
        Cli::try_parse_from(argv).map(|cli| cli.args.into())
    }

    #[test]
    fn defaults_match_the_library_and_flags_reach_the_options() {
        let options = parse(&["--endpoints", "a:1,b:2"]).unwrap();
        assert_eq!(
            options,
            CheckOptions {
                endpoints: vec!["a:1".into(), "b:2".into()],
                ..CheckOptions::default()
            }
        );
        let options = parse(&[
            "--files",
            "x",
            "y",
            "--elapsed",
            "15",
            "--ttft-slo-seconds",
            "2",
        ])
        .unwrap();
        assert_eq!(options.files, [PathBuf::from("x"), PathBuf::from("y")]);
        assert_eq!(options.elapsed, Some(15.0));
        assert_eq!(options.slo.ttft_seconds, Some(2.0));
        assert_eq!(options.slo.latency_seconds, None);
    }

    #[test]
    fn a_source_is_required() {
        assert!(parse(&[]).is_err());
        assert!(parse(&["--json"]).is_err());
    }
}
