//! Builders for policy tests: fleet signals at an instant, and a loop over instants.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use vllm_keda_core::policy::{Decision, Policy, PolicyState};
use vllm_keda_core::signals::{FleetSignals, GpuSignals, MaxMean, Quantiles, SignalSet};

/// One sample of load, in the units the policy reads.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Load {
    pub ready: usize,
    /// Known targets that gave no usable data (failed, invalid or stale).
    pub unknown: usize,
    pub queue: f64,
    pub running: f64,
    pub finished: f64,
    pub e2e_p95: Option<f64>,
    pub ttft_p95: Option<f64>,
    pub itl_p95: Option<f64>,
    pub kv_max: Option<f64>,
    pub preemptions_per_second: Option<f64>,
    pub gpu_memory_max: Option<f64>,
}

impl Load {
    /// `ready` replicas, no traffic at all.
    pub fn idle(ready: usize) -> Self {
        Self {
            ready,
            ..Self::default()
        }
    }
    pub fn queue(mut self, q: f64) -> Self {
        self.queue = q;
        self
    }
    pub fn running(mut self, r: f64) -> Self {
        self.running = r;
        self
    }
    pub fn finished(mut self, f: f64) -> Self {
        self.finished = f;
        self
    }
    pub fn p95(mut self, s: f64) -> Self {
        self.e2e_p95 = Some(s);
        self
    }
    pub fn ttft(mut self, s: f64) -> Self {
        self.ttft_p95 = Some(s);
        self
    }
    pub fn itl(mut self, s: f64) -> Self {
        self.itl_p95 = Some(s);
        self
    }
    pub fn kv(mut self, f: f64) -> Self {
        self.kv_max = Some(f);
        self
    }
    pub fn preempt(mut self, r: f64) -> Self {
        self.preemptions_per_second = Some(r);
        self
    }
    pub fn gpu_mem(mut self, f: f64) -> Self {
        self.gpu_memory_max = Some(f);
        self
    }
    pub fn ready(mut self, n: usize) -> Self {
        self.ready = n;
        self
    }
    pub fn unknown(mut self, n: usize) -> Self {
        self.unknown = n;
        self
    }

    /// The signals the policy sees at `at`.
    pub fn signals(&self, at: Duration) -> FleetSignals {
        FleetSignals {
            at,
            pods_total: self.ready + self.unknown,
            pods_healthy: self.ready,
            fleet: SignalSet {
                queue_depth: self.queue,
                running: self.running,
                e2e_latency_seconds: Quantiles {
                    p95: self.e2e_p95,
                    ..Quantiles::default()
                },
                ttft_seconds: Quantiles {
                    p95: self.ttft_p95,
                    ..Quantiles::default()
                },
                itl_seconds: Quantiles {
                    p95: self.itl_p95,
                    ..Quantiles::default()
                },
                requests_finished_in_window: self.finished,
                kv_cache_usage: MaxMean {
                    max: self.kv_max,
                    mean: self.kv_max,
                },
                preemptions_per_second: self.preemptions_per_second,
                ..SignalSet::default()
            },
            gpu: self.gpu_memory_max.map(|m| GpuSignals {
                memory_used_fraction: MaxMean {
                    max: Some(m),
                    mean: Some(m),
                },
                gpus: self.ready,
                ..GpuSignals::default()
            }),
            pods: Vec::new(),
        }
    }
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Decides every `step_s` seconds over `[from_s, to_s)`, with the load a function of time.
pub fn run(
    policy: &Policy,
    state: &mut PolicyState,
    from_s: u64,
    to_s: u64,
    step_s: u64,
    mut load: impl FnMut(u64) -> Load,
) -> Vec<(u64, Decision)> {
    (from_s..to_s)
        .step_by(step_s as usize)
        .map(|t| {
            let d = policy.decide(secs(t), &load(t).signals(secs(t)), state);
            (t, d)
        })
        .collect()
}

/// The instants where the target changed, with the new target and reason.
pub fn changes(
    decisions: &[(u64, Decision)],
    start: u32,
) -> Vec<(u64, u32, vllm_keda_core::policy::Reason)> {
    let mut last = start;
    let mut out = Vec::new();
    for (t, d) in decisions {
        if d.target_replicas != last {
            out.push((*t, d.target_replicas, d.reason));
            last = d.target_replicas;
        }
    }
    out
}
