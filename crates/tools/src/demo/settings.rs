//! The demo's settings: the story and the shortened periods of each mode, the scaler metadata,
//! and how they are shown (the start-up banner, the `settings` object of `summary.json`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use super::fleet;
use super::load::{self, SizeLimits, Story};
use vllm_emulator::EngineConfig;
use vllm_keda_core::policy::proactive::capacity_setting;

/// The ScaledObject's namespace.
pub(super) const NAMESPACE: &str = "demo";
/// The ScaledObject's name.
pub(super) const NAME: &str = "vllm";

/// Everything the run needs, with the shortened periods of the chosen mode.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--quick`.
    pub quick: bool,
    /// Most replicas.
    pub max_replicas: u32,
    /// Where in the trace the load starts.
    pub seed: u64,
    /// Output directory.
    pub out: PathBuf,
    /// Redraw a live view (else plain lines).
    pub live: bool,
    /// The load story.
    pub story: Story,
    /// The HPA's sync period (15 s in Kubernetes).
    pub hpa_sync: Duration,
    /// KEDA's polling interval (30 s by default).
    pub keda_poll: Duration,
    /// From a replica's creation to ready (minutes for a real vLLM pod).
    pub startup_delay: Duration,
    /// Longest wait for a removed replica's requests.
    pub drain_timeout: Duration,
    /// How long to wait for unanswered requests after the story.
    pub tail: Duration,
    /// One client request's timeout.
    pub request_timeout: Duration,
    /// The P95 end-to-end latency SLO given to the scaler.
    pub latency_slo_seconds: f64,
    /// The scaler metadata apart from the targets.
    pub metadata: Vec<(&'static str, String)>,
    /// Each replica's engine.
    pub engine: EngineConfig,
    /// Request size limits.
    pub limits: SizeLimits,
    /// The served model name.
    pub model: String,
}

impl Settings {
    /// The settings of the full (about three minutes) or quick (under a minute) story.
    pub fn new(quick: bool, max_replicas: u32, seed: u64, out: PathBuf, live: bool) -> Self {
        // (full, quick)
        let pick = |full: f64, fast: f64| if quick { fast } else { full };
        let latency_slo_seconds = 40.0;
        let metadata = vec![
            ("scrapeIntervalSeconds", "1".to_owned()),
            // Rates and P95s over 10 s instead of a minute, like the other shortened periods.
            ("rateWindowSeconds", format!("{}", pick(10.0, 6.0))),
            ("queueDepthPerReplica", "3".to_owned()),
            ("latencySloSeconds", format!("{latency_slo_seconds}")),
            // The demo's small, slow engine is driven by its queue and the loose end-to-end SLO:
            // no TTFT or ITL trigger.
            ("ttftSloSeconds", "off".to_owned()),
            ("itlSloSeconds", "off".to_owned()),
            ("minReplicas", "1".to_owned()),
            ("maxReplicas", max_replicas.to_string()),
            ("scaleUpPods", "2".to_owned()),
            ("scaleUpPeriodSeconds", format!("{}", pick(6.0, 4.0))),
            ("scaleUpStabilizationSeconds", "1".to_owned()),
            ("scaleDownPods", "1".to_owned()),
            ("scaleDownPeriodSeconds", format!("{}", pick(8.0, 3.0))),
            (
                "scaleDownStabilizationSeconds",
                format!("{}", pick(15.0, 4.0)),
            ),
            ("startupGraceSeconds", format!("{}", pick(20.0, 10.0))),
        ];
        // A small engine: two sequences per batch and a small KV cache, so that a couple of
        // requests per second saturate one replica while each request still takes about as
        // long as on a real GPU.
        let engine = EngineConfig {
            max_num_seqs: 2,
            num_gpu_blocks: 1024,
            max_model_len: 8192,
            ..EngineConfig::default()
        };
        Self {
            quick,
            max_replicas,
            seed,
            out,
            live,
            story: if quick { Story::quick() } else { Story::full() },
            hpa_sync: Duration::from_secs_f64(pick(2.0, 1.0)),
            keda_poll: Duration::from_secs_f64(pick(10.0, 5.0)),
            startup_delay: Duration::from_secs_f64(pick(3.0, 2.0)),
            drain_timeout: Duration::from_secs_f64(pick(30.0, 10.0)),
            tail: Duration::from_secs_f64(pick(10.0, 3.0)),
            request_timeout: Duration::from_secs_f64(pick(120.0, 60.0)),
            latency_slo_seconds,
            metadata,
            engine,
            limits: SizeLimits {
                max_prompt_tokens: 4096,
                max_output_tokens: 512,
            },
            model: "meta-llama/Llama-3.1-8B-Instruct".to_owned(),
        }
    }

    /// The ScaledObject's trigger metadata: the Service name and port, the settings, and the
    /// proactive policy's priors: one replica's capacity (`capacity_rps`, as `loadtest` would
    /// measure it) and the start-up time (the HPA's sync period plus the replica's start-up).
    pub fn scaler_metadata(&self, port: u16, capacity_rps: f64) -> HashMap<String, String> {
        let mut m: HashMap<String, String> = self
            .metadata
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        m.insert("policy".into(), self.policy(capacity_rps));
        m.insert("service".into(), format!("{}:{port}", fleet::SERVICE_NAME));
        m.insert("scalerAddress".into(), "127.0.0.1".into());
        m
    }

    /// The `policy` metadata: proactive, with one replica's capacity and the start-up time as
    /// priors, so the demo's first minute (shorter than the learning needs) already forecasts.
    ///
    /// The peak floor is off (`peak=0`): it keeps the highest demand of each whole minute for
    /// half an hour, and the demo's story lasts one to three minutes, so it would hold the
    /// burst's fleet through the whole quiet phase and the demo would never show the scale-in.
    /// Like the demo's other periods, this one is shortened, here to nothing.
    pub fn policy(&self, capacity_rps: f64) -> String {
        let startup = (self.hpa_sync + self.startup_delay).as_secs_f64();
        format!(
            "proactive; {}; startup={startup}; peak=0",
            capacity_setting(capacity_rps)
        )
    }

    /// `full` or `quick`.
    pub fn mode(&self) -> &'static str {
        if self.quick { "quick" } else { "full" }
    }
}

/// The `settings` object of `summary.json`.
pub(super) fn settings_json(
    settings: &Settings,
    capacity_rps: f64,
    metadata: &HashMap<String, String>,
) -> serde_json::Value {
    let metadata: std::collections::BTreeMap<&String, &String> = metadata.iter().collect();
    serde_json::json!({
        "seed": settings.seed,
        "max_replicas": settings.max_replicas,
        "hpa_sync_seconds": settings.hpa_sync.as_secs_f64(),
        "keda_polling_interval_seconds": settings.keda_poll.as_secs_f64(),
        "replica_startup_delay_seconds": settings.startup_delay.as_secs_f64(),
        "replica_drain_timeout_seconds": settings.drain_timeout.as_secs_f64(),
        "replica_capacity_requests_per_second": capacity_rps,
        "engine": {
            "max_num_seqs": settings.engine.max_num_seqs,
            "num_gpu_blocks": settings.engine.num_gpu_blocks,
            "max_model_len": settings.engine.max_model_len,
            "slowdown": settings.engine.slowdown,
        },
        "request_limits": settings.limits,
        "scaler_metadata": metadata,
    })
}

/// Prints what runs, the story, the attribution and the shortened periods.
pub(super) fn print_intro(
    settings: &Settings,
    capacity_rps: f64,
    server: &vllm_keda_service::serve::Server,
    hosts_file: &std::path::Path,
    requests: usize,
) {
    let story: Vec<String> = settings
        .story
        .phases
        .iter()
        .map(|p| {
            if (p.from - p.to).abs() < 1e-9 {
                format!(
                    "{} {:.0} s at {}x",
                    p.name,
                    p.duration.as_secs_f64(),
                    p.from
                )
            } else {
                format!(
                    "{} {:.0} s from {}x to {}x",
                    p.name,
                    p.duration.as_secs_f64(),
                    p.from,
                    p.to
                )
            }
        })
        .collect();
    let m = |k: &str| {
        settings
            .metadata
            .iter()
            .find(|(key, _)| *key == k)
            .map_or("-".to_owned(), |(_, v)| v.clone())
    };
    println!(
        "vllm-keda-scaler demo ({}): emulated vLLM replicas, the scaler over real gRPC, and a KEDA/HPA stand-in, on loopback",
        settings.mode()
    );
    println!(
        "  scaler    gRPC {}  admin http://{}/debug/scaledobjects/{NAMESPACE}/{NAME}",
        server.grpc_addr(),
        server.http_addr()
    );
    println!(
        "  replicas  1 to {} on 127.0.0.2.. behind the name {:?} (hosts file {}); one replica serves about {capacity_rps:.2} req/s",
        settings.max_replicas,
        fleet::SERVICE_NAME,
        hosts_file.display()
    );
    println!("  load      {requests} requests: {}", story.join(", "));
    println!("            {}", load::ATTRIBUTION);
    println!(
        "  periods are shortened so a whole scale-out and scale-in fits in {}:",
        if settings.quick {
            "under a minute"
        } else {
            "about three minutes"
        }
    );
    println!(
        "            HPA sync {} s (Kubernetes: 15 s), KEDA polling {} s (30 s), replica start-up {} s (minutes for vLLM),",
        settings.hpa_sync.as_secs_f64(),
        settings.keda_poll.as_secs_f64(),
        settings.startup_delay.as_secs_f64()
    );
    println!(
        "            scaler: scrape every {} s, queue {} per replica, P95 SLOs e2e/TTFT/ITL {}/{}/{}, up +{} per {} s after {} s, down -{} per {} s after {} s calm (defaults 2 s, 25, 60/2/0.07 s, +2/60 s after 30 s, -1/120 s after 300 s)",
        m("scrapeIntervalSeconds"),
        m("queueDepthPerReplica"),
        m("latencySloSeconds"),
        m("ttftSloSeconds"),
        m("itlSloSeconds"),
        m("scaleUpPods"),
        m("scaleUpPeriodSeconds"),
        m("scaleUpStabilizationSeconds"),
        m("scaleDownPods"),
        m("scaleDownPeriodSeconds"),
        m("scaleDownStabilizationSeconds"),
    );
    println!();
}
