//! One background loop per ScaledObject: discover, scrape, parse, compute signals, decide,
//! and keep the latest decision in memory for the RPCs.
//!
//! Owns: the registry of loops keyed by (namespace, name), starting a loop on first sight
//! (metadata validated once), restarting it when the metadata changes, stopping it when KEDA
//! stops asking, and the rule for when an answer is "unavailable". Does not own: the wire
//! protocol (see [`crate::grpc`]) or any of the pure stages it drives.
//!
//! RPC handlers never scrape and never wait on a lock held across I/O: they read an
//! `Arc<Status>` from a watch channel that the loop replaces after each cycle.

mod cycle;
mod status;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use status::{DecisionRecord, Status, TargetHealth, Unavailable, reason_label};

use crate::telemetry::Metrics;
use vllm_keda_core::config::{ConfigError, ScalerConfig};

/// Identifies a ScaledObject.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Key {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Settings of the loop registry.
#[derive(Debug, Clone)]
pub struct ControlOptions {
    /// Stop a loop when no RPC asked about its ScaledObject for this long.
    pub idle_stop: Duration,
    /// How long `GetMetrics`/`IsActive` wait for a new loop's first cycle before answering
    /// `Unavailable` (KEDA's HPA path has a 3 s deadline for its three calls together).
    pub first_cycle_wait: Duration,
    /// `Unavailable` once no target answered for this many scrape intervals.
    pub stale_intervals: u32,
    /// Lower bound of that staleness limit.
    pub stale_min: Duration,
    /// Distinct decisions kept for `/debug`.
    pub history_len: usize,
    /// Resolve `service` names from this hosts(5) file instead of the system resolver (local
    /// runs and tests: pods on 127.0.0.x come and go by editing the file).
    pub hosts_file: Option<std::path::PathBuf>,
    /// Run the loops (scraping and parsing) on this runtime instead of the caller's, so RPCs
    /// answered on the caller's threads never queue behind a scrape. `serve` gives them their
    /// own threads.
    pub loop_runtime: Option<tokio::runtime::Handle>,
    /// The scrape rules and limits every loop applies (each loop sets its own timeout from its
    /// scrape interval).
    pub scrape: crate::scrape::ScrapeSettings,
    /// Most ScaledObjects served at once (`--max-scaledobjects`); see
    /// [`LoopRegistry::at_capacity`].
    pub max_scaledobjects: usize,
}

impl Default for ControlOptions {
    fn default() -> Self {
        Self {
            idle_stop: Duration::from_secs(600),
            first_cycle_wait: Duration::from_secs(1),
            stale_intervals: 3,
            stale_min: Duration::from_secs(1),
            history_len: 32,
            hosts_file: None,
            loop_runtime: None,
            scrape: crate::scrape::ScrapeSettings::default(),
            max_scaledobjects: DEFAULT_MAX_SCALEDOBJECTS,
        }
    }
}

/// The default of [`ControlOptions::max_scaledobjects`].
pub const DEFAULT_MAX_SCALEDOBJECTS: usize = 2000;

/// The registry of per-ScaledObject loops. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct LoopRegistry {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    loops: RwLock<HashMap<Key, Arc<ScaledObject>>>,
    metrics: Arc<Metrics>,
    options: ControlOptions,
    origin: Instant,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

/// One ScaledObject's running loop, as RPCs and `/debug` see it.
#[derive(Debug)]
pub struct ScaledObject {
    /// Namespace and name.
    pub key: Key,
    /// The metadata the loop was started with.
    pub metadata: HashMap<String, String>,
    /// The validated configuration.
    pub config: Arc<ScalerConfig>,
    /// The target of the loop this one replaced (metadata changed), where the policy resumes.
    previous_target: Option<u32>,
    status: watch::Receiver<Arc<Status>>,
    last_asked_millis: AtomicU64,
    cancel: CancellationToken,
    origin: Instant,
    options: ControlOptions,
}

impl LoopRegistry {
    /// An empty registry; loops stop when `shutdown` is cancelled.
    pub fn new(
        metrics: Arc<Metrics>,
        options: ControlOptions,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                loops: RwLock::new(HashMap::new()),
                metrics,
                options,
                origin: Instant::now(),
                shutdown,
                tasks: TaskTracker::new(),
            }),
        }
    }

    /// The ScaledObject's loop, started (or restarted, when `metadata` changed) as needed.
    /// Marks it as asked. Fails only for invalid metadata.
    pub fn get_or_start(
        &self,
        namespace: &str,
        name: &str,
        metadata: &HashMap<String, String>,
    ) -> Result<Arc<ScaledObject>, ConfigError> {
        if let Some(so) = self.find(namespace, name) {
            if so.metadata == *metadata {
                so.touch();
                return Ok(so);
            }
        }
        let config = Arc::new(ScalerConfig::from_metadata(metadata)?);
        let key = Key {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        let mut loops = self
            .inner
            .loops
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut previous_target = None;
        if let Some(existing) = loops.get(&key) {
            if existing.metadata == *metadata && !existing.is_stopped() {
                existing.touch();
                return Ok(existing.clone());
            }
            if !existing.is_stopped() {
                tracing::info!(scaledobject = %key, "scaler metadata changed: restarting its loop");
                existing.cancel.cancel();
                previous_target = existing
                    .latest()
                    .decision
                    .as_ref()
                    .map(|d| d.target_replicas);
            }
        }
        let so = self.spawn(key.clone(), metadata.clone(), config, previous_target);
        loops.insert(key, so.clone());
        self.inner.metrics.scaledobjects.set(loops.len() as i64);
        Ok(so)
    }

    /// Whether starting a loop for this ScaledObject would pass
    /// [`ControlOptions::max_scaledobjects`] (a ScaledObject already served never is); counts
    /// the refusal under the `scaledobjects` limit.
    pub fn at_capacity(&self, namespace: &str, name: &str) -> bool {
        let full = {
            let loops = self
                .inner
                .loops
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            loops.len() >= self.inner.options.max_scaledobjects
        };
        let full = full && self.find(namespace, name).is_none();
        if full {
            self.inner.metrics.count_limit("scaledobjects");
        }
        full
    }

    /// The running loop of a ScaledObject, if any (does not mark it as asked).
    pub fn find(&self, namespace: &str, name: &str) -> Option<Arc<ScaledObject>> {
        let key = Key {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        let loops = self
            .inner
            .loops
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        loops.get(&key).filter(|so| !so.is_stopped()).cloned()
    }

    /// Every running loop, sorted by key.
    pub fn list(&self) -> Vec<Arc<ScaledObject>> {
        let loops = self
            .inner
            .loops
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut all: Vec<Arc<ScaledObject>> = loops.values().cloned().collect();
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all
    }

    /// The shared metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// The registry's settings.
    pub fn options(&self) -> &ControlOptions {
        &self.inner.options
    }

    /// Stops every loop and waits for them to finish.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }

    fn spawn(
        &self,
        key: Key,
        metadata: HashMap<String, String>,
        config: Arc<ScalerConfig>,
        previous_target: Option<u32>,
    ) -> Arc<ScaledObject> {
        let (tx, rx) = watch::channel(Arc::new(Status::default()));
        let so = Arc::new(ScaledObject {
            key,
            metadata,
            config,
            previous_target,
            status: rx,
            last_asked_millis: AtomicU64::new(0),
            cancel: self.inner.shutdown.child_token(),
            origin: self.inner.origin,
            options: self.inner.options.clone(),
        });
        so.touch();
        tracing::info!(scaledobject = %so.key, "starting scrape loop");
        let registry = Arc::downgrade(&self.inner);
        let run = cycle::run(
            so.clone(),
            tx,
            self.inner.metrics.clone(),
            Deregister(registry),
        );
        match &self.inner.options.loop_runtime {
            Some(runtime) => self.inner.tasks.spawn_on(run, runtime),
            None => self.inner.tasks.spawn(run),
        };
        so
    }
}

/// Removes a stopped loop from the registry (if it is still the registered one).
#[derive(Debug)]
struct Deregister(Weak<Inner>);

impl Deregister {
    fn remove(&self, so: &Arc<ScaledObject>) {
        let Some(inner) = self.0.upgrade() else {
            return;
        };
        let mut loops = inner
            .loops
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if loops.get(&so.key).is_some_and(|cur| Arc::ptr_eq(cur, so)) {
            loops.remove(&so.key);
        }
        inner.metrics.scaledobjects.set(loops.len() as i64);
    }
}

impl ScaledObject {
    /// Marks the ScaledObject as asked about now (keeps its loop running).
    pub fn touch(&self) {
        let millis = self.origin.elapsed().as_millis() as u64;
        self.last_asked_millis.fetch_max(millis, Ordering::Relaxed);
    }

    /// Time since an RPC last asked about this ScaledObject.
    pub fn idle_for(&self) -> Duration {
        let now = self.origin.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_asked_millis.load(Ordering::Relaxed)))
    }

    /// The latest published state (never waits).
    pub fn latest(&self) -> Arc<Status> {
        self.status.borrow().clone()
    }

    /// A receiver that sees every published state.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Status>> {
        self.status.clone()
    }

    /// Whether the loop has stopped (replaced, idle, or shutting down).
    pub fn is_stopped(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// How long without any healthy target makes the answer `Unavailable`.
    pub fn stale_after(&self) -> Duration {
        (self.config.scrape_interval * self.options.stale_intervals).max(self.options.stale_min)
    }

    /// The latest state once the first cycle has finished, waiting at most
    /// [`ControlOptions::first_cycle_wait`] for it.
    pub async fn first_status(&self) -> Arc<Status> {
        let mut rx = self.status.clone();
        if rx.borrow().cycles > 0 {
            return rx.borrow().clone();
        }
        let wait = rx.wait_for(|s| s.cycles > 0);
        match tokio::time::timeout(self.options.first_cycle_wait, wait).await {
            Ok(Ok(status)) => status.clone(),
            _ => self.latest(),
        }
    }

    /// The decision to give KEDA now, or why there is none.
    pub async fn answer(&self) -> Result<(u32, bool), Unavailable> {
        let status = self.first_status().await;
        status
            .answer(Instant::now(), self.stale_after())
            .map(|d| (d.target_replicas, d.active))
    }
}
