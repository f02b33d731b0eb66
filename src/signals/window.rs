//! Per-pod scrape history in a bounded ring, and the aggregation over healthy pods.
//!
//! Owns: which two samples a window compares (the one at or just before `now - window`, else
//! the oldest kept, and the latest), restart detection between consecutive samples, health
//! (a failed scrape makes a pod unknown, never zero load), and fleet sums/merges. Does not own:
//! what a body means (see `snapshot`) or the quantile math (see `histogram`).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::gpu::{self, GpuHistory, GpuSnapshot};
use super::histogram::{Bucket, Histogram, merge_buckets, quantiles_of};
use super::snapshot::PodSnapshot;
use super::{FleetSignals, MaxMean, PodSignals, SignalSet, SignalSettings};

/// Hard cap on kept samples per pod (a 1 s scrape interval with a 300 s window needs 301).
const MAX_ENTRIES_PER_POD: usize = 1024;

/// Histograms kept per sample: e2e, TTFT, ITL, queue time, iteration tokens.
const E2E: usize = 0;
const TTFT: usize = 1;
const ITL: usize = 2;
const QUEUE: usize = 3;
const ITERATION: usize = 4;
type Hists = [Option<Histogram>; 5];

/// The counters of one sample (small: kept for the whole preemption window).
#[derive(Debug, Clone, Default)]
struct Counters {
    preemptions: Option<f64>,
    prompt: Option<f64>,
    generation: Option<f64>,
    success: Vec<(String, f64)>,
}

#[derive(Debug, Clone)]
struct Entry {
    at: Duration,
    counters: Counters,
    /// Full histograms, dropped once the sample is older than the latency baseline.
    hists: Option<Box<Hists>>,
    /// A restart happened between the previous sample and this one.
    restart_before: bool,
}

/// Values of the latest successful scrape that are not compared across samples.
#[derive(Debug, Clone, Default)]
struct Latest {
    waiting: Option<f64>,
    running: Option<f64>,
    kv_max: Option<f64>,
    kv_mean: Option<f64>,
    process_start_time_seconds: Option<f64>,
    created_min_seconds: Option<f64>,
}

#[derive(Debug, Clone, Default)]
struct PodHistory {
    healthy: bool,
    entries: VecDeque<Entry>,
    latest: Latest,
    /// Time of the newest kept sample that follows a restart.
    last_restart_at: Option<Duration>,
}

/// Per-pod history for a fleet, and the aggregation over it.
#[derive(Debug, Clone, Default)]
pub struct FleetWindow {
    settings: SignalSettings,
    pods: BTreeMap<String, PodHistory>,
    gpu_targets: BTreeMap<String, GpuHistory>,
}

impl FleetWindow {
    /// A window with these settings.
    pub fn new(settings: SignalSettings) -> Self {
        Self {
            settings,
            pods: BTreeMap::new(),
            gpu_targets: BTreeMap::new(),
        }
    }

    /// The settings in use.
    pub fn settings(&self) -> &SignalSettings {
        &self.settings
    }

    /// Records one pod's scrape at `now`: `Some` when it succeeded, `None` when it failed
    /// (the pod becomes unknown, never zero load). A body with neither
    /// `vllm:num_requests_waiting` nor `vllm:num_requests_running` (not vLLM, or no series for
    /// the model filter) counts as failed too. Times must not go backwards per pod; a sample
    /// at or before the latest kept one replaces the newer ones.
    pub fn record(&mut self, now: Duration, pod: &str, snapshot: Option<PodSnapshot>) {
        let history = match self.pods.get_mut(pod) {
            Some(history) => history,
            None => self.pods.entry(pod.to_owned()).or_default(),
        };
        let snapshot = snapshot.filter(|s| s.waiting.is_some() || s.running.is_some());
        let Some(snapshot) = snapshot else {
            history.healthy = false;
            return;
        };
        if history.entries.back().is_some_and(|e| e.at >= now) {
            while history.entries.back().is_some_and(|e| e.at >= now) {
                history.entries.pop_back();
            }
            history.last_restart_at = history
                .entries
                .iter()
                .rev()
                .find(|e| e.restart_before)
                .map(|e| e.at);
        }
        let restart_before = history
            .entries
            .back()
            .is_some_and(|prev| restarted(prev, &history.latest, &snapshot));
        let PodSnapshot {
            waiting,
            running,
            kv_cache_usage_max,
            kv_cache_usage_mean,
            preemptions_total,
            prompt_tokens_total,
            generation_tokens_total,
            request_success_total,
            e2e_latency,
            ttft,
            itl,
            queue_time,
            iteration_tokens,
            process_start_time_seconds,
            created_min_seconds,
            ..
        } = snapshot;
        history.latest = Latest {
            waiting,
            running,
            kv_max: kv_cache_usage_max,
            kv_mean: kv_cache_usage_mean,
            process_start_time_seconds,
            created_min_seconds,
        };
        if restart_before {
            history.last_restart_at = Some(now);
        }
        history.entries.push_back(Entry {
            at: now,
            counters: Counters {
                preemptions: preemptions_total,
                prompt: prompt_tokens_total,
                generation: generation_tokens_total,
                success: request_success_total.into_iter().collect(),
            },
            hists: Some(Box::new([
                e2e_latency,
                ttft,
                itl,
                queue_time,
                iteration_tokens,
            ])),
            restart_before,
        });
        history.healthy = true;
        prune(&mut history.entries, now, &self.settings);
    }

    /// Records one DCGM exporter scrape at `now` (`None` when it failed).
    pub fn record_gpu(&mut self, now: Duration, target: &str, snapshot: Option<GpuSnapshot>) {
        let history = match self.gpu_targets.get_mut(target) {
            Some(history) => history,
            None => self.gpu_targets.entry(target.to_owned()).or_default(),
        };
        history.record(now, snapshot, self.settings.latency_window);
    }

    /// Forgets pods not in `pods` (gone from discovery).
    pub fn retain_pods(&mut self, pods: &[String]) {
        self.pods.retain(|pod, _| pods.iter().any(|p| p == pod));
    }

    /// Forgets DCGM targets not in `targets`.
    pub fn retain_gpu_targets(&mut self, targets: &[String]) {
        self.gpu_targets
            .retain(|target, _| targets.iter().any(|t| t == target));
    }

    /// Signals at `now`.
    pub fn compute(&self, now: Duration) -> FleetSignals {
        let mut fleet = FleetAccumulator::default();
        let mut pods = Vec::with_capacity(self.pods.len());
        for (name, history) in &self.pods {
            let (signals, reset_in_window) = match history.entries.back() {
                Some(_) if history.healthy => {
                    let pod = PodCompute::new(history, now, &self.settings);
                    let signals = pod.signals(&history.latest);
                    fleet.add(&pod, &history.latest);
                    (signals, pod.reset_in_window)
                }
                _ => (SignalSet::default(), false),
            };
            pods.push(PodSignals {
                pod: name.clone(),
                healthy: history.healthy && !history.entries.is_empty(),
                signals,
                reset_in_window,
                gpu: None,
            });
        }
        let pods_healthy = pods.iter().filter(|p| p.healthy).count();
        let gpu = self.compute_gpu(now, &mut pods);
        FleetSignals {
            at: now,
            pods_total: pods.len(),
            pods_healthy,
            fleet: fleet.finish(),
            gpu,
            pods,
        }
    }

    fn compute_gpu(&self, now: Duration, pods: &mut [PodSignals]) -> Option<super::GpuSignals> {
        let devices: Vec<gpu::DeviceReading<'_>> = self
            .gpu_targets
            .values()
            .flat_map(|history| history.readings(now, self.settings.latency_window))
            .collect();
        if devices.is_empty() {
            return None;
        }
        let matched: Vec<Option<usize>> = devices
            .iter()
            .map(|reading| {
                reading
                    .device
                    .pod
                    .as_deref()
                    .and_then(|label| pods.iter().position(|p| gpu::pod_matches(&p.pod, label)))
            })
            .collect();
        for (index, pod) in pods.iter_mut().enumerate() {
            let own: Vec<&gpu::DeviceReading<'_>> = devices
                .iter()
                .zip(&matched)
                .filter(|(_, m)| **m == Some(index))
                .map(|(d, _)| d)
                .collect();
            if !own.is_empty() {
                pod.gpu = Some(gpu::aggregate(own));
            }
        }
        // When pod names can be matched, only the vLLM pods' GPUs count; when they cannot
        // (targets are IPs), every GPU the configured exporters report counts.
        let any_matched = matched.iter().any(Option::is_some);
        let fleet_devices: Vec<&gpu::DeviceReading<'_>> = devices
            .iter()
            .zip(&matched)
            .filter(|(_, m)| !any_matched || m.is_some())
            .map(|(d, _)| d)
            .collect();
        Some(gpu::aggregate(fleet_devices))
    }
}

/// Drops samples no window needs and histograms older than the latency baseline.
fn prune(entries: &mut VecDeque<Entry>, now: Duration, settings: &SignalSettings) {
    let longest = settings.latency_window.max(settings.preemption_window);
    if let Some(cutoff) = now.checked_sub(longest) {
        // Keep one sample at or before the cutoff: it is the baseline.
        while entries.len() >= 2 && entries[1].at <= cutoff {
            entries.pop_front();
        }
    }
    while entries.len() > MAX_ENTRIES_PER_POD {
        entries.pop_front();
    }
    // Histograms are dropped oldest first, so the ones still held form a suffix: walk back
    // from the baseline only until the first already-dropped sample.
    let latency_base = baseline(entries, now, settings.latency_window);
    for entry in entries.range_mut(..latency_base).rev() {
        if entry.hists.take().is_none() {
            break;
        }
    }
}

/// Index of the sample at or just before `now - window`, else the oldest kept.
fn baseline(entries: &VecDeque<Entry>, now: Duration, window: Duration) -> usize {
    match now.checked_sub(window) {
        Some(cutoff) => entries
            .partition_point(|e| e.at <= cutoff)
            .saturating_sub(1),
        None => 0,
    }
}

/// Whether the process behind `snapshot` restarted since `prev`: a restart marker changed, a
/// counter or bucket went down, or a histogram's `le` set changed.
fn restarted(prev: &Entry, latest: &Latest, snapshot: &PodSnapshot) -> bool {
    let changed = |a: Option<f64>, b: Option<f64>| matches!((a, b), (Some(a), Some(b)) if a != b);
    let went_down = |a: Option<f64>, b: Option<f64>| matches!((a, b), (Some(a), Some(b)) if b < a);
    if changed(
        latest.process_start_time_seconds,
        snapshot.process_start_time_seconds,
    ) || changed(latest.created_min_seconds, snapshot.created_min_seconds)
    {
        return true;
    }
    let c = &prev.counters;
    if went_down(c.preemptions, snapshot.preemptions_total)
        || went_down(c.prompt, snapshot.prompt_tokens_total)
        || went_down(c.generation, snapshot.generation_tokens_total)
    {
        return true;
    }
    if c.success.iter().any(|(reason, before)| {
        snapshot
            .request_success_total
            .get(reason)
            .is_some_and(|now| now < before)
    }) {
        return true;
    }
    let Some(hists) = &prev.hists else {
        return false;
    };
    let new: [&Option<Histogram>; 5] = [
        &snapshot.e2e_latency,
        &snapshot.ttft,
        &snapshot.itl,
        &snapshot.queue_time,
        &snapshot.iteration_tokens,
    ];
    hists
        .iter()
        .zip(new)
        .any(|(before, now)| match (before, now) {
            (Some(before), Some(now)) => !now.same_layout(before) || now.decreased_from(before),
            _ => false,
        })
}

/// One healthy pod's deltas at `now`.
struct PodCompute {
    /// Seconds between the latency baseline and the latest sample (when a delta exists).
    latency_seconds: Option<f64>,
    hists: Hists,
    prompt: Option<f64>,
    generation: Option<f64>,
    success: Vec<(String, f64)>,
    success_total: Option<f64>,
    preemptions_per_second: Option<f64>,
    reset_in_window: bool,
}

impl PodCompute {
    fn new(history: &PodHistory, now: Duration, settings: &SignalSettings) -> Self {
        let entries = &history.entries;
        let last_index = entries.len() - 1;
        let last = &entries[last_index];
        let mut out = PodCompute {
            latency_seconds: None,
            hists: Default::default(),
            prompt: None,
            generation: None,
            success: Vec::new(),
            success_total: None,
            preemptions_per_second: None,
            reset_in_window: false,
        };
        // A restart lies inside the window when a sample after the baseline follows one.
        let spans_restart = |base: usize| {
            history
                .last_restart_at
                .is_some_and(|at| at > entries[base].at)
        };

        let base_index = baseline(entries, now, settings.latency_window);
        if base_index < last_index {
            if spans_restart(base_index) {
                out.reset_in_window = true;
            } else {
                let base = &entries[base_index];
                let seconds = (last.at - base.at).as_secs_f64();
                out.latency_seconds = Some(seconds);
                let delta = |a: Option<f64>, b: Option<f64>| match (a, b) {
                    (Some(then), Some(now)) if now >= then => Some(now - then),
                    _ => None,
                };
                out.prompt = delta(base.counters.prompt, last.counters.prompt);
                out.generation = delta(base.counters.generation, last.counters.generation);
                for (reason, now_value) in &last.counters.success {
                    let then = base.counters.success.iter().find(|(r, _)| r == reason);
                    if let Some(d) = delta(then.map(|(_, v)| *v), Some(*now_value)) {
                        out.success.push((reason.clone(), d));
                    }
                }
                if !out.success.is_empty() {
                    out.success_total = Some(out.success.iter().map(|(_, d)| d).sum());
                }
                // The baseline's histograms may be gone when `now` is older than the last
                // `record`; the next sample that still has them is the closest stand-in.
                let hist_base = entries
                    .range(base_index..last_index)
                    .find_map(|entry| entry.hists.as_deref());
                if let (Some(then), Some(now)) = (hist_base, last.hists.as_deref()) {
                    for (slot, (then, now)) in out.hists.iter_mut().zip(then.iter().zip(now)) {
                        if let (Some(then), Some(now)) = (then, now) {
                            *slot = now.delta_since(then);
                        }
                    }
                }
                if out.success_total.is_none() {
                    out.success_total = out.hists[E2E].as_ref().map(|h| h.count);
                }
            }
        }

        let base_index = baseline(entries, now, settings.preemption_window);
        if base_index < last_index {
            if spans_restart(base_index) {
                out.reset_in_window = true;
            } else {
                let base = &entries[base_index];
                let seconds = (last.at - base.at).as_secs_f64();
                if let (Some(then), Some(now)) =
                    (base.counters.preemptions, last.counters.preemptions)
                {
                    if now >= then && seconds > 0.0 {
                        out.preemptions_per_second = Some((now - then) / seconds);
                    }
                }
            }
        }
        out
    }

    fn per_second(&self, delta: Option<f64>) -> Option<f64> {
        match (delta, self.latency_seconds) {
            (Some(delta), Some(seconds)) if seconds > 0.0 => Some(delta / seconds),
            _ => None,
        }
    }

    fn signals(&self, latest: &Latest) -> SignalSet {
        let quantiles = |i: usize| {
            self.hists[i]
                .as_ref()
                .map(|h| quantiles_of(&h.buckets))
                .unwrap_or_default()
        };
        SignalSet {
            queue_depth: latest.waiting.unwrap_or(0.0),
            running: latest.running.unwrap_or(0.0),
            e2e_latency_seconds: quantiles(E2E),
            ttft_seconds: quantiles(TTFT),
            itl_seconds: quantiles(ITL),
            queue_time_seconds: quantiles(QUEUE),
            requests_per_second: self.per_second(self.success_total),
            requests_finished_in_window: self.success_total.unwrap_or(0.0),
            finished_per_second_by_reason: self
                .success
                .iter()
                .filter_map(|(reason, d)| Some((reason.clone(), self.per_second(Some(*d))?)))
                .collect(),
            kv_cache_usage: MaxMean {
                max: latest.kv_max,
                mean: latest.kv_mean,
            },
            preemptions_per_second: self.preemptions_per_second,
            prompt_tokens_per_second: self.per_second(self.prompt),
            generation_tokens_per_second: self.per_second(self.generation),
            batch_tokens_per_step: self.hists[ITERATION]
                .as_ref()
                .filter(|h| h.count > 0.0)
                .map(|h| h.sum / h.count),
        }
    }
}

/// Fleet sums, built pod by pod.
#[derive(Default)]
struct FleetAccumulator {
    queue_depth: f64,
    running: f64,
    buckets: [Vec<Bucket>; 4],
    requests_per_second: Option<f64>,
    requests_finished: f64,
    by_reason: BTreeMap<String, f64>,
    kv: Vec<f64>,
    preemptions_per_second: Option<f64>,
    prompt_per_second: Option<f64>,
    generation_per_second: Option<f64>,
    iteration_sum: f64,
    iteration_count: f64,
}

fn add_opt(into: &mut Option<f64>, value: Option<f64>) {
    if let Some(value) = value {
        *into = Some(into.unwrap_or(0.0) + value);
    }
}

impl FleetAccumulator {
    fn add(&mut self, pod: &PodCompute, latest: &Latest) {
        self.queue_depth += latest.waiting.unwrap_or(0.0);
        self.running += latest.running.unwrap_or(0.0);
        for (into, hist) in self.buckets.iter_mut().zip(&pod.hists) {
            if let Some(hist) = hist {
                merge_buckets(into, &hist.buckets);
            }
        }
        add_opt(
            &mut self.requests_per_second,
            pod.per_second(pod.success_total),
        );
        self.requests_finished += pod.success_total.unwrap_or(0.0);
        for (reason, delta) in &pod.success {
            if let Some(rate) = pod.per_second(Some(*delta)) {
                match self.by_reason.get_mut(reason) {
                    Some(total) => *total += rate,
                    None => {
                        self.by_reason.insert(reason.clone(), rate);
                    }
                }
            }
        }
        if let Some(kv) = latest.kv_max {
            self.kv.push(kv);
        }
        add_opt(&mut self.preemptions_per_second, pod.preemptions_per_second);
        add_opt(&mut self.prompt_per_second, pod.per_second(pod.prompt));
        add_opt(
            &mut self.generation_per_second,
            pod.per_second(pod.generation),
        );
        if let Some(h) = &pod.hists[ITERATION] {
            self.iteration_sum += h.sum;
            self.iteration_count += h.count;
        }
    }

    fn finish(self) -> SignalSet {
        let [e2e, ttft, itl, queue] = &self.buckets;
        SignalSet {
            queue_depth: self.queue_depth,
            running: self.running,
            e2e_latency_seconds: quantiles_of(e2e),
            ttft_seconds: quantiles_of(ttft),
            itl_seconds: quantiles_of(itl),
            queue_time_seconds: quantiles_of(queue),
            requests_per_second: self.requests_per_second,
            requests_finished_in_window: self.requests_finished,
            finished_per_second_by_reason: self.by_reason,
            kv_cache_usage: MaxMean {
                max: self.kv.iter().copied().reduce(f64::max),
                mean: (!self.kv.is_empty())
                    .then(|| self.kv.iter().sum::<f64>() / self.kv.len() as f64),
            },
            preemptions_per_second: self.preemptions_per_second,
            prompt_tokens_per_second: self.prompt_per_second,
            generation_tokens_per_second: self.generation_per_second,
            batch_tokens_per_step: (self.iteration_count > 0.0)
                .then(|| self.iteration_sum / self.iteration_count),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(i: f64) -> PodSnapshot {
        let mut hist = Histogram::default();
        hist.add_bucket(1.0, i);
        hist.add_bucket(f64::INFINITY, i);
        hist.count = i;
        PodSnapshot {
            waiting: Some(1.0),
            preemptions_total: Some(i),
            e2e_latency: Some(hist),
            ..PodSnapshot::default()
        }
    }

    #[test]
    fn history_is_bounded_and_histograms_kept_only_for_the_latency_window() {
        let mut w = FleetWindow::new(SignalSettings::default());
        for t in 0..10_000u64 {
            w.record(Duration::from_secs(t), "a", Some(snapshot(t as f64)));
        }
        let entries = &w.pods["a"].entries;
        // The baseline at now - 300 s and the 300 samples after it.
        assert_eq!(entries.len(), 301);
        let with_hists = entries.iter().filter(|e| e.hists.is_some()).count();
        assert_eq!(with_hists, 61);
        let s = w.compute(Duration::from_secs(9_999));
        assert_eq!(s.fleet.preemptions_per_second, Some(1.0));
        assert_eq!(s.fleet.e2e_latency_seconds.p50, Some(0.5));
    }

    #[test]
    fn scraped_far_faster_than_the_window_stays_capped() {
        let mut w = FleetWindow::new(SignalSettings::default());
        for t in 0..5_000u64 {
            w.record(Duration::from_millis(t * 10), "a", Some(snapshot(t as f64)));
        }
        assert_eq!(w.pods["a"].entries.len(), MAX_ENTRIES_PER_POD);
    }
}
