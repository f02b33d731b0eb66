//! The HTTP routes of one emulated replica: OpenAI-compatible generation (streaming and not),
//! `/v1/models`, `/health`, `/metrics` and `/admin/fault`.
//!
//! Owns: request handling, SSE streaming, aborting requests whose client went away, and the
//! instrumentator's per-request observations. Does not own the engine or its driver (see
//! [`super::server`]) or body parsing (see [`super::openai`]).

use std::convert::Infallible;
use std::io::Write as _;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State as AxumState;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::engine::{FinishReason, RequestId, RequestRecord, RequestSpec};
use super::openai::{self, Endpoint};
use super::server::{FaultUpdate, Msg, Replica, unix_now};

/// The routes, with `replica` as their state.
pub(super) fn router(replica: &Arc<Replica>) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/metrics", get(metrics))
        .route("/admin/fault", post(admin_fault))
        .with_state(Arc::clone(replica))
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
                    Ok((id, st.restarts, id ^ st.id_salt))
                }
                Err(e) => Err(Some(e.to_string())),
            }
        }
    };
    let (id, restarts, public_id) = match added {
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
                let shown = RequestRecord {
                    id: public_id,
                    ..rec
                };
                let body = openai::full_response(endpoint, &r.config.model, created, &shown);
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
        .then(|| openai::chunk_event(endpoint, &model, created, public_id, None, None));
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
                        let ev = openai::chunk_event(
                            endpoint,
                            &model,
                            created,
                            public_id,
                            Some(g - 1),
                            finish,
                        );
                        Some((Ok(Bytes::from(ev)), (rx, guard, None, false)))
                    }
                    Some(Msg::Finished(rec)) => {
                        guard.done = true;
                        let mut tail = String::new();
                        if include_usage {
                            let shown = RequestRecord {
                                id: public_id,
                                ..rec
                            };
                            tail.push_str(&openai::usage_event(endpoint, &model, created, &shown));
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
