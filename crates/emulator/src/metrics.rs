//! Rendering an engine's state as a vLLM `/metrics` body, byte-compatible with what vLLM's
//! `prometheus_client` writes.
//!
//! Owns: [`render`] (V1 or V0 layout, chosen by the engine's [`MetricsShape`]): which families
//! exist, their HELP texts, order and labels. Does not own the numbers (see [`super::stats`]),
//! the text formatting (see [`super::text`]) or serving them (see [`super::server`]).
//!
//! Layout follows the fixtures: family order, HELP texts, label order (sorted by name), bucket
//! lists, `_created` gauges in V1, `_sum`-first histograms and no `_created` in V0.

use super::config::MetricsShape;
use super::engine::{Engine, FinishReason};
use super::http_stats::HttpStats;
use super::stats::{Histogram, V0_MODEL_TIME_MS_BUCKETS};
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

/// Appends a full `/metrics` body (text format 0.0.4) for `engine` to `out`.
pub fn render(engine: &Engine, info: &RenderInfo<'_>, out: &mut String) {
    match engine.config().metrics_shape {
        MetricsShape::V1 => render_v1(engine, info, out),
        MetricsShape::V0 => render_v0(engine, info, out),
    }
}

fn process_metrics(w: &mut Writer<'_>, start_unix_seconds: f64) {
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
    w.gauge(
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        start_unix_seconds,
    );
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

const HELP_PROMPT_TOKENS: &str = "Number of prefill tokens processed.";
const HELP_GENERATION_TOKENS: &str = "Number of generation tokens processed.";
const HELP_PREEMPTIONS: &str = "Cumulative number of preemption from the engine.";
const HELP_SUCCESS: &str = "Count of successfully processed requests.";
const HELP_ITERATION: &str = "Histogram of number of tokens per engine_step.";
const HELP_MAX_GEN: &str = "Histogram of maximum number of requested generation tokens.";
const HELP_N: &str = "Histogram of the n request parameter.";
const HELP_MAX_TOKENS: &str = "Histogram of the max_tokens request parameter.";
const HELP_TTFT: &str = "Histogram of time to first token in seconds.";
const HELP_QUEUE: &str = "Histogram of time spent in WAITING phase for request.";
const HELP_INFERENCE: &str = "Histogram of time spent in RUNNING phase for request.";
const HELP_PREFILL: &str = "Histogram of time spent in PREFILL phase for request.";
const HELP_DECODE: &str = "Histogram of time spent in DECODE phase for request.";
const HELP_WAITING: &str = "Number of requests waiting to be processed.";

fn render_v1(engine: &Engine, info: &RenderInfo<'_>, out: &mut String) {
    let stats = engine.stats();
    let mut plain = Writer::new(out, Vec::new(), Some(info.start_unix_seconds));
    process_metrics(&mut plain, info.start_unix_seconds);
    let mut w = Writer::new(
        plain.out,
        Writer::base_labels(&[
            ("engine", &info.engine_index.to_string()),
            ("model_name", info.model_name),
        ]),
        Some(info.start_unix_seconds),
    );
    w.gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        engine.published_gauges().running as f64,
    );
    w.gauge(
        "vllm:num_requests_waiting",
        HELP_WAITING,
        engine.published_gauges().waiting as f64,
    );
    let sleep = "vllm:engine_sleep_state";
    w.header(
        sleep,
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; \
         weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
        "gauge",
    );
    for (state, v) in [
        ("awake", 1.0),
        ("weights_offloaded", 0.0),
        ("discard_all", 0.0),
    ] {
        w.sample(sleep, "", &[("sleep_state", state)], v);
    }
    w.gauge(
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        engine.published_gauges().kv_cache_usage,
    );
    let none: &[(&str, &str)] = &[];
    let queries = stats.prefix_cache_queries_total as f64;
    for (stem, help, v) in [
        (
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            queries,
        ),
        (
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            0.0,
        ),
        (
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
            0.0,
        ),
        (
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
            0.0,
        ),
        (
            "vllm:mm_cache_queries",
            "Multi-modal cache queries, in terms of number of queried items.",
            0.0,
        ),
        (
            "vllm:mm_cache_hits",
            "Multi-modal cache hits, in terms of number of cached items.",
            0.0,
        ),
        (
            "vllm:num_preemptions",
            HELP_PREEMPTIONS,
            stats.num_preemptions_total as f64,
        ),
        (
            "vllm:prompt_tokens",
            HELP_PROMPT_TOKENS,
            stats.prompt_tokens_total as f64,
        ),
        (
            "vllm:generation_tokens",
            HELP_GENERATION_TOKENS,
            stats.generation_tokens_total as f64,
        ),
    ] {
        w.counter(stem, help, &[(none, v)]);
    }
    let reasons: Vec<[(&str, &str); 1]> = FinishReason::ALL
        .iter()
        .map(|r| [("finished_reason", r.as_str())])
        .collect();
    let children: Vec<(&[(&str, &str)], f64)> = FinishReason::ALL
        .iter()
        .zip(&reasons)
        .map(|(r, l)| (&l[..], stats.finished(*r) as f64))
        .collect();
    w.counter("vllm:request_success", HELP_SUCCESS, &children);
    let hists: [(&str, &str, &Histogram); 14] = [
        (
            "vllm:request_prompt_tokens",
            HELP_PROMPT_TOKENS,
            &stats.request_prompt_tokens,
        ),
        (
            "vllm:request_generation_tokens",
            HELP_GENERATION_TOKENS,
            &stats.request_generation_tokens,
        ),
        (
            "vllm:iteration_tokens_total",
            HELP_ITERATION,
            &stats.iteration_tokens,
        ),
        (
            "vllm:request_max_num_generation_tokens",
            HELP_MAX_GEN,
            &stats.request_max_num_generation_tokens,
        ),
        ("vllm:request_params_n", HELP_N, &stats.request_params_n),
        (
            "vllm:request_params_max_tokens",
            HELP_MAX_TOKENS,
            &stats.request_params_max_tokens,
        ),
        (
            "vllm:time_to_first_token_seconds",
            HELP_TTFT,
            &stats.time_to_first_token,
        ),
        (
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            &stats.inter_token_latency,
        ),
        (
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            &stats.request_time_per_output_token,
        ),
        (
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            &stats.e2e_request_latency,
        ),
        (
            "vllm:request_queue_time_seconds",
            HELP_QUEUE,
            &stats.request_queue_time,
        ),
        (
            "vllm:request_inference_time_seconds",
            HELP_INFERENCE,
            &stats.request_inference_time,
        ),
        (
            "vllm:request_prefill_time_seconds",
            HELP_PREFILL,
            &stats.request_prefill_time,
        ),
        (
            "vllm:request_decode_time_seconds",
            HELP_DECODE,
            &stats.request_decode_time,
        ),
    ];
    for (name, help, h) in hists {
        w.histogram(name, help, h, false);
    }
    let cfg = engine.config();
    let block_size = cfg.block_size.to_string();
    let blocks = cfg.num_gpu_blocks.to_string();
    w.base.retain(|(k, _)| *k != "model_name");
    w.header(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        "gauge",
    );
    w.sample(
        "vllm:cache_config_info",
        "",
        &[
            ("block_size", &block_size),
            ("cache_dtype", "auto"),
            ("calculate_kv_scales", "False"),
            ("cpu_offload_gb", "0"),
            ("enable_prefix_caching", "True"),
            ("gpu_memory_utilization", "0.9"),
            ("is_attention_free", "False"),
            ("kv_sharing_fast_prefill", "False"),
            ("num_cpu_blocks", "None"),
            ("num_gpu_blocks", &blocks),
            ("num_gpu_blocks_override", "None"),
            ("prefix_caching_hash_algo", "sha256"),
            ("sliding_window", "None"),
            ("swap_space", "4"),
        ],
        1.0,
    );
    if let Some(http) = info.http {
        w.base.clear();
        http.render(&mut w);
    }
}

fn render_v0(engine: &Engine, info: &RenderInfo<'_>, out: &mut String) {
    let stats = engine.stats();
    let mut w = Writer::new(
        out,
        Writer::base_labels(&[("model_name", info.model_name)]),
        None,
    );
    let none: &[(&str, &str)] = &[];
    let prompt = stats.prompt_tokens_total as f64;
    let generation = stats.generation_tokens_total as f64;
    w.counter("vllm:prompt_tokens", HELP_PROMPT_TOKENS, &[(none, prompt)]);
    w.counter(
        "vllm:generation_tokens",
        HELP_GENERATION_TOKENS,
        &[(none, generation)],
    );
    w.counter(
        "vllm:tokens",
        "Number of prefill plus generation tokens processed.",
        &[(none, prompt + generation)],
    );
    w.counter(
        "vllm:num_preemptions",
        HELP_PREEMPTIONS,
        &[(none, stats.num_preemptions_total as f64)],
    );
    w.counter(
        "vllm:request_success",
        HELP_SUCCESS,
        &[
            (
                &[("finished_reason", "stop")],
                stats.finished(FinishReason::Stop) as f64,
            ),
            (
                &[("finished_reason", "length")],
                stats.finished(FinishReason::Length) as f64,
            ),
        ],
    );
    let empty_ms = Histogram::new(V0_MODEL_TIME_MS_BUCKETS);
    let hists: [(&str, &str, &Histogram); 16] = [
        (
            "vllm:time_to_first_token_seconds",
            HELP_TTFT,
            &stats.time_to_first_token,
        ),
        (
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            &stats.inter_token_latency,
        ),
        (
            "vllm:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            &stats.e2e_request_latency,
        ),
        (
            "vllm:request_queue_time_seconds",
            HELP_QUEUE,
            &stats.request_queue_time,
        ),
        (
            "vllm:request_inference_time_seconds",
            HELP_INFERENCE,
            &stats.request_inference_time,
        ),
        (
            "vllm:request_prefill_time_seconds",
            HELP_PREFILL,
            &stats.request_prefill_time,
        ),
        (
            "vllm:request_decode_time_seconds",
            HELP_DECODE,
            &stats.request_decode_time,
        ),
        (
            "vllm:time_in_queue_requests",
            "Histogram of time the request spent in the queue in seconds.",
            &stats.request_queue_time,
        ),
        (
            "vllm:request_prompt_tokens",
            HELP_PROMPT_TOKENS,
            &stats.request_prompt_tokens,
        ),
        (
            "vllm:request_generation_tokens",
            HELP_GENERATION_TOKENS,
            &stats.request_generation_tokens,
        ),
        (
            "vllm:request_max_num_generation_tokens",
            HELP_MAX_GEN,
            &stats.request_max_num_generation_tokens,
        ),
        ("vllm:request_params_n", HELP_N, &stats.request_params_n),
        (
            "vllm:request_params_max_tokens",
            HELP_MAX_TOKENS,
            &stats.request_params_max_tokens,
        ),
        (
            "vllm:iteration_tokens_total",
            HELP_ITERATION,
            &stats.iteration_tokens,
        ),
        (
            "vllm:model_forward_time_milliseconds",
            "Histogram of time spent in the model forward pass in ms.",
            &empty_ms,
        ),
        (
            "vllm:model_execute_time_milliseconds",
            "Histogram of time spent in the model execute function in ms.",
            &empty_ms,
        ),
    ];
    for (name, help, h) in hists {
        w.histogram(name, help, h, true);
    }
    w.gauge(
        "vllm:num_requests_running",
        "Number of requests currently running on GPU.",
        engine.published_gauges().running as f64,
    );
    w.gauge(
        "vllm:num_requests_waiting",
        HELP_WAITING,
        engine.published_gauges().waiting as f64,
    );
    w.gauge(
        "vllm:num_requests_swapped",
        "Number of requests swapped to CPU.",
        0.0,
    );
    w.gauge(
        "vllm:gpu_cache_usage_perc",
        "GPU KV-cache usage. 1 means 100 percent usage.",
        engine.published_gauges().kv_cache_usage,
    );
    w.gauge(
        "vllm:cpu_cache_usage_perc",
        "CPU KV-cache usage. 1 means 100 percent usage.",
        0.0,
    );
    w.gauge(
        "vllm:cpu_prefix_cache_hit_rate",
        "CPU prefix cache block hit rate.",
        -1.0,
    );
    w.gauge(
        "vllm:gpu_prefix_cache_hit_rate",
        "GPU prefix cache block hit rate.",
        -1.0,
    );
    w.gauge(
        "vllm:spec_decode_draft_acceptance_rate",
        "Speulative token acceptance rate.",
        0.0,
    );
    w.gauge(
        "vllm:spec_decode_efficiency",
        "Speculative decoding system efficiency.",
        0.0,
    );
    let cfg = engine.config();
    let block_size = cfg.block_size.to_string();
    let blocks = cfg.num_gpu_blocks.to_string();
    w.base.clear();
    w.header(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        "gauge",
    );
    w.sample(
        "vllm:cache_config_info",
        "",
        &[
            ("block_size", &block_size),
            ("cache_dtype", "auto"),
            ("cpu_offload_gb", "0"),
            ("enable_prefix_caching", "False"),
            ("gpu_memory_utilization", "0.9"),
            ("is_attention_free", "False"),
            ("num_cpu_blocks", "2048"),
            ("num_gpu_blocks", &blocks),
            ("num_gpu_blocks_override", "None"),
            ("sliding_window", "None"),
            ("swap_space_bytes", "4294967296"),
        ],
        1.0,
    );
}
