//! The scaling policy: scale-out rules, scale-in hysteresis, rate limits, start-up grace and
//! the HPA tolerance band. Pure: [`Policy::decide`] takes `now`, the signals and the remembered
//! [`PolicyState`]; no clock reads, no I/O.
//!
//! Owns: turning [`FleetSignals`] plus remembered state into a [`Decision`] with a [`Reason`]
//! and an explanation carrying the numbers. Does not own: where signals come from, how the
//! answer reaches KEDA, or how the metadata is parsed (see [`crate::config`]).
//!
//! # The rules
//!
//! The policy keeps a *level*: the replica count it is asking for. Each decision moves the level
//! or holds it:
//!
//! - **Scale out** when any trigger fires: queue depth per ready replica > N (demand:
//!   `ceil(queue / N)` replicas, the same number the HPA computes for an `AverageValue` target
//!   of N on the summed queue); P95 e2e latency, TTFT or ITL over its SLO (an SLO that is off,
//!   `None`, is no trigger and not part of the calm check); KV-cache usage (the fullest pod)
//!   over critical for 30 s; preemptions per second per ready replica over the threshold. Latency, KV and preemption triggers are guardrails: each asks for one step
//!   (`scaleUpPods`) above the level or the ready replicas, whichever is more. A breach must
//!   hold continuously for `scaleUpStabilizationSeconds` before the level moves; the target
//!   then rises by at most `scaleUpPods` (counted from the same base) per
//!   `scaleUpPeriodSeconds` (sliding window) and never above max.
//! - **Capacity on the way**: while the level is above the ready replicas and the shortfall is
//!   younger than `startupGraceSeconds`, guardrails do not stack another step (the queue
//!   demand, an absolute number, still applies).
//! - **Scale in** only when calm: queue 0, every P95 below half its SLO (undefined = calm; an
//!   SLO that is off is not checked), KV usage below warning, GPU memory below 95 % (when DCGM
//!   is configured) and no trigger. Calm must hold for `scaleDownStabilizationSeconds`; then
//!   the level drops by at most `scaleDownPods` per `scaleDownPeriodSeconds`. Any non-calm
//!   sample restarts the calm clock; so does a sample with no ready replica. A fresh [`PolicyState`] (a restart) starts the calm clock at
//!   its first decision, so a restart never scales in during its first calm period.
//! - **Unknown pods are not calm**: a known target that gave no usable, current data this round
//!   (`pods_total > pods_healthy`: failed, invalid or stale) fails the calm check, so a partial
//!   view never scales in and restarts the calm clock; the triggers still read the pods that
//!   answer, so scale-out still happens.
//! - **Restart floor**: told the scale target's current replicas
//!   ([`PolicyState::set_current_replicas`]), the level is never below them until this state has
//!   seen calm hold for a full `scaleDownStabilizationSeconds`; the explanation says so with the
//!   numbers.
//! - **HPA tolerance**: the HPA ignores a value within `hpaTolerance` of its current replicas.
//!   A scale-up is widened to the smallest step the HPA acts on (or held, reason
//!   [`Reason::HoldTolerance`], when max forbids it); a scale-in step inside the band is still
//!   taken but reported as [`Reason::HoldTolerance`], so the next step crosses the band.
//! - **Advisory** mode runs the same rules but returns the observed ready replicas.
//!
//! GPU utilisation is never an input.

mod decide;
mod explain;
mod hpa;
pub mod proactive;
mod rules;

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

use crate::signals::FleetSignals;
pub use hpa::{hpa_would_act, smallest_acted_scale_up, within_hpa_tolerance};

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

/// Policy settings (from scaler metadata, see [`crate::config`]). [`Default`] gives the
/// documented defaults (the source guide's KEDA example).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyConfig {
    /// Lowest replica target (`minReplicas`, >= 1).
    pub min_replicas: u32,
    /// Highest replica target (`maxReplicas`).
    pub max_replicas: u32,
    /// N: waiting requests one replica may have before scaling out (`queueDepthPerReplica`).
    pub queue_depth_per_replica: f64,
    /// P95 end-to-end latency SLO in seconds (`latencySloSeconds`). `None` is off: neither a
    /// scale-out trigger nor part of the calm check (so for the TTFT and ITL SLOs).
    pub e2e_latency_slo_seconds: Option<f64>,
    /// P95 time-to-first-token SLO in seconds (`ttftSloSeconds`); `None` is off.
    pub ttft_slo_seconds: Option<f64>,
    /// P95 inter-token latency SLO in seconds (`itlSloSeconds`); `None` is off.
    pub itl_slo_seconds: Option<f64>,
    /// KV-cache usage (0..1) at or above which the fleet is not calm (`kvCacheWarning`).
    pub kv_cache_warning: f64,
    /// KV-cache usage (0..1) above which, sustained, the fleet scales out (`kvCacheCritical`).
    pub kv_cache_critical: f64,
    /// How long KV usage must stay above critical before it triggers (30 s, the source
    /// guide's `VLLMKVCacheFull` alert).
    #[serde(serialize_with = "ser_secs")]
    pub kv_cache_critical_for: Duration,
    /// Preemptions per second per ready replica above which the fleet scales out
    /// (`preemptionRateThreshold`).
    pub preemptions_per_second_per_replica: f64,
    /// GPU memory used fraction at or above which the fleet is not calm (0.95, the source
    /// guide's `VLLMGPUMemoryCritical`); only read when DCGM signals are present.
    pub gpu_memory_calm_below: f64,
    /// Whether DCGM targets are configured: then unknown GPU memory is not calm (the scaler
    /// never scales in blind).
    pub gpu_memory_required: bool,
    /// Largest scale-up within one scale-up period (`scaleUpPods`).
    pub scale_up_pods: u32,
    /// The scale-up rate-limit window (`scaleUpPeriodSeconds`).
    #[serde(serialize_with = "ser_secs")]
    pub scale_up_period: Duration,
    /// How long a breach must hold before scaling out (`scaleUpStabilizationSeconds`).
    #[serde(serialize_with = "ser_secs")]
    pub scale_up_stabilization: Duration,
    /// Largest scale-in within one scale-down period (`scaleDownPods`).
    pub scale_down_pods: u32,
    /// The scale-in rate-limit window (`scaleDownPeriodSeconds`).
    #[serde(serialize_with = "ser_secs")]
    pub scale_down_period: Duration,
    /// How long calm must hold before scaling in (`scaleDownStabilizationSeconds`).
    #[serde(serialize_with = "ser_secs")]
    pub scale_down_stabilization: Duration,
    /// How long replicas asked for but not ready count as capacity on the way
    /// Window of the request and token rates and the latency quantiles
    /// (`rateWindowSeconds`, default 60 s, Prometheus's `rate(x[1m])`); the proactive policy's
    /// demand growth, stable-fleet and withdrawal windows follow it.
    #[serde(serialize_with = "ser_secs")]
    pub rate_window: Duration,
    /// (`startupGraceSeconds`).
    #[serde(serialize_with = "ser_secs")]
    pub startup_grace: Duration,
    /// The HPA's tolerance (`hpaTolerance`, Kubernetes default 0.1).
    pub hpa_tolerance: f64,
    /// Whether the decided target is returned (`mode`).
    pub mode: Mode,
    /// `policy`: `None` runs the guide's rules alone; `Some` the proactive policy
    /// ([`proactive`]) with the guide's rules as its backstop.
    pub proactive: Option<proactive::ProactiveConfig>,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            min_replicas: 1,
            max_replicas: 5,
            queue_depth_per_replica: 25.0,
            // Tuned on the simulator (EVALUATION.md): a 5 s end-to-end SLO keeps a fleet with
            // long generations scaling out for nothing (e2e grows with output length), so the
            // default end-to-end SLO is only a runaway guard and TTFT and ITL carry the SLO.
            e2e_latency_slo_seconds: Some(60.0),
            ttft_slo_seconds: Some(2.0),
            itl_slo_seconds: Some(0.07),
            kv_cache_warning: 0.80,
            kv_cache_critical: 0.95,
            kv_cache_critical_for: Duration::from_secs(30),
            preemptions_per_second_per_replica: 5.0,
            gpu_memory_calm_below: 0.95,
            gpu_memory_required: false,
            scale_up_pods: 2,
            scale_up_period: Duration::from_secs(60),
            scale_up_stabilization: Duration::from_secs(30),
            scale_down_pods: 1,
            scale_down_period: Duration::from_secs(120),
            scale_down_stabilization: Duration::from_secs(300),
            startup_grace: Duration::from_secs(600),
            rate_window: Duration::from_secs(60),
            hpa_tolerance: 0.1,
            mode: Mode::Active,
            proactive: Some(proactive::ProactiveConfig::default()),
        }
    }
}

fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Why a decision came out as it did. Serialized snake_case; [`Reason::as_str`] gives the same
/// text (used as the `reason` label of `vllm_keda_scaler_decisions_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Scaled out: queue depth per ready replica over `queueDepthPerReplica`.
    QueueDepth,
    /// Scaled out: P95 end-to-end latency over `latencySloSeconds`.
    E2eLatencySlo,
    /// Scaled out: P95 time to first token over `ttftSloSeconds`.
    TtftSlo,
    /// Scaled out: P95 inter-token latency over `itlSloSeconds`.
    ItlSlo,
    /// Scaled out: KV-cache usage over `kvCacheCritical` for 30 s.
    KvCacheCritical,
    /// Scaled out: preemptions per ready replica over `preemptionRateThreshold`.
    PreemptionRate,
    /// Scaled in: calm held for the calm period.
    ScaleInCalm,
    /// Load within bounds: neither a breach nor calm.
    Hold,
    /// Calm, but not yet for the calm period (`scaleDownStabilizationSeconds`).
    HoldCalmPending,
    /// A breach, but not yet for `scaleUpStabilizationSeconds` (or KV not yet for 30 s).
    HoldStabilizing,
    /// A step is due but the rate limit's budget for this period is spent.
    HoldRateLimited,
    /// Guardrails hold: replicas asked for are still starting (within `startupGraceSeconds`).
    HoldStartingUp,
    /// The step is inside the HPA's tolerance band: a scale-up that max forbids widening
    /// (level held), or a scale-in step the HPA will not act on yet (step taken).
    HoldTolerance,
    /// A trigger fires but the level is already at `maxReplicas`.
    AtMax,
    /// Calm, and the level is already at `minReplicas`.
    AtMin,
    /// No ready replica answered: the level is held and both clocks restart.
    NoData,
}

impl Reason {
    /// Every variant, in declaration order.
    pub const ALL: [Reason; 16] = [
        Reason::QueueDepth,
        Reason::E2eLatencySlo,
        Reason::TtftSlo,
        Reason::ItlSlo,
        Reason::KvCacheCritical,
        Reason::PreemptionRate,
        Reason::ScaleInCalm,
        Reason::Hold,
        Reason::HoldCalmPending,
        Reason::HoldStabilizing,
        Reason::HoldRateLimited,
        Reason::HoldStartingUp,
        Reason::HoldTolerance,
        Reason::AtMax,
        Reason::AtMin,
        Reason::NoData,
    ];

    /// The snake_case code (same as the serde form).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::QueueDepth => "queue_depth",
            Reason::E2eLatencySlo => "e2e_latency_slo",
            Reason::TtftSlo => "ttft_slo",
            Reason::ItlSlo => "itl_slo",
            Reason::KvCacheCritical => "kv_cache_critical",
            Reason::PreemptionRate => "preemption_rate",
            Reason::ScaleInCalm => "scale_in_calm",
            Reason::Hold => "hold",
            Reason::HoldCalmPending => "hold_calm_pending",
            Reason::HoldStabilizing => "hold_stabilizing",
            Reason::HoldRateLimited => "hold_rate_limited",
            Reason::HoldStartingUp => "hold_starting_up",
            Reason::HoldTolerance => "hold_tolerance",
            Reason::AtMax => "at_max",
            Reason::AtMin => "at_min",
            Reason::NoData => "no_data",
        }
    }

    /// Whether this reason is a scale-out trigger.
    pub fn is_scale_out(self) -> bool {
        matches!(
            self,
            Reason::QueueDepth
                | Reason::E2eLatencySlo
                | Reason::TtftSlo
                | Reason::ItlSlo
                | Reason::KvCacheCritical
                | Reason::PreemptionRate
        )
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One decision and its explanation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// When decided (time since the caller's origin).
    #[serde(skip)]
    pub at: Duration,
    /// The replica target to return to KEDA (in advisory mode, the observed ready count).
    pub target_replicas: u32,
    /// What the policy decided (its level), whatever the mode.
    pub desired_replicas: u32,
    /// Ready replicas seen (`pods_healthy`).
    pub ready_replicas: u32,
    /// Whether there is work (drives KEDA's 0 <-> 1): waiting or running requests, or
    /// requests finished within the window.
    pub active: bool,
    /// The mode the decision was made in.
    pub mode: Mode,
    /// The reason code.
    pub reason: Reason,
    /// The numbers that drove it, for people ("queue 140 over 5 ready replicas = 28 per
    /// replica > 25 per replica; P95 e2e 7.2 s > SLO 5 s; target 5 -> 7").
    pub explanation: String,
}

/// Where [`CurrentReplicas::spec`] comes from, for the explanation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicaSource {
    /// The scale target's `/scale` subresource (`spec.replicas`), read through the Kubernetes
    /// API.
    ScaleSubresource,
    /// The pods the caller observes (discovered targets), when it may not read `/scale`.
    ObservedPods,
}

impl ReplicaSource {
    fn describe(self) -> &'static str {
        match self {
            ReplicaSource::ScaleSubresource => "the scale target asks for",
            ReplicaSource::ObservedPods => "pods observed",
        }
    }
}

/// The scale target's replicas as the caller knows them now: a floor for the answer until the
/// scaler has observed a full calm period itself (restart safety).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CurrentReplicas {
    /// Replicas the scale target asks for (`/scale` `spec.replicas`), or the pods observed.
    pub spec: u32,
    /// Of those, the ready ones, when the caller knows (else the targets that answer are
    /// taken as the ready ones). `spec - ready` are starting: capacity on the way.
    pub ready: Option<u32>,
    /// Where `spec` comes from.
    pub source: ReplicaSource,
}

/// What the policy remembers between decisions. A fresh (default) state is a restart: the
/// level starts at the replicas seen and the calm clock starts at the first decision.
#[derive(Debug, Clone, Default)]
pub struct PolicyState {
    /// The replica count being asked for.
    level: Option<u32>,
    /// When the current continuous breach began.
    breach_since: Option<Duration>,
    /// When KV usage went above critical (continuously).
    kv_critical_since: Option<Duration>,
    /// When the current continuous calm began.
    calm_since: Option<Duration>,
    /// When the level last rose above the ready replicas, or ready fell below the level.
    shortfall_since: Option<Duration>,
    /// Scale-up steps within the scale-up period: (when, pods added).
    up_steps: VecDeque<(Duration, u32)>,
    /// Scale-in steps within the scale-down period: (when, pods removed).
    down_steps: VecDeque<(Duration, u32)>,
    /// The last activity seen (held while no replica answers).
    last_active: bool,
    /// The scale target's replicas as the caller last said (the restart floor).
    current: Option<CurrentReplicas>,
    /// Whether this state has seen calm hold for a full calm period: until then the level
    /// never falls below `current.spec`.
    calm_period_seen: bool,
}

impl PolicyState {
    /// A state that continues from a previous target (e.g. the target returned before a
    /// restart, or the HPA's current replicas): the level starts there instead of at the
    /// replicas seen. The calm clock still starts at the first decision.
    pub fn with_previous_target(target: u32) -> Self {
        Self {
            level: Some(target),
            ..Self::default()
        }
    }

    /// Sets (or, with `None`, forgets) the scale target's current replicas: until a full calm
    /// period has been observed, the level is never below them.
    pub fn set_current_replicas(&mut self, current: Option<CurrentReplicas>) {
        self.current = current;
    }

    /// Whether a full calm period has been observed since this state began (after which the
    /// restart floor no longer applies).
    pub fn calm_period_seen(&self) -> bool {
        self.calm_period_seen
    }

    /// The replica count the policy is asking for, once it has decided.
    pub fn level(&self) -> Option<u32> {
        self.level
    }

    /// When the current calm period began, if calm.
    pub fn calm_since(&self) -> Option<Duration> {
        self.calm_since
    }

    /// When the current breach began, if any.
    pub fn breach_since(&self) -> Option<Duration> {
        self.breach_since
    }
}

/// The policy for one ScaledObject.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Its settings.
    pub config: PolicyConfig,
}

impl Policy {
    /// A policy with these settings.
    pub fn new(config: PolicyConfig) -> Self {
        Self { config }
    }

    /// Decides at `now` from `signals`, updating `state`. Never panics; non-finite or
    /// negative signal values are treated as absent (quantiles, KV, rates) or zero (counts).
    pub fn decide(
        &self,
        now: Duration,
        signals: &FleetSignals,
        state: &mut PolicyState,
    ) -> Decision {
        decide::decide(&self.config, now, signals, state)
    }
}
