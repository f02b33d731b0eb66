//! The scaler's pure core: everything that turns scraped `/metrics` bodies into a replica target,
//! with no I/O, no clock and no async runtime.
//!
//! # Data flow
//!
//! 1. [`exposition`]: parse the Prometheus text format (zero-copy).
//! 2. [`signals`]: turn consecutive parsed scrapes into tier 1-3 signals.
//! 3. [`policy`]: the scale-out rules and scale-in hysteresis, configured by [`config`] from a
//!    ScaledObject's scaler metadata.
//!
//! [`Scaler`] runs 1-3 for one ScaledObject: every consumer (the service's control loop, the
//! simulator, the load test's monitor, `check`) hands it the bodies of a scrape round.
//!
//! Time: every stage takes `now` as a [`std::time::Duration`] since an arbitrary origin chosen by
//! the caller (a loop's start in production, zero in the simulator), never a clock read.
//!
//! Does not own: fetching bodies, discovering targets or answering KEDA (the
//! `vllm-keda-service` crate), or emulating and simulating a fleet (`vllm-emulator`,
//! `vllm-keda-tools`).

pub mod catalog;
pub mod config;
pub mod exposition;
pub mod policy;
pub mod rng;
pub mod scaler;
pub mod signals;

pub use scaler::{Scaler, ScrapeRound, Step, TargetFailure};
