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

use crate::control::{
    AnswerKind, DecisionRecord, LoopRegistry, ScaleTargetStatus, ScaledObject, TargetHealth,
};
use vllm_keda_core::config::{ScalerConfig, TargetSource};
use vllm_keda_core::policy::CurrentReplicas;
use vllm_keda_core::scaler::{Unobserved, View};
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
    trigger: String,
    cycles: u64,
    target_replicas: Option<u32>,
    desired_replicas: Option<u32>,
    active: Option<bool>,
    reason: Option<String>,
    explanation: Option<String>,
    targets_healthy: usize,
    targets_total: usize,
    /// What KEDA is told: `full`, `partial_held` or `unavailable`.
    answer: AnswerKind,
    /// Why `unavailable`, or which targets a `partial_held` answer lacks.
    answer_detail: Option<String>,
    /// Targets observed by the latest decision.
    observed: Vec<String>,
    /// Targets not observed, and why.
    not_observed: Vec<Unobserved>,
    idle_seconds: f64,
}

/// `/debug/scaledobjects/{namespace}/{name}`: the trigger KEDA asked about most recently, and
/// the ScaledObject's other triggers (each with its own loop) in `other_triggers`.
#[derive(Debug, Serialize)]
struct Detail {
    namespace: String,
    name: String,
    trigger: String,
    config: ConfigView,
    cycles: u64,
    /// What KEDA is told: `full`, `partial_held` or `unavailable`.
    answer: AnswerKind,
    /// `null` when the answer is available, else why KEDA gets `Unavailable`.
    unavailable: Option<String>,
    /// Which targets the latest decision observed, which it did not and why.
    view: Option<View>,
    /// The replicas the restart floor used (from the Kubernetes API, or the pods observed).
    current_replicas: Option<CurrentReplicas>,
    /// The scale target as read through the Kubernetes API (`null` without an API).
    scale_target: Option<ScaleTargetStatus>,
    discovery_error: Option<String>,
    targets: Vec<TargetHealth>,
    signals: Option<FleetSignals>,
    decision: Option<DecisionRecord>,
    decisions: Vec<DecisionRecord>,
    last_healthy_unix_seconds: Option<f64>,
    idle_seconds: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    other_triggers: Vec<Detail>,
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
    let (answer, answer_detail) = status.answer_kind(tokio::time::Instant::now(), so.stale_after());
    let view = status.view.as_ref();
    Summary {
        namespace: so.key.namespace.clone(),
        name: so.key.name.clone(),
        trigger: so.key.trigger.to_string(),
        cycles: status.cycles,
        target_replicas: decision.map(|d| d.target_replicas),
        desired_replicas: decision.map(|d| d.desired_replicas),
        active: decision.map(|d| d.active),
        reason: decision.map(|d| crate::control::reason_label(d.reason)),
        explanation: decision.map(|d| d.explanation.clone()),
        targets_healthy: status.targets.iter().filter(|t| t.healthy).count(),
        targets_total: status.targets.len(),
        answer,
        answer_detail,
        observed: view.map(|v| v.observed.clone()).unwrap_or_default(),
        not_observed: view.map(|v| v.unobserved.clone()).unwrap_or_default(),
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
    let mut detail = trigger_detail(&so);
    detail.other_triggers = state
        .loops
        .find_all(&namespace, &name)
        .iter()
        .filter(|other| other.key != so.key)
        .map(|other| trigger_detail(other))
        .collect();
    Json(detail).into_response()
}

fn trigger_detail(so: &ScaledObject) -> Detail {
    let status = so.latest();
    let (answer, detail) = status.answer_kind(tokio::time::Instant::now(), so.stale_after());
    let unavailable = detail.filter(|_| answer == AnswerKind::Unavailable);
    Detail {
        namespace: so.key.namespace.clone(),
        name: so.key.name.clone(),
        trigger: so.key.trigger.to_string(),
        config: config_view(so),
        cycles: status.cycles,
        answer,
        unavailable,
        view: status.view.clone(),
        current_replicas: status.current_replicas,
        scale_target: status.scale_target.clone(),
        discovery_error: status.discovery_error.clone(),
        targets: status.targets.clone(),
        signals: status.signals.clone(),
        decision: status.history.back().cloned(),
        decisions: status.history.iter().rev().cloned().collect(),
        last_healthy_unix_seconds: status.last_healthy_unix_seconds,
        idle_seconds: so.idle_for().as_secs_f64(),
        other_triggers: Vec::new(),
    }
}
