//! The server-side view during a load test: scrape every pod's `/metrics` on an interval and
//! keep the queue depth, running requests, KV-cache usage and the windowed server histograms.
//!
//! Owns: the scrape loop of the load test and turning its samples into a step's
//! [`ServerStep`]. Does not own: fetching (see [`vllm_keda_service::scrape`]) or parsing and signal
//! maths (the core's [`Scaler`], which the control loop and the simulator call too).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::verdict::{Percentiles, QueueStats, ServerStep};
use vllm_keda_core::policy::PolicyConfig;
use vllm_keda_core::signals::{FleetSignals, Quantiles, SignalSettings};
use vllm_keda_core::{Scaler, ScrapeRound, TargetFailure};
use vllm_keda_service::scrape::{ScrapeSettings, Scraper};

/// One scrape round.
#[derive(Debug, Clone, PartialEq)]
pub struct MonitorSample {
    /// Since the start of the test.
    pub at: Duration,
    /// Pods that answered.
    pub pods_healthy: usize,
    /// Fleet signals computed at `at` (`None` when no pod answered).
    pub signals: Option<FleetSignals>,
    /// The first scrape error of the round, if any (for the report).
    pub error: Option<String>,
}

/// Scrape samples of a run, shared with the progress line and the report.
#[derive(Debug, Default)]
pub struct MonitorLog {
    samples: Mutex<Vec<MonitorSample>>,
}

impl MonitorLog {
    /// A copy of every sample.
    pub fn samples(&self) -> Vec<MonitorSample> {
        self.lock().clone()
    }
    /// The latest sample.
    pub fn latest(&self) -> Option<MonitorSample> {
        self.lock().last().cloned()
    }
    fn push(&self, sample: MonitorSample) {
        self.lock().push(sample);
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<MonitorSample>> {
        self.samples.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Scrapes `urls` every `interval` until cancelled, computing signals with a latency window of
/// `window` (the step length, so a sample at a step's end covers that step).
pub async fn run_monitor(
    urls: Vec<String>,
    interval: Duration,
    window: Duration,
    origin: Instant,
    log: Arc<MonitorLog>,
    cancel: CancellationToken,
) {
    if urls.is_empty() {
        return;
    }
    let scraper = Scraper::new(ScrapeSettings {
        timeout: interval.max(Duration::from_millis(500)),
        ..ScrapeSettings::loopback()
    });
    // Only the signals are read; the policy (the defaults) decides nothing here.
    let mut fleet = Scaler::with_settings(
        SignalSettings {
            latency_window: window,
            ..SignalSettings::default()
        },
        PolicyConfig::default(),
    );
    let mut ticker = tokio::time::interval_at(origin, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = cancel.cancelled() => return,
        }
        let bodies = scraper.scrape_all(&urls).await;
        let now = origin.elapsed();
        let round = ScrapeRound::parse(bodies.into_iter().map(|b| (b.url, b.result)), [], None);
        let error = round.pods.iter().find_map(|(url, outcome)| match outcome {
            Ok(_) => None,
            Err(TargetFailure::Fetch(e)) => Some(format!("{url}: {e}")),
            Err(TargetFailure::Parse(e)) => Some(format!("{url}: {e}")),
            Err(TargetFailure::Invalid(e)) => Some(format!("{url}: {e}")),
        });
        let healthy = round.healthy_pods();
        fleet.record(now, round);
        let signals = (healthy > 0).then(|| fleet.signals(now));
        log.push(MonitorSample {
            at: now,
            pods_healthy: healthy,
            signals,
            error,
        });
    }
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn max(v: &[f64]) -> Option<f64> {
    v.iter().copied().max_by(f64::total_cmp)
}

fn percentiles(q: &Quantiles) -> Percentiles {
    Percentiles {
        p50: q.p50,
        p95: q.p95,
        p99: q.p99,
    }
}

/// The server view of the load window `[start, end)` followed by a rest `[end, rest_end)`;
/// `None` when no scrape in the window answered.
pub fn server_step(
    samples: &[MonitorSample],
    start: Duration,
    end: Duration,
    rest_end: Duration,
) -> Option<ServerStep> {
    let in_window: Vec<(&MonitorSample, &FleetSignals)> = samples
        .iter()
        .filter(|s| s.at >= start && s.at <= end)
        .filter_map(|s| s.signals.as_ref().map(|sig| (s, sig)))
        .collect();
    if in_window.is_empty() {
        return None;
    }
    let queue: Vec<f64> = in_window.iter().map(|(_, s)| s.fleet.queue_depth).collect();
    let middle = start + (end - start) / 2;
    let second_half: Vec<f64> = in_window
        .iter()
        .filter(|(m, _)| m.at >= middle)
        .map(|(_, s)| s.fleet.queue_depth)
        .collect();
    let running: Vec<f64> = in_window.iter().map(|(_, s)| s.fleet.running).collect();
    let kv: Vec<f64> = in_window
        .iter()
        .filter_map(|(_, s)| s.fleet.kv_cache_usage.max)
        .collect();
    let after_rest = samples
        .iter()
        .filter(|s| s.at > end && s.at <= rest_end)
        .filter_map(|s| s.signals.as_ref())
        .next_back()
        .map(|s| s.fleet.queue_depth);
    // Windowed histograms and rates: the last sample of the load window covers the step.
    let (_, last) = in_window[in_window.len() - 1];
    let pods = in_window
        .iter()
        .map(|(m, _)| m.pods_healthy as f64)
        .sum::<f64>()
        / in_window.len() as f64;
    Some(ServerStep {
        pods_healthy: pods.round() as usize,
        queue: QueueStats {
            samples: in_window.len(),
            mean: mean(&queue),
            max: max(&queue),
            second_half_mean: mean(&second_half).or(mean(&queue)),
            at_end: queue.last().copied(),
            after_rest,
        },
        running_mean: mean(&running),
        running_max: max(&running),
        kv_usage_mean: mean(&kv),
        kv_usage_max: max(&kv),
        ttft: percentiles(&last.fleet.ttft_seconds),
        itl: percentiles(&last.fleet.itl_seconds),
        e2e: percentiles(&last.fleet.e2e_latency_seconds),
        requests_per_second: last.fleet.requests_per_second,
        prompt_tokens_per_second: last.fleet.prompt_tokens_per_second,
        generation_tokens_per_second: last.fleet.generation_tokens_per_second,
    })
}
