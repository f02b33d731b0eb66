//! vllm-keda-scaler: a KEDA external scaler for vLLM.
//!
//! KEDA calls this service over gRPC (KEDA's external-scaler protocol). For each ScaledObject
//! the service discovers the vLLM pods, scrapes their `/metrics` itself (no Prometheus in the
//! control loop), turns consecutive scrapes into tiered signals, applies the scale-out rules
//! and the scale-in hysteresis, and answers with a replica target and an activity flag,
//! explaining every decision.
//!
//! # Data flow
//!
//! Data moves one way through these modules:
//!
//! 1. [`discovery`]: which pods to scrape (static list or DNS of a headless Service).
//! 2. [`scrape`]: fetch each pod's `/metrics` body, bounded in time and size.
//! 3. [`exposition`]: parse the Prometheus text format (pure, zero-copy).
//! 4. [`signals`]: turn consecutive parsed scrapes into tier 1-3 signals (pure; time passed in).
//! 5. [`policy`]: the scale-out rules and scale-in hysteresis (pure; time passed in), configured
//!    by [`config`] from a ScaledObject's scaler metadata.
//! 6. [`control`]: one background loop per ScaledObject that drives 1-5 and keeps the latest
//!    decision in memory.
//! 7. [`grpc`]: KEDA's external-scaler service, answering from [`control`]'s state.
//!
//! Around the service: [`http`] (health, `/metrics`, `/debug`), [`tls`] (the gRPC port's TLS,
//! reloaded on rotation), [`telemetry`] (own metrics and logs), [`check`] (one-shot signal report), [`emulator`] (a vLLM-like replica and fleet),
//! [`demo`], [`simulate`] (trace replay in virtual time), [`loadtest`] (saturation finder and
//! warm-up), [`trace`] (request trace files) and [`plot`] (SVG charts).
//!
//! Time: pure stages take `now` as a [`std::time::Duration`] since an arbitrary origin chosen by
//! the caller (a loop's start in production, zero in the simulator), never a clock read.

pub mod check;
pub mod config;
pub mod control;
pub mod demo;
pub mod discovery;
pub mod emulator;
pub mod exposition;
pub mod grpc;
pub mod http;
pub mod loadtest;
pub mod plot;
pub mod policy;
pub mod scrape;
pub mod serve;
pub mod signals;
pub mod simulate;
pub mod telemetry;
pub mod tls;
pub mod trace;

/// Code generated from `proto/externalscaler.proto`.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod proto {
    tonic::include_proto!("externalscaler");
}
