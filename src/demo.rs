//! `demo`: an emulated fleet, the real scaler over gRPC, and a KEDA/HPA stand-in in one process, with a live terminal view.
//!
//! INTERFACE STUB: to be implemented.

/// Command-line arguments.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {}

/// Runs the command.
pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("not implemented yet")
}
