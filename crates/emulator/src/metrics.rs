//! Rendering an engine's state as a vLLM `/metrics` body, byte-compatible with what vLLM's
//! `prometheus_client` writes.
//!
//! Owns: [`render`], one renderer for both layouts: which families a body carries and in which
//! order ([`V1_FAMILIES`], [`V0_FAMILIES`]), where each family's number comes from, and the
//! per-layout conventions (process collector, `_created` gauges, histogram sample order).
//! Names, HELP texts, labels and buckets come from [`vllm_keda_core::catalog`]. Does not own
//! the numbers (see [`super::stats`]), the text formatting (see [`super::text`]) or serving
//! them (see [`super::server`]).
//!
//! Layout follows the fixtures: family order, HELP texts, label order (sorted by name), bucket
//! lists, `_created` gauges in V1, `_sum`-first histograms and no `_created` in V0.

use vllm_keda_core::catalog::{Kind, Metric, Series, Version, label};

use super::config::MetricsShape;
use super::engine::{Engine, FinishReason};
use super::http_stats::HttpStats;
use super::stats::EngineHistogram;
use super::text::Writer;

/// What a body says about the replica besides the engine's own numbers.
#[derive(Debug, Clone, Copy)]
pub struct RenderInfo<'a> {
    /// The served model name (`model_name` label).
    pub model_name: &'a str,
    /// Data-parallel rank (`engine` label, V1 only).
    pub engine_index: u32,
    /// Unix time the replica (re)started: `process_start_time_seconds` and every `_created`.
    pub start_unix_seconds: f64,
    /// HTTP instrumentator counters (V1 only), if the replica serves HTTP.
    pub http: Option<&'a HttpStats>,
}

/// Renders a full `/metrics` body for `engine` into a new string.
pub fn render_string(engine: &Engine, info: &RenderInfo<'_>) -> String {
    let mut out = String::with_capacity(64 * 1024);
    render(engine, info, &mut out);
    out
}

/// The vLLM families a V1 body carries, in the order vLLM writes them.
pub const V1_FAMILIES: &[Metric] = &[
    Metric::RequestsRunning,
    Metric::RequestsWaiting,
    Metric::EngineSleepState,
    Metric::KvCacheUsage,
    Metric::PrefixCacheQueries,
    Metric::PrefixCacheHits,
    Metric::ExternalPrefixCacheQueries,
    Metric::ExternalPrefixCacheHits,
    Metric::MmCacheQueries,
    Metric::MmCacheHits,
    Metric::Preemptions,
    Metric::PromptTokens,
    Metric::GenerationTokens,
    Metric::RequestSuccess,
    Metric::RequestPromptTokens,
    Metric::RequestGenerationTokens,
    Metric::IterationTokens,
    Metric::RequestMaxNumGenerationTokens,
    Metric::RequestParamsN,
    Metric::RequestParamsMaxTokens,
    Metric::TimeToFirstToken,
    Metric::InterTokenLatency,
    Metric::RequestTimePerOutputToken,
    Metric::E2eRequestLatency,
    Metric::RequestQueueTime,
    Metric::RequestInferenceTime,
    Metric::RequestPrefillTime,
    Metric::RequestDecodeTime,
    Metric::CacheConfigInfo,
];

/// The vLLM families a V0 body carries, in the order the multiprocess collector writes them.
pub const V0_FAMILIES: &[Metric] = &[
    Metric::PromptTokens,
    Metric::GenerationTokens,
    Metric::Tokens,
    Metric::Preemptions,
    Metric::RequestSuccess,
    Metric::TimeToFirstToken,
    Metric::InterTokenLatency,
    Metric::E2eRequestLatency,
    Metric::RequestQueueTime,
    Metric::RequestInferenceTime,
    Metric::RequestPrefillTime,
    Metric::RequestDecodeTime,
    Metric::TimeInQueueRequests,
    Metric::RequestPromptTokens,
    Metric::RequestGenerationTokens,
    Metric::RequestMaxNumGenerationTokens,
    Metric::RequestParamsN,
    Metric::RequestParamsMaxTokens,
    Metric::IterationTokens,
    Metric::ModelForwardTime,
    Metric::ModelExecuteTime,
    Metric::RequestsRunning,
    Metric::RequestsWaiting,
    Metric::RequestsSwapped,
    Metric::KvCacheUsage,
    Metric::CpuCacheUsage,
    Metric::CpuPrefixCacheHitRate,
    Metric::GpuPrefixCacheHitRate,
    Metric::SpecDecodeDraftAcceptanceRate,
    Metric::SpecDecodeEfficiency,
    Metric::CacheConfigInfo,
];

/// What differs between the two layouts besides the catalog's names, labels and buckets.
struct Layout {
    version: Version,
    families: &'static [Metric],
    /// `python_*` and `process_*` families first (absent in multiprocess mode).
    process_collector: bool,
    /// `_created` gauges after counters and histograms (absent in multiprocess mode).
    created: bool,
    /// Histograms as `_sum`, buckets, `_count` (multiprocess) instead of buckets, `_count`, `_sum`.
    sum_first: bool,
    /// The API server's `http_*` families, when the replica serves HTTP.
    http: bool,
    /// Finish reasons that get a `request_success` child.
    finish_reasons: &'static [FinishReason],
}

impl Layout {
    fn of(shape: MetricsShape) -> Self {
        match shape {
            MetricsShape::V1 => Layout {
                version: Version::V1,
                families: V1_FAMILIES,
                process_collector: true,
                created: true,
                sum_first: false,
                http: true,
                finish_reasons: &FinishReason::ALL,
            },
            MetricsShape::V0 => Layout {
                version: Version::V0,
                families: V0_FAMILIES,
                process_collector: false,
                created: false,
                sum_first: true,
                http: false,
                finish_reasons: &[FinishReason::Stop, FinishReason::Length],
            },
        }
    }
}

/// Appends a full `/metrics` body (text format 0.0.4) for `engine` to `out`.
pub fn render(engine: &Engine, info: &RenderInfo<'_>, out: &mut String) {
    let layout = Layout::of(engine.config().metrics_shape);
    let version = layout.version;
    let mut w = Writer::new(
        out,
        Vec::new(),
        layout.created.then_some(info.start_unix_seconds),
    );
    if layout.process_collector {
        process_metrics(&mut w, version, info.start_unix_seconds);
    }
    let engine_index = info.engine_index.to_string();
    let all_base = Writer::base_labels(&[
        (label::ENGINE, &engine_index),
        (label::MODEL_NAME, info.model_name),
    ]);
    // Which of `all_base` `w.base` holds; rebuilt only when a family's labels differ.
    let mut base_key = (false, false);
    for &metric in layout.families {
        let family = metric.family();
        let Some(series) = family.series(version) else {
            debug_assert!(false, "{metric:?} is not a {version:?} family");
            continue;
        };
        let key = (
            series.labels.contains(&label::ENGINE),
            series.labels.contains(&label::MODEL_NAME),
        );
        if key != base_key {
            w.base = all_base
                .iter()
                .filter(|(k, _)| series.labels.contains(k))
                .cloned()
                .collect();
            base_key = key;
        }
        family_samples(&mut w, engine, &layout, metric, family.kind, series);
    }
    if let Some(http) = info.http.filter(|_| layout.http) {
        w.base.clear();
        http.render(&mut w);
    }
}

/// One family's HELP, TYPE and samples.
fn family_samples(
    w: &mut Writer<'_>,
    engine: &Engine,
    layout: &Layout,
    metric: Metric,
    kind: Kind,
    series: &Series,
) {
    let stats = engine.stats();
    let gauges = engine.published_gauges();
    let (name, help) = (series.name, series.help);
    let none: &[(&str, &str)] = &[];
    match metric {
        Metric::EngineSleepState => {
            w.header(name, help, kind.as_str());
            for (state, v) in [
                ("awake", 1.0),
                ("weights_offloaded", 0.0),
                ("discard_all", 0.0),
            ] {
                w.sample(name, "", &[(label::SLEEP_STATE, state)], v);
            }
        }
        Metric::CacheConfigInfo => {
            let cfg = engine.config();
            let block_size = cfg.block_size.to_string();
            let blocks = cfg.num_gpu_blocks.to_string();
            let extra: Vec<(&str, &str)> = series
                .labels
                .iter()
                .filter(|l| **l != label::ENGINE && **l != label::MODEL_NAME)
                .map(|l| {
                    let value = match *l {
                        "block_size" => &block_size,
                        "num_gpu_blocks" => &blocks,
                        other => cache_config_value(layout.version, other),
                    };
                    (*l, value)
                })
                .collect();
            w.header(name, help, kind.as_str());
            w.sample(name, "", &extra, 1.0);
        }
        Metric::RequestSuccess => {
            let reasons: Vec<[(&str, &str); 1]> = layout
                .finish_reasons
                .iter()
                .map(|r| [(label::FINISHED_REASON, r.as_str())])
                .collect();
            let children: Vec<(&[(&str, &str)], f64)> = layout
                .finish_reasons
                .iter()
                .zip(&reasons)
                .map(|(r, l)| (&l[..], stats.finished(*r) as f64))
                .collect();
            w.counter(name, help, &children);
        }
        _ => match kind {
            Kind::Gauge => {
                let value = match metric {
                    Metric::RequestsRunning => gauges.running as f64,
                    Metric::RequestsWaiting => gauges.waiting as f64,
                    Metric::KvCacheUsage => gauges.kv_cache_usage,
                    // Hit rates are -1 until a prefix cache is queried.
                    Metric::CpuPrefixCacheHitRate | Metric::GpuPrefixCacheHitRate => -1.0,
                    _ => 0.0,
                };
                w.gauge(name, help, value);
            }
            Kind::Counter => {
                let value = match metric {
                    Metric::PrefixCacheQueries => stats.prefix_cache_queries_total,
                    Metric::Preemptions => stats.num_preemptions_total,
                    Metric::PromptTokens => stats.prompt_tokens_total,
                    Metric::GenerationTokens => stats.generation_tokens_total,
                    Metric::Tokens => stats.prompt_tokens_total + stats.generation_tokens_total,
                    _ => 0,
                };
                w.counter(name, help, &[(none, value as f64)]);
            }
            Kind::Histogram => {
                let empty;
                let h = match metric {
                    Metric::RequestPromptTokens => &stats.request_prompt_tokens,
                    Metric::RequestGenerationTokens => &stats.request_generation_tokens,
                    Metric::IterationTokens => &stats.iteration_tokens,
                    Metric::RequestMaxNumGenerationTokens => {
                        &stats.request_max_num_generation_tokens
                    }
                    Metric::RequestParamsN => &stats.request_params_n,
                    Metric::RequestParamsMaxTokens => &stats.request_params_max_tokens,
                    Metric::TimeToFirstToken => &stats.time_to_first_token,
                    Metric::InterTokenLatency => &stats.inter_token_latency,
                    Metric::RequestTimePerOutputToken => &stats.request_time_per_output_token,
                    Metric::E2eRequestLatency => &stats.e2e_request_latency,
                    Metric::RequestQueueTime | Metric::TimeInQueueRequests => {
                        &stats.request_queue_time
                    }
                    Metric::RequestInferenceTime => &stats.request_inference_time,
                    Metric::RequestPrefillTime => &stats.request_prefill_time,
                    Metric::RequestDecodeTime => &stats.request_decode_time,
                    // Model forward/execute times are collected only on request: never observed.
                    _ => {
                        empty = EngineHistogram::new(series.buckets);
                        &empty
                    }
                };
                w.histogram(name, help, h, layout.sum_first);
            }
        },
    }
}

/// A `vllm:cache_config_info` label value besides `block_size` and `num_gpu_blocks`: the
/// emulated replica's fixed configuration (prefix caching on in V1, CPU swap blocks in V0).
fn cache_config_value(version: Version, label: &str) -> &'static str {
    match (label, version) {
        ("enable_prefix_caching", Version::V1) => "True",
        ("num_cpu_blocks", Version::V0) => "2048",
        ("cache_dtype", _) => "auto",
        ("cpu_offload_gb", _) => "0",
        (label::GPU_MEMORY_UTILIZATION, _) => "0.9",
        ("prefix_caching_hash_algo", _) => "sha256",
        ("swap_space", _) => "4",
        ("swap_space_bytes", _) => "4294967296",
        (
            "enable_prefix_caching"
            | "calculate_kv_scales"
            | "is_attention_free"
            | "kv_sharing_fast_prefill",
            _,
        ) => "False",
        // Unset options (`num_cpu_blocks` in V1, overrides, sliding window).
        _ => "None",
    }
}

/// `prometheus_client`'s default process and GC collectors (single-process mode only).
fn process_metrics(w: &mut Writer<'_>, version: Version, start_unix_seconds: f64) {
    let gc = [
        (
            "python_gc_objects_collected_total",
            "Objects collected during gc",
            [52840.0, 7391.0, 1502.0],
        ),
        (
            "python_gc_objects_uncollectable_total",
            "Uncollectable objects found during GC",
            [0.0; 3],
        ),
        (
            "python_gc_collections_total",
            "Number of times this generation was collected",
            [2318.0, 210.0, 11.0],
        ),
    ];
    for (name, help, values) in gc {
        w.header(name, help, "counter");
        for (g, v) in ["0", "1", "2"].iter().zip(values) {
            w.sample(name, "", &[("generation", g)], v);
        }
    }
    w.header("python_info", "Python platform information", "gauge");
    w.sample(
        "python_info",
        "",
        &[
            ("implementation", "CPython"),
            ("major", "3"),
            ("minor", "12"),
            ("patchlevel", "11"),
            ("version", "3.12.11"),
        ],
        1.0,
    );
    w.gauge(
        "process_virtual_memory_bytes",
        "Virtual memory size in bytes.",
        6.0521304064e10,
    );
    w.gauge(
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        3.291705344e9,
    );
    if let Some(start) = Metric::ProcessStartTime.family().series(version) {
        w.gauge(start.name, start.help, start_unix_seconds);
    }
    w.header(
        "process_cpu_seconds_total",
        "Total user and system CPU time spent in seconds.",
        "counter",
    );
    w.sample("process_cpu_seconds_total", "", &[], 12.5);
    w.gauge(
        "process_open_fds",
        "Number of open file descriptors.",
        287.0,
    );
    w.gauge(
        "process_max_fds",
        "Maximum number of open file descriptors.",
        1048576.0,
    );
}
