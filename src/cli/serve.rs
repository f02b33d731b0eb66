//! `serve`'s flags and their conversion into the service's [`ServeConfig`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use vllm_keda_service::control::{ControlOptions, DEFAULT_MAX_SCALEDOBJECTS};
use vllm_keda_service::http::{AdminOptions, DebugAccess};
use vllm_keda_service::scale_target::KubeApi;
use vllm_keda_service::scrape::{
    Cidr, DEFAULT_BODY_LIMITS, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONCURRENT_SCRAPES,
    DEFAULT_MAX_TARGETS, Limits, ScrapeSettings, TargetPolicy, scrape_slots,
};
use vllm_keda_service::serve::{
    DEFAULT_GRPC_MAX_STREAMS_PER_CONNECTION, ServeConfig, ServeOptions,
};
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

    /// Serve the admin port over TLS too, with --tls-cert-file and --tls-key-file. With
    /// --tls-client-ca-file a client may present a certificate signed by that CA, which
    /// `--debug-endpoints certificate` requires for /debug; /livez, /readyz and /metrics need
    /// none (probes over HTTPS present none).
    #[arg(long, env = "VLLM_KEDA_SCALER_ADMIN_TLS", requires = "tls_cert_file")]
    pub(crate) admin_tls: bool,

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

    /// Keep the proactive policy's learning (capacity per replica, a learned start-up time) in
    /// this ConfigMap (NAMESPACE/NAME, which must exist; needs --kube-api and `get` and `patch`
    /// on it), so a scaler pod that starts begins from what another pod learned for the same
    /// trigger. Unset: every pod learns from nothing.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_LEARNED_STATE_CONFIGMAP",
        value_parser = vllm_keda_service::learned_store::parse_location
    )]
    pub(crate) learned_state_configmap: Option<(String, String)>,

    /// Seconds between exchanges of a trigger's learning with --learned-state-configmap: a read,
    /// adopting a record with a longer history, else a write of the loop's own.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_LEARNED_STATE_WRITE_SECONDS",
        default_value = "300",
        value_parser = parse_seconds
    )]
    pub(crate) learned_state_write_seconds: Duration,

    /// Scrape only addresses inside these ranges (comma-separated CIDRs, like
    /// 10.0.0.0/8,fd00::/8). A range that names part of a built-in refusal (loopback,
    /// link-local, cloud metadata) opens that part: 127.0.0.0/8 allows loopback. Checked on the
    /// resolved address at connect time. Unset: every address but the built-in refusals.
    #[arg(long, env = "VLLM_KEDA_SCALER_ALLOW_TARGETS", value_delimiter = ',')]
    pub(crate) allow_targets: Vec<Cidr>,

    /// Never scrape addresses inside these ranges (comma-separated CIDRs; wins over
    /// --allow-targets). Kubelets and the API server's addresses are good candidates.
    #[arg(long, env = "VLLM_KEDA_SCALER_DENY_TARGETS", value_delimiter = ',')]
    pub(crate) deny_targets: Vec<Cidr>,

    /// Scrape only these ports (comma-separated, like 8000,9400). Unset: any port but the
    /// scaler's own and the Kubernetes control plane's (kubelet 10250 and 10255, API server
    /// 6443, etcd 2379 and 2380); listing one of those opens it.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_ALLOW_TARGET_PORTS",
        value_delimiter = ','
    )]
    pub(crate) allow_target_ports: Vec<u16>,

    /// Send scrapes through the proxy named by HTTP_PROXY/NO_PROXY (ignored by default).
    #[arg(long, env = "VLLM_KEDA_SCALER_SCRAPE_PROXY_FROM_ENV")]
    pub(crate) scrape_proxy_from_env: bool,

    /// Open a connection per scrape and have the target close it, instead of keeping one idle
    /// connection per target (an idle connection holds only its socket): fewer open sockets,
    /// a TCP handshake per scrape more CPU. See RELIABILITY.md for sizing.
    #[arg(long, env = "VLLM_KEDA_SCALER_SCRAPE_CLOSE_CONNECTIONS")]
    pub(crate) scrape_close_connections: bool,

    /// Ask targets for uncompressed bodies (like Prometheus's enable_compression: false): less
    /// CPU in the scaler and the pods, about ten times the bytes on the wire.
    #[arg(long, env = "VLLM_KEDA_SCALER_SCRAPE_DISABLE_COMPRESSION")]
    pub(crate) scrape_disable_compression: bool,

    /// Largest /metrics body accepted, in bytes after decompression (one model's vLLM body is
    /// about 50 KB).
    #[arg(long, env = "VLLM_KEDA_SCALER_SCRAPE_MAX_BODY_BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub(crate) scrape_max_body_bytes: usize,

    /// Most samples in one body (one model's vLLM body has about 400).
    #[arg(long, env = "VLLM_KEDA_SCALER_SCRAPE_MAX_SAMPLES", default_value_t = DEFAULT_BODY_LIMITS.max_samples)]
    pub(crate) scrape_max_samples: usize,

    /// Most labels on one sample.
    #[arg(long, env = "VLLM_KEDA_SCALER_SCRAPE_MAX_LABELS_PER_SAMPLE", default_value_t = DEFAULT_BODY_LIMITS.max_labels_per_sample)]
    pub(crate) scrape_max_labels_per_sample: usize,

    /// Longest label name, in bytes.
    #[arg(long, env = "VLLM_KEDA_SCALER_SCRAPE_MAX_LABEL_NAME_BYTES", default_value_t = DEFAULT_BODY_LIMITS.max_label_name_bytes)]
    pub(crate) scrape_max_label_name_bytes: usize,

    /// Longest label value, in bytes.
    #[arg(long, env = "VLLM_KEDA_SCALER_SCRAPE_MAX_LABEL_VALUE_BYTES", default_value_t = DEFAULT_BODY_LIMITS.max_label_value_bytes)]
    pub(crate) scrape_max_label_value_bytes: usize,

    /// Most vLLM (and, separately, DCGM) targets scraped per ScaledObject and cycle.
    #[arg(long, env = "VLLM_KEDA_SCALER_MAX_TARGETS_PER_SCALEDOBJECT", default_value_t = DEFAULT_MAX_TARGETS)]
    pub(crate) max_targets_per_scaledobject: usize,

    /// Most scrapes in flight at once, over every ScaledObject.
    #[arg(long, env = "VLLM_KEDA_SCALER_MAX_CONCURRENT_SCRAPES", default_value_t = DEFAULT_MAX_CONCURRENT_SCRAPES)]
    pub(crate) max_concurrent_scrapes: usize,

    /// Most ScaledObjects served at once; a new one past it is answered RESOURCE_EXHAUSTED.
    #[arg(long, env = "VLLM_KEDA_SCALER_MAX_SCALEDOBJECTS", default_value_t = DEFAULT_MAX_SCALEDOBJECTS)]
    pub(crate) max_scaledobjects: usize,

    /// Most concurrent gRPC streams (StreamIsActive and calls in flight) per connection.
    #[arg(long, env = "VLLM_KEDA_SCALER_GRPC_MAX_STREAMS_PER_CONNECTION", default_value_t = DEFAULT_GRPC_MAX_STREAMS_PER_CONNECTION)]
    pub(crate) grpc_max_streams_per_connection: u32,

    /// Require every `service` and `dcgmService` to name a Service in the ScaledObject's own
    /// namespace (`<name>.<namespace>[.svc.<cluster domain>]`); others are refused with
    /// InvalidArgument naming this flag. Off: any namespace's Service may be named.
    #[arg(long, env = "VLLM_KEDA_SCALER_SERVICE_NAMESPACE_ONLY")]
    pub(crate) service_namespace_only: bool,

    /// Who may read /debug on the admin port: off, loopback (port-forward or exec), on, or
    /// certificate (clients presenting a certificate signed by --tls-client-ca-file over
    /// --admin-tls).
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_DEBUG_ENDPOINTS",
        default_value = "loopback"
    )]
    pub(crate) debug_endpoints: DebugAccess,

    /// Seconds an admin connection gets to send each request head.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_HTTP_HEADER_TIMEOUT_SECONDS",
        default_value = "10",
        value_parser = parse_seconds
    )]
    pub(crate) http_header_timeout_seconds: Duration,

    /// Seconds without traffic after which an admin connection is closed.
    #[arg(
        long,
        env = "VLLM_KEDA_SCALER_HTTP_IDLE_TIMEOUT_SECONDS",
        default_value = "120",
        value_parser = parse_seconds
    )]
    pub(crate) http_idle_timeout_seconds: Duration,
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
        let scrape = ScrapeSettings {
            max_body_bytes: args.scrape_max_body_bytes,
            policy: Arc::new(TargetPolicy {
                allow: args.allow_targets,
                deny: args.deny_targets,
                ports: args.allow_target_ports,
                own: Vec::new(),
            }),
            proxy_from_env: args.scrape_proxy_from_env,
            close_connections: args.scrape_close_connections,
            compression: !args.scrape_disable_compression,
            limits: Limits {
                max_samples: args.scrape_max_samples,
                max_labels_per_sample: args.scrape_max_labels_per_sample,
                max_label_name_bytes: args.scrape_max_label_name_bytes,
                max_label_value_bytes: args.scrape_max_label_value_bytes,
            },
            max_targets: args.max_targets_per_scaledobject,
            concurrency: Some(scrape_slots(args.max_concurrent_scrapes)),
            ..ScrapeSettings::default()
        };
        let options = ServeOptions {
            shutdown_grace: args.shutdown_grace_seconds,
            stream_heartbeat: args.stream_heartbeat_seconds,
            control: ControlOptions {
                idle_stop: args.idle_stop_seconds,
                first_cycle_wait: args.first_answer_wait_seconds,
                hosts_file: args.hosts_file,
                scrape,
                max_scaledobjects: args.max_scaledobjects,
                service_namespace_only: args.service_namespace_only,
                ..ControlOptions::default()
            },
            admin: AdminOptions {
                debug: args.debug_endpoints,
                header_read_timeout: args.http_header_timeout_seconds,
                idle_timeout: args.http_idle_timeout_seconds,
            },
            grpc_max_streams_per_connection: args.grpc_max_streams_per_connection,
            admin_tls: args.admin_tls,
            tls: match (args.tls_cert_file, args.tls_key_file) {
                (Some(cert), Some(key)) => Some(TlsFiles {
                    cert,
                    key,
                    client_ca: args.tls_client_ca_file,
                }),
                _ => None,
            },
            kube_api: args.kube_api.settings(),
            learned_state: args
                .learned_state_configmap
                .map(|(namespace, name)| (namespace, name, args.learned_state_write_seconds)),
            release_memory: Some(vllm_keda_allocator::release_free_memory),
            ..ServeOptions::default()
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
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn target_policy_and_limit_flags_reach_the_settings() {
        let cli = Cli::try_parse_from([
            "serve",
            "--allow-targets",
            "127.0.0.0/8,::1",
            "--deny-targets",
            "10.9.0.0/16",
            "--allow-target-ports",
            "8000,9400",
            "--scrape-max-samples",
            "100",
            "--max-scaledobjects",
            "7",
            "--debug-endpoints",
            "off",
            "--service-namespace-only",
        ])
        .unwrap();
        let config = ServeConfig::from(cli.serve);
        let scrape = &config.options.control.scrape;
        assert_eq!(scrape.policy.allow.len(), 2);
        assert_eq!(scrape.policy.deny[0].to_string(), "10.9.0.0/16");
        assert_eq!(scrape.policy.ports, vec![8000, 9400]);
        assert_eq!(scrape.limits.max_samples, 100);
        assert!(!scrape.proxy_from_env);
        assert!(scrape.concurrency.is_some());
        assert_eq!(config.options.control.max_scaledobjects, 7);
        assert_eq!(config.options.admin.debug, DebugAccess::Off);
        assert!(config.options.control.service_namespace_only);

        let defaults = ServeConfig::from(Cli::try_parse_from(["serve"]).unwrap().serve);
        let scrape = &defaults.options.control.scrape;
        assert!(scrape.policy.allow.is_empty());
        assert_eq!(scrape.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
        assert_eq!(defaults.options.admin.debug, DebugAccess::Loopback);
        assert!(!defaults.options.control.service_namespace_only);

        let bad = Cli::try_parse_from(["serve", "--allow-targets", "10.0.0.0/33"]).unwrap_err();
        assert!(bad.to_string().contains("expected CIDR notation"), "{bad}");
    }

    #[test]
    fn closing_scrape_connections_is_a_flag_off_by_default() {
        let close = Cli::try_parse_from(["serve", "--scrape-close-connections"]).unwrap();
        assert!(
            ServeConfig::from(close.serve)
                .options
                .control
                .scrape
                .close_connections
        );
        let default = Cli::try_parse_from(["serve"]).unwrap();
        assert!(
            !ServeConfig::from(default.serve)
                .options
                .control
                .scrape
                .close_connections
        );
    }

    #[test]
    fn seconds_must_be_positive_numbers() {
        assert_eq!(parse_seconds("0.5"), Ok(Duration::from_millis(500)));
        for bad in ["0", "-1", "abc", "NaN", "inf"] {
            let err = parse_seconds(bad).unwrap_err();
            assert!(err.contains("expected a number of seconds"), "{err}");
        }
    }
}
