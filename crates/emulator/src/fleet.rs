//! A fleet of emulated replicas on loopback, started in-process.
//!
//! Owns: binding listeners (replica `i` on `127.0.0.1:base_port + i`, or an ephemeral port when
//! `base_port` is 0), spawning each replica's HTTP server and real-time driver, adding and
//! removing replicas at runtime, and shutting them down. Does not own what a replica does (see
//! [`super::server`]).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::serve::ListenerExt as _;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::server::{Replica, ReplicaConfig};

/// One running replica: its address, its [`Replica`] (faults, snapshots) and its tasks.
#[derive(Debug)]
pub struct ReplicaHandle {
    addr: SocketAddr,
    replica: Arc<Replica>,
    shutdown: CancellationToken,
    server: JoinHandle<()>,
    driver: JoinHandle<()>,
}

impl ReplicaHandle {
    /// Binds `addr` and starts serving a new replica there.
    pub async fn start(addr: SocketAddr, config: ReplicaConfig) -> anyhow::Result<ReplicaHandle> {
        let replica = Replica::new(config)?;
        let listener = TcpListener::bind(addr).await.with_context(|| {
            format!("emulated replica: cannot listen on {addr}; pick a free --base-port")
        })?;
        Self::serve(listener, replica)
    }

    /// Serves `replica` on an already bound listener.
    pub fn serve(listener: TcpListener, replica: Arc<Replica>) -> anyhow::Result<ReplicaHandle> {
        let addr = listener
            .local_addr()
            .context("emulated replica: no local address")?;
        let shutdown = CancellationToken::new();
        let driver = tokio::spawn(Arc::clone(&replica).drive(shutdown.clone()));
        let app = replica.router();
        let stop = shutdown.clone();
        let server = tokio::spawn(async move {
            // vLLM's server sets TCP_NODELAY: without it small SSE writes can wait for a
            // delayed ACK (up to ~40 ms) and inflate the client's inter-token latency.
            let listener = listener.tap_io(|tcp| {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "emulated replica: TCP_NODELAY not set");
                }
            });
            let serve = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned());
            if let Err(e) = serve.await {
                tracing::warn!(%addr, error = %e, "emulated replica server stopped");
            }
        });
        Ok(ReplicaHandle {
            addr,
            replica,
            shutdown,
            server,
            driver,
        })
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Base URL, e.g. `http://127.0.0.1:8000`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The `/metrics` URL.
    pub fn metrics_url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }

    /// The replica (faults, restart, snapshots, rendering).
    pub fn replica(&self) -> &Arc<Replica> {
        &self.replica
    }

    /// Stops serving: open streams end, new connections are refused. Waits at most 2 s for
    /// connections to close.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.driver.await;
        let mut server = self.server;
        if tokio::time::timeout(Duration::from_secs(2), &mut server)
            .await
            .is_err()
        {
            server.abort();
        }
    }
}

/// Replicas on loopback, added and removed at runtime.
#[derive(Debug)]
pub struct LoopbackFleet {
    config: ReplicaConfig,
    base_port: u16,
    replicas: Vec<ReplicaHandle>,
}

impl LoopbackFleet {
    /// Starts `n` replicas; replica `i` listens on `127.0.0.1:base_port + i` (ephemeral ports
    /// when `base_port` is 0).
    pub async fn start(
        n: usize,
        base_port: u16,
        config: ReplicaConfig,
    ) -> anyhow::Result<LoopbackFleet> {
        config.engine.validate()?;
        if base_port != 0 && usize::from(base_port) + n > usize::from(u16::MAX) + 1 {
            anyhow::bail!(
                "--base-port {base_port} + --replicas {n} runs past port 65535; lower one of them"
            );
        }
        let mut fleet = LoopbackFleet {
            config,
            base_port,
            replicas: Vec::with_capacity(n),
        };
        for _ in 0..n {
            fleet.add_replica().await?;
        }
        Ok(fleet)
    }

    /// Starts one more replica (on the next port after the last one) and returns it.
    pub async fn add_replica(&mut self) -> anyhow::Result<&ReplicaHandle> {
        let i = self.replicas.len();
        let port = if self.base_port == 0 {
            0
        } else {
            u16::try_from(usize::from(self.base_port) + i)
                .context("emulated fleet: no port left above --base-port")?
        };
        let mut config = self.config.clone();
        config.seed = config.seed.wrapping_add(i as u64);
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let handle = ReplicaHandle::start(addr, config).await?;
        self.replicas.push(handle);
        Ok(&self.replicas[i])
    }

    /// Stops the newest replica; false when none is left.
    pub async fn remove_replica(&mut self) -> bool {
        match self.replicas.pop() {
            Some(h) => {
                h.stop().await;
                true
            }
            None => false,
        }
    }

    /// The running replicas, oldest first.
    pub fn replicas(&self) -> &[ReplicaHandle] {
        &self.replicas
    }

    /// Number of running replicas.
    pub fn len(&self) -> usize {
        self.replicas.len()
    }

    /// Whether no replica is running.
    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty()
    }

    /// Base URLs of the running replicas.
    pub fn urls(&self) -> Vec<String> {
        self.replicas.iter().map(ReplicaHandle::url).collect()
    }

    /// `/metrics` URLs of the running replicas.
    pub fn metrics_urls(&self) -> Vec<String> {
        self.replicas
            .iter()
            .map(ReplicaHandle::metrics_url)
            .collect()
    }

    /// Stops every replica.
    pub async fn shutdown(mut self) {
        while self.remove_replica().await {}
    }
}
