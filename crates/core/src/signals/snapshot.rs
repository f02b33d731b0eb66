//! Extraction of one vLLM scrape into an owned [`PodSnapshot`].
//!
//! Owns: which vLLM series a snapshot keeps (V0 and V1 names, twins never added), summing over
//! the `engine` label, the optional `model_name` filter, and the restart markers. Does not own:
//! the names themselves (see [`crate::catalog`]), parsing (see [`crate::exposition`]) or
//! anything across scrapes (see `window`).

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::catalog::{label, name};
use crate::exposition::{Exposition, Sample};

use super::histogram::{Bucket, Histogram};

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
    /// The `gpu_memory_utilization` label of `vllm:cache_config_info` (its first child), when
    /// present and numeric: the one label of that series anything reads, kept as a number so
    /// a scrape copies none of the others.
    pub cache_config_gpu_memory_utilization: Option<f64>,
}

impl SnapshotInfo {
    /// `gpu_memory_utilization` from `vllm:cache_config_info`, when present and numeric.
    pub fn gpu_memory_utilization(&self) -> Option<f64> {
        self.cache_config_gpu_memory_utilization
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
    /// `vllm:request_time_per_output_token_seconds` (each request's own mean time per output
    /// token, observed when it finishes).
    pub request_tpot: Option<Histogram>,
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

/// Model names an error lists at most, and the characters kept of each.
const MODELS_LISTED: usize = 3;
const MODEL_NAME_CHARS: usize = 64;

/// Why a parsed body gives no usable snapshot. The text names the series (a catalog name,
/// never body bytes) and the class of the problem; the only body-derived text is model names,
/// at most three, each cut to 64 characters of `[A-Za-z0-9._/:@+-]` (others shown as `?`).
#[derive(Debug, Clone, PartialEq)]
pub enum SnapshotError {
    /// No sample name starts with `vllm:`: not a vLLM `/metrics` endpoint.
    NoVllmSeries,
    /// The configured model has no series; the body carries other models' series.
    ModelNotFound {
        /// The configured model (capped like the names found).
        model: String,
        /// Up to three model names the body carries (capped, sanitised).
        found: Vec<String>,
        /// How many distinct model names the body carries.
        found_total: usize,
    },
    /// Neither `vllm:num_requests_waiting` nor `vllm:num_requests_running` (for the model).
    NoLoadGauges,
    /// A value that cannot be true in a series the signals use.
    Impossible {
        /// The series' name (a catalog name), e.g. `vllm:num_requests_waiting`.
        series: &'static str,
        /// The suffix within the family (`_bucket`, `_total`, ...), empty for a gauge.
        suffix: &'static str,
        /// What is wrong.
        problem: Problem,
    },
}

/// What is wrong with a value (see [`SnapshotError::Impossible`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Problem {
    /// A count, gauge of requests or counter below zero.
    Negative(f64),
    /// NaN or an infinity where a number is needed.
    NotFinite,
    /// A fraction (KV-cache usage) outside [0, 1].
    OutsideUnitRange(f64),
    /// The same name and label set twice (after the model filter).
    Duplicate,
    /// A bucket whose `le` label is missing, not a number, or NaN.
    BadBound,
    /// A histogram (one label set) without a `le="+Inf"` bucket.
    NoInfBucket,
    /// A cumulative bucket lower than the bucket below it.
    DecreasingBuckets {
        /// The bound of the bucket that went down.
        le: f64,
    },
    /// `_count` differs from the `+Inf` bucket.
    CountMismatch {
        /// `_count`.
        count: f64,
        /// The `+Inf` bucket.
        inf_bucket: f64,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Negative(v) => write!(f, "negative value {v} (cannot be below 0)"),
            Problem::NotFinite => f.write_str("NaN or infinite value where a number is needed"),
            Problem::OutsideUnitRange(v) => {
                write!(f, "value {v} outside [0, 1] (a usage fraction)")
            }
            Problem::Duplicate => {
                f.write_str("duplicate series (the same name and labels more than once)")
            }
            Problem::BadBound => f.write_str("bucket with a missing, non-numeric or NaN `le`"),
            Problem::NoInfBucket => f.write_str("histogram without a le=\"+Inf\" bucket"),
            Problem::DecreasingBuckets { le } => write!(
                f,
                "cumulative bucket le=\"{le}\" is lower than the bucket below it"
            ),
            Problem::CountMismatch { count, inf_bucket } => write!(
                f,
                "_count {count} differs from the le=\"+Inf\" bucket {inf_bucket}"
            ),
        }
    }
}

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SnapshotError::NoVllmSeries => f.write_str(
                "no vLLM series (no sample name starts with `vllm:`): is this a vLLM /metrics \
                 endpoint (port 8000 by default)?",
            ),
            SnapshotError::ModelNotFound {
                model,
                found,
                found_total,
            } => {
                let more = found_total.saturating_sub(found.len());
                let more = if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                };
                write!(
                    f,
                    "no series for model \"{model}\": the body's vLLM series are for model_name \
                     {}{more}; set `model` to the served model's name",
                    found
                        .iter()
                        .map(|m| format!("\"{m}\""))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
            SnapshotError::NoLoadGauges => write!(
                f,
                "neither {} nor {} is present (for the configured model): no load to read",
                name::NUM_REQUESTS_WAITING,
                name::NUM_REQUESTS_RUNNING
            ),
            SnapshotError::Impossible {
                series,
                suffix,
                problem,
            } => write!(f, "{series}{suffix}: {problem}"),
        }
    }
}

impl std::error::Error for SnapshotError {}

/// A model name as an error may show it: at most 64 characters, each outside
/// `[A-Za-z0-9._/:@+-]` shown as `?` (a body's bytes never reach an error verbatim).
fn shown_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .take(MODEL_NAME_CHARS)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._/:@+-".contains(c) {
                c
            } else {
                '?'
            }
        })
        .collect();
    if name.chars().nth(MODEL_NAME_CHARS).is_some() {
        out.push_str("...");
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Hist {
    E2e,
    Ttft,
    ItlNew,
    ItlOld,
    Queue,
    RequestTpot,
    Iteration,
}

impl Hist {
    fn family(self) -> &'static str {
        match self {
            Hist::E2e => name::E2E_REQUEST_LATENCY_SECONDS,
            Hist::Ttft => name::TIME_TO_FIRST_TOKEN_SECONDS,
            Hist::ItlNew => ITL_NEW,
            Hist::ItlOld => ITL_OLD,
            Hist::Queue => name::REQUEST_QUEUE_TIME_SECONDS,
            Hist::RequestTpot => name::REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS,
            Hist::Iteration => name::ITERATION_TOKENS_TOTAL,
        }
    }
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

impl Part {
    fn suffix(self) -> &'static str {
        match self {
            Part::Total => "_total",
            Part::Bucket => "_bucket",
            Part::Sum => "_sum",
            Part::Count => "_count",
            Part::Created => "_created",
        }
    }
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

/// The series of a body that the signals read.
#[derive(Clone, Copy)]
enum Series {
    Waiting,
    Running,
    Swapped,
    KvNew,
    KvOld,
    /// Read for the V0 marker only.
    CpuCache,
    CacheConfig,
    Preemptions(Part),
    Prompt(Part),
    Generation(Part),
    Success(Part),
    /// V0's `time_in_queue_requests`: its `_count` marks V0.
    TimeInQueue(Part),
    Hist(Hist, Part),
}

fn classify(metric: &str) -> Option<Series> {
    Some(match metric {
        name::NUM_REQUESTS_WAITING => Series::Waiting,
        name::NUM_REQUESTS_RUNNING => Series::Running,
        name::NUM_REQUESTS_SWAPPED => Series::Swapped,
        name::CPU_CACHE_USAGE_PERC => Series::CpuCache,
        KV_NEW => Series::KvNew,
        KV_OLD => Series::KvOld,
        name::CACHE_CONFIG_INFO => Series::CacheConfig,
        _ => {
            let (family, part) = split_part(metric)?;
            match family {
                name::NUM_PREEMPTIONS => Series::Preemptions(part),
                name::PROMPT_TOKENS => Series::Prompt(part),
                name::GENERATION_TOKENS => Series::Generation(part),
                name::REQUEST_SUCCESS => Series::Success(part),
                name::TIME_IN_QUEUE_REQUESTS => Series::TimeInQueue(part),
                name::E2E_REQUEST_LATENCY_SECONDS => Series::Hist(Hist::E2e, part),
                name::TIME_TO_FIRST_TOKEN_SECONDS => Series::Hist(Hist::Ttft, part),
                ITL_NEW => Series::Hist(Hist::ItlNew, part),
                ITL_OLD => Series::Hist(Hist::ItlOld, part),
                name::REQUEST_QUEUE_TIME_SECONDS => Series::Hist(Hist::Queue, part),
                name::REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS => {
                    Series::Hist(Hist::RequestTpot, part)
                }
                name::ITERATION_TOKENS_TOTAL => Series::Hist(Hist::Iteration, part),
                _ => return None,
            }
        }
    })
}

/// A sample's labels, sorted: its identity within a family (with the name). vLLM's series
/// carry two to four, which live inline: checking a sample for duplicates allocates nothing.
type LabelSet<'e> = smallvec::SmallVec<[(&'e str, &'e str); 4]>;

fn sorted_labels<'e>(sample: &'e Sample<'_>, skip: Option<&str>) -> LabelSet<'e> {
    let mut labels: LabelSet<'e> = sample
        .labels
        .iter()
        .filter(|l| skip != Some(l.name))
        .map(|l| (l.name, l.value.as_ref()))
        .collect();
    // Exporters write labels in one order (Python's client sorts them): sort only if not.
    if !labels.is_sorted() {
        labels.sort_unstable();
    }
    labels
}

impl Child<'_> {
    /// Whether `sample` (of histogram `hist`) belongs to this child: the same labels apart
    /// from `le`, compared in place when the sample's labels are in sorted order.
    fn is(&self, hist: Hist, sample: &Sample<'_>) -> bool {
        if self.hist != Some(hist) {
            return false;
        }
        let mut mine = self.labels.iter();
        let mut prev: Option<&str> = None;
        for l in sample.labels.iter().filter(|l| l.name != label::LE) {
            if prev.is_some_and(|p| p > l.name) {
                return false; // not in sorted order: let the map decide
            }
            prev = Some(l.name);
            if mine.next() != Some(&(l.name, l.value.as_ref())) {
                return false;
            }
        }
        mine.next().is_none()
    }
}

/// One histogram child (one label set apart from `le`) as the body gives it.
#[derive(Default)]
struct Child<'e> {
    hist: Option<Hist>,
    /// Its labels without `le`, sorted.
    labels: LabelSet<'e>,
    buckets: Vec<Bucket>,
    sum: Option<f64>,
    count: Option<f64>,
}

/// A series [`Builder::unique`] was given: its identity and what to name it as.
struct SeenSeries<'e> {
    name: &'e str,
    labels: LabelSet<'e>,
    series: &'static str,
    part: Option<Part>,
}

#[derive(Default)]
struct Builder<'e> {
    waiting: Option<f64>,
    running: Option<f64>,
    swapped: Option<f64>,
    kv_new: Vec<f64>,
    kv_old: Vec<f64>,
    preemptions: Option<f64>,
    prompt: Option<f64>,
    generation: Option<f64>,
    success: BTreeMap<String, f64>,
    /// Histogram children in body order, and their index by (histogram, labels without `le`).
    children: Vec<Child<'e>>,
    child_index: HashMap<(Hist, LabelSet<'e>), usize>,
    /// The child of the previous histogram sample: a child's samples come one after another.
    last_child: Option<usize>,
    created_min: Option<f64>,
    engines: HashSet<&'e str>,
    v0_marker: bool,
    /// Whether the first `vllm:cache_config_info` child was read.
    cache_config_seen: bool,
    /// Every series read so far outside histograms, to refuse duplicates: sorted and compared
    /// once the body is read (no hashing of the body's strings, so no input makes it slow).
    seen: Vec<SeenSeries<'e>>,
}

fn add(slot: &mut Option<f64>, value: f64) {
    *slot = Some(slot.unwrap_or(0.0) + value);
}

fn min_into(slot: &mut Option<f64>, value: f64) {
    *slot = Some(slot.map_or(value, |m| m.min(value)));
}

fn impossible(series: &'static str, part: Option<Part>, problem: Problem) -> SnapshotError {
    SnapshotError::Impossible {
        series,
        suffix: part.map_or("", Part::suffix),
        problem,
    }
}

/// A value that must be a finite number.
fn finite(series: &'static str, part: Option<Part>, value: f64) -> Result<f64, SnapshotError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(impossible(series, part, Problem::NotFinite))
    }
}

/// A value that must be a finite number, not below zero.
fn non_negative(
    series: &'static str,
    part: Option<Part>,
    value: f64,
) -> Result<f64, SnapshotError> {
    let value = finite(series, part, value)?;
    if value < 0.0 {
        Err(impossible(series, part, Problem::Negative(value)))
    } else {
        Ok(value)
    }
}

impl PodSnapshot {
    /// Extracts the series that signals use from a parsed body. With `model`, only series whose
    /// `model_name` equals it count (series without the label always count).
    ///
    /// # Errors
    ///
    /// A body the signals cannot use, so the target counts as unknown for the round, never as
    /// a number in the fleet's sums ([`SnapshotError`]): no `vllm:` series; no series for
    /// `model` while the body carries other models'; neither request gauge; a negative gauge
    /// or counter; a KV-cache usage outside [0, 1]; NaN or an infinity in a series read; the
    /// same series twice; a histogram without `+Inf`, with decreasing buckets, or whose
    /// `_count` is not its `+Inf` bucket.
    ///
    /// Work is O(n log n) in the body's samples: every per-label lookup (reasons, models,
    /// engines, histogram children and buckets) goes through a map or a sort.
    pub fn from_exposition(
        exposition: &Exposition<'_>,
        model: Option<&str>,
    ) -> Result<Self, SnapshotError> {
        let mut b = Builder::default();
        let mut snapshot = PodSnapshot::default();
        let mut models_seen: HashSet<&str> = HashSet::new();
        // Bodies carry one model and a few engines, repeated on every sample: the last value
        // seen skips the set (a hash per sample) in that usual case.
        let (mut last_model, mut last_engine) = (None, None);
        let mut model_matched = false;
        for sample in &exposition.samples {
            let metric = sample.name;
            if metric == name::PROCESS_START_TIME_SECONDS {
                b.unique(name::PROCESS_START_TIME_SECONDS, None, sample)?;
                snapshot.process_start_time_seconds = Some(finite(
                    name::PROCESS_START_TIME_SECONDS,
                    None,
                    sample.value,
                )?);
                continue;
            }
            if !metric.starts_with(name::VLLM_PREFIX) {
                continue;
            }
            snapshot.info.vllm_samples += 1;
            if let Some(model_name) = sample.label(label::MODEL_NAME) {
                if last_model != Some(model_name) && models_seen.insert(model_name) {
                    snapshot.info.models.push(model_name.to_owned());
                }
                last_model = Some(model_name);
                match model {
                    Some(wanted) if wanted != model_name => continue,
                    Some(_) => model_matched = true,
                    None => {}
                }
            }
            if let Some(engine) = sample.label(label::ENGINE) {
                if last_engine != Some(engine) {
                    b.engines.insert(engine);
                    last_engine = Some(engine);
                }
            }
            let Some(series) = classify(metric) else {
                continue;
            };
            b.take(series, sample, &mut snapshot.info)?;
        }
        if snapshot.info.vllm_samples == 0 {
            return Err(SnapshotError::NoVllmSeries);
        }
        if let Some(model) = model {
            if !model_matched && !snapshot.info.models.is_empty() {
                return Err(SnapshotError::ModelNotFound {
                    model: shown_name(model),
                    found: snapshot
                        .info
                        .models
                        .iter()
                        .take(MODELS_LISTED)
                        .map(|m| shown_name(m))
                        .collect(),
                    found_total: snapshot.info.models.len(),
                });
            }
        }
        b.check_unique()?;
        let snapshot = b.finish(snapshot)?;
        if snapshot.waiting.is_none() && snapshot.running.is_none() {
            return Err(SnapshotError::NoLoadGauges);
        }
        Ok(snapshot)
    }
}

impl<'e> Builder<'e> {
    /// Notes a series that must appear once (same name and labels); [`Self::check_unique`]
    /// refuses the body if one appeared twice.
    fn unique(
        &mut self,
        series: &'static str,
        part: Option<Part>,
        sample: &'e Sample<'_>,
    ) -> Result<(), SnapshotError> {
        self.seen.push(SeenSeries {
            name: sample.name,
            labels: sorted_labels(sample, None),
            series,
            part,
        });
        Ok(())
    }

    /// Refuses a series read twice: O(n log n) in the series, whatever their strings.
    fn check_unique(&mut self) -> Result<(), SnapshotError> {
        self.seen
            .sort_unstable_by(|a, b| (a.name, &a.labels).cmp(&(b.name, &b.labels)));
        match self
            .seen
            .windows(2)
            .find(|w| w[0].name == w[1].name && w[0].labels == w[1].labels)
        {
            Some(w) => Err(impossible(w[1].series, w[1].part, Problem::Duplicate)),
            None => Ok(()),
        }
    }

    fn take(
        &mut self,
        series: Series,
        sample: &'e Sample<'_>,
        info: &mut SnapshotInfo,
    ) -> Result<(), SnapshotError> {
        let value = sample.value;
        let counter = |b: &mut Self, family: &'static str, part: Part| {
            b.unique(family, Some(part), sample)?;
            match part {
                Part::Total => non_negative(family, Some(part), value).map(Some),
                Part::Created => {
                    let created = finite(family, Some(part), value)?;
                    min_into(&mut b.created_min, created);
                    Ok(None)
                }
                Part::Bucket | Part::Sum | Part::Count => Ok(None),
            }
        };
        match series {
            Series::Waiting => {
                let family = name::NUM_REQUESTS_WAITING;
                self.unique(family, None, sample)?;
                add(&mut self.waiting, non_negative(family, None, value)?);
            }
            Series::Running => {
                let family = name::NUM_REQUESTS_RUNNING;
                self.unique(family, None, sample)?;
                add(&mut self.running, non_negative(family, None, value)?);
            }
            Series::Swapped => {
                let family = name::NUM_REQUESTS_SWAPPED;
                self.v0_marker = true;
                self.unique(family, None, sample)?;
                add(&mut self.swapped, non_negative(family, None, value)?);
            }
            Series::CpuCache => self.v0_marker = true,
            Series::KvNew | Series::KvOld => {
                let (family, into) = match series {
                    Series::KvNew => (KV_NEW, &mut self.kv_new),
                    _ => (KV_OLD, &mut self.kv_old),
                };
                let usage = finite(family, None, value)?;
                if !(0.0..=1.0).contains(&usage) {
                    return Err(impossible(family, None, Problem::OutsideUnitRange(usage)));
                }
                into.push(usage);
                self.unique(family, None, sample)?;
            }
            Series::CacheConfig => {
                if !self.cache_config_seen {
                    self.cache_config_seen = true;
                    info.cache_config_gpu_memory_utilization = sample
                        .label(label::GPU_MEMORY_UTILIZATION)
                        .and_then(|v| v.parse().ok());
                }
            }
            Series::Preemptions(part) => {
                if let Some(v) = counter(self, name::NUM_PREEMPTIONS, part)? {
                    add(&mut self.preemptions, v);
                }
            }
            Series::Prompt(part) => {
                if let Some(v) = counter(self, name::PROMPT_TOKENS, part)? {
                    add(&mut self.prompt, v);
                }
            }
            Series::Generation(part) => {
                if let Some(v) = counter(self, name::GENERATION_TOKENS, part)? {
                    add(&mut self.generation, v);
                }
            }
            Series::Success(part) => {
                if let Some(v) = counter(self, name::REQUEST_SUCCESS, part)? {
                    let reason = sample.label(label::FINISHED_REASON).unwrap_or("");
                    match self.success.get_mut(reason) {
                        Some(total) => *total += v,
                        None => {
                            self.success.insert(reason.to_owned(), v);
                        }
                    }
                }
            }
            Series::TimeInQueue(part) => {
                if let Part::Count = part {
                    self.v0_marker = true;
                }
            }
            Series::Hist(hist, part) => self.take_histogram(hist, part, sample)?,
        }
        Ok(())
    }

    fn take_histogram(
        &mut self,
        hist: Hist,
        part: Part,
        sample: &'e Sample<'_>,
    ) -> Result<(), SnapshotError> {
        let family = hist.family();
        let value = sample.value;
        match part {
            Part::Total => return Ok(()),
            Part::Created => {
                self.unique(family, Some(part), sample)?;
                let created = finite(family, Some(part), value)?;
                min_into(&mut self.created_min, created);
                return Ok(());
            }
            Part::Bucket | Part::Sum | Part::Count => {}
        }
        // Duplicates within a child show structurally (a `le` twice, `_sum` or `_count` twice):
        // no set of every series for the many bucket samples.
        let value = non_negative(family, Some(part), value)?;
        let index = match self
            .last_child
            .filter(|&i| self.children[i].is(hist, sample))
        {
            Some(index) => index,
            None => {
                let labels = sorted_labels(sample, Some(label::LE));
                let key = (hist, labels.clone());
                match self.child_index.get(&key) {
                    Some(&index) => index,
                    None => {
                        self.children.push(Child {
                            hist: Some(hist),
                            labels,
                            ..Child::default()
                        });
                        self.child_index.insert(key, self.children.len() - 1);
                        self.children.len() - 1
                    }
                }
            }
        };
        self.last_child = Some(index);
        let child = &mut self.children[index];
        match part {
            Part::Bucket => {
                // `le` parsed as a float: Python writes "1.0", Go writes "1".
                let le = sample
                    .label(label::LE)
                    .and_then(|le| le.parse::<f64>().ok())
                    .filter(|le| !le.is_nan())
                    .ok_or_else(|| impossible(family, Some(part), Problem::BadBound))?;
                child.buckets.push(Bucket { le, count: value });
            }
            Part::Sum | Part::Count => {
                let slot = match part {
                    Part::Sum => &mut child.sum,
                    _ => &mut child.count,
                };
                if slot.replace(value).is_some() {
                    return Err(impossible(family, Some(part), Problem::Duplicate));
                }
            }
            Part::Created | Part::Total => {}
        }
        Ok(())
    }

    /// Checks each histogram child and sums the children per `le` into one histogram per
    /// family: O(b log b) in the buckets.
    fn histograms(children: Vec<Child<'_>>) -> Result<[Option<Histogram>; 7], SnapshotError> {
        let mut out: [Option<Histogram>; 7] = Default::default();
        for mut child in children {
            let Some(hist) = child.hist else { continue };
            let family = hist.family();
            let bucket = Some(Part::Bucket);
            child.buckets.sort_by(|a, b| a.le.total_cmp(&b.le));
            if child.buckets.windows(2).any(|w| w[0].le == w[1].le) {
                return Err(impossible(family, bucket, Problem::Duplicate));
            }
            let Some(inf) = child
                .buckets
                .last()
                .filter(|b| b.le == f64::INFINITY)
                .map(|b| b.count)
            else {
                return Err(impossible(family, bucket, Problem::NoInfBucket));
            };
            if let Some(pair) = child.buckets.windows(2).find(|w| w[1].count < w[0].count) {
                let le = pair[1].le;
                return Err(impossible(
                    family,
                    bucket,
                    Problem::DecreasingBuckets { le },
                ));
            }
            let count = match child.count {
                Some(count) if !same_count(count, inf) => {
                    let problem = Problem::CountMismatch {
                        count,
                        inf_bucket: inf,
                    };
                    return Err(impossible(family, Some(Part::Count), problem));
                }
                Some(count) => count,
                // No `_count`: the `+Inf` bucket is the count.
                None => inf,
            };
            let h = out[hist as usize].get_or_insert_with(Histogram::default);
            h.buckets.append(&mut child.buckets);
            h.sum += child.sum.unwrap_or(0.0);
            h.count += count;
        }
        for h in out.iter_mut().flatten() {
            h.finish();
        }
        Ok(out)
    }

    fn finish(self, mut snapshot: PodSnapshot) -> Result<PodSnapshot, SnapshotError> {
        let [e2e, ttft, itl_new, itl_old, queue, request_tpot, iteration] =
            Self::histograms(self.children)?;
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
        snapshot.request_tpot = request_tpot;
        snapshot.iteration_tokens = iteration;
        snapshot.created_min_seconds = self.created_min;
        Ok(snapshot)
    }
}

/// `_count` and the `+Inf` bucket agree (exactly for counts below 2^53; a relative 1e-9 for
/// float noise in very large ones).
fn same_count(count: f64, inf: f64) -> bool {
    count == inf || (count - inf).abs() <= 1e-9 * count.abs().max(inf.abs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition;

    fn snapshot(body: &str) -> Result<PodSnapshot, SnapshotError> {
        let parsed = exposition::parse(body).expect("the test body parses");
        PodSnapshot::from_exposition(&parsed, None)
    }

    #[test]
    fn a_series_read_twice_is_refused_however_far_apart_and_only_then() {
        use std::fmt::Write as _;
        let mut body = String::from("vllm:num_requests_waiting{engine=\"0\"} 1\n");
        for r in 0..500 {
            writeln!(
                body,
                "vllm:request_success_total{{engine=\"0\",finished_reason=\"r{r}\"}} 1"
            )
            .unwrap();
        }
        // Same name and values, other label order or another engine: distinct series.
        body.push_str("vllm:request_success_total{finished_reason=\"r7\",engine=\"1\"} 1\n");
        let ok = snapshot(&body).expect("501 distinct series");
        assert_eq!(ok.info.vllm_samples, 502);
        // The 8th series again, 493 lines later and with its labels in another order.
        let twice =
            format!("{body}vllm:request_success_total{{finished_reason=\"r7\",engine=\"0\"}} 1\n");
        let error = snapshot(&twice).expect_err("a series read twice");
        assert!(
            matches!(
                error,
                SnapshotError::Impossible {
                    series: name::REQUEST_SUCCESS,
                    problem: Problem::Duplicate,
                    ..
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn an_unlabelled_histogram_child_right_after_a_labelled_one_is_its_own_child() {
        // The fast path matches a sample to the previous child by that child's labels: a child
        // remembered without them would take the unlabelled samples that follow as its own
        // (a second `+Inf` bucket, a second `_count`) and refuse a valid body.
        let body = "\
vllm:num_requests_waiting 1
vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"1.0\"} 2
vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"+Inf\"} 3
vllm:e2e_request_latency_seconds_count{engine=\"0\"} 3
vllm:e2e_request_latency_seconds_sum{engine=\"0\"} 2
vllm:e2e_request_latency_seconds_bucket{le=\"1.0\"} 4
vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\"} 5
vllm:e2e_request_latency_seconds_count 5
vllm:e2e_request_latency_seconds_sum 3
";
        let e2e = snapshot(body)
            .expect("two children of one histogram")
            .e2e_latency
            .expect("the e2e histogram");
        assert_eq!((e2e.count, e2e.sum), (8.0, 5.0));
        let buckets: Vec<(f64, f64)> = e2e.buckets.iter().map(|b| (b.le, b.count)).collect();
        assert_eq!(buckets, [(1.0, 6.0), (f64::INFINITY, 8.0)]);
    }

    #[test]
    fn children_of_one_histogram_are_told_apart_by_their_labels_in_any_sample_order() {
        let e2e = |body: &str| {
            let h = snapshot(body)
                .expect("children of one histogram")
                .e2e_latency
                .expect("the e2e histogram");
            let buckets: Vec<(f64, f64)> = h.buckets.iter().map(|b| (b.le, b.count)).collect();
            (h.count, h.sum, buckets)
        };
        // Two engines, one child each, one after the other: same label names, other values.
        let body = "\
vllm:num_requests_waiting 1
vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"1.0\"} 2
vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"+Inf\"} 3
vllm:e2e_request_latency_seconds_count{engine=\"0\"} 3
vllm:e2e_request_latency_seconds_sum{engine=\"0\"} 2
vllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"1.0\"} 4
vllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"+Inf\"} 5
vllm:e2e_request_latency_seconds_count{engine=\"1\"} 5
vllm:e2e_request_latency_seconds_sum{engine=\"1\"} 3
";
        assert_eq!(
            e2e(body),
            (8.0, 5.0, vec![(1.0, 6.0), (f64::INFINITY, 8.0)])
        );
        // A labelled child whose `_count` and `_sum` (no `le`) come first, right after the
        // unlabelled child: they are the labelled child's, not the unlabelled one's.
        let body = "\
vllm:num_requests_waiting 1
vllm:e2e_request_latency_seconds_bucket{le=\"1.0\"} 2
vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\"} 3
vllm:e2e_request_latency_seconds_count 3
vllm:e2e_request_latency_seconds_sum 2
vllm:e2e_request_latency_seconds_count{engine=\"1\"} 5
vllm:e2e_request_latency_seconds_sum{engine=\"1\"} 3
vllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"1.0\"} 4
vllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"+Inf\"} 5
";
        assert_eq!(
            e2e(body),
            (8.0, 5.0, vec![(1.0, 6.0), (f64::INFINITY, 8.0)])
        );
    }

    #[test]
    fn an_engine_label_or_either_v1_only_name_alone_marks_a_v1_engine() {
        let generation = |body: &str| snapshot(body).expect("a usable body").info.generation;
        assert_eq!(
            generation("vllm:num_requests_waiting{engine=\"0\"} 1\n"),
            Generation::V1
        );
        assert_eq!(
            generation("vllm:num_requests_waiting 1\nvllm:kv_cache_usage_perc 0.5\n"),
            Generation::V1
        );
        let itl = "\
vllm:num_requests_waiting 1
vllm:inter_token_latency_seconds_bucket{le=\"+Inf\"} 0
";
        assert_eq!(generation(itl), Generation::V1);
        assert_eq!(
            generation("vllm:num_requests_waiting 1\n"),
            Generation::Unknown
        );
    }

    #[test]
    fn a_count_agrees_with_the_inf_bucket_up_to_float_noise_and_no_further() {
        let body = |count: f64, inf: f64| {
            format!(
                "vllm:num_requests_waiting 1\n\
                 vllm:e2e_request_latency_seconds_bucket{{le=\"+Inf\"}} {inf}\n\
                 vllm:e2e_request_latency_seconds_count {count}\n"
            )
        };
        // 1 in 1e12 apart (below the 1e-9 relative tolerance): the same count.
        let e2e = snapshot(&body(1e12, 1e12 + 1.0))
            .expect("float noise is no mismatch")
            .e2e_latency
            .expect("the e2e histogram");
        assert_eq!(e2e.count, 1e12);
        // Twice as many is a mismatch, however large the numbers.
        let err = snapshot(&body(1e12, 2e12)).expect_err("a count half the +Inf bucket");
        assert!(
            matches!(
                err,
                SnapshotError::Impossible {
                    problem: Problem::CountMismatch { .. },
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn each_v0_only_series_alone_marks_a_v0_engine() {
        // The old KV name alone does not tell the generations apart: unknown.
        let base = "vllm:num_requests_waiting 1\nvllm:gpu_cache_usage_perc 0.5\n";
        let generation = |extra: &str| {
            snapshot(&format!("{base}{extra}"))
                .expect("a usable body")
                .info
                .generation
        };
        assert_eq!(generation(""), Generation::Unknown);
        assert_eq!(generation("vllm:num_requests_swapped 0\n"), Generation::V0);
        assert_eq!(generation("vllm:cpu_cache_usage_perc 0\n"), Generation::V0);
        assert_eq!(
            generation("vllm:time_in_queue_requests_count 3\n"),
            Generation::V0
        );
        // Only the `_count` of that histogram marks it.
        assert_eq!(
            generation("vllm:time_in_queue_requests_sum 3\n"),
            Generation::Unknown
        );
    }
}
