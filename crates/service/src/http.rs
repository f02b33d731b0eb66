//! The admin HTTP server: `/livez`, `/readyz`, `/metrics`, `/debug/scaledobjects` and
//! `/debug/scaledobjects/{namespace}/{name}`.
//!
//! Owns: routes and their JSON shapes. Does not own: the state it shows (see
//! [`crate::control`]) or the metric definitions (see [`crate::telemetry`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;

use crate::control::{DecisionRecord, LoopRegistry, ScaledObject, TargetHealth};
use vllm_keda_core::config::{ScalerConfig, TargetSource};
use vllm_keda_core::signals::FleetSignals;

/// What the routes read.
#[derive(Debug, Clone)]
pub struct AdminState {
    /// The loop registry.
    pub loops: LoopRegistry,
    /// Set once both listeners serve; cleared when shutdown starts.
    pub ready: Arc<AtomicBool>,
}

/// The admin router.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/debug/scaledobjects", get(list))
        .route("/debug/scaledobjects/{namespace}/{name}", get(detail))
        .with_state(state)
}

async fn livez() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<AdminState>) -> Response {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    }
}

async fn metrics(State(state): State<AdminState>) -> Response {
    let body = state.loops.metrics().encode();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// One row of `/debug/scaledobjects`.
#[derive(Debug, Serialize)]
struct Summary {
    namespace: String,
    name: String,
    cycles: u64,
    target_replicas: Option<u32>,
    desired_replicas: Option<u32>,
    active: Option<bool>,
    reason: Option<String>,
    explanation: Option<String>,
    targets_healthy: usize,
    targets_total: usize,
    idle_seconds: f64,
}

/// `/debug/scaledobjects/{namespace}/{name}`.
#[derive(Debug, Serialize)]
struct Detail {
    namespace: String,
    name: String,
    config: ConfigView,
    cycles: u64,
    /// `null` when the answer is available, else why KEDA gets `Unavailable`.
    unavailable: Option<String>,
    discovery_error: Option<String>,
    targets: Vec<TargetHealth>,
    signals: Option<FleetSignals>,
    decision: Option<DecisionRecord>,
    decisions: Vec<DecisionRecord>,
    last_healthy_unix_seconds: Option<f64>,
    idle_seconds: f64,
}

/// The configuration as shown: the metadata as written, plus the validated form.
#[derive(Debug, Serialize)]
struct ConfigView {
    metadata: std::collections::BTreeMap<String, String>,
    targets: String,
    dcgm_targets: Option<String>,
    model: Option<String>,
    scrape_interval_seconds: f64,
    min_replicas: u32,
    max_replicas: u32,
    /// Every validated setting, in Rust debug notation.
    validated: String,
}

fn source_text(source: &TargetSource) -> String {
    match source {
        TargetSource::Static(urls) => urls.join(","),
        TargetSource::Dns { host, port, path } => format!("dns {host}:{port}{path}"),
    }
}

fn config_view(so: &ScaledObject) -> ConfigView {
    let c: &ScalerConfig = &so.config;
    ConfigView {
        metadata: so
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        targets: source_text(&c.targets),
        dcgm_targets: c.dcgm_targets.as_ref().map(source_text),
        model: c.model.clone(),
        scrape_interval_seconds: c.scrape_interval.as_secs_f64(),
        min_replicas: c.policy.min_replicas,
        max_replicas: c.policy.max_replicas,
        validated: format!("{c:?}"),
    }
}

fn summary(so: &ScaledObject) -> Summary {
    let status = so.latest();
    let decision = status.decision.as_ref();
    Summary {
        namespace: so.key.namespace.clone(),
        name: so.key.name.clone(),
        cycles: status.cycles,
        target_replicas: decision.map(|d| d.target_replicas),
        desired_replicas: decision.map(|d| d.desired_replicas),
        active: decision.map(|d| d.active),
        reason: decision.map(|d| crate::control::reason_label(d.reason)),
        explanation: decision.map(|d| d.explanation.clone()),
        targets_healthy: status.targets.iter().filter(|t| t.healthy).count(),
        targets_total: status.targets.len(),
        idle_seconds: so.idle_for().as_secs_f64(),
    }
}

async fn list(State(state): State<AdminState>) -> Json<serde_json::Value> {
    let rows: Vec<Summary> = state.loops.list().iter().map(|so| summary(so)).collect();
    Json(serde_json::json!({ "scaledobjects": rows }))
}

async fn detail(
    State(state): State<AdminState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let Some(so) = state.loops.find(&namespace, &name) else {
        let message = format!(
            "no scaledobject {namespace}/{name} is being served: KEDA has not asked about it \
             (or stopped asking); see /debug/scaledobjects for the ones that are"
        );
        return (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({ "error": message })),
        )
            .into_response();
    };
    let status = so.latest();
    let unavailable = status
        .answer(tokio::time::Instant::now(), so.stale_after())
        .err()
        .map(|e| e.0);
    let detail = Detail {
        namespace,
        name,
        config: config_view(&so),
        cycles: status.cycles,
        unavailable,
        discovery_error: status.discovery_error.clone(),
        targets: status.targets.clone(),
        signals: status.signals.clone(),
        decision: status.history.back().cloned(),
        decisions: status.history.iter().rev().cloned().collect(),
        last_healthy_unix_seconds: status.last_healthy_unix_seconds,
        idle_seconds: so.idle_for().as_secs_f64(),
    };
    Json(detail).into_response()
}
