//! Extraction of one vLLM scrape into an owned [`PodSnapshot`].
//!
//! Owns: which vLLM series a snapshot keeps (V0 and V1 names, twins never added), summing over
//! the `engine` label, the optional `model_name` filter, and the restart markers. Does not own:
//! the names themselves (see [`crate::catalog`]), parsing (see [`crate::exposition`]) or
//! anything across scrapes (see `window`).

use std::collections::BTreeMap;

use crate::catalog::{label, name};
use crate::exposition::{Exposition, Sample};

use super::histogram::Histogram;

/// Which vLLM engine generation wrote the body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Generation {
    /// Not recognised: no `vllm:` series, or none of the names that tell the generations apart.
    #[default]
    Unknown,
    /// V0 engine (`num_requests_swapped`, `cpu_cache_usage_perc`, no `engine` label).
    V0,
    /// V1 engine (`engine` label, `kv_cache_usage_perc`).
    V1,
}

/// What a snapshot found, for `check`'s go-live report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SnapshotInfo {
    /// Samples whose name starts with `vllm:` (before the model filter).
    pub vllm_samples: usize,
    /// Engine generation.
    pub generation: Generation,
    /// Distinct `engine` label values (data-parallel ranks); 0 when the label is absent.
    pub engines: usize,
    /// Distinct `model_name` values seen (before the filter).
    pub models: Vec<String>,
    /// The KV-cache usage name used, if any.
    pub kv_cache_metric: Option<&'static str>,
    /// The inter-token latency histogram name used, if any.
    pub itl_metric: Option<&'static str>,
    /// Older twin names that were present and ignored because the newer name was there too.
    pub ignored_twins: Vec<&'static str>,
    /// Labels of `vllm:cache_config_info` (the first child), in body order.
    pub cache_config: Vec<(String, String)>,
}

impl SnapshotInfo {
    /// `gpu_memory_utilization` from `vllm:cache_config_info`, when present and numeric.
    pub fn gpu_memory_utilization(&self) -> Option<f64> {
        self.cache_config
            .iter()
            .find(|(key, _)| key == label::GPU_MEMORY_UTILIZATION)
            .and_then(|(_, value)| value.parse().ok())
    }
}

/// What one scrape of one vLLM pod contributed, owned (the body is gone after extraction).
/// Gauges and counters are summed over `engine`; `None` means the series was absent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodSnapshot {
    /// `vllm:num_requests_waiting`.
    pub waiting: Option<f64>,
    /// `vllm:num_requests_running`.
    pub running: Option<f64>,
    /// `vllm:num_requests_swapped` (V0 only).
    pub swapped: Option<f64>,
    /// KV-cache usage 0..1, max across engines (`kv_cache_usage_perc`, else `gpu_cache_usage_perc`).
    pub kv_cache_usage_max: Option<f64>,
    /// KV-cache usage 0..1, mean across engines.
    pub kv_cache_usage_mean: Option<f64>,
    /// `vllm:num_preemptions_total`.
    pub preemptions_total: Option<f64>,
    /// `vllm:prompt_tokens_total`.
    pub prompt_tokens_total: Option<f64>,
    /// `vllm:generation_tokens_total`.
    pub generation_tokens_total: Option<f64>,
    /// `vllm:request_success_total` by `finished_reason`.
    pub request_success_total: BTreeMap<String, f64>,
    /// `vllm:e2e_request_latency_seconds`.
    pub e2e_latency: Option<Histogram>,
    /// `vllm:time_to_first_token_seconds`.
    pub ttft: Option<Histogram>,
    /// `vllm:inter_token_latency_seconds`, else `vllm:time_per_output_token_seconds`.
    pub itl: Option<Histogram>,
    /// `vllm:request_queue_time_seconds`.
    pub queue_time: Option<Histogram>,
    /// `vllm:iteration_tokens_total` (a histogram of tokens per engine step).
    pub iteration_tokens: Option<Histogram>,
    /// `process_start_time_seconds` (restart marker; absent in multiprocess mode).
    pub process_start_time_seconds: Option<f64>,
    /// Smallest `_created` value of the counters and histograms above (restart marker).
    pub created_min_seconds: Option<f64>,
    /// What was found, for reports.
    pub info: SnapshotInfo,
}

const KV_NEW: &str = name::KV_CACHE_USAGE_PERC;
const KV_OLD: &str = name::GPU_CACHE_USAGE_PERC;
const ITL_NEW: &str = name::INTER_TOKEN_LATENCY_SECONDS;
const ITL_OLD: &str = name::TIME_PER_OUTPUT_TOKEN_SECONDS;

#[derive(Clone, Copy)]
enum Hist {
    E2e,
    Ttft,
    ItlNew,
    ItlOld,
    Queue,
    Iteration,
}

/// A sample name's suffix: which part of a counter or histogram family it is.
#[derive(Clone, Copy)]
enum Part {
    Total,
    Bucket,
    Sum,
    Count,
    Created,
}

/// Splits `name` into its family name and suffix (`_bucket`, `_sum`, `_count`, `_created`,
/// `_total`, tried in that order).
fn split_part(name: &str) -> Option<(&str, Part)> {
    if let Some(base) = name.strip_suffix("_bucket") {
        Some((base, Part::Bucket))
    } else if let Some(base) = name.strip_suffix("_sum") {
        Some((base, Part::Sum))
    } else if let Some(base) = name.strip_suffix("_count") {
        Some((base, Part::Count))
    } else if let Some(base) = name.strip_suffix("_created") {
        Some((base, Part::Created))
    } else {
        name.strip_suffix("_total").map(|base| (base, Part::Total))
    }
}

#[derive(Default)]
struct Builder {
    waiting: Option<f64>,
    running: Option<f64>,
    swapped: Option<f64>,
    kv_new: Vec<f64>,
    kv_old: Vec<f64>,
    preemptions: Option<f64>,
    prompt: Option<f64>,
    generation: Option<f64>,
    success: BTreeMap<String, f64>,
    hists: [Option<Histogram>; 6],
    created_min: Option<f64>,
    engines: Vec<String>,
    v0_marker: bool,
}

fn add(slot: &mut Option<f64>, value: f64) {
    *slot = Some(slot.unwrap_or(0.0) + value);
}

fn min_into(slot: &mut Option<f64>, value: f64) {
    *slot = Some(slot.map_or(value, |m| m.min(value)));
}

impl PodSnapshot {
    /// Extracts the series that signals use from a parsed body. With `model`, only series whose
    /// `model_name` equals it count (series without the label always count).
    pub fn from_exposition(exposition: &Exposition<'_>, model: Option<&str>) -> Self {
        let mut b = Builder::default();
        let mut snapshot = PodSnapshot::default();
        for sample in &exposition.samples {
            let metric = sample.name;
            if metric == name::PROCESS_START_TIME_SECONDS {
                if sample.value.is_finite() {
                    snapshot.process_start_time_seconds = Some(sample.value);
                }
                continue;
            }
            if !metric.starts_with(name::VLLM_PREFIX) {
                continue;
            }
            snapshot.info.vllm_samples += 1;
            if let Some(model_name) = sample.label(label::MODEL_NAME) {
                if !snapshot.info.models.iter().any(|m| m == model_name) {
                    snapshot.info.models.push(model_name.to_owned());
                }
                if model.is_some_and(|wanted| wanted != model_name) {
                    continue;
                }
            }
            if let Some(engine) = sample.label(label::ENGINE) {
                if !b.engines.iter().any(|e| e == engine) {
                    b.engines.push(engine.to_owned());
                }
            }
            b.take(metric, sample, &mut snapshot.info);
        }
        b.finish(snapshot)
    }
}

impl Builder {
    fn take(&mut self, metric: &str, sample: &Sample<'_>, info: &mut SnapshotInfo) {
        let value = sample.value;
        match metric {
            name::NUM_REQUESTS_WAITING => return add_finite(&mut self.waiting, value),
            name::NUM_REQUESTS_RUNNING => return add_finite(&mut self.running, value),
            name::NUM_REQUESTS_SWAPPED => {
                self.v0_marker = true;
                return add_finite(&mut self.swapped, value);
            }
            name::CPU_CACHE_USAGE_PERC => {
                self.v0_marker = true;
                return;
            }
            KV_NEW => {
                if value.is_finite() {
                    self.kv_new.push(value);
                }
                return;
            }
            KV_OLD => {
                if value.is_finite() {
                    self.kv_old.push(value);
                }
                return;
            }
            name::CACHE_CONFIG_INFO => {
                if info.cache_config.is_empty() {
                    info.cache_config = sample
                        .labels
                        .iter()
                        .map(|l| (l.name.to_owned(), l.value.as_ref().to_owned()))
                        .collect();
                }
                return;
            }
            _ => {}
        }
        let Some((family, part)) = split_part(metric) else {
            return;
        };
        let counter = match family {
            name::NUM_PREEMPTIONS => &mut self.preemptions,
            name::PROMPT_TOKENS => &mut self.prompt,
            name::GENERATION_TOKENS => &mut self.generation,
            name::REQUEST_SUCCESS => return self.take_success(part, sample),
            name::TIME_IN_QUEUE_REQUESTS => {
                if let Part::Count = part {
                    self.v0_marker = true;
                }
                return;
            }
            name::E2E_REQUEST_LATENCY_SECONDS => {
                return self.take_histogram(Hist::E2e, part, sample);
            }
            name::TIME_TO_FIRST_TOKEN_SECONDS => {
                return self.take_histogram(Hist::Ttft, part, sample);
            }
            ITL_NEW => return self.take_histogram(Hist::ItlNew, part, sample),
            ITL_OLD => return self.take_histogram(Hist::ItlOld, part, sample),
            name::REQUEST_QUEUE_TIME_SECONDS => {
                return self.take_histogram(Hist::Queue, part, sample);
            }
            name::ITERATION_TOKENS_TOTAL => {
                return self.take_histogram(Hist::Iteration, part, sample);
            }
            _ => return,
        };
        match part {
            Part::Total => add_finite(counter, value),
            Part::Created => {
                if value.is_finite() {
                    min_into(&mut self.created_min, value);
                }
            }
            Part::Bucket | Part::Sum | Part::Count => {}
        }
    }

    /// `vllm:request_success_total` by `finished_reason`, and its `_created`.
    fn take_success(&mut self, part: Part, sample: &Sample<'_>) {
        let value = sample.value;
        if !value.is_finite() {
            return;
        }
        match part {
            Part::Total => {
                let reason = sample.label(label::FINISHED_REASON).unwrap_or("");
                match self.success.get_mut(reason) {
                    Some(total) => *total += value,
                    None => {
                        self.success.insert(reason.to_owned(), value);
                    }
                }
            }
            Part::Created => min_into(&mut self.created_min, value),
            Part::Bucket | Part::Sum | Part::Count => {}
        }
    }

    fn take_histogram(&mut self, hist: Hist, part: Part, sample: &Sample<'_>) {
        let value = sample.value;
        if !value.is_finite() {
            return;
        }
        let slot = match part {
            Part::Created => return min_into(&mut self.created_min, value),
            Part::Total => return,
            Part::Bucket | Part::Sum | Part::Count => {
                self.hists[hist as usize].get_or_insert_with(Histogram::default)
            }
        };
        match part {
            Part::Bucket => {
                // `le` parsed as a float: Python writes "1.0", Go writes "1".
                if let Some(le) = sample
                    .label(label::LE)
                    .and_then(|le| le.parse::<f64>().ok())
                {
                    if !le.is_nan() {
                        slot.add_bucket(le, value);
                    }
                }
            }
            Part::Sum => slot.sum += value,
            Part::Count => slot.count += value,
            Part::Created | Part::Total => {}
        }
    }

    fn finish(mut self, mut snapshot: PodSnapshot) -> PodSnapshot {
        for hist in self.hists.iter_mut().flatten() {
            hist.finish();
        }
        let [e2e, ttft, itl_new, itl_old, queue, iteration] = self.hists;
        let info = &mut snapshot.info;
        // Twins carry the same data under two names: take the newer name, never both.
        let kv = if !self.kv_new.is_empty() {
            if !self.kv_old.is_empty() {
                info.ignored_twins.push(KV_OLD);
            }
            info.kv_cache_metric = Some(KV_NEW);
            self.kv_new
        } else {
            if !self.kv_old.is_empty() {
                info.kv_cache_metric = Some(KV_OLD);
            }
            self.kv_old
        };
        if !kv.is_empty() {
            snapshot.kv_cache_usage_max = kv.iter().copied().reduce(f64::max);
            snapshot.kv_cache_usage_mean = Some(kv.iter().sum::<f64>() / kv.len() as f64);
        }
        snapshot.itl = match (itl_new, itl_old) {
            (Some(new), old) => {
                if old.is_some() {
                    info.ignored_twins.push(ITL_OLD);
                }
                info.itl_metric = Some(ITL_NEW);
                Some(new)
            }
            (None, Some(old)) => {
                info.itl_metric = Some(ITL_OLD);
                Some(old)
            }
            (None, None) => None,
        };
        info.engines = self.engines.len();
        info.generation = if info.engines > 0 {
            Generation::V1
        } else if self.v0_marker {
            Generation::V0
        } else if info.kv_cache_metric == Some(KV_NEW) || info.itl_metric == Some(ITL_NEW) {
            Generation::V1
        } else {
            Generation::Unknown
        };
        snapshot.waiting = self.waiting;
        snapshot.running = self.running;
        snapshot.swapped = self.swapped;
        snapshot.preemptions_total = self.preemptions;
        snapshot.prompt_tokens_total = self.prompt;
        snapshot.generation_tokens_total = self.generation;
        snapshot.request_success_total = self.success;
        snapshot.e2e_latency = e2e;
        snapshot.ttft = ttft;
        snapshot.queue_time = queue;
        snapshot.iteration_tokens = iteration;
        snapshot.created_min_seconds = self.created_min;
        snapshot
    }
}

fn add_finite(slot: &mut Option<f64>, value: f64) {
    if value.is_finite() {
        add(slot, value);
    }
}
