//! Per-pod scrape history in a bounded ring, and the aggregation over healthy pods.
//!
//! Owns: which two samples a window compares (the one at or just before `now - window`, else
//! the oldest kept, and the latest), restart detection between consecutive samples, health
//! (a failed scrape makes a pod unknown, never zero load), and fleet sums/merges. Does not own:
//! what a body means (see `snapshot`) or the quantile math (see `histogram`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use super::aggregate::{FleetAccumulator, PodCompute};
use super::gpu::{self, GpuHistory, GpuSnapshot};
use super::histogram::{Histogram, KeptHistogram};
use super::snapshot::PodSnapshot;
use super::{FleetSignals, PodSignals, SignalSet, SignalSettings};

/// Hard cap on kept samples per pod (a 1 s scrape interval with a 300 s window needs 301).
const MAX_ENTRIES_PER_POD: usize = 1024;

/// Full samples (histograms, token and request counters) kept per latency window at most:
/// scraped more often than `latency_window / 16`, the full samples in between are thinned, so
/// the latency window spans between 15/16 of its length and its length.
const FULL_SAMPLES_PER_WINDOW: u32 = 16;

/// Histograms kept per sample: e2e, TTFT, ITL, queue time, each request's time per output
/// token, iteration tokens. The latencies come first, in the fleet's order
/// ([`super::aggregate`] merges them across pods).
pub(super) const E2E: usize = 0;
pub(super) const TTFT: usize = 1;
pub(super) const ITL: usize = 2;
pub(super) const QUEUE: usize = 3;
pub(super) const REQUEST_TPOT: usize = 4;
pub(super) const ITERATION: usize = 5;
pub(super) type Hists = [Option<Histogram>; 6];
/// The same six as the window keeps them (bounds shared between a pod's samples).
pub(super) type KeptHists = [Option<KeptHistogram>; 6];

/// What only the latency window needs: dropped once a sample is older than its baseline.
#[derive(Debug, Clone, Default)]
pub(super) struct Detail {
    pub(super) prompt: Option<f64>,
    pub(super) generation: Option<f64>,
    /// `request_success_total` by reason, sorted by reason (from the snapshot's map).
    pub(super) success: Vec<(String, f64)>,
    pub(super) hists: KeptHists,
}

/// One sample. Samples older than the latency baseline shrink to a few words (time,
/// preemption counter, restart flag): the 300 s preemption window costs little.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) at: Duration,
    pub(super) preemptions: Option<f64>,
    pub(super) detail: Option<Box<Detail>>,
    /// A restart happened between the previous sample and this one.
    pub(super) restart_before: bool,
}

/// Values of the latest successful scrape that are not compared across samples.
#[derive(Debug, Clone, Default)]
pub(super) struct Latest {
    pub(super) waiting: Option<f64>,
    pub(super) running: Option<f64>,
    pub(super) kv_max: Option<f64>,
    pub(super) kv_mean: Option<f64>,
    pub(super) process_start_time_seconds: Option<f64>,
    pub(super) created_min_seconds: Option<f64>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct PodHistory {
    pub(super) healthy: bool,
    pub(super) entries: VecDeque<Entry>,
    pub(super) latest: Latest,
    /// Time of the newest kept sample that follows a restart.
    pub(super) last_restart_at: Option<Duration>,
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
        let Some(mut snapshot) = snapshot else {
            history.healthy = false;
            return;
        };
        let new_hists = take_hists(&mut snapshot);
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
            .is_some_and(|prev| restarted(prev, &history.latest, &snapshot, &new_hists));
        let PodSnapshot {
            waiting,
            running,
            kv_cache_usage_max,
            kv_cache_usage_mean,
            preemptions_total,
            prompt_tokens_total,
            generation_tokens_total,
            request_success_total,
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
        // The newest sample is always full: its bounds are shared when the layout holds.
        let previous = history.entries.back().and_then(|e| e.detail.as_deref());
        let mut hists = new_hists.into_iter().enumerate().map(|(i, h)| {
            h.map(|h| KeptHistogram::keep(h, previous.and_then(|p| p.hists[i].as_ref())))
        });
        let hists: KeptHists = std::array::from_fn(|_| hists.next().flatten());
        history.entries.push_back(Entry {
            at: now,
            preemptions: preemptions_total,
            detail: Some(Box::new(Detail {
                prompt: prompt_tokens_total,
                generation: generation_tokens_total,
                success: request_success_total.into_iter().collect(),
                hists,
            })),
            restart_before,
        });
        history.healthy = true;
        thin(
            &mut history.entries,
            self.settings.latency_window / FULL_SAMPLES_PER_WINDOW,
        );
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
        let keep: BTreeSet<&str> = pods.iter().map(String::as_str).collect();
        self.pods.retain(|pod, _| keep.contains(pod.as_str()));
    }

    /// Forgets DCGM targets not in `targets`.
    pub fn retain_gpu_targets(&mut self, targets: &[String]) {
        let keep: BTreeSet<&str> = targets.iter().map(String::as_str).collect();
        self.gpu_targets
            .retain(|target, _| keep.contains(target.as_str()));
    }

    /// When `pod`'s latest usable sample was taken, if it has one.
    pub fn latest_at(&self, pod: &str) -> Option<Duration> {
        self.pods.get(pod)?.entries.back().map(|e| e.at)
    }

    /// Signals at `now`.
    pub fn compute(&self, now: Duration) -> FleetSignals {
        let mut fleet = FleetAccumulator::default();
        let mut pods = Vec::with_capacity(self.pods.len());
        for (name, history) in &self.pods {
            // Stale data is not current: the pod is unknown, like a failed scrape.
            let current = history.healthy
                && history
                    .entries
                    .back()
                    .is_some_and(|e| e.at.saturating_add(self.settings.stale_after) >= now);
            let (signals, reset_in_window) = match history.entries.back() {
                Some(_) if current => {
                    let pod = PodCompute::new(history, now, &self.settings);
                    let signals = pod.signals(&history.latest);
                    fleet.add(&pod, &history.latest);
                    (signals, pod.reset_in_window)
                }
                _ => (SignalSet::default(), false),
            };
            pods.push(PodSignals {
                pod: name.clone(),
                healthy: current,
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
        let index = gpu::PodIndex::new(pods.iter().map(|p| p.pod.as_str()));
        let matched: Vec<Option<usize>> = devices
            .iter()
            .map(|reading| reading.device.pod.as_deref().and_then(|l| index.find(l)))
            .collect();
        // Each pod's own GPUs, grouped in one pass (never a scan of every GPU per pod).
        let mut own: Vec<Vec<&gpu::DeviceReading<'_>>> = vec![Vec::new(); pods.len()];
        for (device, m) in devices.iter().zip(&matched) {
            if let Some(at) = m {
                own[*at].push(device);
            }
        }
        for (pod, own) in pods.iter_mut().zip(own) {
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
    let latency_base = baseline(entries, now, settings.latency_window);
    for entry in entries.range_mut(..latency_base) {
        entry.detail = None;
    }
    // The ring doubles as it fills (151 samples of a 300 s window at 2 s sit in room for
    // 256); once the window holds steady, room for a quarter more is enough. Pods are many.
    let len = entries.len();
    if entries.capacity() > len + len / 2 + SPARE_ENTRIES {
        entries.shrink_to(len + len / 4 + SPARE_ENTRIES);
    }
}

/// Free room a pod's ring keeps at least before it is shrunk.
const SPARE_ENTRIES: usize = 8;

/// Keeps full samples at least `spacing` apart (the newest always stays full): the previous
/// newest loses its detail when the full sample before it is closer than `spacing`.
fn thin(entries: &mut VecDeque<Entry>, spacing: Duration) {
    let n = entries.len();
    if n < 3 {
        return;
    }
    let older = entries
        .range(..n - 2)
        .rev()
        .find(|e| e.detail.is_some())
        .map(|e| e.at);
    if older.is_some_and(|older| entries[n - 2].at.saturating_sub(older) < spacing) {
        entries[n - 2].detail = None;
    }
}

/// Index of the sample at or just before `now - window`, else the oldest kept.
pub(super) fn baseline(entries: &VecDeque<Entry>, now: Duration, window: Duration) -> usize {
    match now.checked_sub(window) {
        Some(cutoff) => entries
            .partition_point(|e| e.at <= cutoff)
            .saturating_sub(1),
        None => 0,
    }
}

/// Takes the snapshot's histograms out, in the window's order ([`E2E`] to [`ITERATION`]): the
/// one place that order is written.
fn take_hists(snapshot: &mut PodSnapshot) -> Hists {
    [
        snapshot.e2e_latency.take(),
        snapshot.ttft.take(),
        snapshot.itl.take(),
        snapshot.queue_time.take(),
        snapshot.request_tpot.take(),
        snapshot.iteration_tokens.take(),
    ]
}

/// Whether the process behind `snapshot` (whose histograms are `hists`, taken out by
/// [`take_hists`]) restarted since `prev`: a restart marker changed, a counter or bucket went
/// down, or a histogram's `le` set changed.
fn restarted(prev: &Entry, latest: &Latest, snapshot: &PodSnapshot, hists: &Hists) -> bool {
    let changed = |a: Option<f64>, b: Option<f64>| matches!((a, b), (Some(a), Some(b)) if a != b);
    let went_down = |a: Option<f64>, b: Option<f64>| matches!((a, b), (Some(a), Some(b)) if b < a);
    if changed(
        latest.process_start_time_seconds,
        snapshot.process_start_time_seconds,
    ) || changed(latest.created_min_seconds, snapshot.created_min_seconds)
    {
        return true;
    }
    if went_down(prev.preemptions, snapshot.preemptions_total) {
        return true;
    }
    let Some(c) = prev.detail.as_deref() else {
        return false;
    };
    if went_down(c.prompt, snapshot.prompt_tokens_total)
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
    c.hists
        .iter()
        .zip(hists)
        .any(|(before, now)| match (before, now) {
            (Some(before), Some(now)) => !before.same_layout_as(now) || before.decreased_to(now),
            _ => false,
        })
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
        // Full samples at least 3.75 s apart over the 60 s window: with samples 1 s apart,
        // every 4th second (15) plus the newest.
        let full = entries.iter().filter(|e| e.detail.is_some()).count();
        assert_eq!(full, 16, "{full} full samples");
        let s = w.compute(Duration::from_secs(9_999));
        assert_eq!(s.fleet.preemptions_per_second, Some(1.0));
        assert_eq!(s.fleet.e2e_latency_seconds.p50, Some(0.5));
        // The latency window spans between 15/16 of 60 s and 60 s.
        let finished = s.fleet.requests_finished_in_window;
        assert!((56.0..=60.0).contains(&finished), "{finished}");
        assert_eq!(s.fleet.requests_per_second, Some(1.0));
    }

    #[test]
    fn bounds_are_shared_per_layout_and_a_layout_change_gives_the_same_quantiles() {
        // Two layouts in turn, two samples each, in a 60 s window; the last sample a window
        // after the change, so the window starts at the change.
        let layout = |bounds: &[f64], n: f64| {
            let mut hist = Histogram::default();
            for (i, le) in bounds.iter().enumerate() {
                hist.add_bucket(*le, n * (i as f64 + 1.0));
            }
            hist.add_bucket(f64::INFINITY, n * (bounds.len() as f64 + 1.0));
            hist.count = n * (bounds.len() as f64 + 1.0);
            hist.sum = hist.count;
            PodSnapshot {
                waiting: Some(1.0),
                e2e_latency: Some(hist),
                ..PodSnapshot::default()
            }
        };
        let rounds = [
            layout(&[1.0, 2.0], 1.0),
            layout(&[1.0, 2.0], 3.0),
            layout(&[0.5, 1.0, 4.0], 5.0),
            layout(&[0.5, 1.0, 4.0], 9.0),
        ];
        let mut w = FleetWindow::new(SignalSettings::default());
        let at = [0, 10, 20, 80].map(Duration::from_secs);
        for (at, snapshot) in at.iter().zip(&rounds) {
            w.record(*at, "a", Some(snapshot.clone()));
        }
        let kept: Vec<&KeptHistogram> = w.pods["a"]
            .entries
            .iter()
            .filter_map(|e| e.detail.as_ref()?.hists[E2E].as_ref())
            .collect();
        // The first two samples are older than the latency baseline: counts dropped.
        assert_eq!(kept.len(), 2);
        assert!(kept[1].shares_bounds_with(kept[0]));
        assert_eq!(w.pods["a"].last_restart_at, Some(Duration::from_secs(20)));
        // The quantiles are those of the plain bucket deltas since the change.
        let s = w.compute(Duration::from_secs(80));
        let then = rounds[2].e2e_latency.as_ref().unwrap();
        let now = rounds[3].e2e_latency.as_ref().unwrap();
        let expected = now.delta_since(then).unwrap().quantiles();
        assert!(expected.p50.is_some());
        assert_eq!(s.pods[0].signals.e2e_latency_seconds, expected);
        // Before the change, the same holds for the first layout, and the new layout's
        // first sample gets bounds of its own.
        let mut w = FleetWindow::new(SignalSettings::default());
        for (at, snapshot) in at.iter().zip(&rounds).take(2) {
            w.record(*at, "a", Some(snapshot.clone()));
        }
        let then = rounds[0].e2e_latency.as_ref().unwrap();
        let now = rounds[1].e2e_latency.as_ref().unwrap();
        let s = w.compute(Duration::from_secs(10));
        assert_eq!(
            s.pods[0].signals.e2e_latency_seconds,
            now.delta_since(then).unwrap().quantiles()
        );
        w.record(at[2], "a", Some(rounds[2].clone()));
        let kept: Vec<&KeptHistogram> = w.pods["a"]
            .entries
            .iter()
            .filter_map(|e| e.detail.as_ref()?.hists[E2E].as_ref())
            .collect();
        assert_eq!(kept.len(), 3);
        assert!(kept[1].shares_bounds_with(kept[0]));
        assert!(
            !kept[2].shares_bounds_with(kept[1]),
            "a new layout, new bounds"
        );
    }

    #[test]
    fn a_sample_at_or_before_the_latest_replaces_the_newer_ones() {
        let at = |prompt: f64| PodSnapshot {
            waiting: Some(1.0),
            prompt_tokens_total: Some(prompt),
            ..PodSnapshot::default()
        };
        let mut w = FleetWindow::new(SignalSettings::default());
        for (t, prompt) in [(0, 0.0), (10, 100.0), (20, 200.0), (10, 50.0)] {
            w.record(Duration::from_secs(t), "a", Some(at(prompt)));
        }
        let times: Vec<u64> = w.pods["a"].entries.iter().map(|e| e.at.as_secs()).collect();
        assert_eq!(times, [0, 10]);
        assert_eq!(w.latest_at("a"), Some(Duration::from_secs(10)));
        assert_eq!(w.latest_at("b"), None);
        // Compared with the sample at 0 s, not with the dropped one at 20 s: no restart.
        let s = w.compute(Duration::from_secs(10));
        assert!(!s.pods[0].reset_in_window);
        assert_eq!(s.fleet.prompt_tokens_per_second, Some(5.0));
    }

    #[test]
    fn the_window_keeps_its_settings_and_forgets_dcgm_targets_gone_from_discovery() {
        let settings = SignalSettings {
            latency_window: Duration::from_secs(30),
            ..SignalSettings::default()
        };
        let mut w = FleetWindow::new(settings.clone());
        assert_eq!(w.settings(), &settings);
        let one_gpu = |uuid: &str| GpuSnapshot {
            gpus: vec![gpu::GpuDevice {
                uuid: Some(uuid.to_owned()),
                power_watts: Some(100.0),
                ..gpu::GpuDevice::default()
            }],
        };
        let now = Duration::from_secs(5);
        w.record_gpu(now, "node-1", Some(one_gpu("GPU-1")));
        w.record_gpu(now, "node-2", Some(one_gpu("GPU-2")));
        assert_eq!(w.compute(now).gpu.map(|g| g.gpus), Some(2));
        w.retain_gpu_targets(&["node-2".to_owned()]);
        let gpu = w.compute(now).gpu.expect("node-2 still reports");
        assert_eq!((gpu.gpus, gpu.power_watts_total), (1, Some(100.0)));
    }

    #[test]
    fn a_steady_ring_keeps_some_room_and_not_much_more() {
        let mut w = FleetWindow::new(SignalSettings::default());
        for t in 0..1_000u64 {
            w.record(Duration::from_secs(t), "a", Some(snapshot(t as f64)));
        }
        let entries = &w.pods["a"].entries;
        let (len, capacity) = (entries.len(), entries.capacity());
        assert_eq!(len, 301);
        // Grown by doubling to 512 on the way, then shrunk once the window held steady.
        assert!(capacity >= len + SPARE_ENTRIES, "{capacity} for {len}");
        assert!(
            capacity <= len + len / 2 + SPARE_ENTRIES,
            "{capacity} for {len}"
        );
    }

    #[test]
    fn of_three_samples_closer_than_the_spacing_the_middle_one_loses_its_detail() {
        let mut w = FleetWindow::new(SignalSettings::default());
        for t in 0..3u64 {
            w.record(Duration::from_secs(t), "a", Some(snapshot(t as f64)));
        }
        let full: Vec<bool> = w.pods["a"]
            .entries
            .iter()
            .map(|e| e.detail.is_some())
            .collect();
        assert_eq!(full, [true, false, true]);
        // Exactly the spacing apart (60 s / 16 = 3.75 s): every one stays full.
        let mut w = FleetWindow::new(SignalSettings::default());
        for i in 0..3u64 {
            w.record(
                Duration::from_millis(i * 3_750),
                "a",
                Some(snapshot(i as f64)),
            );
        }
        assert!(w.pods["a"].entries.iter().all(|e| e.detail.is_some()));
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
