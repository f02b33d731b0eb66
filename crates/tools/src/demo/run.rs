//! The demo's run: start everything, play the story, sample, stop, summarise.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::fleet::{self, DemoFleet, FleetOptions};
use super::keda::KedaHpa;
use super::load;
use super::settings::{NAME, NAMESPACE, Settings, print_intro, settings_json};
use super::summary::{self, FleetEvent, RequestTotals, Sample, ScaleEvent, Summary};
use super::tasks::{LoadStats, autoscale, lock, send_load};
use super::view::{self, View};
use crate::trace::TraceRequest;
use vllm_emulator::RequestShape;
use vllm_keda_service::control::Status;
use vllm_keda_service::serve::{ServeOptions, Server};

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Plays the story and returns its summary (files written).
pub async fn execute(settings: Settings) -> anyhow::Result<Summary> {
    let run_start = Instant::now();
    let out = create_output_dir(&settings)?;
    let hosts_file = out.join("hosts");
    let (capacity_rps, requests) = plan_load(&settings)?;
    let port = fleet::pick_port().await?;
    let (fleet, fleet_events) = start_fleet(&settings, port, &hosts_file).await?;
    let server = start_scaler(&hosts_file).await?;
    let metadata = settings.scaler_metadata(port, capacity_rps);
    print_intro(
        &settings,
        capacity_rps,
        &server,
        &hosts_file,
        requests.len(),
    );
    let keda = connect_keda(&server, &metadata, &settings).await?;

    let origin = Instant::now();
    let (tasks, log) = Tasks::start(keda, requests, &fleet, &settings, origin);
    let mut view = View::new(settings.live, if settings.quick { 2.0 } else { 5.0 });
    let mut recorder = Recorder::new(origin, fleet_events, log);
    watch(
        &settings,
        &server,
        &fleet,
        &tasks.stats,
        &mut recorder,
        &mut view,
    )
    .await;
    view.finish();
    let story_seconds = origin.elapsed().as_secs_f64();

    let counters = tasks.stop().await;
    let ending = stop_scaler_and_fleet(server, &fleet, &mut view).await;
    let requests = request_totals(&counters.stats, &settings, &mut view);
    let files = summary::Files {
        summary: out.join("summary.json"),
        plot: out.join("demo.svg"),
        timeline: out.join("timeline.csv"),
    };
    let Recorder {
        samples,
        scale_events,
        fleet_events,
        peak_ready,
        ..
    } = recorder;
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
        final_target_replicas: ending.final_target,
        final_ready_replicas: ending.final_ready,
        scale_events: scale_events.clone(),
        fleet_events,
        hpa_syncs: counters.hpa_syncs.load(Ordering::Relaxed),
        hpa_sync_errors: counters.hpa_errors.load(Ordering::Relaxed),
        keda_polls: counters.keda_polls.load(Ordering::Relaxed),
        requests,
        files,
    };
    write_files(&result, &samples, &scale_events, &settings)?;
    Ok(result)
}

/// Creates the output directory; returns it canonicalised (as given when that fails).
fn create_output_dir(settings: &Settings) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(&settings.out).with_context(|| {
        format!(
            "creating the output directory {} (pick another with --out)",
            settings.out.display()
        )
    })?;
    Ok(settings.out.canonicalize().unwrap_or(settings.out.clone()))
}

/// The load: the bundled trace, reshaped to the story. Returns one replica's capacity in
/// requests per second (for the trace's mean request) and the requests.
fn plan_load(settings: &Settings) -> anyhow::Result<(f64, Vec<TraceRequest>)> {
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
    Ok((capacity_rps, requests))
}

/// The replicas: one ready, the others started by the HPA. Returns the fleet and its events.
async fn start_fleet(
    settings: &Settings,
    port: u16,
    hosts_file: &Path,
) -> anyhow::Result<(DemoFleet, mpsc::UnboundedReceiver<fleet::Event>)> {
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let fleet = DemoFleet::new(
        FleetOptions {
            port,
            hosts_file: hosts_file.to_path_buf(),
            startup_delay: settings.startup_delay,
            drain_timeout: settings.drain_timeout,
            engine: settings.engine.clone(),
            model: settings.model.clone(),
        },
        events_tx,
    );
    fleet.start_ready(1).await?;
    Ok((fleet, events_rx))
}

/// The scaler, through the production code path, on loopback, resolving the Service's name
/// from `hosts_file`.
async fn start_scaler(hosts_file: &Path) -> anyhow::Result<Server> {
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the scaler's gRPC listener on 127.0.0.1")?;
    let http = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the scaler's HTTP listener on 127.0.0.1")?;
    let mut options = ServeOptions {
        shutdown_grace: Duration::from_secs(2),
        ..ServeOptions::loopback()
    };
    options.control.hosts_file = Some(hosts_file.to_path_buf());
    options.control.history_len = 100_000;
    vllm_keda_service::serve::start(grpc, http, options).await
}

/// KEDA and the HPA, connected to the scaler, after KEDA's first poll.
async fn connect_keda(
    server: &Server,
    metadata: &HashMap<String, String>,
    settings: &Settings,
) -> anyhow::Result<KedaHpa> {
    let mut keda = KedaHpa::connect(
        server.grpc_addr(),
        NAMESPACE,
        NAME,
        metadata.clone(),
        crate::keda::ours_hpa_spec(1, settings.max_replicas),
    )
    .await?;
    // KEDA polls once when the ScaledObject is created; the scaler starts its loop then.
    let _ = keda.poll().await;
    Ok(keda)
}

/// The background tasks: KEDA and the HPA, the clients sending the load, and their counts.
struct Tasks {
    stop: CancellationToken,
    autoscaler: JoinHandle<()>,
    sender: JoinHandle<()>,
    stats: Arc<LoadStats>,
    hpa_syncs: Arc<AtomicU64>,
    hpa_errors: Arc<AtomicU64>,
    keda_polls: Arc<AtomicU64>,
}

/// The counts of the stopped tasks.
struct Counters {
    stats: Arc<LoadStats>,
    hpa_syncs: Arc<AtomicU64>,
    hpa_errors: Arc<AtomicU64>,
    keda_polls: Arc<AtomicU64>,
}

impl Tasks {
    /// Starts them at `origin`; returns them and the receiver of KEDA's and the HPA's log lines.
    fn start(
        keda: KedaHpa,
        requests: Vec<TraceRequest>,
        fleet: &DemoFleet,
        settings: &Settings,
        origin: Instant,
    ) -> (Self, mpsc::UnboundedReceiver<(f64, String)>) {
        let stop = CancellationToken::new();
        let stats = Arc::new(LoadStats::default());
        let hpa_syncs = Arc::new(AtomicU64::new(0));
        let hpa_errors = Arc::new(AtomicU64::new(0));
        // KEDA's first poll has happened.
        let keda_polls = Arc::new(AtomicU64::new(1));
        let (log_tx, log_rx) = mpsc::unbounded_channel::<(f64, String)>();
        let autoscaler = tokio::spawn(autoscale(
            keda,
            fleet.clone(),
            settings.clone(),
            origin,
            stop.clone(),
            hpa_syncs.clone(),
            hpa_errors.clone(),
            keda_polls.clone(),
            log_tx,
        ));
        let sender = tokio::spawn(send_load(
            requests,
            fleet.clone(),
            settings.clone(),
            origin,
            stop.clone(),
            stats.clone(),
        ));
        let tasks = Self {
            stop,
            autoscaler,
            sender,
            stats,
            hpa_syncs,
            hpa_errors,
            keda_polls,
        };
        (tasks, log_rx)
    }

    /// Stops the load and KEDA/HPA and waits for both.
    async fn stop(self) -> Counters {
        self.stop.cancel();
        let _ = self.sender.await;
        let _ = self.autoscaler.await;
        Counters {
            stats: self.stats,
            hpa_syncs: self.hpa_syncs,
            hpa_errors: self.hpa_errors,
            keda_polls: self.keda_polls,
        }
    }
}

/// What the run recorded: samples, scale and fleet events, and the log lines still to read.
struct Recorder {
    origin: Instant,
    origin_unix: f64,
    fleet_log: mpsc::UnboundedReceiver<fleet::Event>,
    task_log: mpsc::UnboundedReceiver<(f64, String)>,
    samples: Vec<Sample>,
    scale_events: Vec<ScaleEvent>,
    fleet_events: Vec<FleetEvent>,
    seen_history: usize,
    last_target: Option<u32>,
    peak_ready: u32,
}

impl Recorder {
    fn new(
        origin: Instant,
        fleet_log: mpsc::UnboundedReceiver<fleet::Event>,
        task_log: mpsc::UnboundedReceiver<(f64, String)>,
    ) -> Self {
        Self {
            origin,
            origin_unix: unix_now(),
            fleet_log,
            task_log,
            samples: Vec::new(),
            scale_events: Vec::new(),
            fleet_events: Vec::new(),
            seen_history: 0,
            last_target: None,
            peak_ready: 0,
        }
    }

    /// The log lines since the last call from the replicas, the HPA and KEDA (kept as fleet
    /// events).
    fn take_log_lines(&mut self) -> Vec<(f64, String)> {
        let mut lines: Vec<(f64, String)> = Vec::new();
        while let Ok(e) = self.fleet_log.try_recv() {
            let at = e.at.saturating_duration_since(self.origin).as_secs_f64();
            lines.push((at, e.what.clone()));
            self.fleet_events.push(FleetEvent {
                t_seconds: at,
                what: e.what,
            });
        }
        while let Ok((at, what)) = self.task_log.try_recv() {
            lines.push((at, what.clone()));
            self.fleet_events.push(FleetEvent {
                t_seconds: at,
                what,
            });
        }
        lines
    }

    /// The scaler's target changes in `status`'s history since the last call (kept as scale
    /// events), as log lines.
    fn take_scale_lines(&mut self, status: &Status) -> Vec<(f64, String)> {
        let mut lines = Vec::new();
        for record in status.history.iter().skip(self.seen_history) {
            let target = record.decision.target_replicas;
            if let Some(previous) = self.last_target.filter(|p| *p != target) {
                let e = ScaleEvent {
                    t_seconds: (record.first_unix_seconds - self.origin_unix).max(0.0),
                    direction: if target > previous { "out" } else { "in" },
                    from: previous,
                    to: target,
                    reason: vllm_keda_service::control::reason_label(record.decision.reason),
                    explanation: record.decision.explanation.clone(),
                };
                lines.push((
                    e.t_seconds,
                    format!(
                        "scaler target {} -> {} ({}): {}",
                        e.from, e.to, e.reason, e.explanation
                    ),
                ));
                self.scale_events.push(e);
            }
            self.last_target = Some(target);
        }
        self.seen_history = status.history.len();
        lines
    }
}

/// Samples, logs and draws every second until the story ends, then for a short tail while
/// requests are unanswered; or until Ctrl-C.
async fn watch(
    settings: &Settings,
    server: &Server,
    fleet: &DemoFleet,
    stats: &LoadStats,
    recorder: &mut Recorder,
    view: &mut View,
) {
    let story_end = settings.story.total();
    let tail_end = story_end + settings.tail;
    let mut tick = tokio::time::interval(Duration::from_millis(1000));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let interrupted = cancel_on_ctrl_c();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = interrupted.cancelled() => {
                view.event("interrupted: stopping and writing what was recorded so far");
                break;
            }
        }
        let t = recorder.origin.elapsed();
        // This second's log lines from the replicas, the HPA and the scaler, in time order.
        let mut lines = recorder.take_log_lines();
        let status = server.loops().find(NAMESPACE, NAME).map(|so| so.latest());
        if let Some(status) = &status {
            lines.extend(recorder.take_scale_lines(status));
        }
        lines.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (at, what) in &lines {
            view.event(&format!("{at:>6.1} s  {what}"));
        }
        let counts = fleet.counts();
        recorder.peak_ready = recorder.peak_ready.max(counts.ready);
        let sample = sample_at(t, settings, stats, status.as_deref(), counts);
        let decision = status.as_ref().and_then(|s| s.decision.as_ref());
        view.status(
            &sample,
            &view::Context {
                story_seconds: story_end.as_secs_f64(),
                capacity_multiple: if t >= story_end {
                    0.0
                } else {
                    settings.story.at(t).1
                },
                slo_seconds: settings.latency_slo_seconds,
                max_replicas: settings.max_replicas,
                starting: counts.starting,
                draining: counts.draining,
                explanation: decision.map(|d| d.explanation.as_str()),
            },
        );
        recorder.samples.push(sample);
        if t >= tail_end || (t >= story_end && stats.in_flight.load(Ordering::Relaxed) == 0) {
            break;
        }
    }
}

/// A token cancelled by Ctrl-C.
fn cancel_on_ctrl_c() -> CancellationToken {
    let interrupted = CancellationToken::new();
    let on_signal = interrupted.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_signal.cancel();
        }
    });
    interrupted
}

/// One sample at `t`: the load over the last 3 s, the scaler's signals and decision, the
/// fleet's counts.
fn sample_at(
    t: Duration,
    settings: &Settings,
    stats: &LoadStats,
    status: Option<&Status>,
    counts: fleet::Counts,
) -> Sample {
    let t_seconds = t.as_secs_f64();
    let signals = status.and_then(|s| s.signals.as_ref());
    let decision = status.and_then(|s| s.decision.as_ref());
    let (phase, _) = settings.story.at(t);
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
    Sample {
        t_seconds,
        phase: if t >= settings.story.total() {
            "tail"
        } else {
            phase
        },
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
        reason: decision.map(|d| vllm_keda_service::control::reason_label(d.reason)),
    }
}

/// The scaler's last target and the ready replicas, read before both stop.
struct Ending {
    final_target: u32,
    final_ready: u32,
}

/// Reads the final state, then stops the scaler and the replicas.
async fn stop_scaler_and_fleet(server: Server, fleet: &DemoFleet, view: &mut View) -> Ending {
    let final_status = server.loops().find(NAMESPACE, NAME).map(|so| so.latest());
    let final_target = final_status
        .as_ref()
        .and_then(|s| s.decision.as_ref())
        .map_or(1, |d| d.target_replicas);
    let final_ready = fleet.counts().ready;
    if let Err(error) = server.shutdown().await {
        view.event(&format!("the scaler stopped with an error: {error:#}"));
    }
    fleet.shutdown().await;
    Ending {
        final_target,
        final_ready,
    }
}

/// The client side's totals (the first failure goes to the log).
fn request_totals(stats: &LoadStats, settings: &Settings, view: &mut View) -> RequestTotals {
    let latencies: Vec<f64> = lock(&stats.answers).iter().map(|(_, l)| *l).collect();
    let sent = stats.sent.load(Ordering::Relaxed);
    let failed = stats.failed.load(Ordering::Relaxed);
    let unfinished = stats.in_flight.load(Ordering::Relaxed) as u64;
    if let Some(first) = lock(&stats.first_failure).clone() {
        view.event(&format!("first failed request: {first}"));
    }
    RequestTotals::from_latencies(
        latencies,
        sent,
        failed,
        unfinished,
        settings.latency_slo_seconds,
    )
}

/// Writes the plot, the timeline and `summary.json` to `result.files`.
fn write_files(
    result: &Summary,
    samples: &[Sample],
    scale_events: &[ScaleEvent],
    settings: &Settings,
) -> anyhow::Result<()> {
    let files = &result.files;
    let svg = summary::plot(
        samples,
        scale_events,
        settings.latency_slo_seconds,
        &settings.story,
    );
    std::fs::write(&files.plot, svg)
        .with_context(|| format!("writing {}", files.plot.display()))?;
    summary::write_timeline(&files.timeline, samples)
        .with_context(|| format!("writing {}", files.timeline.display()))?;
    let json = serde_json::to_string_pretty(result).context("encoding the summary")?;
    std::fs::write(&files.summary, json + "\n")
        .with_context(|| format!("writing {}", files.summary.display()))?;
    Ok(())
}

fn mean_u32(values: impl Iterator<Item = u32>) -> u32 {
    let (sum, n) = values.fold((0u64, 0u64), |(s, n), v| (s + u64::from(v), n + 1));
    sum.checked_div(n).map_or(1, |m| m.max(1) as u32)
}
