//! The demo's load: a story of phases (idle, ramp, burst, quiet) played with the request sizes
//! and arrival pattern of a bundled real trace.
//!
//! Owns: the phase envelope ([`Story`]), reshaping the trace to follow it ([`shape`]), and the
//! attribution printed with it. Does not own: sending the requests (see the parent module) or
//! parsing trace files (see [`crate::trace`]).
//!
//! Reshaping is a time warp: the trace's own clock runs faster or slower so that its mean rate
//! follows the story's envelope, while its request sizes, order and short-term burstiness are
//! kept. Requests are cut to what the demo's small emulated engine can hold.

use std::time::Duration;

use serde::Serialize;

use crate::trace::{Trace, TraceRequest};

/// The bundled trace the demo plays (the conversation service of Azure's 2023 LLM trace).
const TRACE_TEXT: &str = include_str!("../../../../data/traces/azure-llm-2023-conv.csv");

/// Its file name, for messages.
const TRACE_NAME: &str = "azure-llm-2023-conv.csv";

/// Who published the trace, printed whenever it is played.
pub const ATTRIBUTION: &str = "request sizes and arrival pattern: Azure LLM inference trace 2023, \
conversation service (Microsoft Azure Public Dataset, CC-BY 4.0; Patel et al., \"Splitwise: \
Efficient generative LLM inference using phase splitting\", ISCA 2024)";

/// One phase of the story: the offered rate moves linearly from `from` to `to` (in multiples of
/// one replica's capacity) over `duration`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    /// Name shown in the live view (`idle`, `ramp`, `burst`, `quiet`).
    pub name: &'static str,
    /// How long it lasts.
    #[serde(serialize_with = "seconds")]
    pub duration: Duration,
    /// Offered rate at its start, in replica capacities.
    pub from: f64,
    /// Offered rate at its end, in replica capacities.
    pub to: f64,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// The load story: phases played one after another.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Story {
    /// The phases in order.
    pub phases: Vec<Phase>,
}

impl Story {
    /// The full story (under three minutes): a scale-out under the burst and a scale-in after.
    pub fn full() -> Self {
        Self {
            phases: vec![
                phase("idle", 20, 0.3, 0.3),
                phase("ramp", 20, 0.3, 0.8),
                phase("burst", 30, 2.2, 2.2),
                phase("quiet", 100, 0.1, 0.1),
            ],
        }
    }

    /// The same story in under a minute.
    pub fn quick() -> Self {
        Self {
            phases: vec![
                phase("idle", 3, 0.3, 0.3),
                phase("ramp", 3, 0.3, 0.8),
                phase("burst", 10, 2.2, 2.2),
                phase("quiet", 32, 0.05, 0.05),
            ],
        }
    }

    /// The whole story's length.
    pub fn total(&self) -> Duration {
        self.phases.iter().map(|p| p.duration).sum()
    }

    /// The phase at `t` (the last one after the end) and the offered rate there, in replica
    /// capacities.
    pub fn at(&self, t: Duration) -> (&'static str, f64) {
        let mut start = Duration::ZERO;
        for p in &self.phases {
            let end = start + p.duration;
            if t < end {
                let f = (t - start).as_secs_f64() / p.duration.as_secs_f64().max(1e-9);
                return (p.name, p.from + (p.to - p.from) * f);
            }
            start = end;
        }
        match self.phases.last() {
            Some(p) => (p.name, p.to),
            None => ("done", 0.0),
        }
    }

    /// When the phase named `name` starts, if there is one.
    pub fn start_of(&self, name: &str) -> Option<Duration> {
        let mut start = Duration::ZERO;
        for p in &self.phases {
            if p.name == name {
                return Some(start);
            }
            start += p.duration;
        }
        None
    }
}

fn phase(name: &'static str, seconds: u64, from: f64, to: f64) -> Phase {
    Phase {
        name,
        duration: Duration::from_secs(seconds),
        from,
        to,
    }
}

/// Limits that keep each request within what the demo's engine can hold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SizeLimits {
    /// Prompts longer than this are cut to it.
    pub max_prompt_tokens: u32,
    /// Outputs longer than this are cut to it.
    pub max_output_tokens: u32,
}

/// The bundled trace, parsed.
pub fn bundled_trace() -> anyhow::Result<Trace> {
    crate::trace::parse_trace(TRACE_NAME, TRACE_TEXT)
        .map_err(|e| anyhow::anyhow!("the bundled trace {TRACE_NAME} does not parse: {e}"))
}

/// Plays `trace` along `story`: request `k` of the trace (starting at a position chosen by
/// `seed`, wrapping around at the end) is sent when the warped trace clock reaches its arrival.
/// The trace clock runs at `rate(t) / trace_mean_rate` times real time, where `rate(t)` is the
/// story's envelope times `capacity_rps` (one replica's capacity in requests per second).
pub fn shape(
    trace: &Trace,
    story: &Story,
    capacity_rps: f64,
    limits: SizeLimits,
    seed: u64,
) -> Vec<TraceRequest> {
    let Some(mean_rate) = trace.mean_rate_per_second() else {
        return Vec::new();
    };
    if !(capacity_rps.is_finite() && capacity_rps > 0.0) {
        return Vec::new();
    }
    let requests = &trace.requests;
    let span = trace.span().as_secs_f64();
    // The start position: a seed-chosen offset into the trace.
    let offset = if span > 0.0 {
        (splitmix(seed) % 10_000) as f64 / 10_000.0 * span
    } else {
        0.0
    };
    let first_arrival = requests[0].arrival.as_secs_f64();
    let mut index = requests
        .iter()
        .position(|r| r.arrival.as_secs_f64() - first_arrival >= offset)
        .unwrap_or(0);
    // Trace time of the next request relative to the warped clock, unwrapped across laps.
    let mut lap_base = 0.0;
    let trace_time = |i: usize, lap: f64| requests[i].arrival.as_secs_f64() - first_arrival + lap;
    let start_trace = trace_time(index, 0.0);

    let step = 0.01;
    let total = story.total().as_secs_f64();
    let mut out = Vec::new();
    let mut clock = start_trace;
    let mut t = 0.0;
    while t < total {
        let (_, multiple) = story.at(Duration::from_secs_f64(t));
        let speed = multiple * capacity_rps / mean_rate;
        let next_clock = clock + speed * step;
        while trace_time(index, lap_base) < next_clock {
            let at = trace_time(index, lap_base);
            let f = if next_clock > clock {
                ((at - clock) / (next_clock - clock)).clamp(0.0, 1.0)
            } else {
                0.0
            };
            let r = &requests[index];
            out.push(TraceRequest {
                arrival: Duration::from_secs_f64(t + f * step),
                prompt_tokens: r.prompt_tokens.clamp(1, limits.max_prompt_tokens.max(1)),
                output_tokens: r.output_tokens.clamp(1, limits.max_output_tokens.max(1)),
            });
            index += 1;
            if index == requests.len() {
                index = 0;
                lap_base += span + 1.0;
            }
        }
        clock = next_clock;
        t += step;
    }
    out
}

fn splitmix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count_in(requests: &[TraceRequest], from: f64, to: f64) -> usize {
        requests
            .iter()
            .filter(|r| (from..to).contains(&r.arrival.as_secs_f64()))
            .count()
    }

    #[test]
    fn the_bundled_trace_parses() {
        let trace = bundled_trace().unwrap();
        assert!(trace.len() > 10_000, "{}", trace.len());
    }

    #[test]
    fn the_shaped_load_follows_the_story() {
        let trace = bundled_trace().unwrap();
        let story = Story::full();
        let limits = SizeLimits {
            max_prompt_tokens: 4096,
            max_output_tokens: 512,
        };
        let load = shape(&trace, &story, 1.5, limits, 7);
        let burst = story.start_of("burst").unwrap().as_secs_f64();
        let quiet = story.start_of("quiet").unwrap().as_secs_f64();
        let idle_rate = count_in(&load, 0.0, 20.0) as f64 / 20.0;
        let burst_rate = count_in(&load, burst, quiet) as f64 / (quiet - burst);
        // 0.3 and 2.2 capacities of 1.5 req/s, within the trace's own burstiness.
        assert!((0.1..1.2).contains(&idle_rate), "idle {idle_rate}");
        assert!((2.0..5.5).contains(&burst_rate), "burst {burst_rate}");
        assert!(burst_rate > 4.0 * idle_rate);
        assert!(load.windows(2).all(|w| w[0].arrival <= w[1].arrival));
        assert!(
            load.iter()
                .all(|r| r.prompt_tokens <= 4096 && r.output_tokens <= 512)
        );
        assert!(
            load.last().unwrap().arrival < story.total(),
            "nothing after the end"
        );
    }

    #[test]
    fn the_seed_picks_the_slice_and_is_reproducible() {
        let trace = bundled_trace().unwrap();
        let story = Story::quick();
        let limits = SizeLimits {
            max_prompt_tokens: 4096,
            max_output_tokens: 512,
        };
        let a = shape(&trace, &story, 1.5, limits, 1);
        let b = shape(&trace, &story, 1.5, limits, 1);
        let c = shape(&trace, &story, 1.5, limits, 2);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn the_story_envelope_interpolates() {
        let story = Story::full();
        assert_eq!(story.at(Duration::ZERO), ("idle", 0.3));
        let (name, rate) = story.at(Duration::from_secs_f64(20.0 + 10.0));
        assert_eq!(name, "ramp");
        assert!((rate - 0.55).abs() < 1e-9);
        assert_eq!(story.at(Duration::from_secs(10_000)).0, "quiet");
        assert_eq!(story.total(), Duration::from_secs(170));
    }
}
