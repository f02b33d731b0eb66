//! The engine model: a pure, steppable imitation of vLLM V1's scheduler and step timing.
//!
//! Owns: continuous batching (`max_num_seqs`, a per-step token budget with chunked prefill), the
//! FIFO waiting queue, KV-cache blocks with preemption by recompute, step durations from
//! [`EngineConfig`], per-request timing records and the cumulative [`EngineStats`]. Does not own
//! clocks, HTTP or rendering: time is passed in (`now` since an arbitrary origin), so the same
//! code runs in real time ([`super::server`]) and in virtual time (the fleet simulator).
//!
//! Stepping is O(batch) per step and idle time costs nothing: with no work the engine holds no
//! step and [`Engine::next_event_time`] is `None`.

use std::collections::VecDeque;
use std::time::Duration;

use super::config::{ConfigError, EngineConfig};
use super::stats::EngineStats;

pub use super::request::{Event, FinishReason, RejectError, RequestId, RequestRecord, RequestSpec};

/// One request inside the engine.
#[derive(Debug, Clone)]
struct Seq {
    id: RequestId,
    prompt: u32,
    target: u32,
    max_tokens: u32,
    stream: bool,
    generated: u32,
    /// Tokens whose KV is computed.
    computed: u32,
    blocks: u32,
    /// Tokens scheduled in the step in flight.
    scheduled: u32,
    arrival: f64,
    first_scheduled: f64,
    first_token: f64,
    last_token: f64,
    preemptions: u32,
    aborted: bool,
}

impl Seq {
    fn record(&self, finished: f64, reason: FinishReason) -> RequestRecord {
        let opt = |t: f64| (!t.is_nan()).then(|| secs_to_duration(t));
        RequestRecord {
            id: self.id,
            arrival: secs_to_duration(self.arrival),
            scheduled: opt(self.first_scheduled),
            first_token: opt(self.first_token),
            finished: secs_to_duration(finished),
            prompt_tokens: self.prompt,
            output_tokens: self.generated,
            max_tokens: self.max_tokens,
            preemptions: self.preemptions,
            finish_reason: reason,
        }
    }

    fn finish_reason(&self) -> FinishReason {
        if self.generated >= self.max_tokens {
            FinishReason::Length
        } else {
            FinishReason::Stop
        }
    }
}

fn secs_to_duration(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

/// The step currently executing.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    start: f64,
    end: f64,
}

/// The gauges vLLM publishes: its scheduler's counts as of the end of the latest step.
///
/// vLLM V1 builds its stats after each step, and requests that arrived during that step are
/// still in the engine core's input queue, not in the scheduler's waiting queue: below
/// capacity `num_requests_waiting` reads 0 even while requests keep arriving.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PublishedGauges {
    /// `vllm:num_requests_running`.
    pub running: usize,
    /// `vllm:num_requests_waiting`.
    pub waiting: usize,
    /// `vllm:kv_cache_usage_perc`.
    pub kv_cache_usage: f64,
}

/// One emulated vLLM engine core.
#[derive(Debug, Clone)]
pub struct Engine {
    cfg: EngineConfig,
    running: Vec<Seq>,
    waiting: VecDeque<Seq>,
    free_blocks: u32,
    next_id: RequestId,
    step: Option<InFlight>,
    last_step_end: f64,
    clock: f64,
    stats: EngineStats,
    pending: Vec<Event>,
    published: PublishedGauges,
    publish_cutoff: f64,
    /// Running requests aborted while a step was in flight (removed at its commit).
    aborted_in_flight: usize,
}

impl Engine {
    /// A fresh engine; fails when the configuration cannot run.
    pub fn new(cfg: EngineConfig) -> Result<Engine, ConfigError> {
        cfg.validate()?;
        Ok(Engine {
            free_blocks: cfg.num_gpu_blocks,
            stats: EngineStats::new(cfg.metrics_shape),
            cfg,
            running: Vec::new(),
            waiting: VecDeque::new(),
            next_id: 0,
            step: None,
            last_step_end: f64::NAN,
            clock: 0.0,
            pending: Vec::new(),
            published: PublishedGauges::default(),
            publish_cutoff: 0.0,
            aborted_in_flight: 0,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Cumulative statistics.
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// Requests in the batch (including ones still in prefill).
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Requests in the waiting queue.
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// KV-cache blocks in use over the total, 0..1.
    pub fn kv_cache_usage(&self) -> f64 {
        let total = f64::from(self.cfg.num_gpu_blocks);
        (total - f64::from(self.free_blocks)) / total
    }

    /// The latest time the engine was advanced to.
    pub fn now(&self) -> Duration {
        secs_to_duration(self.clock)
    }

    /// When the step in flight ends, or `None` when idle. Call [`Engine::advance_to`] then.
    pub fn next_event_time(&self) -> Option<Duration> {
        // Rounded up so that advancing to the returned time always commits the step.
        self.step.map(|s| {
            let d = secs_to_duration(s.end);
            if d.as_secs_f64() < s.end {
                d + Duration::from_nanos(1)
            } else {
                d
            }
        })
    }

    /// Changes the step-time multiplier from the next step on (fault control; 1.0 = normal).
    /// Non-positive or non-finite values are ignored.
    pub fn set_slowdown(&mut self, slowdown: f64) {
        if slowdown.is_finite() && slowdown > 0.0 {
            self.cfg.slowdown = slowdown;
        }
    }

    /// Adds a request arriving at `now` (which must not be before earlier calls' `now`; an
    /// earlier one is treated as the latest time). Steps that end up to `now` run first; their
    /// events are returned by the next [`Engine::advance_to`].
    pub fn add_request(
        &mut self,
        now: Duration,
        spec: RequestSpec,
    ) -> Result<RequestId, RejectError> {
        if spec.prompt_tokens == 0 || spec.output_tokens == 0 {
            return Err(RejectError::Empty {
                prompt: spec.prompt_tokens,
                output: spec.output_tokens,
            });
        }
        let max_tokens = spec.max_tokens.max(spec.output_tokens);
        // Like vLLM: the prompt plus the whole `max_tokens` allowance must fit the context.
        if u64::from(spec.prompt_tokens) + u64::from(max_tokens) > u64::from(self.cfg.max_model_len)
        {
            return Err(RejectError::TooLong {
                prompt: spec.prompt_tokens,
                output: max_tokens,
                max_model_len: self.cfg.max_model_len,
            });
        }
        self.advance_internal(now);
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.push_back(Seq {
            id,
            prompt: spec.prompt_tokens,
            target: spec.output_tokens,
            max_tokens,
            stream: spec.stream_tokens,
            generated: 0,
            computed: 0,
            blocks: 0,
            scheduled: 0,
            arrival: self.clock,
            first_scheduled: f64::NAN,
            first_token: f64::NAN,
            last_token: f64::NAN,
            preemptions: 0,
            aborted: false,
        });
        if self.step.is_none() {
            self.start_step(self.clock);
        }
        Ok(id)
    }

    /// Aborts a request (client went away). Returns whether it was still in the engine. Its
    /// [`Event::Finished`] (reason abort) comes with the next [`Engine::advance_to`].
    pub fn abort(&mut self, now: Duration, id: RequestId) -> bool {
        self.advance_internal(now);
        let t = self.clock;
        if let Some(pos) = self.waiting.iter().position(|s| s.id == id) {
            if let Some(seq) = self.waiting.remove(pos) {
                self.finish(&seq, t, FinishReason::Abort);
            }
            self.publish(self.publish_cutoff);
            return true;
        }
        let Some(pos) = self.running.iter().position(|s| s.id == id && !s.aborted) else {
            return false;
        };
        if self.step.is_some() {
            // Freed when the step in flight commits.
            self.running[pos].aborted = true;
            self.aborted_in_flight += 1;
            let seq = self.running[pos].clone();
            self.finish(&seq, t, FinishReason::Abort);
        } else {
            let seq = self.running.remove(pos);
            self.free_blocks += seq.blocks;
            self.finish(&seq, t, FinishReason::Abort);
        }
        self.publish(self.publish_cutoff);
        true
    }

    /// Runs every step that ends at or before `now` and appends what happened to `events`.
    pub fn advance_to(&mut self, now: Duration, events: &mut Vec<Event>) {
        self.advance_internal(now);
        events.append(&mut self.pending);
    }

    fn advance_internal(&mut self, now: Duration) {
        let now = now.as_secs_f64().max(self.clock);
        while let Some(step) = self.step {
            if step.end > now {
                break;
            }
            self.commit(step.start, step.end);
            self.step = None;
            self.start_step(step.end);
        }
        self.clock = now;
    }

    /// Schedules the next step at `t` (vLLM V1 order: running first, then waiting, FIFO).
    fn start_step(&mut self, t: f64) {
        if self.running.is_empty() && self.waiting.is_empty() {
            return;
        }
        let mut budget = self.cfg.max_num_batched_tokens;
        let mut tokens: u64 = 0;
        let mut context: u64 = 0;
        let mut preempted = false;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let seq = &self.running[i];
            let remaining = seq.prompt + seq.generated - seq.computed;
            let n = remaining.min(budget);
            let need = self
                .cfg
                .blocks_for(seq.computed + n)
                .saturating_sub(seq.blocks);
            let mut self_preempted = false;
            while need > self.free_blocks {
                // Preempt the newest running request (recompute): back to the queue's front.
                let Some(mut victim) = self.running.pop() else {
                    break;
                };
                self.free_blocks += victim.blocks;
                victim.blocks = 0;
                victim.computed = 0;
                victim.scheduled = 0;
                victim.preemptions += 1;
                self.stats.num_preemptions_total += 1;
                preempted = true;
                self.waiting.push_front(victim);
                if self.running.len() == i {
                    self_preempted = true;
                    break;
                }
            }
            if self_preempted {
                break;
            }
            let seq = &mut self.running[i];
            seq.blocks += need;
            self.free_blocks -= need;
            seq.scheduled = n;
            budget -= n;
            tokens += u64::from(n);
            if seq.generated > 0 && n == 1 {
                context += u64::from(seq.computed);
            }
            i += 1;
        }
        for seq in &mut self.running[i..] {
            seq.scheduled = 0;
        }
        // vLLM skips admission in a step that preempted; an empty batch admits regardless so
        // the engine can never stall with work queued.
        if !preempted || self.running.is_empty() {
            while budget > 0 && self.running.len() < self.cfg.max_num_seqs as usize {
                let Some(head) = self.waiting.front() else {
                    break;
                };
                let n = (head.prompt + head.generated).min(budget);
                let need = self.cfg.blocks_for(n);
                if need > self.free_blocks {
                    break;
                }
                let Some(mut seq) = self.waiting.pop_front() else {
                    break;
                };
                if seq.first_scheduled.is_nan() {
                    seq.first_scheduled = t;
                    self.stats.prefix_cache_queries_total += u64::from(seq.prompt);
                }
                seq.blocks = need;
                self.free_blocks -= need;
                seq.scheduled = n;
                budget -= n;
                tokens += u64::from(n);
                self.running.push(seq);
            }
        }
        if tokens == 0 {
            return;
        }
        let duration = self.cfg.step_seconds(tokens, context);
        self.step = Some(InFlight {
            start: t,
            end: t + duration,
        });
    }

    /// Applies the step in flight at its end time `end`.
    fn commit(&mut self, step_start: f64, end: f64) {
        let prev_end = self.last_step_end;
        let mut prompt_credit: u64 = 0;
        let mut generated: u64 = 0;
        let mut itl_same_gap: u64 = 0;
        let mut finished_any = false;
        for idx in 0..self.running.len() {
            let seq = &mut self.running[idx];
            if seq.aborted || seq.scheduled == 0 {
                continue;
            }
            seq.computed += seq.scheduled;
            seq.scheduled = 0;
            if seq.computed < seq.prompt + seq.generated {
                continue; // a prefill chunk that did not reach the end: no token yet
            }
            seq.generated += 1;
            generated += 1;
            if seq.generated == 1 {
                seq.first_token = end;
                prompt_credit += u64::from(seq.prompt);
                self.stats.time_to_first_token.observe(end - seq.arrival);
            } else if seq.last_token == prev_end {
                itl_same_gap += 1;
            } else {
                self.stats.inter_token_latency.observe(end - seq.last_token);
            }
            seq.last_token = end;
            if seq.stream {
                self.pending.push(Event::Token {
                    id: seq.id,
                    generated: seq.generated,
                    at: secs_to_duration(end),
                });
            }
            if seq.generated >= seq.target {
                finished_any = true;
                let seq = self.running[idx].clone();
                let reason = seq.finish_reason();
                self.finish(&seq, end, reason);
            }
        }
        self.stats
            .inter_token_latency
            .observe_n(end - prev_end, itl_same_gap);
        self.stats
            .iteration_tokens
            .observe((prompt_credit + generated) as f64);
        self.stats.prompt_tokens_total += prompt_credit;
        self.stats.generation_tokens_total += generated;
        self.stats.steps_total += 1;
        self.last_step_end = end;
        if finished_any || self.aborted_in_flight > 0 {
            self.aborted_in_flight = 0;
            let mut freed = 0;
            self.running.retain(|s| {
                let keep = !s.aborted && s.generated < s.target;
                if !keep {
                    freed += s.blocks;
                }
                keep
            });
            self.free_blocks += freed;
        }
        self.publish(step_start);
    }

    /// Records the gauges vLLM would publish after a step that started at `step_start`.
    /// Aborted requests are left out at once: vLLM's scheduler frees an aborted request's
    /// blocks when it processes the abort, even while a step is in flight here.
    fn publish(&mut self, step_start: f64) {
        self.publish_cutoff = step_start;
        let held_by_aborted: u32 = self
            .running
            .iter()
            .filter(|s| s.aborted)
            .map(|s| s.blocks)
            .sum();
        let total = f64::from(self.cfg.num_gpu_blocks);
        let used = self.cfg.num_gpu_blocks - self.free_blocks - held_by_aborted;
        self.published = PublishedGauges {
            running: self.running.iter().filter(|s| !s.aborted).count(),
            waiting: self
                .waiting
                .iter()
                .filter(|s| s.arrival <= step_start)
                .count(),
            kv_cache_usage: f64::from(used) / total,
        };
    }

    /// The gauges as vLLM publishes them (as of the end of the latest step); see
    /// [`PublishedGauges`]. [`Engine::num_waiting`] and friends are the instantaneous truth.
    pub fn published_gauges(&self) -> PublishedGauges {
        self.published
    }

    /// Records a finished request in the statistics and queues its event.
    fn finish(&mut self, seq: &Seq, at: f64, reason: FinishReason) {
        let st = &mut self.stats;
        st.request_success_total[reason as usize] += 1;
        let scheduled = if seq.first_scheduled.is_nan() {
            at
        } else {
            seq.first_scheduled
        };
        let first_token = if seq.first_token.is_nan() {
            at
        } else {
            seq.first_token
        };
        st.e2e_request_latency.observe(at - seq.arrival);
        st.request_queue_time.observe(scheduled - seq.arrival);
        st.request_inference_time.observe(at - scheduled);
        st.request_prefill_time.observe(first_token - scheduled);
        st.request_decode_time.observe(at - first_token);
        st.request_time_per_output_token
            .observe(if seq.generated > 1 {
                (at - first_token) / f64::from(seq.generated - 1)
            } else {
                0.0
            });
        st.request_prompt_tokens.observe(f64::from(seq.prompt));
        st.request_generation_tokens
            .observe(f64::from(seq.generated));
        st.request_max_num_generation_tokens
            .observe(f64::from(seq.max_tokens));
        st.request_params_n.observe(1.0);
        st.request_params_max_tokens
            .observe(f64::from(seq.max_tokens));
        self.pending.push(Event::Finished(seq.record(at, reason)));
    }
}
