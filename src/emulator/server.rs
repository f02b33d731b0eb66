//! One emulated replica over HTTP: the engine driven in real time, OpenAI-compatible routes,
//! `/metrics`, `/health`, and fault controls.
//!
//! Owns: [`Replica`] (engine plus HTTP state behind one mutex), its real-time driver task, the
//! axum [`Replica::router`], and fault injection ([`FaultUpdate`]: slow down, fail requests,
//! hang `/metrics`, restart). Does not own the engine model ([`super::engine`]), request
//! parsing ([`super::openai`]) or starting listeners ([`super::fleet`]).

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State as AxumState;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::SplitMix64;
use super::config::{ConfigError, EngineConfig};
use super::engine::{Engine, Event, FinishReason, RequestId, RequestRecord, RequestSpec};
use super::http_stats::{HttpObservation, HttpStats};
use super::metrics::{RenderInfo, render};
use super::openai::{self, Endpoint};

/// How one replica is set up.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaConfig {
    /// Served model name (`model` in requests, `model_name` label).
    pub model: String,
    /// The engine model's parameters.
    pub engine: EngineConfig,
    /// Seed for fault injection draws.
    pub seed: u64,
    /// `max_tokens` for chat requests that give none (completions use OpenAI's 16).
    pub default_max_tokens: u32,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        ReplicaConfig {
            model: "meta-llama/Llama-3.1-8B-Instruct".into(),
            engine: EngineConfig::default(),
            seed: 0,
            default_max_tokens: 256,
        }
    }
}

/// A change to a replica's faults (`POST /admin/fault` body); absent fields stay as they are.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultUpdate {
    /// Step-time multiplier (1.0 = normal, 3.0 = three times slower).
    pub slowdown: Option<f64>,
    /// Fraction of generation requests answered with HTTP 500 at once, 0..1.
    pub fail_rate: Option<f64>,
    /// While true, `GET /metrics` never answers.
    pub hang_metrics: Option<bool>,
    /// Restart the replica: in-flight requests fail, counters reset, new start time.
    #[serde(default)]
    pub restart: bool,
}

/// The faults in force (`POST /admin/fault` answer).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultState {
    /// Step-time multiplier.
    pub slowdown: f64,
    /// Fraction of requests failed.
    pub fail_rate: f64,
    /// Whether `/metrics` hangs.
    pub hang_metrics: bool,
    /// Restarts so far.
    pub restarts: u64,
}

/// A point-in-time view of a replica.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaSnapshot {
    /// Requests in the batch.
    pub running: usize,
    /// Requests waiting.
    pub waiting: usize,
    /// KV-cache usage 0..1.
    pub kv_cache_usage: f64,
    /// Finished requests since the last (re)start.
    pub finished_total: u64,
    /// Preemptions since the last (re)start.
    pub preemptions_total: u64,
    /// Restarts so far.
    pub restarts: u64,
}

enum Msg {
    Token(u32),
    Finished(RequestRecord),
}

struct State {
    engine: Engine,
    origin: Instant,
    start_unix: f64,
    http: HttpStats,
    waiters: HashMap<RequestId, mpsc::UnboundedSender<Msg>>,
    fail_rate: f64,
    rng: SplitMix64,
    restarts: u64,
    events: Vec<Event>,
}

impl State {
    /// Advances the engine to the wall clock and hands tokens to waiting handlers.
    fn pump(&mut self) {
        let now = self.origin.elapsed();
        let mut events = std::mem::take(&mut self.events);
        self.engine.advance_to(now, &mut events);
        for ev in events.drain(..) {
            match ev {
                Event::Token { id, generated, .. } => {
                    if let Some(tx) = self.waiters.get(&id) {
                        let _ = tx.send(Msg::Token(generated));
                    }
                }
                Event::Finished(rec) => {
                    if let Some(tx) = self.waiters.remove(&rec.id) {
                        let _ = tx.send(Msg::Finished(rec));
                    }
                }
            }
        }
        self.events = events;
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// One emulated vLLM replica: engine, HTTP counters and faults.
pub struct Replica {
    config: ReplicaConfig,
    state: Mutex<State>,
    wake: Notify,
    hang: watch::Sender<bool>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("model", &self.config.model)
            .finish()
    }
}

impl Replica {
    /// A replica with a fresh engine; fails when the engine configuration cannot run.
    pub fn new(config: ReplicaConfig) -> Result<Arc<Replica>, ConfigError> {
        let engine = Engine::new(config.engine.clone())?;
        let start_unix = unix_now();
        Ok(Arc::new(Replica {
            state: Mutex::new(State {
                engine,
                origin: Instant::now(),
                start_unix,
                http: HttpStats::new(start_unix),
                waiters: HashMap::new(),
                fail_rate: 0.0,
                rng: SplitMix64::new(config.seed),
                restarts: 0,
                events: Vec::new(),
            }),
            config,
            wake: Notify::new(),
            hang: watch::Sender::new(false),
        }))
    }

    /// The configuration.
    pub fn config(&self) -> &ReplicaConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the engine half-updated in a way that
        // matters more than losing the replica, so keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs the engine in real time until `shutdown`: wakes at each step end or new request.
    pub async fn drive(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let deadline = {
                let mut st = self.lock();
                st.pump();
                st.engine.next_event_time().map(|t| st.origin + t)
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
        }
        // End every open stream.
        self.lock().waiters.clear();
    }

    /// Applies a fault change and returns the faults now in force.
    pub fn apply_fault(&self, update: &FaultUpdate) -> Result<FaultState, String> {
        if let Some(s) = update.slowdown
            && !(s.is_finite() && s > 0.0)
        {
            return Err(format!(
                "\"slowdown\" must be a positive number (1.0 = normal), got {s}"
            ));
        }
        if let Some(f) = update.fail_rate
            && !(0.0..=1.0).contains(&f)
        {
            return Err(format!("\"fail_rate\" must be between 0 and 1, got {f}"));
        }
        if update.restart {
            self.restart();
        }
        let mut st = self.lock();
        if let Some(s) = update.slowdown {
            st.pump();
            st.engine.set_slowdown(s);
        }
        if let Some(f) = update.fail_rate {
            st.fail_rate = f;
        }
        if let Some(h) = update.hang_metrics {
            self.hang.send_replace(h);
        }
        Ok(self.fault_state(&st))
    }

    fn fault_state(&self, st: &State) -> FaultState {
        FaultState {
            slowdown: st.engine.config().slowdown,
            fail_rate: st.fail_rate,
            hang_metrics: *self.hang.borrow(),
            restarts: st.restarts,
        }
    }

    /// Restarts the replica: in-flight requests end with an error, the engine and every counter
    /// start from zero, and the start time (`process_start_time_seconds`, `_created`) moves on.
    /// The current slowdown is kept.
    pub fn restart(&self) {
        let mut st = self.lock();
        let mut cfg = self.config.engine.clone();
        cfg.slowdown = st.engine.config().slowdown;
        if let Ok(engine) = Engine::new(cfg) {
            st.engine = engine;
        }
        st.origin = Instant::now();
        st.start_unix = unix_now().max(st.start_unix + 0.001);
        st.http = HttpStats::new(st.start_unix);
        st.waiters.clear();
        st.restarts += 1;
        drop(st);
        self.wake.notify_one();
    }

    /// The `/metrics` body as of now.
    pub fn render_metrics(&self) -> String {
        let mut st = self.lock();
        st.pump();
        let info = RenderInfo {
            model_name: &self.config.model,
            engine_index: 0,
            start_unix_seconds: st.start_unix,
            http: Some(&st.http),
        };
        let mut out = String::with_capacity(64 * 1024);
        render(&st.engine, &info, &mut out);
        out
    }

    /// Queue, batch and counters as of now.
    pub fn snapshot(&self) -> ReplicaSnapshot {
        let mut st = self.lock();
        st.pump();
        let stats = st.engine.stats();
        ReplicaSnapshot {
            running: st.engine.num_running(),
            waiting: st.engine.num_waiting(),
            kv_cache_usage: st.engine.kv_cache_usage(),
            finished_total: stats.finished_total(),
            preemptions_total: stats.num_preemptions_total,
            restarts: st.restarts,
        }
    }

    /// Runs `f` on the engine (advanced to now) under the lock, e.g. to read its statistics.
    pub fn with_engine<T>(&self, f: impl FnOnce(&Engine) -> T) -> T {
        let mut st = self.lock();
        st.pump();
        f(&st.engine)
    }

    fn record_http(
        &self,
        handler: &'static str,
        method: &'static str,
        status: u16,
        req: u64,
        resp: u64,
        started: Instant,
    ) {
        let secs = started.elapsed().as_secs_f64();
        let obs = HttpObservation {
            handler,
            method,
            status,
            request_bytes: req,
            response_bytes: resp,
            duration_seconds: secs,
        };
        self.lock().http.record(&obs, unix_now());
    }

    /// The axum routes of this replica.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/v1/completions", post(completions))
            .route("/v1/chat/completions", post(chat_completions))
            .route("/v1/models", get(models))
            .route("/health", get(|| async { StatusCode::OK }))
            .route("/metrics", get(metrics))
            .route("/admin/fault", post(admin_fault))
            .with_state(Arc::clone(self))
    }
}

type Shared = AxumState<Arc<Replica>>;

fn json_response(status: StatusCode, value: &serde_json::Value) -> (Response, u64) {
    let body = value.to_string();
    let len = body.len() as u64;
    let resp = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    (resp, len)
}

async fn models(AxumState(r): Shared) -> Response {
    let started = Instant::now();
    let created = unix_now() as u64;
    let model = &r.config.model;
    let body = serde_json::json!({
        "object": "list",
        "data": [{"id": model, "object": "model", "created": created, "owned_by": "vllm",
                  "root": model, "parent": null,
                  "max_model_len": r.config.engine.max_model_len, "permission": []}],
    });
    let (resp, len) = json_response(StatusCode::OK, &body);
    r.record_http("/v1/models", "GET", 200, 0, len, started);
    resp
}

async fn completions(state: Shared, headers: HeaderMap, body: Bytes) -> Response {
    generate(state.0, Endpoint::Completions, headers, body).await
}

async fn chat_completions(state: Shared, headers: HeaderMap, body: Bytes) -> Response {
    generate(state.0, Endpoint::Chat, headers, body).await
}

/// Aborts its request in the engine if the client goes away before the end; records the HTTP
/// metrics of a stream when it ends either way.
struct RequestGuard {
    replica: Arc<Replica>,
    id: RequestId,
    restarts: u64,
    done: bool,
    stream_log: Option<(&'static str, u64, Instant)>,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        if !self.done {
            let mut st = self.replica.lock();
            if st.restarts == self.restarts {
                st.waiters.remove(&self.id);
                let now = st.origin.elapsed();
                st.engine.abort(now, self.id);
                drop(st);
                self.replica.wake.notify_one();
            }
        }
        if let Some((handler, req, started)) = self.stream_log {
            self.replica
                .record_http(handler, "POST", 200, req, 0, started);
        }
    }
}

async fn generate(
    r: Arc<Replica>,
    endpoint: Endpoint,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let handler = endpoint.path();
    let req_bytes = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(body.len() as u64);
    let fail = |status: StatusCode, message: &str, kind: &str| {
        let (resp, len) =
            json_response(status, &openai::error_body(message, kind, status.as_u16()));
        r.record_http(handler, "POST", status.as_u16(), req_bytes, len, started);
        resp
    };
    let default_max = match endpoint {
        Endpoint::Completions => 16,
        Endpoint::Chat => r.config.default_max_tokens,
    };
    let parsed = match openai::parse_request(endpoint, &body, default_max) {
        Ok(p) => p,
        Err(msg) => return fail(StatusCode::BAD_REQUEST, &msg, "BadRequestError"),
    };
    if let Some(m) = &parsed.model
        && m != &r.config.model
    {
        let msg = format!("The model `{m}` does not exist.");
        return fail(StatusCode::NOT_FOUND, &msg, "NotFoundError");
    }
    let spec = RequestSpec {
        prompt_tokens: parsed.prompt_tokens,
        output_tokens: parsed.output_tokens,
        max_tokens: parsed.max_tokens,
        stream_tokens: parsed.stream,
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let added = {
        let mut st = r.lock();
        if st.fail_rate > 0.0 && st.rng.next_f64() < st.fail_rate {
            Err(None)
        } else {
            let now = st.origin.elapsed();
            match st.engine.add_request(now, spec) {
                Ok(id) => {
                    st.waiters.insert(id, tx);
                    Ok((id, st.restarts))
                }
                Err(e) => Err(Some(e.to_string())),
            }
        }
    };
    let (id, restarts) = match added {
        Ok(x) => x,
        Err(None) => {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                "injected failure (fail_rate)",
                "InternalServerError",
            );
        }
        Err(Some(msg)) => return fail(StatusCode::BAD_REQUEST, &msg, "BadRequestError"),
    };
    r.wake.notify_one();
    let mut guard = RequestGuard {
        replica: Arc::clone(&r),
        id,
        restarts,
        done: false,
        stream_log: None,
    };
    let created = unix_now() as u64;
    if !parsed.stream {
        while let Some(msg) = rx.recv().await {
            if let Msg::Finished(rec) = msg {
                guard.done = true;
                let body = openai::full_response(endpoint, &r.config.model, created, &rec);
                let (resp, len) = json_response(StatusCode::OK, &body);
                r.record_http(handler, "POST", 200, req_bytes, len, started);
                return resp;
            }
        }
        guard.done = true;
        return fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the engine restarted while serving this request",
            "InternalServerError",
        );
    }
    guard.stream_log = Some((handler, req_bytes, started));
    let model: Arc<str> = Arc::from(r.config.model.as_str());
    let reason = if parsed.output_tokens >= parsed.max_tokens {
        FinishReason::Length
    } else {
        FinishReason::Stop
    };
    let opening = (endpoint == Endpoint::Chat)
        .then(|| openai::chunk_event(endpoint, &model, created, id, None, None));
    let target = parsed.output_tokens;
    let include_usage = parsed.include_usage;
    let stream = futures_util::stream::unfold(
        (rx, guard, opening, false),
        move |(mut rx, mut guard, opening, ended)| {
            let model = Arc::clone(&model);
            async move {
                if ended {
                    return None;
                }
                if let Some(first) = opening {
                    return Some((
                        Ok::<_, Infallible>(Bytes::from(first)),
                        (rx, guard, None, false),
                    ));
                }
                match rx.recv().await {
                    Some(Msg::Token(g)) => {
                        let finish = (g >= target).then_some(reason);
                        let ev =
                            openai::chunk_event(endpoint, &model, created, id, Some(g - 1), finish);
                        Some((Ok(Bytes::from(ev)), (rx, guard, None, false)))
                    }
                    Some(Msg::Finished(rec)) => {
                        guard.done = true;
                        let mut tail = String::new();
                        if include_usage {
                            tail.push_str(&openai::usage_event(endpoint, &model, created, &rec));
                        }
                        tail.push_str("data: [DONE]\n\n");
                        Some((Ok(Bytes::from(tail)), (rx, guard, None, true)))
                    }
                    // Restart or shutdown: the RequestGuard sees the restart and does not abort.
                    None => None,
                }
            }
        },
    );
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

async fn metrics(AxumState(r): Shared, headers: HeaderMap) -> Response {
    let mut hang = r.hang.subscribe();
    while *hang.borrow_and_update() {
        if hang.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
    let body = r.render_metrics();
    let gzip = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|e| e.trim().starts_with("gzip")));
    let content_type = "text/plain; version=0.0.4; charset=utf-8";
    if gzip {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        if enc.write_all(body.as_bytes()).is_ok()
            && let Ok(bytes) = enc.finish()
        {
            return (
                [
                    (header::CONTENT_TYPE, content_type),
                    (header::CONTENT_ENCODING, "gzip"),
                ],
                bytes,
            )
                .into_response();
        }
    }
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn admin_fault(AxumState(r): Shared, body: Bytes) -> Response {
    let update: FaultUpdate = match serde_json::from_slice(&body) {
        Ok(u) => u,
        Err(e) => {
            let msg = format!(
                "fault body: {e}; expected JSON like {{\"slowdown\": 2.0, \"fail_rate\": 0.1, \
                 \"hang_metrics\": true, \"restart\": false}}"
            );
            return json_response(
                StatusCode::BAD_REQUEST,
                &openai::error_body(&msg, "BadRequestError", 400),
            )
            .0;
        }
    };
    match r.apply_fault(&update) {
        Ok(state) => {
            json_response(
                StatusCode::OK,
                &serde_json::to_value(state).unwrap_or_default(),
            )
            .0
        }
        Err(msg) => {
            json_response(
                StatusCode::BAD_REQUEST,
                &openai::error_body(&msg, "BadRequestError", 400),
            )
            .0
        }
    }
}
