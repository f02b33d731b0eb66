//! `serve`: the production job (gRPC external scaler plus the admin HTTP server), with graceful shutdown.
//!
//! INTERFACE STUB: to be implemented.

/// Command-line arguments.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {}

/// Runs the command.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("not implemented yet")
}
