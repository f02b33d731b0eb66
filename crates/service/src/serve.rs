//! `serve`: the production job (gRPC external scaler plus the admin HTTP server), with graceful
//! shutdown.
//!
//! Owns: binding the listeners, wiring [`crate::control`], [`crate::grpc`] and
//! [`crate::http`] together, signals and the drain. Does not own: any RPC or route logic.
//!
//! In-process use (tests, `demo`): bind two `TcpListener`s, call [`start`], read decisions
//! through [`Server::loops`], and stop with [`Server::shutdown`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::control::{ControlOptions, LoopRegistry};
use crate::grpc::ScalerService;
use crate::http::{AdminOptions, AdminState, IdleTimeout};
use crate::learned_store::LearnedStore;
use crate::proto::external_scaler_server::ExternalScalerServer;
use crate::scale_target::{KubeApi, KubeClient};
use crate::scrape::OwnListener;
use crate::telemetry::Metrics;
use crate::tls::{self, ReloadingConfig, TlsFiles};

/// Settings of a running server (everything but its addresses and threads).
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Drain time after shutdown starts.
    pub shutdown_grace: Duration,
    /// `StreamIsActive` heartbeat.
    pub stream_heartbeat: Duration,
    /// The loop registry's settings.
    pub control: ControlOptions,
    /// Serve gRPC over TLS from these files (plaintext when unset).
    pub tls: Option<TlsFiles>,
    /// How to reach the Kubernetes API for the scale targets' replicas ([`KubeApi::Off`] by
    /// default).
    pub kube_api: KubeApi,
    /// Keep the proactive policy's learning in this ConfigMap (namespace, name), written at
    /// this interval (`--learned-state-configmap`; needs the Kubernetes API).
    pub learned_state: Option<(String, String, Duration)>,
    /// The admin port's `/debug` access and connection timeouts.
    pub admin: AdminOptions,
    /// Serve the admin port over TLS with [`ServeOptions::tls`]'s files (`--admin-tls`); with a
    /// client CA, a client may present a certificate, which opens `/debug` under
    /// [`crate::http::DebugAccess::Certificate`]. Its handshakes count with the gRPC port's.
    pub admin_tls: bool,
    /// Concurrent HTTP/2 streams per gRPC connection (`--grpc-max-streams-per-connection`):
    /// bounds the `StreamIsActive` streams one client can hold open.
    pub grpc_max_streams_per_connection: u32,
    /// A plaintext gRPC connection must send its first bytes within this time, and a TLS one
    /// finish its handshake within the TLS module's handshake timeout.
    pub grpc_preface_timeout: Duration,
    /// Gives the allocator's free memory back to the system; called (off the async threads)
    /// at most every [`RELEASE_CHECK`] when loops have stopped since the last call, so the
    /// memory of thousands of removed ScaledObjects does not stay resident. `None` (the
    /// library's default) never calls anything; the binary passes its allocator's.
    pub release_memory: Option<fn() -> bool>,
}

/// The default of [`ServeOptions::grpc_max_streams_per_connection`]: KEDA holds one
/// `StreamIsActive` stream per ScaledObject on its connection, so this allows a few thousand.
pub const DEFAULT_GRPC_MAX_STREAMS_PER_CONNECTION: u32 = 4096;

/// HTTP/2 keepalive pings on the gRPC port: a peer that stops answering for
/// [`GRPC_KEEPALIVE_TIMEOUT`] after a ping is disconnected.
const GRPC_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const GRPC_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// A gRPC connection with no bytes either way for this long is closed (the keepalive pings
/// keep live clients well inside it).
const GRPC_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// How often `serve` looks whether loops stopped since it last gave free memory back.
pub const RELEASE_CHECK: Duration = Duration::from_secs(5);

/// Calls `release` (the allocator's [`ServeOptions::release_memory`]) on a blocking thread
/// every [`RELEASE_CHECK`] in which loops stopped, and once more at the first check after
/// them in which none did: a wave of ScaledObjects leaving frees their
/// histories and connections in bulk, and neither allocator hands that back on its own while
/// the process is quiet. A steady fleet, whose loops never stop, never triggers it.
async fn release_memory_after_stops(
    loops: LoopRegistry,
    release: fn() -> bool,
    shutdown: CancellationToken,
) {
    let mut ticker = tokio::time::interval(RELEASE_CHECK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut released_at = loops.stopped_loops();
    // Whether the last check released because loops stopped: what other tasks still held of
    // the ended loops (an RPC's or a stream's handle on a ScaledObject, the blocking threads
    // that parsed for them) is freed after the release that counted them. One more release at
    // the first quiet check gives that back too (after 5,000 ScaledObjects left: 51-53 MiB
    // resident with it, 77-92 MiB without; BENCHMARKS.md, "Memory that returns").
    let mut settle = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let stopped = loops.stopped_loops();
        if stopped == released_at {
            if !settle {
                continue;
            }
            settle = false;
        } else {
            settle = true;
        }
        released_at = stopped;
        let started = tokio::time::Instant::now();
        if let Ok(true) = tokio::task::spawn_blocking(release).await {
            tracing::debug!(
                stopped_loops = stopped,
                seconds = started.elapsed().as_secs_f64(),
                "loops stopped: gave the allocator's free memory back to the system"
            );
        }
    }
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            shutdown_grace: Duration::from_secs(10),
            stream_heartbeat: Duration::from_secs(5),
            control: ControlOptions::default(),
            tls: None,
            // The library's default never reaches for a cluster; `serve` defaults to `auto`.
            kube_api: KubeApi::Off,
            learned_state: None,
            admin: AdminOptions::default(),
            admin_tls: false,
            grpc_max_streams_per_connection: DEFAULT_GRPC_MAX_STREAMS_PER_CONNECTION,
            grpc_preface_timeout: Duration::from_secs(10),
            release_memory: None,
        }
    }
}

impl ServeOptions {
    /// The defaults with loopback scrape targets allowed (`--allow-targets 127.0.0.0/8,::1`):
    /// tests and local runs whose pods listen on `127.0.0.x`.
    pub fn loopback() -> Self {
        let mut options = Self::default();
        options.control.scrape = crate::scrape::ScrapeSettings::loopback();
        options
    }
}

/// A running scaler: gRPC and admin HTTP on their listeners.
#[derive(Debug)]
pub struct Server {
    grpc_addr: SocketAddr,
    http_addr: SocketAddr,
    loops: LoopRegistry,
    shutdown: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Server {
    /// The gRPC address actually bound.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// The admin HTTP address actually bound.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// The loop registry: `loops().find(namespace, name)?.latest()` is the latest
    /// published state of a ScaledObject (its decision, signals and targets).
    pub fn loops(&self) -> &LoopRegistry {
        &self.loops
    }

    /// The token that stops the server when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Starts the drain and waits for it (bounded by the grace period).
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.wait().await
    }

    /// Waits until the server stops (after its token is cancelled, or a listener fails).
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("the server task panicked")?
    }
}

/// Starts the scaler on the given listeners; returns once both serve.
pub async fn start(
    grpc: TcpListener,
    http: TcpListener,
    options: ServeOptions,
) -> anyhow::Result<Server> {
    let grpc_addr = grpc
        .local_addr()
        .context("reading the gRPC listener's address")?;
    let http_addr = http
        .local_addr()
        .context("reading the HTTP listener's address")?;
    let metrics = Arc::new(Metrics::new());
    let tls_config = match &options.tls {
        Some(files) => Some(Arc::new(
            ReloadingConfig::new(files.clone(), metrics.clone())
                .context("setting up TLS for the gRPC port")?,
        )),
        None => None,
    };
    let admin_tls = match (&options.tls, options.admin_tls) {
        (_, false) => None,
        (None, true) => anyhow::bail!(
            "--admin-tls serves the admin port with the gRPC port's certificate: give \
             --tls-cert-file and --tls-key-file too"
        ),
        (Some(files), true) => Some(Arc::new(
            ReloadingConfig::for_port(files.clone(), tls::TlsPort::Admin, metrics.clone())
                .context("setting up TLS for the admin port")?,
        )),
    };
    if options.admin.debug == crate::http::DebugAccess::Certificate
        && options
            .tls
            .as_ref()
            .is_none_or(|t| t.client_ca.is_none() || !options.admin_tls)
    {
        anyhow::bail!(
            "--debug-endpoints certificate opens /debug to clients with a certificate signed \
             by --tls-client-ca-file over the admin port's TLS: give --admin-tls, \
             --tls-cert-file, --tls-key-file and --tls-client-ca-file too"
        );
    }
    let mut control = options.control.clone();
    if control.kube.is_none() {
        control.kube = KubeClient::connect(&options.kube_api).await?;
    }
    if let Some((namespace, name, write_every)) = options.learned_state.clone() {
        match control.kube.clone() {
            Some(client) => {
                control.learned_store =
                    Some(LearnedStore::new(client, namespace, name, write_every));
            }
            // `auto` outside a cluster (or without its configuration, logged above): the pods
            // learn from nothing, as without the flag, and say so.
            None if options.kube_api == KubeApi::Auto => tracing::warn!(
                configmap = %format!("{namespace}/{name}"),
                "--learned-state-configmap: no Kubernetes API (--kube-api auto found no \
                 cluster), so each loop learns from nothing"
            ),
            None => anyhow::bail!(
                "--learned-state-configmap {namespace}/{name} keeps the learning in the \
                 Kubernetes API, and --kube-api off reaches none: run in a pod with --kube-api \
                 auto or in-cluster, give --kube-api kubeconfig, or unset the flag"
            ),
        }
    }
    let shutdown = CancellationToken::new();
    // The scaler never scrapes its own ports, whatever a ScaledObject says.
    let mut policy = (*control.scrape.policy).clone();
    policy.own.extend([
        OwnListener {
            addr: grpc_addr,
            what: "gRPC",
        },
        OwnListener {
            addr: http_addr,
            what: "admin HTTP",
        },
    ]);
    control.scrape.policy = Arc::new(policy);
    let loops = LoopRegistry::new(metrics, control, shutdown.child_token());
    if let Some(release) = options.release_memory {
        tokio::spawn(release_memory_after_stops(
            loops.clone(),
            release,
            shutdown.clone(),
        ));
    }
    let ready = Arc::new(AtomicBool::new(false));

    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<ExternalScalerServer<ScalerService>>()
        .await;
    let scaler = ScalerService::new(loops.clone(), options.stream_heartbeat, shutdown.clone());
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(Some(options.grpc_max_streams_per_connection))
        .http2_keepalive_interval(Some(GRPC_KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(GRPC_KEEPALIVE_TIMEOUT))
        .add_service(health_service)
        .add_service(scaler.into_server());
    let stopped = shutdown.clone().cancelled_owned();
    let grpc_server: std::pin::Pin<Box<dyn Future<Output = _> + Send>> =
        match tls_config {
            Some(config) => Box::pin(router.serve_with_incoming_shutdown(
                tls::incoming(grpc, config, shutdown.clone()),
                stopped,
            )),
            None => Box::pin(router.serve_with_incoming_shutdown(
                plain_incoming(grpc, options.grpc_preface_timeout, shutdown.clone()),
                stopped,
            )),
        };
    let admin_state = AdminState {
        loops: loops.clone(),
        ready: ready.clone(),
    };
    let http_server = crate::http::serve_admin(
        http,
        admin_state,
        options.admin,
        admin_tls,
        shutdown.clone(),
    );

    let mut grpc_task = tokio::spawn(grpc_server);
    let mut http_task = tokio::spawn(http_server);
    ready.store(true, Ordering::Relaxed);
    tracing::info!(
        grpc = %grpc_addr,
        http = %http_addr,
        tls = options.tls.is_some(),
        mutual_tls = options.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        "serving"
    );

    let drain_loops = loops.clone();
    let token = shutdown.clone();
    let grace = options.shutdown_grace;
    let task = tokio::spawn(async move {
        let mut failure: Option<anyhow::Error> = None;
        let mut grpc_done = false;
        let mut http_done = false;
        tokio::select! {
            biased;
            _ = token.cancelled() => {}
            result = &mut grpc_task => {
                grpc_done = true;
                failure = joined(&token, "gRPC", result.map(|r| r.map_err(anyhow::Error::from)));
            }
            result = &mut http_task => {
                http_done = true;
                failure = joined(&token, "HTTP", result.map(|r| r.map_err(anyhow::Error::from)));
            }
        }
        ready.store(false, Ordering::Relaxed);
        health_reporter
            .set_not_serving::<ExternalScalerServer<ScalerService>>()
            .await;
        tracing::info!(
            grace_seconds = grace.as_secs_f64(),
            "shutting down: draining"
        );
        token.cancel();
        let drain = async {
            if !grpc_done {
                let _ = (&mut grpc_task).await;
            }
            if !http_done {
                let _ = (&mut http_task).await;
            }
            drain_loops.shutdown().await;
        };
        if tokio::time::timeout(grace, drain).await.is_err() {
            tracing::warn!(
                grace_seconds = grace.as_secs_f64(),
                "shutdown grace period ran out: dropping what is still running"
            );
            grpc_task.abort();
            http_task.abort();
        } else {
            tracing::info!("stopped");
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(()),
        }
    });
    Ok(Server {
        grpc_addr,
        http_addr,
        loops,
        shutdown,
        task,
    })
}

/// A plaintext gRPC stream: the TCP stream, closed after [`GRPC_IDLE_TIMEOUT`] without traffic.
#[derive(Debug)]
pub struct GrpcStream(IdleTimeout<tokio::net::TcpStream>);

impl tonic::transport::server::Connected for GrpcStream {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.get_ref().connect_info()
    }
}

impl tokio::io::AsyncRead for GrpcStream {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for GrpcStream {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

/// Accepts plaintext gRPC connections; each must send its first bytes within
/// `preface_timeout` (else it is closed: a client that connects and says nothing holds no
/// descriptor for long), and is closed after [`GRPC_IDLE_TIMEOUT`] without traffic.
fn plain_incoming(
    listener: TcpListener,
    preface_timeout: Duration,
    shutdown: CancellationToken,
) -> tokio_stream::wrappers::ReceiverStream<std::io::Result<GrpcStream>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tx.closed() => return,
                accepted = listener.accept() => accepted,
            };
            let (tcp, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(error = %error, "accepting a gRPC connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut first = [0u8; 1];
                match tokio::time::timeout(preface_timeout, tcp.peek(&mut first)).await {
                    Ok(Ok(n)) if n > 0 => {
                        let stream = GrpcStream(IdleTimeout::new(tcp, GRPC_IDLE_TIMEOUT));
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(_) => {}
                    Err(_) => {
                        tracing::debug!(peer = %peer, "gRPC connection sent nothing: closed");
                    }
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// A server task's early end as an error (none when it ended because shutdown began).
fn joined(
    token: &CancellationToken,
    what: &str,
    result: Result<anyhow::Result<()>, tokio::task::JoinError>,
) -> Option<anyhow::Error> {
    match result {
        Ok(Ok(())) if token.is_cancelled() => None,
        Ok(Ok(())) => Some(anyhow::anyhow!("the {what} server stopped unexpectedly")),
        Ok(Err(error)) => Some(error.context(format!("the {what} server failed"))),
        Err(error) => Some(anyhow::anyhow!("the {what} server task failed: {error}")),
    }
}

/// Serves on the given listeners until `shutdown` completes, then drains.
pub async fn serve(
    grpc: TcpListener,
    http: TcpListener,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let server = start(grpc, http, options).await?;
    let token = server.shutdown_token();
    tokio::select! {
        _ = shutdown => token.cancel(),
        _ = token.cancelled() => {}
    }
    server.wait().await
}

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(error = %error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => tracing::info!("received SIGINT"),
        _ = terminate => tracing::info!("received SIGTERM"),
    }
}

/// What `serve` runs: the two addresses, the loop threads and the server's settings.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address of the gRPC server (KEDA's `scalerAddress` points here).
    pub grpc_addr: SocketAddr,
    /// Address of the admin HTTP server.
    pub http_addr: SocketAddr,
    /// Threads for the scrape loops, apart from the threads answering RPCs.
    pub loop_threads: u16,
    /// The server's settings.
    pub options: ServeOptions,
}

/// Runs the production job until SIGTERM/SIGINT.
pub fn run(args: ServeConfig) -> anyhow::Result<()> {
    // Two runtimes: RPCs and the admin server on one (every core), the scrape loops on their
    // own threads, so an RPC is never queued behind a scrape on a shared worker.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name("rpc")
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let loops = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(args.loop_threads))
        .thread_name("scrape-loops")
        .enable_all()
        .build()
        .context("starting the scrape loops' runtime")?;
    let mut options = args.options;
    options.control.loop_runtime = Some(loops.handle().clone());
    let result = runtime.block_on(async {
        let grpc = TcpListener::bind(args.grpc_addr).await.with_context(|| {
            format!(
                "binding --grpc-addr {}: is another process using it? pick another with --grpc-addr",
                args.grpc_addr
            )
        })?;
        let http = TcpListener::bind(args.http_addr).await.with_context(|| {
            format!(
                "binding --http-addr {}: is another process using it? pick another with --http-addr",
                args.http_addr
            )
        })?;
        serve(grpc, http, options, shutdown_signal()).await
    });
    loops.shutdown_timeout(Duration::from_secs(1));
    result
}
