//! The demo's run: start everything, play the story, sample, stop, summarise.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::fleet::{self, Fleet, FleetOptions};
use super::keda::KedaHpa;
use super::load;
use super::settings::{NAME, NAMESPACE, Settings, print_intro, settings_json};
use super::summary::{self, FleetEvent, RequestTotals, Sample, ScaleEvent, Summary};
use super::tasks::{LoadStats, autoscale, lock, send_load};
use super::view::{self, View};
use vllm_emulator::RequestShape;
use vllm_keda_service::serve::ServeOptions;

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
    let server = vllm_keda_service::serve::start(grpc, http, options).await?;
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
            reason: decision.map(|d| vllm_keda_service::control::reason_label(d.reason)),
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
