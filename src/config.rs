//! Scaler metadata contract: a ScaledObject trigger's `metadata` map, validated once into a
//! typed [`ScalerConfig`] that cannot hold a bad value.
//!
//! Owns: key names, defaults, validation and error messages. Does not own: what the policy
//! does with the values (see [`crate::policy`]).
//!
//! INTERFACE STUB: the types and signatures below are the contract other modules build on.

use std::collections::HashMap;
use std::time::Duration;

/// Where the vLLM pods (or DCGM exporters) are.
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Return the decided replica target.
    Active,
    /// Return the observed replica count; report what would have been done.
    Advisory,
}

/// The validated configuration of one ScaledObject.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalerConfig {
    /// vLLM targets.
    pub targets: TargetSource,
    /// Optional DCGM exporter targets.
    pub dcgm_targets: Option<TargetSource>,
    /// Only series whose `model_name` equals this.
    pub model: Option<String>,
    /// How often the background loop scrapes.
    pub scrape_interval: Duration,
    /// The policy's settings.
    pub policy: crate::policy::PolicyConfig,
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

impl ScalerConfig {
    /// Validates a trigger's metadata map.
    pub fn from_metadata(metadata: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let _ = metadata;
        Err(ConfigError {
            key: String::new(),
            message: "not implemented yet".into(),
        })
    }
}
