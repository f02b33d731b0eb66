//! Logging setup and the scaler's own Prometheus metrics.
//!
//! Owns: the tracing subscriber, the metric names, their labels and the registry served on
//! `/metrics`. Does not own: when values change (see [`crate::control`] and [`crate::grpc`]).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Starts structured logging to stderr; `RUST_LOG` filters (default `info`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}

/// Labels of every per-ScaledObject series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ScaledObjectLabels {
    /// The ScaledObject's namespace.
    pub namespace: String,
    /// The ScaledObject's name.
    pub scaledobject: String,
}

/// Per-ScaledObject labels plus a decision reason.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The ScaledObject's namespace.
    pub namespace: String,
    /// The ScaledObject's name.
    pub scaledobject: String,
    /// The decision's reason code.
    pub reason: String,
}

/// Per-ScaledObject labels plus a scrape result.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ResultLabels {
    /// The ScaledObject's namespace.
    pub namespace: String,
    /// The ScaledObject's name.
    pub scaledobject: String,
    /// `ok`, `timeout`, `connect_error`, `http_status`, `too_large`, `decode_error` or `parse_error`.
    pub result: String,
}

/// The result of a TLS handshake (`ok`, `failed`, `timed_out`) or certificate reload (`ok`,
/// `failed`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TlsResultLabels {
    /// What happened.
    pub result: String,
}

/// Per-ScaledObject labels plus target health.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct HealthLabels {
    /// The ScaledObject's namespace.
    pub namespace: String,
    /// The ScaledObject's name.
    pub scaledobject: String,
    /// `healthy` or `failing`.
    pub health: String,
}

/// The RPC method label.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct MethodLabels {
    /// gRPC method name, e.g. `GetMetrics`.
    pub method: String,
}

/// Every scrape result label value, in a fixed order.
pub const SCRAPE_RESULTS: [&str; 7] = [
    "ok",
    "timeout",
    "connect_error",
    "http_status",
    "too_large",
    "decode_error",
    "parse_error",
];

type FloatGauge = Gauge<f64, AtomicU64>;
type HistogramConstructor = fn() -> Histogram;

fn rpc_histogram() -> Histogram {
    // 20 us .. about 1.3 s: RPCs answer from memory, so the low end matters.
    Histogram::new(exponential_buckets(0.000_02, 2.0, 17))
}

fn scrape_histogram() -> Histogram {
    // 1 ms .. about 16 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// The scaler's own metrics, named `vllm_keda_scaler_*`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Replica target returned to KEDA.
    pub target_replicas: Family<ScaledObjectLabels, FloatGauge>,
    /// What the policy decided (differs from the target in advisory mode).
    pub desired_replicas: Family<ScaledObjectLabels, FloatGauge>,
    /// Pods whose latest scrape succeeded.
    pub ready_replicas: Family<ScaledObjectLabels, FloatGauge>,
    /// Configured minimum.
    pub min_replicas: Family<ScaledObjectLabels, FloatGauge>,
    /// Configured maximum.
    pub max_replicas: Family<ScaledObjectLabels, FloatGauge>,
    /// Requests waiting across healthy pods.
    pub queue_depth: Family<ScaledObjectLabels, FloatGauge>,
    /// Requests running across healthy pods.
    pub running_requests: Family<ScaledObjectLabels, FloatGauge>,
    /// P95 end-to-end latency over the window (NaN when undefined).
    pub e2e_latency_p95_seconds: Family<ScaledObjectLabels, FloatGauge>,
    /// P95 time to first token (NaN when undefined).
    pub ttft_p95_seconds: Family<ScaledObjectLabels, FloatGauge>,
    /// P95 inter-token latency (NaN when undefined).
    pub itl_p95_seconds: Family<ScaledObjectLabels, FloatGauge>,
    /// Largest KV-cache usage across pods.
    pub kv_cache_usage_max: Family<ScaledObjectLabels, FloatGauge>,
    /// Preemptions per second across pods.
    pub preemptions_per_second: Family<ScaledObjectLabels, FloatGauge>,
    /// Decisions by reason.
    pub decisions: Family<ReasonLabels, Counter>,
    /// Scrapes by result.
    pub scrapes: Family<ResultLabels, Counter>,
    /// `GetMetrics`/`IsActive` answered `Unavailable`.
    pub unavailable: Family<ScaledObjectLabels, Counter>,
    /// Targets by health.
    pub targets: Family<HealthLabels, Gauge>,
    /// Unix time of the last cycle with at least one healthy target.
    pub last_success_timestamp_seconds: Family<ScaledObjectLabels, FloatGauge>,
    /// Wall time of one cycle's scrape of all targets.
    pub scrape_duration_seconds: Family<ScaledObjectLabels, Histogram, HistogramConstructor>,
    /// RPC handling time by method.
    pub rpc_duration_seconds: Family<MethodLabels, Histogram, HistogramConstructor>,
    /// ScaledObjects with a running loop.
    pub scaledobjects: Gauge,
    /// TLS handshakes on the gRPC port by result (a misconfigured KEDA shows as `failed`).
    pub tls_handshakes: Family<TlsResultLabels, Counter>,
    /// Reloads of changed TLS files by result.
    pub tls_reloads: Family<TlsResultLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Counts one TLS handshake or reload result.
    pub fn count_tls(family: &Family<TlsResultLabels, Counter>, result: &str) {
        family
            .get_or_create(&TlsResultLabels {
                result: result.to_owned(),
            })
            .inc();
    }

    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("vllm_keda_scaler");
        let m = Self {
            registry: Registry::default(),
            target_replicas: Family::default(),
            desired_replicas: Family::default(),
            ready_replicas: Family::default(),
            min_replicas: Family::default(),
            max_replicas: Family::default(),
            queue_depth: Family::default(),
            running_requests: Family::default(),
            e2e_latency_p95_seconds: Family::default(),
            ttft_p95_seconds: Family::default(),
            itl_p95_seconds: Family::default(),
            kv_cache_usage_max: Family::default(),
            preemptions_per_second: Family::default(),
            decisions: Family::default(),
            scrapes: Family::default(),
            unavailable: Family::default(),
            targets: Family::default(),
            last_success_timestamp_seconds: Family::default(),
            scrape_duration_seconds: Family::new_with_constructor(scrape_histogram),
            rpc_duration_seconds: Family::new_with_constructor(rpc_histogram),
            scaledobjects: Gauge::default(),
            tls_handshakes: Family::default(),
            tls_reloads: Family::default(),
        };
        let r = &mut registry;
        r.register(
            "target_replicas",
            "Replica target returned to KEDA",
            m.target_replicas.clone(),
        );
        r.register(
            "desired_replicas",
            "Replicas the policy decided (differs from the target in advisory mode)",
            m.desired_replicas.clone(),
        );
        r.register(
            "ready_replicas",
            "Pods whose latest scrape succeeded",
            m.ready_replicas.clone(),
        );
        r.register(
            "min_replicas",
            "Configured minimum replicas",
            m.min_replicas.clone(),
        );
        r.register(
            "max_replicas",
            "Configured maximum replicas",
            m.max_replicas.clone(),
        );
        r.register(
            "queue_depth",
            "Requests waiting across healthy pods",
            m.queue_depth.clone(),
        );
        r.register(
            "running_requests",
            "Requests running across healthy pods",
            m.running_requests.clone(),
        );
        r.register(
            "e2e_latency_p95_seconds",
            "P95 end-to-end request latency over the window (NaN when no request finished)",
            m.e2e_latency_p95_seconds.clone(),
        );
        r.register(
            "ttft_p95_seconds",
            "P95 time to first token over the window (NaN when undefined)",
            m.ttft_p95_seconds.clone(),
        );
        r.register(
            "itl_p95_seconds",
            "P95 inter-token latency over the window (NaN when undefined)",
            m.itl_p95_seconds.clone(),
        );
        r.register(
            "kv_cache_usage_max",
            "Largest KV-cache usage (0..1) across healthy pods",
            m.kv_cache_usage_max.clone(),
        );
        r.register(
            "preemptions_per_second",
            "Preemptions per second across healthy pods",
            m.preemptions_per_second.clone(),
        );
        r.register(
            "decisions",
            "Policy decisions by reason",
            m.decisions.clone(),
        );
        r.register("scrapes", "Target scrapes by result", m.scrapes.clone());
        r.register(
            "unavailable",
            "GetMetrics or IsActive calls answered Unavailable",
            m.unavailable.clone(),
        );
        r.register("targets", "Scrape targets by health", m.targets.clone());
        r.register(
            "last_success_timestamp_seconds",
            "Unix time of the last cycle with at least one healthy target",
            m.last_success_timestamp_seconds.clone(),
        );
        r.register(
            "scrape_duration_seconds",
            "Wall time of one cycle's scrape of all targets",
            m.scrape_duration_seconds.clone(),
        );
        r.register(
            "rpc_duration_seconds",
            "gRPC handling time by method",
            m.rpc_duration_seconds.clone(),
        );
        r.register(
            "scaledobjects",
            "ScaledObjects with a running loop",
            m.scaledobjects.clone(),
        );
        r.register(
            "tls_handshakes",
            "TLS handshakes on the gRPC port by result (ok, failed, timed_out)",
            m.tls_handshakes.clone(),
        );
        r.register(
            "tls_reloads",
            "Reloads of changed TLS certificate files by result (ok, failed)",
            m.tls_reloads.clone(),
        );
        Self { registry, ..m }
    }

    /// The registry, in OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Removes every series of one ScaledObject (its loop stopped).
    pub fn remove_scaledobject<'a>(
        &self,
        labels: &ScaledObjectLabels,
        reasons: impl IntoIterator<Item = &'a str>,
    ) {
        for family in [
            &self.target_replicas,
            &self.desired_replicas,
            &self.ready_replicas,
            &self.min_replicas,
            &self.max_replicas,
            &self.queue_depth,
            &self.running_requests,
            &self.e2e_latency_p95_seconds,
            &self.ttft_p95_seconds,
            &self.itl_p95_seconds,
            &self.kv_cache_usage_max,
            &self.preemptions_per_second,
            &self.last_success_timestamp_seconds,
        ] {
            family.remove(labels);
        }
        self.unavailable.remove(labels);
        self.scrape_duration_seconds.remove(labels);
        for reason in reasons {
            self.decisions.remove(&ReasonLabels {
                namespace: labels.namespace.clone(),
                scaledobject: labels.scaledobject.clone(),
                reason: reason.to_owned(),
            });
        }
        for result in SCRAPE_RESULTS {
            self.scrapes.remove(&ResultLabels {
                namespace: labels.namespace.clone(),
                scaledobject: labels.scaledobject.clone(),
                result: result.to_owned(),
            });
        }
        for health in ["healthy", "failing"] {
            self.targets.remove(&HealthLabels {
                namespace: labels.namespace.clone(),
                scaledobject: labels.scaledobject.clone(),
                health: health.to_owned(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_the_contract_names_and_removes_a_scaledobject() {
        let m = Metrics::new();
        let so = ScaledObjectLabels {
            namespace: "ns".into(),
            scaledobject: "llm".into(),
        };
        m.target_replicas.get_or_create(&so).set(3.0);
        m.decisions
            .get_or_create(&ReasonLabels {
                namespace: "ns".into(),
                scaledobject: "llm".into(),
                reason: "hold".into(),
            })
            .inc();
        m.rpc_duration_seconds
            .get_or_create(&MethodLabels {
                method: "GetMetrics".into(),
            })
            .observe(0.0001);
        m.scaledobjects.set(1);
        let text = m.encode();
        for name in [
            "vllm_keda_scaler_target_replicas{namespace=\"ns\",scaledobject=\"llm\"} 3.0",
            "vllm_keda_scaler_decisions_total{namespace=\"ns\",scaledobject=\"llm\",reason=\"hold\"} 1",
            "vllm_keda_scaler_rpc_duration_seconds_count{method=\"GetMetrics\"} 1",
            "vllm_keda_scaler_scaledobjects 1",
        ] {
            assert!(text.contains(name), "missing {name:?} in:\n{text}");
        }
        m.remove_scaledobject(&so, ["hold"]);
        let text = m.encode();
        assert!(!text.contains("scaledobject=\"llm\""), "{text}");
    }
}
