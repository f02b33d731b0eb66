//! One emulated replica over HTTP: the engine driven in real time, OpenAI-compatible routes,
//! `/metrics`, `/health`, and fault controls.
//!
//! Owns: [`Replica`] (engine plus HTTP state behind one mutex), its real-time driver task, and
//! fault injection ([`FaultUpdate`]: slow down, fail requests,
//! hang `/metrics`, restart). Does not own the engine model ([`super::engine`]), the routes
//! (`routes.rs`) or starting listeners ([`super::fleet`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::SplitMix64;
use super::config::{ConfigError, EngineConfig};
use super::engine::{Engine, Event, RequestId, RequestRecord};
use super::http_stats::{HttpObservation, HttpStats};
use super::metrics::{RenderInfo, render};

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

pub(super) enum Msg {
    Token(u32),
    Finished(RequestRecord),
}

pub(super) struct State {
    pub(super) engine: Engine,
    pub(super) origin: Instant,
    pub(super) start_unix: f64,
    pub(super) http: HttpStats,
    pub(super) waiters: HashMap<RequestId, mpsc::UnboundedSender<Msg>>,
    pub(super) fail_rate: f64,
    pub(super) rng: SplitMix64,
    pub(super) restarts: u64,
    /// Mixed into response ids so they differ across replicas and restarts.
    pub(super) id_salt: u64,
    pub(super) events: Vec<Event>,
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

pub(super) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// One emulated vLLM replica: engine, HTTP counters and faults.
pub struct Replica {
    pub(super) config: ReplicaConfig,
    state: Mutex<State>,
    pub(super) wake: Notify,
    pub(super) hang: watch::Sender<bool>,
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
                id_salt: SplitMix64::new(config.seed ^ start_unix.to_bits()).next_u64(),
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

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
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
        st.id_salt = SplitMix64::new(self.config.seed ^ st.start_unix.to_bits()).next_u64();
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

    pub(super) fn record_http(
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
        super::routes::router(self)
    }
}
