//! The admin HTTP server: `/livez`, `/readyz`, `/metrics`, `/debug/scaledobjects` and
//! `/debug/scaledobjects/{namespace}/{name}`.
//!
//! Owns: routes and their JSON shapes, who may read `/debug` ([`DebugAccess`]), and the
//! connection handling of the admin port ([`serve_admin`]: a deadline for each request head,
//! an idle timeout, graceful shutdown). Does not own: the state it shows (see
//! [`crate::control`]) or the metric definitions (see [`crate::telemetry`]).
//!
//! `/debug` shows every namespace's ScaledObjects, targets and errors, so by default only
//! loopback peers (`kubectl port-forward`, `kubectl exec`) may read it; `/livez`, `/readyz` and
//! `/metrics` answer everyone. With `--admin-tls` the port speaks TLS with the gRPC port's
//! certificate, and `--debug-endpoints certificate` opens `/debug` to clients whose
//! certificate chains to `--tls-client-ca-file` (and to no one else, loopback included).

use std::future::Future as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;

use crate::control::{
    AnswerKind, DecisionRecord, LearnedStateStatus, LoopRegistry, ScaleTargetStatus, ScaledObject,
    TargetHealth,
};
use vllm_keda_core::config::{ScalerConfig, TargetSource};
use vllm_keda_core::policy::CurrentReplicas;
use vllm_keda_core::policy::proactive::Learned;
use vllm_keda_core::policy::proactive::hindsight::StaticComparison;
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

/// Who may read `/debug/*` (`--debug-endpoints`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DebugAccess {
    /// Nobody: `/debug/*` answers 404.
    Off,
    /// Peers on loopback only (the default); others get 403.
    #[default]
    Loopback,
    /// Every peer that reaches the admin port.
    On,
    /// Peers presenting a client certificate that chains to `--tls-client-ca-file`, over the
    /// admin port's TLS (`--admin-tls`); others get 403.
    Certificate,
}

impl std::str::FromStr for DebugAccess {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "off" => Ok(Self::Off),
            "loopback" => Ok(Self::Loopback),
            "on" => Ok(Self::On),
            "certificate" => Ok(Self::Certificate),
            other => Err(format!(
                "{other:?} is not a debug access mode; expected off, loopback, on or certificate"
            )),
        }
    }
}

/// Connection limits of the admin port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminOptions {
    /// Who may read `/debug/*`.
    pub debug: DebugAccess,
    /// A connection must send each request head within this time (`--http-header-timeout-seconds`).
    pub header_read_timeout: Duration,
    /// A connection with no bytes moving either way for this long is closed
    /// (`--http-idle-timeout-seconds`).
    pub idle_timeout: Duration,
}

impl Default for AdminOptions {
    fn default() -> Self {
        Self {
            debug: DebugAccess::Loopback,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
        }
    }
}

/// The admin router with every route (`/debug` included).
pub fn router(state: AdminState) -> Router {
    public_routes()
        .route("/debug/scaledobjects", get(list))
        .route("/debug/scaledobjects/{namespace}/{name}", get(detail))
        .with_state(state)
}

/// Why `/debug` refused a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DebugRefusal {
    Off,
    NotLoopback,
    NoCertificate,
}

/// The admin router for a peer that may not read `/debug`: it answers there with why.
fn router_without_debug(state: AdminState, refusal: DebugRefusal) -> Router {
    let refuse = move || async move {
        let (status, message) = match refusal {
            DebugRefusal::NotLoopback => (
                StatusCode::FORBIDDEN,
                "/debug answers loopback peers only (kubectl port-forward or exec); start the \
                 scaler with --debug-endpoints on to open it to every peer that reaches this port",
            ),
            DebugRefusal::NoCertificate => (
                StatusCode::FORBIDDEN,
                "/debug answers clients presenting a certificate signed by the scaler's \
                 --tls-client-ca-file; connect with one",
            ),
            DebugRefusal::Off => (
                StatusCode::NOT_FOUND,
                "/debug is off; start the scaler with --debug-endpoints loopback, on or certificate",
            ),
        };
        (status, Json(serde_json::json!({ "error": message })))
    };
    public_routes()
        .route("/debug", get(refuse))
        .route("/debug/{*rest}", get(refuse))
        .with_state(state)
}

fn public_routes() -> Router<AdminState> {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

/// Serves the admin routes on `listener` until `shutdown` is cancelled, then lets open requests
/// finish. Each connection gets [`AdminOptions::header_read_timeout`] for every request head
/// and is closed after [`AdminOptions::idle_timeout`] without traffic, so connections that
/// open and go quiet do not pile up.
///
/// With `tls`, each connection first completes its TLS handshake (bounded by
/// [`crate::tls::HANDSHAKE_TIMEOUT`]); whether the client presented a verified certificate
/// decides `/debug` under [`DebugAccess::Certificate`].
pub async fn serve_admin(
    listener: tokio::net::TcpListener,
    state: AdminState,
    options: AdminOptions,
    tls: Option<Arc<crate::tls::ReloadingConfig>>,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    let full = router(state.clone());
    let limited = match options.debug {
        DebugAccess::On => full.clone(),
        DebugAccess::Loopback => router_without_debug(state, DebugRefusal::NotLoopback),
        DebugAccess::Certificate => router_without_debug(state, DebugRefusal::NoCertificate),
        DebugAccess::Off => router_without_debug(state, DebugRefusal::Off),
    };
    let tracker = tokio_util::task::TaskTracker::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: wait and try again.
                    tracing::warn!(error = %error, "accepting an admin connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let stream = IdleTimeout::new(stream, options.idle_timeout);
        let shutdown = shutdown.clone();
        let (full, limited, tls) = (full.clone(), limited.clone(), tls.clone());
        // Whether this peer reads /debug beyond what `limited` allows (`On` is `full` already).
        let opens_debug = move |certified: bool| match options.debug {
            DebugAccess::Loopback => is_loopback(peer),
            DebugAccess::Certificate => certified,
            DebugAccess::On | DebugAccess::Off => false,
        };
        tracker.spawn(async move {
            let Some(config) = tls else {
                let app = if opens_debug(false) { full } else { limited };
                serve_connection(
                    hyper_util::rt::TokioIo::new(stream),
                    app,
                    options,
                    peer,
                    shutdown,
                )
                .await;
                return;
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(config.current());
            let handshake =
                tokio::time::timeout(crate::tls::HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
            let (result, stream) = match handshake {
                Ok(Ok(stream)) => ("ok", Some(stream)),
                Ok(Err(error)) => {
                    tracing::debug!(peer = %peer, error = %error, "admin TLS handshake failed");
                    ("failed", None)
                }
                Err(_) => {
                    tracing::debug!(peer = %peer, "admin TLS handshake timed out");
                    ("timed_out", None)
                }
            };
            crate::telemetry::Metrics::count_tls(&config.metrics().tls_handshakes, result);
            let Some(stream) = stream else {
                return;
            };
            // rustls has verified a certificate the client presented; none presented is allowed
            // on this port.
            let certified = stream
                .get_ref()
                .1
                .peer_certificates()
                .is_some_and(|chain| !chain.is_empty());
            let app = if opens_debug(certified) {
                full
            } else {
                limited
            };
            serve_connection(
                hyper_util::rt::TokioIo::new(stream),
                app,
                options,
                peer,
                shutdown,
            )
            .await;
        });
    }
    tracker.close();
    tracker.wait().await;
    Ok(())
}

/// Serves one admin connection until it ends, or drains it when `shutdown` is cancelled.
async fn serve_connection<I>(
    io: I,
    app: Router,
    options: AdminOptions,
    peer: SocketAddr,
    shutdown: tokio_util::sync::CancellationToken,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = hyper_util::service::TowerToHyperService::new(app);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(options.header_read_timeout);
    let connection = builder.serve_connection(io, service);
    let mut connection = std::pin::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        _ = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = result {
        tracing::debug!(peer = %peer, error = %error, "admin connection ended");
    }
}

fn is_loopback(peer: SocketAddr) -> bool {
    peer.ip().to_canonical().is_loopback()
}

/// A stream that fails with `TimedOut` once neither a read nor a write made progress for
/// `idle`, so an idle or stalled connection ends instead of holding its descriptor forever.
#[derive(Debug)]
pub struct IdleTimeout<S> {
    inner: S,
    idle: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl<S> IdleTimeout<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    fn progressed(&mut self) {
        let next = tokio::time::Instant::now() + self.idle;
        self.deadline.as_mut().reset(next);
    }

    fn check(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Error> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connection idle for too long",
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for IdleTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.progressed();
                Poll::Ready(result)
            }
            Poll::Pending => this.check(cx).map(Err),
        }
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for IdleTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(result) => {
                this.progressed();
                Poll::Ready(result)
            }
            Poll::Pending => this.check(cx).map(Err),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(result) => {
                this.progressed();
                Poll::Ready(result)
            }
            Poll::Pending => this.check(cx).map(Err),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
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
    /// The proactive policy's comparison with static fleets over the last day: would a fixed
    /// number of replicas have served as much for fewer replica-hours? (`null` under the
    /// guide's policy and before half an hour of history.)
    hindsight: Option<HindsightView>,
    /// What the proactive policy has learned from this pod's own history: the capacity per
    /// replica and the start-up time, each with its source (`null` under the guide's policy).
    /// Each scaler pod learns separately, and a restarted one starts over.
    learned: Option<Learned>,
    /// Where the learning is kept across pods and restarts, what the loop inherited from it,
    /// and its last write (`null` without `--learned-state-configmap`).
    learned_state: Option<LearnedStateStatus>,
    last_healthy_unix_seconds: Option<f64>,
    idle_seconds: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    other_triggers: Vec<Detail>,
}

/// The comparison with static fleets, with its numbers and in words.
#[derive(Debug, Serialize)]
struct HindsightView {
    #[serde(flatten)]
    comparison: StaticComparison,
    summary: String,
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
        hindsight: status.hindsight.clone().map(|comparison| HindsightView {
            summary: comparison.describe(),
            comparison,
        }),
        learned: status.learned,
        learned_state: status.learned_state.clone(),
        last_healthy_unix_seconds: status.last_healthy_unix_seconds,
        idle_seconds: so.idle_for().as_secs_f64(),
        other_triggers: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{ControlOptions, LoopRegistry};
    use crate::telemetry::Metrics;

    fn state() -> AdminState {
        AdminState {
            loops: LoopRegistry::new(
                Arc::new(Metrics::new()),
                ControlOptions::default(),
                tokio_util::sync::CancellationToken::new(),
            ),
            ready: Arc::new(AtomicBool::new(true)),
        }
    }

    async fn get(app: Router, path: &str) -> (u16, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let response = reqwest::get(format!("http://{addr}{path}")).await.unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    }

    #[tokio::test]
    async fn peers_off_loopback_get_403_naming_the_flag_and_still_reach_metrics() {
        let app = router_without_debug(state(), DebugRefusal::NotLoopback);
        let (status, body) = get(app.clone(), "/debug/scaledobjects/ns/name").await;
        assert_eq!(status, 403);
        assert!(body.contains("--debug-endpoints on"), "{body}");
        let (status, _) = get(app, "/metrics").await;
        assert_eq!(status, 200);
        let (status, _) = get(router(state()), "/debug/scaledobjects").await;
        assert_eq!(status, 200);
    }

    #[test]
    fn loopback_peers_include_mapped_addresses_and_access_modes_parse() {
        assert!(is_loopback("127.0.0.1:1".parse().unwrap()));
        assert!(is_loopback("[::ffff:127.0.0.1]:1".parse().unwrap()));
        assert!(is_loopback("[::1]:1".parse().unwrap()));
        assert!(!is_loopback("10.0.0.1:1".parse().unwrap()));
        assert_eq!("off".parse::<DebugAccess>(), Ok(DebugAccess::Off));
        assert_eq!(
            "certificate".parse::<DebugAccess>(),
            Ok(DebugAccess::Certificate)
        );
        assert!(
            "maybe"
                .parse::<DebugAccess>()
                .unwrap_err()
                .contains("off, loopback, on or certificate")
        );
    }
}
