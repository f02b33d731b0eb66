//! The scaler service: KEDA calls it over gRPC (KEDA's external-scaler protocol). For each
//! ScaledObject it discovers the vLLM pods, scrapes their `/metrics` itself (no Prometheus in the
//! control loop), hands the bodies to the pure core (`vllm-keda-core`) and answers with the
//! latest replica target and activity flag, explaining every decision.
//!
//! # Data flow
//!
//! 1. [`discovery`]: which pods to scrape (static list or DNS of a headless Service).
//! 2. [`scrape`]: fetch each pod's `/metrics` body, bounded in time and size.
//! 3. the core: parse, signals, policy (pure; time passed in).
//! 4. [`control`]: one background loop per ScaledObject that drives 1-3 and keeps the latest
//!    decision in memory.
//! 5. [`grpc`]: KEDA's external-scaler service, answering from [`control`]'s state.
//!
//! Around it: [`scale_target`] (the scale target's replicas from the Kubernetes API, when
//! allowed), [`http`] (health, `/metrics`, `/debug`), [`tls`] (the gRPC port's TLS, reloaded on
//! rotation), [`telemetry`] (own metrics and logs) and [`serve`] (the process: ports, runtimes,
//! shutdown).

pub mod control;
pub mod discovery;
pub mod grpc;
pub mod http;
pub mod learned_store;
pub mod scale_target;
pub mod scrape;
pub mod serve;
pub mod telemetry;
pub mod tls;

/// Code generated from `proto/externalscaler.proto`.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod proto {
    tonic::include_proto!("externalscaler");
}
