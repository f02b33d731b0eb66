//! TLS for the gRPC port (KEDA's `enableTLS`) and, with `--admin-tls`, the admin port, with
//! certificates reloaded when their files change.
//!
//! Owns: reading the PEM files into a rustls server configuration (server certificate and key,
//! and, for mutual TLS, the CA that client certificates must chain to), checking the files for
//! changes, and the accept loop that hands finished handshakes to the gRPC server. Does not
//! own: the RPCs or the listener's address.
//!
//! Certificates rotate without a restart: cert-manager and Kubernetes update a mounted Secret
//! in place (the kubelet writes a new timestamped directory and swaps the `..data` symlink to
//! it), so before each new connection (at most once a second) the files' contents, read
//! through any symlinks, are compared with those last loaded. Contents, not modification times
//! and sizes: a same-size rewrite within one timestamp tick, or a swap to files that carry an
//! older time, changes neither. On a change the whole configuration is rebuilt and checked,
//! and swapped in only if it is valid. A bad or half-written set keeps
//! the previous configuration and logs why. Connections already open keep their session.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use crate::telemetry::Metrics;

/// How long a client gets to finish its TLS handshake before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Shortest time between two checks of the files for changes.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Which port a configuration serves: the protocol it negotiates and whether a client
/// certificate is required.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsPort {
    /// gRPC (ALPN `h2`); with a client CA, every client must present a certificate that
    /// chains to it.
    Grpc,
    /// The admin port (ALPN `http/1.1`); with a client CA, a client may present a certificate,
    /// which must then chain to it (kubelet probes present none), and the admin routes decide
    /// what a client without one may read.
    Admin,
}

/// The PEM files of the gRPC port's TLS configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server's certificate chain (leaf first).
    pub cert: PathBuf,
    /// The server certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// When set, clients must present a certificate that chains to one of these CAs
    /// (mutual TLS: KEDA's `tlsClientCert`).
    pub client_ca: Option<PathBuf>,
}

/// A TLS file that could not be used, naming the file and what to fix.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read.
    #[error("reading {what} {path}: {error}; check the path and that the file is mounted")]
    Read {
        /// Which file (flag name).
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// The I/O error (part of the message, not a separate cause).
        error: std::io::Error,
    },
    /// The file holds no usable PEM item of the expected kind.
    #[error("{what} {path}: {problem}; expected {expected}")]
    Content {
        /// Which file (flag name).
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// What was wrong.
        problem: String,
        /// What the file should hold.
        expected: &'static str,
    },
    /// rustls refused the set (for example the key does not belong to the certificate).
    #[error("TLS configuration from {cert} and {key}: {problem}")]
    Config {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls's reason.
        problem: String,
    },
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        what,
        path: path.to_owned(),
        error,
    })
}

fn certificates(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let content = |problem: String| TlsError::Content {
        what,
        path: path.to_owned(),
        problem,
        expected: "one or more PEM blocks \"-----BEGIN CERTIFICATE-----\"",
    };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| content(format!("not valid PEM ({e})")))?;
    if certs.is_empty() {
        return Err(content("no certificate found".into()));
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read("--tls-key-file", path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Content {
        what: "--tls-key-file",
        path: path.to_owned(),
        problem: format!("no private key found ({e})"),
        expected: "a PEM private key (\"BEGIN PRIVATE KEY\", \"BEGIN RSA PRIVATE KEY\" or \"BEGIN EC PRIVATE KEY\")",
    })
}

/// Reads and checks the files into a server configuration speaking HTTP/2 (ALPN `h2`), as
/// gRPC clients require.
pub fn load(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsError> {
    load_for(files, TlsPort::Grpc)
}

/// Reads and checks the files into a server configuration for `port`.
pub fn load_for(files: &TlsFiles, port: TlsPort) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config_error = |problem: String| TlsError::Config {
        cert: files.cert.clone(),
        key: files.key.clone(),
        problem,
    };
    let chain = certificates("--tls-cert-file", &files.cert)?;
    let key = private_key(&files.key)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| config_error(e.to_string()))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates("--tls-client-ca-file", ca)? {
                roots.add(cert).map_err(|e| TlsError::Content {
                    what: "--tls-client-ca-file",
                    path: ca.clone(),
                    problem: format!("a certificate rustls cannot use as a CA ({e})"),
                    expected: "the PEM certificate(s) of the CA that signs KEDA's client certificate",
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider);
            let verifier = match port {
                TlsPort::Grpc => verifier,
                TlsPort::Admin => verifier.allow_unauthenticated(),
            };
            let verifier = verifier.build().map_err(|e| config_error(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| config_error(e.to_string()))?;
    config.alpn_protocols = vec![match port {
        TlsPort::Grpc => b"h2".to_vec(),
        TlsPort::Admin => b"http/1.1".to_vec(),
    }];
    Ok(Arc::new(config))
}

/// What identifies a version of the files: each one's contents (`None` when unreadable).
/// PEM files are a few kilobytes, read at most once a second.
type Stamp = Vec<Option<Vec<u8>>>;

fn stamp(files: &TlsFiles) -> Stamp {
    std::iter::once(&files.cert)
        .chain(std::iter::once(&files.key))
        .chain(files.client_ca.iter())
        .map(|path| std::fs::read(path).ok())
        .collect()
}

/// The current configuration, reloaded when the files change.
#[derive(Debug)]
pub struct ReloadingConfig {
    files: TlsFiles,
    port: TlsPort,
    metrics: Arc<Metrics>,
    current: RwLock<Arc<ServerConfig>>,
    checked: Mutex<(Instant, Stamp)>,
}

impl ReloadingConfig {
    /// Loads the files; fails (naming the file) when they cannot be used. Later reloads are
    /// counted in `metrics`.
    pub fn new(files: TlsFiles, metrics: Arc<Metrics>) -> Result<Self, TlsError> {
        Self::for_port(files, TlsPort::Grpc, metrics)
    }

    /// [`ReloadingConfig::new`] for `port`.
    pub fn for_port(
        files: TlsFiles,
        port: TlsPort,
        metrics: Arc<Metrics>,
    ) -> Result<Self, TlsError> {
        let before = stamp(&files);
        let config = load_for(&files, port)?;
        Ok(Self {
            files,
            port,
            metrics,
            current: RwLock::new(config),
            checked: Mutex::new((Instant::now(), before)),
        })
    }

    /// The configuration for a new connection: reloaded first when the files changed since
    /// the last check (checks at most once per second). A set that fails to load is logged
    /// and the previous configuration stays.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.reload_if_changed(false);
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The metrics that count handshakes and reloads.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Checks the files now (ignoring the once-a-second limit); true when a new configuration
    /// was loaded.
    pub fn reload_now(&self) -> bool {
        self.reload_if_changed(true)
    }

    fn reload_if_changed(&self, force: bool) -> bool {
        let mut checked = self
            .checked
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !force && checked.0.elapsed() < CHECK_EVERY {
            return false;
        }
        checked.0 = Instant::now();
        let now = stamp(&self.files);
        if now == checked.1 {
            return false;
        }
        checked.1 = now;
        match load_for(&self.files, self.port) {
            Ok(config) => {
                *self
                    .current
                    .write()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = config;
                tracing::info!(
                    cert = %self.files.cert.display(),
                    port = ?self.port,
                    "TLS certificates reloaded"
                );
                Metrics::count_tls(&self.metrics.tls_reloads, "ok");
                true
            }
            Err(error) => {
                tracing::warn!(
                    error = %error,
                    "TLS files changed but cannot be used; keeping the previous certificates"
                );
                Metrics::count_tls(&self.metrics.tls_reloads, "failed");
                false
            }
        }
    }
}

/// Accepts TCP connections on `listener`, runs each TLS handshake (bounded by
/// [`HANDSHAKE_TIMEOUT`]) on its own task, and yields the finished streams; results are
/// counted in the configuration's metrics. Stops when `shutdown` is cancelled or the stream
/// is dropped.
pub fn incoming(
    listener: TcpListener,
    config: Arc<ReloadingConfig>,
    shutdown: CancellationToken,
) -> ReceiverStream<std::io::Result<TlsStream<TcpStream>>> {
    let (tx, rx) = mpsc::channel(64);
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
                    // Out of file descriptors and the like: wait and try again, as a plain
                    // listener would.
                    tracing::warn!(error = %error, "accepting a gRPC connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = TlsAcceptor::from(config.current());
            let tx = tx.clone();
            let metrics = config.metrics.clone();
            tokio::spawn(async move {
                let result =
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send(Ok(stream)).await;
                            "ok"
                        }
                        Ok(Err(error)) => {
                            tracing::debug!(peer = %peer, error = %error, "TLS handshake failed");
                            "failed"
                        }
                        Err(_) => {
                            tracing::debug!(peer = %peer, "TLS handshake timed out");
                            "timed_out"
                        }
                    };
                Metrics::count_tls(&metrics.tls_handshakes, result);
            });
        }
    });
    ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Pki {
        dir: tempfile::TempDir,
    }

    impl Pki {
        fn new() -> Self {
            Self {
                dir: tempfile::tempdir().unwrap(),
            }
        }

        fn write(&self, name: &str, content: &str) -> PathBuf {
            let path = self.dir.path().join(name);
            std::fs::write(&path, content).unwrap();
            path
        }

        /// A self-signed certificate for localhost; returns (cert path, key path).
        fn self_signed(&self, prefix: &str) -> (PathBuf, PathBuf) {
            let certified = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
            (
                self.write(&format!("{prefix}.crt"), &certified.cert.pem()),
                self.write(
                    &format!("{prefix}.key"),
                    &certified.signing_key.serialize_pem(),
                ),
            )
        }
    }

    #[test]
    fn a_certificate_and_its_key_load_with_alpn_h2() {
        let pki = Pki::new();
        let (cert, key) = pki.self_signed("server");
        let config = load(&TlsFiles {
            cert,
            key,
            client_ca: None,
        })
        .unwrap();
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec()]);
    }

    #[test]
    fn bad_files_name_the_flag_the_path_and_the_fix() {
        let pki = Pki::new();
        let (cert, key) = pki.self_signed("server");
        let (_, other_key) = pki.self_signed("other");
        let garbage = pki.write("garbage.pem", "not a certificate\n");
        let files = |cert: &Path, key: &Path, ca: Option<&Path>| TlsFiles {
            cert: cert.to_owned(),
            key: key.to_owned(),
            client_ca: ca.map(Path::to_owned),
        };

        let missing = pki.dir.path().join("missing.crt");
        let error = load(&files(&missing, &key, None)).unwrap_err().to_string();
        assert!(
            error.contains("--tls-cert-file") && error.contains("missing.crt"),
            "{error}"
        );
        assert!(error.contains("check the path"), "{error}");

        let error = load(&files(&garbage, &key, None)).unwrap_err().to_string();
        assert!(
            error.contains("--tls-cert-file") && error.contains("no certificate"),
            "{error}"
        );
        assert!(error.contains("BEGIN CERTIFICATE"), "{error}");

        let error = load(&files(&cert, &garbage, None)).unwrap_err().to_string();
        assert!(
            error.contains("--tls-key-file") && error.contains("no private key"),
            "{error}"
        );

        let error = load(&files(&cert, &other_key, None))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("server.crt") && error.contains("other.key"),
            "{error}"
        );

        let error = load(&files(&cert, &key, Some(&garbage)))
            .unwrap_err()
            .to_string();
        assert!(error.contains("--tls-client-ca-file"), "{error}");
    }

    /// A self-signed pair whose PEM texts are exactly `cert_len` and `key_len` bytes long
    /// (ECDSA signatures vary by a byte or two, so a few draws find one).
    fn same_size_pair(cert_len: usize, key_len: usize) -> (String, String) {
        for _ in 0..1000 {
            let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
            let (cert, key) = (c.cert.pem(), c.signing_key.serialize_pem());
            if cert.len() == cert_len && key.len() == key_len {
                return (cert, key);
            }
        }
        panic!("no self-signed pair of {cert_len} + {key_len} bytes in 1000 draws");
    }

    /// Writes `content` to `path` and sets its modification time back to `mtime`.
    fn rewrite_keeping_mtime(path: &Path, content: &str, mtime: std::time::SystemTime) {
        std::fs::write(path, content).unwrap();
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
    }

    #[test]
    fn a_same_size_rewrite_within_one_timestamp_tick_is_reloaded() {
        // Neither size nor modification time changes (a coarse-timestamp filesystem, or two
        // writes within one tick): only the contents tell the new pair from the old one.
        let pki = Pki::new();
        let (cert, key) = pki.self_signed("server");
        let reloading = ReloadingConfig::new(
            TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: None,
            },
            Arc::new(Metrics::new()),
        )
        .unwrap();
        let first = reloading.current();
        let old_cert = std::fs::read_to_string(&cert).unwrap();
        let old_key = std::fs::read_to_string(&key).unwrap();
        let (new_cert, new_key) = same_size_pair(old_cert.len(), old_key.len());
        assert_ne!(new_cert, old_cert);
        let mtimes = [&cert, &key].map(|p| std::fs::metadata(p).unwrap().modified().unwrap());
        rewrite_keeping_mtime(&cert, &new_cert, mtimes[0]);
        rewrite_keeping_mtime(&key, &new_key, mtimes[1]);
        for (path, mtime) in [(&cert, mtimes[0]), (&key, mtimes[1])] {
            let m = std::fs::metadata(path).unwrap();
            assert_eq!(m.modified().unwrap(), mtime, "the rewrite kept the time");
        }
        assert!(reloading.reload_now(), "the same-size rewrite was missed");
        assert!(!Arc::ptr_eq(&first, &reloading.current()));
        assert!(!reloading.reload_now(), "nothing changed since");
    }

    #[test]
    fn a_kubernetes_secret_volume_symlink_swap_is_reloaded() {
        // The kubelet's layout: tls.crt -> ..data/tls.crt, ..data -> ..<timestamp>/; an update
        // writes a new timestamped directory and renames a new ..data link over the old one.
        let pki = Pki::new();
        let root = pki.dir.path();
        let publish = |stamp: &str, prefix: &str| {
            let dir = root.join(format!("..{stamp}"));
            std::fs::create_dir(&dir).unwrap();
            let c = rcgen::generate_simple_self_signed(vec![format!("{prefix}.local")]).unwrap();
            std::fs::write(dir.join("tls.crt"), c.cert.pem()).unwrap();
            std::fs::write(dir.join("tls.key"), c.signing_key.serialize_pem()).unwrap();
            let tmp = root.join("..data_tmp");
            std::os::unix::fs::symlink(format!("..{stamp}"), &tmp).unwrap();
            std::fs::rename(&tmp, root.join("..data")).unwrap();
            c.cert.pem()
        };
        let first_pem = publish("2026_12_02_00_00_00.1", "first");
        for name in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(format!("..data/{name}"), root.join(name)).unwrap();
        }
        let reloading = ReloadingConfig::new(
            TlsFiles {
                cert: root.join("tls.crt"),
                key: root.join("tls.key"),
                client_ca: None,
            },
            Arc::new(Metrics::new()),
        )
        .unwrap();
        let first = reloading.current();
        assert!(!reloading.reload_now());

        let second_pem = publish("2026_12_02_00_05_00.2", "second");
        std::fs::remove_dir_all(root.join("..2026_12_02_00_00_00.1")).unwrap();
        assert_ne!(first_pem, second_pem);
        assert_eq!(
            std::fs::read_to_string(root.join("tls.crt")).unwrap(),
            second_pem
        );
        assert!(reloading.reload_now(), "the swapped ..data link was missed");
        assert!(!Arc::ptr_eq(&first, &reloading.current()));
    }

    #[tokio::test]
    async fn changed_files_are_reloaded_and_a_bad_change_keeps_the_old_config() {
        let pki = Pki::new();
        let (cert, key) = pki.self_signed("server");
        let metrics = Arc::new(Metrics::new());
        let reloading = ReloadingConfig::new(
            TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: None,
            },
            metrics.clone(),
        )
        .unwrap();
        let first = reloading.current();
        assert!(!reloading.reload_now(), "nothing changed yet");

        // A half-written rotation (certificate replaced, key not yet): keep the old one.
        let next = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(&cert, next.cert.pem()).unwrap();
        assert!(!reloading.reload_now());
        assert!(Arc::ptr_eq(&first, &reloading.current()));

        // The key follows: the new pair loads.
        std::fs::write(&key, next.signing_key.serialize_pem() + "\n").unwrap();
        assert!(reloading.reload_now());
        assert!(!Arc::ptr_eq(&first, &reloading.current()));
        let text = metrics.encode();
        assert!(
            text.contains("vllm_keda_scaler_tls_reloads_total{result=\"failed\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("vllm_keda_scaler_tls_reloads_total{result=\"ok\"} 1"),
            "{text}"
        );
    }
}
