//! `simulate`'s flags and their conversion into the tools' [`SimulateOptions`].

use std::path::PathBuf;

use vllm_keda_tools::simulate::SimulateOptions;

/// Command-line arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SimulateArgs {
    /// Trace to replay: a file (Azure 2023 CSV or Mooncake JSONL); a built-in scenario:
    /// azure-code, azure-conv, mooncake (bundled traces), step (the guide's load test);
    /// poisson:NAME (a bundled trace's per-minute rate, arrivals redrawn from --seed); or a
    /// generated scenario (a rate curve, sizes from a bundled trace, arrivals from --seed):
    /// training set diurnal-conv, flash-crowd-code, batch-bursts-conv, ramp-code,
    /// on-off-mooncake, lulls-conv, short-troughs-code, swell-mooncake, on-off-conv,
    /// early-crowd-conv, two-crowds-conv; held-out set working-day-conv, flash-crowd-conv, batch-bursts-code,
    /// slow-ramp-conv, diurnal-mooncake, on-off-code; second held-out set
    /// irregular-bursts-conv, working-day-code, steps-mooncake, flash-crowds-code. Repeat for
    /// several scenarios.
    #[arg(long = "trace", default_value = "azure-conv")]
    pub(crate) traces: Vec<String>,
    /// Replay a named set of generated scenarios instead of --trace: training (defaults may
    /// be tuned on it), held-out or held-out-2 (the evaluation reports them; never tuned on).
    #[arg(long, value_name = "training|held-out|held-out-2")]
    pub(crate) scenario_set: Option<String>,
    /// Multiply the trace's request rate (a file's or bundled trace's requests are replicated;
    /// a generated scenario's rate curve is multiplied).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) rate_multiplier: f64,
    /// Divide the trace's timestamps (same requests, faster).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) time_compression: f64,
    /// Only the first this many seconds of each trace (after reshaping).
    #[arg(long)]
    pub(crate) duration_seconds: Option<f64>,
    /// Policies to compare: ours; ours:KEY=VALUE[:...] (metadata overrides);
    /// prometheus-keda (the source guide's chain); prometheus-keda-tuned[:IN_FLIGHT][:ttft=S]
    /// [:itl=S] (TTFT and ITL P95 as metricType Value, running+waiting per replica); kpa
    /// (Knative, target 256 in flight per replica at 70 %), kpa:TARGET[:stable=S][:delay=S]
    /// (stable window, scale-down delay); apa[:TARGET][:up=F][:down=F][:uprate=F]
    /// [:downrate=F] (AIBrix's APA on in-flight requests per pod, target 128); static:N;
    /// static:best (the smallest static fleet meeting --slo-target in hindsight); clairvoyant
    /// (alias oracle: the future-knowing reference planner, never beaten by a static fleet).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ours,prometheus-keda,static:4,clairvoyant"
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
    /// Seconds from asking for a replica to it serving (the guide: 2-10 minutes): S, a
    /// uniform range LOW..HIGH, or lognormal:MEDIAN:SIGMA. The k-th replica asked for gets
    /// the k-th draw (from --seed) under every policy.
    #[arg(
        long,
        default_value = "300",
        value_name = "S|LOW..HIGH|lognormal:MEDIAN:SIGMA"
    )]
    pub(crate) startup_delay_seconds: String,
    /// Which start-up draw a replica asked for gets: order (the k-th replica asked for gets
    /// the k-th draw; the evaluation's protocol) or slot (a replica asked for as the fleet's
    /// n-th live one gets position n's m-th draw, the m-th time that position starts: two
    /// policies that ask for the same positions meet the same delays there, whatever either
    /// asked elsewhere).
    #[arg(long, default_value = "order", value_name = "order|slot")]
    pub(crate) startup_draws: String,
    /// Clients give up after this many seconds: the request is a miss and the engine aborts
    /// it (as vLLM does on disconnect). Unset: clients wait.
    #[arg(long)]
    pub(crate) client_timeout_seconds: Option<f64>,
    /// Engine profile of every replica: h100-llama3.1-8b (default; vLLM's H100 scheduler
    /// defaults, max_num_seqs 1024), emulator-default (the same with 256), l40s-llama3.2-3b
    /// (the guide's small model on a g6e), a10g-llama3.1-8b, l4-llama3.1-8b,
    /// 4xh100-llama3.1-70b. Sources in docs/emulator.md.
    #[arg(long, default_value = vllm_emulator::DEFAULT_PROFILE)]
    pub(crate) engine: String,
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
    /// The SLO attainment static:best and clairvoyant aim at (a share, 0..1].
    #[arg(long, default_value_t = 0.99)]
    pub(crate) slo_target: f64,
    /// Seed of the arrival process (generated and poisson: scenarios), of the jitter of
    /// requests replicated by --rate-multiplier, and of the start-up draws.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Run every scenario under several seeds (e.g. 1,2,3,4,5); tables show mean, standard
    /// deviation and range.
    #[arg(long, value_delimiter = ',')]
    pub(crate) seeds: Vec<u64>,
    /// Also sweep each policy's main knob and draw an SLO-attainment vs GPU-hours Pareto plot
    /// per scenario (needs --out).
    #[arg(long)]
    pub(crate) sweep: bool,
    /// Print one JSON list (one object per policy and scenario) instead of Markdown.
    #[arg(long)]
    pub(crate) json: bool,
    /// Write report.md, report.json and one SVG plot per scenario into this directory, and for
    /// `ours` the explained decisions of the first seed (SCENARIO-decisions.tsv: every decision
    /// whose target or reason changed, with its numbers).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Warm start: each `ours` run first runs once on the same scenario drawn with the seed
    /// plus 1000 (a day before: other arrivals and start-ups) and starts from what it learned
    /// there (capacity estimate, start-up time, the hindsight floor it held, light load's
    /// first-token share and the demand history by minute, whose last minutes it starts
    /// behind), as a scaler pod starts from --learned-state-configmap. The peers
    /// and static fleets start as always. Not the evaluation's protocol, which starts every
    /// policy cold.
    #[arg(long)]
    pub(crate) warm: bool,
    /// With --warm: seconds between the day before's end and the run's start (a night, say).
    /// What was learned is that much older, as a record read that long after it was written:
    /// its hindsight floor ages and its demand history moves back (the peak floor's half hour
    /// passes after 1800). Default 0: the run starts as the day before ended.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0)]
    pub(crate) warm_gap_seconds: f64,
    /// With --warm, in place of --warm-gap-seconds: the day before began this many seconds
    /// before the run (86400: the same hours a calendar day earlier), so it ended this less
    /// its own length before the run. A scenario of a few hours is otherwise a "day" of a few
    /// hours, and what the pod keeps for a day (the hindsight's minutes, its floor) reaches
    /// further back than it would in a deployment.
    #[arg(long, value_name = "SECONDS")]
    pub(crate) warm_day_seconds: Option<f64>,
    /// Every `ours` run's scaler pod restarts once, this many seconds into the run (a rollout,
    /// an eviction): a fresh scaler takes over, told the scale target's replicas every cycle
    /// as the service tells it, and starts from what the old pod learned, as with
    /// --learned-state-configmap.
    #[arg(long, value_name = "SECONDS")]
    pub(crate) restart_at_seconds: Option<f64>,
    /// With --restart-at-seconds: the new pod starts from nothing, as without
    /// --learned-state-configmap.
    #[arg(long)]
    pub(crate) restart_forgets: bool,
    /// Run the policies alone: do not judge each autoscaled row against the static fleets that
    /// could dominate it, which simulates each of them (most of a run's time when the rows are
    /// few). The rows are marked as not judged (`statics_not_judged` in the JSON).
    #[arg(long)]
    pub(crate) no_static_judging: bool,
}

impl From<SimulateArgs> for SimulateOptions {
    fn from(args: SimulateArgs) -> Self {
        Self {
            traces: args.traces,
            scenario_set: args.scenario_set,
            rate_multiplier: args.rate_multiplier,
            time_compression: args.time_compression,
            duration_seconds: args.duration_seconds,
            policies: args.policies,
            metadata: args.metadata,
            min_replicas: args.min_replicas,
            max_replicas: args.max_replicas,
            startup_delay: args.startup_delay_seconds,
            startup_draws: args.startup_draws,
            client_timeout_seconds: args.client_timeout_seconds,
            engine: args.engine,
            prometheus_scrape_seconds: args.prometheus_scrape_seconds,
            ttft_slo_seconds: args.ttft_slo_seconds,
            tpot_slo_seconds: args.tpot_slo_seconds,
            e2e_slo_seconds: args.e2e_slo_seconds,
            slo_target: args.slo_target,
            seed: args.seed,
            seeds: args.seeds,
            sweep: args.sweep,
            json: args.json,
            out: args.out,
            warm: args.warm,
            warm_gap_seconds: args.warm_gap_seconds,
            warm_day_seconds: args.warm_day_seconds,
            restart_at_seconds: args.restart_at_seconds,
            restart_forgets: args.restart_forgets,
            judge_statics: !args.no_static_judging,
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

    #[test]
    fn startup_draws_default_to_the_protocols_order() {
        assert_eq!(SimulateOptions::default().startup_draws, "order");
        assert_eq!(parse(&["--startup-draws", "slot"]).startup_draws, "slot");
    }

    #[test]
    fn no_static_judging_runs_the_policies_alone() {
        assert!(SimulateOptions::default().judge_statics);
        assert!(!parse(&["--no-static-judging"]).judge_statics);
    }
}
