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

pub use crate::policy::Mode;
use crate::policy::PolicyConfig;
pub use keys::{IGNORED_KEYS, KEYS, MetadataKey};

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

/// Most keys in one trigger's metadata (the table has about 30, KEDA adds 3).
pub const MAX_METADATA_KEYS: usize = 64;
/// Longest metadata key, in bytes (the longest known key is under 30).
pub const MAX_METADATA_KEY_BYTES: usize = 128;
/// Longest metadata value, in bytes: room for an `endpoints` list of a few hundred URLs.
pub const MAX_METADATA_VALUE_BYTES: usize = 32 * 1024;

/// The size limits above, checked before anything reads the metadata (so a huge key costs
/// nothing and is not echoed back).
fn check_sizes(metadata: &HashMap<String, String>) -> Result<(), ConfigError> {
    if metadata.len() > MAX_METADATA_KEYS {
        return Err(ConfigError::new(
            "(all keys)",
            format!(
                "{} keys, more than the limit of {MAX_METADATA_KEYS}",
                metadata.len()
            ),
        ));
    }
    let mut keys: Vec<&String> = metadata.keys().collect();
    keys.sort_unstable();
    for key in keys {
        if key.len() > MAX_METADATA_KEY_BYTES {
            let shown: String = key.chars().take(32).collect();
            return Err(ConfigError::new(
                &format!("{shown}..."),
                format!(
                    "the key is {} bytes long, more than the limit of {MAX_METADATA_KEY_BYTES}",
                    key.len()
                ),
            ));
        }
        let value = &metadata[key];
        if value.len() > MAX_METADATA_VALUE_BYTES {
            return Err(ConfigError::new(
                key,
                format!(
                    "the value is {} bytes long, more than the limit of {MAX_METADATA_VALUE_BYTES}",
                    value.len()
                ),
            ));
        }
    }
    Ok(())
}

impl ScalerConfig {
    /// Validates a trigger's metadata map. The first problem found is returned: unknown keys
    /// first (alphabetically), then each key's value in [`KEYS`] order (read by the key's
    /// entry, so every key in the table is read), then the checks across keys: the vLLM
    /// target keys, the DCGM target keys, min against max replicas, KV warning against
    /// critical.
    pub fn from_metadata(metadata: &HashMap<String, String>) -> Result<Self, ConfigError> {
        check_sizes(metadata)?;
        keys::check_unknown(metadata)?;
        let mut draft = keys::Draft::default();
        for key in KEYS {
            if let Some(value) = metadata.get(key.key) {
                (key.read)(&mut draft, value).map_err(|m| ConfigError::new(key.key, m))?;
            }
        }
        let keys::Draft {
            targets: target_keys,
            model,
            scrape_interval,
            mut policy,
        } = draft;
        let targets = targets::vllm_targets(&target_keys)?;
        let dcgm_targets = targets::dcgm_targets(&target_keys)?;

        // Blame the key the user wrote (the later one when both are set).
        let raw = |key: &str| metadata.get(key).map_or("", String::as_str);
        let (min_replicas, max_replicas) = (policy.min_replicas, policy.max_replicas);
        if min_replicas > max_replicas {
            return Err(if metadata.contains_key("maxReplicas") {
                ConfigError::new(
                    "maxReplicas",
                    format!(
                        "expected a whole number >= minReplicas ({min_replicas}), got {:?}",
                        raw("maxReplicas")
                    ),
                )
            } else {
                ConfigError::new(
                    "minReplicas",
                    format!(
                        "expected a whole number <= maxReplicas ({max_replicas}, the default; set maxReplicas too), got {:?}",
                        raw("minReplicas")
                    ),
                )
            });
        }
        let (kv_cache_warning, kv_cache_critical) =
            (policy.kv_cache_warning, policy.kv_cache_critical);
        if kv_cache_warning >= kv_cache_critical {
            return Err(if metadata.contains_key("kvCacheCritical") {
                ConfigError::new(
                    "kvCacheCritical",
                    format!(
                        "expected a fraction above kvCacheWarning ({kv_cache_warning}), got {:?}",
                        raw("kvCacheCritical")
                    ),
                )
            } else {
                ConfigError::new(
                    "kvCacheWarning",
                    format!(
                        "expected a fraction below kvCacheCritical ({kv_cache_critical}), got {:?}",
                        raw("kvCacheWarning")
                    ),
                )
            });
        }

        if metadata.contains_key("rateWindowSeconds") && policy.rate_window < scrape_interval * 3 {
            return Err(ConfigError::new(
                "rateWindowSeconds",
                format!(
                    "expected at least 3 scrape intervals ({} s with scrapeIntervalSeconds {}), got {:?}",
                    (scrape_interval * 3).as_secs_f64(),
                    scrape_interval.as_secs_f64(),
                    raw("rateWindowSeconds")
                ),
            ));
        }
        policy.gpu_memory_required = dcgm_targets.is_some();
        Ok(Self {
            targets,
            dcgm_targets,
            model,
            scrape_interval,
            policy,
        })
    }
}
