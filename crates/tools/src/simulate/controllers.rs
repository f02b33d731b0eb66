//! The policies compared by the simulator, each with its actuation path.
//!
//! - [`Ours`]: the production path. Every scrape interval each ready replica's `/metrics` body
//!   is rendered and handed to the core's [`Scaler`] (parse, signals, policy: the entry point
//!   the service's control loop calls); every HPA sync the HPA reads the target through KEDA's
//!   `AverageValue` metric (target 1).
//! - [`PrometheusKeda`]: the source guide's setup. Prometheus scrapes every 15-30 s; each HPA
//!   sync evaluates `sum(vllm:num_requests_waiting)` (threshold 25) and the P95 of
//!   `rate(..._bucket[1m])` (threshold 5) as `AverageValue` triggers, with the guide's
//!   behaviour (+2 per 60 s after 30 s; -1 per 120 s after 300 s).
//! - [`Kpa`]: the Knative Pod Autoscaler's concurrency algorithm (stable and panic windows),
//!   actuating the Deployment directly (no HPA, no KEDA).
//! - [`Static`]: a fixed fleet.
//! - [`Oracle`]: knows every future arrival and the start-up delay, and provisions just enough
//!   capacity just in time: a reference for the least GPU time a policy could spend.
//!
//! Does not own: the fleet loop ([`super::fleet`]).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use crate::trace::TraceRequest;
use vllm_emulator::{RenderInfo, RequestShape, render};
use vllm_keda_core::config::ScalerConfig;
use vllm_keda_core::policy::proactive::Persisted;
use vllm_keda_core::policy::proactive::hindsight::StaticComparison;
use vllm_keda_core::policy::{CurrentReplicas, ReplicaSource};
use vllm_keda_core::{Scaler, ScrapeRound, Step};

use super::fleet::{Autoscaler, DecisionNote, VirtualFleet};
use super::prometheus::{HistogramSeries, PrometheusStore, ReplicaSample};
use crate::keda::hpa::{AverageValueMetric, Hpa};
use crate::keda::{HPA_SYNC, guide_hpa_spec, keda_value, ours_hpa_spec};

/// A scaler pod restart during a run: at `at` the running scaler is replaced by a fresh one,
/// which starts from what the old one learned (`keeps_learning`, as with
/// `--learned-state-configmap`) or from nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Restart {
    /// When the pod restarts, from the run's start.
    pub at: Duration,
    /// Whether the new pod inherits the old one's learning.
    pub keeps_learning: bool,
}

/// Our scaler, through the production path: the core's [`Scaler`], the same entry point the
/// service's control loop calls, fed with the bodies the ready replicas render.
#[derive(Debug)]
pub struct Ours {
    scaler: Scaler,
    config: ScalerConfig,
    /// A scaler pod restart still to come.
    restart: Option<Restart>,
    /// When the running scaler started: its clock reads from here, as a pod's loop reads
    /// time since it started. Zero until a restart, which happens at a positive time.
    epoch: Duration,
    model: Option<String>,
    scrape_interval: Duration,
    next_scrape: Duration,
    hpa: Hpa,
    next_sync: Duration,
    target: u32,
    bodies: Vec<String>,
    /// Decisions by reason code, for the report.
    pub reasons: HashMap<&'static str, usize>,
    /// Decisions whose target or reason changed, with their explanations.
    decisions: Vec<DecisionNote>,
    /// Ready replicas at the latest scrape.
    ready: u32,
}

impl Ours {
    /// Our policy configured from scaler metadata (validated by the production code);
    /// `minReplicas`/`maxReplicas` come from the metadata too. The fleet starts with
    /// `initial` replicas.
    pub fn new(config: &ScalerConfig, initial: u32) -> Self {
        let scaler = Scaler::new(config);
        let min = scaler.policy_config().min_replicas;
        let max = scaler.policy_config().max_replicas;
        Self {
            scaler,
            config: config.clone(),
            restart: None,
            epoch: Duration::ZERO,
            model: config.model.clone(),
            scrape_interval: config.scrape_interval,
            next_scrape: Duration::ZERO,
            hpa: Hpa::with_steady_history(ours_hpa_spec(min, max), Duration::ZERO, initial),
            next_sync: HPA_SYNC,
            target: initial,
            bodies: Vec::new(),
            reasons: HashMap::new(),
            decisions: Vec::new(),
            ready: initial,
        }
    }

    /// Starts the proactive policy from what an earlier run learned, as a scaler pod starts
    /// from `--learned-state-configmap` (nothing under the guide's policy).
    pub fn inherit(&mut self, learned: &Persisted) {
        self.scaler.inherit(learned);
    }

    /// Restarts the scaler pod once during the run (`None`: never).
    pub fn restarting(mut self, restart: Option<Restart>) -> Self {
        self.restart = restart;
        self
    }

    /// The pod restarts: a fresh scaler, starting from the old one's learning when it is kept,
    /// its clock from now.
    fn restart_now(&mut self, now: Duration, keeps_learning: bool) {
        let learned = self.scaler.persisted().filter(|_| keeps_learning);
        self.scaler = Scaler::new(&self.config);
        if let Some(p) = &learned {
            self.scaler.inherit(p);
        }
        self.epoch = now;
        self.decisions.push(DecisionNote {
            t_seconds: now.as_secs_f64(),
            ready: self.ready,
            target: self.target,
            reason: "scaler_restart",
            explanation: if learned.is_some() {
                "the scaler pod restarted; the new pod starts from what the old one learned (--learned-state-configmap)".to_owned()
            } else {
                "the scaler pod restarted; the new pod starts from nothing".to_owned()
            },
        });
    }

    /// One scrape interval of the production path: the bodies of one round, by target name, in,
    /// the decision out. `wake` calls it with the bodies the ready replicas render.
    pub fn observe<'a>(
        &mut self,
        now: Duration,
        bodies: impl IntoIterator<Item = (String, &'a str)>,
    ) -> Step {
        let round = ScrapeRound::<()>::parse(
            bodies.into_iter().map(|(name, body)| (name, Ok(body))),
            [],
            self.model.as_deref(),
        );
        let step = self.scaler.step(now.saturating_sub(self.epoch), round);
        *self
            .reasons
            .entry(step.decision.reason.as_str())
            .or_default() += 1;
        self.target = step.decision.target_replicas;
        let d = &step.decision;
        let changed = self.decisions.last().is_none_or(|last| {
            last.target != d.target_replicas || last.reason != d.reason.as_str()
        });
        if changed {
            self.decisions.push(DecisionNote {
                t_seconds: now.as_secs_f64(),
                ready: self.ready,
                target: d.target_replicas,
                reason: d.reason.as_str(),
                explanation: d.explanation.clone(),
            });
        }
        step
    }
}

impl Autoscaler for Ours {
    fn next_wake(&self) -> Option<Duration> {
        Some(self.next_scrape.min(self.next_sync))
    }

    fn take_decisions(&mut self) -> Vec<DecisionNote> {
        std::mem::take(&mut self.decisions)
    }

    fn learned_state(&self) -> Option<Persisted> {
        self.scaler.persisted()
    }

    fn hindsight(&self) -> Option<StaticComparison> {
        self.scaler.hindsight().cloned()
    }

    fn wake(&mut self, now: Duration, fleet: &VirtualFleet) -> Option<u32> {
        if self.next_scrape <= now {
            if let Some(r) = self.restart.filter(|r| r.at <= now) {
                self.restart = None;
                self.restart_now(now, r.keeps_learning);
            }
            let ready: Vec<_> = fleet.ready().collect();
            self.ready = u32::try_from(ready.len()).unwrap_or(u32::MAX);
            if !self.epoch.is_zero() {
                // A restarted pod is told the scale target's replicas, as the service's loop
                // tells it from the `/scale` subresource.
                self.scaler.set_current_replicas(Some(CurrentReplicas {
                    spec: fleet.desired(),
                    ready: Some(self.ready),
                    source: ReplicaSource::ScaleSubresource,
                }));
            }
            let mut bodies = std::mem::take(&mut self.bodies);
            bodies.resize_with(bodies.len().max(ready.len()), || {
                String::with_capacity(64 * 1024)
            });
            for (replica, body) in ready.iter().zip(bodies.iter_mut()) {
                body.clear();
                let info = RenderInfo {
                    model_name: self
                        .model
                        .as_deref()
                        .unwrap_or("meta-llama/Llama-3.1-8B-Instruct"),
                    engine_index: 0,
                    start_unix_seconds: 1.767e9 + replica.created.as_secs_f64(),
                    http: None,
                };
                render(&replica.engine, &info, body);
            }
            self.observe(
                now,
                ready
                    .iter()
                    .zip(&bodies)
                    .map(|(replica, body)| (replica.name.clone(), body.as_str())),
            );
            self.bodies = bodies;
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

impl Autoscaler for PrometheusKeda {
    fn next_wake(&self) -> Option<Duration> {
        Some(self.next_scrape.min(self.next_sync))
    }

    fn wake(&mut self, now: Duration, fleet: &VirtualFleet) -> Option<u32> {
        if self.next_scrape <= now {
            scrape_into(&mut self.store, &mut self.scraped, now, fleet, false);
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

fn buckets_of(histogram: &vllm_emulator::stats::EngineHistogram) -> Vec<(f64, f64)> {
    let mut buckets: Vec<(f64, f64)> = histogram
        .bounds()
        .iter()
        .copied()
        .zip(histogram.cumulative().map(|c| c as f64))
        .collect();
    buckets.push((f64::INFINITY, histogram.count() as f64));
    buckets
}

/// One Prometheus scrape of every ready replica into `store` (the latency histograms beyond
/// end-to-end only when `all_histograms`); replicas gone since the last scrape are marked stale.
fn scrape_into(
    store: &mut PrometheusStore,
    scraped: &mut BTreeSet<u64>,
    now: Duration,
    fleet: &VirtualFleet,
    all_histograms: bool,
) {
    let mut seen = BTreeSet::new();
    for replica in fleet.ready() {
        let stats = replica.engine.stats();
        let gauges = replica.engine.published_gauges();
        store.ingest(
            now,
            replica.id,
            ReplicaSample {
                waiting: gauges.waiting as f64,
                running: gauges.running as f64,
                e2e_buckets: buckets_of(&stats.e2e_request_latency),
                ttft_buckets: if all_histograms {
                    buckets_of(&stats.time_to_first_token)
                } else {
                    Vec::new()
                },
                itl_buckets: if all_histograms {
                    buckets_of(&stats.inter_token_latency)
                } else {
                    Vec::new()
                },
            },
        );
        seen.insert(replica.id);
    }
    for gone in scraped.difference(&seen) {
        store.mark_gone(*gone);
    }
    *scraped = seen;
}

/// Settings of `prometheus-keda-tuned`: the guide's Prometheus -> KEDA -> HPA chain as an
/// expert would configure it. Three triggers: TTFT P95 and ITL P95 as `metricType: Value`
/// (the HPA asks for `ceil(current x p95 / threshold)`, so the answer scales with the fleet,
/// unlike the guide's `AverageValue` P95), and running plus waiting requests as
/// `AverageValue` (a per-replica concurrency target); the HPA's default behaviour (up by
/// max(+4, +100 %) per 15 s, down after a 300 s window).
#[derive(Debug, Clone, PartialEq)]
pub struct PrometheusKedaTunedSettings {
    /// Prometheus's scrape interval.
    pub scrape_interval: Duration,
    /// The `rate` range of the latency queries.
    pub rate_range: Duration,
    /// TTFT P95 threshold, seconds (`metricType: Value`).
    pub ttft_threshold: f64,
    /// ITL P95 threshold, seconds (`metricType: Value`).
    pub itl_threshold: f64,
    /// Running plus waiting requests per replica (`AverageValue`).
    pub in_flight_per_replica: f64,
}

impl Default for PrometheusKedaTunedSettings {
    /// Chosen on the training scenarios only (see EVALUATION.md): TTFT half the 2 s SLO,
    /// ITL 60 % of the 100 ms TPOT SLO, 96 in flight per replica.
    fn default() -> Self {
        Self {
            scrape_interval: Duration::from_secs(15),
            rate_range: Duration::from_secs(60),
            ttft_threshold: 1.0,
            itl_threshold: 0.06,
            in_flight_per_replica: PROMETHEUS_KEDA_TUNED_DEFAULT_IN_FLIGHT,
        }
    }
}

/// The default running-plus-waiting target per replica of `prometheus-keda-tuned`.
pub const PROMETHEUS_KEDA_TUNED_DEFAULT_IN_FLIGHT: f64 = 96.0;

/// The tuned Prometheus + KEDA chain (see [`PrometheusKedaTunedSettings`]).
#[derive(Debug)]
pub struct PrometheusKedaTuned {
    settings: PrometheusKedaTunedSettings,
    store: PrometheusStore,
    scraped: BTreeSet<u64>,
    next_scrape: Duration,
    hpa: Hpa,
    next_sync: Duration,
}

impl PrometheusKedaTuned {
    /// The tuned chain with the given replica bounds, starting with `initial` replicas.
    pub fn new(
        settings: PrometheusKedaTunedSettings,
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
                crate::keda::hpa::HpaSpec::kubernetes_default(min_replicas, max_replicas),
                Duration::ZERO,
                initial,
            ),
            next_sync: HPA_SYNC,
        }
    }
}

impl Autoscaler for PrometheusKedaTuned {
    fn next_wake(&self) -> Option<Duration> {
        Some(self.next_scrape.min(self.next_sync))
    }

    fn wake(&mut self, now: Duration, fleet: &VirtualFleet) -> Option<u32> {
        if self.next_scrape <= now {
            scrape_into(&mut self.store, &mut self.scraped, now, fleet, true);
            self.next_scrape += self.settings.scrape_interval;
        }
        if self.next_sync <= now {
            self.next_sync += HPA_SYNC;
            let current = fleet.desired();
            let range = self.settings.rate_range;
            let ttft = self
                .store
                .quantile(HistogramSeries::Ttft, now, range, 0.95)
                .unwrap_or(0.0);
            let itl = self
                .store
                .quantile(HistogramSeries::Itl, now, range, 0.95)
                .unwrap_or(0.0);
            // A `Value` metric is an `AverageValue` one whose value is multiplied by the
            // current replica count: the same usage ratio, the same ceil(current x ratio).
            let value = |v: f64| keda_value(v) * f64::from(current.max(1));
            let metrics = [
                AverageValueMetric {
                    value: value(ttft),
                    target: self.settings.ttft_threshold,
                },
                AverageValueMetric {
                    value: value(itl),
                    target: self.settings.itl_threshold,
                },
                AverageValueMetric {
                    value: keda_value(self.store.sum_in_flight(now)),
                    target: self.settings.in_flight_per_replica,
                },
            ];
            return Some(self.hpa.sync(now, &metrics, current));
        }
        None
    }
}

/// The concurrency target per replica `kpa` uses when none is given: the emulated replica's
/// `max_num_seqs` (256), the concurrency at which its batch is full. Beyond it requests wait and
/// TTFT grows without bound; up to it the conversation mix (1,155 / 211 tokens) stays inside the
/// 100 ms TPOT SLO (predicted saturation 15.9 req/s with 256 running: 13 steps per second, 76 ms
/// per step). With Knative's 70 % target utilisation the autoscaler aims at 179.2 per replica.
pub const KPA_DEFAULT_TARGET: f64 = 256.0;

/// Settings of the Knative Pod Autoscaler model (Knative's documented defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct KpaSettings {
    /// `container-concurrency-target-default` (per replica, before utilisation).
    pub target: f64,
    /// `container-concurrency-target-percentage` (70 %): the effective target is
    /// `target x utilisation`.
    pub utilisation: f64,
    /// The autoscaler's tick (2 s); concurrency is sampled at each tick.
    pub tick: Duration,
    /// `stable-window` (60 s).
    pub stable_window: Duration,
    /// `panic-window-percentage` (10 %) of the stable window: 6 s.
    pub panic_window: Duration,
    /// `panic-threshold-percentage` (200 %) as a ratio of desired to ready replicas.
    pub panic_threshold: f64,
    /// `max-scale-up-rate` (1000): at most `ceil(rate x ready)` per tick.
    pub max_scale_up_rate: f64,
    /// `max-scale-down-rate` (2): at least `floor(ready / rate)` per tick.
    pub max_scale_down_rate: f64,
    /// `scale-down-delay` (0 s by default): the autoscaler applies the highest decision of
    /// this window, so a scale-down waits until the lower demand has held for the delay.
    pub scale_down_delay: Duration,
}

impl KpaSettings {
    /// Knative's defaults with the given target per replica.
    pub fn with_target(target: f64) -> Self {
        Self {
            target,
            utilisation: 0.7,
            tick: Duration::from_secs(2),
            stable_window: Duration::from_secs(60),
            panic_window: Duration::from_secs(6),
            panic_threshold: 2.0,
            max_scale_up_rate: 1000.0,
            max_scale_down_rate: 2.0,
            scale_down_delay: Duration::ZERO,
        }
    }

    /// Knative's defaults with the given target, stable window (the panic window stays 10 %
    /// of it) and scale-down delay.
    pub fn with_windows(target: f64, stable_window: Duration, scale_down_delay: Duration) -> Self {
        Self {
            stable_window,
            panic_window: stable_window.mul_f64(0.1),
            scale_down_delay,
            ..Self::with_target(target)
        }
    }

    /// The concurrency per replica the autoscaler aims at.
    pub fn effective_target(&self) -> f64 {
        self.target * self.utilisation
    }
}

impl Default for KpaSettings {
    fn default() -> Self {
        Self::with_target(KPA_DEFAULT_TARGET)
    }
}

/// The Knative Pod Autoscaler: every tick it samples the fleet's concurrency (running + waiting
/// on every ready replica), averages it over the stable and panic windows and sizes the fleet
/// so each replica holds the effective target. It panics when the panic window asks for at
/// least twice the ready replicas; in panic it follows the panic window and never scales down,
/// and it leaves panic once a stable window passes without the condition. Knative actuates the
/// Deployment directly: the answer is the new replica count.
#[derive(Debug, Clone)]
pub struct Kpa {
    settings: KpaSettings,
    min_replicas: u32,
    max_replicas: u32,
    initial: u32,
    samples: VecDeque<(Duration, f64)>,
    next_tick: Duration,
    /// Last instant the panic condition held, while in panic.
    panic_since: Option<Duration>,
    max_panic_pods: u32,
    /// Decisions within the scale-down delay.
    recent: VecDeque<(Duration, u32)>,
    /// Ticks that were in panic mode, for tests and reports.
    pub panic_ticks: usize,
}

impl Kpa {
    /// A KPA with the given settings and replica bounds, over a fleet of `initial` replicas;
    /// first tick at time 0. Until it has watched one stable window it keeps at least
    /// `initial`: a KPA that ran before the trace started would have seen the opening load
    /// (the other policies start with a steady history the same way), not an empty window.
    pub fn new(settings: KpaSettings, min_replicas: u32, max_replicas: u32, initial: u32) -> Self {
        Self {
            settings,
            min_replicas,
            max_replicas,
            initial,
            samples: VecDeque::new(),
            next_tick: Duration::ZERO,
            panic_since: None,
            max_panic_pods: 0,
            recent: VecDeque::new(),
            panic_ticks: 0,
        }
    }

    /// Whether the last decision was taken in panic mode.
    pub fn in_panic(&self) -> bool {
        self.panic_since.is_some()
    }

    /// Mean of the samples newer than `window` before `now` (all of them early in the run).
    fn window_average(&self, now: Duration, window: Duration) -> f64 {
        let from = now.checked_sub(window);
        let (sum, n) = self
            .samples
            .iter()
            .filter(|(t, _)| from.is_none_or(|f| *t > f))
            .fold((0.0, 0usize), |(s, n), (_, c)| (s + c, n + 1));
        if n == 0 { 0.0 } else { sum / n as f64 }
    }

    /// One tick: records `concurrency` (the fleet's total in-flight requests) at `now` and
    /// returns the desired replica count given `ready` replicas.
    pub fn decide(&mut self, now: Duration, concurrency: f64, ready: u32) -> u32 {
        self.samples.push_back((now, concurrency));
        let keep_from = now.checked_sub(self.settings.stable_window);
        while self
            .samples
            .front()
            .is_some_and(|(t, _)| keep_from.is_some_and(|f| *t <= f))
        {
            self.samples.pop_front();
        }
        let stable = self.window_average(now, self.settings.stable_window);
        let panic = self.window_average(now, self.settings.panic_window);
        let ready = ready.max(1);
        let target = self.settings.effective_target();
        let max_up = (self.settings.max_scale_up_rate * f64::from(ready)).ceil();
        let max_down = (f64::from(ready) / self.settings.max_scale_down_rate).floor();
        let limit = |wanted: f64| wanted.ceil().clamp(max_down, max_up) as u32;
        let stable_pods = limit(stable / target);
        let panic_pods = limit(panic / target);
        let over = f64::from(panic_pods) / f64::from(ready) >= self.settings.panic_threshold;
        if over {
            self.panic_since = Some(now);
        } else if self
            .panic_since
            .is_some_and(|since| now > since + self.settings.stable_window)
        {
            self.panic_since = None;
            self.max_panic_pods = 0;
        }
        let desired = if self.panic_since.is_some() {
            self.panic_ticks += 1;
            // In panic: follow the panic window, never below what panic already asked for.
            self.max_panic_pods = self.max_panic_pods.max(panic_pods);
            self.max_panic_pods
        } else {
            stable_pods
        };
        let desired = if now < self.settings.stable_window {
            desired.max(self.initial)
        } else {
            desired
        };
        let desired = desired.clamp(self.min_replicas, self.max_replicas);
        if self.settings.scale_down_delay.is_zero() {
            return desired;
        }
        // Knative's delay window: the highest decision within the delay is applied.
        self.recent.push_back((now, desired));
        let keep_from = now.checked_sub(self.settings.scale_down_delay);
        while self
            .recent
            .front()
            .is_some_and(|(t, _)| keep_from.is_some_and(|f| *t <= f))
        {
            self.recent.pop_front();
        }
        self.recent.iter().map(|r| r.1).max().unwrap_or(desired)
    }
}

impl Autoscaler for Kpa {
    fn next_wake(&self) -> Option<Duration> {
        Some(self.next_tick)
    }

    fn wake(&mut self, now: Duration, fleet: &VirtualFleet) -> Option<u32> {
        if self.next_tick > now {
            return None;
        }
        self.next_tick += self.settings.tick;
        let mut ready = 0u32;
        let mut concurrency = 0usize;
        for replica in fleet.ready() {
            let gauges = replica.engine.published_gauges();
            concurrency += gauges.running + gauges.waiting;
            ready += 1;
        }
        Some(self.decide(now, concurrency as f64, ready))
    }
}

/// Settings of AIBrix's APA (its documented defaults: tolerances 10 %, up rate 2, down rate
/// 2, no scale-up cooldown, a 300 s scale-down cooldown), on a per-pod concurrency metric
/// (running plus waiting requests), evaluated every `tick` on the mean over `window`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApaSettings {
    /// Target concurrency per pod.
    pub target: f64,
    /// `up fluctuation tolerance`: no scale-up while use / target <= 1 + this.
    pub up_tolerance: f64,
    /// `down fluctuation tolerance`: no scale-down while use / target >= 1 - this.
    pub down_tolerance: f64,
    /// `max-scale-up-rate`: at most `ceil(rate x current)` pods.
    pub max_scale_up_rate: f64,
    /// `max-scale-down-rate`: at least `floor(current / rate)` pods.
    pub max_scale_down_rate: f64,
    /// Scale-down cooldown: a scale-down waits this long after the last change.
    pub scale_down_cooldown: Duration,
    /// How often the autoscaler computes.
    pub tick: Duration,
    /// The window the per-pod metric is averaged over.
    pub window: Duration,
}

/// The per-pod concurrency target `apa` uses when none is given (as `kpa`'s effective target
/// at Knative's 70 %, rounded).
pub const APA_DEFAULT_TARGET: f64 = 128.0;

impl ApaSettings {
    /// AIBrix's defaults with the given per-pod target.
    pub fn with_target(target: f64) -> Self {
        Self {
            target,
            up_tolerance: 0.1,
            down_tolerance: 0.1,
            max_scale_up_rate: 2.0,
            max_scale_down_rate: 2.0,
            scale_down_cooldown: Duration::from_secs(300),
            tick: Duration::from_secs(15),
            window: Duration::from_secs(60),
        }
    }
}

impl Default for ApaSettings {
    fn default() -> Self {
        Self::with_target(APA_DEFAULT_TARGET)
    }
}

/// AIBrix's APA (adaptive pod autoscaler): when the per-pod metric exceeds the target by more
/// than the up tolerance it asks for `ceil(current x use / target)`, at most `max-scale-up-rate`
/// times the current count; below the down tolerance likewise down, at least `current /
/// max-scale-down-rate`; otherwise it keeps the count. It actuates the Deployment directly.
#[derive(Debug, Clone)]
pub struct Apa {
    settings: ApaSettings,
    min_replicas: u32,
    max_replicas: u32,
    samples: VecDeque<(Duration, f64)>,
    next_tick: Duration,
    last_change: Duration,
}

impl Apa {
    /// An APA with these settings and bounds.
    pub fn new(settings: ApaSettings, min_replicas: u32, max_replicas: u32) -> Self {
        Self {
            settings,
            min_replicas,
            max_replicas,
            samples: VecDeque::new(),
            next_tick: Duration::ZERO,
            last_change: Duration::ZERO,
        }
    }

    /// One computation: `use_per_pod` sampled at `now` over `current` pods.
    pub fn decide(&mut self, now: Duration, use_per_pod: f64, current: u32) -> u32 {
        self.samples.push_back((now, use_per_pod));
        let keep_from = now.checked_sub(self.settings.window);
        while self
            .samples
            .front()
            .is_some_and(|(t, _)| keep_from.is_some_and(|f| *t <= f))
        {
            self.samples.pop_front();
        }
        let mean = self.samples.iter().map(|s| s.1).sum::<f64>() / self.samples.len() as f64;
        let current_f = f64::from(current.max(1));
        let ratio = mean / self.settings.target;
        let wanted = if ratio > 1.0 + self.settings.up_tolerance {
            let cap = (self.settings.max_scale_up_rate * current_f).ceil();
            (current_f * ratio).ceil().min(cap)
        } else if ratio < 1.0 - self.settings.down_tolerance {
            if now < self.last_change + self.settings.scale_down_cooldown {
                current_f
            } else {
                let floor = (current_f / self.settings.max_scale_down_rate).floor();
                (current_f * ratio).ceil().max(floor)
            }
        } else {
            current_f
        };
        let wanted = (wanted as u32).clamp(self.min_replicas, self.max_replicas);
        if wanted != current {
            self.last_change = now;
        }
        wanted
    }
}

impl Autoscaler for Apa {
    fn next_wake(&self) -> Option<Duration> {
        Some(self.next_tick)
    }

    fn wake(&mut self, now: Duration, fleet: &VirtualFleet) -> Option<u32> {
        if self.next_tick > now {
            return None;
        }
        self.next_tick += self.settings.tick;
        let mut ready = 0u32;
        let mut in_flight = 0usize;
        for replica in fleet.ready() {
            let gauges = replica.engine.published_gauges();
            in_flight += gauges.running + gauges.waiting;
            ready += 1;
        }
        let per_pod = in_flight as f64 / f64::from(ready.max(1));
        Some(self.decide(now, per_pod, fleet.desired()))
    }
}

/// The fluid lower bound on GPU-hours for serving `requests`: every step of the engine model
/// costs `base + tokens x per_token + context x per_context` (x slowdown), so serving a request
/// costs at least its `prompt + output - 1` scheduled tokens, `(output - 1) x prompt` tokens of
/// decode-time context, and a `1 / max_num_seqs` share of the fixed cost of the `output` steps
/// it takes part in. The sum, in replica-hours, is below what any plan that serves every
/// request spends (it ignores queueing, start-up, idle capacity and the SLO). A plan that lets
/// requests time out or be refused does less work and may spend less.
pub fn fluid_lower_bound_hours(
    requests: &[TraceRequest],
    engine: &vllm_emulator::EngineConfig,
) -> f64 {
    let mut seconds = 0.0;
    let seqs = f64::from(engine.max_num_seqs.max(1));
    let fits = |r: &&TraceRequest| {
        u64::from(r.prompt_tokens.max(1)) + u64::from(r.output_tokens.max(1))
            <= u64::from(engine.max_model_len)
    };
    for r in requests.iter().filter(fits) {
        let p = f64::from(r.prompt_tokens.max(1));
        let o = f64::from(r.output_tokens.max(1));
        seconds += (p + o - 1.0) * engine.per_token_seconds
            + (o - 1.0) * p * engine.per_context_token_seconds
            + o * engine.step_base_seconds / seqs;
    }
    seconds * engine.slowdown / 3600.0
}

/// A fixed fleet.
#[derive(Debug, Clone, Copy)]
pub struct Static;

impl Autoscaler for Static {
    fn next_wake(&self) -> Option<Duration> {
        None
    }

    fn wake(&mut self, _now: Duration, _fleet: &VirtualFleet) -> Option<u32> {
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
    /// run, and ordered `ahead_by` ahead (the start-up time it plans with, or a lookahead): at
    /// each bucket it asks for the most any bucket starting within the next `ahead_by` needs.
    /// Clamped to [min, max].
    pub fn new(
        requests: &[TraceRequest],
        engine: &vllm_emulator::EngineConfig,
        settings: &OracleSettings,
        ahead_by: Duration,
        min_replicas: u32,
        max_replicas: u32,
    ) -> Self {
        let needed = Self::needed_per_bucket(requests, engine, settings);
        let hold: Vec<u32> = (0..needed.len())
            .map(|b| needed[b].max(if b > 0 { needed[b - 1] } else { 0 }))
            .collect();
        let ahead = ahead_by.as_secs_f64() / settings.bucket.as_secs_f64();
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
        engine: &vllm_emulator::EngineConfig,
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

    /// The same plan for a planner that learns the trace only at `from`: it holds `opening`
    /// until then, asks at `from` for what the plan holds there (the most any bucket within a
    /// start-up of it needs), and follows the plan from then on.
    pub fn learning_at(self, from: Duration, opening: u32) -> Self {
        let at_from = self
            .plan
            .iter()
            .take_while(|p| p.0 <= from)
            .last()
            .map_or(opening, |p| p.1);
        let mut plan = vec![(Duration::ZERO, opening), (from, at_from)];
        plan.extend(self.plan.into_iter().filter(|p| p.0 > from));
        plan.dedup_by(|later, earlier| later.1 == earlier.1);
        Self { plan, next: 0 }
    }

    /// The start of the first bucket whose work needs more than `opening` replicas, if any.
    pub fn first_need_above(needed: &[u32], opening: u32, bucket: Duration) -> Option<Duration> {
        needed
            .iter()
            .position(|&n| n > opening)
            .map(|b| bucket * b as u32)
    }
}

impl Autoscaler for Oracle {
    fn next_wake(&self) -> Option<Duration> {
        self.plan.get(self.next).map(|p| p.0)
    }

    fn wake(&mut self, now: Duration, _fleet: &VirtualFleet) -> Option<u32> {
        let mut target = None;
        while self.plan.get(self.next).is_some_and(|p| p.0 <= now) {
            target = Some(self.plan[self.next].1);
            self.next += 1;
        }
        target
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_plan_learned_late_holds_the_opening_fleet_then_asks_what_the_plan_holds() {
        let plan = || Oracle {
            plan: vec![(secs(0), 2), (secs(60), 5), (secs(300), 1), (secs(420), 3)],
            next: 0,
        };
        assert_eq!(
            plan().learning_at(secs(120), 1).plan,
            vec![(secs(0), 1), (secs(120), 5), (secs(300), 1), (secs(420), 3)]
        );
        // Learning where the plan itself steps keeps the step once; learning at its end
        // leaves the plan's last fleet; from the start it is the plan at the opening fleet.
        assert_eq!(
            plan().learning_at(secs(300), 1).plan,
            vec![(secs(0), 1), (secs(420), 3)]
        );
        assert_eq!(
            plan().learning_at(secs(600), 2).plan,
            vec![(secs(0), 2), (secs(600), 3)]
        );
        assert_eq!(plan().learning_at(secs(0), 2).plan, plan().plan);
        let needed = [1, 1, 2, 4, 1];
        assert_eq!(
            Oracle::first_need_above(&needed, 1, secs(60)),
            Some(secs(120))
        );
        assert_eq!(
            Oracle::first_need_above(&needed, 3, secs(60)),
            Some(secs(180))
        );
        assert_eq!(Oracle::first_need_above(&needed, 4, secs(60)), None);
    }

    /// A KPA with target 10 at 100 % utilisation, so the arithmetic is easy to follow.
    fn kpa(min: u32, max: u32) -> Kpa {
        Kpa::new(
            KpaSettings {
                utilisation: 1.0,
                ..KpaSettings::with_target(10.0)
            },
            min,
            max,
            min,
        )
    }

    #[test]
    fn default_target_applies_knatives_70_percent_utilisation() {
        let s = KpaSettings::default();
        assert_eq!(s.target, 256.0);
        assert!((s.effective_target() - 179.2).abs() < 1e-9);
        assert_eq!(s.stable_window, secs(60));
        assert_eq!(s.panic_window, secs(6));
    }

    #[test]
    fn a_ramp_is_followed_by_the_stable_window_average() {
        // 4 ready replicas; concurrency climbs 1 request per tick from 40 to 70 (no panic:
        // the panic window never asks for 8 replicas).
        let mut k = kpa(1, 20);
        let mut last = 0;
        for i in 0..=30u64 {
            let c = 40.0 + i as f64;
            last = k.decide(secs(2 * i), c, 4);
            assert!(!k.in_panic(), "tick {i}");
        }
        // The mean of 40..=70 over the 31 samples is 55: ceil(55 / 10) = 6.
        assert_eq!(last, 6);
        // Hold 70 for one more stable window: the average reaches 70, 7 replicas.
        for i in 31..=61u64 {
            last = k.decide(secs(2 * i), 70.0, 6);
        }
        assert_eq!(last, 7);
    }

    #[test]
    fn a_spike_panics_within_a_few_ticks_and_does_not_scale_down_in_panic() {
        let mut k = kpa(1, 50);
        // A minute at 20 in flight over 2 replicas: steady.
        for i in 0..30u64 {
            assert_eq!(k.decide(secs(2 * i), 20.0, 2), 2);
        }
        // Spike to 200 at t = 60 s: the panic window (3 samples) sees it at once.
        let first = k.decide(secs(60), 200.0, 2);
        assert!(k.in_panic());
        // Panic average (20 + 20 + 200) / 3 = 80 -> 8 replicas (the stable window says 3).
        assert_eq!(first, 8);
        assert_eq!(k.decide(secs(62), 200.0, 2), 14);
        assert_eq!(k.decide(secs(64), 200.0, 2), 20);
        // The spike ends; the panic window falls but panic keeps the most it asked for.
        for i in 33..50u64 {
            assert_eq!(k.decide(secs(2 * i), 10.0, 20), 20, "tick {i}");
            assert!(k.in_panic());
        }
        // The condition last held at 64 s; panic ends once 60 s pass without it.
        let mut left_at = None;
        for i in 50..70u64 {
            let d = k.decide(secs(2 * i), 10.0, 20);
            if !k.in_panic() {
                left_at = Some((2 * i, d));
                break;
            }
            assert_eq!(d, 20);
        }
        let (at, desired) = left_at.expect("panic ends");
        assert_eq!(at, 126);
        // Back on the stable window, scale-down is limited to half the ready replicas.
        assert_eq!(desired, 10);
    }

    #[test]
    fn calm_scales_down_by_at_most_half_per_tick() {
        let mut k = kpa(1, 100);
        // Start with no history of load and 16 ready replicas: the stable window says 1.
        assert_eq!(k.decide(secs(0), 0.0, 16), 8);
        assert_eq!(k.decide(secs(2), 0.0, 8), 4);
        assert_eq!(k.decide(secs(4), 0.0, 4), 2);
        assert_eq!(k.decide(secs(6), 0.0, 2), 1);
        assert_eq!(k.decide(secs(8), 0.0, 1), 1);
        // An odd count rounds the floor down: 5 ready may go to 2.
        let mut k = kpa(1, 100);
        assert_eq!(k.decide(secs(0), 0.0, 5), 2);
    }

    #[test]
    fn the_opening_fleet_is_kept_for_one_stable_window() {
        let mut k = Kpa::new(
            KpaSettings {
                utilisation: 1.0,
                ..KpaSettings::with_target(10.0)
            },
            1,
            20,
            5,
        );
        // No load yet at the start of a trace: the empty window does not shed the fleet.
        for i in 0..30u64 {
            assert_eq!(k.decide(secs(2 * i), 0.0, 5), 5, "tick {i}");
        }
        // After a full stable window of no load, it halves.
        assert_eq!(k.decide(secs(60), 0.0, 5), 2);
    }

    #[test]
    fn bounds_hold_in_every_mode() {
        // Min 3: a calm fleet stays at 3.
        let mut k = kpa(3, 6);
        for i in 0..40u64 {
            assert_eq!(k.decide(secs(2 * i), 0.0, 3), 3);
        }
        // Max 6: a panic asking for 100 gets 6.
        assert_eq!(k.decide(secs(80), 1000.0, 3), 6);
        assert!(k.in_panic());
        // No ready replicas count as one (Knative's rule), so scale-up is not stuck at zero.
        let mut k = kpa(1, 20);
        assert_eq!(k.decide(secs(0), 50.0, 0), 5);
    }

    #[test]
    fn the_scale_down_delay_holds_the_highest_decision_of_its_window() {
        let mut k = Kpa::new(
            KpaSettings {
                utilisation: 1.0,
                scale_down_delay: secs(120),
                ..KpaSettings::with_windows(10.0, secs(10), secs(120))
            },
            1,
            20,
            1,
        );
        // 80 in flight over 8 ready: 8 replicas.
        for i in 0..10u64 {
            assert_eq!(k.decide(secs(2 * i), 80.0, 8), 8);
        }
        // Load drops to 20: the stable window soon says 2, the delay keeps 8 for 120 s.
        let mut first_lower = None;
        for i in 10..120u64 {
            let d = k.decide(secs(2 * i), 20.0, 8);
            if d < 8 && first_lower.is_none() {
                first_lower = Some(2 * i);
            }
        }
        let at = first_lower.expect("scales down after the delay");
        // The last 8 was decided at 18 s or a little later (while the window still held 80).
        assert!((138..=150).contains(&at), "{at}");
    }

    #[test]
    fn apa_follows_its_tolerances_rates_and_cooldown() {
        let mut a = Apa::new(
            ApaSettings {
                window: secs(1),
                ..ApaSettings::with_target(10.0)
            },
            1,
            50,
        );
        // Within +10 %: keep.
        assert_eq!(a.decide(secs(0), 10.9, 4), 4);
        // 25 per pod over 4: ceil(4 x 2.5) = 10, capped at 2 x 4 = 8.
        assert_eq!(a.decide(secs(15), 25.0, 4), 8);
        // 12 per pod over 8: ratio 1.2 -> ceil(9.6) = 10.
        assert_eq!(a.decide(secs(30), 12.0, 8), 10);
        // Within -10 %: keep.
        assert_eq!(a.decide(secs(45), 9.1, 10), 10);
        // Low, but within the 300 s scale-down cooldown of the last change (30 s): keep.
        assert_eq!(a.decide(secs(60), 1.0, 10), 10);
        // After the cooldown: ceil(10 x 0.1) = 1, bounded by 10 / 2 = 5.
        assert_eq!(a.decide(secs(400), 1.0, 10), 5);
        // Bounds hold.
        let mut b = Apa::new(
            ApaSettings {
                window: secs(1),
                ..ApaSettings::with_target(10.0)
            },
            2,
            6,
        );
        assert_eq!(b.decide(secs(0), 100.0, 4), 6);
    }

    #[test]
    fn the_fluid_bound_is_below_a_saturated_replica_and_skips_refused_requests() {
        let engine = vllm_emulator::EngineConfig::default();
        let shape = RequestShape {
            prompt_tokens: 512,
            output_tokens: 128,
        };
        let per_request = 1.0 / engine.predicted_saturation(shape).requests_per_second;
        let requests: Vec<TraceRequest> = (0..1000)
            .map(|i| TraceRequest {
                arrival: Duration::from_millis(i),
                prompt_tokens: 512,
                output_tokens: 128,
            })
            .collect();
        let bound = fluid_lower_bound_hours(&requests, &engine) * 3600.0;
        let saturated = per_request * 1000.0;
        // Below the closed-form saturation cost, but of the same order.
        assert!(
            bound < saturated && bound > 0.5 * saturated,
            "{bound} {saturated}"
        );
        let too_long = TraceRequest {
            arrival: Duration::ZERO,
            prompt_tokens: engine.max_model_len,
            output_tokens: 10,
        };
        assert_eq!(fluid_lower_bound_hours(&[too_long], &engine), 0.0);
    }

    #[test]
    fn ticks_every_two_seconds() {
        let k = Kpa::new(KpaSettings::default(), 1, 20, 1);
        assert_eq!(k.next_wake(), Some(Duration::ZERO));
        assert_eq!(k.settings.tick, secs(2));
    }
}
