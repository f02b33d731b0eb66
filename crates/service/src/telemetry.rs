//! Logging setup and the scaler's own Prometheus metrics.
//!
//! Owns: the tracing subscriber, the metric names, their labels and the registry served on
//! `/metrics`. Does not own: when values change (see [`crate::control`] and [`crate::grpc`]).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::scrape::RESULT_LABELS;
use vllm_keda_core::config::ScalerConfig;
use vllm_keda_core::policy::Decision;
use vllm_keda_core::policy::proactive::Learned;
use vllm_keda_core::policy::proactive::hindsight::StaticComparison;
use vllm_keda_core::signals::FleetSignals;

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

/// Labels of every per-ScaledObject series: `namespace`, `scaledobject`, and `trigger` only
/// for a loop started beside another trigger of the same ScaledObject (so a ScaledObject with
/// one trigger has exactly the first two).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScaledObjectLabels {
    /// The ScaledObject's namespace.
    pub namespace: String,
    /// The ScaledObject's name.
    pub scaledobject: String,
    /// The trigger id (see [`crate::control::trigger_id`]), when the label is shown.
    pub trigger: Option<String>,
}

impl ScaledObjectLabels {
    /// The labels of one loop.
    pub fn of(so: &crate::control::ScaledObject) -> Self {
        Self {
            namespace: so.key.namespace.clone(),
            scaledobject: so.key.name.clone(),
            trigger: so.trigger_label.clone(),
        }
    }
}

impl EncodeLabelSet for ScaledObjectLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder<'_>) -> Result<(), std::fmt::Error> {
        ("namespace", self.namespace.as_str()).encode(encoder.encode_label())?;
        ("scaledobject", self.scaledobject.as_str()).encode(encoder.encode_label())?;
        if let Some(trigger) = &self.trigger {
            ("trigger", trigger.as_str()).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

/// Per-ScaledObject labels plus a decision reason.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The ScaledObject (and trigger).
    #[prometheus(flatten)]
    pub so: ScaledObjectLabels,
    /// The decision's reason code.
    pub reason: String,
}

/// Per-ScaledObject labels plus a scrape result.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ResultLabels {
    /// The ScaledObject (and trigger).
    #[prometheus(flatten)]
    pub so: ScaledObjectLabels,
    /// One of [`RESULT_LABELS`].
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
    /// The ScaledObject (and trigger).
    #[prometheus(flatten)]
    pub so: ScaledObjectLabels,
    /// One of [`TARGET_HEALTH`].
    pub health: String,
}

/// Which limit was exceeded (`body_bytes`, `samples`, `scaledobjects`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct LimitLabels {
    /// The limit's label: [`crate::scrape::ScrapeLimit::label`] or another limit's.
    pub limit: String,
}

/// The RPC method label.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct MethodLabels {
    /// gRPC method name, e.g. `GetMetrics`.
    pub method: String,
}

/// The `health` label values of the targets gauge.
pub const TARGET_HEALTH: [&str; 2] = ["healthy", "failing"];

type FloatGauge = Gauge<f64, AtomicU64>;
type HistogramConstructor = fn() -> Histogram;

/// What one cycle produced, as the per-ScaledObject gauges read it.
#[derive(Debug, Clone, Copy)]
pub struct CycleReading<'a> {
    /// The fleet's signals.
    pub signals: &'a FleetSignals,
    /// The policy's decision on them.
    pub decision: &'a Decision,
    /// Unix time of the last cycle with at least one healthy target, if there was one.
    pub last_healthy_unix_seconds: Option<f64>,
    /// The proactive policy's comparison with static fleets over the last day, once it has
    /// half an hour of history.
    pub hindsight: Option<&'a StaticComparison>,
    /// What the proactive policy has learned (`None` under the guide's policy).
    pub learned: Option<Learned>,
}

/// Where a per-ScaledObject gauge's value comes from.
#[derive(Debug, Clone, Copy)]
pub enum GaugeSource {
    /// The validated configuration: set once, when the loop starts.
    Config(fn(&ScalerConfig) -> f64),
    /// Every cycle's reading; `None` leaves the gauge as it was.
    Cycle(fn(&CycleReading<'_>) -> Option<f64>),
}

/// One gauge with a series per ScaledObject (labels [`ScaledObjectLabels`]).
#[derive(Debug, Clone, Copy)]
pub struct ScaledObjectGauge {
    /// Its name after the `vllm_keda_scaler_` prefix.
    pub name: &'static str,
    /// Its `# HELP` text.
    pub help: &'static str,
    /// Where its value comes from.
    pub source: GaugeSource,
}

/// An undefined value (a quantile without observations) as NaN.
fn or_nan(value: Option<f64>) -> f64 {
    value.unwrap_or(f64::NAN)
}

/// Every per-ScaledObject gauge: registered, set and removed from this table alone.
pub const SCALEDOBJECT_GAUGES: [ScaledObjectGauge; 21] = [
    ScaledObjectGauge {
        name: "target_replicas",
        help: "Replica target returned to KEDA",
        source: GaugeSource::Cycle(|c| Some(f64::from(c.decision.target_replicas))),
    },
    ScaledObjectGauge {
        name: "desired_replicas",
        help: "Replicas the policy decided (differs from the target in advisory mode)",
        source: GaugeSource::Cycle(|c| Some(f64::from(c.decision.desired_replicas))),
    },
    ScaledObjectGauge {
        name: "ready_replicas",
        help: "Pods whose latest scrape succeeded",
        source: GaugeSource::Cycle(|c| Some(c.signals.pods_healthy as f64)),
    },
    ScaledObjectGauge {
        name: "min_replicas",
        help: "Configured minimum replicas",
        source: GaugeSource::Config(|config| f64::from(config.policy.min_replicas)),
    },
    ScaledObjectGauge {
        name: "max_replicas",
        help: "Configured maximum replicas",
        source: GaugeSource::Config(|config| f64::from(config.policy.max_replicas)),
    },
    ScaledObjectGauge {
        name: "queue_depth",
        help: "Requests waiting across healthy pods",
        source: GaugeSource::Cycle(|c| Some(c.signals.fleet.queue_depth)),
    },
    ScaledObjectGauge {
        name: "running_requests",
        help: "Requests running across healthy pods",
        source: GaugeSource::Cycle(|c| Some(c.signals.fleet.running)),
    },
    ScaledObjectGauge {
        name: "e2e_latency_p95_seconds",
        help: "P95 end-to-end request latency over the window (NaN when no request finished)",
        source: GaugeSource::Cycle(|c| Some(or_nan(c.signals.fleet.e2e_latency_seconds.p95))),
    },
    ScaledObjectGauge {
        name: "ttft_p95_seconds",
        help: "P95 time to first token over the window (NaN when undefined)",
        source: GaugeSource::Cycle(|c| Some(or_nan(c.signals.fleet.ttft_seconds.p95))),
    },
    ScaledObjectGauge {
        name: "itl_p95_seconds",
        help: "P95 inter-token latency over the window (NaN when undefined)",
        source: GaugeSource::Cycle(|c| Some(or_nan(c.signals.fleet.itl_seconds.p95))),
    },
    ScaledObjectGauge {
        name: "kv_cache_usage_max",
        help: "Largest KV-cache usage (0..1) across healthy pods",
        source: GaugeSource::Cycle(|c| Some(or_nan(c.signals.fleet.kv_cache_usage.max))),
    },
    ScaledObjectGauge {
        name: "preemptions_per_second",
        help: "Preemptions per second across healthy pods",
        source: GaugeSource::Cycle(|c| Some(or_nan(c.signals.fleet.preemptions_per_second))),
    },
    ScaledObjectGauge {
        name: "last_success_timestamp_seconds",
        help: "Unix time of the last cycle with at least one healthy target",
        source: GaugeSource::Cycle(|c| c.last_healthy_unix_seconds),
    },
    ScaledObjectGauge {
        name: "hindsight_static_replicas",
        help: "Smallest static fleet that would have served as much of the last day's demand as the autoscaled one (proactive policy's fluid model; NaN before half an hour and under the guide's policy)",
        source: GaugeSource::Cycle(|c| {
            Some(or_nan(c.hindsight.map(|h| f64::from(h.as_much.replicas))))
        }),
    },
    ScaledObjectGauge {
        name: "hindsight_static_replica_hours_ratio",
        help: "That static fleet's replica-hours over the autoscaled fleet's, last day (below 1: the static fleet was cheaper; NaN while undefined)",
        source: GaugeSource::Cycle(|c| {
            Some(or_nan(
                c.hindsight
                    .map(|h| h.as_much.replica_hours / h.ours_replica_hours),
            ))
        }),
    },
    ScaledObjectGauge {
        name: "hindsight_static_beats_ours",
        help: "1 when some static fleet would have served at least 1 point more of the last day's demand with at most 97 % of the autoscaled fleet's replica-hours, 0 when none would have, NaN while undefined",
        source: GaugeSource::Cycle(|c| {
            Some(or_nan(
                c.hindsight
                    .map(|h| if h.static_beats_ours { 1.0 } else { 0.0 }),
            ))
        }),
    },
    ScaledObjectGauge {
        name: "hindsight_served_ratio",
        help: "Share (0..1) of the last day's demand the autoscaled fleet served by the proactive policy's fluid model, which serves each minute's demand up to the ready replicas' capacity and so reads a burst's queue as served (NaN before half an hour and under the guide's policy)",
        source: GaugeSource::Cycle(|c| {
            Some(or_nan(c.hindsight.map(|h| h.ours_fluid_percent / 100.0)))
        }),
    },
    ScaledObjectGauge {
        name: "hindsight_served_counted_ratio",
        help: "Share (0..1) of the last day's demand the autoscaled fleet served by what the engines counted: the demand less the requests finished aborted and the larger of the first tokens over the TTFT SLO and the requests over the ITL SLO per output token (NaN when the engines expose none of them, before half an hour and under the guide's policy)",
        source: GaugeSource::Cycle(|c| {
            Some(or_nan(
                c.hindsight
                    .and_then(|h| h.ours_counted_percent)
                    .map(|p| p / 100.0),
            ))
        }),
    },
    ScaledObjectGauge {
        name: "capacity_per_replica",
        help: "Requests per second one replica serves within the SLO, as the proactive policy estimates it from this scaler pod's history, or another pod's it inherited through the learned-state ConfigMap (the metadata's prior until observations move it; NaN under the guide's policy and before any estimate)",
        source: GaugeSource::Cycle(|c| {
            Some(or_nan(c.learned.and_then(|l| l.capacity_per_replica)))
        }),
    },
    ScaledObjectGauge {
        name: "startup_seconds",
        help: "Seconds from asking for a replica to it serving, as the proactive policy uses it (set, learned by this scaler pod or inherited from another, or the 300 s default; NaN under the guide's policy)",
        source: GaugeSource::Cycle(|c| Some(or_nan(c.learned.map(|l| l.startup_seconds)))),
    },
    ScaledObjectGauge {
        name: "learned_observed_seconds",
        help: "Seconds of decisions with a stable fleet serving load that the proactive policy's learning rests on, another scaler pod's included once inherited or adopted: of two pods keeping their learning in a ConfigMap, the one with more leads (NaN under the guide's policy)",
        source: GaugeSource::Cycle(|c| Some(or_nan(c.learned.map(|l| l.observed_seconds)))),
    },
];

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
    /// One family per entry of [`SCALEDOBJECT_GAUGES`], in its order.
    gauges: [Family<ScaledObjectLabels, FloatGauge>; SCALEDOBJECT_GAUGES.len()],
    /// Decisions by reason.
    pub decisions: Family<ReasonLabels, Counter>,
    /// Scrapes by result.
    pub scrapes: Family<ResultLabels, Counter>,
    /// `GetMetrics`/`IsActive` answered `Unavailable`.
    pub unavailable: Family<ScaledObjectLabels, Counter>,
    /// Targets by health.
    pub targets: Family<HealthLabels, Gauge>,
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
    /// Limits exceeded, by limit.
    pub limit_exceeded: Family<LimitLabels, Counter>,
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

    /// Counts one time a limit was exceeded.
    pub fn count_limit(&self, limit: &str) {
        self.limit_exceeded
            .get_or_create(&LimitLabels {
                limit: limit.to_owned(),
            })
            .inc();
    }

    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("vllm_keda_scaler");
        let m = Self {
            registry: Registry::default(),
            gauges: std::array::from_fn(|_| Family::default()),
            decisions: Family::default(),
            scrapes: Family::default(),
            unavailable: Family::default(),
            targets: Family::default(),
            scrape_duration_seconds: Family::new_with_constructor(scrape_histogram),
            rpc_duration_seconds: Family::new_with_constructor(rpc_histogram),
            scaledobjects: Gauge::default(),
            tls_handshakes: Family::default(),
            tls_reloads: Family::default(),
            limit_exceeded: Family::default(),
        };
        let r = &mut registry;
        for (gauge, family) in SCALEDOBJECT_GAUGES.iter().zip(&m.gauges) {
            r.register(gauge.name, gauge.help, family.clone());
        }
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
        r.register(
            "limit_exceeded",
            "Scrapes, requests and bodies refused for exceeding a limit, by limit (each limit's \
             flag raises it)",
            m.limit_exceeded.clone(),
        );
        Self { registry, ..m }
    }

    /// The family of the per-ScaledObject gauge named `name` (see [`SCALEDOBJECT_GAUGES`]).
    pub fn scaledobject_gauge(
        &self,
        name: &str,
    ) -> Option<&Family<ScaledObjectLabels, FloatGauge>> {
        SCALEDOBJECT_GAUGES
            .iter()
            .position(|gauge| gauge.name == name)
            .map(|i| &self.gauges[i])
    }

    /// Sets the gauges read from a ScaledObject's configuration (its loop started).
    pub fn start_scaledobject(&self, labels: &ScaledObjectLabels, config: &ScalerConfig) {
        for (gauge, family) in SCALEDOBJECT_GAUGES.iter().zip(&self.gauges) {
            if let GaugeSource::Config(read) = gauge.source {
                family.get_or_create(labels).set(read(config));
            }
        }
    }

    /// Sets the gauges read from one cycle of a ScaledObject's loop.
    pub fn record_cycle(&self, labels: &ScaledObjectLabels, reading: &CycleReading<'_>) {
        for (gauge, family) in SCALEDOBJECT_GAUGES.iter().zip(&self.gauges) {
            if let GaugeSource::Cycle(read) = gauge.source {
                if let Some(value) = read(reading) {
                    family.get_or_create(labels).set(value);
                }
            }
        }
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
        for family in &self.gauges {
            family.remove(labels);
        }
        self.unavailable.remove(labels);
        self.scrape_duration_seconds.remove(labels);
        for reason in reasons {
            self.decisions.remove(&ReasonLabels {
                so: labels.clone(),
                reason: reason.to_owned(),
            });
        }
        for result in RESULT_LABELS {
            self.scrapes.remove(&ResultLabels {
                so: labels.clone(),
                result: result.to_owned(),
            });
        }
        for health in TARGET_HEALTH {
            self.targets.remove(&HealthLabels {
                so: labels.clone(),
                health: health.to_owned(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::time::Duration;
    use vllm_keda_core::policy::proactive::hindsight::StaticFleet;
    use vllm_keda_core::{Scaler, ScrapeRound};

    fn labels() -> ScaledObjectLabels {
        ScaledObjectLabels {
            namespace: "ns".into(),
            scaledobject: "llm".into(),
            trigger: None,
        }
    }

    fn config() -> ScalerConfig {
        let metadata: HashMap<String, String> = [
            ("endpoints", "http://a/metrics"),
            ("minReplicas", "2"),
            ("maxReplicas", "7"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        ScalerConfig::from_metadata(&metadata).unwrap()
    }

    /// A comparison: 3 static replicas would have served as much for 75 % of ours' hours.
    fn comparison() -> StaticComparison {
        let fleet = |replicas, served_percent, replica_hours| StaticFleet {
            replicas,
            served_percent,
            replica_hours,
        };
        StaticComparison {
            minutes: 120,
            capacity_per_replica: 10.0,
            ours_served_percent: 80.0,
            ours_fluid_percent: 80.0,
            ours_counted_percent: Some(72.5),
            ours_replica_hours: 8.0,
            as_much: fleet(3, 85.0, 6.0),
            at_99: Some(fleet(4, 100.0, 8.0)),
            static_beats_ours: true,
            peak_demand: 40.0,
            beaten_by: Some(fleet(3, 85.0, 6.0)),
            cheapest_beating: Some(fleet(3, 85.0, 6.0)),
        }
    }

    fn value(m: &Metrics, name: &str) -> Option<f64> {
        let text = m.encode();
        let prefix = format!("vllm_keda_scaler_{name}{{namespace=\"ns\",scaledobject=\"llm\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(prefix.as_str()))
            .map(|v| v.parse().unwrap())
    }

    #[test]
    fn gauge_names_are_distinct_and_each_has_its_family() {
        let m = Metrics::new();
        for (i, gauge) in SCALEDOBJECT_GAUGES.iter().enumerate() {
            assert!(
                SCALEDOBJECT_GAUGES[..i]
                    .iter()
                    .all(|g| g.name != gauge.name),
                "{} twice",
                gauge.name
            );
            assert!(m.scaledobject_gauge(gauge.name).is_some(), "{}", gauge.name);
        }
        assert!(m.scaledobject_gauge("no_such_gauge").is_none());
    }

    #[test]
    fn the_configuration_and_each_cycle_set_their_gauges() {
        let m = Metrics::new();
        let config = config();
        m.start_scaledobject(&labels(), &config);
        assert_eq!(value(&m, "min_replicas"), Some(2.0));
        assert_eq!(value(&m, "max_replicas"), Some(7.0));
        assert_eq!(value(&m, "target_replicas"), None);

        let step = Scaler::new(&config).step(Duration::ZERO, ScrapeRound::<()>::default());
        let reading = |last_healthy_unix_seconds| CycleReading {
            signals: &step.signals,
            decision: &step.decision,
            last_healthy_unix_seconds,
            hindsight: None,
            learned: step.learned,
        };
        m.record_cycle(&labels(), &reading(None));
        assert_eq!(
            value(&m, "target_replicas"),
            Some(f64::from(step.decision.target_replicas))
        );
        assert_eq!(
            value(&m, "desired_replicas"),
            Some(f64::from(step.decision.desired_replicas))
        );
        assert_eq!(value(&m, "ready_replicas"), Some(0.0));
        assert_eq!(value(&m, "queue_depth"), Some(0.0));
        // No request finished: the quantiles are undefined, exposed as NaN.
        assert!(value(&m, "e2e_latency_p95_seconds").unwrap().is_nan());
        assert!(value(&m, "ttft_p95_seconds").unwrap().is_nan());
        // Without a healthy cycle yet, the timestamp is not exposed at all.
        assert_eq!(value(&m, "last_success_timestamp_seconds"), None);

        m.record_cycle(&labels(), &reading(Some(1_700_000_000.5)));
        assert_eq!(
            value(&m, "last_success_timestamp_seconds"),
            Some(1_700_000_000.5)
        );
        // Before half an hour of history there is no comparison: NaN, as an undefined
        // quantile (so an alert on it stays silent, and the series exists from the start).
        assert!(value(&m, "hindsight_static_replicas").unwrap().is_nan());
        assert!(value(&m, "hindsight_static_beats_ours").unwrap().is_nan());
        assert!(
            value(&m, "hindsight_served_counted_ratio")
                .unwrap()
                .is_nan()
        );
        m.record_cycle(
            &labels(),
            &CycleReading {
                hindsight: Some(&comparison()),
                ..reading(Some(1_700_000_000.5))
            },
        );
        assert_eq!(value(&m, "hindsight_static_replicas"), Some(3.0));
        assert_eq!(
            value(&m, "hindsight_static_replica_hours_ratio"),
            Some(0.75)
        );
        assert_eq!(value(&m, "hindsight_static_beats_ours"), Some(1.0));
        assert_eq!(value(&m, "hindsight_served_ratio"), Some(0.8));
        assert_eq!(value(&m, "hindsight_served_counted_ratio"), Some(0.725));
        // The proactive policy (the default) before any capacity estimate: NaN, and the start-up
        // time it uses, its default; what it learns later is exposed as it moves.
        assert!(value(&m, "capacity_per_replica").unwrap().is_nan());
        assert_eq!(value(&m, "startup_seconds"), Some(300.0));
        let learned = Learned {
            capacity_per_replica: Some(13.5),
            capacity_source: "learned",
            capacity_tested: true,
            startup_seconds: 254.0,
            startup_source: "learned",
            observed_seconds: 3600.0,
        };
        m.record_cycle(
            &labels(),
            &CycleReading {
                learned: Some(learned),
                ..reading(None)
            },
        );
        assert_eq!(value(&m, "capacity_per_replica"), Some(13.5));
        assert_eq!(value(&m, "startup_seconds"), Some(254.0));
        assert_eq!(value(&m, "learned_observed_seconds"), Some(3600.0));
        // Under the guide's policy nothing is learned: NaN.
        m.record_cycle(
            &labels(),
            &CycleReading {
                learned: None,
                ..reading(None)
            },
        );
        assert!(value(&m, "capacity_per_replica").unwrap().is_nan());
        assert!(value(&m, "startup_seconds").unwrap().is_nan());
        assert!(value(&m, "learned_observed_seconds").unwrap().is_nan());
        // A later cycle without a healthy target leaves the last timestamp.
        m.record_cycle(&labels(), &reading(None));
        assert_eq!(
            value(&m, "last_success_timestamp_seconds"),
            Some(1_700_000_000.5)
        );
        assert_eq!(value(&m, "min_replicas"), Some(2.0));

        m.remove_scaledobject(&labels(), []);
        for gauge in &SCALEDOBJECT_GAUGES {
            assert_eq!(value(&m, gauge.name), None, "{}", gauge.name);
        }
    }

    #[test]
    fn every_family_keeps_its_contract_name_and_help() {
        let m = Metrics::new();
        let so = labels();
        m.start_scaledobject(&so, &config());
        let step = Scaler::new(&config()).step(Duration::ZERO, ScrapeRound::<()>::default());
        m.record_cycle(
            &so,
            &CycleReading {
                signals: &step.signals,
                decision: &step.decision,
                last_healthy_unix_seconds: Some(1.0),
                hindsight: Some(&comparison()),
                learned: step.learned,
            },
        );
        m.decisions
            .get_or_create(&ReasonLabels {
                so: labels(),
                reason: "hold".into(),
            })
            .inc();
        m.scrapes
            .get_or_create(&ResultLabels {
                so: labels(),
                result: "ok".into(),
            })
            .inc();
        m.unavailable.get_or_create(&so).inc();
        m.targets
            .get_or_create(&HealthLabels {
                so: labels(),
                health: "healthy".into(),
            })
            .set(1);
        m.scrape_duration_seconds.get_or_create(&so).observe(0.01);
        m.rpc_duration_seconds
            .get_or_create(&MethodLabels {
                method: "GetMetrics".into(),
            })
            .observe(0.001);
        Metrics::count_tls(&m.tls_handshakes, "ok");
        Metrics::count_tls(&m.tls_reloads, "ok");
        m.count_limit("samples");
        let text = m.encode();
        let mut help: Vec<&str> = text.lines().filter(|l| l.starts_with("# HELP ")).collect();
        help.sort_unstable();
        let mut expected = vec![
            "# HELP vllm_keda_scaler_target_replicas Replica target returned to KEDA.",
            "# HELP vllm_keda_scaler_desired_replicas Replicas the policy decided (differs from the target in advisory mode).",
            "# HELP vllm_keda_scaler_ready_replicas Pods whose latest scrape succeeded.",
            "# HELP vllm_keda_scaler_min_replicas Configured minimum replicas.",
            "# HELP vllm_keda_scaler_max_replicas Configured maximum replicas.",
            "# HELP vllm_keda_scaler_queue_depth Requests waiting across healthy pods.",
            "# HELP vllm_keda_scaler_running_requests Requests running across healthy pods.",
            "# HELP vllm_keda_scaler_e2e_latency_p95_seconds P95 end-to-end request latency over the window (NaN when no request finished).",
            "# HELP vllm_keda_scaler_ttft_p95_seconds P95 time to first token over the window (NaN when undefined).",
            "# HELP vllm_keda_scaler_itl_p95_seconds P95 inter-token latency over the window (NaN when undefined).",
            "# HELP vllm_keda_scaler_kv_cache_usage_max Largest KV-cache usage (0..1) across healthy pods.",
            "# HELP vllm_keda_scaler_preemptions_per_second Preemptions per second across healthy pods.",
            "# HELP vllm_keda_scaler_decisions Policy decisions by reason.",
            "# HELP vllm_keda_scaler_scrapes Target scrapes by result.",
            "# HELP vllm_keda_scaler_unavailable GetMetrics or IsActive calls answered Unavailable.",
            "# HELP vllm_keda_scaler_targets Scrape targets by health.",
            "# HELP vllm_keda_scaler_last_success_timestamp_seconds Unix time of the last cycle with at least one healthy target.",
            "# HELP vllm_keda_scaler_hindsight_static_replicas Smallest static fleet that would have served as much of the last day's demand as the autoscaled one (proactive policy's fluid model; NaN before half an hour and under the guide's policy).",
            "# HELP vllm_keda_scaler_hindsight_static_replica_hours_ratio That static fleet's replica-hours over the autoscaled fleet's, last day (below 1: the static fleet was cheaper; NaN while undefined).",
            "# HELP vllm_keda_scaler_hindsight_static_beats_ours 1 when some static fleet would have served at least 1 point more of the last day's demand with at most 97 % of the autoscaled fleet's replica-hours, 0 when none would have, NaN while undefined.",
            "# HELP vllm_keda_scaler_hindsight_served_ratio Share (0..1) of the last day's demand the autoscaled fleet served by the proactive policy's fluid model, which serves each minute's demand up to the ready replicas' capacity and so reads a burst's queue as served (NaN before half an hour and under the guide's policy).",
            "# HELP vllm_keda_scaler_hindsight_served_counted_ratio Share (0..1) of the last day's demand the autoscaled fleet served by what the engines counted: the demand less the requests finished aborted and the larger of the first tokens over the TTFT SLO and the requests over the ITL SLO per output token (NaN when the engines expose none of them, before half an hour and under the guide's policy).",
            "# HELP vllm_keda_scaler_capacity_per_replica Requests per second one replica serves within the SLO, as the proactive policy estimates it from this scaler pod's history, or another pod's it inherited through the learned-state ConfigMap (the metadata's prior until observations move it; NaN under the guide's policy and before any estimate).",
            "# HELP vllm_keda_scaler_startup_seconds Seconds from asking for a replica to it serving, as the proactive policy uses it (set, learned by this scaler pod or inherited from another, or the 300 s default; NaN under the guide's policy).",
            "# HELP vllm_keda_scaler_learned_observed_seconds Seconds of decisions with a stable fleet serving load that the proactive policy's learning rests on, another scaler pod's included once inherited or adopted: of two pods keeping their learning in a ConfigMap, the one with more leads (NaN under the guide's policy).",
            "# HELP vllm_keda_scaler_scrape_duration_seconds Wall time of one cycle's scrape of all targets.",
            "# HELP vllm_keda_scaler_rpc_duration_seconds gRPC handling time by method.",
            "# HELP vllm_keda_scaler_scaledobjects ScaledObjects with a running loop.",
            "# HELP vllm_keda_scaler_tls_handshakes TLS handshakes on the gRPC port by result (ok, failed, timed_out).",
            "# HELP vllm_keda_scaler_tls_reloads Reloads of changed TLS certificate files by result (ok, failed).",
            "# HELP vllm_keda_scaler_limit_exceeded Scrapes, requests and bodies refused for exceeding a limit, by limit (each limit's flag raises it).",
        ];
        expected.sort_unstable();
        assert_eq!(help, expected);
        for gauge in &SCALEDOBJECT_GAUGES {
            let series = format!(
                "vllm_keda_scaler_{}{{namespace=\"ns\",scaledobject=\"llm\"}} ",
                gauge.name
            );
            assert!(text.contains(&series), "missing {series:?} in:\n{text}");
            let kind = format!("# TYPE vllm_keda_scaler_{} gauge", gauge.name);
            assert!(text.contains(&kind), "missing {kind:?}");
        }
    }

    #[test]
    fn exposes_the_contract_names_and_removes_a_scaledobject() {
        let m = Metrics::new();
        let so = labels();
        m.scaledobject_gauge("target_replicas")
            .unwrap()
            .get_or_create(&so)
            .set(3.0);
        m.decisions
            .get_or_create(&ReasonLabels {
                so: labels(),
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

    #[test]
    fn a_second_trigger_has_its_own_series_under_a_trigger_label() {
        let m = Metrics::new();
        let first = labels();
        let second = ScaledObjectLabels {
            trigger: Some("00ff00ff00ff00ff".into()),
            ..labels()
        };
        let family = m.scaledobject_gauge("target_replicas").unwrap();
        family.get_or_create(&first).set(2.0);
        family.get_or_create(&second).set(5.0);
        m.decisions
            .get_or_create(&ReasonLabels {
                so: second.clone(),
                reason: "hold".into(),
            })
            .inc();
        let text = m.encode();
        for line in [
            "vllm_keda_scaler_target_replicas{namespace=\"ns\",scaledobject=\"llm\"} 2.0",
            "vllm_keda_scaler_target_replicas{namespace=\"ns\",scaledobject=\"llm\",trigger=\"00ff00ff00ff00ff\"} 5.0",
            "vllm_keda_scaler_decisions_total{namespace=\"ns\",scaledobject=\"llm\",trigger=\"00ff00ff00ff00ff\",reason=\"hold\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in:\n{text}");
        }
        m.remove_scaledobject(&second, ["hold"]);
        let text = m.encode();
        assert!(!text.contains("trigger="), "{text}");
        assert!(text.contains("scaledobject=\"llm\"} 2.0"), "{text}");
    }
}
