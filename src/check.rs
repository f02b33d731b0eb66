//! One-shot signal report: `check` scrapes endpoints (or reads saved bodies) twice and prints per-pod and fleet signals with go-live warnings.
//!
//! INTERFACE STUB: to be implemented.

/// Command-line arguments.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {}

/// Runs the command.
pub fn run(args: CheckArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("not implemented yet")
}
