//! `serve`: the production job (gRPC external scaler plus the admin HTTP server), with graceful
//! shutdown.
//!
//! Owns: the flags, binding the listeners, wiring [`crate::control`], [`crate::grpc`] and
//! [`crate::http`] together, signals and the drain. Does not own: any RPC or route logic.
//!
//! In-process use (tests, `demo`): bind two `TcpListener`s, call [`start`], read decisions
//! through [`Server::controller`], and stop with [`Server::shutdown`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::control::{ControlOptions, Controller};
use crate::grpc::ScalerService;
use crate::http::AdminState;
use crate::proto::external_scaler_server::ExternalScalerServer;
use crate::telemetry::Metrics;
use crate::tls::{self, ReloadingConfig, TlsFiles};

/// Command-line arguments. Every flag can also be set with `VLLM_KEDA_SCALER_<FLAG>`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address of the gRPC server (KEDA's `scalerAddress` points here).
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_GRPC_ADDR",
        default_value = "0.0.0.0:9090"
    )]
    pub grpc_addr: SocketAddr,

    /// Address of the admin HTTP server (/livez, /readyz, /metrics, /debug/scaledobjects).
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_HTTP_ADDR",
        default_value = "0.0.0.0:8080"
    )]
    pub http_addr: SocketAddr,

    /// Seconds to let in-flight RPCs and loops finish after SIGTERM/SIGINT.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_SHUTDOWN_GRACE_SECONDS",
        default_value = "10",
        value_parser = parse_seconds
    )]
    pub shutdown_grace_seconds: Duration,

    /// Stop a ScaledObject's scrape loop when KEDA has not asked about it for this many seconds.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_IDLE_STOP_SECONDS",
        default_value = "600",
        value_parser = parse_seconds
    )]
    pub idle_stop_seconds: Duration,

    /// Seconds between `true` heartbeats on a `StreamIsActive` stream while active.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_STREAM_HEARTBEAT_SECONDS",
        default_value = "5",
        value_parser = parse_seconds
    )]
    pub stream_heartbeat_seconds: Duration,

    /// Longest wait of the first `GetMetrics`/`IsActive` for a new ScaledObject's first scrape
    /// before answering `Unavailable` (KEDA's HPA path allows 3 s for its three calls).
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_FIRST_ANSWER_WAIT_SECONDS",
        default_value = "1",
        value_parser = parse_seconds
    )]
    pub first_answer_wait_seconds: Duration,

    /// Threads for the scrape loops (scraping is I/O-bound and parsing runs on a separate
    /// blocking pool, so one thread serves hundreds of ScaledObjects). They are kept apart
    /// from the threads answering RPCs, so an RPC never waits behind a scrape.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_LOOP_THREADS",
        default_value = "1",
        value_parser = clap::value_parser!(u16).range(1..=256)
    )]
    pub loop_threads: u16,

    /// Serve gRPC over TLS with this PEM certificate chain (KEDA's `enableTLS`); needs
    /// --tls-key-file. Reloaded when the file changes (cert-manager rotation).
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_TLS_CERT_FILE",
        requires = "tls_key_file"
    )]
    pub tls_cert_file: Option<std::path::PathBuf>,

    /// The PEM private key of --tls-cert-file.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_TLS_KEY_FILE",
        requires = "tls_cert_file"
    )]
    pub tls_key_file: Option<std::path::PathBuf>,

    /// Require client certificates signed by this PEM CA (mutual TLS: KEDA's
    /// `tlsClientCert`/`tlsClientKey`); needs --tls-cert-file.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_TLS_CLIENT_CA_FILE",
        requires = "tls_cert_file"
    )]
    pub tls_client_ca_file: Option<std::path::PathBuf>,

    /// Resolve `service` metadata names from this hosts(5) file instead of DNS (local runs:
    /// pods on 127.0.0.x come and go by editing the file).
    #[arg(long, env = "VLLM_KEDA_SCALER_HOSTS_FILE")]
    pub hosts_file: Option<std::path::PathBuf>,
}

fn parse_seconds(text: &str) -> Result<Duration, String> {
    let invalid =
        || format!("expected a number of seconds greater than 0 (like 10 or 0.5), got {text:?}");
    let seconds: f64 = text.trim().parse().map_err(|_| invalid())?;
    if !seconds.is_finite() || seconds <= 0.0 || seconds > 1e9 {
        return Err(invalid());
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Settings of a running server (the library form of [`ServeArgs`] without the addresses).
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
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            shutdown_grace: Duration::from_secs(10),
            stream_heartbeat: Duration::from_secs(5),
            control: ControlOptions::default(),
            tls: None,
        }
    }
}

impl From<&ServeArgs> for ServeOptions {
    fn from(args: &ServeArgs) -> Self {
        Self {
            shutdown_grace: args.shutdown_grace_seconds,
            stream_heartbeat: args.stream_heartbeat_seconds,
            control: ControlOptions {
                idle_stop: args.idle_stop_seconds,
                first_cycle_wait: args.first_answer_wait_seconds,
                hosts_file: args.hosts_file.clone(),
                ..ControlOptions::default()
            },
            tls: match (&args.tls_cert_file, &args.tls_key_file) {
                (Some(cert), Some(key)) => Some(TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                    client_ca: args.tls_client_ca_file.clone(),
                }),
                _ => None,
            },
        }
    }
}

/// A running scaler: gRPC and admin HTTP on their listeners.
#[derive(Debug)]
pub struct Server {
    grpc_addr: SocketAddr,
    http_addr: SocketAddr,
    controller: Controller,
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

    /// The loop registry: `controller().find(namespace, name)?.latest()` is the latest
    /// published state of a ScaledObject (its decision, signals and targets).
    pub fn controller(&self) -> &Controller {
        &self.controller
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
    let shutdown = CancellationToken::new();
    let controller = Controller::new(metrics, options.control.clone(), shutdown.child_token());
    let ready = Arc::new(AtomicBool::new(false));

    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<ExternalScalerServer<ScalerService>>()
        .await;
    let scaler = ScalerService::new(
        controller.clone(),
        options.stream_heartbeat,
        shutdown.clone(),
    );
    let router = tonic::transport::Server::builder()
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
                tonic::transport::server::TcpIncoming::from(grpc).with_nodelay(Some(true)),
                stopped,
            )),
        };
    let admin = crate::http::router(AdminState {
        controller: controller.clone(),
        ready: ready.clone(),
    });
    let http_server =
        axum::serve(http, admin).with_graceful_shutdown(shutdown.clone().cancelled_owned());

    let mut grpc_task = tokio::spawn(grpc_server);
    let mut http_task = tokio::spawn(async move { http_server.await });
    ready.store(true, Ordering::Relaxed);
    tracing::info!(
        grpc = %grpc_addr,
        http = %http_addr,
        tls = options.tls.is_some(),
        mutual_tls = options.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        "serving"
    );

    let drain_controller = controller.clone();
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
            drain_controller.shutdown().await;
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
        controller,
        shutdown,
        task,
    })
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

/// Runs the command.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
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
    let mut options = ServeOptions::from(&args);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_must_be_positive_numbers() {
        assert_eq!(parse_seconds("0.5"), Ok(Duration::from_millis(500)));
        for bad in ["0", "-1", "abc", "NaN", "inf"] {
            let err = parse_seconds(bad).unwrap_err();
            assert!(err.contains("expected a number of seconds"), "{err}");
        }
    }
}
