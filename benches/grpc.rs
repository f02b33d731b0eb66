//! Service benchmarks on loopback, against the real server started in-process:
//!
//! 1. `GetMetrics` latency (p50/p99/max) under an open-loop rate (default 2,000 RPC/s) spread
//!    round-robin over many ScaledObjects (default 500), all on one HTTP/2 connection like
//!    KEDA's pooled client, while every ScaledObject's loop keeps scraping its own pod.
//! 2. Reaction time: from a queue step in a pod's `/metrics` body to a changed replica target
//!    published by the loop (GetMetrics answers from that state), over trials started at
//!    random phases of the scrape cycle.
//!
//! `cargo bench --bench grpc -- [--rate 2000] [--seconds 10] [--scaledobjects 500]
//!  [--trials 20] [--interval 2]`

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::net::TcpListener;
use tokio::time::Instant;
use vllm_keda_scaler::proto::external_scaler_client::ExternalScalerClient;
use vllm_keda_scaler::proto::{GetMetricsRequest, ScaledObjectRef};
use vllm_keda_scaler::serve::{self, ServeOptions, Server};

const IDLE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/vllm-v1-idle.prom"
));

struct Args {
    rate: f64,
    seconds: f64,
    scaledobjects: usize,
    trials: usize,
    interval: f64,
}

fn args() -> Args {
    let mut a = Args {
        rate: 2000.0,
        seconds: 10.0,
        scaledobjects: 500,
        trials: 20,
        interval: 2.0,
    };
    let argv: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < argv.len() {
        let value = argv.get(i + 1).and_then(|v| v.parse::<f64>().ok());
        match (argv[i].as_str(), value) {
            ("--rate", Some(v)) => a.rate = v,
            ("--seconds", Some(v)) => a.seconds = v,
            ("--scaledobjects", Some(v)) => a.scaledobjects = v as usize,
            ("--trials", Some(v)) => a.trials = v as usize,
            ("--interval", Some(v)) => a.interval = v,
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    a
}

/// The idle fixture with `vllm:num_requests_waiting` set to `waiting`.
fn body_with_waiting(waiting: u32) -> String {
    IDLE.lines()
        .map(|line| {
            if line.starts_with("vllm:num_requests_waiting{") {
                let (series, _) = line.rsplit_once(' ').unwrap_or((line, ""));
                format!("{series} {waiting}.0\n")
            } else {
                format!("{line}\n")
            }
        })
        .collect()
}

/// Pods: `/metrics/{id}` serves that pod's current body.
#[derive(Clone, Default)]
struct Pods(Arc<RwLock<HashMap<u32, Arc<String>>>>);

impl Pods {
    fn set(&self, id: u32, body: String) {
        self.0.write().unwrap().insert(id, Arc::new(body));
    }
}

async fn start_pods(pods: Pods) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/metrics/{id}",
        axum::routing::get(move |axum::extract::Path(id): axum::extract::Path<u32>| {
            let pods = pods.clone();
            async move {
                let body = pods.0.read().unwrap().get(&id).cloned();
                body.map(|b| b.as_str().to_owned()).unwrap_or_default()
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

async fn start_server() -> Server {
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    serve::start(grpc, http, ServeOptions::default())
        .await
        .unwrap()
}

fn so_ref(name: String, metadata: &[(&str, String)]) -> ScaledObjectRef {
    ScaledObjectRef {
        name,
        namespace: "bench".into(),
        scaler_metadata: metadata
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
    }
}

/// The upper bound of the bucket holding quantile `q` of the scaler's own RPC histogram.
fn server_quantile(text: &str, method: &str, q: f64) -> String {
    let method_label = format!("method=\"{method}\"");
    let mut buckets: Vec<(String, f64)> = Vec::new();
    for line in text.lines() {
        if !line.starts_with("vllm_keda_scaler_rpc_duration_seconds_bucket{")
            || !line.contains(&method_label)
        {
            continue;
        }
        let Some((_, rest)) = line.split_once("le=\"") else {
            continue;
        };
        let Some((le, _)) = rest.split_once('"') else {
            continue;
        };
        let count: f64 = line
            .rsplit_once(' ')
            .and_then(|(_, c)| c.parse().ok())
            .unwrap_or(0.0);
        buckets.push((le.to_owned(), count));
    }
    let total = buckets.last().map_or(0.0, |b| b.1);
    for (le, count) in &buckets {
        if *count >= q * total {
            return match le.parse::<f64>() {
                Ok(v) if v.is_finite() => format!("{:.0} us", v * 1e6),
                _ => le.clone(),
            };
        }
    }
    "n/a".into()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

/// Writes an SVG chart of the empirical CDF of `samples_ms` (x in ms, log scale when `log_x`),
/// with an optional vertical bound line, and returns its path.
fn write_cdf_svg(
    name: &str,
    title: &str,
    samples_ms: &mut [f64],
    log_x: bool,
    bound_ms: Option<f64>,
) -> std::path::PathBuf {
    use std::fmt::Write as _;
    samples_ms.sort_by(f64::total_cmp);
    let (w, h, left, right, top, bottom) = (720.0, 400.0, 70.0, 20.0, 40.0, 50.0);
    let xs = |v: f64| if log_x { v.max(1e-3).log10() } else { v };
    let lo = if log_x {
        xs(samples_ms.first().copied().unwrap_or(0.01)).floor()
    } else {
        0.0
    };
    let mut hi_raw = samples_ms.last().copied().unwrap_or(1.0);
    if let Some(b) = bound_ms {
        hi_raw = hi_raw.max(b);
    }
    let hi = if log_x {
        xs(hi_raw).ceil()
    } else {
        hi_raw * 1.05
    };
    let px = |v: f64| left + (xs(v) - lo) / (hi - lo).max(1e-9) * (w - left - right);
    let py = |q: f64| top + (1.0 - q) * (h - top - bottom);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="14">{title}</text>
"#,
        w / 2.0
    );
    for q in [0.0, 0.25, 0.5, 0.75, 0.9, 1.0] {
        let y = py(q);
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" x2="{}" y1="{y}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">p{}</text>"##,
            w - right,
            left - 6.0,
            y + 4.0,
            q * 100.0
        );
    }
    let ticks: Vec<f64> = if log_x {
        (lo as i32..=hi as i32).map(|e| 10f64.powi(e)).collect()
    } else {
        let raw = hi / 5.0;
        let magnitude = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .into_iter()
            .map(|m| m * magnitude)
            .find(|s| *s >= raw)
            .unwrap_or(raw);
        (0..)
            .map(|i| f64::from(i) * step)
            .take_while(|t| *t <= hi)
            .collect()
    };
    for t in ticks {
        let x = px(t);
        let label = if t >= 1.0 {
            format!("{t:.0} ms")
        } else {
            format!("{t} ms")
        };
        let _ = writeln!(
            svg,
            r##"<line x1="{x}" x2="{x}" y1="{top}" y2="{}" stroke="#eee"/><text x="{x}" y="{}" text-anchor="middle">{label}</text>"##,
            h - bottom,
            h - bottom + 16.0
        );
    }
    // At most about 600 points: 400 spread over all ranks plus every rank of the top 1 % (up
    // to 200), so the tail keeps its detail.
    let len = samples_ms.len();
    let n = len.max(1) as f64;
    let mut ranks: Vec<usize> = (0..400).map(|i| i * len / 400).collect();
    ranks.extend(len.saturating_sub((len / 100).min(200))..len);
    ranks.sort_unstable();
    ranks.dedup();
    // A staircase: the CDF steps up by 1/n at each sample.
    let points: Vec<String> = ranks
        .into_iter()
        .filter(|&i| i < len)
        .map(|i| {
            let x = px(samples_ms[i]);
            format!(
                "{x:.1},{:.1} {x:.1},{:.1}",
                py(i as f64 / n),
                py((i + 1) as f64 / n)
            )
        })
        .collect();
    let _ = writeln!(
        svg,
        r##"<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{}"/>"##,
        points.join(" ")
    );
    if let Some(b) = bound_ms {
        let x = px(b);
        let _ = writeln!(
            svg,
            r##"<line x1="{x}" x2="{x}" y1="{top}" y2="{}" stroke="#d62728" stroke-dasharray="4 3"/><text x="{}" y="{}" fill="#d62728" text-anchor="end">bound {b:.0} ms</text>"##,
            h - bottom,
            x - 4.0,
            top + 14.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">milliseconds ({} samples)</text>
</svg>"#,
        w / 2.0,
        h - 10.0,
        samples_ms.len()
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-service");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(name);
    if let Err(e) = std::fs::write(&path, svg) {
        eprintln!("cannot write {}: {e}", path.display());
    }
    path
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64
}

async fn latency(a: &Args, pods: &Pods, base: &str, server: &Server) {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc_addr()))
        .unwrap()
        .tcp_nodelay(true)
        .connect()
        .await
        .unwrap();
    let client = ExternalScalerClient::new(channel);
    let interval = format!("{}", a.interval);
    let refs: Vec<GetMetricsRequest> = (0..a.scaledobjects)
        .map(|i| {
            pods.set(i as u32, IDLE.to_owned());
            GetMetricsRequest {
                scaled_object_ref: Some(so_ref(
                    format!("so-{i}"),
                    &[
                        ("endpoints", format!("{base}/metrics/{i}")),
                        ("scrapeIntervalSeconds", interval.clone()),
                    ],
                )),
                metric_name: "vllm-desired-replicas".into(),
            }
        })
        .collect();
    // KEDA's first call per ScaledObject: the spec (starts the loops), then one GetMetrics each.
    for r in &refs {
        let mut c = client.clone();
        c.get_metric_spec(r.scaled_object_ref.clone().unwrap())
            .await
            .unwrap();
    }
    for r in &refs {
        let mut c = client.clone();
        c.get_metrics(r.clone()).await.unwrap();
    }
    eprintln!(
        "latency: {} ScaledObjects started and answered once; measuring {} s at {} RPC/s \
         (load average {})",
        a.scaledobjects,
        a.seconds,
        a.rate,
        load_average()
    );

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Result<u64, String>>();
    let start = Instant::now();
    let total = (a.rate * a.seconds) as u64;
    let mut sent = 0u64;
    let mut next_report = 1.0;
    let refs = Arc::new(refs);
    while sent < total {
        let elapsed = start.elapsed().as_secs_f64();
        let due = ((elapsed * a.rate) as u64).min(total);
        while sent < due {
            let mut c = client.clone();
            let request = refs[(sent as usize) % refs.len()].clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let t0 = Instant::now();
                let result = c.get_metrics(request).await;
                let micros = t0.elapsed().as_micros() as u64;
                let _ = tx.send(result.map(|_| micros).map_err(|e| e.to_string()));
            });
            sent += 1;
        }
        if elapsed >= next_report {
            eprintln!("  {elapsed:.0} s: {sent} sent");
            next_report += 1.0;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let sending = start.elapsed().as_secs_f64();
    drop(tx);
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let mut samples_ms = Vec::with_capacity(sent as usize);
    let mut errors = 0u64;
    let mut first_error = None;
    while let Some(r) = rx.recv().await {
        match r {
            Ok(micros) => {
                h.record(micros.max(1)).unwrap();
                samples_ms.push(micros as f64 / 1000.0);
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    println!(
        "GetMetrics latency: {} ScaledObjects, {:.0} RPC/s achieved ({} calls in {:.2} s), one HTTP/2 connection",
        a.scaledobjects,
        sent as f64 / sending,
        sent,
        sending
    );
    println!(
        "  p50 {:.0} us  p90 {:.0} us  p99 {:.0} us  p99.9 {:.0} us  max {:.0} us  errors {}",
        us(&h, 0.5),
        us(&h, 0.9),
        us(&h, 0.99),
        us(&h, 0.999),
        h.max() as f64,
        errors
    );
    if let Some(e) = first_error {
        println!("  first error: {e}");
    }
    let text = server.controller().metrics().encode();
    let (p50, p99) = (
        server_quantile(&text, "GetMetrics", 0.5),
        server_quantile(&text, "GetMetrics", 0.99),
    );
    println!("  server side (handler time, histogram bucket bounds): p50 <= {p50}, p99 <= {p99}");
    println!("  load average (1 min) at the end: {}", load_average());
    let title = format!(
        "GetMetrics latency, {} ScaledObjects, {:.0} RPC/s (CDF)",
        a.scaledobjects, a.rate
    );
    let path = write_cdf_svg(
        "getmetrics-latency.svg",
        &title,
        &mut samples_ms,
        true,
        Some(1.0),
    );
    println!("  chart: {}", path.display());
}

async fn reaction(a: &Args, pods: &Pods, base: &str, server: &Server) {
    let mut client = ExternalScalerClient::connect(format!("http://{}", server.grpc_addr()))
        .await
        .unwrap();
    let interval = format!("{}", a.interval);
    let mut trials = Vec::new();
    for i in 0..a.trials {
        let id = 100_000 + i as u32;
        pods.set(id, body_with_waiting(0));
        let r = so_ref(
            format!("step-{i}"),
            &[
                ("endpoints", format!("{base}/metrics/{id}")),
                ("scrapeIntervalSeconds", interval.clone()),
                ("queueDepthPerReplica", "5".into()),
                ("scaleUpStabilizationSeconds", "0".into()),
            ],
        );
        client.get_metric_spec(r.clone()).await.unwrap();
        trials.push((id, r));
    }
    // Let every loop see the idle pod a few times.
    tokio::time::sleep(Duration::from_secs_f64(a.interval * 2.5)).await;
    eprintln!(
        "reaction: {} trials, scrape interval {} s",
        a.trials, a.interval
    );
    let mut tasks = tokio::task::JoinSet::new();
    for (n, (id, r)) in trials.into_iter().enumerate() {
        let so = server.controller().find("bench", &r.name).unwrap();
        let pods = pods.clone();
        // Spread the steps over one interval so they land at every phase of the cycle.
        let offset = Duration::from_secs_f64(a.interval * (n as f64 + 0.5) / a.trials as f64);
        let interval = a.interval;
        tasks.spawn(async move {
            tokio::time::sleep(offset).await;
            let mut rx = so.subscribe();
            let before = so.latest().decision.as_ref().map(|d| d.target_replicas);
            let step = Instant::now();
            pods.set(id, body_with_waiting(50));
            let changed = tokio::time::timeout(
                Duration::from_secs_f64(interval * 3.0 + 5.0),
                rx.wait_for(|s| s.decision.as_ref().map(|d| d.target_replicas) != before),
            )
            .await;
            match changed {
                Ok(Ok(_)) => Some(step.elapsed()),
                _ => None,
            }
        });
    }
    let mut h = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).unwrap();
    let mut samples_ms = Vec::new();
    let mut missed = 0;
    while let Some(r) = tasks.join_next().await {
        match r.ok().flatten() {
            Some(d) => {
                h.record((d.as_micros() as u64).max(1)).unwrap();
                samples_ms.push(d.as_secs_f64() * 1000.0);
            }
            None => missed += 1,
        }
    }
    // GetMetrics sees the same state: check one answer after the steps.
    let answer = client
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(so_ref(
                "step-0".into(),
                &[
                    ("endpoints", format!("{base}/metrics/100000")),
                    ("scrapeIntervalSeconds", interval.clone()),
                    ("queueDepthPerReplica", "5".into()),
                    ("scaleUpStabilizationSeconds", "0".into()),
                ],
            )),
            metric_name: "vllm-desired-replicas".into(),
        })
        .await
        .unwrap()
        .into_inner();
    println!(
        "Reaction time, queue step (0 -> 50 waiting, N = 5) to a changed target: {} trials, scrape interval {} s",
        h.len(),
        a.interval
    );
    println!(
        "  min {:.0} ms  p50 {:.0} ms  p90 {:.0} ms  max {:.0} ms  (bound: interval + 100 ms = {:.0} ms)  missed {}",
        h.min() as f64 / 1000.0,
        us(&h, 0.5) / 1000.0,
        us(&h, 0.9) / 1000.0,
        h.max() as f64 / 1000.0,
        a.interval * 1000.0 + 100.0,
        missed
    );
    println!(
        "  GetMetrics after the step: {}",
        answer.metric_values[0].metric_value_float
    );
    let title = format!(
        "Queue step to changed target, scrape interval {} s (CDF)",
        a.interval
    );
    let path = write_cdf_svg(
        "reaction-time.svg",
        &title,
        &mut samples_ms,
        false,
        Some(a.interval * 1000.0 + 100.0),
    );
    println!("  chart: {}", path.display());
}

fn main() {
    let a = args();
    // Three runtimes on their own threads, like three processes: the scaler (every core), the
    // vLLM pods (one thread) and KEDA (one thread), so the client's and the pods' work does not
    // queue behind the scaler's tasks or the other way round.
    let scaler_rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let pods_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let keda_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pods = Pods::default();
    let base = pods_rt.block_on(start_pods(pods.clone()));

    let server = scaler_rt.block_on(start_server());
    keda_rt.block_on(latency(&a, &pods, &base, &server));
    scaler_rt.block_on(server.shutdown()).unwrap();

    let server = scaler_rt.block_on(start_server());
    keda_rt.block_on(reaction(&a, &pods, &base, &server));
    scaler_rt.block_on(server.shutdown()).unwrap();
}
