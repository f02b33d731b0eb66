//! The demo's stand-in for a Deployment and its headless Service: emulated vLLM replicas on
//! loopback that start after a start-up delay, join the Service when ready, and leave it and
//! drain when removed.
//!
//! Owns: the replica set (`spec.replicas` as the HPA sets it), each replica's life (starting,
//! ready, draining), the hosts file that plays the headless Service's DNS for the scaler, and
//! the list of ready replicas the load is spread over. Does not own: the emulated replica itself
//! (see [`vllm_emulator::ReplicaHandle`]).
//!
//! Replica `i` listens on `127.0.0.{i+2}` at one shared port, as pods of a Deployment listen on
//! their own IPs at the same port; the hosts file maps the Service name to the ready replicas'
//! addresses, re-read by the scaler on every scrape cycle.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use vllm_emulator::{EngineConfig, ReplicaConfig, ReplicaHandle};

/// The name the scaler resolves (the headless Service's DNS name).
pub const SERVICE_NAME: &str = "vllm-demo";

/// A ready replica as the load balancer sees it.
#[derive(Debug)]
pub struct Endpoint {
    /// `http://127.0.0.x:port`.
    pub base_url: String,
    /// Requests sent to it and not answered yet.
    pub in_flight: AtomicUsize,
}

/// Where a replica is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Starting,
    Ready,
    Draining,
}

#[derive(Debug)]
struct Pod {
    slot: u32,
    state: State,
    endpoint: Arc<Endpoint>,
    /// Cancels a start that has not finished, or tells a ready replica to drain.
    cancel: CancellationToken,
}

/// Counts for the live view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// `spec.replicas`.
    pub spec: u32,
    /// Started, not ready yet.
    pub starting: u32,
    /// Ready and in the Service.
    pub ready: u32,
    /// Removed, finishing their requests.
    pub draining: u32,
}

/// What happened to a replica, for the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// When.
    pub at: Instant,
    /// What.
    pub what: String,
}

/// Settings of the replica set.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// The port every replica listens on.
    pub port: u16,
    /// The hosts file the scaler reads.
    pub hosts_file: PathBuf,
    /// From creation to ready.
    pub startup_delay: Duration,
    /// Longest wait for a removed replica's requests to finish.
    pub drain_timeout: Duration,
    /// The engine each replica runs.
    pub engine: EngineConfig,
    /// The model name served.
    pub model: String,
}

/// The replica set. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct DemoFleet {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    options: FleetOptions,
    pods: Mutex<Vec<Pod>>,
    spec: Mutex<u32>,
    events: mpsc::UnboundedSender<Event>,
    shutdown: CancellationToken,
    tasks: tokio_util::task::TaskTracker,
}

/// The loopback address of replica slot `slot` (127.0.0.2, 127.0.0.3, ...).
pub fn slot_ip(slot: u32) -> IpAddr {
    let n = slot + 2;
    IpAddr::V4(Ipv4Addr::new(127, 0, (n >> 8) as u8, (n & 0xff) as u8))
}

impl DemoFleet {
    /// An empty replica set; events go to `events`.
    pub fn new(options: FleetOptions, events: mpsc::UnboundedSender<Event>) -> Self {
        Self {
            inner: Arc::new(Inner {
                options,
                pods: Mutex::new(Vec::new()),
                spec: Mutex::new(0),
                events,
                shutdown: CancellationToken::new(),
                tasks: tokio_util::task::TaskTracker::new(),
            }),
        }
    }

    /// Starts `n` replicas at once, ready when this returns (the Deployment before the story).
    pub async fn start_ready(&self, n: u32) -> anyhow::Result<()> {
        for _ in 0..n {
            let (slot, endpoint, cancel) = self.add_pod(State::Starting);
            let server = start_replica(&self.inner.options, slot).await?;
            self.become_ready(slot, &endpoint, cancel, server);
        }
        *lock(&self.inner.spec) = n;
        self.write_hosts();
        Ok(())
    }

    /// `spec.replicas`.
    pub fn spec(&self) -> u32 {
        *lock(&self.inner.spec)
    }

    /// Counts by state.
    pub fn counts(&self) -> Counts {
        let pods = lock(&self.inner.pods);
        let count = |s| pods.iter().filter(|p| p.state == s).count() as u32;
        Counts {
            spec: self.spec(),
            starting: count(State::Starting),
            ready: count(State::Ready),
            draining: count(State::Draining),
        }
    }

    /// The ready replicas, in slot order.
    pub fn ready_endpoints(&self) -> Vec<Arc<Endpoint>> {
        let pods = lock(&self.inner.pods);
        pods.iter()
            .filter(|p| p.state == State::Ready)
            .map(|p| p.endpoint.clone())
            .collect()
    }

    /// Sets `spec.replicas` as the HPA does: new replicas start (ready after the start-up
    /// delay); removed ones are those not ready first, then the newest, and drain.
    pub fn set_replicas(&self, n: u32) {
        let mut spec = lock(&self.inner.spec);
        if *spec == n {
            return;
        }
        *spec = n;
        drop(spec);
        let live = {
            let pods = lock(&self.inner.pods);
            pods.iter().filter(|p| p.state != State::Draining).count() as u32
        };
        if n > live {
            for _ in live..n {
                self.create();
            }
        } else {
            for _ in n..live {
                self.remove_one();
            }
        }
    }

    fn add_pod(&self, state: State) -> (u32, Arc<Endpoint>, CancellationToken) {
        let mut pods = lock(&self.inner.pods);
        let slot = (0..)
            .find(|s| pods.iter().all(|p| p.slot != *s))
            .unwrap_or(0);
        let endpoint = Arc::new(Endpoint {
            base_url: format!(
                "http://{}",
                SocketAddr::new(slot_ip(slot), self.inner.options.port)
            ),
            in_flight: AtomicUsize::new(0),
        });
        let cancel = self.inner.shutdown.child_token();
        pods.push(Pod {
            slot,
            state,
            endpoint: endpoint.clone(),
            cancel: cancel.clone(),
        });
        (slot, endpoint, cancel)
    }

    fn create(&self) {
        let (slot, endpoint, cancel) = self.add_pod(State::Starting);
        let delay = self.inner.options.startup_delay;
        self.event(format!(
            "replica {} created: loading the model, ready in {:.0} s",
            slot_ip(slot),
            delay.as_secs_f64()
        ));
        let fleet = self.clone();
        self.inner.tasks.spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
            match start_replica(&fleet.inner.options, slot).await {
                Ok(server) => {
                    fleet.become_ready(slot, &endpoint, cancel, server);
                    fleet.write_hosts();
                    fleet.event(format!(
                        "replica {} ready: joins the Service",
                        slot_ip(slot)
                    ));
                }
                Err(error) => {
                    fleet.event(format!(
                        "replica {} failed to start: {error:#}",
                        slot_ip(slot)
                    ));
                    lock(&fleet.inner.pods).retain(|p| p.slot != slot);
                }
            }
        });
    }

    fn become_ready(
        &self,
        slot: u32,
        endpoint: &Arc<Endpoint>,
        cancel: CancellationToken,
        server: ReplicaHandle,
    ) {
        {
            let mut pods = lock(&self.inner.pods);
            if let Some(p) = pods.iter_mut().find(|p| p.slot == slot) {
                p.state = State::Ready;
            }
        }
        // The replica's life after ready: serve until told to drain, then finish in-flight
        // requests (bounded) and stop.
        let fleet = self.clone();
        let endpoint = endpoint.clone();
        self.inner.tasks.spawn(async move {
            cancel.cancelled().await;
            let deadline = Instant::now() + fleet.inner.options.drain_timeout;
            while endpoint.in_flight.load(Ordering::Relaxed) > 0
                && Instant::now() < deadline
                && !fleet.inner.shutdown.is_cancelled()
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let left = endpoint.in_flight.load(Ordering::Relaxed);
            server.stop().await;
            lock(&fleet.inner.pods).retain(|p| p.slot != slot);
            if !fleet.inner.shutdown.is_cancelled() {
                if left == 0 {
                    fleet.event(format!("replica {} drained and stopped", slot_ip(slot)));
                } else {
                    fleet.event(format!(
                        "replica {} stopped with {left} requests unfinished after the drain timeout",
                        slot_ip(slot)
                    ));
                }
            }
        });
    }

    fn remove_one(&self) {
        let mut pods = lock(&self.inner.pods);
        // A ReplicaSet deletes pods that are not ready first, then the newest.
        let victim = pods
            .iter()
            .enumerate()
            .filter(|(_, p)| p.state == State::Starting)
            .map(|(i, _)| i)
            .next_back()
            .or_else(|| {
                pods.iter()
                    .enumerate()
                    .filter(|(_, p)| p.state == State::Ready)
                    .max_by_key(|(_, p)| p.slot)
                    .map(|(i, _)| i)
            });
        let Some(i) = victim else { return };
        let pod = &mut pods[i];
        pod.cancel.cancel();
        let slot = pod.slot;
        if pod.state == State::Starting {
            pods.remove(i);
            drop(pods);
            self.event(format!(
                "replica {} removed before it was ready",
                slot_ip(slot)
            ));
        } else {
            pod.state = State::Draining;
            drop(pods);
            self.write_hosts();
            self.event(format!(
                "replica {} removed: leaves the Service, drains its requests",
                slot_ip(slot)
            ));
        }
    }

    /// Rewrites the hosts file with the ready replicas (written to a temporary file and
    /// renamed, so the scaler never reads half a file).
    fn write_hosts(&self) {
        let mut text = String::from("# written by vllm-keda-scaler demo: the ready replicas\n");
        {
            let pods = lock(&self.inner.pods);
            for p in pods.iter().filter(|p| p.state == State::Ready) {
                text.push_str(&format!("{} {SERVICE_NAME}\n", slot_ip(p.slot)));
            }
        }
        let path = &self.inner.options.hosts_file;
        let tmp = path.with_extension("tmp");
        let result = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
        if let Err(error) = result {
            self.event(format!(
                "cannot write the hosts file {}: {error}",
                path.display()
            ));
        }
    }

    fn event(&self, what: String) {
        let _ = self.inner.events.send(Event {
            at: Instant::now(),
            what,
        });
    }

    /// Stops every replica (no drain) and waits for them.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Checks that replica addresses beyond 127.0.0.1 can be bound here, and picks the shared port.
pub async fn pick_port() -> anyhow::Result<u16> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(slot_ip(0), 0))
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot listen on {}: {e}; the demo runs each emulated replica on its own \
                 loopback address (127.0.0.2, 127.0.0.3, ...) like pods behind a headless \
                 Service. On macOS add them first: for i in 2 3 4 5 6; do sudo ifconfig lo0 \
                 alias 127.0.0.$i up; done",
                slot_ip(0)
            )
        })?;
    Ok(listener.local_addr()?.port())
}

async fn start_replica(options: &FleetOptions, slot: u32) -> anyhow::Result<ReplicaHandle> {
    let config = ReplicaConfig {
        model: options.model.clone(),
        engine: options.engine.clone(),
        seed: u64::from(slot),
        ..ReplicaConfig::default()
    };
    ReplicaHandle::start(SocketAddr::new(slot_ip(slot), options.port), config).await
}
