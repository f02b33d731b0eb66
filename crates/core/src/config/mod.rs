//! Scaler metadata contract: a ScaledObject trigger's `metadata` map, validated once into a
//! typed [`ScalerConfig`] that cannot hold a bad value.
//!
//! Owns: key names ([`KEYS`]), defaults, validation and error messages. Does not own: what
//! the policy does with the values (see [`crate::policy`]) or the ScaledObject's identity.
//!
//! Every error names the key, the value and what is expected:
//! `scaler metadata "queueDepthPerReplica": expected a positive number, got "abc"`. Unknown
//! keys are errors (a typo must not fall back to a default) and suggest the closest known key;
//! KEDA's own `scalerAddress`, `enableTLS` and `unsafeSsl` are accepted and ignored.

mod keys;
mod parse;
mod targets;

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;

use crate::policy::PolicyConfig;
pub use keys::{IGNORED_KEYS, KEYS, KeyDoc};
use parse::Meta;

/// Where the vLLM pods (or DCGM exporters) are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetSource {
    /// A fixed list of URLs (`http://host:port/metrics`).
    Static(Vec<String>),
    /// A DNS name (headless Service) re-resolved each cycle, with port and metrics path.
    Dns {
        /// Host name to resolve (every A/AAAA record is a pod).
        host: String,
        /// Port of `/metrics`.
        port: u16,
        /// Path of the metrics endpoint.
        path: String,
    },
}

/// Whether decisions are returned to KEDA or only reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Return the decided replica target.
    #[default]
    Active,
    /// Return the observed replica count; report what would have been done.
    Advisory,
}

impl Mode {
    /// `active` or `advisory`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Active => "active",
            Mode::Advisory => "advisory",
        }
    }
}

/// The validated configuration of one ScaledObject.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScalerConfig {
    /// vLLM targets.
    pub targets: TargetSource,
    /// Optional DCGM exporter targets.
    pub dcgm_targets: Option<TargetSource>,
    /// Only series whose `model_name` equals this.
    pub model: Option<String>,
    /// How often the background loop scrapes.
    #[serde(serialize_with = "ser_secs")]
    pub scrape_interval: Duration,
    /// The policy's settings.
    pub policy: PolicyConfig,
}

fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// A bad metadata value: names the key, the value, and what is expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("scaler metadata \"{key}\": {message}")]
pub struct ConfigError {
    /// The metadata key.
    pub key: String,
    /// What was wrong and what is expected.
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(key: &str, message: impl Into<String>) -> Self {
        Self {
            key: key.to_owned(),
            message: message.into(),
        }
    }
}

impl ScalerConfig {
    /// Validates a trigger's metadata map. The first problem found is returned: unknown keys
    /// first (alphabetically), then keys in [`KEYS`] order, then cross-field checks.
    pub fn from_metadata(metadata: &HashMap<String, String>) -> Result<Self, ConfigError> {
        keys::check_unknown(metadata)?;
        let m = Meta(metadata);
        let d = PolicyConfig::default();

        let targets = targets::vllm_targets(&m)?;
        let model = m.model("model")?;
        let queue_depth_per_replica = m
            .positive("queueDepthPerReplica", "a positive number")?
            .unwrap_or(d.queue_depth_per_replica);
        let e2e_latency_slo_seconds = m.slo("latencySloSeconds", d.e2e_latency_slo_seconds)?;
        let ttft_slo_seconds = m.slo("ttftSloSeconds", d.ttft_slo_seconds)?;
        let itl_slo_seconds = m.slo("itlSloSeconds", d.itl_slo_seconds)?;
        let kv_warning = m.fraction("kvCacheWarning")?;
        let kv_critical = m.fraction("kvCacheCritical")?;
        let preemptions = m
            .positive(
                "preemptionRateThreshold",
                "a positive number of preemptions per second per replica",
            )?
            .unwrap_or(d.preemptions_per_second_per_replica);
        let min = m.replicas("minReplicas")?;
        let max = m.replicas("maxReplicas")?;
        let scale_up_pods = m.pods("scaleUpPods")?.unwrap_or(d.scale_up_pods);
        let scale_up_period = m
            .seconds_positive("scaleUpPeriodSeconds")?
            .unwrap_or(d.scale_up_period);
        let scale_up_stabilization = m
            .seconds("scaleUpStabilizationSeconds")?
            .unwrap_or(d.scale_up_stabilization);
        let scale_down_pods = m.pods("scaleDownPods")?.unwrap_or(d.scale_down_pods);
        let scale_down_period = m
            .seconds_positive("scaleDownPeriodSeconds")?
            .unwrap_or(d.scale_down_period);
        let scale_down_stabilization = m
            .seconds("scaleDownStabilizationSeconds")?
            .unwrap_or(d.scale_down_stabilization);
        let startup_grace = m.seconds("startupGraceSeconds")?.unwrap_or(d.startup_grace);
        let scrape_interval = m
            .scrape_interval("scrapeIntervalSeconds")?
            .unwrap_or(Duration::from_secs(2));
        let hpa_tolerance = m.tolerance("hpaTolerance")?.unwrap_or(d.hpa_tolerance);
        let mode = m.mode("mode")?.unwrap_or_default();
        let dcgm_targets = targets::dcgm_targets(&m)?;

        // Cross-field checks: blame the key the user wrote (the later one when both are set).
        let min_replicas = min.unwrap_or(d.min_replicas);
        let max_replicas = max.unwrap_or(d.max_replicas);
        if min_replicas > max_replicas {
            return Err(if max.is_some() {
                ConfigError::new(
                    "maxReplicas",
                    format!(
                        "expected a whole number >= minReplicas ({min_replicas}), got {:?}",
                        m.raw("maxReplicas")
                    ),
                )
            } else {
                ConfigError::new(
                    "minReplicas",
                    format!(
                        "expected a whole number <= maxReplicas ({max_replicas}, the default; set maxReplicas too), got {:?}",
                        m.raw("minReplicas")
                    ),
                )
            });
        }
        let kv_cache_warning = kv_warning.unwrap_or(d.kv_cache_warning);
        let kv_cache_critical = kv_critical.unwrap_or(d.kv_cache_critical);
        if kv_cache_warning >= kv_cache_critical {
            return Err(if kv_critical.is_some() {
                ConfigError::new(
                    "kvCacheCritical",
                    format!(
                        "expected a fraction above kvCacheWarning ({kv_cache_warning}), got {:?}",
                        m.raw("kvCacheCritical")
                    ),
                )
            } else {
                ConfigError::new(
                    "kvCacheWarning",
                    format!(
                        "expected a fraction below kvCacheCritical ({kv_cache_critical}), got {:?}",
                        m.raw("kvCacheWarning")
                    ),
                )
            });
        }

        let gpu_memory_required = dcgm_targets.is_some();
        Ok(Self {
            targets,
            dcgm_targets,
            model,
            scrape_interval,
            policy: PolicyConfig {
                min_replicas,
                max_replicas,
                queue_depth_per_replica,
                e2e_latency_slo_seconds,
                ttft_slo_seconds,
                itl_slo_seconds,
                kv_cache_warning,
                kv_cache_critical,
                preemptions_per_second_per_replica: preemptions,
                scale_up_pods,
                scale_up_period,
                scale_up_stabilization,
                scale_down_pods,
                scale_down_period,
                scale_down_stabilization,
                startup_grace,
                hpa_tolerance,
                mode,
                gpu_memory_required,
                ..d
            },
        })
    }
}
