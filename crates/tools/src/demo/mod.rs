//! `demo`: an emulated fleet, the real scaler over gRPC, and a KEDA/HPA stand-in in one
//! process, with a live terminal view, a summary and a plot.
//!
//! Owns: the story's settings (shortened periods), wiring the parts together, sending the load,
//! sampling what happens and writing the results. Does not own: the scaler (started through
//! [`vllm_keda_service::serve::start`], the production code path), the emulated replicas
//! ([`vllm_emulator`]), the HPA model ([`crate::keda`]), the trace reader
//! ([`crate::trace`]) or the charts ([`crate::plot`]).
//!
//! The parts: [`fleet`] plays a Deployment and its headless Service (replicas on 127.0.0.x,
//! a hosts file as the Service's DNS); [`keda`] plays KEDA and the HPA over real gRPC;
//! [`load`] shapes the bundled trace into the story; [`view`] draws the terminal;
//! [`summary`] writes `summary.json`, `timeline.csv` and `demo.svg`. Private: `settings` (the
//! shortened periods of each mode), `tasks` (the KEDA/HPA loops and the clients) and `run`
//! (wiring, sampling, stopping).

pub mod fleet;
pub mod keda;
pub mod load;
pub mod summary;
pub mod view;

mod run;
mod settings;
mod tasks;

use std::path::PathBuf;

pub use run::execute;
pub use settings::Settings;

/// How the demo is asked to run. [`Default`] is the command line's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoOptions {
    /// Run the same story in under a minute (shorter phases and periods).
    pub quick: bool,
    /// Directory for summary.json, timeline.csv, demo.svg and the Service's hosts file.
    pub out: PathBuf,
    /// Most replicas the scaler and the HPA may ask for (the command line allows 2 to 20).
    pub replicas_max: u32,
    /// Picks where in the trace the load starts (the same seed replays the same requests).
    pub seed: u64,
    /// Print plain log lines instead of redrawing a live view (also the case when stdout is not
    /// a terminal).
    pub no_live: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            quick: false,
            out: PathBuf::from("demo-out"),
            replicas_max: 5,
            seed: 1,
            no_live: false,
        }
    }
}

/// Runs the command.
pub fn run(args: DemoOptions) -> anyhow::Result<()> {
    use std::io::IsTerminal as _;
    // Warnings only (RUST_LOG overrides): the view shows what matters.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
    let live = !args.no_live && std::io::stdout().is_terminal();
    let settings = Settings::new(args.quick, args.replicas_max, args.seed, args.out, live);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("starting the async runtime: {e}"))?;
    let summary = runtime.block_on(execute(settings))?;
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    println!();
    print!("{}", summary.text());
    println!("  files:");
    println!("    {}", summary.files.summary.display());
    println!("    {}", summary.files.plot.display());
    println!("    {}", summary.files.timeline.display());
    Ok(())
}
