//! The vLLM metric catalog: every family the signals read or the emulator writes, with its
//! name, kind, HELP text, labels and bucket bounds in each vLLM engine generation, plus the
//! DCGM exporter fields the GPU signals read.
//!
//! Owns: the metric and label names as constants ([`name`], [`label`], [`dcgm`]), the bucket
//! tables ([`buckets`]) and one [`Family`] per meaning ([`FAMILIES`], indexed by [`Metric`]).
//! Does not own which series a snapshot keeps (see [`crate::signals::snapshot`]) nor how a body
//! is written (the emulator's renderer).
//!
//! Conventions:
//! - A counter's [`Series::name`] is the name vLLM registers (no `_total`); its samples are
//!   `<name>_total` and, in V1, `<name>_created`.
//! - A histogram's samples are `<name>_bucket` (one per bound, then `+Inf`), `<name>_sum`,
//!   `<name>_count` and, in V1, `<name>_created`.
//! - [`Series::labels`] are the label names of every sample besides `le`, sorted by name.
//! - Token-count buckets are vLLM's 1-2-5 series up to `max_model_len`; the table here is the
//!   one served for a `max_model_len` between 20,000 and 49,999 (the fixture bodies).

/// A vLLM engine generation; the two expose different names, labels and buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// The V1 engine (0.9 and later): `engine` label, `_created` samples, long-tail buckets.
    V1,
    /// The V0 engine (0.6 line, multiprocess collector): `model_name` only, short buckets.
    V0,
}

/// A Prometheus metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Monotone total.
    Counter,
    /// Current value.
    Gauge,
    /// Cumulative buckets with a sum and a count.
    Histogram,
}

impl Kind {
    /// The `# TYPE` word.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One family as one engine generation exposes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Series {
    /// Family name (a counter's without `_total`).
    pub name: &'static str,
    /// HELP text.
    pub help: &'static str,
    /// Label names of every sample besides `le`, sorted by name.
    pub labels: &'static [&'static str],
    /// Finite upper bounds, ascending (histograms only; empty otherwise).
    pub buckets: &'static [f64],
}

/// One meaning, under its V1 and V0 names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Family {
    /// Which family this is.
    pub metric: Metric,
    /// What it measures.
    pub meaning: &'static str,
    /// Counter, gauge or histogram (the same in both generations).
    pub kind: Kind,
    /// As the V1 engine exposes it, if it does.
    pub v1: Option<Series>,
    /// As the V0 engine exposes it, if it does.
    pub v0: Option<Series>,
}

impl Family {
    /// The series of `version`, if that generation exposes the family.
    pub const fn series(&self, version: Version) -> Option<&Series> {
        match version {
            Version::V1 => self.v1.as_ref(),
            Version::V0 => self.v0.as_ref(),
        }
    }

    /// The bucket bounds of `version` (empty when not a histogram or not exposed).
    pub fn buckets(&self, version: Version) -> &'static [f64] {
        self.series(version).map_or(&[], |s| s.buckets)
    }
}

/// Metric and family names.
pub mod name {
    /// Start time of the serving process, seconds since the Unix epoch (a restart marker).
    pub const PROCESS_START_TIME_SECONDS: &str = "process_start_time_seconds";
    /// Prefix every vLLM series shares.
    pub const VLLM_PREFIX: &str = "vllm:";

    pub const NUM_REQUESTS_RUNNING: &str = "vllm:num_requests_running";
    pub const NUM_REQUESTS_WAITING: &str = "vllm:num_requests_waiting";
    pub const NUM_REQUESTS_SWAPPED: &str = "vllm:num_requests_swapped";
    pub const ENGINE_SLEEP_STATE: &str = "vllm:engine_sleep_state";
    pub const KV_CACHE_USAGE_PERC: &str = "vllm:kv_cache_usage_perc";
    pub const GPU_CACHE_USAGE_PERC: &str = "vllm:gpu_cache_usage_perc";
    pub const CPU_CACHE_USAGE_PERC: &str = "vllm:cpu_cache_usage_perc";
    pub const CPU_PREFIX_CACHE_HIT_RATE: &str = "vllm:cpu_prefix_cache_hit_rate";
    pub const GPU_PREFIX_CACHE_HIT_RATE: &str = "vllm:gpu_prefix_cache_hit_rate";
    pub const SPEC_DECODE_DRAFT_ACCEPTANCE_RATE: &str = "vllm:spec_decode_draft_acceptance_rate";
    pub const SPEC_DECODE_EFFICIENCY: &str = "vllm:spec_decode_efficiency";
    pub const CACHE_CONFIG_INFO: &str = "vllm:cache_config_info";

    pub const PREFIX_CACHE_QUERIES: &str = "vllm:prefix_cache_queries";
    pub const PREFIX_CACHE_HITS: &str = "vllm:prefix_cache_hits";
    pub const EXTERNAL_PREFIX_CACHE_QUERIES: &str = "vllm:external_prefix_cache_queries";
    pub const EXTERNAL_PREFIX_CACHE_HITS: &str = "vllm:external_prefix_cache_hits";
    pub const MM_CACHE_QUERIES: &str = "vllm:mm_cache_queries";
    pub const MM_CACHE_HITS: &str = "vllm:mm_cache_hits";
    pub const NUM_PREEMPTIONS: &str = "vllm:num_preemptions";
    pub const PROMPT_TOKENS: &str = "vllm:prompt_tokens";
    pub const GENERATION_TOKENS: &str = "vllm:generation_tokens";
    pub const TOKENS: &str = "vllm:tokens";
    pub const REQUEST_SUCCESS: &str = "vllm:request_success";

    pub const REQUEST_PROMPT_TOKENS: &str = "vllm:request_prompt_tokens";
    pub const REQUEST_GENERATION_TOKENS: &str = "vllm:request_generation_tokens";
    pub const ITERATION_TOKENS_TOTAL: &str = "vllm:iteration_tokens_total";
    pub const REQUEST_MAX_NUM_GENERATION_TOKENS: &str = "vllm:request_max_num_generation_tokens";
    pub const REQUEST_PARAMS_N: &str = "vllm:request_params_n";
    pub const REQUEST_PARAMS_MAX_TOKENS: &str = "vllm:request_params_max_tokens";
    pub const TIME_TO_FIRST_TOKEN_SECONDS: &str = "vllm:time_to_first_token_seconds";
    pub const INTER_TOKEN_LATENCY_SECONDS: &str = "vllm:inter_token_latency_seconds";
    pub const TIME_PER_OUTPUT_TOKEN_SECONDS: &str = "vllm:time_per_output_token_seconds";
    pub const REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS: &str =
        "vllm:request_time_per_output_token_seconds";
    pub const E2E_REQUEST_LATENCY_SECONDS: &str = "vllm:e2e_request_latency_seconds";
    pub const REQUEST_QUEUE_TIME_SECONDS: &str = "vllm:request_queue_time_seconds";
    pub const REQUEST_INFERENCE_TIME_SECONDS: &str = "vllm:request_inference_time_seconds";
    pub const REQUEST_PREFILL_TIME_SECONDS: &str = "vllm:request_prefill_time_seconds";
    pub const REQUEST_DECODE_TIME_SECONDS: &str = "vllm:request_decode_time_seconds";
    pub const TIME_IN_QUEUE_REQUESTS: &str = "vllm:time_in_queue_requests";
    pub const MODEL_FORWARD_TIME_MILLISECONDS: &str = "vllm:model_forward_time_milliseconds";
    pub const MODEL_EXECUTE_TIME_MILLISECONDS: &str = "vllm:model_execute_time_milliseconds";
}

/// Label names.
pub mod label {
    /// Data-parallel rank (V1).
    pub const ENGINE: &str = "engine";
    /// Served model name.
    pub const MODEL_NAME: &str = "model_name";
    /// Why a request finished (`stop`, `length`, `abort`, ...).
    pub const FINISHED_REASON: &str = "finished_reason";
    /// Sleep level of `vllm:engine_sleep_state`.
    pub const SLEEP_STATE: &str = "sleep_state";
    /// Bucket upper bound.
    pub const LE: &str = "le";
    /// Fraction of GPU memory vLLM may use (a `vllm:cache_config_info` label).
    pub const GPU_MEMORY_UTILIZATION: &str = "gpu_memory_utilization";
}

/// Histogram bucket bounds (finite upper bounds, ascending).
pub mod buckets {
    /// Token counts per request: 1-2-5 up to the model length (see the module notes).
    pub const TOKENS: &[f64] = &[
        1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0,
        20000.0,
    ];
    /// The `n` request parameter.
    pub const PARAMS_N: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0];
    /// V1 tokens per engine step.
    pub const V1_ITERATION_TOKENS: &[f64] = &[
        1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
    ];
    /// V0 tokens per engine step.
    pub const V0_ITERATION_TOKENS: &[f64] = &[
        1.0, 2.0, 4.0, 8.0, 16.0, 24.0, 32.0, 40.0, 48.0, 56.0, 64.0, 72.0, 80.0, 88.0, 96.0,
        104.0, 112.0, 120.0, 128.0, 136.0, 144.0, 152.0, 160.0, 168.0, 176.0, 184.0, 192.0, 200.0,
        208.0, 216.0, 224.0, 232.0, 240.0, 248.0, 256.0,
    ];
    /// V1 time to first token, seconds.
    pub const V1_TTFT: &[f64] = &[
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
        20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
    ];
    /// V0 time to first token, seconds.
    pub const V0_TTFT: &[f64] = &[
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    ];
    /// V1 inter-token latency and per-request time per output token, seconds.
    pub const V1_ITL: &[f64] = &[
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
        20.0, 40.0, 80.0,
    ];
    /// V0 time per output token, seconds.
    pub const V0_ITL: &[f64] = &[
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
    ];
    /// V1 request phase latencies (end to end, queue, inference, prefill, decode), seconds.
    pub const V1_REQUEST_LATENCY: &[f64] = &[
        0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
        240.0, 480.0, 960.0, 1920.0, 7680.0,
    ];
    /// V0 request phase latencies, seconds.
    pub const V0_REQUEST_LATENCY: &[f64] = &[
        0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    ];
    /// V0 model forward and execute times, milliseconds.
    pub const V0_MODEL_TIME_MS: &[f64] = &[
        1.0, 2.0, 3.0, 5.0, 8.0, 10.0, 20.0, 30.0, 50.0, 80.0, 100.0, 200.0, 300.0, 500.0, 800.0,
        1000.0, 2000.0, 3000.0,
    ];
}

/// NVIDIA dcgm-exporter field names and labels.
pub mod dcgm {
    /// Frame-buffer memory used, MiB (gauge).
    pub const FB_USED: &str = "DCGM_FI_DEV_FB_USED";
    /// Frame-buffer memory free, MiB (gauge).
    pub const FB_FREE: &str = "DCGM_FI_DEV_FB_FREE";
    /// GPU utilisation, percent (gauge).
    pub const GPU_UTIL: &str = "DCGM_FI_DEV_GPU_UTIL";
    /// Power draw, watts (gauge).
    pub const POWER_USAGE: &str = "DCGM_FI_DEV_POWER_USAGE";
    /// Volatile single-bit ECC errors (counter; off in the exporter's default field list).
    pub const ECC_SBE_VOL_TOTAL: &str = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL";

    /// GPU UUID label.
    pub const LABEL_UUID: &str = "UUID";
    /// GPU index on the node.
    pub const LABEL_GPU: &str = "gpu";
    /// Node name label (older releases).
    pub const LABEL_HOSTNAME: &str = "Hostname";
    /// Node name label (2026 releases).
    pub const LABEL_HOSTNAME_LOWER: &str = "hostname";
    /// GPU model label.
    pub const LABEL_MODEL_NAME: &str = "modelName";
    /// Pod the GPU is assigned to, when the exporter maps GPUs to pods.
    pub const LABEL_POD: &str = "pod";
    /// Namespace of that pod.
    pub const LABEL_NAMESPACE: &str = "namespace";
}

/// Every family, one variant each; `FAMILIES[m as usize].metric == m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    ProcessStartTime,
    RequestsRunning,
    RequestsWaiting,
    RequestsSwapped,
    EngineSleepState,
    KvCacheUsage,
    CpuCacheUsage,
    CpuPrefixCacheHitRate,
    GpuPrefixCacheHitRate,
    SpecDecodeDraftAcceptanceRate,
    SpecDecodeEfficiency,
    CacheConfigInfo,
    PrefixCacheQueries,
    PrefixCacheHits,
    ExternalPrefixCacheQueries,
    ExternalPrefixCacheHits,
    MmCacheQueries,
    MmCacheHits,
    Preemptions,
    PromptTokens,
    GenerationTokens,
    Tokens,
    RequestSuccess,
    RequestPromptTokens,
    RequestGenerationTokens,
    IterationTokens,
    RequestMaxNumGenerationTokens,
    RequestParamsN,
    RequestParamsMaxTokens,
    TimeToFirstToken,
    InterTokenLatency,
    RequestTimePerOutputToken,
    E2eRequestLatency,
    RequestQueueTime,
    RequestInferenceTime,
    RequestPrefillTime,
    RequestDecodeTime,
    TimeInQueueRequests,
    ModelForwardTime,
    ModelExecuteTime,
}

impl Metric {
    /// Its catalog entry.
    pub fn family(self) -> &'static Family {
        &FAMILIES[self as usize]
    }
}

const V1_BASE: &[&str] = &[label::ENGINE, label::MODEL_NAME];
const V0_BASE: &[&str] = &[label::MODEL_NAME];
const NONE: &[&str] = &[];
const NO_BUCKETS: &[f64] = &[];

const HELP_WAITING: &str = "Number of requests waiting to be processed.";
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
const HELP_CACHE_CONFIG: &str = "Information of the LLMEngine CacheConfig";

const fn series(
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    buckets: &'static [f64],
) -> Option<Series> {
    Some(Series {
        name,
        help,
        labels,
        buckets,
    })
}

/// A family exposed under the same name, HELP and buckets by both generations, with each
/// generation's base labels.
const fn both(
    metric: Metric,
    kind: Kind,
    meaning: &'static str,
    name: &'static str,
    help: &'static str,
    buckets: &'static [f64],
) -> Family {
    Family {
        metric,
        meaning,
        kind,
        v1: series(name, help, V1_BASE, buckets),
        v0: series(name, help, V0_BASE, buckets),
    }
}

/// A family only the V1 engine exposes, with the V1 base labels.
const fn v1_only(
    metric: Metric,
    kind: Kind,
    meaning: &'static str,
    name: &'static str,
    help: &'static str,
    buckets: &'static [f64],
) -> Family {
    Family {
        metric,
        meaning,
        kind,
        v1: series(name, help, V1_BASE, buckets),
        v0: None,
    }
}

/// A family only the V0 engine exposes, with the V0 base labels.
const fn v0_only(
    metric: Metric,
    kind: Kind,
    meaning: &'static str,
    name: &'static str,
    help: &'static str,
    buckets: &'static [f64],
) -> Family {
    Family {
        metric,
        meaning,
        kind,
        v1: None,
        v0: series(name, help, V0_BASE, buckets),
    }
}

use Kind::{Counter, Gauge, Histogram};
use Metric as M;

/// Every family, in [`Metric`] order.
pub static FAMILIES: [Family; 40] = [
    Family {
        metric: M::ProcessStartTime,
        meaning: "when the serving process started (a restart marker; absent in multiprocess mode)",
        kind: Gauge,
        v1: series(
            name::PROCESS_START_TIME_SECONDS,
            "Start time of the process since unix epoch in seconds.",
            NONE,
            NO_BUCKETS,
        ),
        v0: None,
    },
    Family {
        metric: M::RequestsRunning,
        meaning: "requests in the running batch",
        kind: Gauge,
        v1: series(
            name::NUM_REQUESTS_RUNNING,
            "Number of requests in model execution batches.",
            V1_BASE,
            NO_BUCKETS,
        ),
        v0: series(
            name::NUM_REQUESTS_RUNNING,
            "Number of requests currently running on GPU.",
            V0_BASE,
            NO_BUCKETS,
        ),
    },
    both(
        M::RequestsWaiting,
        Gauge,
        "requests queued, not yet scheduled",
        name::NUM_REQUESTS_WAITING,
        HELP_WAITING,
        NO_BUCKETS,
    ),
    v0_only(
        M::RequestsSwapped,
        Gauge,
        "requests whose KV blocks were swapped out to CPU memory",
        name::NUM_REQUESTS_SWAPPED,
        "Number of requests swapped to CPU.",
        NO_BUCKETS,
    ),
    Family {
        metric: M::EngineSleepState,
        meaning: "sleep mode: one child per state, 1 when in it",
        kind: Gauge,
        v1: series(
            name::ENGINE_SLEEP_STATE,
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is \
             awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            &[label::ENGINE, label::MODEL_NAME, label::SLEEP_STATE],
            NO_BUCKETS,
        ),
        v0: None,
    },
    Family {
        metric: M::KvCacheUsage,
        meaning: "fraction of the GPU KV-cache blocks in use, 0..1",
        kind: Gauge,
        v1: series(
            name::KV_CACHE_USAGE_PERC,
            "KV-cache usage. 1 means 100 percent usage.",
            V1_BASE,
            NO_BUCKETS,
        ),
        v0: series(
            name::GPU_CACHE_USAGE_PERC,
            "GPU KV-cache usage. 1 means 100 percent usage.",
            V0_BASE,
            NO_BUCKETS,
        ),
    },
    v0_only(
        M::CpuCacheUsage,
        Gauge,
        "fraction of the CPU swap space blocks in use, 0..1",
        name::CPU_CACHE_USAGE_PERC,
        "CPU KV-cache usage. 1 means 100 percent usage.",
        NO_BUCKETS,
    ),
    v0_only(
        M::CpuPrefixCacheHitRate,
        Gauge,
        "CPU prefix cache block hit rate (-1 when unused)",
        name::CPU_PREFIX_CACHE_HIT_RATE,
        "CPU prefix cache block hit rate.",
        NO_BUCKETS,
    ),
    v0_only(
        M::GpuPrefixCacheHitRate,
        Gauge,
        "GPU prefix cache block hit rate (-1 when unused)",
        name::GPU_PREFIX_CACHE_HIT_RATE,
        "GPU prefix cache block hit rate.",
        NO_BUCKETS,
    ),
    v0_only(
        M::SpecDecodeDraftAcceptanceRate,
        Gauge,
        "share of speculative draft tokens accepted",
        name::SPEC_DECODE_DRAFT_ACCEPTANCE_RATE,
        "Speulative token acceptance rate.",
        NO_BUCKETS,
    ),
    v0_only(
        M::SpecDecodeEfficiency,
        Gauge,
        "speculative decoding system efficiency",
        name::SPEC_DECODE_EFFICIENCY,
        "Speculative decoding system efficiency.",
        NO_BUCKETS,
    ),
    Family {
        metric: M::CacheConfigInfo,
        meaning: "the KV-cache configuration as labels, value 1",
        kind: Gauge,
        v1: series(
            name::CACHE_CONFIG_INFO,
            HELP_CACHE_CONFIG,
            &[
                "block_size",
                "cache_dtype",
                "calculate_kv_scales",
                "cpu_offload_gb",
                "enable_prefix_caching",
                label::ENGINE,
                label::GPU_MEMORY_UTILIZATION,
                "is_attention_free",
                "kv_sharing_fast_prefill",
                "num_cpu_blocks",
                "num_gpu_blocks",
                "num_gpu_blocks_override",
                "prefix_caching_hash_algo",
                "sliding_window",
                "swap_space",
            ],
            NO_BUCKETS,
        ),
        v0: series(
            name::CACHE_CONFIG_INFO,
            HELP_CACHE_CONFIG,
            &[
                "block_size",
                "cache_dtype",
                "cpu_offload_gb",
                "enable_prefix_caching",
                label::GPU_MEMORY_UTILIZATION,
                "is_attention_free",
                "num_cpu_blocks",
                "num_gpu_blocks",
                "num_gpu_blocks_override",
                "sliding_window",
                "swap_space_bytes",
            ],
            NO_BUCKETS,
        ),
    },
    v1_only(
        M::PrefixCacheQueries,
        Counter,
        "tokens looked up in the prefix cache",
        name::PREFIX_CACHE_QUERIES,
        "Prefix cache queries, in terms of number of queried tokens.",
        NO_BUCKETS,
    ),
    v1_only(
        M::PrefixCacheHits,
        Counter,
        "tokens found in the prefix cache",
        name::PREFIX_CACHE_HITS,
        "Prefix cache hits, in terms of number of cached tokens.",
        NO_BUCKETS,
    ),
    v1_only(
        M::ExternalPrefixCacheQueries,
        Counter,
        "tokens looked up in a KV connector's cache shared across instances",
        name::EXTERNAL_PREFIX_CACHE_QUERIES,
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms \
         of number of queried tokens.",
        NO_BUCKETS,
    ),
    v1_only(
        M::ExternalPrefixCacheHits,
        Counter,
        "tokens found in a KV connector's cache shared across instances",
        name::EXTERNAL_PREFIX_CACHE_HITS,
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of \
         number of cached tokens.",
        NO_BUCKETS,
    ),
    v1_only(
        M::MmCacheQueries,
        Counter,
        "multi-modal items looked up in the encoder cache",
        name::MM_CACHE_QUERIES,
        "Multi-modal cache queries, in terms of number of queried items.",
        NO_BUCKETS,
    ),
    v1_only(
        M::MmCacheHits,
        Counter,
        "multi-modal items found in the encoder cache",
        name::MM_CACHE_HITS,
        "Multi-modal cache hits, in terms of number of cached items.",
        NO_BUCKETS,
    ),
    both(
        M::Preemptions,
        Counter,
        "running requests sent back to the waiting queue to free KV blocks",
        name::NUM_PREEMPTIONS,
        HELP_PREEMPTIONS,
        NO_BUCKETS,
    ),
    both(
        M::PromptTokens,
        Counter,
        "prompt tokens prefilled",
        name::PROMPT_TOKENS,
        HELP_PROMPT_TOKENS,
        NO_BUCKETS,
    ),
    both(
        M::GenerationTokens,
        Counter,
        "tokens generated",
        name::GENERATION_TOKENS,
        HELP_GENERATION_TOKENS,
        NO_BUCKETS,
    ),
    v0_only(
        M::Tokens,
        Counter,
        "prompt plus generated tokens",
        name::TOKENS,
        "Number of prefill plus generation tokens processed.",
        NO_BUCKETS,
    ),
    Family {
        metric: M::RequestSuccess,
        meaning: "finished requests, by finish reason",
        kind: Counter,
        v1: series(
            name::REQUEST_SUCCESS,
            HELP_SUCCESS,
            &[label::ENGINE, label::FINISHED_REASON, label::MODEL_NAME],
            NO_BUCKETS,
        ),
        v0: series(
            name::REQUEST_SUCCESS,
            HELP_SUCCESS,
            &[label::FINISHED_REASON, label::MODEL_NAME],
            NO_BUCKETS,
        ),
    },
    both(
        M::RequestPromptTokens,
        Histogram,
        "prompt tokens per finished request",
        name::REQUEST_PROMPT_TOKENS,
        HELP_PROMPT_TOKENS,
        buckets::TOKENS,
    ),
    both(
        M::RequestGenerationTokens,
        Histogram,
        "generated tokens per finished request",
        name::REQUEST_GENERATION_TOKENS,
        HELP_GENERATION_TOKENS,
        buckets::TOKENS,
    ),
    Family {
        metric: M::IterationTokens,
        meaning: "tokens scheduled per engine step",
        kind: Histogram,
        v1: series(
            name::ITERATION_TOKENS_TOTAL,
            HELP_ITERATION,
            V1_BASE,
            buckets::V1_ITERATION_TOKENS,
        ),
        v0: series(
            name::ITERATION_TOKENS_TOTAL,
            HELP_ITERATION,
            V0_BASE,
            buckets::V0_ITERATION_TOKENS,
        ),
    },
    both(
        M::RequestMaxNumGenerationTokens,
        Histogram,
        "most tokens a finished request asked to generate",
        name::REQUEST_MAX_NUM_GENERATION_TOKENS,
        HELP_MAX_GEN,
        buckets::TOKENS,
    ),
    both(
        M::RequestParamsN,
        Histogram,
        "the n parameter per finished request",
        name::REQUEST_PARAMS_N,
        HELP_N,
        buckets::PARAMS_N,
    ),
    both(
        M::RequestParamsMaxTokens,
        Histogram,
        "the max_tokens parameter per finished request",
        name::REQUEST_PARAMS_MAX_TOKENS,
        HELP_MAX_TOKENS,
        buckets::TOKENS,
    ),
    Family {
        metric: M::TimeToFirstToken,
        meaning: "arrival to first generated token, seconds",
        kind: Histogram,
        v1: series(
            name::TIME_TO_FIRST_TOKEN_SECONDS,
            HELP_TTFT,
            V1_BASE,
            buckets::V1_TTFT,
        ),
        v0: series(
            name::TIME_TO_FIRST_TOKEN_SECONDS,
            HELP_TTFT,
            V0_BASE,
            buckets::V0_TTFT,
        ),
    },
    Family {
        metric: M::InterTokenLatency,
        meaning: "time between consecutive tokens of a request, seconds",
        kind: Histogram,
        v1: series(
            name::INTER_TOKEN_LATENCY_SECONDS,
            "Histogram of inter-token latency in seconds.",
            V1_BASE,
            buckets::V1_ITL,
        ),
        v0: series(
            name::TIME_PER_OUTPUT_TOKEN_SECONDS,
            "Histogram of time per output token in seconds.",
            V0_BASE,
            buckets::V0_ITL,
        ),
    },
    v1_only(
        M::RequestTimePerOutputToken,
        Histogram,
        "mean time per output token of each finished request, seconds",
        name::REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS,
        "Histogram of time_per_output_token_seconds per request.",
        buckets::V1_ITL,
    ),
    Family {
        metric: M::E2eRequestLatency,
        meaning: "arrival to finish of each finished request, seconds",
        kind: Histogram,
        v1: series(
            name::E2E_REQUEST_LATENCY_SECONDS,
            "Histogram of e2e request latency in seconds.",
            V1_BASE,
            buckets::V1_REQUEST_LATENCY,
        ),
        v0: series(
            name::E2E_REQUEST_LATENCY_SECONDS,
            "Histogram of end to end request latency in seconds.",
            V0_BASE,
            buckets::V0_REQUEST_LATENCY,
        ),
    },
    latency(
        M::RequestQueueTime,
        "arrival to first scheduled, seconds",
        name::REQUEST_QUEUE_TIME_SECONDS,
        HELP_QUEUE,
    ),
    latency(
        M::RequestInferenceTime,
        "first scheduled to finish, seconds",
        name::REQUEST_INFERENCE_TIME_SECONDS,
        HELP_INFERENCE,
    ),
    latency(
        M::RequestPrefillTime,
        "first scheduled to first token, seconds",
        name::REQUEST_PREFILL_TIME_SECONDS,
        HELP_PREFILL,
    ),
    latency(
        M::RequestDecodeTime,
        "first token to finish, seconds",
        name::REQUEST_DECODE_TIME_SECONDS,
        HELP_DECODE,
    ),
    v0_only(
        M::TimeInQueueRequests,
        Histogram,
        "arrival to first scheduled, seconds (the V0 engine's second queue-time histogram)",
        name::TIME_IN_QUEUE_REQUESTS,
        "Histogram of time the request spent in the queue in seconds.",
        buckets::V0_REQUEST_LATENCY,
    ),
    v0_only(
        M::ModelForwardTime,
        Histogram,
        "time in the model forward pass per step, milliseconds (collected only on request)",
        name::MODEL_FORWARD_TIME_MILLISECONDS,
        "Histogram of time spent in the model forward pass in ms.",
        buckets::V0_MODEL_TIME_MS,
    ),
    v0_only(
        M::ModelExecuteTime,
        Histogram,
        "time in the model execute function per step, milliseconds (collected only on request)",
        name::MODEL_EXECUTE_TIME_MILLISECONDS,
        "Histogram of time spent in the model execute function in ms.",
        buckets::V0_MODEL_TIME_MS,
    ),
];

/// A request-phase latency histogram: same name and HELP in both generations, V1 long-tail
/// buckets, V0 buckets up to a minute.
const fn latency(
    metric: Metric,
    meaning: &'static str,
    name: &'static str,
    help: &'static str,
) -> Family {
    Family {
        metric,
        meaning,
        kind: Histogram,
        v1: series(name, help, V1_BASE, buckets::V1_REQUEST_LATENCY),
        v0: series(name, help, V0_BASE, buckets::V0_REQUEST_LATENCY),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_indexed_by_metric() {
        for (i, family) in FAMILIES.iter().enumerate() {
            assert_eq!(family.metric as usize, i, "{:?}", family.metric);
            assert_eq!(family.metric.family(), family);
            assert!(
                family.v1.is_some() || family.v0.is_some(),
                "{:?} is exposed by no generation",
                family.metric
            );
        }
    }

    #[test]
    fn series_are_well_formed() {
        for version in [Version::V1, Version::V0] {
            let mut names = Vec::new();
            for family in &FAMILIES {
                let Some(series) = family.series(version) else {
                    continue;
                };
                let what = format!("{version:?} {}", series.name);
                assert!(
                    series.name.starts_with(name::VLLM_PREFIX)
                        || family.metric == Metric::ProcessStartTime,
                    "{what}"
                );
                assert!(!names.contains(&series.name), "{what} twice");
                names.push(series.name);
                assert!(!series.help.is_empty(), "{what}");
                assert!(
                    series.labels.windows(2).all(|w| w[0] < w[1]),
                    "{what}: labels sorted and unique"
                );
                assert!(!series.labels.contains(&label::LE), "{what}");
                match family.kind {
                    Kind::Histogram => {
                        assert!(!series.buckets.is_empty(), "{what}");
                        assert!(
                            series.buckets.windows(2).all(|w| w[0] < w[1]),
                            "{what}: ascending buckets"
                        );
                    }
                    Kind::Counter | Kind::Gauge => assert!(series.buckets.is_empty(), "{what}"),
                }
                if series.name.starts_with(name::VLLM_PREFIX) {
                    let engine = series.labels.contains(&label::ENGINE);
                    assert_eq!(engine, version == Version::V1, "{what}: engine label");
                }
            }
        }
    }

    #[test]
    fn twins_share_a_family() {
        let kv = Metric::KvCacheUsage.family();
        assert_eq!(kv.v1.unwrap().name, name::KV_CACHE_USAGE_PERC);
        assert_eq!(kv.v0.unwrap().name, name::GPU_CACHE_USAGE_PERC);
        let itl = Metric::InterTokenLatency.family();
        assert_eq!(itl.v1.unwrap().name, name::INTER_TOKEN_LATENCY_SECONDS);
        assert_eq!(itl.v0.unwrap().name, name::TIME_PER_OUTPUT_TOKEN_SECONDS);
        assert_eq!(
            Metric::TimeToFirstToken
                .family()
                .buckets(Version::V1)
                .last(),
            Some(&2560.0)
        );
        assert_eq!(
            Metric::TimeToFirstToken
                .family()
                .buckets(Version::V0)
                .last(),
            Some(&10.0)
        );
        assert!(
            Metric::RequestsSwapped
                .family()
                .buckets(Version::V1)
                .is_empty()
        );
        assert_eq!(Kind::Histogram.as_str(), "histogram");
    }
}
