//! Oracle test: our quantiles, gauges and rates against a real Prometheus.
//!
//! A test HTTP server on 127.0.0.1:0 serves a vLLM-shaped body (two engines, V1 bucket lists,
//! `_created` series, the ITL twin name) that changes on every scrape. A real Prometheus
//! (Debian package `prometheus`) scrapes it every second. At an evaluation time `T` we read the
//! raw samples Prometheus stored for the window (range-vector selectors), feed exactly those
//! values and timestamps to a `FleetWindow`, and compare:
//!
//! - P50/P95/P99 of e2e, TTFT, ITL and each request's own time per output token with
//!   `histogram_quantile(q, sum(rate(x_bucket[w])) by (le))` within 1e-9 relative: quantiles
//!   are ratio-invariant and every bucket series shares the scrape timestamps, so `rate`'s
//!   extrapolation factor cancels (the body keeps counters far from zero so Prometheus's
//!   extrapolation-to-zero clamp never makes the factor differ between buckets);
//! - the inter-token gaps' mean with the `_sum` delta over the `_count` delta, and with
//!   `sum(rate(x_sum[w])) / sum(rate(x_count[w]))` within 1e-9 relative;
//! - gauges with `sum(...)` / `max(...)` at `T`;
//! - rates with the difference quotient of the stored samples (`rate` extrapolates, so it is
//!   not comparable), and with `irate` over the last two samples (which does not extrapolate).
//!
//! Then the server "restarts" (every counter and bucket drops, start time and `_created`
//! change). Over a window spanning the restart, Prometheus's `rate` treats each drop as a
//! reset to zero and adds the post-restart value to the pre-restart increase, so it still
//! reports a rate and a quantile. We instead drop that pod's deltas for any window that spans
//! a restart: its rates and quantiles are undefined (never negative, never a mix of two
//! processes) while its gauges still count. The test checks both behaviours, and that once
//! the window is past the restart we match Prometheus again.
//!
//! A second test takes the cases the first avoids: three pods scraped at different phases
//! (`sum by (le)` over pods), counters starting at zero, empty buckets, buckets flat for whole
//! windows, and an idle pod whose window has no increase at all (Prometheus: NaN; ours: no
//! value). It compares with the non-extrapolating PromQL form `x - x offset D`, quantiles and
//! per-pod difference quotients computed by Prometheus itself, at several instants.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vllm_keda_core::exposition::{Exposition, Label, Sample};
use vllm_keda_core::signals::{
    Bucket, FleetSignals, FleetWindow, PodSnapshot, SignalSet, SignalSettings, histogram_quantile,
};

const WINDOW: &str = "8s";
const WINDOW_MS: i64 = 8_000;
const HISTOGRAMS: [(&str, &[f64]); 4] = [
    (
        "vllm:e2e_request_latency_seconds",
        &[
            0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
            120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
        ],
    ),
    (
        "vllm:time_to_first_token_seconds",
        &[
            0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
        ],
    ),
    (
        "vllm:inter_token_latency_seconds",
        &[
            0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0, 20.0, 40.0, 80.0,
        ],
    ),
    (
        "vllm:request_time_per_output_token_seconds",
        &[
            0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0, 20.0, 40.0, 80.0,
        ],
    ),
];
const COUNTERS: [&str; 3] = [
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:num_preemptions_total",
];

// ---------------------------------------------------------------------------------------------
// The vLLM-shaped target.

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

struct Engine {
    /// Cumulative bucket counts per histogram (one more than the finite bounds: +Inf).
    buckets: [Vec<f64>; 4],
    sums: [f64; 4],
    counters: [f64; 3],
    success: [f64; 2],
    waiting: f64,
    running: f64,
    kv: f64,
}

struct Target {
    rng: Rng,
    engines: Vec<Engine>,
    start_time: f64,
    created: f64,
    served: u64,
    reset_requested: bool,
}

impl Target {
    fn new() -> Self {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let engines = (0..2)
            .map(|_| {
                // Large starting counts keep `rate`'s zero clamp out of play (see module doc).
                let buckets = HISTOGRAMS.map(|(_, les)| {
                    let mut cumulative = 0.0;
                    (0..=les.len())
                        .map(|_| {
                            cumulative += (2_000 + rng.below(1_000)) as f64;
                            cumulative
                        })
                        .collect()
                });
                Engine {
                    buckets,
                    sums: [1.0e5; 4],
                    counters: [5.0e6, 2.0e7, 400.0],
                    success: [30_000.0, 4_000.0],
                    waiting: 0.0,
                    running: 0.0,
                    kv: 0.0,
                }
            })
            .collect();
        Target {
            rng,
            engines,
            start_time: 1.76e9,
            created: 1.76e9 + 3.25,
            served: 0,
            reset_requested: false,
        }
    }

    fn advance(&mut self) {
        let rng = &mut self.rng;
        for engine in &mut self.engines {
            for (h, buckets) in engine.buckets.iter_mut().enumerate() {
                // Every bucket gets observations on every scrape: no flat stretch in the CDF,
                // so the quantile is continuous in the rank and float noise cannot flip buckets.
                let mut cumulative = 0.0;
                for bucket in buckets.iter_mut() {
                    cumulative += (1 + rng.below(9)) as f64;
                    *bucket += cumulative;
                }
                engine.sums[h] += cumulative * 0.37;
            }
            engine.counters[0] += (100 + rng.below(900)) as f64;
            engine.counters[1] += (1_000 + rng.below(9_000)) as f64;
            engine.counters[2] += rng.below(3) as f64;
            engine.success[0] += (1 + rng.below(5)) as f64;
            engine.success[1] += rng.below(2) as f64;
            engine.waiting = rng.below(20) as f64;
            engine.running = rng.below(64) as f64;
            engine.kv = rng.below(1_000) as f64 / 1_000.0;
        }
    }

    /// A restart: every counter and bucket drops (to half, so it stays far from zero).
    fn restart(&mut self) {
        for engine in &mut self.engines {
            for buckets in &mut engine.buckets {
                for bucket in buckets.iter_mut() {
                    *bucket = (*bucket / 2.0).floor();
                }
            }
            for value in engine
                .sums
                .iter_mut()
                .chain(&mut engine.counters)
                .chain(&mut engine.success)
            {
                *value = (*value / 2.0).floor();
            }
        }
        self.start_time += 1_000.0;
        self.created += 1_000.0;
    }

    fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let w = &mut out;
        writeln!(w, "# TYPE process_start_time_seconds gauge").unwrap();
        writeln!(w, "process_start_time_seconds {}", self.start_time).unwrap();
        for (e, engine) in self.engines.iter().enumerate() {
            let l = format!("engine=\"{e}\",model_name=\"m\"");
            writeln!(w, "vllm:num_requests_waiting{{{l}}} {:?}", engine.waiting).unwrap();
            writeln!(w, "vllm:num_requests_running{{{l}}} {:?}", engine.running).unwrap();
            writeln!(w, "vllm:kv_cache_usage_perc{{{l}}} {:?}", engine.kv).unwrap();
            for (name, value) in COUNTERS.iter().zip(engine.counters) {
                writeln!(w, "{name}{{{l}}} {value:?}").unwrap();
                let created = name.replace("_total", "_created");
                writeln!(w, "{created}{{{l}}} {:?}", self.created).unwrap();
            }
            for (reason, value) in ["stop", "length"].iter().zip(engine.success) {
                let rl = format!("{l},finished_reason=\"{reason}\"");
                writeln!(w, "vllm:request_success_total{{{rl}}} {value:?}").unwrap();
                writeln!(w, "vllm:request_success_created{{{rl}}} {:?}", self.created).unwrap();
            }
            for (h, (name, les)) in HISTOGRAMS.iter().enumerate() {
                // vLLM 0.11 writes the ITL data twice; the old name must never be added.
                let names: &[&str] = if h == 2 {
                    &[name, "vllm:time_per_output_token_seconds"]
                } else {
                    &[name]
                };
                for name in names {
                    let buckets = &engine.buckets[h];
                    for (le, count) in les.iter().zip(buckets) {
                        writeln!(w, "{name}_bucket{{{l},le=\"{le:?}\"}} {count:?}").unwrap();
                    }
                    let count = buckets[les.len()];
                    writeln!(w, "{name}_bucket{{{l},le=\"+Inf\"}} {count:?}").unwrap();
                    writeln!(w, "{name}_count{{{l}}} {count:?}").unwrap();
                    writeln!(w, "{name}_sum{{{l}}} {:?}", engine.sums[h]).unwrap();
                    writeln!(w, "{name}_created{{{l}}} {:?}", self.created).unwrap();
                }
            }
        }
        out
    }

    fn serve_one(&mut self) -> String {
        if self.reset_requested {
            self.reset_requested = false;
            self.restart();
        }
        self.advance();
        self.served += 1;
        self.render()
    }
}

/// An HTTP server on 127.0.0.1 whose `/metrics` answers with `next()`'s body on each request.
async fn serve_metrics(
    next: impl Fn() -> String + Clone + Send + Sync + 'static,
) -> std::net::SocketAddr {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let next = next.clone();
            async move {
                (
                    [(
                        http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    next(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn start_target(target: Arc<Mutex<Target>>) -> std::net::SocketAddr {
    serve_metrics(move || target.lock().unwrap().serve_one()).await
}

// ---------------------------------------------------------------------------------------------
// Prometheus.

fn find_prometheus() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("prometheus"))
        .find(|candidate| candidate.is_file())
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

struct Prometheus {
    base: String,
    client: reqwest::Client,
}

impl Prometheus {
    async fn query(&self, query: &str, time_ms: i64) -> serde_json::Value {
        let time = format!("&time={}.{:03}", time_ms / 1000, time_ms % 1000);
        self.query_at(query, &time).await
    }

    /// An instant query at Prometheus's own clock, not ours.
    async fn query_now(&self, query: &str) -> serde_json::Value {
        self.query_at(query, "").await
    }

    async fn query_at(&self, query: &str, time: &str) -> serde_json::Value {
        let url = format!("{}/api/v1/query?query={}{time}", self.base, encode(query));
        let body = self
            .client
            .get(&url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let value: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(value["status"], "success", "{query}: {body}");
        value["data"]["result"].clone()
    }

    /// The single value of an instant-vector query.
    async fn scalar(&self, query: &str, time_ms: i64) -> f64 {
        let result = self.query(query, time_ms).await;
        let series = result.as_array().unwrap();
        assert_eq!(series.len(), 1, "{query}: {result}");
        series[0]["value"][1].as_str().unwrap().parse().unwrap()
    }
}

/// The raw samples Prometheus stored in `(T - w, T]`, grouped by scrape timestamp (ms).
type Scrapes = BTreeMap<i64, Vec<StoredSample>>;

/// One stored sample: name, labels, value.
type StoredSample = (String, Vec<(String, String)>, f64);

async fn raw_samples(prometheus: &Prometheus, time_ms: i64) -> Scrapes {
    let selector = format!("{{__name__=~\"vllm:.+|process_start_time_seconds\"}}[{WINDOW}]");
    let result = prometheus.query(&selector, time_ms).await;
    let mut scrapes = Scrapes::new();
    for series in result.as_array().unwrap() {
        let mut name = String::new();
        let mut labels = Vec::new();
        for (key, value) in series["metric"].as_object().unwrap() {
            let value = value.as_str().unwrap().to_string();
            if key == "__name__" {
                name = value;
            } else {
                labels.push((key.clone(), value));
            }
        }
        for point in series["values"].as_array().unwrap() {
            let ms = (point[0].as_f64().unwrap() * 1000.0).round() as i64;
            let value: f64 = point[1].as_str().unwrap().parse().unwrap();
            scrapes
                .entry(ms)
                .or_default()
                .push((name.clone(), labels.clone(), value));
        }
    }
    scrapes
}

/// One stored scrape as the pod snapshot our parser would have made of it.
fn snapshot_of(samples: &[StoredSample]) -> PodSnapshot {
    let exposition = Exposition {
        samples: samples
            .iter()
            .map(|(name, labels, value)| Sample {
                name,
                labels: labels
                    .iter()
                    .map(|(k, v)| Label {
                        name: k,
                        value: v.as_str().into(),
                    })
                    .collect(),
                value: *value,
                timestamp_ms: None,
            })
            .collect(),
        families: Vec::new(),
    };
    PodSnapshot::from_exposition(&exposition, None).expect("a usable snapshot")
}

/// Feeds the stored scrapes (all, or only the last `last_n`) to a window and computes at the
/// last one, with the window spanning exactly the scrapes fed.
fn ours(scrapes: &Scrapes, last_n: usize) -> FleetSignals {
    let chosen: Vec<_> = scrapes
        .iter()
        .skip(scrapes.len().saturating_sub(last_n))
        .collect();
    let first = *chosen[0].0;
    let last = *chosen[chosen.len() - 1].0;
    let span = Duration::from_millis((last - first) as u64);
    let mut window = FleetWindow::new(SignalSettings {
        latency_window: span,
        preemption_window: span,
        model: None,
        ..SignalSettings::default()
    });
    for (ms, samples) in &chosen {
        let snapshot = snapshot_of(samples);
        let at = Duration::from_millis((**ms - first) as u64);
        window.record(at, "target", Some(snapshot));
    }
    window.compute(span)
}

/// Per-series (name + labels) values in timestamp order.
fn series_of(scrapes: &Scrapes, name: &str) -> BTreeMap<Vec<(String, String)>, Vec<f64>> {
    let mut out: BTreeMap<Vec<(String, String)>, Vec<f64>> = BTreeMap::new();
    for samples in scrapes.values() {
        for (n, labels, value) in samples {
            if n == name {
                out.entry(labels.clone()).or_default().push(*value);
            }
        }
    }
    out
}

/// Increase of each series with Prometheus's reset handling (a drop counts as a reset to 0),
/// summed by `le`.
fn reset_adjusted_buckets(scrapes: &Scrapes, name: &str) -> Vec<Bucket> {
    let mut by_le: BTreeMap<String, f64> = BTreeMap::new();
    for (labels, values) in series_of(scrapes, &format!("{name}_bucket")) {
        let le = labels.iter().find(|(k, _)| k == "le").unwrap().1.clone();
        let increase: f64 = values
            .windows(2)
            .map(|w| if w[1] >= w[0] { w[1] - w[0] } else { w[1] })
            .sum();
        *by_le.entry(le).or_default() += increase;
    }
    by_le
        .into_iter()
        .map(|(le, count)| Bucket {
            le: le.parse().unwrap(),
            count,
        })
        .collect()
}

fn assert_close(what: &str, ours: f64, theirs: f64, relative: f64) {
    let scale = ours.abs().max(theirs.abs()).max(f64::MIN_POSITIVE);
    assert!(
        (ours - theirs).abs() / scale <= relative,
        "{what}: ours {ours} vs prometheus {theirs}"
    );
}

/// Our `q` quantile of `HISTOGRAMS[h]` in `set`.
fn quantile_in(set: &SignalSet, h: usize, q: f64) -> Option<f64> {
    let quantiles = [
        set.e2e_latency_seconds,
        set.ttft_seconds,
        set.itl_seconds,
        set.request_tpot_seconds,
    ][h];
    match q {
        0.5 => quantiles.p50,
        0.95 => quantiles.p95,
        _ => quantiles.p99,
    }
}

fn quantile_of(signals: &FleetSignals, h: usize, q: f64) -> Option<f64> {
    quantile_in(&signals.fleet, h, q)
}

/// The newest scrape Prometheus stored of every target: the oldest of the targets' newest
/// sample timestamps (ms), or `None` before each target has one.
///
/// Evaluating at this instant, taken from Prometheus's own timestamps rather than our clock,
/// means no scrape still in flight can land inside the window later (a target's next scrape
/// starts after its newest), and a scrape that failed under load (served but timed out, so
/// never stored) only leaves a gap the test then waits out.
async fn newest_stored(prometheus: &Prometheus) -> Option<i64> {
    let result = prometheus
        .query_now("min(max by (instance) (timestamp(vllm:num_requests_running)))")
        .await;
    let seconds: f64 = result.as_array()?.first()?["value"][1]
        .as_str()?
        .parse()
        .ok()?;
    Some((seconds * 1000.0).round() as i64)
}

/// Waits, polling Prometheus, until `ready` holds at the newest stored instant, and returns
/// that instant. Panics with `what` when it does not within 40 s.
async fn settle<F>(prometheus: &Prometheus, what: &str, mut ready: F) -> i64
where
    F: AsyncFnMut(i64) -> bool,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    loop {
        if let Some(time_ms) = newest_stored(prometheus).await {
            if ready(time_ms).await {
                return time_ms;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not stored by Prometheus within 40 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait_served(target: &Arc<Mutex<Target>>, at_least: u64) {
    while target.lock().unwrap().served < at_least {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Full comparison at `time_ms` (a window with no restart in it).
async fn compare_clean(prometheus: &Prometheus, time_ms: i64, label: &str) {
    let scrapes = raw_samples(prometheus, time_ms).await;
    assert!(
        scrapes.len() >= 5,
        "{label}: only {} scrapes stored",
        scrapes.len()
    );
    let signals = ours(&scrapes, usize::MAX);
    assert_eq!((signals.pods_total, signals.pods_healthy), (1, 1));
    assert!(
        !signals.pods[0].reset_in_window,
        "{label}: no restart expected"
    );

    for (h, (name, _)) in HISTOGRAMS.iter().enumerate() {
        for q in [0.5, 0.95, 0.99] {
            let promql =
                format!("histogram_quantile({q}, sum(rate({name}_bucket[{WINDOW}])) by (le))");
            let theirs = prometheus.scalar(&promql, time_ms).await;
            let ours = quantile_of(&signals, h, q).unwrap_or_else(|| panic!("{label}: {promql}"));
            assert_close(&format!("{label}: {promql}"), ours, theirs, 1e-9);
        }
    }

    let fleet = &signals.fleet;
    let gauge = |q: &'static str| async move { prometheus.scalar(q, time_ms).await };
    assert_eq!(
        fleet.queue_depth,
        gauge("sum(vllm:num_requests_waiting)").await
    );
    assert_eq!(fleet.running, gauge("sum(vllm:num_requests_running)").await);
    assert_eq!(
        fleet.kv_cache_usage.max,
        Some(gauge("max(vllm:kv_cache_usage_perc)").await)
    );

    // Rates: the difference quotient of the stored samples.
    let first = *scrapes.keys().next().unwrap();
    let last = *scrapes.keys().last().unwrap();
    let seconds = (last - first) as f64 / 1000.0;
    let quotient = |name: &str| {
        series_of(&scrapes, name)
            .values()
            .map(|v| v[v.len() - 1] - v[0])
            .sum::<f64>()
            / seconds
    };
    let checks = [
        (
            "generation",
            fleet.generation_tokens_per_second,
            "vllm:generation_tokens_total",
        ),
        (
            "prompt",
            fleet.prompt_tokens_per_second,
            "vllm:prompt_tokens_total",
        ),
        (
            "preemptions",
            fleet.preemptions_per_second,
            "vllm:num_preemptions_total",
        ),
        (
            "requests",
            fleet.requests_per_second,
            "vllm:request_success_total",
        ),
    ];
    for (what, ours, name) in checks {
        assert_close(
            &format!("{label}: {what} rate"),
            ours.unwrap(),
            quotient(name),
            1e-12,
        );
    }

    // The inter-token gaps' mean: the `_sum` delta over the `_count` delta, which is also
    // PromQL's ratio of the two rates (their extrapolation cancels).
    let itl = HISTOGRAMS[2].0;
    let itl_mean = fleet.itl_mean_seconds.unwrap();
    assert_close(
        &format!("{label}: ITL mean"),
        itl_mean,
        quotient(&format!("{itl}_sum")) / quotient(&format!("{itl}_count")),
        1e-12,
    );
    let promql = format!("sum(rate({itl}_sum[{WINDOW}])) / sum(rate({itl}_count[{WINDOW}]))");
    let theirs = prometheus.scalar(&promql, time_ms).await;
    assert_close(&format!("{label}: {promql}"), itl_mean, theirs, 1e-9);

    // Over the last two samples our rate is exactly `irate` (no extrapolation in either).
    let last_two = ours(&scrapes, 2);
    for (what, ours, name) in [
        (
            "generation",
            last_two.fleet.generation_tokens_per_second,
            COUNTERS[0],
        ),
        (
            "requests",
            last_two.fleet.requests_per_second,
            "vllm:request_success_total",
        ),
    ] {
        let theirs = prometheus
            .scalar(&format!("sum(irate({name}[{WINDOW}]))"), time_ms)
            .await;
        assert_close(
            &format!("{label}: {what} irate"),
            ours.unwrap(),
            theirs,
            1e-9,
        );
    }
}

/// A real Prometheus on a free loopback port scraping `targets` every second, ready to query.
/// The process is killed when the returned child is dropped; the directory holds its TSDB.
async fn start_prometheus(
    prometheus_bin: &std::path::Path,
    targets: &[std::net::SocketAddr],
) -> (Prometheus, tokio::process::Child, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    let list = targets
        .iter()
        .map(|t| format!("'{t}'"))
        .collect::<Vec<_>>()
        .join(", ");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: vllm\n    static_configs:\n      - targets: [{list}]\n"
        ),
    )
    .unwrap();
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let mut child = tokio::process::Command::new(prometheus_bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--log.level=warn")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("start prometheus");
    let prometheus = Prometheus {
        base: format!("http://127.0.0.1:{port}"),
        client: reqwest::Client::new(),
    };
    loop {
        let ready = prometheus
            .client
            .get(format!("{}/-/ready", prometheus.base))
            .send()
            .await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap();
            panic!("prometheus exited with {status}:\n{log}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("prometheus ready on port {port}, scraping {list} every 1 s");
    (prometheus, child, dir)
}

async fn run(prometheus_bin: PathBuf) {
    let target = Arc::new(Mutex::new(Target::new()));
    let target_addr = start_target(target.clone()).await;

    let (prometheus, mut child, _dir) = start_prometheus(&prometheus_bin, &[target_addr]).await;

    // 1. A clean window.
    wait_served(&target, 11).await;
    let t1 = settle(&prometheus, "five scrapes in the first window", async |t| {
        raw_samples(&prometheus, t).await.len() >= 5
    })
    .await;
    compare_clean(&prometheus, t1, "before restart").await;
    eprintln!("clean window matches");

    // 2. A restart, and a window spanning it.
    let reset_at = {
        let mut t = target.lock().unwrap();
        t.reset_requested = true;
        t.served
    };
    wait_served(&target, reset_at + 5).await;
    let e2e_bucket = format!("{}_bucket", HISTOGRAMS[0].0);
    let spans_restart = |scrapes: &Scrapes| {
        series_of(scrapes, &e2e_bucket)
            .values()
            .any(|v| v.windows(2).any(|w| w[1] < w[0]))
    };
    let t2 = settle(&prometheus, "a window spanning the restart", async |t| {
        spans_restart(&raw_samples(&prometheus, t).await)
    })
    .await;
    let scrapes = raw_samples(&prometheus, t2).await;
    assert!(
        spans_restart(&scrapes),
        "the window at t2 must span the restart"
    );
    let signals = ours(&scrapes, usize::MAX);
    let pod = &signals.pods[0];
    assert!(pod.healthy && pod.reset_in_window);
    // Ours: the pod's deltas are dropped: undefined, never negative; gauges still count.
    assert_eq!(signals.fleet.e2e_latency_seconds.p95, None);
    assert_eq!(signals.fleet.generation_tokens_per_second, None);
    assert_eq!(signals.fleet.requests_per_second, None);
    assert_eq!(
        signals.fleet.queue_depth,
        prometheus
            .scalar("sum(vllm:num_requests_waiting)", t2)
            .await
    );
    // Prometheus: every drop is a reset to zero, the post-restart value counts as increase.
    let rate = prometheus
        .scalar(&format!("sum(rate({}[{WINDOW}]))", COUNTERS[0]), t2)
        .await;
    assert!(rate > 0.0, "prometheus rate across a restart: {rate}");
    let adjusted = reset_adjusted_buckets(&scrapes, HISTOGRAMS[0].0);
    let theirs = prometheus
        .scalar(
            &format!("histogram_quantile(0.95, sum(rate({e2e_bucket}[{WINDOW}])) by (le))"),
            t2,
        )
        .await;
    let expected = histogram_quantile(0.95, &adjusted).unwrap();
    assert_close("reset-adjusted e2e p95", expected, theirs, 1e-9);
    eprintln!(
        "window across the restart: ours undefined, prometheus {theirs:.3} s (reset-adjusted)"
    );

    // 3. Past the restart, the same as Prometheus again.
    wait_served(&target, reset_at + 12).await;
    let t3 = settle(&prometheus, "five scrapes after the restart", async |t| {
        let scrapes = raw_samples(&prometheus, t).await;
        scrapes.len() >= 5 && !spans_restart(&scrapes)
    })
    .await;
    assert!(t3 - WINDOW_MS > 0);
    compare_clean(&prometheus, t3, "after restart").await;
    eprintln!("window after the restart matches");

    child.kill().await.ok();
}

/// The `prometheus` binary, or `None` when it is missing and that is explicitly allowed.
fn prometheus_or_skip(test: &str) -> Option<PathBuf> {
    let found = find_prometheus();
    if found.is_none() {
        let how = "prometheus not found on PATH: install the Debian package \
                   (apt-get update && apt-get install -y prometheus), or run scripts/test, \
                   which installs it without starting the system service";
        // A missing oracle fails the test unless it is explicitly allowed.
        if std::env::var_os("VLLM_KEDA_ALLOW_MISSING_ORACLES").is_none_or(|v| v != "1") {
            panic!("{how} (or set VLLM_KEDA_ALLOW_MISSING_ORACLES=1 to skip this oracle)");
        }
        eprintln!("not checked: {test}: {how}");
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quantiles_gauges_and_rates_match_real_prometheus() {
    let Some(prometheus_bin) = prometheus_or_skip("the Prometheus oracle test") else {
        return;
    };
    tokio::time::timeout(Duration::from_secs(75), run(prometheus_bin))
        .await
        .expect("prometheus oracle test timed out after 75 s");
}

// ---------------------------------------------------------------------------------------------
// The hard cases: several pods scraped at different phases, empty and flat buckets, counters
// that start at zero, an idle pod whose window has no increase at all.
//
// Prometheus's `rate` extrapolates each series to the window's edges (and clamps at zero), so
// it differs from our difference quotient by design, and per pod by a different factor once
// pods are scraped at different phases. The exact comparison is with the non-extrapolating
// PromQL form of what we compute: `x - x offset D` at `T` takes, per series, the newest sample at
// or before `T` and the newest at or before `T - D`. We feed exactly those two samples of each
// pod to a `FleetWindow` and compare `histogram_quantile(q, sum by (le) (...))`, the fleet sums
// and `sum(delta / (timestamp(x) - timestamp(x offset D)))` with our quantiles and rates.

const OFFSET: &str = "6s";
const OFFSET_MS: i64 = 6_000;

/// How a hard-case pod's counters move.
#[derive(Clone, Copy, Debug)]
enum Activity {
    /// Now and then a few observations land in one of the lowest buckets: the others stay empty
    /// or flat for whole windows. Counters start at zero.
    Sparse,
    /// Never an observation: every window has zero increase (and zero counts throughout).
    Idle,
    /// Observations in random buckets on every scrape, counters starting at zero.
    Busy,
}

struct HardPod {
    activity: Activity,
    rng: Rng,
    /// Per histogram, per bucket (non-cumulative, +Inf last) observation counts.
    counts: [Vec<f64>; 4],
    generation: f64,
    success: f64,
    served: u64,
}

impl HardPod {
    fn new(activity: Activity, seed: u64) -> Self {
        HardPod {
            activity,
            rng: Rng(seed),
            counts: HISTOGRAMS.map(|(_, les)| vec![0.0; les.len() + 1]),
            generation: 0.0,
            success: 0.0,
            served: 0,
        }
    }

    fn advance(&mut self) {
        self.served += 1;
        let rng = &mut self.rng;
        for counts in &mut self.counts {
            match self.activity {
                Activity::Idle => {}
                Activity::Sparse => {
                    if rng.below(2) == 0 {
                        let bucket = 2 + rng.below(4) as usize;
                        counts[bucket] += (1 + rng.below(3)) as f64;
                    }
                }
                Activity::Busy => {
                    for _ in 0..3 {
                        let bucket = rng.below(counts.len() as u64) as usize;
                        counts[bucket] += (1 + rng.below(4)) as f64;
                    }
                }
            }
        }
        if !matches!(self.activity, Activity::Idle) {
            self.generation += rng.below(50) as f64;
            self.success += rng.below(3) as f64;
        }
    }

    fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut w = String::new();
        let l = "engine=\"0\",model_name=\"m\"";
        writeln!(w, "vllm:num_requests_waiting{{{l}}} 0.0").unwrap();
        writeln!(w, "vllm:num_requests_running{{{l}}} 1.0").unwrap();
        writeln!(
            w,
            "vllm:generation_tokens_total{{{l}}} {:?}",
            self.generation
        )
        .unwrap();
        writeln!(
            w,
            "vllm:request_success_total{{{l},finished_reason=\"stop\"}} {:?}",
            self.success
        )
        .unwrap();
        for ((name, les), counts) in HISTOGRAMS.iter().zip(&self.counts) {
            let mut cumulative = 0.0;
            for (le, count) in les.iter().zip(counts) {
                cumulative += count;
                writeln!(w, "{name}_bucket{{{l},le=\"{le:?}\"}} {cumulative:?}").unwrap();
            }
            cumulative += counts[les.len()];
            writeln!(w, "{name}_bucket{{{l},le=\"+Inf\"}} {cumulative:?}").unwrap();
            writeln!(w, "{name}_count{{{l}}} {cumulative:?}").unwrap();
            writeln!(w, "{name}_sum{{{l}}} {:?}", cumulative * 0.5).unwrap();
        }
        w
    }
}

async fn start_hard_pod(pod: Arc<Mutex<HardPod>>) -> std::net::SocketAddr {
    serve_metrics(move || {
        let mut pod = pod.lock().unwrap();
        pod.advance();
        pod.render()
    })
    .await
}

/// The fleet's signals from exactly the samples `x - x offset D` reads at `time_ms`.
async fn ours_at_offset(prometheus: &Prometheus, time_ms: i64) -> FleetSignals {
    // Every sample of the last 30 s, by pod and timestamp.
    let selector = "{__name__=~\"vllm:.+\"}[30s]";
    let result = prometheus.query(selector, time_ms).await;
    let mut by_pod: BTreeMap<String, Scrapes> = BTreeMap::new();
    for series in result.as_array().unwrap() {
        let mut name = String::new();
        let mut labels = Vec::new();
        let mut instance = String::new();
        for (key, value) in series["metric"].as_object().unwrap() {
            let value = value.as_str().unwrap().to_string();
            match key.as_str() {
                "__name__" => name = value,
                "instance" => instance = value,
                "job" => {}
                _ => labels.push((key.clone(), value)),
            }
        }
        for point in series["values"].as_array().unwrap() {
            let ms = (point[0].as_f64().unwrap() * 1000.0).round() as i64;
            let value: f64 = point[1].as_str().unwrap().parse().unwrap();
            by_pod
                .entry(instance.clone())
                .or_default()
                .entry(ms)
                .or_default()
                .push((name.clone(), labels.clone(), value));
        }
    }
    // A window long enough to hold both chosen samples of every pod, so each pod's delta is
    // exactly newest-at-T minus newest-at-(T - D).
    let span = Duration::from_secs(60);
    let mut window = FleetWindow::new(SignalSettings {
        latency_window: span,
        preemption_window: span,
        model: None,
        stale_after: span,
    });
    let origin = time_ms - 30_000;
    for (pod, scrapes) in &by_pod {
        let newest_at = |limit: i64| {
            scrapes.range(..=limit).next_back().unwrap_or_else(|| {
                panic!(
                    "{pod}: no sample at or before {limit}; stored: {:?}",
                    scrapes.keys().collect::<Vec<_>>()
                )
            })
        };
        let (old_ms, old) = newest_at(time_ms - OFFSET_MS);
        let (new_ms, new) = newest_at(time_ms);
        assert!(old_ms < new_ms, "{pod}: one scrape in {OFFSET}");
        for (ms, samples) in [(old_ms, old), (new_ms, new)] {
            let snapshot = snapshot_of(samples);
            window.record(
                Duration::from_millis((ms - origin) as u64),
                pod,
                Some(snapshot),
            );
        }
    }
    window.compute(Duration::from_millis((time_ms - origin) as u64))
}

/// Whether each of the `pods` has a sample at or before `T - D` and a newer one at or before `T`.
async fn both_ends_stored(prometheus: &Prometheus, time_ms: i64, pods: usize) -> bool {
    let x = "vllm:num_requests_running";
    let count = |query: String| async move {
        prometheus
            .query(&query, time_ms)
            .await
            .as_array()
            .unwrap()
            .len()
    };
    count(format!("timestamp({x})")).await == pods
        && count(format!("timestamp({x}) > timestamp({x} offset {OFFSET})")).await == pods
}

/// Prometheus's value of an instant query that may be empty or NaN: `None` for both.
async fn defined(prometheus: &Prometheus, query: &str, time_ms: i64) -> Option<f64> {
    let result = prometheus.query(query, time_ms).await;
    let series = result.as_array().unwrap();
    assert!(series.len() <= 1, "{query}: {result}");
    let value: f64 = series.first()?["value"][1].as_str()?.parse().ok()?;
    (!value.is_nan()).then_some(value)
}

async fn compare_hard(prometheus: &Prometheus, time_ms: i64, pods: &[(Activity, String)]) {
    let signals = ours_at_offset(prometheus, time_ms).await;
    assert_eq!(signals.pods_healthy, pods.len());
    // The fleet, and each pod alone: empty and flat buckets, zero increase.
    let scopes = std::iter::once((None, "fleet".to_string())).chain(
        pods.iter()
            .map(|(activity, instance)| (Some(instance.clone()), format!("{activity:?} pod"))),
    );
    for (instance, what) in scopes {
        let set = match &instance {
            None => &signals.fleet,
            Some(i) => &signals.pods.iter().find(|p| &p.pod == i).unwrap().signals,
        };
        let matcher = instance
            .as_ref()
            .map(|i| format!("{{instance=\"{i}\"}}"))
            .unwrap_or_default();
        for (h, (name, _)) in HISTOGRAMS.iter().enumerate() {
            let delta = format!("{name}_bucket{matcher} - {name}_bucket{matcher} offset {OFFSET}");
            for q in [0.5, 0.95, 0.99] {
                let promql = format!("histogram_quantile({q}, sum by (le) ({delta}))");
                let theirs = defined(prometheus, &promql, time_ms).await;
                let ours = quantile_in(set, h, q);
                match (ours, theirs) {
                    (Some(o), Some(t)) => assert_close(&format!("{what}: {promql}"), o, t, 1e-9),
                    (None, None) => {}
                    _ => panic!("{what}: {promql}: ours {ours:?}, prometheus {theirs:?}"),
                }
            }
        }
        for (counter, ours) in [
            (
                "vllm:generation_tokens_total",
                set.generation_tokens_per_second,
            ),
            ("vllm:request_success_total", set.requests_per_second),
        ] {
            let c = format!("{counter}{matcher}");
            let promql = format!(
                "sum(({c} - {c} offset {OFFSET}) / (timestamp({c}) - timestamp({c} offset {OFFSET})))"
            );
            let theirs = defined(prometheus, &promql, time_ms).await;
            let ours = ours.unwrap_or_else(|| panic!("{what}: no {counter} rate"));
            // `timestamp()` is Unix seconds as a float: near 1.8e9 one step of an f64 is about
            // 2.4e-7 s, so Prometheus's 6 s denominator carries a relative error up to ~1e-7.
            assert_close(&format!("{what}: {promql}"), ours, theirs.unwrap(), 1e-6);
        }
    }
}

async fn run_hard_cases(prometheus_bin: PathBuf) {
    let activities = [Activity::Sparse, Activity::Idle, Activity::Busy];
    let mut pods = Vec::new();
    let mut handles = Vec::new();
    let mut addrs = Vec::new();
    for (i, activity) in activities.into_iter().enumerate() {
        let pod = Arc::new(Mutex::new(HardPod::new(
            activity,
            0x51ed_2701 + i as u64 * 7_919,
        )));
        let addr = start_hard_pod(pod.clone()).await;
        handles.push(pod);
        addrs.push(addr);
        pods.push((activity, addr.to_string()));
    }
    let (prometheus, mut child, _dir) = start_prometheus(&prometheus_bin, &addrs).await;
    let served = || {
        handles
            .iter()
            .map(|h| h.lock().unwrap().served)
            .min()
            .unwrap()
    };
    // Several evaluation instants, about two scrapes apart, so the sparse pod's window is
    // sometimes flat and sometimes not. Each waits for what Prometheus stored, not for a time:
    // every pod needs a sample at or before `T - 6 s` and a newer one at or before `T`.
    let mut compared = 0;
    let mut previous = i64::MIN;
    for k in 0..5 {
        while served() < 10 + 2 * k {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let what = format!("instant {k}: a sample of every pod 6 s apart");
        let time_ms = settle(&prometheus, &what, async |t| {
            t >= previous.saturating_add(2_000)
                && both_ends_stored(&prometheus, t, pods.len()).await
        })
        .await;
        compare_hard(&prometheus, time_ms, &pods).await;
        previous = time_ms;
        compared += 1;
    }
    eprintln!("{compared} instants: quantiles and rates match Prometheus on the hard cases");
    child.kill().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_flat_and_idle_buckets_across_pods_match_real_prometheus() {
    let Some(prometheus_bin) = prometheus_or_skip("the Prometheus hard-case oracle test") else {
        return;
    };
    tokio::time::timeout(Duration::from_secs(75), run_hard_cases(prometheus_bin))
        .await
        .expect("prometheus hard-case oracle test timed out after 75 s");
}
