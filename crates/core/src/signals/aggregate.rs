//! Per-pod deltas turned into signals, and the fleet sums over healthy pods.
//!
//! Owns: the arithmetic from two samples of one pod to its [`SignalSet`] (rates as difference
//! quotients, quantiles of bucket deltas) and the fleet aggregation (sums of gauges and rates,
//! bucket deltas merged by `le`, KV max/mean across pods). Does not own: which samples are
//! compared or when a pod counts (see `window`).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::histogram::{Bucket, merge_buckets, quantiles_of};
use super::window::{
    Detail, E2E, Entry, Hists, ITERATION, ITL, Latest, PodHistory, QUEUE, REQUEST_TPOT, TTFT,
    baseline,
};
use super::{MaxMean, SignalSet, SignalSettings};

/// One healthy pod's deltas at `now`.
pub(super) struct PodCompute {
    /// Seconds between the latency baseline and the latest sample (when a delta exists).
    latency_seconds: Option<f64>,
    hists: Hists,
    prompt: Option<f64>,
    generation: Option<f64>,
    success: Vec<(String, f64)>,
    success_total: Option<f64>,
    preemptions_per_second: Option<f64>,
    pub(super) reset_in_window: bool,
}

impl PodCompute {
    pub(super) fn new(history: &PodHistory, now: Duration, settings: &SignalSettings) -> Self {
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

        let base_index = fresh_baseline(entries, now, settings.latency_window);
        if base_index < last_index {
            if spans_restart(base_index) {
                out.reset_in_window = true;
            } else {
                // The baseline's detail may be gone when `now` is older than the last
                // `record`; the next sample that still has it is the closest stand-in.
                let base = entries
                    .range(base_index..last_index)
                    .find(|entry| entry.detail.is_some());
                if let (Some(base), Some(now_detail)) = (base, last.detail.as_deref()) {
                    let then_detail = base.detail.as_deref().unwrap_or(now_detail);
                    out.latency_seconds = Some((last.at - base.at).as_secs_f64());
                    out.latency_deltas(then_detail, now_detail);
                }
            }
        }

        let base_index = fresh_baseline(entries, now, settings.preemption_window);
        if base_index < last_index {
            if spans_restart(base_index) {
                out.reset_in_window = true;
            } else {
                let base = &entries[base_index];
                let seconds = (last.at - base.at).as_secs_f64();
                if let (Some(then), Some(now)) = (base.preemptions, last.preemptions) {
                    if now >= then && seconds > 0.0 {
                        out.preemptions_per_second = Some((now - then) / seconds);
                    }
                }
            }
        }
        out
    }

    fn latency_deltas(&mut self, then: &Detail, now: &Detail) {
        let delta = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(then), Some(now)) if now >= then => Some(now - then),
            _ => None,
        };
        self.prompt = delta(then.prompt, now.prompt);
        self.generation = delta(then.generation, now.generation);
        // Both lists are sorted by reason (they come from a map): one merge walk, never a
        // search per reason, so a pod serving many distinct reasons costs O(n).
        let mut earlier = then.success.iter().peekable();
        for (reason, now_value) in &now.success {
            while earlier.next_if(|(r, _)| r < reason).is_some() {}
            let before = earlier.next_if(|(r, _)| r == reason);
            if let Some(d) = delta(before.map(|(_, v)| *v), Some(*now_value)) {
                self.success.push((reason.clone(), d));
            }
        }
        for (slot, (then, now)) in self.hists.iter_mut().zip(then.hists.iter().zip(&now.hists)) {
            if let (Some(then), Some(now)) = (then, now) {
                *slot = now.delta_since(then);
            }
        }
        self.success_total = if self.success.is_empty() {
            // No `request_success_total`: finished requests are the e2e observations.
            self.hists[E2E].as_ref().map(|h| h.count)
        } else {
            Some(self.success.iter().map(|(_, d)| d).sum())
        };
    }

    /// The seconds the window's finished count spans, where there is a count.
    fn finished_span(&self) -> Option<f64> {
        self.success_total.and(self.latency_seconds)
    }

    fn per_second(&self, delta: Option<f64>) -> Option<f64> {
        match (delta, self.latency_seconds) {
            (Some(delta), Some(seconds)) if seconds > 0.0 => Some(delta / seconds),
            _ => None,
        }
    }

    pub(super) fn signals(&self, latest: &Latest) -> SignalSet {
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
            request_tpot_seconds: quantiles(REQUEST_TPOT),
            // The histograms whole are kept for the fleet's set only (the policy's share test
            // reads the fleet); a pod's set carries its quantiles.
            ttft_buckets: Vec::new(),
            itl_buckets: Vec::new(),
            request_tpot_buckets: Vec::new(),
            requests_per_second: self.per_second(self.success_total),
            requests_finished_in_window: self.success_total.unwrap_or(0.0),
            finished_window_seconds: self.finished_span(),
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
                .and_then(|h| mean_of(h.sum, h.count)),
            itl_mean_seconds: self.hists[ITL]
                .as_ref()
                .and_then(|h| mean_of(h.sum, h.count)),
        }
    }
}

/// The window's baseline, unless it is older than `now - 2 * window` (a scrape gap longer than
/// the window: the pod was unreachable); then the first sample inside the window, so a delta
/// never averages over the whole gap.
fn fresh_baseline(entries: &VecDeque<Entry>, now: Duration, window: Duration) -> usize {
    let index = baseline(entries, now, window);
    if entries[index].at + window * 2 < now {
        index + 1
    } else {
        index
    }
}

/// Fleet sums, built pod by pod.
#[derive(Default)]
pub(super) struct FleetAccumulator {
    queue_depth: f64,
    running: f64,
    buckets: [Vec<Bucket>; 5],
    requests_per_second: Option<f64>,
    requests_finished: f64,
    finished_window_seconds: Option<f64>,
    by_reason: BTreeMap<String, f64>,
    kv: Vec<f64>,
    preemptions_per_second: Option<f64>,
    prompt_per_second: Option<f64>,
    generation_per_second: Option<f64>,
    iteration_sum: f64,
    iteration_count: f64,
    itl_sum: f64,
    itl_count: f64,
}

/// A histogram's mean over a window from its `_sum` and `_count` deltas: `None` without an
/// observation, or when the deltas make no sense (a negative or non-finite sum).
fn mean_of(sum: f64, count: f64) -> Option<f64> {
    let mean = sum / count;
    (count > 0.0 && sum >= 0.0 && mean.is_finite()).then_some(mean)
}

fn add_opt(into: &mut Option<f64>, value: Option<f64>) {
    if let Some(value) = value {
        *into = Some(into.unwrap_or(0.0) + value);
    }
}

impl FleetAccumulator {
    pub(super) fn add(&mut self, pod: &PodCompute, latest: &Latest) {
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
        if let Some(span) = pod.finished_span() {
            self.finished_window_seconds =
                Some(self.finished_window_seconds.map_or(span, |s| s.max(span)));
        }
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
        if let Some(h) = &pod.hists[ITL] {
            self.itl_sum += h.sum;
            self.itl_count += h.count;
        }
    }

    pub(super) fn finish(self) -> SignalSet {
        let [e2e, ttft, itl, queue, request_tpot] = self.buckets;
        SignalSet {
            queue_depth: self.queue_depth,
            running: self.running,
            e2e_latency_seconds: quantiles_of(&e2e),
            ttft_seconds: quantiles_of(&ttft),
            itl_seconds: quantiles_of(&itl),
            queue_time_seconds: quantiles_of(&queue),
            request_tpot_seconds: quantiles_of(&request_tpot),
            ttft_buckets: ttft,
            itl_buckets: itl,
            request_tpot_buckets: request_tpot,
            requests_per_second: self.requests_per_second,
            requests_finished_in_window: self.requests_finished,
            finished_window_seconds: self.finished_window_seconds,
            finished_per_second_by_reason: self.by_reason,
            kv_cache_usage: MaxMean {
                max: self.kv.iter().copied().reduce(f64::max),
                mean: (!self.kv.is_empty())
                    .then(|| self.kv.iter().sum::<f64>() / self.kv.len() as f64),
            },
            preemptions_per_second: self.preemptions_per_second,
            prompt_tokens_per_second: self.prompt_per_second,
            generation_tokens_per_second: self.generation_per_second,
            batch_tokens_per_step: mean_of(self.iteration_sum, self.iteration_count),
            itl_mean_seconds: mean_of(self.itl_sum, self.itl_count),
        }
    }
}
