//! TEMPORARY bridge until the emulator's server is merged: one engine driven in real time
//! behind `POST /v1/completions` (non-streaming) and `GET /metrics`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::emulator::{Engine, EngineConfig, Event, RenderInfo, RequestSpec};

struct Shared {
    engine: Mutex<Engine>,
    waiters: Mutex<HashMap<u64, oneshot::Sender<()>>>,
    origin: Instant,
    wake: Notify,
    model: String,
    start_unix: f64,
}

#[derive(Clone)]
struct AppState(Arc<Shared>);

/// Serves one replica on `listener` until `stop`.
pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    engine: EngineConfig,
    model: String,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let shared = Arc::new(Shared {
        engine: Mutex::new(Engine::new(engine)?),
        waiters: Mutex::new(HashMap::new()),
        origin: Instant::now(),
        wake: Notify::new(),
        model,
        start_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
    });
    let driver = {
        let shared = shared.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut events = Vec::new();
            loop {
                let next = {
                    let mut engine = shared.engine.lock().unwrap();
                    engine.advance_to(shared.origin.elapsed(), &mut events);
                    engine.next_event_time()
                };
                for e in events.drain(..) {
                    if let Event::Finished(record) = e {
                        if let Some(tx) = shared.waiters.lock().unwrap().remove(&record.id) {
                            let _ = tx.send(());
                        }
                    }
                }
                let sleep = match next {
                    Some(at) => tokio::time::sleep_until(shared.origin + at),
                    None => tokio::time::sleep(Duration::from_secs(3600)),
                };
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = sleep => {}
                    _ = shared.wake.notified() => {}
                }
            }
        })
    };
    let app = axum::Router::new()
        .route("/v1/completions", post(complete))
        .route("/metrics", get(metrics))
        .with_state(AppState(shared));
    axum::serve(listener, app)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await?;
    driver.abort();
    Ok(())
}

async fn complete(
    State(AppState(s)): State<AppState>,
    Json(body): Json<serde_json::Value>,
) -> Response {
    let prompt = body["prompt"]
        .as_str()
        .unwrap_or("")
        .split_whitespace()
        .count() as u32;
    let output = body["max_tokens"].as_u64().unwrap_or(16) as u32;
    let (tx, rx) = oneshot::channel();
    let id = {
        let mut engine = s.engine.lock().unwrap();
        match engine.add_request(
            s.origin.elapsed(),
            RequestSpec::new(prompt.max(1), output.max(1)),
        ) {
            Ok(id) => id,
            Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
        }
    };
    s.waiters.lock().unwrap().insert(id, tx);
    s.wake.notify_one();
    let _ = rx.await;
    Json(serde_json::json!({"id": id, "choices": [{"text": ""}]})).into_response()
}

async fn metrics(State(AppState(s)): State<AppState>) -> Response {
    let body = {
        let mut engine = s.engine.lock().unwrap();
        let mut ev = Vec::new();
        engine.advance_to(s.origin.elapsed(), &mut ev);
        // Finished events are delivered by the driver next time; push back by waking it.
        for e in ev {
            if let Event::Finished(record) = e {
                if let Some(tx) = s.waiters.lock().unwrap().remove(&record.id) {
                    let _ = tx.send(());
                }
            }
        }
        crate::emulator::render_string(
            &engine,
            &RenderInfo {
                model_name: &s.model,
                engine_index: 0,
                start_unix_seconds: s.start_unix,
                http: None,
            },
        )
    };
    s.wake.notify_one();
    body.into_response()
}
