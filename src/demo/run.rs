//! The demo's settings and its run: start everything, play the story, sample, stop, summarise.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::fleet::{self, Fleet, FleetOptions};
use super::keda::KedaHpa;
use super::load::{self, SizeLimits, Story};
use super::summary::{self, FleetEvent, RequestTotals, Sample, ScaleEvent, Summary};
use super::view::{self, View};
use crate::emulator::{EngineConfig, RequestShape};
use crate::serve::ServeOptions;

const NAMESPACE: &str = "demo";
const NAME: &str = "vllm";

/// Everything the run needs, with the shortened periods of the chosen mode.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--quick`.
    pub quick: bool,
    /// Most replicas.
    pub max_replicas: u32,
    /// Where in the trace the load starts.
    pub seed: u64,
    /// Output directory.
    pub out: PathBuf,
    /// Redraw a live view (else plain lines).
    pub live: bool,
    /// The load story.
    pub story: Story,
    /// The HPA's sync period (15 s in Kubernetes).
    pub hpa_sync: Duration,
    /// KEDA's polling interval (30 s by default).
    pub keda_poll: Duration,
    /// From a replica's creation to ready (minutes for a real vLLM pod).
    pub startup_delay: Duration,
    /// Longest wait for a removed replica's requests.
    pub drain_timeout: Duration,
    /// How long to wait for unanswered requests after the story.
    pub tail: Duration,
    /// One client request's timeout.
    pub request_timeout: Duration,
    /// The P95 end-to-end latency SLO given to the scaler.
    pub latency_slo_seconds: f64,
    /// The scaler metadata apart from the targets.
    pub metadata: Vec<(&'static str, String)>,
    /// Each replica's engine.
    pub engine: EngineConfig,
    /// Request size limits.
    pub limits: SizeLimits,
    /// The served model name.
    pub model: String,
}

impl Settings {
    /// The settings of the full (about three minutes) or quick (under a minute) story.
    pub fn new(quick: bool, max_replicas: u32, seed: u64, out: PathBuf, live: bool) -> Self {
        // (full, quick)
        let pick = |full: f64, fast: f64| if quick { fast } else { full };
        let latency_slo_seconds = 40.0;
        let metadata = vec![
            ("scrapeIntervalSeconds", "1".to_owned()),
            ("queueDepthPerReplica", "3".to_owned()),
            ("latencySloSeconds", format!("{latency_slo_seconds}")),
            ("minReplicas", "1".to_owned()),
            ("maxReplicas", max_replicas.to_string()),
            ("scaleUpPods", "2".to_owned()),
            ("scaleUpPeriodSeconds", format!("{}", pick(6.0, 4.0))),
            ("scaleUpStabilizationSeconds", "1".to_owned()),
            ("scaleDownPods", "1".to_owned()),
            ("scaleDownPeriodSeconds", format!("{}", pick(8.0, 3.0))),
            (
                "scaleDownStabilizationSeconds",
                format!("{}", pick(15.0, 4.0)),
            ),
            ("startupGraceSeconds", format!("{}", pick(20.0, 10.0))),
        ];
        // A small engine: two sequences per batch and a small KV cache, so that a couple of
        // requests per second saturate one replica while each request still takes about as
        // long as on a real GPU.
        let engine = EngineConfig {
            max_num_seqs: 2,
            num_gpu_blocks: 1024,
            max_model_len: 8192,
            ..EngineConfig::default()
        };
        Self {
            quick,
            max_replicas,
            seed,
            out,
            live,
            story: if quick { Story::quick() } else { Story::full() },
            hpa_sync: Duration::from_secs_f64(pick(2.0, 1.0)),
            keda_poll: Duration::from_secs_f64(pick(10.0, 5.0)),
            startup_delay: Duration::from_secs_f64(pick(3.0, 2.0)),
            drain_timeout: Duration::from_secs_f64(pick(30.0, 10.0)),
            tail: Duration::from_secs_f64(pick(10.0, 3.0)),
            request_timeout: Duration::from_secs_f64(pick(120.0, 60.0)),
            latency_slo_seconds,
            metadata,
            engine,
            limits: SizeLimits {
                max_prompt_tokens: 4096,
                max_output_tokens: 512,
            },
            model: "meta-llama/Llama-3.1-8B-Instruct".to_owned(),
        }
    }

    /// The ScaledObject's trigger metadata: the Service name and port plus the settings.
    pub fn scaler_metadata(&self, port: u16) -> HashMap<String, String> {
        let mut m: HashMap<String, String> = self
            .metadata
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        m.insert("service".into(), format!("{}:{port}", fleet::SERVICE_NAME));
        m.insert("scalerAddress".into(), "127.0.0.1".into());
        m
    }

    fn mode(&self) -> &'static str {
        if self.quick { "quick" } else { "full" }
    }
}

/// Client-side counts of the load.
#[derive(Debug, Default)]
struct LoadStats {
    sent: AtomicU64,
    failed: AtomicU64,
    in_flight: AtomicUsize,
    /// Send times (seconds since the story's start), in order.
    send_times: Mutex<Vec<f64>>,
    /// Answer times and latencies of answered requests.
    answers: Mutex<Vec<(f64, f64)>>,
    /// The first failure's message, for the log.
    first_failure: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Plays the story and returns its summary (files written).
pub async fn execute(settings: Settings) -> anyhow::Result<Summary> {
    let run_start = Instant::now();
    std::fs::create_dir_all(&settings.out).with_context(|| {
        format!(
            "creating the output directory {} (pick another with --out)",
            settings.out.display()
        )
    })?;
    let out = settings.out.canonicalize().unwrap_or(settings.out.clone());
    let hosts_file = out.join("hosts");

    // The load: the bundled trace, reshaped to the story.
    let trace = load::bundled_trace()?;
    let shape = RequestShape {
        prompt_tokens: mean_u32(
            trace
                .requests
                .iter()
                .map(|r| r.prompt_tokens.clamp(1, settings.limits.max_prompt_tokens)),
        ),
        output_tokens: mean_u32(
            trace
                .requests
                .iter()
                .map(|r| r.output_tokens.clamp(1, settings.limits.max_output_tokens)),
        ),
    };
    let capacity_rps = settings
        .engine
        .predicted_saturation(shape)
        .requests_per_second;
    let requests = load::shape(
        &trace,
        &settings.story,
        capacity_rps,
        settings.limits,
        settings.seed,
    );

    // The replicas.
    let port = fleet::pick_port().await?;
    let (events_tx, mut events_rx) = mpsc::unbounded_channel();
    let fleet = Fleet::new(
        FleetOptions {
            port,
            hosts_file: hosts_file.clone(),
            startup_delay: settings.startup_delay,
            drain_timeout: settings.drain_timeout,
            engine: settings.engine.clone(),
            model: settings.model.clone(),
        },
        events_tx,
    );
    fleet.start_ready(1).await?;

    // The scaler, through the production code path.
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the scaler's gRPC listener on 127.0.0.1")?;
    let http = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the scaler's HTTP listener on 127.0.0.1")?;
    let mut options = ServeOptions {
        shutdown_grace: Duration::from_secs(2),
        ..ServeOptions::default()
    };
    options.control.hosts_file = Some(hosts_file.clone());
    options.control.history_len = 100_000;
    let server = crate::serve::start(grpc, http, options).await?;
    let metadata = settings.scaler_metadata(port);

    print_intro(
        &settings,
        capacity_rps,
        &server,
        &hosts_file,
        requests.len(),
    );

    // KEDA and the HPA.
    let mut keda = KedaHpa::connect(
        server.grpc_addr(),
        NAMESPACE,
        NAME,
        metadata.clone(),
        crate::simulate::controllers::ours_hpa_spec(1, settings.max_replicas),
    )
    .await?;
    // KEDA polls once when the ScaledObject is created; the scaler starts its loop then.
    let _ = keda.poll().await;

    let origin = Instant::now();
    let origin_unix = unix_now();
    let stop = CancellationToken::new();
    let stats = Arc::new(LoadStats::default());
    let hpa_syncs = Arc::new(AtomicU64::new(0));
    let hpa_errors = Arc::new(AtomicU64::new(0));
    let keda_polls = Arc::new(AtomicU64::new(1));
    let (log_tx, mut log_rx) = mpsc::unbounded_channel::<(f64, String)>();

    let autoscaler = tokio::spawn(autoscale(
        keda,
        fleet.clone(),
        settings.clone(),
        origin,
        stop.clone(),
        hpa_syncs.clone(),
        hpa_errors.clone(),
        keda_polls.clone(),
        log_tx.clone(),
    ));
    let sender = tokio::spawn(send_load(
        requests,
        fleet.clone(),
        settings.clone(),
        origin,
        stop.clone(),
        stats.clone(),
    ));

    // Sample, log and draw until the story ends, then a short tail for unanswered requests.
    let mut view = View::new(settings.live, if settings.quick { 2.0 } else { 5.0 });
    let story_end = settings.story.total();
    let tail_end = story_end + settings.tail;
    let mut samples: Vec<Sample> = Vec::new();
    let mut scale_events: Vec<ScaleEvent> = Vec::new();
    let mut fleet_events: Vec<FleetEvent> = Vec::new();
    let mut seen_history = 0usize;
    let mut last_target: Option<u32> = None;
    let mut peak_ready = 0u32;
    let mut tick = tokio::time::interval(Duration::from_millis(1000));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let interrupted = CancellationToken::new();
    {
        let interrupted = interrupted.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                interrupted.cancel();
            }
        });
    }
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = interrupted.cancelled() => {
                view.event("interrupted: stopping and writing what was recorded so far");
                break;
            }
        }
        let t = origin.elapsed();
        let t_seconds = t.as_secs_f64();
        // This second's log lines from the replicas, the HPA and the scaler, in time order.
        let mut lines: Vec<(f64, String)> = Vec::new();
        while let Ok(e) = events_rx.try_recv() {
            let at = e.at.saturating_duration_since(origin).as_secs_f64();
            lines.push((at, e.what.clone()));
            fleet_events.push(FleetEvent {
                t_seconds: at,
                what: e.what,
            });
        }
        while let Ok((at, what)) = log_rx.try_recv() {
            lines.push((at, what.clone()));
            fleet_events.push(FleetEvent {
                t_seconds: at,
                what,
            });
        }
        let status = server
            .controller()
            .find(NAMESPACE, NAME)
            .map(|so| so.latest());
        if let Some(status) = &status {
            for record in status.history.iter().skip(seen_history) {
                let target = record.decision.target_replicas;
                if let Some(previous) = last_target.filter(|p| *p != target) {
                    let e = ScaleEvent {
                        t_seconds: (record.first_unix_seconds - origin_unix).max(0.0),
                        direction: if target > previous { "out" } else { "in" },
                        from: previous,
                        to: target,
                        reason: crate::control::reason_label(record.decision.reason),
                        explanation: record.decision.explanation.clone(),
                    };
                    lines.push((
                        e.t_seconds,
                        format!(
                            "scaler target {} -> {} ({}): {}",
                            e.from, e.to, e.reason, e.explanation
                        ),
                    ));
                    scale_events.push(e);
                }
                last_target = Some(target);
            }
            seen_history = status.history.len();
        }
        lines.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (at, what) in &lines {
            view.event(&format!("{at:>6.1} s  {what}"));
        }
        let signals = status.as_ref().and_then(|s| s.signals.as_ref());
        let decision = status.as_ref().and_then(|s| s.decision.as_ref());
        let counts = fleet.counts();
        peak_ready = peak_ready.max(counts.ready);
        let (phase, multiple) = settings.story.at(t);
        let window = 3.0;
        let (offered, completed) = {
            let sends = lock(&stats.send_times);
            let answers = lock(&stats.answers);
            let since = t_seconds - window;
            (
                sends.iter().rev().take_while(|&&s| s > since).count() as f64 / window,
                answers.iter().filter(|(at, _)| *at > since).count() as f64 / window,
            )
        };
        let sample = Sample {
            t_seconds,
            phase: if t >= story_end { "tail" } else { phase },
            offered_rps: offered,
            completed_rps: completed,
            in_flight: stats.in_flight.load(Ordering::Relaxed),
            queue: signals.map(|s| s.fleet.queue_depth),
            running: signals.map(|s| s.fleet.running),
            p95_e2e_seconds: signals.and_then(|s| s.fleet.e2e_latency_seconds.p95),
            kv_usage_max: signals.and_then(|s| s.fleet.kv_cache_usage.max),
            ready_replicas: counts.ready,
            hpa_replicas: counts.spec,
            target_replicas: decision.map(|d| d.target_replicas),
            reason: decision.map(|d| crate::control::reason_label(d.reason)),
        };
        view.status(
            &sample,
            &view::Context {
                story_seconds: story_end.as_secs_f64(),
                capacity_multiple: if t >= story_end { 0.0 } else { multiple },
                slo_seconds: settings.latency_slo_seconds,
                max_replicas: settings.max_replicas,
                starting: counts.starting,
                draining: counts.draining,
                explanation: decision.map(|d| d.explanation.as_str()),
            },
        );
        samples.push(sample);
        if t >= tail_end || (t >= story_end && stats.in_flight.load(Ordering::Relaxed) == 0) {
            break;
        }
    }
    view.finish();
    let story_seconds = origin.elapsed().as_secs_f64();

    // Stop: the load, KEDA/HPA, the scaler, the replicas.
    stop.cancel();
    let _ = sender.await;
    let _ = autoscaler.await;
    let final_status = server
        .controller()
        .find(NAMESPACE, NAME)
        .map(|so| so.latest());
    let final_target = final_status
        .as_ref()
        .and_then(|s| s.decision.as_ref())
        .map_or(1, |d| d.target_replicas);
    let final_ready = fleet.counts().ready;
    if let Err(error) = server.shutdown().await {
        view.event(&format!("the scaler stopped with an error: {error:#}"));
    }
    fleet.shutdown().await;

    let latencies: Vec<f64> = lock(&stats.answers).iter().map(|(_, l)| *l).collect();
    let sent = stats.sent.load(Ordering::Relaxed);
    let failed = stats.failed.load(Ordering::Relaxed);
    let unfinished = stats.in_flight.load(Ordering::Relaxed) as u64;
    if let Some(first) = lock(&stats.first_failure).clone() {
        view.event(&format!("first failed request: {first}"));
    }
    let requests = RequestTotals::from_latencies(
        latencies,
        sent,
        failed,
        unfinished,
        settings.latency_slo_seconds,
    );
    let files = summary::Files {
        summary: out.join("summary.json"),
        plot: out.join("demo.svg"),
        timeline: out.join("timeline.csv"),
    };
    let peak_target = samples
        .iter()
        .filter_map(|s| s.target_replicas)
        .chain(scale_events.iter().map(|e| e.to))
        .max()
        .unwrap_or(1);
    let result = Summary {
        mode: settings.mode(),
        story_seconds,
        run_seconds: run_start.elapsed().as_secs_f64(),
        trace: load::ATTRIBUTION.to_owned(),
        story: settings.story.clone(),
        settings: settings_json(&settings, capacity_rps, &metadata),
        peak_target_replicas: peak_target,
        peak_ready_replicas: peak_ready,
        final_target_replicas: final_target,
        final_ready_replicas: final_ready,
        scale_events: scale_events.clone(),
        fleet_events,
        hpa_syncs: hpa_syncs.load(Ordering::Relaxed),
        hpa_sync_errors: hpa_errors.load(Ordering::Relaxed),
        keda_polls: keda_polls.load(Ordering::Relaxed),
        requests,
        files: files.clone(),
    };
    let svg = summary::plot(
        &samples,
        &scale_events,
        settings.latency_slo_seconds,
        &settings.story,
    );
    std::fs::write(&files.plot, svg)
        .with_context(|| format!("writing {}", files.plot.display()))?;
    summary::write_timeline(&files.timeline, &samples)
        .with_context(|| format!("writing {}", files.timeline.display()))?;
    let json = serde_json::to_string_pretty(&result).context("encoding the summary")?;
    std::fs::write(&files.summary, json + "\n")
        .with_context(|| format!("writing {}", files.summary.display()))?;
    Ok(result)
}

fn mean_u32(values: impl Iterator<Item = u32>) -> u32 {
    let (sum, n) = values.fold((0u64, 0u64), |(s, n), v| (s + u64::from(v), n + 1));
    sum.checked_div(n).map_or(1, |m| m.max(1) as u32)
}

fn settings_json(
    settings: &Settings,
    capacity_rps: f64,
    metadata: &HashMap<String, String>,
) -> serde_json::Value {
    let metadata: std::collections::BTreeMap<&String, &String> = metadata.iter().collect();
    serde_json::json!({
        "seed": settings.seed,
        "max_replicas": settings.max_replicas,
        "hpa_sync_seconds": settings.hpa_sync.as_secs_f64(),
        "keda_polling_interval_seconds": settings.keda_poll.as_secs_f64(),
        "replica_startup_delay_seconds": settings.startup_delay.as_secs_f64(),
        "replica_drain_timeout_seconds": settings.drain_timeout.as_secs_f64(),
        "replica_capacity_requests_per_second": capacity_rps,
        "engine": {
            "max_num_seqs": settings.engine.max_num_seqs,
            "num_gpu_blocks": settings.engine.num_gpu_blocks,
            "max_model_len": settings.engine.max_model_len,
            "slowdown": settings.engine.slowdown,
        },
        "request_limits": settings.limits,
        "scaler_metadata": metadata,
    })
}

fn print_intro(
    settings: &Settings,
    capacity_rps: f64,
    server: &crate::serve::Server,
    hosts_file: &std::path::Path,
    requests: usize,
) {
    let story: Vec<String> = settings
        .story
        .phases
        .iter()
        .map(|p| {
            if (p.from - p.to).abs() < 1e-9 {
                format!(
                    "{} {:.0} s at {}x",
                    p.name,
                    p.duration.as_secs_f64(),
                    p.from
                )
            } else {
                format!(
                    "{} {:.0} s from {}x to {}x",
                    p.name,
                    p.duration.as_secs_f64(),
                    p.from,
                    p.to
                )
            }
        })
        .collect();
    let m = |k: &str| {
        settings
            .metadata
            .iter()
            .find(|(key, _)| *key == k)
            .map_or("-".to_owned(), |(_, v)| v.clone())
    };
    println!(
        "vllm-keda-scaler demo ({}): emulated vLLM replicas, the scaler over real gRPC, and a KEDA/HPA stand-in, on loopback",
        settings.mode()
    );
    println!(
        "  scaler    gRPC {}  admin http://{}/debug/scaledobjects/{NAMESPACE}/{NAME}",
        server.grpc_addr(),
        server.http_addr()
    );
    println!(
        "  replicas  1 to {} on 127.0.0.2.. behind the name {:?} (hosts file {}); one replica serves about {capacity_rps:.2} req/s",
        settings.max_replicas,
        fleet::SERVICE_NAME,
        hosts_file.display()
    );
    println!("  load      {requests} requests: {}", story.join(", "));
    println!("            {}", load::ATTRIBUTION);
    println!(
        "  periods are shortened so a whole scale-out and scale-in fits in {}:",
        if settings.quick {
            "under a minute"
        } else {
            "about three minutes"
        }
    );
    println!(
        "            HPA sync {} s (Kubernetes: 15 s), KEDA polling {} s (30 s), replica start-up {} s (minutes for vLLM),",
        settings.hpa_sync.as_secs_f64(),
        settings.keda_poll.as_secs_f64(),
        settings.startup_delay.as_secs_f64()
    );
    println!(
        "            scaler: scrape every {} s, queue {} per replica, P95 SLO {} s, up +{} per {} s after {} s, down -{} per {} s after {} s calm (defaults 2 s, 25, 5 s, +2/60 s after 30 s, -1/120 s after 300 s)",
        m("scrapeIntervalSeconds"),
        m("queueDepthPerReplica"),
        m("latencySloSeconds"),
        m("scaleUpPods"),
        m("scaleUpPeriodSeconds"),
        m("scaleUpStabilizationSeconds"),
        m("scaleDownPods"),
        m("scaleDownPeriodSeconds"),
        m("scaleDownStabilizationSeconds"),
    );
    println!();
}

/// KEDA's polling loop and the HPA's sync loop over one connection, as KEDA shares one.
#[allow(clippy::too_many_arguments)]
async fn autoscale(
    mut keda: KedaHpa,
    fleet: Fleet,
    settings: Settings,
    origin: Instant,
    stop: CancellationToken,
    syncs: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    polls: Arc<AtomicU64>,
    log: mpsc::UnboundedSender<(f64, String)>,
) {
    let mut hpa = tokio::time::interval(settings.hpa_sync);
    let mut poll = tokio::time::interval_at(origin + settings.keda_poll, settings.keda_poll);
    hpa.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = hpa.tick() => {
                let current = fleet.spec();
                let now = origin.elapsed();
                let (desired, answer) = keda.hpa_sync(now, current).await;
                syncs.fetch_add(1, Ordering::Relaxed);
                let at = now.as_secs_f64();
                match answer {
                    Ok(a) => {
                        failing = false;
                        if desired != current {
                            let _ = log.send((at, format!(
                                "HPA: metric {} (target {}) -> replicas {current} -> {desired}",
                                a.value, a.target
                            )));
                            fleet.set_replicas(desired);
                        }
                    }
                    Err(error) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        if !failing {
                            let _ = log.send((at, format!(
                                "HPA: no metric ({error}); keeps {current} replicas"
                            )));
                        }
                        failing = true;
                    }
                }
            }
            _ = poll.tick() => {
                let _ = keda.poll().await;
                polls.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Sends the shaped requests open-loop, round robin over the ready replicas.
async fn send_load(
    requests: Vec<crate::trace::TraceRequest>,
    fleet: Fleet,
    settings: Settings,
    origin: Instant,
    stop: CancellationToken,
    stats: Arc<LoadStats>,
) {
    let client = match reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(64)
        .connect_timeout(Duration::from_secs(3))
        .timeout(settings.request_timeout)
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            *lock(&stats.first_failure) = Some(format!("building the HTTP client: {e}"));
            return;
        }
    };
    let tasks = tokio_util::task::TaskTracker::new();
    let mut next = 0usize;
    for r in requests {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep_until(origin + r.arrival) => {}
        }
        let endpoints = fleet.ready_endpoints();
        stats.sent.fetch_add(1, Ordering::Relaxed);
        lock(&stats.send_times).push(origin.elapsed().as_secs_f64());
        if endpoints.is_empty() {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            lock(&stats.first_failure).get_or_insert_with(|| "no ready replica".to_owned());
            continue;
        }
        let endpoint = endpoints[next % endpoints.len()].clone();
        next = next.wrapping_add(1);
        let body = serde_json::json!({
            "model": settings.model,
            "prompt": crate::loadtest::client::prompt_text(r.prompt_tokens),
            "max_tokens": r.output_tokens,
            "min_tokens": r.output_tokens,
            "ignore_eos": true,
            "temperature": 0.0,
            "stream": false,
        })
        .to_string();
        let client = client.clone();
        let stats = stats.clone();
        let stop = stop.clone();
        stats.in_flight.fetch_add(1, Ordering::Relaxed);
        endpoint.in_flight.fetch_add(1, Ordering::Relaxed);
        tasks.spawn(async move {
            let started = Instant::now();
            let url = format!("{}/v1/completions", endpoint.base_url);
            let call = async {
                let response = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .map_err(|e| format!("{url}: {e}"))?;
                let status = response.status();
                let text = response
                    .bytes()
                    .await
                    .map_err(|e| format!("{url}: reading the answer: {e}"))?;
                if status.is_success() {
                    Ok(())
                } else {
                    Err(format!(
                        "{url}: status {status}: {}",
                        String::from_utf8_lossy(&text[..text.len().min(200)])
                    ))
                }
            };
            let result = tokio::select! {
                r = call => Some(r),
                _ = stop.cancelled() => None,
            };
            endpoint.in_flight.fetch_sub(1, Ordering::Relaxed);
            match result {
                // Still unanswered when the demo stopped: counted as unfinished.
                None => return,
                Some(Ok(())) => {
                    let latency = started.elapsed().as_secs_f64();
                    let at = origin.elapsed().as_secs_f64();
                    lock(&stats.answers).push((at, latency));
                }
                Some(Err(message)) => {
                    stats.failed.fetch_add(1, Ordering::Relaxed);
                    lock(&stats.first_failure).get_or_insert(message);
                }
            }
            stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        });
    }
    tasks.close();
    tasks.wait().await;
}
