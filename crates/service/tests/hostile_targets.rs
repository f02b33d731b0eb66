//! Hostile targets and hostile tenants against the real scraper and the real server on loopback:
//! the target policy (every spelling of loopback, the metadata addresses, the scaler's own
//! ports), bodies and headers that carry secrets never reaching KEDA's answer, `/debug` or the
//! log, each limit an error naming its flag and counted, quiet connections closed, and proxy
//! variables ignored. Loopback is refused by default, so each test that needs a loopback
//! target opens it explicitly (`ScrapeSettings::loopback()`, `ServeOptions::loopback()`).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tonic::Code;
use vllm_keda_service::http::{AdminOptions, DebugAccess};
use vllm_keda_service::proto::external_scaler_client::ExternalScalerClient;
use vllm_keda_service::proto::{GetMetricsRequest, ScaledObjectRef};
use vllm_keda_service::scrape::{ScrapeOutcome, ScrapeSettings, Scraper, scrape_slots};
use vllm_keda_service::serve::{self, ServeOptions, Server};

const LOADED: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../data/fixtures/vllm-v1-loaded.prom"
));

/// Two 64-character secrets, as an internal service might answer them.
const TOKEN_A: &str = "5f1c9e0b7a3d4e2f8c6b1a09d7e5f3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6";
const TOKEN_B: &str = "QmVhcmVyIHNlY3JldC10b2tlbi1kby1ub3QtbGVhay1hbnl3aGVyZS0xMjM0NTY3";

/// Fails the test instead of hanging it (a bound a loaded machine meets many times over).
async fn within<T>(seconds: u64, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(seconds), future)
        .await
        .unwrap_or_else(|_| panic!("did not finish within {seconds} s"))
}

/// An HTTP target on 127.0.0.1 that counts requests and keeps the last `Host` header.
struct Counting {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    host: Arc<Mutex<String>>,
}

async fn counting(body: &'static str) -> Counting {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let host = Arc::new(Mutex::new(String::new()));
    let (h, hh) = (hits.clone(), host.clone());
    let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
        let (h, hh) = (h.clone(), hh.clone());
        async move {
            h.fetch_add(1, Ordering::SeqCst);
            if let Some(v) = headers.get("host") {
                *hh.lock().unwrap() = v.to_str().unwrap_or_default().to_owned();
            }
            body
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    Counting { addr, hits, host }
}

/// A raw TCP target on 127.0.0.1 that answers every connection with `response` and closes.
async fn raw(response: Vec<u8>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let response = Arc::new(response);
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let response = response.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let _ = stream.write_all(&response).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    format!("http://{addr}/metrics")
}

fn http_response(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len());
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("connection: close\r\n\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

fn error_text(outcome: &ScrapeOutcome) -> String {
    match &outcome.result {
        Ok(_) => panic!("{} scraped, expected an error", outcome.url),
        Err(e) => e.to_string(),
    }
}

fn metadata(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn so_ref(name: &str, metadata: HashMap<String, String>) -> ScaledObjectRef {
    ScaledObjectRef {
        name: name.to_owned(),
        namespace: "tenant".to_owned(),
        scaler_metadata: metadata,
    }
}

async fn client(addr: SocketAddr) -> ExternalScalerClient<tonic::transport::Channel> {
    ExternalScalerClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

async fn get_metrics(
    c: &mut ExternalScalerClient<tonic::transport::Channel>,
    r: ScaledObjectRef,
) -> Result<i64, tonic::Status> {
    c.get_metrics(GetMetricsRequest {
        scaled_object_ref: Some(r),
        metric_name: String::new(),
    })
    .await
    .map(|answer| answer.into_inner().metric_values[0].metric_value)
}

async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let response = reqwest::get(format!("http://{addr}{path}")).await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

async fn start(options: ServeOptions) -> Server {
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    serve::start(grpc, http, options).await.unwrap()
}

/// Everything the process logs, at debug level, for the leak check.
fn captured_log() -> Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        log
    })
    .clone()
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn loopback_in_every_spelling_is_refused_by_default_and_never_connected() {
    within(20, async {
        let target = counting(LOADED).await;
        let port = target.addr.port();
        let spellings = [
            format!("http://127.0.0.1:{port}/metrics"),
            format!("http://localhost:{port}/metrics"),
            format!("http://2130706433:{port}/metrics"),
            format!("http://0x7f.1:{port}/metrics"),
            format!("http://0177.0.0.1:{port}/metrics"),
            format!("http://127.1:{port}/metrics"),
            format!("http://[::1]:{port}/metrics"),
            format!("http://[::ffff:127.0.0.1]:{port}/metrics"),
            format!("http://[::ffff:7f00:1]:{port}/metrics"),
            format!("http://0.0.0.0:{port}/metrics"),
        ];
        let scraper = Scraper::new(ScrapeSettings::default());
        for outcome in scraper.scrape_all(&spellings).await {
            assert_eq!(outcome.result_label(), "refused", "{outcome:?}");
            let text = error_text(&outcome);
            assert!(text.contains("--allow-targets"), "{text}");
            assert!(
                text.contains("loopback") || text.contains("unspecified"),
                "{text}"
            );
        }
        assert_eq!(
            target.hits.load(Ordering::SeqCst),
            0,
            "a refused target was fetched"
        );

        // Opened explicitly, the same spellings reach the target; a name goes to the checked
        // address and keeps its Host header.
        let scraper = Scraper::new(ScrapeSettings::loopback());
        for url in &spellings[..4] {
            let body = scraper.scrape(url).await.unwrap();
            assert_eq!(body, LOADED);
        }
        assert_eq!(target.hits.load(Ordering::SeqCst), 4);
        scraper.scrape(&spellings[1]).await.unwrap();
        assert_eq!(*target.host.lock().unwrap(), format!("localhost:{port}"));
    })
    .await;
}

#[tokio::test]
async fn metadata_and_link_local_addresses_are_refused_before_any_connection() {
    within(20, async {
        let urls: Vec<String> = [
            "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
            "http://[fd00:ec2::254]/latest/meta-data/",
            "http://[fd20:ce::254]/computeMetadata/v1/",
            "http://100.100.100.200/latest/meta-data/",
            "http://168.63.129.16/machine",
            "http://169.254.170.2/v2/credentials",
            "http://[fe80::1]:8000/metrics",
            "http://[64:ff9b::a9fe:a9fe]/latest/",
        ]
        .map(String::from)
        .to_vec();
        // Even with loopback open, and with everything else allowed.
        let settings = ScrapeSettings {
            policy: Arc::new(vllm_keda_service::scrape::TargetPolicy::allowing([
                "0.0.0.0/0".parse().unwrap(),
                "::/0".parse().unwrap(),
                "127.0.0.0/8".parse().unwrap(),
            ])),
            ..ScrapeSettings::default()
        };
        let out = Scraper::new(settings).scrape_all(&urls).await;
        for outcome in &out {
            assert_eq!(outcome.result_label(), "refused", "{outcome:?}");
            let text = error_text(outcome);
            assert!(
                text.contains("metadata") || text.contains("link-local") || text.contains("Azure"),
                "{text}"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn a_kubelet_port_is_refused_before_any_connection_even_with_every_address_allowed() {
    within(20, async {
        // The port rule refuses before any connection, whatever --allow-targets opens (without
        // it, the loopback address would be dialled and fail as a connect error).
        let settings = ScrapeSettings {
            policy: Arc::new(vllm_keda_service::scrape::TargetPolicy::allowing([
                "0.0.0.0/0".parse().unwrap(),
                "127.0.0.0/8".parse().unwrap(),
            ])),
            ..ScrapeSettings::default()
        };
        let urls = [
            "http://127.0.0.1:10255/pods".to_owned(),
            "http://10.0.0.7:10250/metrics".to_owned(),
        ];
        for outcome in Scraper::new(settings).scrape_all(&urls).await {
            assert_eq!(outcome.result_label(), "refused", "{outcome:?}");
            let text = error_text(&outcome);
            assert!(text.contains("control-plane ports"), "{text}");
            assert!(text.contains("--allow-target-ports"), "{text}");
        }
    })
    .await;
}

#[tokio::test]
async fn the_scaler_never_scrapes_its_own_ports() {
    within(20, async {
        let server = start(ServeOptions::loopback()).await;
        let mut c = client(server.grpc_addr()).await;
        for (name, addr) in [("admin", server.http_addr()), ("grpc", server.grpc_addr())] {
            let endpoints = format!("http://{addr}/metrics");
            let r = so_ref(name, metadata(&[("endpoints", &endpoints)]));
            let e = get_metrics(&mut c, r).await.unwrap_err();
            assert_eq!(e.code(), Code::Unavailable, "{e:?}");
            assert!(
                e.message().contains("never scrapes itself"),
                "{}",
                e.message()
            );
            assert!(e.message().contains("[refused]"), "{}", e.message());
        }
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn secrets_in_bodies_and_headers_never_reach_keda_debug_or_the_log() {
    let log = captured_log();
    within(30, async {
        let secret_body = format!("{TOKEN_A} {TOKEN_B}\n");
        let targets = [
            // A metric name and a value that are secrets.
            raw(http_response("200 OK", &[], secret_body.as_bytes())).await,
            // A secret label value, then a syntax error after it.
            raw(http_response(
                "200 OK",
                &[],
                format!("m{{k=\"{TOKEN_A}\" x=\"{TOKEN_B}\"}} 1\n").as_bytes(),
            ))
            .await,
            // An unterminated label value holding a secret.
            raw(http_response(
                "200 OK",
                &[],
                format!("m{{k=\"{TOKEN_A}").as_bytes(),
            ))
            .await,
            // An error page with a secret.
            raw(http_response(
                "500 Internal Server Error",
                &[],
                secret_body.as_bytes(),
            ))
            .await,
            // A secret in headers the scraper reads.
            raw(http_response(
                "200 OK",
                &[("content-encoding", TOKEN_A), ("x-token", TOKEN_B)],
                secret_body.as_bytes(),
            ))
            .await,
            // Not HTTP at all: a banner with a secret.
            raw(format!("{TOKEN_A}\r\n{TOKEN_B}\r\n").into_bytes()).await,
            // A secret as an invalid escape in a label value.
            raw(http_response(
                "200 OK",
                &[],
                format!("m{{k=\"{TOKEN_A}\\{TOKEN_B}\"}} 1\n").as_bytes(),
            ))
            .await,
        ];
        let server = start(ServeOptions::loopback()).await;
        let mut c = client(server.grpc_addr()).await;
        for (i, url) in targets.iter().enumerate() {
            let r = so_ref(&format!("hostile-{i}"), metadata(&[("endpoints", url)]));
            let e = get_metrics(&mut c, r).await.unwrap_err();
            assert_eq!(e.code(), Code::Unavailable, "{e:?}");
            for token in [TOKEN_A, TOKEN_B] {
                assert!(
                    !e.message().contains(&token[..16]),
                    "target {i}: {}",
                    e.message()
                );
            }
        }
        let (status, list) = http_get(server.http_addr(), "/debug/scaledobjects").await;
        assert_eq!(status, 200);
        let mut pages = vec![list];
        for i in 0..targets.len() {
            let path = format!("/debug/scaledobjects/tenant/hostile-{i}");
            let (status, detail) = http_get(server.http_addr(), &path).await;
            assert_eq!(status, 200, "{detail}");
            assert!(detail.contains("\"healthy\":false"), "{detail}");
            pages.push(detail);
        }
        for page in &pages {
            for token in [TOKEN_A, TOKEN_B] {
                assert!(!page.contains(&token[..16]), "/debug leaks: {page}");
            }
        }
        // The parse errors still say where to look.
        assert!(pages[1].contains("line 1, column"), "{}", pages[1]);
        server.shutdown().await.unwrap();
    })
    .await;
    let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    assert!(
        text.contains("scrape failed"),
        "the log capture saw nothing: {text}"
    );
    for token in [TOKEN_A, TOKEN_B] {
        assert!(!text.contains(&token[..16]), "the log leaks a body");
    }
}

#[tokio::test]
async fn connection_failures_read_the_same_whatever_listens() {
    within(20, async {
        // A closed port, a port that resets, and a port that answers but not in HTTP.
        let closed = {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            drop(listener);
            format!("http://{addr}/metrics")
        };
        let resets = raw(Vec::new()).await;
        let banner = raw(b"SSH-2.0-OpenSSH_9.6\r\n".to_vec()).await;
        let urls = vec![closed, resets, banner];
        let out = Scraper::new(ScrapeSettings::loopback())
            .scrape_all(&urls)
            .await;
        let texts: Vec<String> = out
            .iter()
            .map(|o| {
                assert_eq!(o.result_label(), "connect_error", "{o:?}");
                error_text(o).replace(&o.url, "URL")
            })
            .collect();
        assert_eq!(texts[0], texts[1]);
        assert_eq!(texts[1], texts[2]);
    })
    .await;
}

#[tokio::test]
async fn each_limit_is_an_error_naming_its_flag_and_is_counted() {
    within(30, async {
        // 25,000 tiny samples (about 300 KB): past the default of 20,000.
        let many: &'static str = Box::leak(
            (0..25_000)
                .map(|i| format!("vllm:x{{finished_reason=\"r{i}\"}} 1\n"))
                .collect::<String>()
                .into_boxed_str(),
        );
        let many_samples = counting(many).await;
        // 5 MiB: past the default body cap of 4 MiB.
        let huge: &'static str = Box::leak(format!("# {}\n", "x".repeat(5 << 20)).into_boxed_str());
        let huge_body = counting(huge).await;
        let long_value: &'static str = Box::leak(
            format!(
                "vllm:num_requests_waiting{{model_name=\"{}\"}} 1\n",
                "m".repeat(5000)
            )
            .into_boxed_str(),
        );
        let long_label = counting(long_value).await;
        let healthy = counting(LOADED).await;

        let mut options = ServeOptions::loopback();
        options.control.max_scaledobjects = 5;
        options.control.scrape.max_targets = 2;
        let server = start(options).await;
        let mut c = client(server.grpc_addr()).await;
        let cases = [
            ("samples", many_samples.addr, "--scrape-max-samples"),
            ("body", huge_body.addr, "--scrape-max-body-bytes"),
            ("label", long_label.addr, "--scrape-max-label-value-bytes"),
        ];
        for (name, addr, flag) in cases {
            let endpoints = format!("http://{addr}/metrics");
            let e = get_metrics(&mut c, so_ref(name, metadata(&[("endpoints", &endpoints)])))
                .await
                .unwrap_err();
            assert_eq!(e.code(), Code::Unavailable, "{e:?}");
            assert!(e.message().contains(flag), "{name}: {}", e.message());
            assert!(
                e.message().contains("[too_large]"),
                "{name}: {}",
                e.message()
            );
        }
        // Targets past the per-ScaledObject limit are not scraped; the first two still count.
        let endpoints = format!(
            "http://{a}/metrics,http://{a}/m2,http://{a}/m3",
            a = healthy.addr
        );
        let r = so_ref("wide", metadata(&[("endpoints", &endpoints)]));
        assert!(get_metrics(&mut c, r).await.is_ok());
        let (_, detail) = http_get(server.http_addr(), "/debug/scaledobjects/tenant/wide").await;
        assert!(
            detail.contains("--max-targets-per-scaledobject"),
            "{detail}"
        );
        assert_eq!(
            healthy.hits.load(Ordering::SeqCst) % 2,
            0,
            "the third target was fetched"
        );

        // A fifth ScaledObject fits; a sixth is refused naming the flag; known ones still answer.
        let ok = format!("http://{}/metrics", healthy.addr);
        assert!(
            get_metrics(&mut c, so_ref("fifth", metadata(&[("endpoints", &ok)])))
                .await
                .is_ok()
        );
        let e = get_metrics(&mut c, so_ref("sixth", metadata(&[("endpoints", &ok)])))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
        assert!(
            e.message().contains("--max-scaledobjects"),
            "{}",
            e.message()
        );
        assert!(
            get_metrics(&mut c, so_ref("fifth", metadata(&[("endpoints", &ok)])))
                .await
                .is_ok()
        );

        // Metadata: a 1 MB unknown key is refused without being echoed; so is a huge value.
        let key = "k".repeat(1 << 20);
        let e = get_metrics(
            &mut c,
            so_ref("fifth", metadata(&[(&key, "1"), ("endpoints", &ok)])),
        )
        .await
        .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().len() < 400, "{} bytes", e.message().len());
        assert!(
            e.message().contains("more than the limit"),
            "{}",
            e.message()
        );
        let model = "m".repeat(3 << 20);
        let e = get_metrics(
            &mut c,
            so_ref("fifth", metadata(&[("model", &model), ("endpoints", &ok)])),
        )
        .await
        .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().len() < 400, "{} bytes", e.message().len());
        let e = get_metrics(
            &mut c,
            so_ref(&"n".repeat(300), metadata(&[("endpoints", &ok)])),
        )
        .await
        .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");

        let (_, text) = http_get(server.http_addr(), "/metrics").await;
        for limit in [
            "samples",
            "body_bytes",
            "label_value_length",
            "targets_per_scaledobject",
            "scaledobjects",
            "scaledobject_name",
        ] {
            let series = format!("vllm_keda_scaler_limit_exceeded_total{{limit=\"{limit}\"}}");
            assert!(text.contains(&series), "missing {series}");
        }
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn no_free_scrape_slot_is_a_limit_error() {
    within(20, async {
        let target = counting(LOADED).await;
        let slots = scrape_slots(1);
        let held = slots.clone().acquire_owned().await.unwrap();
        let scraper = Scraper::new(ScrapeSettings {
            timeout: Duration::from_millis(300),
            concurrency: Some(slots),
            ..ScrapeSettings::loopback()
        });
        let url = format!("http://{}/metrics", target.addr);
        let e = scraper.scrape(&url).await.unwrap_err();
        assert!(e.to_string().contains("--max-concurrent-scrapes"), "{e}");
        assert_eq!(target.hits.load(Ordering::SeqCst), 0);
        drop(held);
        assert_eq!(scraper.scrape(&url).await.unwrap(), LOADED);
    })
    .await;
}

/// Reads until the peer closes; true when it did.
async fn closed_by_peer(mut stream: TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return true,
            Ok(_) => {}
        }
    }
}

#[tokio::test]
async fn quiet_connections_are_closed_on_both_ports() {
    let options = ServeOptions {
        admin: AdminOptions {
            header_read_timeout: Duration::from_millis(500),
            idle_timeout: Duration::from_secs(1),
            ..AdminOptions::default()
        },
        grpc_preface_timeout: Duration::from_millis(500),
        ..ServeOptions::loopback()
    };
    let server = start(options).await;
    // 200 connections per port that say nothing (or half a request head); each must be closed
    // by the server. The bound is for a hang, not a speed check: the timeouts are 0.5-1 s.
    within(60, async {
        let mut waits = Vec::new();
        for i in 0..200 {
            let mut admin = TcpStream::connect(server.http_addr()).await.unwrap();
            if i % 2 == 1 {
                admin
                    .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                    .await
                    .unwrap();
            }
            waits.push(tokio::spawn(closed_by_peer(admin)));
            let grpc = TcpStream::connect(server.grpc_addr()).await.unwrap();
            waits.push(tokio::spawn(closed_by_peer(grpc)));
        }
        for wait in waits {
            assert!(wait.await.unwrap());
        }
    })
    .await;
    // The ports still serve.
    let (status, _) = http_get(server.http_addr(), "/livez").await;
    assert_eq!(status, 200);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn debug_can_be_turned_off() {
    let options = ServeOptions {
        admin: AdminOptions {
            debug: DebugAccess::Off,
            ..AdminOptions::default()
        },
        ..ServeOptions::loopback()
    };
    let server = start(options).await;
    let (status, body) = http_get(server.http_addr(), "/debug/scaledobjects").await;
    assert_eq!(status, 404);
    assert!(body.contains("--debug-endpoints"), "{body}");
    let (status, _) = http_get(server.http_addr(), "/metrics").await;
    assert_eq!(status, 200);
    server.shutdown().await.unwrap();
}

/// The child half of [`scrapes_ignore_proxy_variables`]: runs only in the child process that
/// test starts with the proxy variables set (a process cannot set its own environment safely).
#[tokio::test]
async fn proxy_probe_in_a_child_process() {
    let Ok(url) = std::env::var("HOSTILE_PROXY_PROBE_URL") else {
        return;
    };
    let from_env = std::env::var("HOSTILE_PROXY_FROM_ENV").as_deref() == Ok("1");
    let scraper = Scraper::new(ScrapeSettings {
        proxy_from_env: from_env,
        timeout: Duration::from_secs(5),
        ..ScrapeSettings::loopback()
    });
    let _ = scraper.scrape(&url).await;
}

#[tokio::test]
async fn scrapes_ignore_proxy_variables() {
    let target = counting(LOADED).await;
    let proxy = counting("proxied\n").await;
    let url = format!("http://{}/metrics", target.addr);
    let proxy_url = format!("http://{}", proxy.addr);
    let run_child = move |from_env: &str| {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "proxy_probe_in_a_child_process",
                "--test-threads=1",
            ])
            .env("HOSTILE_PROXY_PROBE_URL", &url)
            .env("HOSTILE_PROXY_FROM_ENV", from_env)
            .env("HTTP_PROXY", &proxy_url)
            .env("http_proxy", &proxy_url)
            .env("ALL_PROXY", &proxy_url)
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    };
    let child = tokio::task::spawn_blocking(move || {
        run_child("0");
        let direct = (
            target.hits.load(Ordering::SeqCst),
            proxy.hits.load(Ordering::SeqCst),
        );
        run_child("1");
        let via_env = (
            target.hits.load(Ordering::SeqCst),
            proxy.hits.load(Ordering::SeqCst),
        );
        (direct, via_env)
    });
    let ((target_hits, proxy_hits), (_, proxy_hits_with_flag)) = child.await.unwrap();
    assert_eq!(
        (target_hits, proxy_hits),
        (1, 0),
        "the proxy variables were followed"
    );
    // The control: with the flag, the same variables do route the scrape through the proxy.
    assert_eq!(proxy_hits_with_flag, 1);
}
