//! Fleet simulator: replay request traces through emulated replicas in virtual time under
//! several scaling policies, and report what users pay (GPU-hours) and get (SLO attainment).
//!
//! Owns: the virtual clock, the fleet of engine models, the actuation path (KEDA polling, the
//! HPA), the peer policies and the report. Does not own: the engine model
//! ([`crate::emulator`]), signals or policy (it runs the production code).

pub mod hpa;
pub mod prometheus;
pub mod report;

/// Command-line arguments.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {}

/// Runs the command.
pub fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("not implemented yet")
}
