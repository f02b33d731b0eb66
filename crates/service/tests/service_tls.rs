//! The gRPC port over TLS, as KEDA reaches it with `enableTLS`: the real server on loopback,
//! a real tonic client with certificates from a test CA; mutual TLS, refusals, and a
//! certificate rotation picked up without a restart.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use tokio::net::TcpListener;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use vllm_keda_service::proto::ScaledObjectRef;
use vllm_keda_service::proto::external_scaler_client::ExternalScalerClient;
use vllm_keda_service::serve::{self, ServeOptions, Server};
use vllm_keda_service::tls::TlsFiles;

/// A test certificate authority.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, in PEM.
struct Pair {
    cert: String,
    key: String,
}

impl Ca {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Self { issuer }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    fn issue(&self, names: &[&str], usage: ExtendedKeyUsagePurpose) -> Pair {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .unwrap();
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    fn server(&self) -> Pair {
        self.issue(
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    fn client(&self) -> Pair {
        self.issue(&["keda-operator"], ExtendedKeyUsagePurpose::ClientAuth)
    }
}

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

async fn start(files: TlsFiles) -> Server {
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let options = ServeOptions {
        tls: Some(files),
        ..ServeOptions::loopback()
    };
    serve::start(grpc, http, options).await.unwrap()
}

/// A TLS client trusting `ca`, presenting `identity` when given (a new connection each time).
async fn connect(
    server: &Server,
    ca: &str,
    identity: Option<&Pair>,
) -> Result<ExternalScalerClient<Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("localhost");
    if let Some(pair) = identity {
        tls = tls.identity(Identity::from_pem(&pair.cert, &pair.key));
    }
    let channel = Endpoint::from_shared(format!("https://{}", server.grpc_addr()))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(ExternalScalerClient::new(channel))
}

fn scaled_object() -> ScaledObjectRef {
    ScaledObjectRef {
        name: "chat".into(),
        namespace: "llm".into(),
        scaler_metadata: HashMap::from([(
            "endpoints".to_owned(),
            "http://127.0.0.1:9/metrics".to_owned(),
        )]),
    }
}

/// Whether a GetMetricSpec over a fresh connection succeeds.
async fn spec_works(server: &Server, ca: &str, identity: Option<&Pair>) -> bool {
    let Ok(mut client) = connect(server, ca, identity).await else {
        return false;
    };
    client.get_metric_spec(scaled_object()).await.is_ok()
}

#[tokio::test]
async fn mutual_tls_serves_keda_with_its_client_certificate_and_refuses_others() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("scaler CA");
    let server_pair = ca.server();
    let server = start(TlsFiles {
        cert: write(dir.path(), "tls.crt", &server_pair.cert),
        key: write(dir.path(), "tls.key", &server_pair.key),
        client_ca: Some(write(dir.path(), "ca.crt", &ca.pem())),
    })
    .await;

    // KEDA with the TriggerAuthentication's caCert, tlsClientCert and tlsClientKey.
    let keda = ca.client();
    let mut client = connect(&server, &ca.pem(), Some(&keda)).await.unwrap();
    let spec = client
        .get_metric_spec(scaled_object())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(spec.metric_specs[0].metric_name, "vllm-desired-replicas");

    // No client certificate, or one from another CA: refused.
    assert!(!spec_works(&server, &ca.pem(), None).await);
    let stranger = Ca::new("another CA").client();
    assert!(!spec_works(&server, &ca.pem(), Some(&stranger)).await);

    // A plaintext client gets nothing either.
    let plaintext = async {
        let mut client = ExternalScalerClient::connect(format!("http://{}", server.grpc_addr()))
            .await
            .ok()?;
        client.get_metric_spec(scaled_object()).await.ok()
    };
    assert!(
        tokio::time::timeout(Duration::from_secs(10), plaintext)
            .await
            .ok()
            .flatten()
            .is_none()
    );

    // The refusals are visible in the scaler's own metrics (a misconfigured KEDA shows there).
    let count = |result: &str| -> f64 {
        let text = server.loops().metrics().encode();
        let series = format!("vllm_keda_scaler_tls_handshakes_total{{result=\"{result}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .map_or(0.0, |v| v.parse().unwrap())
    };
    assert!(count("ok") >= 1.0);
    // No certificate and a stranger's certificate (a plaintext client fails the same way).
    assert!(count("failed") >= 2.0, "failed {}", count("failed"));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn server_only_tls_needs_no_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("scaler CA");
    let pair = ca.server();
    let server = start(TlsFiles {
        cert: write(dir.path(), "tls.crt", &pair.cert),
        key: write(dir.path(), "tls.key", &pair.key),
        client_ca: None,
    })
    .await;
    assert!(spec_works(&server, &ca.pem(), None).await);
    // A client that does not trust the server's CA refuses it (the certificate is checked).
    assert!(!spec_works(&server, &Ca::new("another CA").pem(), None).await);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_rotated_certificate_is_served_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let old_ca = Ca::new("old CA");
    let old = old_ca.server();
    let cert = write(dir.path(), "tls.crt", &old.cert);
    let key = write(dir.path(), "tls.key", &old.key);
    let server = start(TlsFiles {
        cert: cert.clone(),
        key: key.clone(),
        client_ca: None,
    })
    .await;
    assert!(spec_works(&server, &old_ca.pem(), None).await);

    // cert-manager issues from a new CA and the Secret volume updates both files.
    let new_ca = Ca::new("new CA");
    let new = new_ca.server();
    std::fs::write(&key, &new.key).unwrap();
    std::fs::write(&cert, &new.cert).unwrap();

    // The files are checked at most once a second, before a new connection.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !spec_works(&server, &new_ca.pem(), None).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new certificate was not served within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!spec_works(&server, &old_ca.pem(), None).await);
    server.shutdown().await.unwrap();
}

/// A Secret volume laid out as the kubelet does: each key a symlink through `..data` to a
/// timestamped directory; [`SecretVolume::publish`] writes a new directory and renames a new
/// `..data` link over the old one (one atomic swap of every file), then removes the old one.
struct SecretVolume {
    dir: tempfile::TempDir,
    current: Option<PathBuf>,
    serial: u32,
}

impl SecretVolume {
    fn new(files: &[(&str, &str)]) -> Self {
        let mut volume = Self {
            dir: tempfile::tempdir().unwrap(),
            current: None,
            serial: 0,
        };
        volume.publish(files);
        for (name, _) in files {
            std::os::unix::fs::symlink(format!("..data/{name}"), volume.path(name)).unwrap();
        }
        volume
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn publish(&mut self, files: &[(&str, &str)]) {
        self.serial += 1;
        let stamp = format!("..2026_12_02_00_00_{:02}.{}", self.serial, self.serial);
        let dir = self.dir.path().join(&stamp);
        std::fs::create_dir(&dir).unwrap();
        for (name, content) in files {
            write(&dir, name, content);
        }
        let tmp = self.path("..data_tmp");
        std::os::unix::fs::symlink(&stamp, &tmp).unwrap();
        std::fs::rename(&tmp, self.path("..data")).unwrap();
        if let Some(old) = self.current.replace(dir) {
            std::fs::remove_dir_all(old).unwrap();
        }
    }
}

#[tokio::test]
async fn a_secret_volume_swap_rotates_the_client_ca_without_a_restart() {
    let old_ca = Ca::new("old CA");
    let old_server = old_ca.server();
    let mut volume = SecretVolume::new(&[
        ("tls.crt", &old_server.cert),
        ("tls.key", &old_server.key),
        ("ca.crt", &old_ca.pem()),
    ]);
    let server = start(TlsFiles {
        cert: volume.path("tls.crt"),
        key: volume.path("tls.key"),
        client_ca: Some(volume.path("ca.crt")),
    })
    .await;
    let old_keda = old_ca.client();
    let new_ca = Ca::new("new CA");
    let new_keda = new_ca.client();
    assert!(spec_works(&server, &old_ca.pem(), Some(&old_keda)).await);
    assert!(!spec_works(&server, &old_ca.pem(), Some(&new_keda)).await);

    // cert-manager rotates the CA: a new server certificate and client CA, one ..data swap.
    let new_server = new_ca.server();
    volume.publish(&[
        ("tls.crt", &new_server.cert),
        ("tls.key", &new_server.key),
        ("ca.crt", &new_ca.pem()),
    ]);

    // The files are checked at most once a second, before a new connection; the deadline
    // only ends a hung test (a loaded machine answers a handshake in well under a second).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !spec_works(&server, &new_ca.pem(), Some(&new_keda)).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the rotated client CA was not used within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The old CA's client is now refused, even trusting the new server certificate.
    assert!(!spec_works(&server, &new_ca.pem(), Some(&old_keda)).await);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn unusable_tls_files_stop_the_start_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let pair = Ca::new("scaler CA").server();
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let options = ServeOptions {
        tls: Some(TlsFiles {
            cert: write(dir.path(), "tls.crt", &pair.cert),
            key: write(
                dir.path(),
                "tls.key",
                "-----BEGIN PRIVATE KEY-----\ngarbage\n",
            ),
            client_ca: None,
        }),
        ..ServeOptions::loopback()
    };
    let error = format!("{:#}", serve::start(grpc, http, options).await.unwrap_err());
    assert!(error.contains("--tls-key-file"), "{error}");
    assert!(error.contains("tls.key"), "{error}");
}

/// `GET path` on the admin port over TLS trusting `ca`, presenting `identity` when given: the
/// status code, or the handshake or connection error.
async fn admin_get(
    server: &Server,
    ca: &str,
    identity: Option<&Pair>,
    path: &str,
) -> Result<u16, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls;

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match identity {
        Some(pair) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(pair.cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(pair.key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect(server.http_addr())
        .await
        .map_err(|e| e.to_string())?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut stream = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    let head = String::from_utf8_lossy(&answer);
    head.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status line in {head:?}"))
}

#[tokio::test]
async fn admin_tls_opens_debug_to_client_certificates_only_and_probes_need_none() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("scaler test CA");
    let other = Ca::new("another CA");
    let server_pair = ca.server();
    let files = TlsFiles {
        cert: write(dir.path(), "tls.crt", &server_pair.cert),
        key: write(dir.path(), "tls.key", &server_pair.key),
        client_ca: Some(write(dir.path(), "ca.crt", &ca.pem())),
    };
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut options = ServeOptions {
        tls: Some(files),
        admin_tls: true,
        ..ServeOptions::loopback()
    };
    options.admin.debug = vllm_keda_service::http::DebugAccess::Certificate;
    let server = serve::start(grpc, http, options).await.unwrap();
    let (client, stranger) = (ca.client(), other.client());
    let debug = "/debug/scaledobjects";

    // Probes and Prometheus need no certificate.
    assert_eq!(admin_get(&server, &ca.pem(), None, "/livez").await, Ok(200));
    assert_eq!(
        admin_get(&server, &ca.pem(), None, "/metrics").await,
        Ok(200)
    );
    // /debug: a certificate from the client CA opens it; none is refused, from loopback too.
    assert_eq!(
        admin_get(&server, &ca.pem(), Some(&client), debug).await,
        Ok(200)
    );
    assert_eq!(admin_get(&server, &ca.pem(), None, debug).await, Ok(403));
    // A certificate from another CA fails the handshake.
    assert!(
        admin_get(&server, &ca.pem(), Some(&stranger), debug)
            .await
            .is_err()
    );
    // The gRPC port still requires its client certificate.
    assert!(spec_works(&server, &ca.pem(), Some(&client)).await);
    assert!(!spec_works(&server, &ca.pem(), None).await);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn admin_tls_and_certificate_access_need_their_files() {
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let options = ServeOptions {
        admin_tls: true,
        ..ServeOptions::loopback()
    };
    let error = serve::start(grpc, http, options).await.err().unwrap();
    assert!(error.to_string().contains("--tls-cert-file"), "{error}");

    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut options = ServeOptions::loopback();
    options.admin.debug = vllm_keda_service::http::DebugAccess::Certificate;
    let error = serve::start(grpc, http, options).await.err().unwrap();
    assert!(error.to_string().contains("--admin-tls"), "{error}");
}
