//! The scraper's client behaviour against real loopback servers: results in input order
//! whatever order they finish in, pooled keep-alive connections, real vLLM fixture bodies
//! plain and gzip-compressed.

mod scrape_support;

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use scrape_support::{Behavior, serve};
use vllm_keda_service::scrape::{ScrapeSettings, Scraper};

async fn within<T>(seconds: u64, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(seconds), f)
        .await
        .expect("test timed out")
}

fn fixture(name: &str) -> Bytes {
    let path = format!("{}/../../data/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("reading {path}: {e}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_come_back_in_input_order() {
    within(30, async {
        // The first targets answer last.
        let mut servers = Vec::new();
        for i in 0..12u64 {
            let delay = Duration::from_millis((12 - i) * 25);
            let body = Bytes::from(format!("vllm:num_requests_waiting {i}\n"));
            servers.push(serve(Behavior::Delayed(delay, body)).await);
        }
        let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
        let out = Scraper::new(ScrapeSettings::loopback())
            .scrape_all(&urls)
            .await;
        assert_eq!(out.len(), urls.len());
        for (i, (o, url)) in out.iter().zip(&urls).enumerate() {
            assert_eq!(&o.url, url);
            assert_eq!(o.result_label(), "ok");
            assert_eq!(
                o.result.as_deref().unwrap(),
                format!("vllm:num_requests_waiting {i}\n")
            );
        }
        // The first target waited longest.
        assert!(out[0].duration > out[11].duration);
    })
    .await;
}

#[tokio::test]
async fn connections_are_pooled_across_scrapes() {
    within(10, async {
        let body = fixture("vllm-v1-idle.prom");
        let server = serve(Behavior::KeepAlive(body.clone())).await;
        let scraper = Scraper::new(ScrapeSettings::loopback());
        for _ in 0..3 {
            let got = scraper.scrape(&server.url()).await.unwrap();
            assert_eq!(got.as_bytes(), &body[..]);
        }
        // A clone shares the pool.
        let clone = scraper.clone();
        clone.scrape(&server.url()).await.unwrap();
        assert_eq!(server.requests.lock().unwrap().len(), 4);
        assert_eq!(
            server.connections.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "four sequential scrapes reuse one connection"
        );
    })
    .await;
}

#[tokio::test]
async fn closing_connections_opens_one_per_scrape_and_asks_the_target_to_close() {
    within(10, async {
        let body = fixture("vllm-v1-loaded.prom");
        // The server would keep the connection open: the scraper is the one that does not.
        let server = serve(Behavior::KeepAlive(body.clone())).await;
        let scraper = Scraper::new(ScrapeSettings {
            close_connections: true,
            ..ScrapeSettings::loopback()
        });
        for _ in 0..3 {
            let got = scraper.scrape(&server.url()).await.unwrap();
            assert_eq!(got.as_bytes(), &body[..]);
        }
        assert_eq!(
            server.connections.load(std::sync::atomic::Ordering::SeqCst),
            3,
            "three scrapes, three connections"
        );
        let heads = server.requests.lock().unwrap().clone();
        assert_eq!(heads.len(), 3);
        for head in &heads {
            assert!(
                head.to_ascii_lowercase()
                    .contains("\r\nconnection: close\r\n"),
                "{head}"
            );
        }
        // The default keeps the connection and does not ask for a close.
        let kept = serve(Behavior::KeepAlive(body.clone())).await;
        Scraper::new(ScrapeSettings::loopback())
            .scrape(&kept.url())
            .await
            .unwrap();
        let head = kept.requests.lock().unwrap()[0].to_ascii_lowercase();
        assert!(!head.contains("connection: close"), "{head}");
    })
    .await;
}

#[tokio::test]
async fn fixture_bodies_arrive_intact_plain_and_gzipped() {
    within(20, async {
        let scraper = Scraper::new(ScrapeSettings::loopback());
        for name in [
            "vllm-v0.prom",
            "vllm-v1-idle.prom",
            "vllm-v1-loaded.prom",
            "dcgm.prom",
        ] {
            let body = fixture(name);
            let plain = serve(Behavior::Body(body.clone())).await;
            let gz = serve(Behavior::GzipBody(body.clone())).await;
            let out = scraper.scrape_all(&[plain.url(), gz.url()]).await;
            for o in &out {
                assert_eq!(
                    o.result.as_deref().map(str::as_bytes),
                    Ok(&body[..]),
                    "{name} from {}",
                    o.url
                );
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_targets_in_one_call() {
    within(60, async {
        let body = fixture("vllm-v1-loaded.prom");
        let mut servers = Vec::new();
        for _ in 0..1000 {
            servers.push(serve(Behavior::Body(body.clone())).await);
        }
        let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
        let scraper = Scraper::new(ScrapeSettings {
            timeout: Duration::from_secs(30),
            max_targets: 1000,
            ..ScrapeSettings::loopback()
        });
        let start = tokio::time::Instant::now();
        let out = scraper.scrape_all(&urls).await;
        println!(
            "1000 targets of {} bytes: {:?} (debug build, servers in-process)",
            body.len(),
            start.elapsed()
        );
        assert_eq!(out.len(), 1000);
        for (o, url) in out.iter().zip(&urls) {
            assert_eq!(&o.url, url);
            assert_eq!(o.result.as_deref().map(str::len), Ok(body.len()), "{url}");
        }
    })
    .await;
}
