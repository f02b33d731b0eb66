//! The scaling policy: scale-out rules, scale-in hysteresis, rate limits, and the HPA
//! tolerance band. Pure: `decide(now, signals, state)`; no clock reads, no I/O.
//!
//! Owns: turning [`FleetSignals`] plus remembered state into a [`Decision`] with a reason.
//! Does not own: where signals come from or how the answer reaches KEDA.
//!
//! INTERFACE STUB: the types and signatures below are the contract other modules build on.

use std::time::Duration;

use serde::Serialize;

use crate::signals::FleetSignals;

/// Policy settings (from scaler metadata, see [`crate::config`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    /// Lowest replica target.
    pub min_replicas: u32,
    /// Highest replica target.
    pub max_replicas: u32,
}

/// Why a decision came out as it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Nothing to change.
    Hold,
}

/// One decision and its explanation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// When decided (time since the caller's origin).
    #[serde(skip)]
    pub at: Duration,
    /// The replica target to return to KEDA (in advisory mode, the observed count).
    pub target_replicas: u32,
    /// What the policy decided, whatever the mode.
    pub desired_replicas: u32,
    /// Whether there is work (drives KEDA's 0 <-> 1).
    pub active: bool,
    /// The reason code.
    pub reason: Reason,
    /// The numbers that drove it, for people ("queue 140 over 5 ready replicas > 25 per replica").
    pub explanation: String,
}

/// What the policy remembers between decisions.
#[derive(Debug, Clone, Default)]
pub struct PolicyState {}

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

    /// Decides at `now` from `signals`, updating `state`.
    pub fn decide(
        &self,
        now: Duration,
        signals: &FleetSignals,
        state: &mut PolicyState,
    ) -> Decision {
        let _ = (signals, state);
        Decision {
            at: now,
            target_replicas: self.config.min_replicas,
            desired_replicas: self.config.min_replicas,
            active: false,
            reason: Reason::Hold,
            explanation: String::new(),
        }
    }
}
