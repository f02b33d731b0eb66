//! Request trace files: when each request arrived, how many prompt tokens it had and how many
//! tokens it generated.
//!
//! Owns: reading the Azure LLM inference trace 2023 CSV (`TIMESTAMP,ContextTokens,GeneratedTokens`)
//! and the Mooncake JSON-lines trace (`{"timestamp": ms, "input_length", "output_length", ...}`),
//! detected by content; reshaping a trace (rate multiplier, time compression, time slice); and the
//! synthetic step load of the saturation test (10, 20, ... RPS in steps with rests).
//! Does not own: sending requests (the tools crate's `loadtest`) or simulating a fleet (its
//! `simulate`). Pure apart from [`read_trace`], which reads one file. Its own crate, with no
//! async runtime or network, so the readers can be fuzzed on their own (`fuzz/`).
//!
//! Bad rows never panic: every error names the file, the 1-based line and the fix.

pub mod generate;
mod read;

use std::time::Duration;

use serde::Serialize;

pub use read::{
    MAX_TRACE_SPAN, parse_azure_csv, parse_mooncake_jsonl, parse_timestamp, parse_trace, read_trace,
};

/// One request of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TraceRequest {
    /// Arrival time since the start of the trace (the earliest request arrives at zero).
    pub arrival: Duration,
    /// Prompt (context) tokens.
    pub prompt_tokens: u32,
    /// Generated (output) tokens.
    pub output_tokens: u32,
}

/// The file formats understood.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TraceFormat {
    /// Azure LLM inference trace 2023 CSV: `TIMESTAMP,ContextTokens,GeneratedTokens`.
    AzureCsv,
    /// Mooncake JSON lines: `{"timestamp": <ms>, "input_length": n, "output_length": n}`.
    MooncakeJsonl,
    /// Generated in memory (step load, reshaped traces keep their source's format).
    Synthetic,
}

/// A trace: requests sorted by arrival.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// Where it came from (a file name, or a description for synthetic traces).
    pub source: String,
    /// The format it was read from.
    pub format: TraceFormat,
    /// Requests sorted by arrival; the first arrives at zero (unless sliced or empty).
    pub requests: Vec<TraceRequest>,
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read.
    #[error("trace file {path}: cannot read it: {source}; fix: check the path and permissions")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A row could not be parsed.
    #[error("trace file {path} line {line}: {problem}; fix: {fix}")]
    Row {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        problem: String,
        /// How to fix it.
        fix: String,
    },
    /// The content matched no known format, or held no requests.
    #[error("trace file {path}: {problem}; fix: {fix}")]
    File {
        /// The file.
        path: String,
        /// What was wrong.
        problem: String,
        /// How to fix it.
        fix: String,
    },
}

impl Trace {
    /// A synthetic trace from requests (sorted here).
    pub fn synthetic(source: impl Into<String>, mut requests: Vec<TraceRequest>) -> Self {
        requests.sort_by_key(|r| r.arrival);
        Self {
            source: source.into(),
            format: TraceFormat::Synthetic,
            requests,
        }
    }

    /// Number of requests.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether there are no requests.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// Time from the first to the last arrival.
    pub fn span(&self) -> Duration {
        match (self.requests.first(), self.requests.last()) {
            (Some(first), Some(last)) => last.arrival.saturating_sub(first.arrival),
            _ => Duration::ZERO,
        }
    }

    /// Mean arrival rate in requests per second over the span (`None` for fewer than two requests
    /// or a zero span).
    pub fn mean_rate_per_second(&self) -> Option<f64> {
        let span = self.span().as_secs_f64();
        (self.requests.len() >= 2 && span > 0.0).then(|| (self.requests.len() - 1) as f64 / span)
    }

    /// Mean prompt tokens per request.
    pub fn mean_prompt_tokens(&self) -> f64 {
        mean(self.requests.iter().map(|r| f64::from(r.prompt_tokens)))
    }

    /// Mean output tokens per request.
    pub fn mean_output_tokens(&self) -> f64 {
        mean(self.requests.iter().map(|r| f64::from(r.output_tokens)))
    }

    /// Requests per `bucket` of time from the trace start (for plots of the offered load).
    pub fn arrivals_per_bucket(&self, bucket: Duration) -> Vec<usize> {
        if bucket.is_zero() || self.requests.is_empty() {
            return Vec::new();
        }
        let n = (self.span().as_secs_f64() / bucket.as_secs_f64()).floor() as usize + 1;
        let mut out = vec![0; n];
        for r in &self.requests {
            let i = (r.arrival.as_secs_f64() / bucket.as_secs_f64()) as usize;
            out[i.min(n - 1)] += 1;
        }
        out
    }

    /// Multiplies the arrival rate by `factor`, keeping the timeline: each request is repeated
    /// (factor > 1) or thinned (factor < 1) deterministically so that request `i` appears
    /// `floor((i+1)·f) − floor(i·f)` times. Returns `None` unless `factor` is finite and > 0.
    pub fn scale_rate(&self, factor: f64) -> Option<Trace> {
        if !(factor.is_finite() && factor > 0.0) {
            return None;
        }
        let mut requests =
            Vec::with_capacity((self.requests.len() as f64 * factor).ceil() as usize);
        for (i, r) in self.requests.iter().enumerate() {
            let copies = ((i + 1) as f64 * factor).floor() - (i as f64 * factor).floor();
            for _ in 0..copies as usize {
                requests.push(*r);
            }
        }
        Some(Trace {
            source: format!("{} (rate x{factor})", self.source),
            format: self.format,
            requests,
        })
    }

    /// Compresses time by `factor`: arrivals are divided by it (a 60-minute trace at factor 10
    /// plays in 6 minutes at ten times the rate). Returns `None` unless `factor` is finite and > 0.
    pub fn compress_time(&self, factor: f64) -> Option<Trace> {
        if !(factor.is_finite() && factor > 0.0) {
            return None;
        }
        Some(Trace {
            source: format!("{} (time /{factor})", self.source),
            format: self.format,
            requests: self
                .requests
                .iter()
                .map(|r| TraceRequest {
                    arrival: r.arrival.div_f64(factor),
                    ..*r
                })
                .collect(),
        })
    }

    /// The requests arriving in `[from, to)`, re-based so that `from` becomes zero.
    pub fn slice(&self, from: Duration, to: Duration) -> Trace {
        Trace {
            source: format!(
                "{} [{}s..{}s)",
                self.source,
                from.as_secs_f64(),
                to.as_secs_f64()
            ),
            format: self.format,
            requests: self
                .requests
                .iter()
                .filter(|r| r.arrival >= from && r.arrival < to)
                .map(|r| TraceRequest {
                    arrival: r.arrival - from,
                    ..*r
                })
                .collect(),
        }
    }
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 { 0.0 } else { sum / n as f64 }
}

/// One step of a stepped load: a constant offered rate for a while, then a rest.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LoadStep {
    /// Offered requests per second during the step.
    pub rps: f64,
    /// When the step starts (since the start of the test).
    pub start: Duration,
    /// How long it offers load.
    pub duration: Duration,
    /// The rest after it (no load).
    pub rest: Duration,
}

impl LoadStep {
    /// When the step's load ends.
    pub fn end(&self) -> Duration {
        self.start + self.duration
    }
}

/// Lays out a stepped load: each rate for `step`, separated by `rest` (no rest after the last).
/// The source guide's plan is `step_plan(&[10., 20., 30., 40., 50., 60., 70.], 60 s, 30 s)`.
pub fn step_plan(rates: &[f64], step: Duration, rest: Duration) -> Vec<LoadStep> {
    let mut start = Duration::ZERO;
    let mut out = Vec::with_capacity(rates.len());
    for (i, &rps) in rates.iter().enumerate() {
        let rest = if i + 1 == rates.len() {
            Duration::ZERO
        } else {
            rest
        };
        out.push(LoadStep {
            rps,
            start,
            duration: step,
            rest,
        });
        start += step + rest;
    }
    out
}

/// Evenly spaced arrivals (`rps` per second, the first at the step start) for every step of a
/// plan, each with the same request shape: the synthetic load of the saturation test.
pub fn step_load(plan: &[LoadStep], prompt_tokens: u32, output_tokens: u32) -> Trace {
    let mut requests = Vec::new();
    for step in plan {
        if !(step.rps.is_finite() && step.rps > 0.0) {
            continue;
        }
        let count = (step.duration.as_secs_f64() * step.rps).round() as u64;
        for k in 0..count {
            requests.push(TraceRequest {
                arrival: step.start + Duration::from_secs_f64(k as f64 / step.rps),
                prompt_tokens,
                output_tokens,
            });
        }
    }
    Trace::synthetic(format!("step load ({} steps)", plan.len()), requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_differences_cross_midnight_and_months() {
        let a = parse_timestamp("2023-11-16 18:17:03.9799600").unwrap();
        let b = parse_timestamp("2023-11-16 18:17:04.0319600").unwrap();
        assert!(((b - a) - 0.052).abs() < 1e-6);
        let c = parse_timestamp("2023-12-31 23:59:59").unwrap();
        let d = parse_timestamp("2024-01-01 00:00:01").unwrap();
        assert!(((d - c) - 2.0).abs() < 1e-9);
        assert_eq!(parse_timestamp("1970-01-01 00:00:00").unwrap(), 0.0);
        assert_eq!(
            parse_timestamp("2000-03-01 00:00:00").unwrap(),
            951_868_800.0
        );
        assert!(parse_timestamp("2023-02-29 00:00:00").is_err());
        assert!(parse_timestamp("2023-11-16").is_err());
        assert!(parse_timestamp("2023-11-16 25:00:00").is_err());
        assert!(parse_timestamp("2023-11-16 10:00:00.12x").is_err());
    }

    #[test]
    fn scale_rate_repeats_and_thins_deterministically() {
        let plan = step_plan(&[10.0], Duration::from_secs(10), Duration::ZERO);
        let t = step_load(&plan, 100, 10);
        assert_eq!(t.len(), 100);
        assert_eq!(t.scale_rate(2.0).unwrap().len(), 200);
        assert_eq!(t.scale_rate(0.5).unwrap().len(), 50);
        assert_eq!(t.scale_rate(1.5).unwrap().len(), 150);
        assert!(t.scale_rate(0.0).is_none());
        assert!(t.scale_rate(f64::NAN).is_none());
        let c = t.compress_time(2.0).unwrap();
        assert_eq!(c.span(), t.span() / 2);
    }

    #[test]
    fn step_plan_lays_out_rests() {
        let plan = step_plan(
            &[10.0, 20.0, 30.0],
            Duration::from_secs(60),
            Duration::from_secs(30),
        );
        assert_eq!(plan[1].start, Duration::from_secs(90));
        assert_eq!(plan[2].start, Duration::from_secs(180));
        assert_eq!(plan[2].rest, Duration::ZERO);
        let load = step_load(&plan, 1, 1);
        assert_eq!(load.len(), 600 + 1200 + 1800);
        let in_second_step = load.slice(Duration::from_secs(90), Duration::from_secs(150));
        assert_eq!(in_second_step.len(), 1200);
    }
}
