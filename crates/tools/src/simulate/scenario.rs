//! Scenarios the simulator replays: the bundled real traces, the source guide's synthetic step
//! load, or any trace file, reshaped by a rate multiplier and time compression.
//!
//! Owns: naming and loading scenarios. Does not own: reading trace formats
//! ([`crate::trace`]).

use std::path::Path;
use std::time::Duration;

use crate::trace::{self, Trace, TraceRequest};
use vllm_emulator::SplitMix64;

/// The bundled traces (see `data/traces/README.md` for their sources and licences), compiled
/// into the binary so `simulate` needs no files beside it.
const BUNDLED: &[(&str, &str, &str)] = &[
    (
        "azure-code",
        "azure-llm-2023-code.csv",
        include_str!("../../../../data/traces/azure-llm-2023-code.csv"),
    ),
    (
        "azure-conv",
        "azure-llm-2023-conv.csv",
        include_str!("../../../../data/traces/azure-llm-2023-conv.csv"),
    ),
    (
        "mooncake",
        "mooncake-conversation.jsonl",
        include_str!("../../../../data/traces/mooncake-conversation.jsonl"),
    ),
];

/// Names accepted by `--trace` besides file paths.
pub const BUILTIN_NAMES: &[&str] = &["azure-code", "azure-conv", "mooncake", "step"];

/// A named request stream, with the instants where its offered load steps up (for the
/// reaction-time measure).
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Name for reports and file names.
    pub name: String,
    /// Requests sorted by arrival.
    pub requests: Vec<TraceRequest>,
    /// Where the offered load steps up (synthetic step load only).
    pub load_steps: Vec<Duration>,
}

/// The source guide's load test as a scenario: 10, 20, ... 70 RPS for 60 s each with 30 s rests,
/// 512 prompt and 128 output tokens per request.
pub fn step_scenario() -> Scenario {
    let rates: Vec<f64> = (1..=7).map(|i| f64::from(i) * 10.0).collect();
    let plan = trace::step_plan(&rates, Duration::from_secs(60), Duration::from_secs(30));
    let load_steps = plan.iter().map(|s| s.start).collect();
    Scenario {
        name: "step".to_string(),
        requests: trace::step_load(&plan, 512, 128).requests,
        load_steps,
    }
}

/// The most a replicated request is moved in time by [`load`]'s jitter.
pub const REPLICA_JITTER: Duration = Duration::from_secs(1);

/// Loads a scenario by built-in name or file path, then applies the rate multiplier and time
/// compression (1.0 leaves it as it is). A rate multiplier replicates requests, and copies of
/// one request would arrive at the same instant: each request's arrival is moved later by a
/// uniform draw in [0, [`REPLICA_JITTER`]) from a generator seeded with `seed`, so the same seed
/// gives the same scenario.
pub fn load(
    spec: &str,
    rate_multiplier: f64,
    time_compression: f64,
    seed: u64,
) -> anyhow::Result<Scenario> {
    let mut scenario = if spec == "step" {
        step_scenario()
    } else if let Some((name, file, text)) = BUNDLED.iter().find(|b| b.0 == spec) {
        let trace = trace::parse_trace(file, text)?;
        Scenario {
            name: (*name).to_string(),
            requests: trace.requests,
            load_steps: Vec::new(),
        }
    } else {
        let path = Path::new(spec);
        if !path.exists() {
            anyhow::bail!(
                "--trace {spec:?}: no such file and not a built-in scenario; use a trace file \
                 (Azure 2023 CSV or Mooncake JSONL) or one of {}",
                BUILTIN_NAMES.join(", ")
            );
        }
        let trace = trace::read_trace(path)?;
        Scenario {
            name: path
                .file_stem()
                .map_or_else(|| spec.to_string(), |s| s.to_string_lossy().into_owned()),
            requests: trace.requests,
            load_steps: Vec::new(),
        }
    };
    if rate_multiplier != 1.0 || time_compression != 1.0 {
        let mut t = Trace::synthetic(scenario.name.clone(), scenario.requests);
        if rate_multiplier != 1.0 {
            t = t.scale_rate(rate_multiplier).ok_or_else(|| {
                anyhow::anyhow!(
                    "--rate-multiplier {rate_multiplier}: expected a positive finite number"
                )
            })?;
        }
        if rate_multiplier != 1.0 {
            let mut rng = SplitMix64::new(seed);
            for r in &mut t.requests {
                r.arrival += REPLICA_JITTER.mul_f64(rng.next_f64());
            }
            t.requests.sort_by_key(|r| r.arrival);
        }
        if time_compression != 1.0 {
            t = t.compress_time(time_compression).ok_or_else(|| {
                anyhow::anyhow!(
                    "--time-compression {time_compression}: expected a positive finite number"
                )
            })?;
            scenario.load_steps = scenario
                .load_steps
                .iter()
                .map(|s| s.div_f64(time_compression))
                .collect();
        }
        scenario.requests = t.requests;
        scenario.name = format!("{} x{rate_multiplier}", scenario.name);
    }
    if scenario.requests.is_empty() {
        anyhow::bail!("--trace {spec:?}: the scenario holds no requests");
    }
    Ok(scenario)
}
