//! `serve`'s flags and their conversion into the service's [`ServeConfig`].

use std::net::SocketAddr;
use std::time::Duration;

use vllm_keda_service::control::ControlOptions;
use vllm_keda_service::scale_target::KubeApi;
use vllm_keda_service::serve::{ServeConfig, ServeOptions};
use vllm_keda_service::tls::TlsFiles;

/// Command-line arguments. Every flag can also be set with `VLLM_KEDA_SCALER_<FLAG>`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ServeArgs {
    /// Address of the gRPC server (KEDA's `scalerAddress` points here).
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_GRPC_ADDR",
        default_value = "0.0.0.0:9090"
    )]
    pub(crate) grpc_addr: SocketAddr,

    /// Address of the admin HTTP server (/livez, /readyz, /metrics, /debug/scaledobjects).
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_HTTP_ADDR",
        default_value = "0.0.0.0:8080"
    )]
    pub(crate) http_addr: SocketAddr,

    /// Seconds to let in-flight RPCs and loops finish after SIGTERM/SIGINT.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_SHUTDOWN_GRACE_SECONDS",
        default_value = "10",
        value_parser = parse_seconds
    )]
    pub(crate) shutdown_grace_seconds: Duration,

    /// Stop a ScaledObject's scrape loop when KEDA has not asked about it for this many seconds.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_IDLE_STOP_SECONDS",
        default_value = "600",
        value_parser = parse_seconds
    )]
    pub(crate) idle_stop_seconds: Duration,

    /// Seconds between `true` heartbeats on a `StreamIsActive` stream while active.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_STREAM_HEARTBEAT_SECONDS",
        default_value = "5",
        value_parser = parse_seconds
    )]
    pub(crate) stream_heartbeat_seconds: Duration,

    /// Longest wait of the first `GetMetrics`/`IsActive` for a new ScaledObject's first scrape
    /// before answering `Unavailable` (KEDA's HPA path allows 3 s for its three calls).
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_FIRST_ANSWER_WAIT_SECONDS",
        default_value = "1",
        value_parser = parse_seconds
    )]
    pub(crate) first_answer_wait_seconds: Duration,

    /// Threads for the scrape loops (scraping is I/O-bound and parsing runs on a separate
    /// blocking pool, so one thread serves hundreds of ScaledObjects). They are kept apart
    /// from the threads answering RPCs, so an RPC never waits behind a scrape.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_LOOP_THREADS",
        default_value = "1",
        value_parser = clap::value_parser!(u16).range(1..=256)
    )]
    pub(crate) loop_threads: u16,

    /// Serve gRPC over TLS with this PEM certificate chain (KEDA's `enableTLS`); needs
    /// --tls-key-file. Reloaded when the file changes (cert-manager rotation).
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_TLS_CERT_FILE",
        requires = "tls_key_file"
    )]
    pub(crate) tls_cert_file: Option<std::path::PathBuf>,

    /// The PEM private key of --tls-cert-file.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_TLS_KEY_FILE",
        requires = "tls_cert_file"
    )]
    pub(crate) tls_key_file: Option<std::path::PathBuf>,

    /// Require client certificates signed by this PEM CA (mutual TLS: KEDA's
    /// `tlsClientCert`/`tlsClientKey`); needs --tls-cert-file.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_TLS_CLIENT_CA_FILE",
        requires = "tls_cert_file"
    )]
    pub(crate) tls_client_ca_file: Option<std::path::PathBuf>,

    /// Resolve `service` metadata names from this hosts(5) file instead of DNS (local runs:
    /// pods on 127.0.0.x come and go by editing the file).
    #[arg(long, env = "VLLM_KEDA_SCALER_HOSTS_FILE")]
    pub(crate) hosts_file: Option<std::path::PathBuf>,

    /// Read each ScaledObject's scale target (its replicas asked for, starting ones included)
    /// through the Kubernetes API: `auto` uses the in-cluster configuration when running in a
    /// pod and nothing otherwise; `kubeconfig` the current context of $KUBECONFIG (or
    /// ~/.kube/config); `off` never. Without it the scaler holds at least the pods it observes.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_KUBE_API",
        value_enum,
        default_value_t = KubeApiArg::Auto
    )]
    pub(crate) kube_api: KubeApiArg,
}

/// `--kube-api`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum KubeApiArg {
    Auto,
    InCluster,
    Kubeconfig,
    Off,
}

impl KubeApiArg {
    fn settings(self) -> KubeApi {
        match self {
            Self::Auto => KubeApi::Auto,
            Self::InCluster => KubeApi::InCluster,
            Self::Off => KubeApi::Off,
            Self::Kubeconfig => {
                let from_env = std::env::var_os("KUBECONFIG")
                    .and_then(|v| std::env::split_paths(&v).find(|p| !p.as_os_str().is_empty()));
                let path = from_env.unwrap_or_else(|| {
                    std::env::var_os("HOME")
                        .map(std::path::PathBuf::from)
                        .unwrap_or_default()
                        .join(".kube")
                        .join("config")
                });
                KubeApi::Kubeconfig(path)
            }
        }
    }
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

impl From<ServeArgs> for ServeConfig {
    fn from(args: ServeArgs) -> Self {
        let options = ServeOptions {
            shutdown_grace: args.shutdown_grace_seconds,
            stream_heartbeat: args.stream_heartbeat_seconds,
            control: ControlOptions {
                idle_stop: args.idle_stop_seconds,
                first_cycle_wait: args.first_answer_wait_seconds,
                hosts_file: args.hosts_file,
                ..ControlOptions::default()
            },
            tls: match (args.tls_cert_file, args.tls_key_file) {
                (Some(cert), Some(key)) => Some(TlsFiles {
                    cert,
                    key,
                    client_ca: args.tls_client_ca_file,
                }),
                _ => None,
            },
            kube_api: args.kube_api.settings(),
        };
        Self {
            grpc_addr: args.grpc_addr,
            http_addr: args.http_addr,
            loop_threads: args.loop_threads,
            options,
        }
    }
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
