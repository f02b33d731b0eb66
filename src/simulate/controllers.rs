//! The policies compared by the simulator, each with its actuation path.
//!
//! - [`Ours`]: the production path. Every scrape interval each ready replica's `/metrics` body
//!   is rendered, parsed by [`crate::exposition`], turned into signals by [`crate::signals`] and
//!   decided on by [`crate::policy`]; every HPA sync the HPA reads the target through KEDA's
//!   `AverageValue` metric (target 1).
//! - [`PrometheusKeda`]: the source guide's setup. Prometheus scrapes every 15-30 s; each HPA
//!   sync evaluates `sum(vllm:num_requests_waiting)` (threshold 25) and the P95 of
//!   `rate(..._bucket[1m])` (threshold 5) as `AverageValue` triggers, with the guide's
//!   behaviour (+2 per 60 s after 30 s; -1 per 120 s after 300 s).
//! - [`Static`]: a fixed fleet.
//! - [`Oracle`]: knows every future arrival and the start-up delay, and provisions just enough
//!   capacity just in time: a reference for the least GPU time a policy could spend.
//!
//! Does not own: the fleet loop ([`super::fleet`]).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::config::ScalerConfig;
use crate::emulator::{RenderInfo, RequestShape, render};
use crate::exposition;
use crate::policy::{Policy, PolicyState};
use crate::signals::{FleetWindow, PodSnapshot, SignalSettings};
use crate::trace::TraceRequest;

use super::fleet::{Controller, Fleet};
use super::hpa::{AverageValueMetric, Hpa, HpaSpec, RatePolicy, ScalingRules, SelectPolicy};
use super::prometheus::{PrometheusStore, ReplicaSample};

/// The HPA controller's default sync period.
pub const HPA_SYNC: Duration = Duration::from_secs(15);

/// KEDA's value conversion: rounded to 3 decimals; negative or NaN become 0.
pub fn keda_value(v: f64) -> f64 {
    if v.is_nan() || v < 0.0 {
        0.0
    } else {
        (v * 1000.0).round() / 1000.0
    }
}

/// The HPA behaviour we ship beside our scaler: no HPA-side stabilisation or tight limits
/// (our policy already stabilises and rate-limits), and a zero scale-down tolerance (the
/// per-HPA `tolerance` of Kubernetes 1.33+) so a one-pod step at 10+ replicas is not swallowed.
pub fn ours_hpa_spec(min_replicas: u32, max_replicas: u32) -> HpaSpec {
    let mut spec = HpaSpec::kubernetes_default(min_replicas, max_replicas);
    spec.scale_down.stabilization = Duration::ZERO;
    spec.scale_down.tolerance = 0.0;
    spec
}

/// The source guide's ScaledObject behaviour.
pub fn guide_hpa_spec(min_replicas: u32, max_replicas: u32) -> HpaSpec {
    HpaSpec {
        min_replicas,
        max_replicas,
        scale_up: ScalingRules {
            stabilization: Duration::from_secs(30),
            policies: vec![RatePolicy::Pods {
                value: 2,
                period: Duration::from_secs(60),
            }],
            select: SelectPolicy::Max,
            tolerance: 0.1,
        },
        scale_down: ScalingRules {
            stabilization: Duration::from_secs(300),
            policies: vec![RatePolicy::Pods {
                value: 1,
                period: Duration::from_secs(120),
            }],
            select: SelectPolicy::Max,
            tolerance: 0.1,
        },
    }
}

/// Our scaler, through the production signals and policy code.
#[derive(Debug)]
pub struct Ours {
    policy: Policy,
    state: PolicyState,
    window: FleetWindow,
    model: Option<String>,
    scrape_interval: Duration,
    next_scrape: Duration,
    hpa: Hpa,
    next_sync: Duration,
    target: u32,
    body: String,
    names: Vec<String>,
    /// Decisions by reason code, for the report.
    pub reasons: HashMap<&'static str, usize>,
}

impl Ours {
    /// Our policy configured from scaler metadata (validated by the production code);
    /// `minReplicas`/`maxReplicas` come from the metadata too. The fleet starts with
    /// `initial` replicas.
    pub fn new(config: &ScalerConfig, initial: u32) -> Self {
        let policy = Policy::new(config.policy.clone());
        let min = policy.config.min_replicas;
        let max = policy.config.max_replicas;
        Self {
            window: FleetWindow::new(SignalSettings {
                model: config.model.clone(),
                ..SignalSettings::default()
            }),
            model: config.model.clone(),
            scrape_interval: config.scrape_interval,
            next_scrape: Duration::ZERO,
            hpa: Hpa::with_steady_history(ours_hpa_spec(min, max), Duration::ZERO, initial),
            next_sync: HPA_SYNC,
            target: initial,
            body: String::with_capacity(64 * 1024),
            names: Vec::new(),
            reasons: HashMap::new(),
            state: PolicyState::default(),
            policy,
        }
    }
}

impl Controller for Ours {
    fn next_wake(&self) -> Option<Duration> {
        Some(self.next_scrape.min(self.next_sync))
    }

    fn wake(&mut self, now: Duration, fleet: &Fleet) -> Option<u32> {
        if self.next_scrape <= now {
            self.names.clear();
            for replica in fleet.ready() {
                self.body.clear();
                let info = RenderInfo {
                    model_name: self
                        .model
                        .as_deref()
                        .unwrap_or("meta-llama/Llama-3.1-8B-Instruct"),
                    engine_index: 0,
                    start_unix_seconds: 1.767e9 + replica.created.as_secs_f64(),
                    http: None,
                };
                render(&replica.engine, &info, &mut self.body);
                let snapshot = exposition::parse(&self.body)
                    .ok()
                    .map(|e| PodSnapshot::from_exposition(&e, self.model.as_deref()));
                self.window.record(now, &replica.name, snapshot);
                self.names.push(replica.name.clone());
            }
            self.window.retain_pods(&self.names);
            let signals = self.window.compute(now);
            let decision = self.policy.decide(now, &signals, &mut self.state);
            *self.reasons.entry(decision.reason.as_str()).or_default() += 1;
            self.target = decision.target_replicas;
            self.next_scrape += self.scrape_interval;
        }
        if self.next_sync <= now {
            self.next_sync += HPA_SYNC;
            let metric = AverageValueMetric {
                value: keda_value(f64::from(self.target)),
                target: 1.0,
            };
            return Some(self.hpa.sync(now, &[metric], fleet.desired()));
        }
        None
    }
}

/// Settings of the source guide's Prometheus + KEDA setup.
#[derive(Debug, Clone, PartialEq)]
pub struct PrometheusKedaSettings {
    /// Prometheus's scrape interval (15-30 s in the guide).
    pub scrape_interval: Duration,
    /// The `rate` range of the latency query (1 m).
    pub rate_range: Duration,
    /// `sum(vllm:num_requests_waiting)` threshold (25).
    pub queue_threshold: f64,
    /// P95 latency threshold (5).
    pub latency_threshold: f64,
}

impl Default for PrometheusKedaSettings {
    fn default() -> Self {
        Self {
            scrape_interval: Duration::from_secs(15),
            rate_range: Duration::from_secs(60),
            queue_threshold: 25.0,
            latency_threshold: 5.0,
        }
    }
}

/// The source guide's Prometheus + KEDA chain.
#[derive(Debug)]
pub struct PrometheusKeda {
    settings: PrometheusKedaSettings,
    store: PrometheusStore,
    scraped: BTreeSet<u64>,
    next_scrape: Duration,
    hpa: Hpa,
    next_sync: Duration,
}

impl PrometheusKeda {
    /// The guide's setup with the given replica bounds, starting with `initial` replicas.
    pub fn new(
        settings: PrometheusKedaSettings,
        min_replicas: u32,
        max_replicas: u32,
        initial: u32,
    ) -> Self {
        Self {
            settings,
            store: PrometheusStore::new(),
            scraped: BTreeSet::new(),
            next_scrape: Duration::ZERO,
            hpa: Hpa::with_steady_history(
                guide_hpa_spec(min_replicas, max_replicas),
                Duration::ZERO,
                initial,
            ),
            next_sync: HPA_SYNC,
        }
    }
}

impl Controller for PrometheusKeda {
    fn next_wake(&self) -> Option<Duration> {
        Some(self.next_scrape.min(self.next_sync))
    }

    fn wake(&mut self, now: Duration, fleet: &Fleet) -> Option<u32> {
        if self.next_scrape <= now {
            let mut seen = BTreeSet::new();
            for replica in fleet.ready() {
                let histogram = &replica.engine.stats().e2e_request_latency;
                let mut e2e_buckets: Vec<(f64, f64)> = histogram
                    .bounds()
                    .iter()
                    .copied()
                    .zip(histogram.cumulative().map(|c| c as f64))
                    .collect();
                e2e_buckets.push((f64::INFINITY, histogram.count() as f64));
                self.store.ingest(
                    now,
                    replica.id,
                    ReplicaSample {
                        waiting: replica.engine.published_gauges().waiting as f64,
                        e2e_buckets,
                    },
                );
                seen.insert(replica.id);
            }
            for gone in self.scraped.difference(&seen) {
                self.store.mark_gone(*gone);
            }
            self.scraped = seen;
            self.next_scrape += self.settings.scrape_interval;
        }
        if self.next_sync <= now {
            self.next_sync += HPA_SYNC;
            let p95 = self
                .store
                .e2e_quantile(now, self.settings.rate_range, 0.95)
                .unwrap_or(0.0);
            let metrics = [
                AverageValueMetric {
                    value: keda_value(self.store.sum_waiting(now)),
                    target: self.settings.queue_threshold,
                },
                AverageValueMetric {
                    value: keda_value(p95),
                    target: self.settings.latency_threshold,
                },
            ];
            return Some(self.hpa.sync(now, &metrics, fleet.desired()));
        }
        None
    }
}

/// A fixed fleet.
#[derive(Debug, Clone, Copy)]
pub struct Static;

impl Controller for Static {
    fn next_wake(&self) -> Option<Duration> {
        None
    }

    fn wake(&mut self, _now: Duration, _fleet: &Fleet) -> Option<u32> {
        None
    }
}

/// Settings of the oracle's capacity plan.
#[derive(Debug, Clone, PartialEq)]
pub struct OracleSettings {
    /// Planning bucket.
    pub bucket: Duration,
    /// Share of a replica's saturation throughput it plans to use (headroom for TTFT).
    pub utilisation: f64,
}

impl Default for OracleSettings {
    fn default() -> Self {
        Self {
            bucket: Duration::from_secs(60),
            utilisation: 0.8,
        }
    }
}

/// The future-knowing reference: a replica plan computed from the whole trace.
#[derive(Debug, Clone)]
pub struct Oracle {
    plan: Vec<(Duration, u32)>,
    next: usize,
}

impl Oracle {
    /// Plans replicas so each bucket's work fits in `utilisation` of the replicas' saturation
    /// throughput (from the engine model), kept while the previous bucket's requests may still
    /// run, and ordered `startup_delay` ahead: at each bucket it asks for the most any bucket
    /// starting within the next `startup_delay` needs. Clamped to [min, max].
    pub fn new(
        requests: &[TraceRequest],
        engine: &crate::emulator::EngineConfig,
        settings: &OracleSettings,
        startup_delay: Duration,
        min_replicas: u32,
        max_replicas: u32,
    ) -> Self {
        let needed = Self::needed_per_bucket(requests, engine, settings);
        let hold: Vec<u32> = (0..needed.len())
            .map(|b| needed[b].max(if b > 0 { needed[b - 1] } else { 0 }))
            .collect();
        let ahead = startup_delay.as_secs_f64() / settings.bucket.as_secs_f64();
        let ahead = ahead.ceil() as usize;
        let mut plan: Vec<(Duration, u32)> = Vec::new();
        for b in 0..hold.len() {
            let upto = (b + ahead).min(hold.len() - 1);
            let replicas = hold[b..=upto]
                .iter()
                .copied()
                .max()
                .unwrap_or(0)
                .clamp(min_replicas, max_replicas);
            if plan.last().map(|p| p.1) != Some(replicas) {
                plan.push((settings.bucket * b as u32, replicas));
            }
        }
        Self { plan, next: 0 }
    }

    /// Replicas each planning bucket needs.
    pub fn needed_per_bucket(
        requests: &[TraceRequest],
        engine: &crate::emulator::EngineConfig,
        settings: &OracleSettings,
    ) -> Vec<u32> {
        let bucket_seconds = settings.bucket.as_secs_f64();
        let Some(last) = requests.last() else {
            return Vec::new();
        };
        let buckets = (last.arrival.as_secs_f64() / bucket_seconds) as usize + 1;
        let mut work = vec![0.0f64; buckets];
        let mut cache: HashMap<(u32, u32), f64> = HashMap::new();
        for r in requests {
            // Replica-seconds this request takes at saturation throughput for its shape,
            // bucketed by 64 tokens to keep the prediction cache small.
            let key = (
                r.prompt_tokens.div_ceil(64) * 64,
                r.output_tokens.div_ceil(16) * 16,
            );
            let seconds = *cache.entry(key).or_insert_with(|| {
                let p = engine.predicted_saturation(RequestShape {
                    prompt_tokens: key.0.max(1),
                    output_tokens: key.1.max(1),
                });
                1.0 / p.requests_per_second
            });
            let b = (r.arrival.as_secs_f64() / bucket_seconds) as usize;
            work[b.min(buckets - 1)] += seconds;
        }
        work.iter()
            .map(|w| (w / (bucket_seconds * settings.utilisation)).ceil() as u32)
            .collect()
    }

    /// The replica count the plan starts with.
    pub fn initial(&self) -> u32 {
        self.plan.first().map_or(1, |p| p.1)
    }
}

impl Controller for Oracle {
    fn next_wake(&self) -> Option<Duration> {
        self.plan.get(self.next).map(|p| p.0)
    }

    fn wake(&mut self, now: Duration, _fleet: &Fleet) -> Option<u32> {
        let mut target = None;
        while self.plan.get(self.next).is_some_and(|p| p.0 <= now) {
            target = Some(self.plan[self.next].1);
            self.next += 1;
        }
        target
    }
}
