//! End to end through discovery-free scraping, parsing and signals: two healthy vLLM pods
//! scraped twice beside six broken ones give exactly the fleet signals of the two healthy
//! pods alone. A broken pod is "unknown", never "zero load", and never slows the others past
//! its own timeout.

mod scrape_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use scrape_support::{Behavior, serve};
use vllm_keda_core::exposition;
use vllm_keda_core::signals::{FleetWindow, PodSnapshot, SignalSettings};
use vllm_keda_service::scrape::{ScrapeError, ScrapeOutcome, ScrapeSettings, Scraper};

fn fixture(name: &str) -> Bytes {
    let path = format!("{}/../../data/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("reading {path}: {e}")))
}

/// What the control loop does with one outcome: parse, or label the failure.
fn snapshot(outcome: &ScrapeOutcome) -> Result<PodSnapshot, ScrapeError> {
    let body = outcome.result.as_ref().map_err(Clone::clone)?;
    let parsed =
        exposition::parse(body).map_err(|e| ScrapeError::parse(outcome.url.as_str(), e))?;
    PodSnapshot::from_exposition(&parsed, None)
        .map_err(|e| ScrapeError::parse(outcome.url.as_str(), e))
}

fn snapshot_of(body: &Bytes) -> PodSnapshot {
    let text = std::str::from_utf8(body).unwrap();
    PodSnapshot::from_exposition(&exposition::parse(text).unwrap(), None).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_pods_leave_the_healthy_fleet_signals_exact() {
    tokio::time::timeout(Duration::from_secs(60), run())
        .await
        .expect("test timed out");
}

async fn run() {
    let (idle, loaded) = (fixture("vllm-v1-idle.prom"), fixture("vllm-v1-loaded.prom"));
    let body_a = Arc::new(Mutex::new(idle.clone()));
    let body_b = Arc::new(Mutex::new(idle.clone()));
    let a = serve(Behavior::Shared(body_a.clone())).await;
    let b = serve(Behavior::Shared(body_b.clone())).await;
    let broken = [
        ("timeout", serve(Behavior::Hang).await),
        ("http_status", serve(Behavior::Status(500)).await),
        (
            "connect_error",
            serve(Behavior::ResetMidBody {
                declared: 100_000,
                sent: 1000,
            })
            .await,
        ),
        (
            "parse_error",
            serve(Behavior::Body(Bytes::from_static(
                b"vllm:num_requests_waiting{engine=\"0\" 3\n",
            )))
            .await,
        ),
        (
            "too_large",
            serve(Behavior::GzipBomb { mebibytes: 64 }).await,
        ),
        (
            "too_large",
            serve(Behavior::Chunked { total: u64::MAX }).await,
        ),
    ];
    let mut urls = vec![a.url()];
    urls.extend(broken.iter().map(|(_, s)| s.url()));
    urls.push(b.url());

    let scraper = Scraper::new(ScrapeSettings {
        timeout: Duration::from_millis(1500),
        max_body_bytes: 4 << 20,
        ..ScrapeSettings::loopback()
    });
    let mut window = FleetWindow::new(SignalSettings::default());
    let mut reference = FleetWindow::new(SignalSettings::default());

    // Two cycles 15 s apart in the signals' own time; the healthy pods go from idle to loaded.
    for (cycle, now) in [Duration::ZERO, Duration::from_secs(15)]
        .into_iter()
        .enumerate()
    {
        if cycle == 1 {
            *body_a.lock().unwrap() = loaded.clone();
            *body_b.lock().unwrap() = loaded.clone();
        }
        let served = if cycle == 0 { &idle } else { &loaded };
        let out = scraper.scrape_all(&urls).await;
        assert_eq!(out.len(), urls.len());
        for (outcome, url) in out.iter().zip(&urls) {
            assert_eq!(&outcome.url, url);
            let result = snapshot(outcome);
            window.record(now, url, result.as_ref().ok().cloned());
            let label = match &result {
                Ok(_) => "ok",
                Err(e) => e.result_label(),
            };
            if url == &a.url() || url == &b.url() {
                assert_eq!(label, "ok", "{:?}", outcome.result);
                reference.record(now, url, Some(snapshot_of(served)));
            } else {
                let want = broken.iter().find(|(_, s)| &s.url() == url).unwrap().0;
                assert_eq!(label, want, "{url}: {:?}", outcome.result);
            }
        }
    }

    let now = Duration::from_secs(15);
    let got = window.compute(now);
    let want = reference.compute(now);
    assert_eq!(got.pods_total, 8);
    assert_eq!(got.pods_healthy, 2);
    assert_eq!(want.pods_healthy, 2);
    assert_eq!(
        got.fleet, want.fleet,
        "fleet signals equal the healthy pods' alone"
    );
    // The loaded fixture's queue, twice: broken pods add nothing (not even zeros to a mean).
    let one = snapshot_of(&loaded);
    let mut single = FleetWindow::new(SignalSettings::default());
    single.record(now, "p", Some(one));
    assert_eq!(
        got.fleet.queue_depth,
        2.0 * single.compute(now).fleet.queue_depth
    );
    assert!(got.fleet.queue_depth > 0.0);
    assert_eq!(
        got.fleet.kv_cache_usage.mean,
        single.compute(now).fleet.kv_cache_usage.mean
    );
    for pod in &got.pods {
        let healthy = pod.pod == a.url() || pod.pod == b.url();
        assert_eq!(pod.healthy, healthy, "{}", pod.pod);
    }
}
