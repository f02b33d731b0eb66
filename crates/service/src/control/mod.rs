//! One background loop per ScaledObject: discover, scrape, parse, compute signals, decide,
//! and keep the latest decision in memory for the RPCs.
//!
//! Owns: the registry of loops keyed by (namespace, name, trigger metadata), starting a loop on
//! first sight (metadata validated once), stopping it when KEDA stops asking, and the rule for
//! when an answer is "unavailable". A ScaledObject with several `external` triggers sends each
//! trigger's metadata under the same namespace and name: each trigger gets its own loop and
//! state, so they never restart each other. Changed metadata is a new trigger; the loop of the
//! old metadata stops once KEDA asks only about the new one. Does not own: the wire protocol
//! (see [`crate::grpc`]) or any of the pure stages it drives.
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

pub use status::{
    AnswerKind, DecisionRecord, LearnedStateStatus, ScaleTargetStatus, Status, TargetHealth,
    Unavailable, reason_label,
};

use crate::telemetry::Metrics;
use vllm_keda_core::config::{ConfigError, ScalerConfig, TargetSource};

/// Identifies one trigger of a ScaledObject: its namespace, name and a hash of its metadata.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Key {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The trigger: a stable hash of its metadata (see [`trigger_id`]).
    pub trigger: TriggerId,
}

impl Key {
    /// The key of the trigger with `metadata` on ScaledObject `namespace/name`.
    pub fn new(namespace: &str, name: &str, metadata: &HashMap<String, String>) -> Self {
        Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            trigger: trigger_id(metadata),
        }
    }

    fn same_scaledobject(&self, namespace: &str, name: &str) -> bool {
        self.namespace == namespace && self.name == name
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A trigger's identity: a stable 64-bit hash of its metadata, shown as 16 hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TriggerId(pub u64);

impl std::fmt::Display for TriggerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl serde::Serialize for TriggerId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The [`TriggerId`] of `metadata`: FNV-1a (stable across builds and platforms) of each entry,
/// summed so that the map's order does not matter and no allocation or sort is needed (every
/// RPC computes it), then mixed. The same metadata in any order gives the same id.
pub fn trigger_id(metadata: &HashMap<String, String>) -> TriggerId {
    let mut sum: u64 = 0;
    for (key, value) in metadata {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        // Lengths first, so ("ab", "c") and ("a", "bc") differ.
        for part in [key.as_bytes(), value.as_bytes()] {
            for byte in (part.len() as u64).to_le_bytes().iter().chain(part) {
                hash ^= u64::from(*byte);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        sum = sum.wrapping_add(hash);
    }
    // SplitMix64's finaliser: every input bit reaches every output bit.
    let mut z = sum ^ (metadata.len() as u64).rotate_left(32);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    TriggerId(z ^ (z >> 31))
}

/// Why no loop serves a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// The metadata is invalid (KEDA gets `InvalidArgument`).
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// The ScaledObject already has [`ControlOptions::max_triggers`] loops that KEDA asked
    /// about within their scrape interval (its metadata changes faster than loops can start):
    /// KEDA gets `Unavailable` and asks again.
    #[error("{0}")]
    Busy(String),
    /// A `service` or `dcgmService` names another namespace's Service while
    /// [`ControlOptions::service_namespace_only`] is set (KEDA gets `InvalidArgument`).
    #[error("{0}")]
    OtherNamespace(String),
}

/// Settings of the loop registry.
#[derive(Debug, Clone)]
pub struct ControlOptions {
    /// Stop a loop when no RPC asked about its ScaledObject for this long.
    pub idle_stop: Duration,
    /// Stop a loop sooner (after this long, at most `idle_stop`) when another trigger of the
    /// same ScaledObject started after KEDA last asked about it: its metadata was replaced.
    pub superseded_stop: Duration,
    /// Most loops one ScaledObject may have (one per distinct trigger metadata). A new
    /// metadata beyond it replaces the loop KEDA asked about least recently, if that was at
    /// least one scrape interval ago; else the request is answered `Unavailable`.
    pub max_triggers: usize,
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
    /// Read each ScaledObject's scale target through this Kubernetes API client (`None`: no
    /// API; the policy holds at least the observed pods).
    pub kube: Option<crate::scale_target::KubeClient>,
    /// Where loops keep and find the proactive policy's learning (`--learned-state-configmap`).
    pub learned_store: Option<crate::learned_store::LearnedStore>,
    /// Read the scale target at most this often per loop.
    pub kube_refresh: Duration,
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
    /// `service` and `dcgmService` must name a Service in the ScaledObject's own namespace
    /// (`--service-namespace-only`; see [`crate::discovery::in_namespace`]).
    pub service_namespace_only: bool,
}

impl Default for ControlOptions {
    fn default() -> Self {
        Self {
            idle_stop: Duration::from_secs(600),
            superseded_stop: Duration::from_secs(60),
            max_triggers: 8,
            first_cycle_wait: Duration::from_secs(1),
            stale_intervals: 3,
            stale_min: Duration::from_secs(1),
            history_len: 32,
            hosts_file: None,
            kube: None,
            learned_store: None,
            kube_refresh: Duration::from_secs(5),
            loop_runtime: None,
            scrape: crate::scrape::ScrapeSettings::default(),
            max_scaledobjects: DEFAULT_MAX_SCALEDOBJECTS,
            service_namespace_only: false,
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
    /// Loops that have ended since the registry was made, replaced ones included (see
    /// [`LoopRegistry::stopped_loops`]).
    stopped: AtomicU64,
}

/// One trigger's running loop, as RPCs and `/debug` see it.
#[derive(Debug)]
pub struct ScaledObject {
    /// Namespace, name and trigger.
    pub key: Key,
    /// The `trigger` label of this loop's series: `None` for the first loop of its
    /// ScaledObject (so a ScaledObject with one trigger keeps the labels namespace and
    /// scaledobject alone), the trigger id for a loop started beside another.
    pub trigger_label: Option<String>,
    /// The metadata the loop was started with.
    pub metadata: HashMap<String, String>,
    /// The validated configuration.
    pub config: Arc<ScalerConfig>,
    /// The highest target of the ScaledObject's other loops when this one started (its
    /// metadata changed, or a trigger was added), where the policy resumes.
    previous_target: Option<u32>,
    /// When this loop started (time since the registry's origin).
    started_millis: u64,
    status: watch::Receiver<Arc<Status>>,
    last_asked_millis: AtomicU64,
    /// When an open `StreamIsActive` last showed its client is there (keeps the loop from
    /// the idle stop, but is no ask: see [`Deregister::superseded`]).
    last_streamed_millis: AtomicU64,
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
                stopped: AtomicU64::new(0),
            }),
        }
    }

    /// The loop of this trigger (`namespace/name` with `metadata`), started as needed. Marks
    /// it as asked. Fails for invalid metadata, or when the ScaledObject's metadata changes
    /// faster than loops may start (see [`ControlOptions::max_triggers`]).
    pub fn get_or_start(
        &self,
        namespace: &str,
        name: &str,
        metadata: &HashMap<String, String>,
    ) -> Result<Arc<ScaledObject>, StartError> {
        let key = Key::new(namespace, name, metadata);
        if let Some(so) = self.running(&key) {
            if so.metadata == *metadata {
                so.touch();
                return Ok(so);
            }
        }
        let config = Arc::new(ScalerConfig::from_metadata(metadata)?);
        if self.inner.options.service_namespace_only {
            self.check_namespace(namespace, &config)?;
        }
        let mut loops = self
            .inner
            .loops
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(existing) = loops.get(&key) {
            if !existing.is_stopped() {
                if existing.metadata == *metadata {
                    existing.touch();
                    return Ok(existing.clone());
                }
                // Two metadata maps with one hash: the newer one takes the slot.
                tracing::warn!(scaledobject = %key, trigger = %key.trigger, "trigger id collision: replacing its loop");
                existing.cancel.cancel();
            }
        }
        let mut siblings: Vec<Arc<ScaledObject>> = loops
            .values()
            .filter(|so| so.key.same_scaledobject(namespace, name) && !so.is_stopped())
            .cloned()
            .collect();
        let previous_target = siblings
            .iter()
            .filter_map(|so| so.latest().decision.as_ref().map(|d| d.target_replicas))
            .max();
        if siblings.len() >= self.inner.options.max_triggers.max(1) {
            siblings.sort_by_key(|so| so.last_asked_millis.load(Ordering::Relaxed));
            let oldest = siblings.remove(0);
            let idle = oldest.idle_for();
            if idle < oldest.config.scrape_interval {
                return Err(StartError::Busy(format!(
                    "scaledobject {namespace}/{name} already has {} triggers with distinct \
                     metadata, each asked about within its scrape interval: its metadata \
                     changes faster than new loops may start; retry after one scrape interval",
                    siblings.len() + 1
                )));
            }
            tracing::info!(
                scaledobject = %oldest.key,
                trigger = %oldest.key.trigger,
                idle_seconds = idle.as_secs_f64(),
                "stopping the least recently asked trigger's loop to make room for new metadata"
            );
            oldest.cancel.cancel();
        }
        let trigger_label = (!siblings.is_empty()).then(|| key.trigger.to_string());
        if !siblings.is_empty() {
            tracing::info!(
                scaledobject = %key,
                trigger = %key.trigger,
                other_triggers = siblings.len(),
                resume_from = previous_target,
                "new trigger metadata for a served scaledobject: starting its own loop"
            );
        }
        let so = self.spawn(
            key.clone(),
            metadata.clone(),
            config,
            previous_target,
            trigger_label,
        );
        loops.insert(key, so.clone());
        loops.retain(|_, so| !so.is_stopped());
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

    /// Refuses a `service` or `dcgmService` outside `namespace` (counted under the
    /// `service_namespace` limit).
    fn check_namespace(&self, namespace: &str, config: &ScalerConfig) -> Result<(), StartError> {
        let sources = [
            ("service", Some(&config.targets)),
            ("dcgmService", config.dcgm_targets.as_ref()),
        ];
        for (key, source) in sources {
            if let Some(TargetSource::Dns { host, .. }) = source {
                if !crate::discovery::in_namespace(host, namespace) {
                    self.inner.metrics.count_limit("service_namespace");
                    return Err(StartError::OtherNamespace(format!(
                        "{key} must name a Service in the ScaledObject's own namespace \
                         {namespace:?}, written <name>.{namespace} or \
                         <name>.{namespace}.svc.<cluster domain> (this scaler runs with \
                         --service-namespace-only)"
                    )));
                }
            }
        }
        Ok(())
    }

    fn running(&self, key: &Key) -> Option<Arc<ScaledObject>> {
        let loops = self
            .inner
            .loops
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        loops.get(key).filter(|so| !so.is_stopped()).cloned()
    }

    /// The running loop of a ScaledObject that KEDA asked about most recently (does not mark
    /// it as asked); see [`LoopRegistry::find_all`] for every trigger.
    pub fn find(&self, namespace: &str, name: &str) -> Option<Arc<ScaledObject>> {
        self.find_all(namespace, name)
            .into_iter()
            .max_by_key(|so| so.last_asked_millis.load(Ordering::Relaxed))
    }

    /// Every running loop of a ScaledObject (one per trigger), sorted by trigger.
    pub fn find_all(&self, namespace: &str, name: &str) -> Vec<Arc<ScaledObject>> {
        let loops = self
            .inner
            .loops
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut all: Vec<Arc<ScaledObject>> = loops
            .values()
            .filter(|so| so.key.same_scaledobject(namespace, name) && !so.is_stopped())
            .cloned()
            .collect();
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all
    }

    /// The running loop of one trigger, if any (does not mark it as asked).
    pub fn find_trigger(
        &self,
        namespace: &str,
        name: &str,
        metadata: &HashMap<String, String>,
    ) -> Option<Arc<ScaledObject>> {
        self.running(&Key::new(namespace, name, metadata))
            .filter(|so| so.metadata == *metadata)
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

    /// How many loops have ended since the registry was made (idle, replaced or shut down).
    pub fn stopped_loops(&self) -> u64 {
        self.inner.stopped.load(Ordering::Relaxed)
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
        trigger_label: Option<String>,
    ) -> Arc<ScaledObject> {
        let (tx, rx) = watch::channel(Arc::new(Status::default()));
        let so = Arc::new(ScaledObject {
            key,
            trigger_label,
            metadata,
            config,
            previous_target,
            started_millis: self.inner.origin.elapsed().as_millis() as u64,
            status: rx,
            last_asked_millis: AtomicU64::new(0),
            last_streamed_millis: AtomicU64::new(0),
            cancel: self.inner.shutdown.child_token(),
            origin: self.inner.origin,
            options: self.inner.options.clone(),
        });
        so.touch();
        tracing::info!(scaledobject = %so.key, trigger = %so.key.trigger, "starting scrape loop");
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
    /// Whether another trigger of `so`'s ScaledObject started after KEDA last asked about
    /// `so`, and `so` has not been asked about since for [`ControlOptions::superseded_stop`]:
    /// its metadata was replaced (a ScaledObject edit), so its loop can stop.
    fn superseded(&self, so: &ScaledObject) -> bool {
        let Some(inner) = self.0.upgrade() else {
            return false;
        };
        // RPC asks only: a stream opened with the old metadata keeps its loop from the idle
        // stop, not from being replaced (the stream then ends, and KEDA reconnects with the
        // new metadata).
        let asked = so.last_asked_millis.load(Ordering::Relaxed);
        let asked_ago = (so.origin.elapsed().as_millis() as u64).saturating_sub(asked);
        if Duration::from_millis(asked_ago)
            < inner.options.superseded_stop.min(inner.options.idle_stop)
        {
            return false;
        }
        let loops = inner
            .loops
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        loops.values().any(|other| {
            other.key.same_scaledobject(&so.key.namespace, &so.key.name)
                && other.key != so.key
                && !other.is_stopped()
                // In the same millisecond counts as after: the clock reads whole milliseconds,
                // and on loopback a new trigger's loop can start within the millisecond of
                // the old one's last ask (which then never stopped).
                && other.started_millis >= asked
        })
    }

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
        // Every loop calls this once as it ends, whether or not a newer loop replaced it.
        inner.stopped.fetch_add(1, Ordering::Relaxed);
        inner.metrics.scaledobjects.set(loops.len() as i64);
    }
}

impl ScaledObject {
    /// Marks the ScaledObject as asked about now (keeps its loop running).
    pub fn touch(&self) {
        let millis = self.origin.elapsed().as_millis() as u64;
        self.last_asked_millis.fetch_max(millis, Ordering::Relaxed);
    }

    /// Marks an open `StreamIsActive` on this loop as alive now: keeps the loop running for a
    /// client that only listens (never calls `GetMetrics`), but is not an ask, so a loop
    /// whose metadata was replaced still stops.
    pub fn touch_stream(&self) {
        let millis = self.origin.elapsed().as_millis() as u64;
        self.last_streamed_millis
            .fetch_max(millis, Ordering::Relaxed);
    }

    /// Time since an RPC last asked about this ScaledObject, or an open stream on it was
    /// last seen alive.
    pub fn idle_for(&self) -> Duration {
        let now = self.origin.elapsed().as_millis() as u64;
        let last = self
            .last_asked_millis
            .load(Ordering::Relaxed)
            .max(self.last_streamed_millis.load(Ordering::Relaxed));
        Duration::from_millis(now.saturating_sub(last))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn service_namespace_only_refuses_another_namespaces_service() {
        let registry = |only: bool| {
            LoopRegistry::new(
                Arc::new(Metrics::new()),
                ControlOptions {
                    service_namespace_only: only,
                    ..ControlOptions::default()
                },
                CancellationToken::new(),
            )
        };
        let other = metadata(&[("service", "vllm.team-b.svc.cluster.local")]);
        let gpus = metadata(&[
            ("service", "vllm.team-a"),
            ("dcgmService", "dcgm.kube-system"),
        ]);
        for meta in [&other, &gpus] {
            let Err(StartError::OtherNamespace(message)) =
                registry(true).get_or_start("team-a", "so", meta)
            else {
                panic!("{meta:?} was not refused");
            };
            assert!(message.contains("--service-namespace-only"), "{message}");
            assert!(message.contains("\"team-a\""), "{message}");
        }
        let refused = registry(true);
        let _ = refused.get_or_start("team-a", "so", &other);
        let exposition = refused.metrics().encode();
        assert!(
            exposition.contains("limit=\"service_namespace\"} 1"),
            "{exposition}"
        );
    }

    #[tokio::test]
    async fn service_namespace_only_starts_the_own_namespaces_service() {
        let registry = LoopRegistry::new(
            Arc::new(Metrics::new()),
            ControlOptions {
                service_namespace_only: true,
                ..ControlOptions::default()
            },
            CancellationToken::new(),
        );
        let own = metadata(&[("service", "vllm.team-a.svc.cluster.local")]);
        assert!(registry.get_or_start("team-a", "so", &own).is_ok());
        registry.shutdown().await;
        // Off (the default), another namespace's Service is served.
        let open = LoopRegistry::new(
            Arc::new(Metrics::new()),
            ControlOptions::default(),
            CancellationToken::new(),
        );
        let other = metadata(&[("service", "vllm.team-b")]);
        assert!(open.get_or_start("team-a", "so", &other).is_ok());
        open.shutdown().await;
    }

    #[test]
    fn a_trigger_id_depends_on_the_metadata_not_its_order() {
        let a = metadata(&[("endpoints", "a:1"), ("maxReplicas", "5")]);
        let mut b = HashMap::new();
        b.insert("maxReplicas".to_owned(), "5".to_owned());
        b.insert("endpoints".to_owned(), "a:1".to_owned());
        assert_eq!(trigger_id(&a), trigger_id(&b));
        for other in [
            metadata(&[("endpoints", "a:1"), ("maxReplicas", "6")]),
            metadata(&[("endpoints", "a:1")]),
            metadata(&[("endpoints", "a:1m"), ("axReplicas", "5")]),
            metadata(&[]),
        ] {
            assert_ne!(trigger_id(&a), trigger_id(&other), "{other:?}");
        }
        assert_eq!(trigger_id(&a).to_string().len(), 16);
    }
}
