//! Fault tests on loopback: each faulty target is scraped in one `scrape_all` call beside two
//! healthy ones, and the healthy bodies must come back intact while the fault gets its label.

mod scrape_support;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use scrape_support::{Behavior, healthy_body, refused_url, serve};
use tokio::time::Instant;
use vllm_keda_core::config::TargetSource;
use vllm_keda_service::discovery::{Discovery, HostsFileResolver};
use vllm_keda_service::scrape::{ScrapeOutcome, ScrapeSettings, Scraper};

const MIB: usize = 1 << 20;

/// Fails the test instead of hanging it.
async fn within<T>(seconds: u64, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(seconds), f)
        .await
        .expect("test timed out")
}

fn settings(timeout_ms: u64, max_body_bytes: usize) -> ScrapeSettings {
    ScrapeSettings {
        timeout: Duration::from_millis(timeout_ms),
        max_body_bytes,
        ..ScrapeSettings::loopback()
    }
}

/// Scrapes `[healthy a, fault, healthy b]`, checks both healthy bodies, returns the fault's.
async fn beside_healthy(fault: Behavior, settings: ScrapeSettings) -> ScrapeOutcome {
    let fault = serve(fault).await;
    beside_healthy_url(fault.url(), settings).await
}

async fn beside_healthy_url(fault_url: String, settings: ScrapeSettings) -> ScrapeOutcome {
    let a = serve(Behavior::Body(healthy_body("a"))).await;
    let b = serve(Behavior::Body(healthy_body("b"))).await;
    let urls = vec![a.url(), fault_url.clone(), b.url()];
    let mut out = Scraper::new(settings).scrape_all(&urls).await;
    assert_eq!(out.len(), 3);
    assert_healthy(&out[0], &a.url(), "a");
    assert_healthy(&out[2], &b.url(), "b");
    let fault = out.remove(1);
    assert_eq!(fault.url, fault_url);
    fault
}

fn assert_healthy(outcome: &ScrapeOutcome, url: &str, pod: &str) {
    assert_eq!(outcome.url, url);
    assert_eq!(outcome.result_label(), "ok", "{:?}", outcome.result);
    assert_eq!(
        outcome.result.as_deref().unwrap().as_bytes(),
        &healthy_body(pod)[..]
    );
}

fn error_text(outcome: &ScrapeOutcome) -> String {
    let e = outcome.result.as_ref().expect_err("expected a failure");
    let text = e.to_string();
    println!("{}: {text}", e.result_label());
    assert!(
        text.contains(&outcome.url),
        "message names the target: {text}"
    );
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_targets_time_out_concurrently_and_others_still_answer() {
    within(30, async {
        let timeout = Duration::from_millis(1000);
        let a = serve(Behavior::Body(healthy_body("a"))).await;
        let b = serve(Behavior::Body(healthy_body("b"))).await;
        let hangs = [
            serve(Behavior::Hang).await,
            serve(Behavior::Hang).await,
            serve(Behavior::Hang).await,
            serve(Behavior::Hang).await,
        ];
        let mut urls = vec![a.url()];
        urls.extend(hangs.iter().map(|h| h.url()));
        urls.push(b.url());
        let scraper = Scraper::new(ScrapeSettings {
            timeout,
            max_body_bytes: MIB,
            ..ScrapeSettings::loopback()
        });
        let start = Instant::now();
        let out = scraper.scrape_all(&urls).await;
        let total = start.elapsed();
        assert_healthy(&out[0], &a.url(), "a");
        assert_healthy(&out[5], &b.url(), "b");
        for hung in &out[1..5] {
            assert_eq!(hung.result_label(), "timeout", "{:?}", hung.result);
            assert!(hung.duration >= timeout, "{:?}", hung.duration);
            assert!(error_text(hung).contains("no complete response within 1s"));
            // The healthy answers did not wait for the hung ones.
            assert!(out[0].duration < hung.duration && out[5].duration < hung.duration);
        }
        // Four hung targets scraped one after another would take 4 timeouts; concurrently
        // the whole call takes about one.
        assert!(total < timeout * 3, "scrape_all took {total:?}");
    })
    .await;
}

#[tokio::test]
async fn server_error_is_http_status() {
    within(10, async {
        let out = beside_healthy(Behavior::Status(500), settings(2000, MIB)).await;
        assert_eq!(out.result_label(), "http_status");
        let text = error_text(&out);
        assert!(
            text.contains("http status 500") && text.contains("check its logs"),
            "{text}"
        );
        let out = beside_healthy(Behavior::Status(404), settings(2000, MIB)).await;
        assert!(error_text(&out).contains("check the metrics path"));
    })
    .await;
}

#[tokio::test]
async fn refused_connection_is_connect_error() {
    within(10, async {
        let out = beside_healthy_url(refused_url().await, settings(2000, MIB)).await;
        assert_eq!(out.result_label(), "connect_error", "{:?}", out.result);
        assert!(error_text(&out).contains("cannot connect"));
    })
    .await;
}

#[tokio::test]
async fn reset_in_the_middle_of_the_body_is_connect_error() {
    within(10, async {
        let fault = Behavior::ResetMidBody {
            declared: 1_000_000,
            sent: 10_000,
        };
        let out = beside_healthy(fault, settings(5000, MIB)).await;
        assert_eq!(out.result_label(), "connect_error", "{:?}", out.result);
        let text = error_text(&out);
        assert!(
            text.contains("the connection failed before a complete"),
            "{text}"
        );
    })
    .await;
}

#[tokio::test]
async fn reset_in_the_middle_of_a_gzip_body_is_connect_error() {
    within(10, async {
        let out = beside_healthy(Behavior::ResetMidGzip, settings(5000, 64 * MIB)).await;
        assert_eq!(out.result_label(), "connect_error", "{:?}", out.result);
    })
    .await;
}

#[tokio::test]
async fn garbage_text_is_returned_for_the_parser_to_judge() {
    within(10, async {
        let garbage = Bytes::from_static(b"<html>{{{ not metrics }}} \xc3\xa9\n\tvllm: = = =\n");
        let out = beside_healthy(Behavior::Body(garbage.clone()), settings(2000, MIB)).await;
        assert_eq!(out.result.as_deref().unwrap().as_bytes(), &garbage[..]);
    })
    .await;
}

#[tokio::test]
async fn non_utf8_body_is_decode_error_naming_the_offset() {
    within(10, async {
        let mut body = b"vllm:num_requests_waiting 1\n".to_vec();
        let offset = body.len();
        body.extend_from_slice(b"\xff\xfe garbage\n");
        let out = beside_healthy(Behavior::Body(Bytes::from(body)), settings(2000, MIB)).await;
        assert_eq!(out.result_label(), "decode_error");
        let text = error_text(&out);
        assert!(
            text.contains(&format!("not valid utf-8 at byte {offset}")),
            "{text}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_of_200_mb_stops_at_the_cap() {
    within(60, async {
        let cap = 4 * MIB;
        let fault = Behavior::Chunked {
            total: 200 * MIB as u64,
        };
        let out = beside_healthy(fault, settings(30_000, cap)).await;
        assert_eq!(out.result_label(), "too_large", "{:?}", out.result);
        let text = error_text(&out);
        assert!(
            text.contains(&format!("larger than the {cap} byte limit")),
            "{text}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_body_stops_at_the_cap() {
    within(60, async {
        let fault = Behavior::Chunked { total: u64::MAX };
        let out = beside_healthy(fault, settings(30_000, 2 * MIB)).await;
        assert_eq!(out.result_label(), "too_large", "{:?}", out.result);
    })
    .await;
}

#[tokio::test]
async fn declared_length_over_the_cap_is_refused_before_reading() {
    within(10, async {
        let body = Bytes::from(vec![b'x'; 2 * MIB]);
        let out = beside_healthy(Behavior::Body(body), settings(5000, MIB)).await;
        assert_eq!(out.result_label(), "too_large", "{:?}", out.result);
        // Exactly the cap is accepted.
        let body = Bytes::from(vec![b'x'; MIB]);
        let out = beside_healthy(Behavior::Body(body), settings(5000, MIB)).await;
        assert_eq!(out.result.map(|b| b.len()), Ok(MIB));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_bomb_stops_at_the_decompressed_cap() {
    within(60, async {
        let cap = 4 * MIB;
        let fault = Behavior::GzipBomb { mebibytes: 1024 };
        let out = beside_healthy(fault, settings(30_000, cap)).await;
        assert_eq!(out.result_label(), "too_large", "{:?}", out.result);
        assert!(error_text(&out).contains("after decompression"));
    })
    .await;
}

#[tokio::test]
async fn gzip_bomb_generator_is_valid_gzip() {
    within(30, async {
        // Under the cap the same stream decodes completely, so the bomb above is real gzip.
        let out = beside_healthy(
            Behavior::GzipBomb { mebibytes: 3 },
            settings(20_000, 4 * MIB),
        )
        .await;
        let body = out.result.expect("small bomb decodes");
        assert_eq!(body.len(), 3 * MIB);
        assert!(body.bytes().all(|b| b == 0));
    })
    .await;
}

#[tokio::test]
async fn corrupt_gzip_is_decode_error() {
    within(10, async {
        let mut compressed = scrape_support::gzip(&healthy_body("x"));
        let n = compressed.len();
        compressed[n - 8] ^= 0xff; // break the CRC
        // Served as gzip with a broken checksum.
        let fault = RawEncoded("gzip", compressed).serve().await;
        let out = beside_healthy_url(fault.url(), settings(5000, MIB)).await;
        assert_eq!(out.result_label(), "decode_error", "{:?}", out.result);
        assert!(error_text(&out).contains("cannot decompress"));
    })
    .await;
}

#[tokio::test]
async fn truncated_gzip_in_a_complete_response_is_decode_error() {
    within(10, async {
        let compressed = scrape_support::gzip(&scrape_support::metric_lines(200_000));
        let truncated = compressed[..compressed.len() / 2].to_vec();
        let fault = RawEncoded("gzip", truncated).serve().await;
        let out = beside_healthy_url(fault.url(), settings(5000, MIB)).await;
        assert_eq!(out.result_label(), "decode_error", "{:?}", out.result);
    })
    .await;
}

#[tokio::test]
async fn unrequested_content_encoding_is_decode_error() {
    within(10, async {
        let fault = RawEncoded("br", b"\x1b\x03\x00\xf8".to_vec()).serve().await;
        let out = beside_healthy_url(fault.url(), settings(5000, MIB)).await;
        assert_eq!(out.result_label(), "decode_error", "{:?}", out.result);
        assert!(error_text(&out).contains("unsupported content-encoding (only gzip"));
        // The header is the target's text: not echoed.
        assert!(!error_text(&out).contains("br"), "{}", error_text(&out));
    })
    .await;
}

/// A server sending already-encoded bytes with this `Content-Encoding`.
struct RawEncoded(&'static str, Vec<u8>);

impl RawEncoded {
    async fn serve(self) -> RawServer {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (encoding, body) = (self.0, self.1);
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Encoding: {encoding}\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(&body).await;
                let _ = s.shutdown().await;
            }
        });
        RawServer { addr, task }
    }
}

struct RawServer {
    addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl RawServer {
    fn url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn gzip_bodies_are_accepted_and_headers_ask_for_text_format() {
    within(10, async {
        let body = healthy_body("gz");
        let server = serve(Behavior::GzipBody(body.clone())).await;
        let out = beside_healthy_url(server.url(), settings(5000, MIB)).await;
        assert_eq!(out.result.as_deref().unwrap().as_bytes(), &body[..]);
        let head = server.requests.lock().unwrap()[0].to_lowercase();
        assert!(head.contains("accept: text/plain;version=0.0.4"), "{head}");
        assert!(head.contains("accept-encoding: gzip"), "{head}");
    })
    .await;
}

#[tokio::test]
async fn without_compression_no_gzip_is_asked_for() {
    within(10, async {
        let body = healthy_body("plain");
        let server = serve(Behavior::Body(body.clone())).await;
        let settings = ScrapeSettings {
            compression: false,
            ..settings(5000, MIB)
        };
        let out = beside_healthy_url(server.url(), settings).await;
        assert_eq!(out.result.as_deref().unwrap().as_bytes(), &body[..]);
        let head = server.requests.lock().unwrap()[0].to_lowercase();
        assert!(head.contains("accept: text/plain;version=0.0.4"), "{head}");
        assert!(!head.contains("accept-encoding"), "{head}");
    })
    .await;
}

#[tokio::test]
async fn ten_thousand_series_body_succeeds() {
    within(30, async {
        let body = scrape_support::many_series_body(10_000);
        assert!(body.len() > 900_000, "the body is big enough to matter");
        let out = beside_healthy(Behavior::Body(body.clone()), ScrapeSettings::loopback()).await;
        let text = out.result.expect("10,000 series scrape");
        assert_eq!(text.as_bytes(), &body[..]);
        assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 10_000);
    })
    .await;
}

#[tokio::test]
async fn bad_targets_are_connect_errors_and_do_not_disturb_others() {
    within(10, async {
        let out =
            beside_healthy_url("https://127.0.0.1:1/metrics".into(), settings(2000, MIB)).await;
        assert_eq!(out.result_label(), "connect_error");
        assert!(error_text(&out).contains("use http://"));
        let out = beside_healthy_url("127.0.0.1:1".into(), settings(2000, MIB)).await;
        assert_eq!(out.result_label(), "connect_error");
    })
    .await;
}

#[tokio::test]
async fn target_that_disappears_from_dns_is_dropped_and_others_stay() {
    within(30, async {
        // Four pods on one port at four loopback addresses (one IPv6), named by a hosts file
        // that the discovery resolver re-reads on every call.
        let (mut pods, port) =
            bind_same_port(&["127.0.0.1", "127.0.0.2", "127.0.0.3", "::1"]).await;
        let dir = tempfile::tempdir().unwrap();
        let hosts = dir.path().join("hosts");
        let write_hosts = |ips: &[&str]| {
            let text: String = ips.iter().map(|ip| format!("{ip} vllm-pods\n")).collect();
            std::fs::write(&hosts, format!("127.0.0.1 localhost\n{text}")).unwrap();
        };
        let source = TargetSource::Dns {
            host: "vllm-pods".into(),
            port,
            path: "/metrics".into(),
        };
        let mut discovery =
            Discovery::with_resolver(source, Arc::new(HostsFileResolver::new(&hosts)));
        let scraper = Scraper::new(settings(2000, MIB));
        let url = |ip: &str| format!("http://{ip}:{port}/metrics");

        write_hosts(&["::1", "127.0.0.3", "127.0.0.1", "127.0.0.2", "127.0.0.1"]);
        let urls = discovery.refresh().await.unwrap().to_vec();
        assert_eq!(
            urls,
            vec![
                url("127.0.0.1"),
                url("127.0.0.2"),
                url("127.0.0.3"),
                url("[::1]")
            ]
        );
        let out = scraper.scrape_all(&urls).await;
        for (o, pod) in out.iter().zip(["p1", "p2", "p3", "p4"]) {
            assert_healthy(o, &o.url, pod);
        }

        // Pod 2 goes away: gone from the name, and its server stops.
        write_hosts(&["127.0.0.3", "127.0.0.1"]);
        drop(pods.remove(1));
        let urls = discovery.refresh().await.unwrap().to_vec();
        assert_eq!(urls, vec![url("127.0.0.1"), url("127.0.0.3")]);
        let out = scraper.scrape_all(&urls).await;
        assert_healthy(&out[0], &url("127.0.0.1"), "p1");
        assert_healthy(&out[1], &url("127.0.0.3"), "p3");

        // The name vanishes: an error, and the previous list stays in use.
        write_hosts(&[]);
        let e = discovery.refresh().await.unwrap_err();
        assert_eq!(e.host, "vllm-pods");
        assert!(e.to_string().contains("dns lookup failed"), "{e}");
        assert_eq!(discovery.targets(), &urls[..]);
        let out = scraper.scrape_all(discovery.targets()).await;
        assert_healthy(&out[0], &url("127.0.0.1"), "p1");
        assert_healthy(&out[1], &url("127.0.0.3"), "p3");

        // It comes back with pod 2 alone (its server is gone: "unknown", never zero).
        write_hosts(&["127.0.0.2"]);
        let urls = discovery.refresh().await.unwrap().to_vec();
        assert_eq!(urls, vec![url("127.0.0.2")]);
        let out = scraper.scrape_all(&urls).await;
        assert_eq!(out[0].result_label(), "connect_error");
    })
    .await;
}

/// Binds a healthy pod (`p1`, `p2`, ...) on each address, all on the same free port.
async fn bind_same_port(ips: &[&str]) -> (Vec<scrape_support::TestServer>, u16) {
    'attempt: for _ in 0..20 {
        let first = tokio::net::TcpListener::bind((ips[0], 0)).await.unwrap();
        let port = first.local_addr().unwrap().port();
        let mut listeners = vec![first];
        for ip in &ips[1..] {
            match tokio::net::TcpListener::bind((*ip, port)).await {
                Ok(l) => listeners.push(l),
                Err(_) => continue 'attempt,
            }
        }
        let servers = listeners
            .into_iter()
            .enumerate()
            .map(|(i, l)| {
                scrape_support::serve_listener(
                    l,
                    Behavior::Body(healthy_body(&format!("p{}", i + 1))),
                )
            })
            .collect();
        return (servers, port);
    }
    panic!("no port free on all of {ips:?}");
}
