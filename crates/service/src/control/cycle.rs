//! The loop of one ScaledObject: every scrape interval, discover -> scrape, then the core's
//! [`Scaler`] (parse -> window -> signals -> decide), then publish a new [`Status`] and update
//! metrics.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

use super::status::{
    AnswerKind, LearnedStateStatus, ScaleTargetStatus, Status, TargetHealth, reason_label,
};
use super::{Deregister, ScaledObject};
use crate::discovery::{self, HostsFileResolver, Resolver, SystemResolver};
use crate::learned_store::{self, LearnedStore, Record, WriteError};
use crate::scale_target::{API_TIMEOUT, KubeClient, Replicas, ScaleReadError, ScaleTargetRef};
use crate::scrape::{ScrapeError, ScrapeOutcome, ScrapeResult, ScrapeSettings, Scraper};
use crate::telemetry::{
    CycleReading, HealthLabels, Metrics, ReasonLabels, ResultLabels, ScaledObjectLabels,
    TARGET_HEALTH,
};
use vllm_keda_core::Scaler;
use vllm_keda_core::exposition::Limits;
use vllm_keda_core::policy::proactive::hindsight::StaticComparison;
use vllm_keda_core::policy::proactive::{Learned, Persisted};
use vllm_keda_core::policy::{CurrentReplicas, Decision, ReplicaSource};
use vllm_keda_core::scaler::{ScrapeRound, Step, TargetFailure, View};
use vllm_keda_core::signals::FleetSignals;

/// Scrape timeout for a scrape interval: the interval itself, within [0.5 s, 2 s], so a hung
/// target delays a cycle by at most about one interval.
fn scrape_timeout(interval: Duration) -> Duration {
    interval.clamp(Duration::from_millis(500), Duration::from_secs(2))
}

/// Where in each scrape interval this ScaledObject's cycles run: an offset in
/// `[0, interval)` from a stable hash of its key, so loops that start together (a scaler
/// restart, KEDA asking about every ScaledObject at once) scrape spread over the interval
/// instead of in one burst that delays RPCs answered on the same cores.
fn phase_offset(key: &super::Key, interval: Duration) -> Duration {
    // FNV-1a: stable across builds and platforms, unlike the std hasher's contract.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.namespace.bytes().chain([b'/']).chain(key.name.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let nanos = interval.as_nanos().max(1);
    Duration::from_nanos((u128::from(hash) % nanos) as u64)
}

/// The first instant strictly after `since_origin` that sits at `offset` within the interval
/// grid counted from the origin. The loop passes the time since the Unix epoch, so every
/// scaler replica puts a ScaledObject's cycles at the same instants: replicas behind the
/// headless Service scrape the same pods together and their answers agree.
fn next_aligned(since_origin: Duration, interval: Duration, offset: Duration) -> Duration {
    let period = interval.as_nanos().max(1);
    let now = since_origin.as_nanos();
    let offset = offset.as_nanos() % period;
    let base = now - now % period + offset;
    let next = if base > now { base } else { base + period };
    Duration::from_nanos(next.min(u128::from(u64::MAX)) as u64)
}

/// Time since the Unix epoch (zero if the clock is set before it).
fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

fn unix_now() -> f64 {
    since_epoch().as_secs_f64()
}

/// Parses one round's fetched bodies (a failed fetch stays failed).
fn parse_round(
    pods: Vec<ScrapeOutcome>,
    gpus: Vec<ScrapeOutcome>,
    model: Option<&str>,
    limits: &Limits,
) -> ScrapeRound<ScrapeError> {
    let bodies = |outcomes: Vec<ScrapeOutcome>| {
        outcomes
            .into_iter()
            .map(|scraped| (scraped.url, scraped.result))
    };
    ScrapeRound::parse_with_limits(bodies(pods), bodies(gpus), model, limits)
}

/// The round when parsing itself failed: every vLLM target failed with `message`, and no DCGM
/// target answered.
fn failed_round(pods: &[String], message: &str) -> ScrapeRound<ScrapeError> {
    let pods = pods
        .iter()
        .map(|url| {
            let error = ScrapeError::parse(url.as_str(), message);
            (url.clone(), Err(TargetFailure::Fetch(error)))
        })
        .collect();
    ScrapeRound {
        pods,
        gpus: Vec::new(),
    }
}

/// Why a target of a round gave no snapshot, as a scrape error (a body that does not parse is
/// a `parse_error` of that target), or `None` when it gave one.
fn scrape_error<T>(
    url: &str,
    outcome: &Result<T, TargetFailure<ScrapeError>>,
) -> Option<ScrapeError> {
    match outcome {
        Ok(_) => None,
        Err(TargetFailure::Fetch(error)) => Some(error.clone()),
        Err(TargetFailure::Parse(error)) => Some(ScrapeError::from_parse(url, error)),
        Err(TargetFailure::Invalid(error)) => Some(ScrapeError::parse(url, error)),
    }
}

/// Each target of a round with why it gave no snapshot (`None` when it gave one), kept
/// before the round is handed to the scaler.
struct RoundOutcome {
    pods: Vec<(String, Option<ScrapeError>)>,
    gpus: Vec<(String, Option<ScrapeError>)>,
}

impl RoundOutcome {
    fn of(round: &ScrapeRound<ScrapeError>) -> Self {
        Self {
            pods: round
                .pods
                .iter()
                .map(|(url, outcome)| (url.clone(), scrape_error(url, outcome)))
                .collect(),
            gpus: round
                .gpus
                .iter()
                .map(|(url, outcome)| (url.clone(), scrape_error(url, outcome)))
                .collect(),
        }
    }
}

/// Runs one ScaledObject's loop until it is cancelled or not asked for `idle_stop`.
pub(super) async fn run(
    so: Arc<ScaledObject>,
    tx: watch::Sender<Arc<Status>>,
    metrics: Arc<Metrics>,
    deregister: Deregister,
) {
    let mut cycle = Cycle::new(&so, metrics.clone());
    let interval = so.config.scrape_interval;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // The first cycle runs at once (the first answer waits on it); later ones on this
    // ScaledObject's phase of the shared interval grid.
    let mut aligned = false;
    loop {
        tokio::select! {
            _ = so.cancel.cancelled() => break,
            _ = ticker.tick() => {}
        }
        let idle = so.idle_for();
        if idle > so.options.idle_stop {
            tracing::info!(
                scaledobject = %so.key,
                trigger = %so.key.trigger,
                idle_seconds = idle.as_secs(),
                "stopping scrape loop: KEDA stopped asking"
            );
            break;
        }
        if deregister.superseded(&so) {
            tracing::info!(
                scaledobject = %so.key,
                trigger = %so.key.trigger,
                idle_seconds = idle.as_secs(),
                "stopping scrape loop: KEDA asks about newer metadata of this scaledobject instead"
            );
            break;
        }
        let status = tokio::select! {
            _ = so.cancel.cancelled() => break,
            status = cycle.step(&so) => status,
        };
        tx.send_replace(status);
        if !aligned {
            aligned = true;
            let offset = phase_offset(&so.key, interval);
            let unix = since_epoch();
            let wait = next_aligned(unix, interval, offset).saturating_sub(unix);
            ticker.reset_at(Instant::now() + wait);
        }
    }
    so.cancel.cancel();
    // The loop's series and state go before it leaves the registry: a loop started for the
    // same key after that never has its series removed by this one, and the stop is counted
    // (for `serve`'s memory release) once this loop's memory is free.
    metrics.remove_scaledobject(&cycle.labels, cycle.reasons_seen.iter().map(String::as_str));
    drop(cycle);
    deregister.remove(&so);
    tracing::debug!(scaledobject = %so.key, "scrape loop stopped");
}

/// The state one loop carries between cycles.
struct Cycle {
    labels: ScaledObjectLabels,
    metrics: Arc<Metrics>,
    scraper: Scraper,
    /// `None` only while a cycle's blocking job holds it.
    scaler: Option<Scaler>,
    origin: Instant,
    urls: Vec<String>,
    gpu_urls: Vec<String>,
    status: Status,
    reasons_seen: BTreeSet<String>,
    /// The scale target's reader, when the scaler reaches a Kubernetes API.
    scale: Option<ScaleWatch>,
    /// Where the proactive policy's learning is kept (`--learned-state-configmap`).
    learned: Option<LearnedWatch>,
}

/// Keeps a trigger's learning in step with the ConfigMap: reads the record once, on the loop's
/// first cycle (beside its scrape, so the first answer waits no longer), and from then on every
/// [`LearnedStore::write_every`] exchanges it with the record in the background: a record with
/// a longer observed history than this loop's (a running peer's) is adopted; otherwise the
/// loop writes its own once its policy has learned something itself.
struct LearnedWatch {
    store: LearnedStore,
    key: String,
    read_done: bool,
    /// Read but not yet given to the policy: at the start, or a peer's adopted since.
    inherit: Option<Persisted>,
    last_exchange: Option<Instant>,
    /// Conflicts since the last exchange that was not one: how long the next retry waits.
    conflicts_in_a_row: u32,
    /// After a conflict, no exchange before this (a jittered, growing wait).
    retry_at: Option<Instant>,
    /// The outcome of the exchange in flight, set by its task.
    exchanged: Arc<Mutex<Option<Exchange>>>,
    status: LearnedStateStatus,
}

/// What one exchange with the kept record came to.
#[derive(Debug)]
enum Exchange {
    /// The record holds a longer history than this loop's: the loop adopts it.
    Adopt(Record),
    /// This loop's learning was written.
    Written {
        /// When, Unix seconds.
        unix: f64,
        /// How many of the demand history's oldest minutes were left out to fit the ConfigMap.
        dropped: usize,
        /// How many other keys' records, too old for any pod to inherit, were removed with it.
        removed: usize,
    },
    /// Nothing to do: the record's history is not longer, and this loop has learned nothing
    /// of its own since it inherited.
    Kept,
    /// Another pod wrote the ConfigMap between this loop's read and its write: nothing was
    /// written, and the next cycle exchanges again (reads what the other pod wrote).
    Conflict,
    /// Reading or writing failed.
    Failed(String),
}

impl LearnedWatch {
    fn new(store: LearnedStore, key: &super::Key) -> Self {
        let k = learned_store::key(&key.namespace, &key.name, key.trigger);
        Self {
            status: LearnedStateStatus {
                configmap: format!("{}/{}", store.namespace, store.name),
                key: k.clone(),
                ..LearnedStateStatus::default()
            },
            store,
            key: k,
            read_done: false,
            inherit: None,
            last_exchange: None,
            conflicts_in_a_row: 0,
            retry_at: None,
            exchanged: Arc::new(Mutex::new(None)),
        }
    }

    /// The first time: reads the trigger's record, bounded by `timeout`.
    async fn read_once(&mut self, timeout: Duration) {
        if std::mem::replace(&mut self.read_done, true) {
            return;
        }
        self.last_exchange = Some(Instant::now());
        let found = match tokio::time::timeout(timeout, self.store.read(&self.key)).await {
            Err(_) => Err(format!(
                "reading ConfigMap {}: no answer within {timeout:?}; this loop learns from nothing",
                self.status.configmap
            )),
            Ok(result) => result,
        };
        self.status.read = Some(match found {
            Err(error) => error,
            Ok(None) => "nothing kept for this trigger yet: it learns from nothing".to_owned(),
            Ok(Some(record)) => {
                let now = since_epoch().as_secs_f64();
                let age = now - record.written_unix_seconds;
                if !record.fresh_at(now) {
                    format!(
                        "the kept record is {:.1} h old (at most {} h is inherited): it learns \
                         from nothing",
                        age / 3600.0,
                        learned_store::MAX_AGE.as_secs() / 3600
                    )
                } else {
                    self.inherit = Some(record.persisted_at(now));
                    format!(
                        "inherited a record written {age:.0} s ago: {}",
                        describe(&record)
                    )
                }
            }
        });
        tracing::info!(
            configmap = %self.status.configmap,
            key = %self.key,
            read = self.status.read.as_deref().unwrap_or_default(),
            "learned state read"
        );
    }

    /// Takes in the last exchange's outcome and, when one is due under the proactive policy,
    /// starts the next in the background: read the record, adopt it when its history is longer
    /// than this loop's, otherwise write this loop's learning when its policy learned its own
    /// capacity estimate (not only inherited or been given one).
    fn exchange_when_due(&mut self, scaler: Option<&Scaler>) {
        let outcome = self.exchanged.lock().ok().and_then(|mut w| w.take());
        if outcome
            .as_ref()
            .is_some_and(|o| !matches!(o, Exchange::Conflict))
        {
            self.conflicts_in_a_row = 0;
            self.retry_at = None;
        }
        match outcome {
            None => {}
            Some(Exchange::Kept) => self.status.error = None,
            Some(Exchange::Written {
                unix,
                dropped,
                removed,
            }) => {
                self.status.written_unix_seconds = Some(unix);
                self.status.history_minutes_left_out = dropped;
                if removed > 0 {
                    tracing::info!(configmap = %self.status.configmap, key = %self.key, removed, "learned state written, and the records of other keys older than a day removed");
                    self.status.expired_records_removed += removed as u64;
                }
                if dropped > 0 {
                    tracing::warn!(configmap = %self.status.configmap, key = %self.key, dropped, "learned state written without the demand history's oldest minutes: the ConfigMap is near its size limit");
                }
                self.status.error = None;
            }
            Some(Exchange::Adopt(record)) => {
                let adopted = format!(
                    "adopted a record written {:.0} s ago, with a longer history than this \
                     loop's: {}",
                    since_epoch().as_secs_f64() - record.written_unix_seconds,
                    describe(&record)
                );
                tracing::info!(configmap = %self.status.configmap, key = %self.key, adopted = %adopted, "learned state adopted");
                self.inherit = Some(record.persisted_at(since_epoch().as_secs_f64()));
                self.status.adopted = Some(adopted);
                self.status.adoptions += 1;
                self.status.error = None;
            }
            Some(Exchange::Conflict) => {
                self.conflicts_in_a_row = self.conflicts_in_a_row.saturating_add(1);
                let wait = conflict_wait(self.conflicts_in_a_row, jitter(), self.store.write_every);
                tracing::info!(configmap = %self.status.configmap, key = %self.key, in_a_row = self.conflicts_in_a_row, wait_seconds = wait.as_secs_f64(), "learned state not written: another scaler pod wrote the ConfigMap since this loop read it; reading it again after the wait");
                self.status.conflicts += 1;
                self.last_exchange = None;
                self.retry_at = Some(Instant::now() + wait);
            }
            Some(Exchange::Failed(error)) => {
                tracing::warn!(configmap = %self.status.configmap, key = %self.key, error = %error, "learned state not exchanged");
                self.status.error = Some(error);
            }
        }
        if !self.read_done
            || self.inherit.is_some()
            || self.retry_at.is_some_and(|at| Instant::now() < at)
            || self
                .last_exchange
                .is_some_and(|at| at.elapsed() < self.store.write_every)
        {
            return;
        }
        let Some((persisted, learned)) = scaler.and_then(|s| Some((s.persisted()?, s.learned()?)))
        else {
            return;
        };
        let own = learned.capacity_source == "learned";
        self.last_exchange = Some(Instant::now());
        let (store, key, exchanged) =
            (self.store.clone(), self.key.clone(), self.exchanged.clone());
        tokio::spawn(async move {
            let exchange = async {
                let now = since_epoch().as_secs_f64();
                // No write without the read: see `read_before_write`.
                let kept = match store.read_before_write(&key, now).await {
                    Ok(kept) => kept,
                    Err(error) => return Exchange::Failed(error),
                };
                if let Ok(Some(record)) = &kept.record
                    && record.outranks(persisted.observed_seconds, now)
                {
                    return Exchange::Adopt(record.clone());
                }
                if !own {
                    return kept.record.err().map_or(Exchange::Kept, Exchange::Failed);
                }
                // A value under the key that is not a record is replaced.
                let mut record = Record {
                    persisted,
                    written_unix_seconds: now,
                };
                let dropped = record.fit(&key, kept.room);
                // Only onto the ConfigMap this loop read: a peer's record written in between
                // may hold a longer history, which this write would otherwise replace.
                let version = kept.version.as_deref();
                match store.write(&key, &record, version, &kept.expired).await {
                    Ok(()) => Exchange::Written {
                        unix: record.written_unix_seconds,
                        dropped,
                        removed: kept.expired.len(),
                    },
                    Err(WriteError::Conflict) => Exchange::Conflict,
                    Err(WriteError::Failed(error)) => Exchange::Failed(error),
                }
            };
            let outcome = tokio::time::timeout(API_TIMEOUT, exchange)
                .await
                .unwrap_or_else(|_| {
                    Exchange::Failed(format!(
                        "exchanging the learned state: no answer within {API_TIMEOUT:?}"
                    ))
                });
            if let Ok(mut w) = exchanged.lock() {
                *w = Some(outcome);
            }
        });
    }
}

/// How long a loop waits after its `in_a_row`-th conflict in a row before it reads and
/// writes again: one to two seconds after the first, each next one twice as long, never more
/// than `most` (the write interval); `jitter` (0..1) spreads each over the upper half of its
/// doubling, so pods that met at one write do not meet again at the retry.
fn conflict_wait(in_a_row: u32, jitter: f64, most: Duration) -> Duration {
    let doubled = CONFLICT_FIRST_WAIT.saturating_mul(1 << in_a_row.clamp(1, 16).saturating_sub(1));
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    doubled.min(most).mul_f64(0.5 + 0.5 * jitter)
}

/// The first wait after a conflict, before jitter: two seconds, a cycle.
const CONFLICT_FIRST_WAIT: Duration = Duration::from_secs(2);

/// A number in 0..1 that differs between calls and between pods: the shared generator, seeded
/// from the clock through the process's random hash keys.
fn jitter() -> f64 {
    use std::hash::BuildHasher;
    let seed = std::collections::hash_map::RandomState::new().hash_one(since_epoch().as_nanos());
    vllm_keda_core::rng::SplitMix64::new(seed).next_f64()
}

/// A record's learning in words, for `/debug` and the log.
fn describe(record: &Record) -> String {
    let p = &record.persisted;
    format!(
        "capacity {} req/s per replica, start-up {}, {:.0} s observed",
        p.capacity_per_replica
            .map_or("none".to_owned(), |c| format!("{c:.2}")),
        p.startup_seconds
            .map_or("not learned".to_owned(), |s| format!("{s:.0} s")),
        p.observed_seconds
    ) + &p.hindsight_floor.map_or(String::new(), |f| {
        format!(
            ", hindsight floor {} replicas found {:.0} s before the record was written",
            f.replicas, f.age_seconds
        )
    }) + &match p.demand_history.first() {
        Some(oldest) => format!(
            ", {} minutes of demand history over the last {} minutes",
            p.demand_history.len(),
            oldest.seconds_ago().div_ceil(60)
        ),
        None => String::new(),
    }
}

/// Reads one ScaledObject's scale target through the Kubernetes API, at most every
/// [`super::ControlOptions::kube_refresh`] (its `scaleTargetRef` once a minute).
struct ScaleWatch {
    client: KubeClient,
    refresh: Duration,
    target: Option<(ScaleTargetRef, Instant)>,
    last_attempt: Option<Instant>,
    replicas_at: Option<Instant>,
    status: ScaleTargetStatus,
}

/// How long a scale target's `scaleTargetRef` is reused before it is read again.
const TARGET_REF_REFRESH: Duration = Duration::from_secs(60);

impl ScaleWatch {
    fn due(&self) -> bool {
        self.last_attempt
            .is_none_or(|at| at.elapsed() >= self.refresh)
    }

    /// Reads the scale target (and its reference when due), bounded by `timeout`.
    async fn refresh(&mut self, key: &super::Key, timeout: Duration) {
        if !self.due() {
            return;
        }
        self.last_attempt = Some(Instant::now());
        let read = async {
            let target = match &self.target {
                Some((target, at)) if at.elapsed() < TARGET_REF_REFRESH => target.clone(),
                _ => {
                    let target = self.client.scale_target(&key.namespace, &key.name).await?;
                    self.target = Some((target.clone(), Instant::now()));
                    target
                }
            };
            let replicas = self.client.replicas(&key.namespace, &target).await;
            if replicas.is_err() {
                // The reference may have changed (or gone): read it again next time.
                self.target = None;
            }
            replicas.map(|r| (target, r))
        };
        let result = match tokio::time::timeout(timeout, read).await {
            Ok(result) => result,
            Err(_) => Err(ScaleReadError(format!(
                "reading the scale target of scaledobject {key}: no answer from the Kubernetes \
                 API within {timeout:?}"
            ))),
        };
        match result {
            Ok((target, replicas)) => {
                self.replicas_at = Some(Instant::now());
                self.status = ScaleTargetStatus {
                    target: Some(target),
                    replicas: Some(replicas),
                    read_unix_seconds: Some(unix_now()),
                    error: None,
                };
            }
            Err(error) => {
                if self.status.error.as_deref() != Some(error.0.as_str()) {
                    tracing::warn!(
                        scaledobject = %key,
                        trigger = %key.trigger,
                        error = %error,
                        "cannot read the scale target: holding at least the pods observed"
                    );
                }
                self.status.error = Some(error.0);
            }
        }
    }

    /// The replicas of a read recent enough to use (three refresh periods).
    fn fresh(&self) -> Option<Replicas> {
        let at = self.replicas_at?;
        (at.elapsed() <= self.refresh * 3)
            .then_some(self.status.replicas)
            .flatten()
    }
}

impl Cycle {
    fn new(so: &ScaledObject, metrics: Arc<Metrics>) -> Self {
        let config = &so.config;
        let labels = ScaledObjectLabels::of(so);
        metrics.start_scaledobject(&labels, config);
        Self {
            labels,
            metrics,
            scraper: Scraper::new(ScrapeSettings {
                timeout: scrape_timeout(config.scrape_interval),
                ..so.options.scrape.clone()
            }),
            scaler: Some(match so.previous_target {
                Some(target) => Scaler::new(config).resume_from(target),
                None => Scaler::new(config),
            }),
            origin: Instant::now(),
            urls: Vec::new(),
            gpu_urls: Vec::new(),
            status: Status::default(),
            reasons_seen: BTreeSet::new(),
            scale: so.options.kube.clone().map(|client| ScaleWatch {
                client,
                refresh: so.options.kube_refresh,
                target: None,
                last_attempt: None,
                replicas_at: None,
                status: ScaleTargetStatus::default(),
            }),
            learned: so
                .options
                .learned_store
                .clone()
                .map(|store| LearnedWatch::new(store, &so.key)),
        }
    }

    /// One full cycle; returns the state to publish.
    async fn step(&mut self, so: &ScaledObject) -> Arc<Status> {
        let config = &so.config;
        let resolver: Box<dyn Resolver> = match &so.options.hosts_file {
            Some(path) => Box::new(HostsFileResolver::new(path.clone())),
            None => Box::new(SystemResolver),
        };
        let mut discovery_errors = Vec::new();
        match discovery::resolve_with(&config.targets, resolver.as_ref()).await {
            Ok(urls) => {
                self.urls = urls;
                self.status.discovered = true;
            }
            Err(error) => discovery_errors.push(error),
        }
        if let Some(source) = &config.dcgm_targets {
            match discovery::resolve_with(source, resolver.as_ref()).await {
                Ok(urls) => self.gpu_urls = urls,
                Err(error) => discovery_errors.push(error),
            }
        }
        for error in &discovery_errors {
            tracing::warn!(
                scaledobject = %so.key,
                error = %error,
                "target discovery failed: keeping the previous target list"
            );
        }
        self.status.discovery_error = (!discovery_errors.is_empty()).then(|| {
            let all: Vec<String> = discovery_errors.iter().map(ToString::to_string).collect();
            all.join("; ")
        });

        let started = Instant::now();
        let timeout = scrape_timeout(config.scrape_interval);
        let (results, gpu_results, (), ()) = tokio::join!(
            self.scraper.scrape_all(&self.urls),
            self.scraper.scrape_all(&self.gpu_urls),
            async {
                if let Some(scale) = self.scale.as_mut() {
                    scale.refresh(&so.key, timeout).await;
                }
            },
            async {
                if let Some(learned) = self.learned.as_mut() {
                    learned.read_once(timeout).await;
                }
            }
        );
        // What an earlier pod learned for this trigger, before this cycle decides.
        if let Some(p) = self.learned.as_mut().and_then(|l| l.inherit.take())
            && let Some(scaler) = self.scaler.as_mut()
        {
            scaler.inherit(&p);
        }
        self.metrics
            .scrape_duration_seconds
            .get_or_create(&self.labels)
            .observe(started.elapsed().as_secs_f64());

        // Parsing and deciding are the CPU-heavy part of a cycle: run them on the blocking
        // pool, so neither RPC handlers nor other ScaledObjects' loops sharing the async
        // workers wait behind one large body.
        let now = self.origin.elapsed();
        let urls: Vec<String> = results.iter().map(|r| r.url.clone()).collect();
        let model = config.model.clone();
        // The restart floor: the replicas the scale target asks for, or, when they cannot be
        // read, the pods discovered (the policy says which in its explanation).
        let current = self.current_replicas();
        self.status.current_replicas = current;
        self.status.scale_target = self.scale.as_ref().map(|s| s.status.clone());
        let scaler = self.scaler.take();
        let limits = self.scraper.settings().limits;
        let job = tokio::task::spawn_blocking(move || {
            let round = parse_round(results, gpu_results, model.as_deref(), &limits);
            let mut scaler = scaler?;
            scaler.set_current_replicas(current);
            let outcome = RoundOutcome::of(&round);
            let step = scaler.step(now, round);
            Some((scaler, outcome, step))
        })
        .await;
        let (scaler, outcome, step) = match job {
            Ok(Some(done)) => done,
            // The job panicked (or the scaler was lost to an earlier panic): every vLLM target
            // counts as failed this cycle, and a new scaler resumes from the last target.
            failed => {
                let message = match failed {
                    Err(panic) => format!("parsing panicked: {panic}"),
                    Ok(_) => "the previous cycle's parsing panicked".to_owned(),
                };
                let round = failed_round(&urls, &message);
                let outcome = RoundOutcome::of(&round);
                let mut scaler = match self.status.decision.as_ref() {
                    Some(d) => Scaler::new(config).resume_from(d.target_replicas),
                    None => Scaler::new(config),
                };
                scaler.set_current_replicas(current);
                let step = scaler.step(now, round);
                (scaler, outcome, step)
            }
        };
        self.scaler = Some(scaler);

        let unix = unix_now();
        let targets: Vec<TargetHealth> = outcome
            .pods
            .iter()
            .map(|(url, error)| self.health(so, &self.status.targets, url, error.as_ref(), unix))
            .collect();
        let gpu_targets: Vec<TargetHealth> = outcome
            .gpus
            .iter()
            .map(|(url, error)| {
                self.health(so, &self.status.gpu_targets, url, error.as_ref(), unix)
            })
            .collect();

        // The fleet became the round's targets: every discovered URL was scraped, so these
        // are the discovered vLLM and DCGM targets.
        let Step {
            signals,
            decision,
            view,
            hindsight,
            learned,
        } = step;

        let healthy = targets.iter().filter(|t| t.healthy).count();
        if healthy > 0 {
            self.status.last_healthy_at = Some(Instant::now());
            self.status.last_healthy_unix_seconds = Some(unix);
        }
        self.update_metrics(
            &signals,
            &decision,
            hindsight.as_ref(),
            learned,
            healthy,
            targets.len(),
        );
        let previous = self.status.decision.take();
        let previous_answer = self.status.history.back().map(|r| r.answer);
        self.status.targets = targets;
        self.status.gpu_targets = gpu_targets;
        self.status.cycles += 1;
        self.status.signals = Some(signals);
        self.status.view = Some(view);
        self.status.hindsight = hindsight;
        self.status.learned = learned;
        self.status.decision = Some(decision);
        if let Some(learned) = self.learned.as_mut() {
            learned.exchange_when_due(self.scaler.as_ref());
            self.status.learned_state = Some(learned.status.clone());
        }
        // What KEDA is told from now on: full, partial-held or unavailable.
        let (answer, why) = self.status.answer_kind(Instant::now(), so.stale_after());
        if let Some(decision) = self.status.decision.clone() {
            self.log_change(
                so,
                previous.as_ref(),
                previous_answer,
                &decision,
                answer,
                why.as_deref(),
            );
            self.status.push_history(
                &decision,
                answer,
                why.clone(),
                self.status.view.clone(),
                unix,
                so.options.history_len,
            );
        }
        Arc::new(self.status.clone())
    }

    /// The scale target's replicas for the policy's restart floor: from the Kubernetes API when
    /// a recent read exists, else the pods discovered (once discovery has succeeded).
    fn current_replicas(&self) -> Option<CurrentReplicas> {
        if let Some(replicas) = self.scale.as_ref().and_then(ScaleWatch::fresh) {
            return Some(CurrentReplicas {
                spec: replicas.spec,
                ready: None,
                source: ReplicaSource::ScaleSubresource,
            });
        }
        self.status.discovered.then(|| CurrentReplicas {
            spec: u32::try_from(self.urls.len()).unwrap_or(u32::MAX),
            ready: None,
            source: ReplicaSource::ObservedPods,
        })
    }

    /// Counts one scrape result and turns it into the target's health, logging the first
    /// failure after a success.
    fn health(
        &self,
        so: &ScaledObject,
        previous: &[TargetHealth],
        url: &str,
        error: Option<&ScrapeError>,
        unix: f64,
    ) -> TargetHealth {
        let result = match error {
            None => ScrapeResult::Ok.label(),
            Some(error) => error.result_label(),
        };
        if let Some(limit) = error.and_then(ScrapeError::limit) {
            self.metrics.count_limit(limit.label());
        }
        self.metrics
            .scrapes
            .get_or_create(&ResultLabels {
                so: self.labels.clone(),
                result: result.to_owned(),
            })
            .inc();
        let prev = previous.iter().find(|t| t.url == url);
        match error {
            None => TargetHealth {
                url: url.to_owned(),
                healthy: true,
                result,
                error: None,
                consecutive_failures: 0,
                last_success_unix_seconds: Some(unix),
            },
            Some(error) => {
                if prev.is_none_or(|p| p.healthy) {
                    tracing::warn!(scaledobject = %so.key, target = %url, result, error = %error, "scrape failed");
                }
                TargetHealth {
                    url: url.to_owned(),
                    healthy: false,
                    result,
                    error: Some(error.to_string()),
                    consecutive_failures: prev.map_or(0, |p| p.consecutive_failures) + 1,
                    last_success_unix_seconds: prev.and_then(|p| p.last_success_unix_seconds),
                }
            }
        }
    }

    /// One log line per change of target, activity or answer kind (and for the first
    /// decision), with the reason, the numbers behind it and the targets not observed.
    #[allow(clippy::too_many_arguments)]
    fn log_change(
        &self,
        so: &ScaledObject,
        previous: Option<&Decision>,
        previous_answer: Option<AnswerKind>,
        decision: &Decision,
        answer: AnswerKind,
        why: Option<&str>,
    ) {
        let message = match previous {
            None => "first decision",
            Some(p) if p.target_replicas != decision.target_replicas => "replica target changed",
            Some(p) if p.active != decision.active => "activity changed",
            Some(_) if previous_answer != Some(answer) => "answer changed",
            Some(_) => return,
        };
        let view = self.status.view.as_ref();
        tracing::info!(
            scaledobject = %so.key,
            trigger = %so.key.trigger,
            answer = answer.as_str(),
            from = previous.map_or(0, |p| p.target_replicas),
            to = decision.target_replicas,
            desired = decision.desired_replicas,
            active = decision.active,
            reason = %reason_label(decision.reason),
            explanation = %decision.explanation,
            observed = view.map_or(0, |v| v.observed.len()),
            not_observed = view.map_or(0, |v| v.unobserved.len()),
            view = %view.map(View::summary).unwrap_or_default(),
            unavailable = why.filter(|_| answer == AnswerKind::Unavailable).unwrap_or(""),
            "{message}"
        );
    }

    fn update_metrics(
        &mut self,
        signals: &FleetSignals,
        decision: &Decision,
        hindsight: Option<&StaticComparison>,
        learned: Option<Learned>,
        healthy: usize,
        total: usize,
    ) {
        let m = &self.metrics;
        let l = &self.labels;
        m.record_cycle(
            l,
            &CycleReading {
                signals,
                decision,
                last_healthy_unix_seconds: self.status.last_healthy_unix_seconds,
                hindsight,
                learned,
            },
        );
        for (health, n) in TARGET_HEALTH.into_iter().zip([healthy, total - healthy]) {
            m.targets
                .get_or_create(&HealthLabels {
                    so: l.clone(),
                    health: health.to_owned(),
                })
                .set(n as i64);
        }
        let reason = reason_label(decision.reason);
        m.decisions
            .get_or_create(&ReasonLabels {
                so: l.clone(),
                reason: reason.clone(),
            })
            .inc();
        self.reasons_seen.insert(reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{Key, TriggerId};

    fn key(i: usize) -> Key {
        Key {
            namespace: "inference".into(),
            name: format!("llama-{i}"),
            trigger: TriggerId(0),
        }
    }

    fn outcome(url: &str, result: Result<&str, ScrapeError>) -> ScrapeOutcome {
        ScrapeOutcome {
            url: url.to_owned(),
            duration: Duration::ZERO,
            result: result.map(str::to_owned),
        }
    }

    #[test]
    fn a_round_keeps_fetch_errors_and_names_the_target_of_a_parse_error() {
        let refused = ScrapeError::Connect {
            url: "http://b/metrics".into(),
        };
        let round = parse_round(
            vec![
                outcome("http://a/metrics", Ok("vllm:num_requests_waiting 2\n")),
                outcome("http://b/metrics", Err(refused.clone())),
                outcome("http://c/metrics", Ok("this is { not a metrics body")),
            ],
            vec![outcome(
                "http://gpu/metrics",
                Ok("DCGM_FI_DEV_GPU_UTIL 50\n"),
            )],
            None,
            &Limits::NONE,
        );
        let errors: Vec<Option<ScrapeError>> = round
            .pods
            .iter()
            .map(|(url, outcome)| scrape_error(url, outcome))
            .collect();
        assert_eq!(errors[0], None);
        assert_eq!(errors[1], Some(refused));
        let parse = errors[2].as_ref().unwrap();
        assert_eq!(parse.result_label(), "parse_error");
        assert_eq!(parse.url(), "http://c/metrics");
        assert_eq!(round.gpus.len(), 1);
        assert_eq!(scrape_error(&round.gpus[0].0, &round.gpus[0].1), None);
    }

    #[test]
    fn a_failed_parse_fails_every_vllm_target() {
        let urls = vec!["http://a/metrics".to_owned(), "http://b/metrics".to_owned()];
        let round = failed_round(&urls, "parsing panicked: boom");
        assert!(round.gpus.is_empty());
        assert_eq!(round.healthy_pods(), 0);
        for ((url, outcome), expected) in round.pods.iter().zip(&urls) {
            assert_eq!(url, expected);
            let error = scrape_error(url, outcome).unwrap();
            assert_eq!(error.result_label(), "parse_error");
            assert!(
                error.to_string().contains("parsing panicked: boom"),
                "{error}"
            );
        }
    }

    #[test]
    fn phases_of_many_scaledobjects_spread_over_the_interval() {
        let interval = Duration::from_secs(2);
        let mut bins = [0u32; 10];
        for i in 0..500 {
            let offset = phase_offset(&key(i), interval);
            assert!(offset < interval, "{offset:?}");
            bins[(offset.as_nanos() * 10 / interval.as_nanos()) as usize] += 1;
        }
        // 50 expected per 200 ms bin; a lockstep start would put all 500 in one.
        for (bin, count) in bins.iter().enumerate() {
            assert!(
                (25..=75).contains(count),
                "bin {bin} holds {count}: {bins:?}"
            );
        }
    }

    #[test]
    fn a_phase_is_stable_and_depends_on_the_key() {
        let interval = Duration::from_secs(2);
        assert_eq!(
            phase_offset(&key(1), interval),
            phase_offset(&key(1), interval)
        );
        assert_ne!(
            phase_offset(&key(1), interval),
            phase_offset(&key(2), interval)
        );
    }

    #[test]
    fn next_aligned_is_the_next_grid_point_at_the_offset() {
        let interval = Duration::from_millis(2000);
        let offset = Duration::from_millis(300);
        let at = |ms| next_aligned(Duration::from_millis(ms), interval, offset);
        assert_eq!(at(0), Duration::from_millis(300));
        assert_eq!(at(299), Duration::from_millis(300));
        // Strictly after now: a cycle that ends exactly on its phase waits a whole interval.
        assert_eq!(at(300), Duration::from_millis(2300));
        assert_eq!(at(1999), Duration::from_millis(2300));
        assert_eq!(at(4301), Duration::from_millis(6300));
        // Offset zero lands on the grid itself.
        assert_eq!(
            next_aligned(Duration::from_millis(4100), interval, Duration::ZERO),
            Duration::from_millis(6000)
        );
    }

    #[test]
    fn a_conflict_waits_longer_each_time_in_a_row_within_the_write_interval() {
        let most = Duration::from_secs(60);
        let secs = |n, j| conflict_wait(n, j, most).as_secs_f64();
        // One to two seconds after the first, then doubling, jitter over the upper half.
        assert_eq!((secs(1, 0.0), secs(1, 1.0)), (1.0, 2.0));
        assert_eq!((secs(2, 0.0), secs(2, 1.0)), (2.0, 4.0));
        assert_eq!((secs(4, 0.0), secs(4, 1.0)), (8.0, 16.0));
        // Never beyond the write interval, however many in a row (no overflow).
        assert_eq!((secs(6, 0.0), secs(6, 1.0)), (30.0, 60.0));
        assert_eq!(secs(u32::MAX, 1.0), 60.0);
        // A jitter out of range or not a number is held to the range.
        assert_eq!(secs(1, 7.0), 2.0);
        assert_eq!(secs(1, f64::NAN), 1.0);
        assert_eq!(conflict_wait(0, 1.0, most), Duration::from_secs(2));
        // A short write interval bounds the first wait too.
        assert_eq!(
            conflict_wait(1, 1.0, Duration::from_millis(500)),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn jitter_is_within_its_range_and_varies() {
        let draws: Vec<f64> = (0..64).map(|_| jitter()).collect();
        assert!(draws.iter().all(|j| (0.0..1.0).contains(j)), "{draws:?}");
        assert!(draws.windows(2).any(|w| w[0] != w[1]), "{draws:?}");
    }
}
