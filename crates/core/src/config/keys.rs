//! The metadata keys, each declared once: its name, its default and meaning as documented
//! (the README's and docs/policy.md's tables are checked against them), and the reader that
//! parses its value into the field it sets. [`super::ScalerConfig::from_metadata`] reads every
//! key through [`KEYS`], so a key cannot be documented without being read. Also the
//! unknown-key check with a closest-key suggestion.

use std::collections::HashMap;
use std::time::Duration;

use super::targets::{self, TargetKeys};
use super::{ConfigError, parse};
use crate::policy::PolicyConfig;

/// The scrape interval when `scrapeIntervalSeconds` is not set.
pub(super) const DEFAULT_SCRAPE_INTERVAL: Duration = Duration::from_secs(2);

/// A configuration being read: the defaults, with each key present overwriting its field.
#[derive(Debug, Clone)]
pub(super) struct Draft {
    /// The target keys, combined once all are read.
    pub(super) targets: TargetKeys,
    /// `model`.
    pub(super) model: Option<String>,
    /// `scrapeIntervalSeconds`.
    pub(super) scrape_interval: Duration,
    /// Every policy key.
    pub(super) policy: PolicyConfig,
}

impl Default for Draft {
    fn default() -> Self {
        Self {
            targets: TargetKeys::default(),
            model: None,
            scrape_interval: DEFAULT_SCRAPE_INTERVAL,
            policy: PolicyConfig::default(),
        }
    }
}

/// Reads one value into its field of the draft, or says what was expected (the caller names
/// the key).
pub(super) type Read = fn(&mut Draft, &str) -> Result<(), String>;

/// One metadata key: its name, default, meaning, and how its value is read.
#[derive(Debug, Clone, Copy)]
pub struct MetadataKey {
    /// The key as written in the trigger's `metadata`.
    pub key: &'static str,
    /// The default, as documented ("required" or "unset" where there is none).
    pub default: &'static str,
    /// What it means.
    pub meaning: &'static str,
    /// Parses a value and sets the field it fills.
    pub(super) read: Read,
}

/// Every key the scaler reads, in validation order (and the docs' order).
pub const KEYS: &[MetadataKey] = &[
    MetadataKey {
        key: "endpoints",
        default: "required unless `service`",
        meaning: "comma-separated vLLM metrics URLs (`http://10.0.0.7:8000/metrics`) or `host:port` entries (`metricsPath` appended)",
        read: |d, v| {
            d.targets.endpoints = Some(targets::endpoints(v)?);
            Ok(())
        },
    },
    MetadataKey {
        key: "service",
        default: "required unless `endpoints`",
        meaning: "DNS name of a headless Service (`name` or `name:port`), every address re-resolved each scrape",
        read: |d, v| {
            d.targets.service = Some(targets::service(v)?);
            Ok(())
        },
    },
    MetadataKey {
        key: "port",
        default: "8000",
        meaning: "port of vLLM's `/metrics` with `service`",
        read: |d, v| {
            d.targets.port = Some(targets::port(v)?);
            Ok(())
        },
    },
    MetadataKey {
        key: "metricsPath",
        default: "/metrics",
        meaning: "path of the metrics endpoint for `service` and `host:port` endpoints",
        read: |d, v| {
            d.targets.metrics_path = Some(targets::metrics_path(v)?);
            Ok(())
        },
    },
    MetadataKey {
        key: "model",
        default: "unset (all models)",
        meaning: "only series whose `model_name` label equals this",
        read: |d, v| {
            d.model = Some(parse::model(v)?);
            Ok(())
        },
    },
    MetadataKey {
        key: "queueDepthPerReplica",
        default: "25",
        meaning: "N: waiting requests per ready replica above which to scale out; demand is ceil(queue / N) replicas",
        read: |d, v| {
            d.policy.queue_depth_per_replica = parse::positive(v, "a positive number")?;
            Ok(())
        },
    },
    MetadataKey {
        key: "latencySloSeconds",
        default: "60",
        meaning: "P95 end-to-end latency SLO in seconds, or `off`; above it scale out, below half of it counts as calm, and `off` takes it out of both. End-to-end latency grows with output length, so the default is only a runaway guard: set it to a real budget only for short, fixed-length outputs (the source guide's 5 s)",
        read: |d, v| {
            d.policy.e2e_latency_slo_seconds = parse::slo(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "ttftSloSeconds",
        default: "2",
        meaning: "P95 time-to-first-token SLO in seconds, or `off`; same rules as latencySloSeconds",
        read: |d, v| {
            d.policy.ttft_slo_seconds = parse::slo(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "itlSloSeconds",
        default: "0.07",
        meaning: "P95 inter-token latency (TPOT) SLO in seconds, or `off`; same rules as latencySloSeconds",
        read: |d, v| {
            d.policy.itl_slo_seconds = parse::slo(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "kvCacheWarning",
        default: "0.80",
        meaning: "KV-cache usage fraction (fullest pod) at or above which the fleet is not calm",
        read: |d, v| {
            d.policy.kv_cache_warning = parse::fraction(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "kvCacheCritical",
        default: "0.95",
        meaning: "KV-cache usage fraction (fullest pod) above which, held for 30 s, to scale out",
        read: |d, v| {
            d.policy.kv_cache_critical = parse::fraction(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "preemptionRateThreshold",
        default: "5",
        meaning: "preemptions per second per ready replica above which to scale out",
        read: |d, v| {
            d.policy.preemptions_per_second_per_replica =
                parse::positive(v, "a positive number of preemptions per second per replica")?;
            Ok(())
        },
    },
    MetadataKey {
        key: "minReplicas",
        default: "1",
        meaning: "lowest replica target (>= 1; scale to zero is KEDA's `minReplicaCount` with IsActive)",
        read: |d, v| {
            d.policy.min_replicas = parse::replicas(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "maxReplicas",
        default: "5",
        meaning: "highest replica target",
        read: |d, v| {
            d.policy.max_replicas = parse::replicas(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "scaleUpPods",
        default: "2",
        meaning: "at most this many replicas added per scale-up period",
        read: |d, v| {
            d.policy.scale_up_pods = parse::pods(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "scaleUpPeriodSeconds",
        default: "60",
        meaning: "the scale-up rate-limit window",
        read: |d, v| {
            d.policy.scale_up_period = parse::seconds_positive(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "scaleUpStabilizationSeconds",
        default: "30",
        meaning: "a breach must hold this long before scaling out",
        read: |d, v| {
            d.policy.scale_up_stabilization = parse::seconds(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "scaleDownPods",
        default: "1",
        meaning: "at most this many replicas removed per scale-down period",
        read: |d, v| {
            d.policy.scale_down_pods = parse::pods(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "scaleDownPeriodSeconds",
        default: "120",
        meaning: "the scale-in rate-limit window",
        read: |d, v| {
            d.policy.scale_down_period = parse::seconds_positive(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "scaleDownStabilizationSeconds",
        default: "300",
        meaning: "calm must hold this long before scaling in; any breach restarts it",
        read: |d, v| {
            d.policy.scale_down_stabilization = parse::seconds(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "startupGraceSeconds",
        default: "600",
        meaning: "replicas asked for but not ready count as capacity on the way this long (guardrails do not stack)",
        read: |d, v| {
            d.policy.startup_grace = parse::seconds(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "scrapeIntervalSeconds",
        default: "2",
        meaning: "how often the scaler scrapes and decides (>= 0.1)",
        read: |d, v| {
            d.scrape_interval = parse::scrape_interval(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "rateWindowSeconds",
        default: "60",
        meaning: "window of the request and token rates and the P95 latencies, like Prometheus's `rate(x[1m])` (at least 3 scrape intervals, at most 180); the proactive policy's demand growth, stable-fleet and withdrawal windows follow it",
        read: |d, v| {
            d.policy.rate_window = parse::rate_window(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "hpaTolerance",
        default: "0.1",
        meaning: "the HPA's tolerance; set it to the HPA's `behavior.scaleUp/scaleDown.tolerance` when you change that",
        read: |d, v| {
            d.policy.hpa_tolerance = parse::tolerance(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "mode",
        default: "active",
        meaning: "`active` returns the decided target; `advisory` returns the observed ready replicas and reports the decision",
        read: |d, v| {
            d.policy.mode = parse::mode(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "policy",
        default: "proactive",
        meaning: "`guide` runs the source guide's reactive rules alone; `proactive` sizes the fleet for the demand forecast over the start-up time at a learned per-replica capacity, with the guide's rules as a backstop. Its settings follow after `;` (`proactive; startup=300; capacity=9.5`); every setting, its values and its default are listed in `docs/policy.md`, \"Proactive policy settings\"",
        read: |d, v| {
            d.policy.proactive = crate::policy::proactive::parse_policy(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "dcgmEndpoints",
        default: "unset",
        meaning: "comma-separated DCGM exporter URLs or `host:port` entries (GPU memory joins the calm check)",
        read: |d, v| {
            d.targets.dcgm_endpoints = Some(targets::endpoints(v)?);
            Ok(())
        },
    },
    MetadataKey {
        key: "dcgmService",
        default: "unset",
        meaning: "DNS name of the DCGM exporter's headless Service (`name` or `name:port`, port 9400)",
        read: |d, v| {
            d.targets.dcgm_service = Some(targets::service(v)?);
            Ok(())
        },
    },
];

/// KEDA's own keys: accepted and ignored.
pub const IGNORED_KEYS: &[&str] = &["scalerAddress", "enableTLS", "unsafeSsl"];

/// The first unknown key (alphabetically), with the closest known key when one is near.
pub(super) fn check_unknown(metadata: &HashMap<String, String>) -> Result<(), ConfigError> {
    let mut unknown: Vec<&str> = metadata
        .keys()
        .map(String::as_str)
        .filter(|k| !KEYS.iter().any(|d| d.key == *k) && !IGNORED_KEYS.contains(k))
        .collect();
    unknown.sort_unstable();
    let Some(key) = unknown.first() else {
        return Ok(());
    };
    let message = match closest(key) {
        Some(known) => format!("unknown key; did you mean \"{known}\"?"),
        None => {
            let all: Vec<&str> = KEYS.iter().map(|d| d.key).collect();
            format!("unknown key; known keys are {}", all.join(", "))
        }
    };
    Err(ConfigError::new(key, message))
}

/// The known key nearest to `key` (case-insensitive edit distance), if near enough: at most
/// a third of the key's length, and at least 2 edits allowed; or the known key that `key`
/// begins (`latencySlo` -> `latencySloSeconds`).
fn closest(key: &str) -> Option<&'static str> {
    let lower = key.to_lowercase();
    let known = KEYS
        .iter()
        .map(|d| d.key)
        .chain(IGNORED_KEYS.iter().copied());
    if lower.len() >= 4 {
        if let Some(k) = known.clone().find(|k| k.to_lowercase().starts_with(&lower)) {
            return Some(k);
        }
    }
    let limit = (key.chars().count() / 3).max(2);
    known
        .map(|k| (edit_distance(&lower, &k.to_lowercase()), k))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, k)| k)
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
        // Deletions at the start go through the first column.
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("xab", "ab"), 1);
    }

    #[test]
    fn suggestions() {
        assert_eq!(
            closest("queueDepthPerReplcia"),
            Some("queueDepthPerReplica")
        );
        assert_eq!(closest("MinReplicas"), Some("minReplicas"));
        assert_eq!(closest("minReplicaCount"), Some("minReplicas"));
        assert_eq!(closest("scaleraddress"), Some("scalerAddress"));
        assert_eq!(closest("completelyDifferent"), None);
    }
}
