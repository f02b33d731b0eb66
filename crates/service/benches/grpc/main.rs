//! Service benchmarks on loopback, against the real server started in-process:
//!
//! 1. `GetMetrics` latency (p50/p99/max) under an open-loop rate (default 2,000 RPC/s, calls
//!    evenly spaced) spread round-robin over many ScaledObjects (default 500), all on one
//!    HTTP/2 connection like KEDA's pooled client, while every ScaledObject's loop keeps
//!    scraping its own pod. Timed from each call's scheduled start (a late load generator
//!    counts against the scaler) and, beside it, from the client's send.
//! 2. Reaction time: from a queue step in a pod's `/metrics` body to a changed replica target
//!    published by the loop (GetMetrics answers from that state), over trials started at
//!    random phases of the scrape cycle.
//!
//! `cargo bench --bench grpc -- [--rate 2000] [--seconds 10] [--scaledobjects 500]
//!  [--trials 20] [--interval 2] [--tls] [--shared-runtime]`
//!
//! `--tls`: mutual TLS between client and scaler, with certificates from a throwaway CA.
//! `--shared-runtime`: the scrape loops on the RPC runtime (the design before `serve` gave
//! them their own), for comparison.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use vllm_keda_service::proto::external_scaler_client::ExternalScalerClient;
use vllm_keda_service::proto::{GetMetricsRequest, ScaledObjectRef};
use vllm_keda_service::serve::{self, ServeOptions, Server};
use vllm_keda_service::tls::TlsFiles;

mod chart;
use chart::write_cdf_svg;

const IDLE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../data/fixtures/vllm-v1-idle.prom"
));

struct Args {
    rate: f64,
    seconds: f64,
    scaledobjects: usize,
    trials: usize,
    interval: f64,
    /// Mutual TLS between KEDA and the scaler (as `deploy/examples/scaler-tls`).
    tls: bool,
    /// The scrape loops on the RPC runtime instead of their own (the earlier design).
    shared_runtime: bool,
}

fn args() -> Args {
    let argv: Vec<String> = std::env::args().collect();
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary without it, and
    // then it is a smoke run (a few ScaledObjects, one short RPC burst, two reaction trials) that
    // only shows the harness still works.
    let bench = argv.iter().any(|a| a == "--bench");
    let mut a = Args {
        rate: if bench { 2000.0 } else { 200.0 },
        seconds: if bench { 10.0 } else { 1.0 },
        scaledobjects: if bench { 500 } else { 5 },
        trials: if bench { 20 } else { 2 },
        interval: 2.0,
        tls: false,
        shared_runtime: false,
    };
    let mut i = 1;
    while i < argv.len() {
        let value = argv.get(i + 1).and_then(|v| v.parse::<f64>().ok());
        match (argv[i].as_str(), value) {
            ("--rate", Some(v)) => a.rate = v,
            ("--seconds", Some(v)) => a.seconds = v,
            ("--scaledobjects", Some(v)) => a.scaledobjects = v as usize,
            ("--trials", Some(v)) => a.trials = v as usize,
            ("--interval", Some(v)) => a.interval = v,
            ("--tls", _) => {
                a.tls = true;
                i += 1;
                continue;
            }
            ("--shared-runtime", _) => {
                a.shared_runtime = true;
                i += 1;
                continue;
            }
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

/// A test CA's server and client certificates for `--tls`, on disk for the server's flags.
struct Pki {
    dir: tempfile::TempDir,
    ca: String,
    client: (String, String),
}

impl Pki {
    fn new() -> Self {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa,
            KeyPair,
        };
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let issue = |names: &[&str], usage| {
            let key = KeyPair::generate().unwrap();
            let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
            let mut params = CertificateParams::new(names).unwrap();
            params.extended_key_usages = vec![usage];
            let cert = params.signed_by(&key, &ca).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = issue(&["localhost"], ExtendedKeyUsagePurpose::ServerAuth);
        let client = issue(&["keda"], ExtendedKeyUsagePurpose::ClientAuth);
        let dir = tempfile::tempdir().unwrap();
        for (name, pem) in [
            ("tls.crt", &server_cert),
            ("tls.key", &server_key),
            ("ca.crt", &ca.pem()),
        ] {
            std::fs::write(dir.path().join(name), pem).unwrap();
        }
        Self {
            dir,
            ca: ca.pem(),
            client,
        }
    }

    fn files(&self) -> TlsFiles {
        TlsFiles {
            cert: self.dir.path().join("tls.crt"),
            key: self.dir.path().join("tls.key"),
            client_ca: Some(self.dir.path().join("ca.crt")),
        }
    }
}

/// How the scaler runs: its loops' runtime and its TLS files.
struct Setup {
    loops: Option<tokio::runtime::Handle>,
    pki: Option<Pki>,
}

async fn start_server(setup: &Setup) -> Server {
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut options = ServeOptions::loopback();
    options.control.loop_runtime = setup.loops.clone();
    options.tls = setup.pki.as_ref().map(Pki::files);
    serve::start(grpc, http, options).await.unwrap()
}

/// KEDA's connection to the scaler: one HTTP/2 connection, over mutual TLS with `--tls`.
async fn connect(setup: &Setup, server: &Server) -> ExternalScalerClient<Channel> {
    let scheme = if setup.pki.is_some() { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", server.grpc_addr()))
        .unwrap()
        .tcp_nodelay(true);
    if let Some(pki) = &setup.pki {
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&pki.ca))
            .identity(Identity::from_pem(&pki.client.0, &pki.client.1))
            .domain_name("localhost");
        endpoint = endpoint.tls_config(tls).unwrap();
    }
    ExternalScalerClient::new(endpoint.connect().await.unwrap())
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

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64
}

async fn latency(a: &Args, setup: &Setup, pods: &Pods, base: &str, server: &Server) {
    let client = connect(setup, server).await;
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

    // Each call reports (from its scheduled start, from the client's send) in microseconds.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Result<(u64, u64), String>>();
    let total = (a.rate * a.seconds) as u64;
    let refs = Arc::new(refs);
    // Open loop at exact times: a pacing thread starts call `i` at `start + i / rate` (sleeping,
    // then spinning the last 100 us), so the load is evenly spaced rather than released in
    // timer-tick bursts; each call is timed from its scheduled start, so a late start counts.
    let handle = tokio::runtime::Handle::current();
    let rate = a.rate;
    let pacer = std::thread::spawn(move || {
        let start = Instant::now();
        let mut next_report = 1u64;
        for sent in 0..total {
            let due = start + Duration::from_secs_f64(sent as f64 / rate);
            loop {
                let now = Instant::now();
                if now >= due {
                    break;
                }
                let left = due - now;
                if left > Duration::from_micros(150) {
                    std::thread::sleep(left - Duration::from_micros(100));
                } else {
                    std::hint::spin_loop();
                }
            }
            let mut c = client.clone();
            let request = refs[(sent as usize) % refs.len()].clone();
            let tx = tx.clone();
            handle.spawn(async move {
                let send = Instant::now();
                let result = c.get_metrics(request).await;
                let micros = (
                    due.elapsed().as_micros() as u64,
                    send.elapsed().as_micros() as u64,
                );
                let _ = tx.send(result.map(|_| micros).map_err(|e| e.to_string()));
            });
            if start.elapsed().as_secs() >= next_report {
                eprintln!("  {next_report} s: {} sent", sent + 1);
                next_report += 1;
            }
        }
        (total, start.elapsed().as_secs_f64())
    });
    let (sent, sending) = tokio::task::spawn_blocking(move || pacer.join().unwrap())
        .await
        .unwrap();
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let mut rpc = h.clone();
    let mut samples_ms = Vec::with_capacity(sent as usize);
    let mut errors = 0u64;
    let mut first_error = None;
    while let Some(r) = rx.recv().await {
        match r {
            Ok((micros, rpc_micros)) => {
                h.record(micros.max(1)).unwrap();
                rpc.record(rpc_micros.max(1)).unwrap();
                samples_ms.push(micros as f64 / 1000.0);
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    println!(
        "GetMetrics latency: {} ScaledObjects, {:.0} RPC/s achieved ({} calls in {:.2} s), one HTTP/2 connection{}",
        a.scaledobjects,
        sent as f64 / sending,
        sent,
        sending,
        if a.tls { " over mutual TLS" } else { "" }
    );
    for (label, h) in [
        ("from the scheduled start", &h),
        ("from the client's send  ", &rpc),
    ] {
        println!(
            "  {label}: p50 {:.0} us  p90 {:.0} us  p99 {:.0} us  p99.9 {:.0} us  max {:.0} us",
            us(h, 0.5),
            us(h, 0.9),
            us(h, 0.99),
            us(h, 0.999),
            h.max() as f64,
        );
    }
    println!("  errors {errors}");
    if let Some(e) = first_error {
        println!("  first error: {e}");
    }
    let text = server.loops().metrics().encode();
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
        Some((1.0, "p99 target 1 ms")),
    );
    println!("  chart: {}", path.display());
}

async fn reaction(a: &Args, setup: &Setup, pods: &Pods, base: &str, server: &Server) {
    let mut client = connect(setup, server).await;
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
        let so = server.loops().find("bench", &r.name).unwrap();
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
        Some((a.interval * 1000.0 + 100.0, "bound: interval + 100 ms")),
    );
    println!("  chart: {}", path.display());
}

fn main() {
    let a = args();
    // Three runtimes on their own threads, like three processes: the scaler (every core), the
    // vLLM pods (one thread) and KEDA (one thread), so the client's and the pods' work does not
    // queue behind the scaler's tasks or the other way round.
    let scaler_rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name("scaler")
        .enable_all()
        .build()
        .unwrap();
    let pods_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("pods")
        .enable_all()
        .build()
        .unwrap();
    let keda_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let loops_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("scaler-loops")
        .enable_all()
        .build()
        .unwrap();
    let setup = Setup {
        loops: (!a.shared_runtime).then(|| loops_rt.handle().clone()),
        pki: a.tls.then(Pki::new),
    };
    eprintln!(
        "scrape loops on {}; gRPC {}",
        if a.shared_runtime {
            "the RPC runtime (--shared-runtime)"
        } else {
            "their own runtime, as serve runs them"
        },
        if a.tls {
            "over mutual TLS"
        } else {
            "plaintext"
        }
    );
    let pods = Pods::default();
    let base = pods_rt.block_on(start_pods(pods.clone()));

    let server = scaler_rt.block_on(start_server(&setup));
    keda_rt.block_on(latency(&a, &setup, &pods, &base, &server));
    scaler_rt.block_on(server.shutdown()).unwrap();

    let server = scaler_rt.block_on(start_server(&setup));
    keda_rt.block_on(reaction(&a, &setup, &pods, &base, &server));
    scaler_rt.block_on(server.shutdown()).unwrap();
}
