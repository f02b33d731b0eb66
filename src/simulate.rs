//! Fleet simulator: replay request traces through emulated replicas in virtual time under several policies.
//!
//! INTERFACE STUB: to be implemented.

/// Command-line arguments.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {}

/// Runs the command.
pub fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("not implemented yet")
}
