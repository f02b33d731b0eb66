//! The saturation finder (stepped open-loop load test) and the warm-up command.
//!
//! INTERFACE STUB: to be implemented.

/// `loadtest` arguments.
#[derive(Debug, clap::Args)]
pub struct LoadtestArgs {}

/// `warmup` arguments.
#[derive(Debug, clap::Args)]
pub struct WarmupArgs {}

/// Runs `loadtest`.
pub fn run(args: LoadtestArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("not implemented yet")
}

/// Runs `warmup`.
pub fn run_warmup(args: WarmupArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("not implemented yet")
}
