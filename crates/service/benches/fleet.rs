//! One `serve` process against a large emulated fleet, run by hand (not a timed test):
//!
//! 1. `--pods` static `/metrics` targets on 127.0.0.1 (each serves the loaded vLLM fixture,
//!    about 53 KB), grouped into `--scaledobjects` ScaledObjects scraped every `--interval`
//!    seconds, the release binary started as a child (`--bin`, default
//!    `target/release/vllm-keda-scaler`) with loopback allowed.
//! 2. Steady phase: open-loop `GetMetrics` at `--rate` calls per second round-robin over every
//!    ScaledObject for `--seconds`; reports the latency (p50/p99/max), the scaler's CPU
//!    (utime+stime from /proc) in cores, its RSS (now and peak), completed cycles against the
//!    cycles the interval allows (missed cycles), and each ScaledObject's mean scrape time.
//! 3. Hostile phase (`--hostile`): the same again with three more tenants: one whose pod
//!    serves a body just under the body cap, one serving 160,000 distinct `finished_reason`
//!    values, one whose pod accepts and never answers. The other tenants' answers must be the
//!    same as in the steady phase, and their scrape times are reported beside the steady ones.
//!
//! 4. Soak (`--soak-minutes 30`): instead of 2 and 3, waves of `--pods` ScaledObjects (one
//!    target each) created and then left idle until their loops stop, for that long; RSS and
//!    open descriptors after every wave, their growth since the end of the warm-up
//!    (`--warmup-waves`, default 10, set before a run), and at the end the trend of the
//!    after-wave RSS over the waves after the warm-up (second half against first half, and
//!    the slope). With `--soak-plot FILE.svg` every wave's readings are also written to
//!    FILE.tsv and drawn in FILE.svg (RSS busy and after each wave, the warm-up's end, the
//!    manifest's 256 MiB memory request).
//! 5. Memory (`--memory`): instead of 2 and 3, RSS at start, after a burst of the largest
//!    bodies the default limits accept, and after `--pods` one-target ScaledObjects are created
//!    and removed; each "after" reading is taken once the scaler's check for stopped loops
//!    has given the freed memory back (`serve::RELEASE_CHECK`). The scaler inherits the
//!    environment, so glibc's tunables (`MALLOC_ARENA_MAX`) can be compared the same way.
//!
//! The pods are served on their own two-thread runtime; `GetMetrics` latency is reported both
//! at the client (open loop, from each call's scheduled instant) and from the scaler's own
//! handling-time histogram (bucket bounds), since on a shared 2-core machine the client and
//! the 5,000 pods compete with the scaler for the same cores.
//!
//! `--cpu-limit CORES` (Linux, root): the scaler runs in a cgroup of its own with a CFS quota
//! of CORES per 100 ms period, which is what a Kubernetes `limits.cpu` sets, and every phase
//! reports the periods it was throttled in (cgroup v2 when mounted with the `cpu` controller,
//! else v1). A scaler that needs more than its limit shows it as throttling and missed cycles,
//! whatever the host's speed.
//!
//! `ulimit -n` must exceed twice `--pods` (listeners and accepted connections live here).
//!
//! `cargo build --release -p vllm-keda-scaler && cargo bench -p vllm-keda-service --bench fleet
//!  -- [--pods 5000] [--scaledobjects 500] [--seconds 60] [--rate 1000] [--interval 2]
//!  [--hostile] [--soak-minutes 30 [--warmup-waves 10] [--soak-plot FILE.svg]] [--memory]
//!  [--gzip] [--close-connections] [--cpu-limit CORES] [--bin PATH]`
//!
//! `--gzip`: the pods answer gzip-compressed when the request accepts it, as vLLM's `/metrics`
//! does (the loaded fixture is about 5 KB compressed). `--close-connections`: the scaler is
//! started with `--scrape-close-connections` (a connection per scrape, closed by the pod).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use axum::response::IntoResponse;
use hdrhistogram::Histogram;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tonic::transport::Channel;
use vllm_keda_service::proto::external_scaler_client::ExternalScalerClient;
use vllm_keda_service::proto::{GetMetricsRequest, ScaledObjectRef};
use vllm_keda_service::serve::RELEASE_CHECK;

const LOADED: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../data/fixtures/vllm-v1-loaded.prom"
));

struct Args {
    pods: usize,
    scaledobjects: usize,
    seconds: f64,
    rate: f64,
    interval: f64,
    hostile: bool,
    bin: String,
    /// Soak mode: waves of `--pods` one-target ScaledObjects created and left to stop, for
    /// this many minutes.
    soak_minutes: f64,
    /// Soak waves counted as warm-up (set before a run, not read off it).
    warmup_waves: usize,
    /// Soak mode: write every wave's readings to this SVG (and a TSV beside it).
    soak_plot: Option<std::path::PathBuf>,
    /// Memory mode: a burst of large bodies, then many ScaledObjects created and removed.
    memory: bool,
    /// The fleet's pods answer gzip-compressed when the request accepts it, as vLLM does.
    gzip: bool,
    /// Start the scaler with `--scrape-close-connections` (a connection per scrape).
    close_connections: bool,
    /// Run the scaler under a CFS quota of this many cores (0: no limit).
    cpu_limit: f64,
}

fn args() -> Args {
    let mut a = Args {
        pods: 5000,
        scaledobjects: 500,
        seconds: 60.0,
        rate: 1000.0,
        interval: 2.0,
        hostile: false,
        soak_minutes: 0.0,
        warmup_waves: 10,
        soak_plot: None,
        memory: false,
        gzip: false,
        close_connections: false,
        cpu_limit: 0.0,
        bin: concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../target/release/vllm-keda-scaler"
        )
        .into(),
    };
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        a.bin = format!("{dir}/release/vllm-keda-scaler");
    }
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().expect("flag value");
        match flag.as_str() {
            "--pods" => a.pods = value().parse().unwrap(),
            "--scaledobjects" => a.scaledobjects = value().parse().unwrap(),
            "--seconds" => a.seconds = value().parse().unwrap(),
            "--rate" => a.rate = value().parse().unwrap(),
            "--interval" => a.interval = value().parse().unwrap(),
            "--hostile" => a.hostile = true,
            "--memory" => a.memory = true,
            "--gzip" => a.gzip = true,
            "--close-connections" => a.close_connections = true,
            "--soak-minutes" => a.soak_minutes = value().parse().unwrap(),
            "--warmup-waves" => a.warmup_waves = value().parse().unwrap(),
            "--soak-plot" => a.soak_plot = Some(value().into()),
            "--cpu-limit" => a.cpu_limit = value().parse().unwrap(),
            "--bin" => a.bin = value(),
            "--bench" => {}
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// The pods' own runtime, apart from the one sending `GetMetrics`, so the client's timing
/// does not queue behind the 5,000 targets' serving.
fn pods_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("pods")
            .enable_all()
            .build()
            .unwrap()
    })
}

/// A loopback listener for a pod, served on [`pods_runtime`].
fn pod_listener() -> (std::net::TcpListener, SocketAddr) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// A target answering every request with `body` (plain HTTP/1.1, keep-alive).
fn static_target(body: &'static str) -> SocketAddr {
    let (listener, addr) = pod_listener();
    let app = axum::Router::new().fallback(move || async move { body });
    pods_runtime().spawn(async move {
        let listener = TcpListener::from_std(listener).unwrap();
        axum::serve(listener, app).await
    });
    addr
}

/// A target answering `gzipped` (the gzip encoding of `body`, with `Content-Encoding: gzip`)
/// when the request's `Accept-Encoding` names gzip, else `body`: what vLLM's `/metrics` does.
fn gzip_target(body: &'static str, gzipped: &'static [u8]) -> SocketAddr {
    let (listener, addr) = pod_listener();
    let app = axum::Router::new().fallback(move |headers: http::HeaderMap| async move {
        let accepts = headers
            .get(http::header::ACCEPT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("gzip"));
        if accepts {
            ([(http::header::CONTENT_ENCODING, "gzip")], gzipped).into_response()
        } else {
            body.into_response()
        }
    });
    pods_runtime().spawn(async move {
        let listener = TcpListener::from_std(listener).unwrap();
        axum::serve(listener, app).await
    });
    addr
}

fn gzip(body: &str) -> &'static [u8] {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(body.as_bytes()).unwrap();
    Box::leak(encoder.finish().unwrap().into_boxed_slice())
}

/// A target that accepts connections and never answers.
fn hanging_target() -> SocketAddr {
    let (listener, addr) = pod_listener();
    pods_runtime().spawn(async move {
        let listener = TcpListener::from_std(listener).unwrap();
        let mut held = Vec::new();
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf).await;
            held.push(stream);
        }
    });
    addr
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// (VmRSS, VmHWM) of `pid` in MiB.
fn rss_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let read = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .map_or(0.0, |kb| kb.parse::<f64>().unwrap() / 1024.0)
    };
    (read("VmRSS:"), read("VmHWM:"))
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// A cgroup of the scaler's own with a CFS quota (`--cpu-limit`): the limit a Kubernetes
/// `limits.cpu` sets, enforced by the same kernel mechanism.
struct CpuLimit {
    dir: std::path::PathBuf,
    v2: bool,
}

/// Throttling counters of a [`CpuLimit`]: CFS periods, periods throttled, time throttled (ms).
#[derive(Clone, Copy, Default)]
struct Throttling {
    periods: u64,
    throttled: u64,
    throttled_ms: f64,
}

impl CpuLimit {
    /// Period of the quota, as the kubelet sets it (100 ms).
    const PERIOD_US: u64 = 100_000;

    fn create(cores: f64) -> Self {
        let quota = (cores * Self::PERIOD_US as f64).round() as u64;
        let name = format!("vllm-keda-fleet-bench-{}", std::process::id());
        let v2_root = std::path::Path::new("/sys/fs/cgroup");
        let v2 = std::fs::read_to_string(v2_root.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|x| x == "cpu"));
        let dir = if v2 {
            // Lets children of the root use the cpu controller (already on under systemd).
            let _ = std::fs::write(v2_root.join("cgroup.subtree_control"), "+cpu");
            v2_root.join(&name)
        } else {
            std::path::Path::new("/sys/fs/cgroup/cpu").join(&name)
        };
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| cgroup_failure(&format!("creating {}", dir.display()), e));
        let limit = Self { dir, v2 };
        if v2 {
            limit.write("cpu.max", &format!("{quota} {}", Self::PERIOD_US));
        } else {
            limit.write("cpu.cfs_period_us", &Self::PERIOD_US.to_string());
            limit.write("cpu.cfs_quota_us", &quota.to_string());
        }
        limit
    }

    fn write(&self, file: &str, value: &str) {
        let path = self.dir.join(file);
        if let Err(e) = std::fs::write(&path, value) {
            cgroup_failure(&format!("writing {value:?} to {}", path.display()), e);
        }
    }

    /// Moves the process `pid` (every thread of it; threads it starts later follow) in.
    fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("--cpu-limit: moving the scaler into the cgroup: {e}"));
    }

    fn throttling(&self) -> Throttling {
        let stat = std::fs::read_to_string(self.dir.join("cpu.stat")).unwrap_or_default();
        let read = |key: &str| {
            stat.lines()
                .find_map(|l| {
                    l.strip_prefix(key)?
                        .strip_prefix(' ')?
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
                .unwrap_or(0)
        };
        Throttling {
            periods: read("nr_periods"),
            throttled: read("nr_throttled"),
            throttled_ms: if self.v2 {
                read("throttled_usec") as f64 / 1e3
            } else {
                read("throttled_time") as f64 / 1e6
            },
        }
    }
}

fn cgroup_failure(what: &str, e: std::io::Error) -> ! {
    panic!(
        "--cpu-limit: {what}: {e} (needs root and the cgroup cpu controller, v2 at \
         /sys/fs/cgroup or v1 at /sys/fs/cgroup/cpu)"
    )
}

impl Drop for CpuLimit {
    fn drop(&mut self) {
        // Empty once the scaler has exited; a leftover directory is harmless but reported.
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("--cpu-limit: removing {}: {e}", self.dir.display());
        }
    }
}

async fn http_get(addr: SocketAddr, path: &str) -> String {
    reqwest::get(format!("http://{addr}{path}"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Completed cycles per ScaledObject name, from `/debug/scaledobjects`.
async fn cycles(http: SocketAddr) -> HashMap<String, u64> {
    let body = http_get(http, "/debug/scaledobjects").await;
    let value: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    value["scaledobjects"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|r| {
                    (
                        r["name"].as_str().unwrap_or_default().to_owned(),
                        r["cycles"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Sum and count of every ScaledObject's scrape-duration histogram, from `/metrics`.
async fn scrape_times(http: SocketAddr) -> HashMap<String, (f64, f64)> {
    let text = http_get(http, "/metrics").await;
    let mut out: HashMap<String, (f64, f64)> = HashMap::new();
    for line in text.lines() {
        let is_sum = line.starts_with("vllm_keda_scaler_scrape_duration_seconds_sum{");
        let is_count = line.starts_with("vllm_keda_scaler_scrape_duration_seconds_count{");
        if !(is_sum || is_count) {
            continue;
        }
        let Some(name) = line
            .split("scaledobject=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
        else {
            continue;
        };
        let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap_or(0.0);
        let entry = out.entry(name.to_owned()).or_default();
        if is_sum {
            entry.0 = value;
        } else {
            entry.1 = value;
        }
    }
    out
}

/// The scaler's own `GetMetrics` handling-time histogram, from `/metrics`: each bucket's upper
/// bound in seconds with its cumulative count.
async fn server_buckets(http: SocketAddr) -> Vec<(f64, f64)> {
    let text = http_get(http, "/metrics").await;
    text.lines()
        .filter(|l| {
            l.starts_with("vllm_keda_scaler_rpc_duration_seconds_bucket{")
                && l.contains("method=\"GetMetrics\"")
        })
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// Server-side `GetMetrics` figures between two readings of [`server_buckets`]: the bucket
/// bounds (in us) holding the median and the 99th percentile, and the share answered within
/// 640 us (the last bucket under 1 ms).
struct ServerLatency {
    p50_le_us: f64,
    p99_le_us: f64,
    within_640us: f64,
    calls: f64,
}

fn server_latency(before: &[(f64, f64)], after: &[(f64, f64)]) -> ServerLatency {
    let diff: Vec<(f64, f64)> = after
        .iter()
        .map(|&(le, n)| {
            let old = before
                .iter()
                .find(|(l, _)| *l == le)
                .map_or(0.0, |(_, n)| *n);
            (le, n - old)
        })
        .collect();
    let total = diff.last().map_or(0.0, |(_, n)| *n);
    let quantile = |q: f64| {
        diff.iter()
            .find(|(_, n)| *n >= q * total)
            .map_or(f64::NAN, |(le, _)| le * 1e6)
    };
    let within = diff
        .iter()
        .rev()
        .find(|(le, _)| *le <= 0.000_641)
        .map_or(0.0, |(_, n)| *n);
    ServerLatency {
        p50_le_us: quantile(0.5),
        p99_le_us: quantile(0.99),
        within_640us: within / total.max(1.0),
        calls: total,
    }
}

fn so_ref(name: &str, endpoints: &str, interval: f64) -> ScaledObjectRef {
    ScaledObjectRef {
        name: name.to_owned(),
        namespace: "bench".to_owned(),
        scaler_metadata: [
            ("endpoints".to_owned(), endpoints.to_owned()),
            ("scrapeIntervalSeconds".to_owned(), interval.to_string()),
        ]
        .into_iter()
        .collect(),
    }
}

async fn get_metrics(c: &mut ExternalScalerClient<Channel>, r: &ScaledObjectRef) -> Option<i64> {
    c.get_metrics(GetMetricsRequest {
        scaled_object_ref: Some(r.clone()),
        metric_name: String::new(),
    })
    .await
    .ok()
    .map(|a| a.into_inner().metric_values[0].metric_value)
}

/// First `GetMetrics` calls in flight at once while registering ScaledObjects (each waits up
/// to `--first-answer-wait-seconds` for its loop's first cycle, so one at a time would take
/// minutes for thousands).
const REGISTER_CONCURRENCY: usize = 32;

/// Asks once about every ScaledObject in `refs`, [`REGISTER_CONCURRENCY`] at a time, so each
/// one's loop starts; returns how many got an answer.
async fn register(client: &ExternalScalerClient<Channel>, refs: &[ScaledObjectRef]) -> usize {
    use futures_util::StreamExt;
    futures_util::stream::iter(refs.iter().cloned())
        .map(|r| {
            let mut c = client.clone();
            async move { get_metrics(&mut c, &r).await.is_some() }
        })
        .buffer_unordered(REGISTER_CONCURRENCY)
        .filter(|answered| std::future::ready(*answered))
        .count()
        .await
}

struct Phase {
    latency: Histogram<u64>,
    server: ServerLatency,
    cores: f64,
    rss_mib: f64,
    peak_mib: f64,
    fds: usize,
    min_cycles: u64,
    expected_cycles: f64,
    mean_scrape_ms: f64,
    max_scrape_ms: f64,
    answers: HashMap<String, i64>,
    /// Under `--cpu-limit`: the throttling over the phase.
    throttling: Option<Throttling>,
}

/// Open-loop `GetMetrics` over `refs` for `seconds`, with the scaler's figures around it.
async fn phase(
    args: &Args,
    pid: u32,
    http: SocketAddr,
    client: &ExternalScalerClient<Channel>,
    refs: &[ScaledObjectRef],
    watched: usize,
    limit: Option<&CpuLimit>,
) -> Phase {
    let throttling_before = limit.map(CpuLimit::throttling);
    let cycles_before = cycles(http).await;
    let times_before = scrape_times(http).await;
    let server_before = server_buckets(http).await;
    let cpu_before = cpu_seconds(pid);
    let started = Instant::now();
    let total = (args.rate * args.seconds) as usize;
    let gap = Duration::from_secs_f64(1.0 / args.rate);
    let mut tasks = Vec::with_capacity(total);
    for i in 0..total {
        let at = started + gap * i as u32;
        tokio::time::sleep_until(at).await;
        let mut c = client.clone();
        let r = refs[i % refs.len()].clone();
        tasks.push(tokio::spawn(async move {
            let answer = get_metrics(&mut c, &r).await;
            (r.name, answer, at.elapsed())
        }));
    }
    let mut latency = Histogram::<u64>::new(3).unwrap();
    let mut answers = HashMap::new();
    for task in tasks {
        let (name, answer, took) = task.await.unwrap();
        latency.record(took.as_micros() as u64).unwrap();
        if let Some(v) = answer {
            answers.insert(name, v);
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cores = (cpu_seconds(pid) - cpu_before) / elapsed;
    let throttling = limit.zip(throttling_before).map(|(l, before)| {
        let after = l.throttling();
        Throttling {
            periods: after.periods - before.periods,
            throttled: after.throttled - before.throttled,
            throttled_ms: after.throttled_ms - before.throttled_ms,
        }
    });
    let (rss, peak) = rss_mib(pid);
    let cycles_after = cycles(http).await;
    let times_after = scrape_times(http).await;
    let server = server_latency(&server_before, &server_buckets(http).await);
    let watched_names: Vec<&str> = refs[..watched].iter().map(|r| r.name.as_str()).collect();
    let min_cycles = watched_names
        .iter()
        .map(|n| {
            cycles_after.get(*n).copied().unwrap_or(0) - cycles_before.get(*n).copied().unwrap_or(0)
        })
        .min()
        .unwrap_or(0);
    let means: Vec<f64> = watched_names
        .iter()
        .filter_map(|n| {
            let (s1, c1) = times_after.get(*n).copied()?;
            let (s0, c0) = times_before.get(*n).copied().unwrap_or_default();
            (c1 > c0).then(|| (s1 - s0) / (c1 - c0) * 1000.0)
        })
        .collect();
    Phase {
        latency,
        server,
        cores,
        rss_mib: rss,
        peak_mib: peak,
        fds: open_fds(pid),
        min_cycles,
        expected_cycles: elapsed / args.interval,
        mean_scrape_ms: means.iter().sum::<f64>() / means.len().max(1) as f64,
        max_scrape_ms: means.iter().copied().fold(0.0, f64::max),
        answers,
        throttling,
    }
}

fn report(name: &str, p: &Phase) {
    println!(
        "{name}: GetMetrics at the client p50 {:.0} us, p99 {:.0} us, max {:.0} us over {} \
         calls; in the scaler (its histogram) p50 <= {:.0} us, p99 <= {:.0} us, {:.2} % within \
         640 us over {:.0} calls; scaler CPU {:.2} cores; RSS {:.0} MiB (peak {:.0} MiB); {} \
         open fds; cycles per ScaledObject: min {} of {:.1} the interval allows; scrape time \
         per cycle: mean {:.1} ms, worst ScaledObject {:.1} ms",
        p.latency.value_at_quantile(0.5) as f64,
        p.latency.value_at_quantile(0.99) as f64,
        p.latency.max() as f64,
        p.latency.len(),
        p.server.p50_le_us,
        p.server.p99_le_us,
        p.server.within_640us * 100.0,
        p.server.calls,
        p.cores,
        p.rss_mib,
        p.peak_mib,
        p.fds,
        p.min_cycles,
        p.expected_cycles,
        p.mean_scrape_ms,
        p.max_scrape_ms,
    );
    if let Some(t) = p.throttling {
        println!(
            "{name}: under the CPU limit, throttled in {} of {} CFS periods ({:.1} %), {:.0} ms \
             throttled in all",
            t.throttled,
            t.periods,
            t.throttled as f64 / t.periods.max(1) as f64 * 100.0,
            t.throttled_ms
        );
    }
}

/// Asks about every ScaledObject of `refs` for three intervals, then stops asking and waits
/// (at most a minute) until every loop has stopped (`--idle-stop-seconds` is 10 in the soak
/// and memory modes). Returns the RSS while busy, the peak so far and the RSS once idle, in MiB.
async fn ask_then_drop(
    args: &Args,
    pid: u32,
    http: SocketAddr,
    client: &ExternalScalerClient<Channel>,
    refs: &[ScaledObjectRef],
) -> (f64, f64, f64) {
    for _ in 0..3 {
        register(client, refs).await;
        tokio::time::sleep(Duration::from_secs_f64(args.interval)).await;
    }
    let (busy, busy_peak) = rss_mib(pid);
    let stop_by = Instant::now() + Duration::from_secs(60);
    while Instant::now() < stop_by && !cycles(http).await.is_empty() {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // The last loops deregister a moment after /debug stops listing them; the scaler gives
    // the freed memory back at its next check for stopped loops, and again at the check after
    // it (what the loops dropped after they deregistered).
    tokio::time::sleep(Duration::from_secs(2) + RELEASE_CHECK * 2).await;
    let (idle, _) = rss_mib(pid);
    (busy, busy_peak, idle)
}

/// A body of about 4 MB (under the 4 MiB cap) of valid samples, 18,000 of them (under the
/// 20,000 cap), each with a 160-byte label value: the largest body the default limits accept,
/// so the costliest to parse and hold.
fn big_valid_body() -> String {
    let pad = "p".repeat(160);
    (0..18_000)
        .map(|i| {
            format!("vllm:num_requests_waiting{{model_name=\"m\",pad=\"{pad}\",i=\"{i}\"}} 1\n")
        })
        .collect()
}

/// Memory that returns (`--memory`): RSS at start; after a burst of the largest accepted
/// bodies (`BURST_SCALEDOBJECTS` ScaledObjects of `BURST_TARGETS` such targets each, three
/// intervals, then their loops stop); after `--pods` one-target ScaledObjects are created,
/// asked three intervals and removed (their loops stop); the peak over all of it.
async fn memory(
    args: &Args,
    pid: u32,
    http: SocketAddr,
    client: &ExternalScalerClient<Channel>,
    pods: &[SocketAddr],
) {
    const BURST_SCALEDOBJECTS: usize = 8;
    const BURST_TARGETS: usize = 4;
    let (baseline, _) = rss_mib(pid);
    let body: &'static str = Box::leak(big_valid_body().into_boxed_str());
    let burst: Vec<ScaledObjectRef> = (0..BURST_SCALEDOBJECTS)
        .map(|i| {
            let endpoints: Vec<String> = (0..BURST_TARGETS)
                .map(|_| format!("http://{}/metrics", static_target(body)))
                .collect();
            so_ref(&format!("burst-{i}"), &endpoints.join(","), args.interval)
        })
        .collect();
    let (burst_busy, _, after_burst) = ask_then_drop(args, pid, http, client, &burst).await;
    let many: Vec<ScaledObjectRef> = pods
        .iter()
        .enumerate()
        .map(|(i, a)| {
            so_ref(
                &format!("many-{i:05}"),
                &format!("http://{a}/metrics"),
                args.interval,
            )
        })
        .collect();
    let (many_busy, peak, after_removal) = ask_then_drop(args, pid, http, client, &many).await;
    println!(
        "memory: baseline {baseline:.0} MiB; burst of {BURST_SCALEDOBJECTS}x{BURST_TARGETS} \
         targets of {:.1} MB bodies: {burst_busy:.0} MiB busy, {after_burst:.0} MiB after; {} \
         one-target ScaledObjects: {many_busy:.0} MiB busy, {after_removal:.0} MiB after \
         removal; peak {peak:.0} MiB; {} open fds",
        body.len() as f64 / 1e6,
        many.len(),
        open_fds(pid)
    );
}

/// Waves of one-target ScaledObjects (one per pod): each wave asks about all of them for three
/// intervals, then stops asking, so their loops stop after `--idle-stop-seconds` (10 here);
/// RSS and open descriptors after each wave's loops are gone.
async fn soak(
    args: &Args,
    pid: u32,
    http: SocketAddr,
    client: &ExternalScalerClient<Channel>,
    pods: &[SocketAddr],
) {
    let started = Instant::now();
    let mut wave = 0;
    let mut after_warmup: Option<(f64, usize)> = None;
    let mut idle_after_warmup: Vec<f64> = Vec::new();
    let mut waves: Vec<WaveReading> = Vec::new();
    while started.elapsed().as_secs_f64() < args.soak_minutes * 60.0 {
        wave += 1;
        let refs: Vec<ScaledObjectRef> = pods
            .iter()
            .enumerate()
            .map(|(i, a)| {
                so_ref(
                    &format!("w{wave}-{i:05}"),
                    &format!("http://{a}/metrics"),
                    args.interval,
                )
            })
            .collect();
        let (busy, busy_peak, idle) = ask_then_drop(args, pid, http, client, &refs).await;
        let fds = open_fds(pid);
        waves.push(WaveReading {
            at_seconds: started.elapsed().as_secs_f64(),
            busy,
            peak: busy_peak,
            idle,
            fds,
        });
        if let Some(path) = &args.soak_plot {
            // Rewritten after every wave, so a run cut short still leaves its readings.
            write_soak_plot(path, &waves, args.warmup_waves.max(1));
        }
        println!(
            "wave {wave} at {:.0} s: {} ScaledObjects; RSS busy {busy:.0} MiB (peak \
             {busy_peak:.0}), after their loops stopped {idle:.0} MiB, {fds} open fds",
            started.elapsed().as_secs_f64(),
            refs.len()
        );
        if let Some((base, base_fds)) = after_warmup {
            println!(
                "  growth since wave {}, the last of the warm-up: RSS {:+.1} % , fds {:+}",
                args.warmup_waves,
                (idle / base - 1.0) * 100.0,
                fds as i64 - base_fds as i64
            );
            idle_after_warmup.push(idle);
        }
        if wave == args.warmup_waves.max(1) {
            after_warmup = Some((idle, fds));
        }
    }
    // One wave's reading moves by tens of MiB with where live blocks happen to sit, so growth
    // is also given as a trend over every wave after warm-up: the second half's mean against
    // the first half's, and the least-squares slope projected over the whole run.
    let n = idle_after_warmup.len();
    if n >= 4 {
        let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
        let (first, second) = idle_after_warmup.split_at(n / 2);
        let (m1, m2) = (mean(first), mean(second));
        let x_mean = (n as f64 - 1.0) / 2.0;
        let y_mean = mean(&idle_after_warmup);
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for (i, y) in idle_after_warmup.iter().enumerate() {
            sxy += (i as f64 - x_mean) * (y - y_mean);
            sxx += (i as f64 - x_mean).powi(2);
        }
        let slope = sxy / sxx;
        println!(
            "soak: {n} waves after a warm-up of {} (waves {} on); RSS after a wave: first half \
             mean {m1:.1} MiB, second half {m2:.1} MiB ({:+.1} %); trend {slope:+.2} MiB per \
             wave, {:+.1} % of the mean over the {n} waves",
            args.warmup_waves.max(1),
            args.warmup_waves.max(1) + 1,
            (m2 / m1 - 1.0) * 100.0,
            slope * (n as f64 - 1.0) / y_mean * 100.0
        );
    }
}

/// One soak wave's readings.
struct WaveReading {
    at_seconds: f64,
    busy: f64,
    peak: f64,
    idle: f64,
    fds: usize,
}

/// One reading of a wave, for a line of the soak plot.
type WaveValue = fn(&WaveReading) -> f64;

/// Writes the soak's waves to `svg` (a line chart of RSS per wave) and to a TSV beside it.
fn write_soak_plot(svg: &std::path::Path, waves: &[WaveReading], warmup: usize) {
    use std::fmt::Write as _;
    let mut tsv =
        String::from("wave\tat_seconds\trss_busy_mib\trss_peak_mib\trss_after_mib\topen_fds\n");
    for (i, w) in waves.iter().enumerate() {
        let _ = writeln!(
            tsv,
            "{}\t{:.0}\t{:.1}\t{:.1}\t{:.1}\t{}",
            i + 1,
            w.at_seconds,
            w.busy,
            w.peak,
            w.idle,
            w.fds
        );
    }
    let tsv_path = svg.with_extension("tsv");
    std::fs::write(&tsv_path, tsv)
        .unwrap_or_else(|e| panic!("--soak-plot: writing {}: {e}", tsv_path.display()));

    const LIMIT_MIB: f64 = 256.0;
    let (w, h, left, right, top, bottom) = (800.0, 400.0, 60.0, 200.0, 40.0, 45.0);
    let n = waves.len().max(2) as f64;
    let y_max = (waves.iter().map(|w| w.peak).fold(LIMIT_MIB, f64::max) / 50.0).ceil() * 50.0;
    let px = |wave: f64| left + (wave - 1.0) / (n - 1.0) * (w - left - right);
    let py = |mib: f64| top + (1.0 - mib / y_max) * (h - top - bottom);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="14">Soak: resident memory per wave of ScaledObjects created and removed</text>"#,
        (w - right + left) / 2.0
    );
    let mut mib = 0.0;
    while mib <= y_max {
        let y = py(mib);
        let _ = writeln!(
            out,
            r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{mib:.0}</text>"##,
            w - right,
            left - 6.0,
            y + 4.0
        );
        mib += 50.0;
    }
    let step = ((n / 8.0).ceil() as usize).max(1);
    for wave in (1..=waves.len()).step_by(step) {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{wave}</text>"#,
            px(wave as f64),
            h - bottom + 16.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">wave</text><text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">RSS, MiB</text>"#,
        (w - right + left) / 2.0,
        h - 8.0,
        (h - bottom + top) / 2.0,
        (h - bottom + top) / 2.0
    );
    let x_warm = px(warmup as f64 + 0.5);
    let _ = writeln!(
        out,
        r##"<line x1="{x_warm:.1}" x2="{x_warm:.1}" y1="{top}" y2="{}" stroke="#888" stroke-dasharray="4 3"/><text x="{:.1}" y="{}" font-size="11" fill="#555">warm-up</text>"##,
        h - bottom,
        x_warm - 48.0,
        top + 12.0
    );
    let y_limit = py(LIMIT_MIB);
    let _ = writeln!(
        out,
        r##"<line x1="{left}" x2="{}" y1="{y_limit:.1}" y2="{y_limit:.1}" stroke="#c33" stroke-dasharray="6 3"/>"##,
        w - right
    );
    let series: [(&str, &str, WaveValue); 3] = [
        ("busy", "#1f77b4", |r| r.busy),
        ("peak so far", "#ff7f0e", |r| r.peak),
        ("after the loops stopped", "#2ca02c", |r| r.idle),
    ];
    for (i, (label, color, value)) in series.iter().enumerate() {
        let points: Vec<String> = waves
            .iter()
            .enumerate()
            .map(|(k, r)| format!("{:.1},{:.1}", px(k as f64 + 1.0), py(value(r))))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        let ly = top + 10.0 + i as f64 * 18.0;
        let _ = writeln!(
            out,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{label}</text>"#,
            w - right + 10.0,
            w - right + 30.0,
            w - right + 36.0,
            ly + 4.0
        );
    }
    let ly = top + 10.0 + 3.0 * 18.0;
    let _ = writeln!(
        out,
        r##"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="#c33" stroke-dasharray="6 3"/><text x="{}" y="{}">memory request</text>
</svg>"##,
        w - right + 10.0,
        w - right + 30.0,
        w - right + 36.0,
        ly + 4.0
    );
    std::fs::write(svg, out)
        .unwrap_or_else(|e| panic!("--soak-plot: writing {}: {e}", svg.display()));
}

#[tokio::main]
async fn main() {
    // `cargo bench --bench fleet` passes `--bench`. Under `cargo test --all-targets` there is no
    // release binary to start and a 5,000-pod fleet is no smoke test: compiling is the check.
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "fleet bench: run it with cargo bench --bench fleet (it needs the release binary)"
        );
        return;
    }
    let args = args();
    println!(
        "fleet bench: {} pods, {} ScaledObjects, interval {} s, {} s per phase, {} GetMetrics/s, \
         binary {}",
        args.pods, args.scaledobjects, args.interval, args.seconds, args.rate, args.bin
    );
    let mut pods = Vec::with_capacity(args.pods);
    let gzipped = gzip(LOADED);
    if args.gzip {
        println!(
            "pods answer gzip-compressed when asked: {} bytes for the {}-byte body",
            gzipped.len(),
            LOADED.len()
        );
    }
    for _ in 0..args.pods {
        pods.push(if args.gzip {
            gzip_target(LOADED, gzipped)
        } else {
            static_target(LOADED)
        });
    }
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let http: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut child: Child = Command::new(&args.bin)
        .args([
            "serve",
            "--grpc-addr",
            &grpc.to_string(),
            "--http-addr",
            &http.to_string(),
            "--allow-targets",
            "127.0.0.0/8",
            "--idle-stop-seconds",
            if args.soak_minutes > 0.0 || args.memory {
                "10"
            } else {
                "100000"
            },
            "--max-scaledobjects",
            "100000",
        ])
        .args(
            args.close_connections
                .then_some("--scrape-close-connections"),
        )
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "starting {}: {e} (build it with cargo build --release)",
                args.bin
            )
        });
    let pid = child.id();
    let limit = (args.cpu_limit > 0.0).then(|| {
        let limit = CpuLimit::create(args.cpu_limit);
        limit.add(pid);
        println!(
            "the scaler runs under a CPU limit of {} cores (CFS quota {} us per {} us, {})",
            args.cpu_limit,
            (args.cpu_limit * CpuLimit::PERIOD_US as f64).round(),
            CpuLimit::PERIOD_US,
            limit.dir.display()
        );
        limit
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, baseline_peak) = rss_mib(pid);
    let client = loop {
        match ExternalScalerClient::connect(format!("http://{grpc}")).await {
            Ok(c) => break c,
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    if args.memory {
        memory(&args, pid, http, &client, &pods).await;
        let _ = child.kill();
        let _ = child.wait();
        return;
    }
    if args.soak_minutes > 0.0 {
        soak(&args, pid, http, &client, &pods).await;
        let _ = child.kill();
        let _ = child.wait();
        return;
    }
    let per = args.pods / args.scaledobjects;
    let refs: Vec<ScaledObjectRef> = (0..args.scaledobjects)
        .map(|i| {
            let endpoints: Vec<String> = pods[i * per..(i + 1) * per]
                .iter()
                .map(|a| format!("http://{a}/metrics"))
                .collect();
            so_ref(
                &format!("tenant-{i:04}"),
                &endpoints.join(","),
                args.interval,
            )
        })
        .collect();
    let (_, before) = rss_mib(pid);
    let registering = Instant::now();
    let answered = register(&client, &refs).await;
    println!(
        "baseline RSS before any ScaledObject: {before:.0} MiB (peak {baseline_peak:.0} MiB); \
         {} ScaledObjects registered in {:.1} s, {REGISTER_CONCURRENCY} at a time, {answered} \
         answered at once",
        refs.len(),
        registering.elapsed().as_secs_f64()
    );
    let mut c = client.clone();
    // Two intervals for every loop to settle onto its phase.
    tokio::time::sleep(Duration::from_secs_f64(args.interval * 2.0)).await;
    let steady = phase(&args, pid, http, &client, &refs, refs.len(), limit.as_ref()).await;
    report("steady", &steady);

    if args.hostile {
        let huge: &'static str = Box::leak(
            format!(
                "vllm:num_requests_waiting 1\n# {}\n",
                "x".repeat(4 * 1024 * 1024 - 64)
            )
            .into_boxed_str(),
        );
        let reasons: &'static str = Box::leak(
            (0..160_000)
                .map(|i| format!("vllm:request_success_total{{finished_reason=\"r{i}\"}} 1\n"))
                .collect::<String>()
                .into_boxed_str(),
        );
        let targets = [
            static_target(huge),
            static_target(reasons),
            hanging_target(),
        ];
        let mut all = refs.clone();
        for (i, addr) in targets.iter().enumerate() {
            let r = so_ref(
                &format!("hostile-{i}"),
                &format!("http://{addr}/metrics"),
                args.interval,
            );
            get_metrics(&mut c, &r).await;
            all.push(r);
        }
        tokio::time::sleep(Duration::from_secs_f64(args.interval * 2.0)).await;
        let hostile = phase(&args, pid, http, &client, &all, refs.len(), limit.as_ref()).await;
        report("with hostile tenants", &hostile);
        let changed = refs
            .iter()
            .filter(|r| steady.answers.get(&r.name) != hostile.answers.get(&r.name))
            .count();
        println!(
            "answers of the {} other tenants changed by the hostile ones: {changed}",
            refs.len()
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}
