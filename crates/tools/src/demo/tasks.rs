//! The demo's background tasks: KEDA's polling loop and the HPA's sync loop, and the clients
//! that send the load.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::fleet::DemoFleet;
use super::keda::KedaHpa;
use super::settings::Settings;

/// Client-side counts of the load.
#[derive(Debug, Default)]
pub(super) struct LoadStats {
    /// Requests sent.
    pub(super) sent: AtomicU64,
    /// Requests that failed.
    pub(super) failed: AtomicU64,
    /// Requests sent and not answered.
    pub(super) in_flight: AtomicUsize,
    /// Send times (seconds since the story's start), in order.
    pub(super) send_times: Mutex<Vec<f64>>,
    /// Answer times and latencies of answered requests.
    pub(super) answers: Mutex<Vec<(f64, f64)>>,
    /// The first failure's message, for the log.
    pub(super) first_failure: Mutex<Option<String>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// KEDA's polling loop and the HPA's sync loop over one connection, as KEDA shares one.
#[allow(clippy::too_many_arguments)]
pub(super) async fn autoscale(
    mut keda: KedaHpa,
    fleet: DemoFleet,
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
pub(super) async fn send_load(
    requests: Vec<crate::trace::TraceRequest>,
    fleet: DemoFleet,
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
