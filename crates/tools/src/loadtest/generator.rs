//! The open-loop generator: a precomputed schedule of arrivals, sent on time whether or not
//! earlier requests have answered (no coordinated omission), with per-step recording.
//!
//! Owns: the schedule, the send loop, the in-flight limit and the per-step counters and HDR
//! histograms (time to first token, inter-token latency, end to end, send lag). Does not own:
//! the HTTP exchange (see the client) or judging (see the verdict).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::client::{CompletionClient, Outcome};
use super::shape::{Arrivals, SizeSampler, SplitMix64};
use super::verdict::{Percentiles, StepResult};
use crate::trace::LoadStep;

/// One scheduled request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrival {
    /// When it is due, since the start of the test.
    pub at: Duration,
    /// The step it belongs to.
    pub step: usize,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Output tokens.
    pub output_tokens: u32,
}

/// Lays out every arrival of a stepped plan.
pub fn schedule(
    plan: &[LoadStep],
    arrivals: Arrivals,
    sizes: &mut SizeSampler,
    seed: u64,
) -> Vec<Arrival> {
    let mut rng = SplitMix64::new(seed ^ 0x5EED);
    let mut out = Vec::new();
    for (index, step) in plan.iter().enumerate() {
        if !(step.rps.is_finite() && step.rps > 0.0) {
            continue;
        }
        let length = step.duration.as_secs_f64();
        let mut t = 0.0;
        match arrivals {
            Arrivals::Uniform => {
                let count = (length * step.rps).round() as u64;
                for k in 0..count {
                    t = k as f64 / step.rps;
                    let (p, o) = sizes.sample();
                    out.push(Arrival {
                        at: step.start + Duration::from_secs_f64(t),
                        step: index,
                        prompt_tokens: p,
                        output_tokens: o,
                    });
                }
            }
            Arrivals::Poisson => loop {
                if t >= length {
                    break;
                }
                let (p, o) = sizes.sample();
                out.push(Arrival {
                    at: step.start + Duration::from_secs_f64(t),
                    step: index,
                    prompt_tokens: p,
                    output_tokens: o,
                });
                t += -(1.0 - rng.next_f64()).ln() / step.rps;
            },
        }
    }
    out
}

fn histogram() -> Histogram<u64> {
    // Microseconds from 1 µs to 1 hour at 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static histogram bounds are valid")
}

/// Counters and histograms of one step.
#[derive(Debug, Clone)]
pub struct StepStats {
    /// Requests sent.
    pub sent: u64,
    /// Requests answered in full.
    pub ok: u64,
    /// Failures by kind.
    pub errors: BTreeMap<String, u64>,
    /// Requests skipped at the in-flight limit.
    pub dropped: u64,
    /// Requests finished (ok or failed).
    pub finished: u64,
    /// Prompt tokens of ok requests.
    pub prompt_tokens: u64,
    /// Output tokens of ok requests.
    pub output_tokens: u64,
    /// Time to first token, µs.
    pub ttft_us: Histogram<u64>,
    /// Inter-token gaps, µs.
    pub itl_us: Histogram<u64>,
    /// End to end of ok requests, µs.
    pub e2e_us: Histogram<u64>,
    /// Dispatch lag against the schedule, µs.
    pub lag_us: Histogram<u64>,
    /// Start lag (schedule to the request task's first poll, when it starts sending), µs.
    pub start_lag_us: Histogram<u64>,
    /// When the first request of the step was sent (since the test origin).
    pub first_send: Option<Duration>,
    /// When the last request of the step was sent.
    pub last_send: Option<Duration>,
}

impl Default for StepStats {
    fn default() -> Self {
        Self {
            sent: 0,
            ok: 0,
            errors: BTreeMap::new(),
            dropped: 0,
            finished: 0,
            prompt_tokens: 0,
            output_tokens: 0,
            ttft_us: histogram(),
            itl_us: histogram(),
            e2e_us: histogram(),
            lag_us: histogram(),
            start_lag_us: histogram(),
            first_send: None,
            last_send: None,
        }
    }
}

fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).clamp(1, 3_600_000_000)
}

/// Percentiles of a µs histogram in seconds.
pub fn percentiles(h: &Histogram<u64>) -> Percentiles {
    if h.is_empty() {
        return Percentiles::default();
    }
    let q = |q: f64| Some(h.value_at_quantile(q) as f64 / 1e6);
    Percentiles {
        p50: q(0.50),
        p95: q(0.95),
        p99: q(0.99),
    }
}

impl StepStats {
    /// Records one finished request.
    pub fn record(&mut self, outcome: &Outcome) {
        self.finished += 1;
        match &outcome.result {
            Ok(()) => {
                self.ok += 1;
                self.prompt_tokens += u64::from(outcome.prompt_tokens);
                self.output_tokens += u64::from(outcome.output_tokens);
                let _ = self.e2e_us.record(micros(outcome.e2e));
                if let Some(ttft) = outcome.ttft {
                    let _ = self.ttft_us.record(micros(ttft));
                }
                for gap in &outcome.itls {
                    let _ = self.itl_us.record(micros(*gap));
                }
            }
            Err(kind) => *self.errors.entry(kind.to_string()).or_default() += 1,
        }
    }

    /// The client-side part of a step result (`server` left empty).
    pub fn to_result(
        &self,
        index: usize,
        step: &LoadStep,
        ran: Duration,
        partial: bool,
    ) -> StepResult {
        let seconds = ran.as_secs_f64().max(1e-9);
        // The send rate over the span actually used: n-1 gaps between the first and last send
        // (equal to the offered rate when every request left on time).
        let achieved_rps = match (self.first_send, self.last_send) {
            (Some(first), Some(last)) if self.sent >= 2 && last > first => {
                (self.sent - 1) as f64 / (last - first).as_secs_f64()
            }
            _ => self.sent as f64 / seconds,
        };
        StepResult {
            index,
            offered_rps: step.rps,
            duration_seconds: ran.as_secs_f64(),
            partial,
            sent: self.sent,
            achieved_rps,
            ok: self.ok,
            errors: self.errors.values().sum(),
            error_kinds: self.errors.clone(),
            dropped: self.dropped,
            unfinished: self.sent.saturating_sub(self.finished),
            ok_rps: self.ok as f64 / seconds,
            completed_rps: 0.0,
            prompt_tokens_per_second: self.prompt_tokens as f64 / seconds,
            output_tokens_per_second: self.output_tokens as f64 / seconds,
            ttft: percentiles(&self.ttft_us),
            itl: percentiles(&self.itl_us),
            e2e: percentiles(&self.e2e_us),
            send_lag: percentiles(&self.lag_us),
            start_lag: percentiles(&self.start_lag_us),
            server: None,
        }
    }
}

/// Width of the bins of the completion timeline.
pub const COMPLETION_BIN: Duration = Duration::from_millis(100);

/// Shared recording state of a run.
#[derive(Debug)]
pub struct Recorder {
    steps: Vec<Mutex<StepStats>>,
    /// Successful completions per [`COMPLETION_BIN`] since the origin, whichever step sent them.
    completions: Mutex<Vec<u64>>,
    in_flight: AtomicU64,
    sent_total: AtomicU64,
}

impl Recorder {
    /// Space for `steps` steps.
    pub fn new(steps: usize) -> Self {
        Self {
            steps: (0..steps)
                .map(|_| Mutex::new(StepStats::default()))
                .collect(),
            completions: Mutex::new(Vec::new()),
            in_flight: AtomicU64::new(0),
            sent_total: AtomicU64::new(0),
        }
    }
    /// Requests sent and not yet finished.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }
    /// Requests sent so far.
    pub fn sent_total(&self) -> u64 {
        self.sent_total.load(Ordering::Relaxed)
    }
    /// Records a successful completion at `at` since the origin.
    pub fn record_completion(&self, at: Duration) {
        let bin = (at.as_nanos() / COMPLETION_BIN.as_nanos()) as usize;
        let mut bins = self.completions.lock().unwrap_or_else(|p| p.into_inner());
        if bins.len() <= bin {
            bins.resize(bin + 1, 0);
        }
        bins[bin] += 1;
    }
    /// Successful completions per second within `[from, to)` (any step's requests).
    pub fn completion_rate(&self, from: Duration, to: Duration) -> f64 {
        let bins = self.completions.lock().unwrap_or_else(|p| p.into_inner());
        let (a, b) = (
            (from.as_nanos() / COMPLETION_BIN.as_nanos()) as usize,
            (to.as_nanos() / COMPLETION_BIN.as_nanos()) as usize,
        );
        let n: u64 = bins.iter().take(b).skip(a).sum();
        let seconds = (b.saturating_sub(a)) as f64 * COMPLETION_BIN.as_secs_f64();
        if seconds > 0.0 {
            n as f64 / seconds
        } else {
            0.0
        }
    }
    /// A copy of one step's stats.
    pub fn snapshot(&self, step: usize) -> StepStats {
        self.with_step(step, |s| s.clone()).unwrap_or_default()
    }
    /// Runs `f` on one step's stats.
    pub fn with_step<T>(&self, step: usize, f: impl FnOnce(&mut StepStats) -> T) -> Option<T> {
        let cell = self.steps.get(step)?;
        let mut guard = cell.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        Some(f(&mut guard))
    }
}

/// Dispatches every arrival on schedule from `origin` until done or cancelled, spawning each
/// request as a task on `requests` (the runtime that runs them); returns when the last request
/// has been dispatched (requests still in flight keep running).
///
/// Run it on a runtime of its own (see [`drive_on_own_thread`]) so that a busy request runtime
/// cannot delay arrivals: the dispatch lag then measures the schedule alone, and the start lag
/// (dispatch to the request task's first poll) shows when the request runtime is the bottleneck.
pub async fn drive(
    client: Arc<CompletionClient>,
    arrivals: Vec<Arrival>,
    recorder: Arc<Recorder>,
    origin: Instant,
    max_in_flight: u64,
    cancel: CancellationToken,
    requests: tokio::runtime::Handle,
) {
    for arrival in arrivals {
        let due = origin + arrival.at;
        if due > Instant::now() {
            tokio::select! {
                () = tokio::time::sleep_until(due) => {}
                () = cancel.cancelled() => return,
            }
        } else if cancel.is_cancelled() {
            return;
        }
        let now = Instant::now();
        let lag = now.saturating_duration_since(due);
        let since_origin = now.saturating_duration_since(origin);
        if recorder.in_flight() >= max_in_flight {
            recorder.with_step(arrival.step, |s| s.dropped += 1);
            continue;
        }
        recorder.with_step(arrival.step, |s| {
            s.sent += 1;
            let _ = s.lag_us.record(micros(lag));
            s.first_send.get_or_insert(since_origin);
            s.last_send = Some(since_origin);
        });
        recorder.in_flight.fetch_add(1, Ordering::Relaxed);
        recorder.sent_total.fetch_add(1, Ordering::Relaxed);
        let client = client.clone();
        let recorder = recorder.clone();
        let cancel = cancel.clone();
        requests.spawn(async move {
            let start_lag = Instant::now().saturating_duration_since(due);
            recorder.with_step(arrival.step, |s| {
                let _ = s.start_lag_us.record(micros(start_lag));
            });
            let outcome = tokio::select! {
                o = client.complete(arrival.prompt_tokens, arrival.output_tokens) => Some(o),
                () = cancel.cancelled() => None,
            };
            if let Some(outcome) = outcome {
                if outcome.result.is_ok() {
                    recorder.record_completion(origin.elapsed());
                }
                recorder.with_step(arrival.step, |s| s.record(&outcome));
            }
            recorder.in_flight.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// Runs [`drive`] on a dedicated thread with its own single-threaded runtime, spawning the
/// requests on the current runtime. Resolves when every arrival has been dispatched.
pub fn drive_on_own_thread(
    client: Arc<CompletionClient>,
    arrivals: Vec<Arrival>,
    recorder: Arc<Recorder>,
    origin: Instant,
    max_in_flight: u64,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let requests = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        match tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
        {
            Ok(dispatch) => dispatch.block_on(drive(
                client,
                arrivals,
                recorder,
                origin,
                max_in_flight,
                cancel,
                requests,
            )),
            // Without a second runtime, dispatch from the request runtime itself.
            Err(_) => requests.clone().block_on(drive(
                client,
                arrivals,
                recorder,
                origin,
                max_in_flight,
                cancel,
                requests,
            )),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::shape::Shape;
    use super::*;
    use crate::trace::step_plan;

    #[test]
    fn schedules_follow_the_plan() {
        let plan = step_plan(
            &[10.0, 20.0],
            Duration::from_secs(10),
            Duration::from_secs(5),
        );
        let shape = Shape::Fixed {
            prompt_tokens: 5,
            output_tokens: 2,
        };
        let uniform = schedule(
            &plan,
            Arrivals::Uniform,
            &mut SizeSampler::new(shape.clone(), 1),
            1,
        );
        assert_eq!(uniform.len(), 300);
        assert_eq!(uniform.iter().filter(|a| a.step == 1).count(), 200);
        assert_eq!(uniform[100].at, Duration::from_secs(15));
        assert!(uniform.windows(2).all(|w| w[0].at <= w[1].at));
        let poisson = schedule(&plan, Arrivals::Poisson, &mut SizeSampler::new(shape, 1), 1);
        let n = poisson.iter().filter(|a| a.step == 1).count() as f64;
        // 200 expected; a Poisson count has sd ~14.
        assert!((140.0..260.0).contains(&n), "{n}");
        assert!(poisson.iter().all(|a| a.at < Duration::from_secs(25)));
    }
}
