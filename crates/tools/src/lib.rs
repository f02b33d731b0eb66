//! The workshop around the scaler: everything that judges, exercises or shows it, and nothing
//! the service needs to run.
//!
//! - [`simulate`]: replay request traces through emulated replicas in virtual time under our
//!   policy and its peers.
//! - [`keda`]: one model of KEDA and the HPA, shared by the simulator and the demo.
//! - [`loadtest`]: the source guide's stepped open-loop saturation finder, and the warm-up.
//! - [`check`]: one-shot signal report from two scrapes.
//! - [`demo`]: an emulated fleet, the real scaler over gRPC and a KEDA/HPA stand-in in one
//!   process.
//! - [`trace`]: request trace files (the `vllm-keda-trace` crate, re-exported); [`plot`]: SVG
//!   charts.

pub mod check;
pub mod demo;
pub mod keda;
pub mod loadtest;
pub mod plot;
pub mod seconds;
pub mod simulate;
pub use vllm_keda_trace as trace;
