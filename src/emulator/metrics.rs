//! Rendering an engine's state as a vLLM `/metrics` body, byte-compatible with what vLLM's
//! `prometheus_client` writes.
//!
//! Owns: [`render`] (V1 or V0 layout, chosen by the engine's [`MetricsShape`]), the Python float
//! formatting ([`py_float`]) and the HTTP instrumentator counters ([`HttpStats`]). Does not own
//! the numbers themselves (see [`super::stats`]) or serving them (see [`super::server`]).
//!
//! Layout follows the fixtures: family order, HELP texts, label order (sorted by name), bucket
//! lists, `_created` gauges in V1, `_sum`-first histograms and no `_created` in V0.

use std::fmt::Write as _;

use super::config::MetricsShape;
use super::engine::{Engine, FinishReason};
use super::stats::{Histogram, V0_MODEL_TIME_MS_BUCKETS};

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

/// Formats `v` the way `prometheus_client` does (`repr`, with Go-style exponents for large
/// positive values): `14.0`, `2.773726e+06`, `1.7672580591200001e+09`, `+Inf`, `NaN`.
pub fn py_float(v: f64, out: &mut String) {
    if v.is_nan() {
        out.push_str("NaN");
        return;
    }
    if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
        return;
    }
    // Shortest round-trip digits and the decimal exponent of the first digit.
    let sci = format!("{:e}", v.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let neg = v.is_sign_negative();
    if v > 0.0 && (6..16).contains(&exp) {
        let trimmed = digits.trim_end_matches('0');
        let (first, rest) = trimmed.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let _ = write!(out, "e+{exp:02}");
        return;
    }
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let sign = if exp < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exp.abs());
    }
}

fn escape_label(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Writes samples with a fixed base label set (`engine`, `model_name`) plus at most one extra
/// label, keeping labels sorted by name like the fixtures.
struct Writer<'o> {
    out: &'o mut String,
    /// Sorted base labels.
    base: Vec<(&'static str, String)>,
    created: Option<f64>,
}

impl Writer<'_> {
    fn header(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, suffix: &str, extra: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        self.out.push_str(suffix);
        let mut labels: Vec<(&str, &str)> = self
            .base
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .chain(extra.iter().copied())
            .collect();
        labels.sort_by(|a, b| a.0.cmp(b.0));
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                escape_label(v, self.out);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        py_float(value, self.out);
        self.out.push('\n');
    }

    fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.header(name, help, "gauge");
        self.sample(name, "", &[], value);
    }

    fn created_family(&mut self, stem: &str, help: &str, children: &[&[(&str, &str)]]) {
        if let Some(created) = self.created {
            let name = format!("{stem}_created");
            self.header(&name, help, "gauge");
            for extra in children {
                self.sample(&name, "", extra, created);
            }
        }
    }

    /// A counter family `stem_total` (one child per `children` entry) plus its `_created`.
    fn counter(&mut self, stem: &str, help: &str, children: &[(&[(&str, &str)], f64)]) {
        let total = format!("{stem}_total");
        self.header(&total, help, "counter");
        for (extra, value) in children {
            self.sample(&total, "", extra, *value);
        }
        let extras: Vec<&[(&str, &str)]> = children.iter().map(|c| c.0).collect();
        self.created_family(stem, help, &extras);
    }

    fn histogram(&mut self, name: &str, help: &str, h: &Histogram, v0_order: bool) {
        self.header(name, help, "histogram");
        if v0_order {
            self.sample(name, "_sum", &[], h.sum());
        }
        let mut le = String::new();
        for (i, cumulative) in h.cumulative().enumerate() {
            le.clear();
            py_float(h.bounds().get(i).copied().unwrap_or(f64::INFINITY), &mut le);
            self.sample(name, "_bucket", &[("le", &le)], cumulative as f64);
        }
        self.sample(name, "_count", &[], h.count() as f64);
        if !v0_order {
            self.sample(name, "_sum", &[], h.sum());
        }
        self.created_family(name, help, &[&[]]);
    }
}

fn process_metrics(w: &mut Writer<'_>, start_unix_seconds: f64) {
    let gc = [
        ("python_gc_objects_collected_total", "Objects collected during gc", [52840.0, 7391.0, 1502.0]),
        ("python_gc_objects_uncollectable_total", "Uncollectable objects found during GC", [0.0; 3]),
        ("python_gc_collections_total", "Number of times this generation was collected", [2318.0, 210.0, 11.0]),
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
    w.gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", 6.0521304064e10);
    w.gauge("process_resident_memory_bytes", "Resident memory size in bytes.", 3.291705344e9);
    w.gauge(
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        start_unix_seconds,
    );
    w.header("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", "counter");
    w.sample("process_cpu_seconds_total", "", &[], 12.5);
    w.gauge("process_open_fds", "Number of open file descriptors.", 287.0);
    w.gauge("process_max_fds", "Maximum number of open file descriptors.", 1048576.0);
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
    let mut plain = Writer {
        out,
        base: Vec::new(),
        created: Some(info.start_unix_seconds),
    };
    process_metrics(&mut plain, info.start_unix_seconds);
    let mut w = Writer {
        out: plain.out,
        base: vec![
            ("engine", info.engine_index.to_string()),
            ("model_name", info.model_name.to_string()),
        ],
        created: Some(info.start_unix_seconds),
    };
    w.gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        engine.num_running() as f64,
    );
    w.gauge("vllm:num_requests_waiting", HELP_WAITING, engine.num_waiting() as f64);
    let sleep = "vllm:engine_sleep_state";
    w.header(
        sleep,
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; \
         weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
        "gauge",
    );
    for (state, v) in [("awake", 1.0), ("weights_offloaded", 0.0), ("discard_all", 0.0)] {
        w.sample(sleep, "", &[("sleep_state", state)], v);
    }
    w.gauge(
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        engine.kv_cache_usage(),
    );
    let none: &[(&str, &str)] = &[];
    let queries = stats.prefix_cache_queries_total as f64;
    for (stem, help, v) in [
        ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", queries),
        ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", 0.0),
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
        ("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.", 0.0),
        ("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.", 0.0),
        ("vllm:num_preemptions", HELP_PREEMPTIONS, stats.num_preemptions_total as f64),
        ("vllm:prompt_tokens", HELP_PROMPT_TOKENS, stats.prompt_tokens_total as f64),
        ("vllm:generation_tokens", HELP_GENERATION_TOKENS, stats.generation_tokens_total as f64),
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
        ("vllm:request_prompt_tokens", HELP_PROMPT_TOKENS, &stats.request_prompt_tokens),
        ("vllm:request_generation_tokens", HELP_GENERATION_TOKENS, &stats.request_generation_tokens),
        ("vllm:iteration_tokens_total", HELP_ITERATION, &stats.iteration_tokens),
        ("vllm:request_max_num_generation_tokens", HELP_MAX_GEN, &stats.request_max_num_generation_tokens),
        ("vllm:request_params_n", HELP_N, &stats.request_params_n),
        ("vllm:request_params_max_tokens", HELP_MAX_TOKENS, &stats.request_params_max_tokens),
        ("vllm:time_to_first_token_seconds", HELP_TTFT, &stats.time_to_first_token),
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
        ("vllm:request_queue_time_seconds", HELP_QUEUE, &stats.request_queue_time),
        ("vllm:request_inference_time_seconds", HELP_INFERENCE, &stats.request_inference_time),
        ("vllm:request_prefill_time_seconds", HELP_PREFILL, &stats.request_prefill_time),
        ("vllm:request_decode_time_seconds", HELP_DECODE, &stats.request_decode_time),
    ];
    for (name, help, h) in hists {
        w.histogram(name, help, h, false);
    }
    let cfg = engine.config();
    let block_size = cfg.block_size.to_string();
    let blocks = cfg.num_gpu_blocks.to_string();
    w.base.retain(|(k, _)| *k != "model_name");
    w.header("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", "gauge");
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
    let mut w = Writer {
        out,
        base: vec![("model_name", info.model_name.to_string())],
        created: None,
    };
    let none: &[(&str, &str)] = &[];
    let prompt = stats.prompt_tokens_total as f64;
    let generation = stats.generation_tokens_total as f64;
    w.counter("vllm:prompt_tokens", HELP_PROMPT_TOKENS, &[(none, prompt)]);
    w.counter("vllm:generation_tokens", HELP_GENERATION_TOKENS, &[(none, generation)]);
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
            (&[("finished_reason", "stop")], stats.finished(FinishReason::Stop) as f64),
            (&[("finished_reason", "length")], stats.finished(FinishReason::Length) as f64),
        ],
    );
    let empty_ms = Histogram::new(V0_MODEL_TIME_MS_BUCKETS);
    let hists: [(&str, &str, &Histogram); 16] = [
        ("vllm:time_to_first_token_seconds", HELP_TTFT, &stats.time_to_first_token),
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
        ("vllm:request_queue_time_seconds", HELP_QUEUE, &stats.request_queue_time),
        ("vllm:request_inference_time_seconds", HELP_INFERENCE, &stats.request_inference_time),
        ("vllm:request_prefill_time_seconds", HELP_PREFILL, &stats.request_prefill_time),
        ("vllm:request_decode_time_seconds", HELP_DECODE, &stats.request_decode_time),
        (
            "vllm:time_in_queue_requests",
            "Histogram of time the request spent in the queue in seconds.",
            &stats.request_queue_time,
        ),
        ("vllm:request_prompt_tokens", HELP_PROMPT_TOKENS, &stats.request_prompt_tokens),
        ("vllm:request_generation_tokens", HELP_GENERATION_TOKENS, &stats.request_generation_tokens),
        ("vllm:request_max_num_generation_tokens", HELP_MAX_GEN, &stats.request_max_num_generation_tokens),
        ("vllm:request_params_n", HELP_N, &stats.request_params_n),
        ("vllm:request_params_max_tokens", HELP_MAX_TOKENS, &stats.request_params_max_tokens),
        ("vllm:iteration_tokens_total", HELP_ITERATION, &stats.iteration_tokens),
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
        engine.num_running() as f64,
    );
    w.gauge("vllm:num_requests_waiting", HELP_WAITING, engine.num_waiting() as f64);
    w.gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU.", 0.0);
    w.gauge(
        "vllm:gpu_cache_usage_perc",
        "GPU KV-cache usage. 1 means 100 percent usage.",
        engine.kv_cache_usage(),
    );
    w.gauge("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", 0.0);
    w.gauge("vllm:cpu_prefix_cache_hit_rate", "CPU prefix cache block hit rate.", -1.0);
    w.gauge("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", -1.0);
    w.gauge("vllm:spec_decode_draft_acceptance_rate", "Speulative token acceptance rate.", 0.0);
    w.gauge("vllm:spec_decode_efficiency", "Speculative decoding system efficiency.", 0.0);
    let cfg = engine.config();
    let block_size = cfg.block_size.to_string();
    let blocks = cfg.num_gpu_blocks.to_string();
    w.base.clear();
    w.header("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", "gauge");
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

/// Buckets of `http_request_duration_highr_seconds`.
const HTTP_HIGHR_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0,
    7.5, 10.0, 30.0, 60.0,
];
/// Buckets of `http_request_duration_seconds`.
const HTTP_BUCKETS: &[f64] = &[0.1, 0.5, 1.0];

/// The FastAPI instrumentator's counters that vLLM exposes (`http_*`), per handler.
#[derive(Debug, Clone)]
pub struct HttpStats {
    created_unix_seconds: f64,
    requests: Vec<(&'static str, &'static str, &'static str, u64, f64)>,
    sizes: Vec<(&'static str, u64, f64, f64, f64)>,
    durations: Vec<(&'static str, &'static str, Histogram, f64)>,
    highr: Histogram,
}

impl HttpStats {
    /// Empty counters; `created_unix_seconds` is the replica's start.
    pub fn new(created_unix_seconds: f64) -> Self {
        HttpStats {
            created_unix_seconds,
            requests: Vec::new(),
            sizes: Vec::new(),
            durations: Vec::new(),
            highr: Histogram::new(HTTP_HIGHR_BUCKETS),
        }
    }

    /// Records one finished HTTP request (`status` is the code; grouped as `2xx`, `4xx`, ...).
    pub fn record(
        &mut self,
        handler: &'static str,
        method: &'static str,
        status: u16,
        request_bytes: u64,
        response_bytes: u64,
        duration_seconds: f64,
        now_unix_seconds: f64,
    ) {
        let class = match status {
            100..=199 => "1xx",
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        match self
            .requests
            .iter_mut()
            .find(|r| r.0 == handler && r.1 == method && r.2 == class)
        {
            Some(r) => r.3 += 1,
            None => self
                .requests
                .push((handler, method, class, 1, now_unix_seconds)),
        }
        match self.sizes.iter_mut().find(|s| s.0 == handler) {
            Some(s) => {
                s.1 += 1;
                s.2 += request_bytes as f64;
                s.3 += response_bytes as f64;
            }
            None => self.sizes.push((
                handler,
                1,
                request_bytes as f64,
                response_bytes as f64,
                now_unix_seconds,
            )),
        }
        let pos = match self
            .durations
            .iter()
            .position(|d| d.0 == handler && d.1 == method)
        {
            Some(p) => p,
            None => {
                self.durations
                    .push((handler, method, Histogram::new(HTTP_BUCKETS), now_unix_seconds));
                self.durations.len() - 1
            }
        };
        self.durations[pos].2.observe(duration_seconds);
        self.highr.observe(duration_seconds);
    }

    /// Requests recorded for `handler` with status class `class` (`2xx`, ...).
    pub fn requests(&self, handler: &str, class: &str) -> u64 {
        self.requests
            .iter()
            .filter(|r| r.0 == handler && r.2 == class)
            .map(|r| r.3)
            .sum()
    }

    fn render(&self, w: &mut Writer<'_>) {
        let help = "Total number of requests by method, status and handler.";
        w.header("http_requests_total", help, "counter");
        for (h, m, s, n, _) in &self.requests {
            w.sample("http_requests_total", "", &[("handler", h), ("method", m), ("status", s)], *n as f64);
        }
        w.header("http_requests_created", help, "gauge");
        for (h, m, s, _, c) in &self.requests {
            w.sample("http_requests_created", "", &[("handler", h), ("method", m), ("status", s)], *c);
        }
        for (name, help, is_request) in [
            (
                "http_request_size_bytes",
                "Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ",
                true,
            ),
            (
                "http_response_size_bytes",
                "Content length of outgoing responses by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ",
                false,
            ),
        ] {
            w.header(name, help, "summary");
            for (h, n, req, resp, _) in &self.sizes {
                w.sample(name, "_count", &[("handler", h)], *n as f64);
                w.sample(name, "_sum", &[("handler", h)], if is_request { *req } else { *resp });
            }
            let created = format!("{name}_created");
            w.header(&created, help, "gauge");
            for (h, _, _, _, c) in &self.sizes {
                w.sample(&created, "", &[("handler", h)], *c);
            }
        }
        w.created = Some(self.created_unix_seconds);
        w.histogram(
            "http_request_duration_highr_seconds",
            "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ",
            &self.highr,
            false,
        );
        let name = "http_request_duration_seconds";
        let help = "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ";
        w.header(name, help, "histogram");
        let mut le = String::new();
        for (h, m, hist, _) in &self.durations {
            for (i, cumulative) in hist.cumulative().enumerate() {
                le.clear();
                py_float(hist.bounds().get(i).copied().unwrap_or(f64::INFINITY), &mut le);
                w.sample(name, "_bucket", &[("handler", h), ("le", &le), ("method", m)], cumulative as f64);
            }
            w.sample(name, "_count", &[("handler", h), ("method", m)], hist.count() as f64);
            w.sample(name, "_sum", &[("handler", h), ("method", m)], hist.sum());
        }
        let created = format!("{name}_created");
        w.header(&created, help, "gauge");
        for (h, m, _, c) in &self.durations {
            w.sample(&created, "", &[("handler", h), ("method", m)], *c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_match_prometheus_client() {
        // Expected strings produced by prometheus_client.utils.floatToGoString.
        let cases: &[(f64, &str)] = &[
            (0.0, "0.0"),
            (1.0, "1.0"),
            (14.0, "14.0"),
            (0.9003, "0.9003"),
            (2773726.0, "2.773726e+06"),
            (957248.0, "957248.0"),
            (1767258059.1200001, "1.7672580591200001e+09"),
            (60521304064.0, "6.0521304064e+10"),
            (1048576.0, "1.048576e+06"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (123456.789, "123456.789"),
            (1234567.891, "1.234567891e+06"),
            (3785.898987859578, "3785.898987859578"),
            (0.001, "0.001"),
            (2560.0, "2560.0"),
            (1e22, "1e+22"),
            (-1.0, "-1.0"),
            (-2773726.0, "-2773726.0"),
            (0.1 + 0.2, "0.30000000000000004"),
            (5e-324, "5e-324"),
            (1e15, "1e+15"),
            (999999.9999999, "999999.9999999"),
            (9999999.0, "9.999999e+06"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
        ];
        for (v, want) in cases {
            let mut s = String::new();
            py_float(*v, &mut s);
            assert_eq!(&s, want, "value {v:?}");
        }
    }
}
