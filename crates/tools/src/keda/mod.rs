//! One model of KEDA and the HPA, shared by the simulator (virtual time) and the demo (a real
//! gRPC client of the scaler in real time).
//!
//! Owns: KEDA's conversion of a metric value, the HPA's sync period, the two HPA behaviours the
//! evaluation compares (ours and the source guide's), and the HPA's replica computation
//! ([`hpa`], whose tolerance band is the core's `policy::within_hpa_tolerance`, the code the
//! policy uses to predict the HPA). Does not own: when syncs happen or where values come from.

use std::time::Duration;

pub mod hpa;

use hpa::{HpaSpec, RatePolicy, ScalingRules, SelectPolicy};

/// The HPA controller's default sync period.
pub const HPA_SYNC: Duration = Duration::from_secs(15);

/// KEDA's value conversion: rounded to 3 decimals; negative or NaN become 0.
pub fn keda_value(v: f64) -> f64 {
    if v.is_nan() || v < 0.0 {
        0.0
    } else {
        (v * 1000.0).round() / 1000.0
    }
}

/// The HPA behaviour we ship beside our scaler: no HPA-side stabilisation or tight limits
/// (our policy already stabilises and rate-limits), and a zero scale-down tolerance (the
/// per-HPA `tolerance` of Kubernetes 1.33+) so a one-pod step at 10+ replicas is not swallowed.
pub fn ours_hpa_spec(min_replicas: u32, max_replicas: u32) -> HpaSpec {
    let mut spec = HpaSpec::kubernetes_default(min_replicas, max_replicas);
    spec.scale_down.stabilization = Duration::ZERO;
    spec.scale_down.tolerance = 0.0;
    spec
}

/// The source guide's ScaledObject behaviour.
pub fn guide_hpa_spec(min_replicas: u32, max_replicas: u32) -> HpaSpec {
    HpaSpec {
        min_replicas,
        max_replicas,
        scale_up: ScalingRules {
            stabilization: Duration::from_secs(30),
            policies: vec![RatePolicy::Pods {
                value: 2,
                period: Duration::from_secs(60),
            }],
            select: SelectPolicy::Max,
            tolerance: 0.1,
        },
        scale_down: ScalingRules {
            stabilization: Duration::from_secs(300),
            policies: vec![RatePolicy::Pods {
                value: 1,
                period: Duration::from_secs(120),
            }],
            select: SelectPolicy::Max,
            tolerance: 0.1,
        },
    }
}
