//! A small vLLM-shaped server for the load-test tests: a fixed number of batch slots, a FIFO
//! queue in front of them, a streaming `/v1/completions`, `/health` and a `/metrics` page with
//! vLLM's names. Its capacity is known exactly: `slots / (prefill + (output - 1) * itl)` req/s.

#![allow(dead_code, unreachable_pub)]

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// vLLM V1 TTFT bucket bounds.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const E2E_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// How the server behaves.
#[derive(Debug, Clone, Copy)]
pub struct SlotConfig {
    /// Requests served at once (vLLM's max_num_seqs).
    pub slots: usize,
    /// Time from admission to the first token.
    pub prefill: Duration,
    /// Time between tokens.
    pub itl: Duration,
}

impl SlotConfig {
    /// Requests per second the server completes when always busy, for `output` tokens each.
    pub fn capacity_rps(&self, output: u32) -> f64 {
        let service = self.prefill.as_secs_f64()
            + f64::from(output.saturating_sub(1)) * self.itl.as_secs_f64();
        self.slots as f64 / service
    }
}

struct Hist {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Hist {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }
    fn observe(&mut self, v: f64) {
        for (i, b) in self.bounds.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }
    fn render(&self, out: &mut String, name: &str) {
        let labels = r#"engine="0",model_name="test-model""#;
        let _ = writeln!(out, "# HELP {name} test histogram\n# TYPE {name} histogram");
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, r#"{name}_bucket{{{labels},le="{b:?}"}} {c}.0"#);
        }
        let _ = writeln!(
            out,
            r#"{name}_bucket{{{labels},le="+Inf"}} {}.0"#,
            self.count
        );
        let _ = writeln!(out, "{name}_count{{{labels}}} {}.0", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
    }
}

struct Inner {
    config: SlotConfig,
    slots: Arc<Semaphore>,
    waiting: AtomicI64,
    running: AtomicI64,
    success: AtomicU64,
    prompt_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    completions: AtomicU64,
    hists: Mutex<(Hist, Hist, Hist)>,
}

/// A running test server.
pub struct SlotServer {
    /// Its address.
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl SlotServer {
    /// Starts one on 127.0.0.1:0.
    pub async fn start(config: SlotConfig) -> SlotServer {
        Self::start_on("127.0.0.1:0", config).await
    }

    /// Starts one on `addr`.
    pub async fn start_on(addr: &str, config: SlotConfig) -> SlotServer {
        let inner = Arc::new(Inner {
            config,
            slots: Arc::new(Semaphore::new(config.slots)),
            waiting: AtomicI64::new(0),
            running: AtomicI64::new(0),
            success: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            completions: AtomicU64::new(0),
            hists: Mutex::new((
                Hist::new(TTFT_BUCKETS),
                Hist::new(ITL_BUCKETS),
                Hist::new(E2E_BUCKETS),
            )),
        });
        let app = Router::new()
            .route("/health", get(|| async { "ok" }))
            .route("/metrics", get(metrics))
            .route("/v1/completions", post(completions))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Like uvicorn (vLLM's server): no Nagle delay on the small SSE writes.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        SlotServer { addr, inner, task }
    }

    /// The base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Completion requests received.
    pub fn completions(&self) -> u64 {
        self.inner.completions.load(Ordering::Relaxed)
    }

    /// The server's TTFT histogram: `(bound, cumulative count)` and the total.
    pub fn ttft_buckets(&self) -> (Vec<(f64, u64)>, u64) {
        let h = self.inner.hists.lock().unwrap();
        (
            h.0.bounds
                .iter()
                .copied()
                .zip(h.0.counts.iter().copied())
                .collect(),
            h.0.count,
        )
    }
}

impl Drop for SlotServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn metrics(State(inner): State<Arc<Inner>>) -> Response {
    let labels = r#"engine="0",model_name="test-model""#;
    let mut out = String::new();
    let gauge = |out: &mut String, name: &str, v: f64| {
        let _ = writeln!(
            out,
            "# HELP {name} test gauge\n# TYPE {name} gauge\n{name}{{{labels}}} {v:?}"
        );
    };
    let waiting = inner.waiting.load(Ordering::Relaxed) as f64;
    let running = inner.running.load(Ordering::Relaxed) as f64;
    gauge(&mut out, "vllm:num_requests_running", running);
    gauge(&mut out, "vllm:num_requests_waiting", waiting);
    gauge(
        &mut out,
        "vllm:kv_cache_usage_perc",
        running / inner.config.slots as f64,
    );
    let counter = |out: &mut String, name: &str, extra: &str, v: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} test counter\n# TYPE {name} counter\n{name}_total{{{labels}{extra}}} {v}.0"
        );
    };
    counter(&mut out, "vllm:num_preemptions", "", 0);
    counter(
        &mut out,
        "vllm:prompt_tokens",
        "",
        inner.prompt_tokens.load(Ordering::Relaxed),
    );
    counter(
        &mut out,
        "vllm:generation_tokens",
        "",
        inner.generation_tokens.load(Ordering::Relaxed),
    );
    counter(
        &mut out,
        "vllm:request_success",
        r#",finished_reason="length""#,
        inner.success.load(Ordering::Relaxed),
    );
    {
        let h = inner.hists.lock().unwrap();
        h.0.render(&mut out, "vllm:time_to_first_token_seconds");
        h.1.render(&mut out, "vllm:inter_token_latency_seconds");
        h.2.render(&mut out, "vllm:e2e_request_latency_seconds");
    }
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        out,
    )
        .into_response()
}

async fn completions(
    State(inner): State<Arc<Inner>>,
    _headers: HeaderMap,
    body: String,
) -> Response {
    let arrived = Instant::now();
    inner.completions.fetch_add(1, Ordering::Relaxed);
    let Ok(request) = serde_json::from_str::<serde_json::Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "bad json").into_response();
    };
    let max_tokens = request["max_tokens"].as_u64().unwrap_or(16).max(1);
    let prompt_tokens = request["prompt"]
        .as_str()
        .map_or(0, |p| p.split_whitespace().count() as u64);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(64);
    let state = inner.clone();
    inner.waiting.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(async move {
        let permit = state.slots.clone().acquire_owned().await.unwrap();
        state.waiting.fetch_sub(1, Ordering::Relaxed);
        state.running.fetch_add(1, Ordering::Relaxed);
        let config = state.config;
        tokio::time::sleep(config.prefill).await;
        let mut last = Instant::now();
        let ttft = (last - arrived).as_secs_f64();
        let mut itls = Vec::new();
        let chunk = |text: &str| {
            format!(
                "data: {{\"object\":\"text_completion\",\"choices\":[{{\"index\":0,\"text\":\"{text}\",\"finish_reason\":null}}]}}\n\n"
            )
        };
        let mut ok = tx.send(Ok(chunk(" the"))).await.is_ok();
        for _ in 1..max_tokens {
            if !ok {
                break;
            }
            tokio::time::sleep(config.itl).await;
            let now = Instant::now();
            itls.push((now - last).as_secs_f64());
            last = now;
            ok = tx.send(Ok(chunk(" the"))).await.is_ok();
        }
        let usage = format!(
            "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt_tokens},\"completion_tokens\":{max_tokens},\"total_tokens\":{}}}}}\n\ndata: [DONE]\n\n",
            prompt_tokens + max_tokens
        );
        let _ = tx.send(Ok(usage)).await;
        let e2e = (Instant::now() - arrived).as_secs_f64();
        {
            let mut h = state.hists.lock().unwrap();
            h.0.observe(ttft);
            for v in itls {
                h.1.observe(v);
            }
            h.2.observe(e2e);
        }
        state.success.fetch_add(1, Ordering::Relaxed);
        state
            .prompt_tokens
            .fetch_add(prompt_tokens, Ordering::Relaxed);
        state
            .generation_tokens
            .fetch_add(max_tokens, Ordering::Relaxed);
        state.running.fetch_sub(1, Ordering::Relaxed);
        drop(permit);
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// Load-test arguments for a fixed 8-token prompt, 2-token output load at `rps` for `seconds`,
/// without scraping metrics.
pub fn fixed_args(
    url: &str,
    rps: f64,
    seconds: f64,
    rest_seconds: f64,
) -> vllm_keda_tools::loadtest::LoadtestOptions {
    vllm_keda_tools::loadtest::LoadtestOptions {
        url: url.to_string(),
        model: "test-model".into(),
        rps: vec![rps],
        step_seconds: seconds,
        rest_seconds,
        warmup: 20,
        shape: "fixed:8:2".into(),
        no_metrics: true,
        out: "unused".into(),
        request_timeout_seconds: 30.0,
        scaler_address: "scaler:9090".into(),
        quiet: true,
        ..Default::default()
    }
}

/// Index of the first bucket of `bounds` whose upper bound holds `v` (`bounds.len()` for +Inf).
pub fn bucket_index(bounds: &[f64], v: f64) -> usize {
    bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len())
}
