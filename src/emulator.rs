//! A vLLM-like replica (engine model, OpenAI-compatible HTTP, vLLM-shaped /metrics) and a fleet of them on loopback.
//!
//! INTERFACE STUB: to be implemented.

/// Command-line arguments.
#[derive(Debug, clap::Args)]
pub struct EmulateArgs {}

/// Runs the command.
pub fn run(args: EmulateArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("not implemented yet")
}
