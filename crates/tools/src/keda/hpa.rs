//! The Kubernetes HorizontalPodAutoscaler's replica computation, as a pure model.
//!
//! Owns: the `AverageValue` proposal with its tolerance band, the stabilisation windows, and
//! the behaviour rate limits (`policies`, `selectPolicy`), computed the way the HPA controller
//! does on each sync. Does not own: where metric values come from (KEDA, Prometheus) or when
//! syncs happen. Time is passed in.

use std::time::Duration;

use vllm_keda_core::policy::within_hpa_tolerance;

/// One scaling policy: at most `value` pods (or percent) per `period`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RatePolicy {
    /// At most this many pods per period.
    Pods {
        /// Pods.
        value: u32,
        /// Period.
        period: Duration,
    },
    /// At most this percentage of the replicas at the period's start per period.
    Percent {
        /// Percent.
        value: u32,
        /// Period.
        period: Duration,
    },
}

impl RatePolicy {
    fn period(&self) -> Duration {
        match self {
            Self::Pods { period, .. } | Self::Percent { period, .. } => *period,
        }
    }
}

/// Which policy wins when several allow different changes (`selectPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectPolicy {
    /// The policy that allows the largest change (the default).
    Max,
    /// The policy that allows the smallest change.
    Min,
    /// No scaling in this direction.
    Disabled,
}

/// One direction of `spec.behavior`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalingRules {
    /// `stabilizationWindowSeconds`.
    pub stabilization: Duration,
    /// `policies`.
    pub policies: Vec<RatePolicy>,
    /// `selectPolicy`.
    pub select: SelectPolicy,
    /// Per-direction tolerance (`behavior.*.tolerance`, Kubernetes 1.33+), 0.1 by default.
    pub tolerance: f64,
}

/// `spec.behavior` plus the replica bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct HpaSpec {
    /// `minReplicas`.
    pub min_replicas: u32,
    /// `maxReplicas`.
    pub max_replicas: u32,
    /// Scale-up rules.
    pub scale_up: ScalingRules,
    /// Scale-down rules.
    pub scale_down: ScalingRules,
}

impl HpaSpec {
    /// The HPA defaults: scale up without stabilisation by max(+4 pods, +100 %) per 15 s;
    /// scale down after 300 s stabilisation by up to 100 % per 15 s; tolerance 0.1.
    pub fn kubernetes_default(min_replicas: u32, max_replicas: u32) -> Self {
        let fifteen = Duration::from_secs(15);
        Self {
            min_replicas,
            max_replicas,
            scale_up: ScalingRules {
                stabilization: Duration::ZERO,
                policies: vec![
                    RatePolicy::Pods {
                        value: 4,
                        period: fifteen,
                    },
                    RatePolicy::Percent {
                        value: 100,
                        period: fifteen,
                    },
                ],
                select: SelectPolicy::Max,
                tolerance: 0.1,
            },
            scale_down: ScalingRules {
                stabilization: Duration::from_secs(300),
                policies: vec![RatePolicy::Percent {
                    value: 100,
                    period: fifteen,
                }],
                select: SelectPolicy::Max,
                tolerance: 0.1,
            },
        }
    }
}

/// One metric as the HPA sees it: an external metric with an `AverageValue` target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AverageValueMetric {
    /// The metric's value (KEDA sums the values it gets).
    pub value: f64,
    /// The `AverageValue` target (> 0).
    pub target: f64,
}

/// The replica count one `AverageValue` metric proposes: `ceil(value / target)`, unless the
/// usage ratio `value / (target x current)` is within the tolerance band (the core's
/// [`within_hpa_tolerance`], the band the policy plans its steps against), then `current`.
pub fn average_value_proposal(
    metric: AverageValueMetric,
    current: u32,
    tolerance_down: f64,
    tolerance_up: f64,
) -> u32 {
    let value = if metric.value.is_finite() && metric.value > 0.0 {
        metric.value
    } else {
        0.0
    };
    if current > 0 {
        let ratio = value / (metric.target * f64::from(current));
        if within_hpa_tolerance(ratio, tolerance_down, tolerance_up) {
            return current;
        }
    }
    let proposal = (value / metric.target).ceil();
    if proposal >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        proposal as u32
    }
}

#[derive(Debug, Clone, Copy)]
struct Recommendation {
    at: Duration,
    replicas: u32,
}

#[derive(Debug, Clone, Copy)]
struct ScaleEvent {
    at: Duration,
    change: u32,
}

/// The HPA controller's memory for one HPA, and its sync step.
#[derive(Debug, Clone)]
pub struct Hpa {
    spec: HpaSpec,
    recommendations: Vec<Recommendation>,
    scale_up_events: Vec<ScaleEvent>,
    scale_down_events: Vec<ScaleEvent>,
}

impl Hpa {
    /// An HPA with this spec and no history.
    pub fn new(spec: HpaSpec) -> Self {
        Self {
            spec,
            recommendations: Vec::new(),
            scale_up_events: Vec::new(),
            scale_down_events: Vec::new(),
        }
    }

    /// An HPA that has been running with `replicas` as its recommendation up to `now`, as an
    /// HPA in place before a scenario starts would have.
    pub fn with_steady_history(spec: HpaSpec, now: Duration, replicas: u32) -> Self {
        let mut hpa = Self::new(spec);
        hpa.recommendations
            .push(Recommendation { at: now, replicas });
        hpa
    }

    /// The spec.
    pub fn spec(&self) -> &HpaSpec {
        &self.spec
    }

    /// One sync at `now`: the replica count the HPA sets given the metrics (the HPA takes the
    /// largest proposal) and the current replica count. Records the change as a scale event.
    pub fn sync(&mut self, now: Duration, metrics: &[AverageValueMetric], current: u32) -> u32 {
        let proposal = metrics
            .iter()
            .map(|m| {
                average_value_proposal(
                    *m,
                    current,
                    self.spec.scale_down.tolerance,
                    self.spec.scale_up.tolerance,
                )
            })
            .max()
            .unwrap_or(current);
        let stabilized = self.stabilize(now, proposal, current);
        let desired = self.limit_rate(now, stabilized, current);
        if desired > current {
            self.scale_up_events.push(ScaleEvent {
                at: now,
                change: desired - current,
            });
        } else if desired < current {
            self.scale_down_events.push(ScaleEvent {
                at: now,
                change: current - desired,
            });
        }
        desired
    }

    /// The controller's stabilisation: the lowest recommendation within the scale-up window
    /// and the highest within the scale-down window bound the current count (windows hold
    /// recommendations strictly newer than their cutoff, as the controller's do).
    fn stabilize(&mut self, now: Duration, proposal: u32, current: u32) -> u32 {
        let up_cutoff = now.checked_sub(self.spec.scale_up.stabilization);
        let down_cutoff = now.checked_sub(self.spec.scale_down.stabilization);
        let newer = |at: Duration, cutoff: Option<Duration>| cutoff.is_none_or(|c| at > c);
        let mut up = proposal;
        let mut down = proposal;
        for r in &self.recommendations {
            if newer(r.at, up_cutoff) {
                up = up.min(r.replicas);
            }
            if newer(r.at, down_cutoff) {
                down = down.max(r.replicas);
            }
        }
        self.recommendations
            .retain(|r| newer(r.at, up_cutoff) || newer(r.at, down_cutoff));
        self.recommendations.push(Recommendation {
            at: now,
            replicas: proposal,
        });
        current.max(up).min(down)
    }

    fn limit_rate(&mut self, now: Duration, desired: u32, current: u32) -> u32 {
        let longest = self
            .spec
            .scale_up
            .policies
            .iter()
            .chain(&self.spec.scale_down.policies)
            .map(RatePolicy::period)
            .max()
            .unwrap_or_default();
        self.scale_up_events
            .retain(|e| now.saturating_sub(e.at) <= longest);
        self.scale_down_events
            .retain(|e| now.saturating_sub(e.at) <= longest);
        let (min, max) = (self.spec.min_replicas, self.spec.max_replicas);
        if desired > current {
            let limit = self.scale_up_limit(now, current).max(current);
            desired.min(limit).min(max).max(min)
        } else if desired < current {
            let limit = self.scale_down_limit(now, current).min(current);
            desired.max(limit).max(min).min(max)
        } else {
            desired.clamp(min, max)
        }
    }

    fn change_in_period(events: &[ScaleEvent], now: Duration, period: Duration) -> i64 {
        events
            .iter()
            .filter(|e| now.saturating_sub(e.at) < period)
            .map(|e| i64::from(e.change))
            .sum()
    }

    fn scale_up_limit(&self, now: Duration, current: u32) -> u32 {
        let rules = &self.spec.scale_up;
        if rules.select == SelectPolicy::Disabled || rules.policies.is_empty() {
            return current;
        }
        let proposals = rules.policies.iter().map(|p| {
            let added = Self::change_in_period(&self.scale_up_events, now, p.period());
            let removed = Self::change_in_period(&self.scale_down_events, now, p.period());
            let start = i64::from(current) - added + removed;
            match p {
                RatePolicy::Pods { value, .. } => start + i64::from(*value),
                RatePolicy::Percent { value, .. } => {
                    (start as f64 * (1.0 + f64::from(*value) / 100.0)).ceil() as i64
                }
            }
        });
        let chosen = match rules.select {
            SelectPolicy::Min => proposals.min(),
            _ => proposals.max(),
        };
        chosen
            .unwrap_or(i64::from(current))
            .clamp(0, i64::from(u32::MAX)) as u32
    }

    fn scale_down_limit(&self, now: Duration, current: u32) -> u32 {
        let rules = &self.spec.scale_down;
        if rules.select == SelectPolicy::Disabled || rules.policies.is_empty() {
            return current;
        }
        let proposals = rules.policies.iter().map(|p| {
            let added = Self::change_in_period(&self.scale_up_events, now, p.period());
            let removed = Self::change_in_period(&self.scale_down_events, now, p.period());
            let start = i64::from(current) + removed - added;
            match p {
                RatePolicy::Pods { value, .. } => start - i64::from(*value),
                RatePolicy::Percent { value, .. } => {
                    (start as f64 * (1.0 - f64::from(*value) / 100.0)) as i64
                }
            }
        });
        // `Max` selects the policy allowing the largest change: the lowest replica count.
        let chosen = match rules.select {
            SelectPolicy::Min => proposals.max(),
            _ => proposals.min(),
        };
        chosen
            .unwrap_or(i64::from(current))
            .clamp(0, i64::from(u32::MAX)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn guide_spec() -> HpaSpec {
        // The source guide's KEDA example: +2 pods per 60 s after 30 s stabilisation,
        // -1 pod per 120 s after 300 s stabilisation.
        HpaSpec {
            min_replicas: 1,
            max_replicas: 5,
            scale_up: ScalingRules {
                stabilization: secs(30),
                policies: vec![RatePolicy::Pods {
                    value: 2,
                    period: secs(60),
                }],
                select: SelectPolicy::Max,
                tolerance: 0.1,
            },
            scale_down: ScalingRules {
                stabilization: secs(300),
                policies: vec![RatePolicy::Pods {
                    value: 1,
                    period: secs(120),
                }],
                select: SelectPolicy::Max,
                tolerance: 0.1,
            },
        }
    }

    #[test]
    fn average_value_is_ceil_of_sum_over_target_outside_tolerance() {
        let m = |value| AverageValueMetric { value, target: 1.0 };
        assert_eq!(average_value_proposal(m(7.0), 3, 0.1, 0.1), 7);
        assert_eq!(
            average_value_proposal(m(3.2), 3, 0.1, 0.1),
            3,
            "ratio 1.067 is inside"
        );
        // At 10 replicas a +1 step is swallowed: 11 / 10 = 1.1 is inside the inclusive band.
        assert_eq!(average_value_proposal(m(11.0), 10, 0.1, 0.1), 10);
        assert_eq!(average_value_proposal(m(9.0), 10, 0.1, 0.1), 10);
        assert_eq!(average_value_proposal(m(12.0), 10, 0.1, 0.1), 12);
        assert_eq!(average_value_proposal(m(11.0), 10, 0.1, 0.05), 11);
        let queue = AverageValueMetric {
            value: 140.0,
            target: 25.0,
        };
        assert_eq!(average_value_proposal(queue, 2, 0.1, 0.1), 6);
        let nan = AverageValueMetric {
            value: f64::NAN,
            target: 5.0,
        };
        assert_eq!(average_value_proposal(nan, 2, 0.1, 0.1), 0);
    }

    #[test]
    fn scale_up_waits_for_stabilization_and_is_rate_limited() {
        let mut hpa = Hpa::new(guide_spec());
        let high = [AverageValueMetric {
            value: 200.0,
            target: 25.0,
        }];
        let low = [AverageValueMetric {
            value: 0.0,
            target: 25.0,
        }];
        // Calm history first so the 30 s window holds low recommendations.
        assert_eq!(hpa.sync(secs(0), &low, 1), 1);
        assert_eq!(hpa.sync(secs(15), &low, 1), 1);
        // Demand of 8 appears at 30 s: the window (0, 30] still holds the 15 s recommendation.
        assert_eq!(hpa.sync(secs(30), &high, 1), 1);
        // At 45 s the window (15, 45] holds only 8s: +2 per 60 s, so 3.
        assert_eq!(hpa.sync(secs(45), &high, 1), 3);
        // Within the same 60 s period no more pods.
        assert_eq!(hpa.sync(secs(60), &high, 3), 3);
        assert_eq!(hpa.sync(secs(90), &high, 3), 3);
        // The event at 45 s leaves the period at 105 s: +2 again, clamped at max 5 later.
        assert_eq!(hpa.sync(secs(105), &high, 3), 5);
        assert_eq!(hpa.sync(secs(180), &high, 5), 5);
    }

    #[test]
    fn scale_down_holds_the_max_over_300_s_then_steps_one_per_120_s() {
        let mut hpa = Hpa::new(guide_spec());
        let demand = |value| [AverageValueMetric { value, target: 1.0 }];
        assert_eq!(hpa.sync(secs(0), &demand(5.0), 5), 5);
        let mut t = 15;
        while t < 300 {
            assert_eq!(hpa.sync(secs(t), &demand(1.0), 5), 5, "at {t} s");
            t += 15;
        }
        // At 300 s the 5 recorded at 0 s has left the window (0, 300]: one pod down.
        assert_eq!(hpa.sync(secs(300), &demand(1.0), 5), 4);
        // -1 per 120 s.
        assert_eq!(hpa.sync(secs(315), &demand(1.0), 4), 4);
        assert_eq!(hpa.sync(secs(405), &demand(1.0), 4), 4);
        assert_eq!(hpa.sync(secs(420), &demand(1.0), 4), 3);
    }

    #[test]
    fn default_behaviour_doubles_or_adds_four_per_15_s() {
        let mut hpa = Hpa::new(HpaSpec::kubernetes_default(1, 100));
        let demand = [AverageValueMetric {
            value: 50.0,
            target: 1.0,
        }];
        assert_eq!(hpa.sync(secs(0), &demand, 1), 5, "max(1 + 4, 1 x 2)");
        assert_eq!(hpa.sync(secs(15), &demand, 5), 10);
        assert_eq!(hpa.sync(secs(30), &demand, 10), 20);
        assert_eq!(hpa.sync(secs(45), &demand, 20), 40);
        assert_eq!(hpa.sync(secs(60), &demand, 40), 50);
    }
}
