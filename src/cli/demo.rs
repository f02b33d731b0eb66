//! `demo`'s flags and their conversion into the tools' [`DemoOptions`].

use std::path::PathBuf;

use vllm_keda_tools::demo::DemoOptions;

/// Command-line arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DemoArgs {
    /// Run the same story in under a minute (shorter phases and periods).
    #[arg(long)]
    pub(crate) quick: bool,

    /// Directory for summary.json, timeline.csv, demo.svg and the Service's hosts file.
    #[arg(long, default_value = "demo-out")]
    pub(crate) out: PathBuf,

    /// Most replicas the scaler and the HPA may ask for (2 to 20).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(2..=20))]
    pub(crate) replicas_max: u32,

    /// Picks where in the trace the load starts (the same seed replays the same requests).
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,

    /// Print plain log lines instead of redrawing a live view (for CI logs; also the default
    /// when stdout is not a terminal).
    #[arg(long)]
    pub(crate) no_live: bool,
}

impl From<DemoArgs> for DemoOptions {
    fn from(args: DemoArgs) -> Self {
        Self {
            quick: args.quick,
            out: args.out,
            replicas_max: args.replicas_max,
            seed: args.seed,
            no_live: args.no_live,
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
        args: DemoArgs,
    }

    fn parse(argv: &[&str]) -> Result<DemoOptions, clap::Error> {
        let argv = std::iter::once("demo").chain(argv.iter().copied());
        Cli::try_parse_from(argv).map(|cli| cli.args.into())
    }

    #[test]
    fn no_flags_give_the_library_defaults() {
        assert_eq!(parse(&[]).unwrap(), DemoOptions::default());
    }

    #[test]
    fn replicas_max_is_two_to_twenty() {
        assert_eq!(parse(&["--replicas-max", "2"]).unwrap().replicas_max, 2);
        assert_eq!(parse(&["--replicas-max", "20"]).unwrap().replicas_max, 20);
        for bad in ["1", "21", "x"] {
            assert!(parse(&["--replicas-max", bad]).is_err(), "{bad}");
        }
        let options = parse(&["--quick", "--no-live", "--out", "o", "--seed", "7"]).unwrap();
        assert!(options.quick && options.no_live);
        assert_eq!((options.out, options.seed), (PathBuf::from("o"), 7));
    }
}
