//! The demo's Deployment stand-in: replicas join the hosts-file Service only once ready, leave
//! it at once when removed, and drain their in-flight requests before they stop.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;
use vllm_emulator::EngineConfig;
use vllm_keda_tools::demo::fleet::{DemoFleet, FleetOptions, SERVICE_NAME, slot_ip};

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), future)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

fn hosts(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    within(what, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_join_when_ready_and_drain_when_removed() {
    let dir = tempfile::tempdir().unwrap();
    let hosts_file = dir.path().join("hosts");
    let port = vllm_keda_tools::demo::fleet::pick_port().await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let fleet = DemoFleet::new(
        FleetOptions {
            port,
            hosts_file: hosts_file.clone(),
            startup_delay: Duration::from_millis(500),
            drain_timeout: Duration::from_secs(10),
            engine: EngineConfig::default(),
            model: "m".into(),
        },
        tx,
    );
    within("first replica", fleet.start_ready(1)).await.unwrap();
    assert_eq!(
        hosts(&hosts_file),
        vec![format!("{} {SERVICE_NAME}", slot_ip(0))]
    );
    let http = reqwest::Client::new();
    let metrics = |slot: u32| format!("http://{}:{port}/metrics", slot_ip(slot));
    let body = within("scrape", http.get(metrics(0)).send()).await.unwrap();
    assert!(body.status().is_success());

    // Scale to 3: two replicas start, invisible until their start-up delay has passed.
    fleet.set_replicas(3);
    let counts = fleet.counts();
    assert_eq!((counts.spec, counts.starting, counts.ready), (3, 2, 1));
    assert_eq!(
        hosts(&hosts_file).len(),
        1,
        "a starting replica is not in the Service"
    );
    wait_until("two more ready", || fleet.counts().ready == 3).await;
    assert_eq!(hosts(&hosts_file).len(), 3);
    assert_eq!(fleet.ready_endpoints().len(), 3);
    for slot in 0..3 {
        let answer = within("scrape", http.get(metrics(slot)).send())
            .await
            .unwrap();
        assert!(answer.status().is_success(), "replica {slot}");
    }

    // A request in flight on the newest replica keeps it draining after it leaves the Service.
    let newest = fleet
        .ready_endpoints()
        .into_iter()
        .find(|e| e.base_url.contains(&slot_ip(2).to_string()))
        .expect("the newest replica");
    newest.in_flight.fetch_add(1, Ordering::Relaxed);
    fleet.set_replicas(2);
    let counts = fleet.counts();
    assert_eq!((counts.ready, counts.draining), (2, 1));
    let listed = hosts(&hosts_file);
    assert_eq!(listed.len(), 2);
    assert!(
        !listed
            .iter()
            .any(|l| l.starts_with(&format!("{} ", slot_ip(2)))),
        "the removed replica left the Service: {listed:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fleet.counts().draining, 1, "still draining its request");
    assert!(
        within("scrape", http.get(metrics(2)).send()).await.is_ok(),
        "a draining replica still serves"
    );
    newest.in_flight.fetch_sub(1, Ordering::Relaxed);
    wait_until("drained", || fleet.counts().draining == 0).await;
    assert!(
        http.get(metrics(2)).send().await.is_err(),
        "a stopped replica refuses connections"
    );

    // Removing a replica that is still starting cancels it.
    fleet.set_replicas(3);
    fleet.set_replicas(2);
    let counts = fleet.counts();
    assert_eq!((counts.starting, counts.ready), (0, 2));

    let mut log = Vec::new();
    while let Ok(e) = rx.try_recv() {
        log.push(e.what);
    }
    let log = log.join("\n");
    assert!(log.contains("ready: joins the Service"), "{log}");
    assert!(log.contains("drained and stopped"), "{log}");
    assert!(log.contains("removed before it was ready"), "{log}");
    within("shutdown", fleet.shutdown()).await;
}
