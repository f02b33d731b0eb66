//! A vLLM-like replica (engine model, OpenAI-compatible HTTP, vLLM-shaped /metrics) and a fleet
//! of them on loopback.
//!
//! Owns: the engine model ([`engine`], pure and steppable in virtual or real time), its
//! parameters and calibration ([`config`]), vLLM's counters ([`stats`]) and their rendering
//! ([`metrics`]). Does not own scraping or parsing `/metrics` (see [`crate::scrape`],
//! [`crate::exposition`]) or any scaling decision.

pub mod config;
pub mod engine;
pub mod metrics;
pub mod stats;

pub use config::{
    ConfigError, EngineConfig, MetricsShape, RequestShape, SaturationLimit, SaturationPrediction,
};
pub use engine::{Engine, Event, FinishReason, RejectError, RequestId, RequestRecord, RequestSpec};
pub use metrics::{HttpStats, RenderInfo, py_float, render, render_string};

/// Command-line arguments.
#[derive(Debug, clap::Args)]
pub struct EmulateArgs {}

/// Runs the command.
pub fn run(args: EmulateArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("not implemented yet")
}

/// A small deterministic random number generator (SplitMix64) for fault injection and tests,
/// so a `--seed` reproduces a run exactly.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform number in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An exponentially distributed number with the given rate (mean `1 / rate`).
    pub fn next_exp(&mut self, rate: f64) -> f64 {
        -(1.0 - self.next_f64()).ln() / rate
    }
}
