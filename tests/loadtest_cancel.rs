//! Ctrl-C (a cancelled token) mid-step stops promptly and keeps what was measured.

mod loadtest_support;

use std::time::Duration;

use loadtest_support::{SlotConfig, SlotServer};
use tokio_util::sync::CancellationToken;
use vllm_keda_scaler::loadtest::shape::Arrivals;
use vllm_keda_scaler::loadtest::{LoadtestArgs, LoadtestConfig, execute};

fn args(url: &str, rps: f64, seconds: f64) -> LoadtestArgs {
    LoadtestArgs {
        url: url.to_string(),
        model: "test-model".into(),
        rps: vec![rps],
        rps_range: None,
        step_seconds: seconds,
        rest_seconds: 2.0,
        warmup: 20,
        shape: "fixed:8:2".into(),
        arrivals: Arrivals::Uniform,
        metrics_urls: Vec::new(),
        no_metrics: true,
        replicas: None,
        out: "unused".into(),
        scrape_interval_seconds: 1.0,
        request_timeout_seconds: 30.0,
        max_in_flight: 20_000,
        queue_tolerance: 1.0,
        latency_bend: 2.0,
        min_queue_depth: 3,
        seed: 1,
        scaler_address: "scaler:9090".into(),
        quiet: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_mid_step_keeps_what_was_measured() {
    let server = SlotServer::start(SlotConfig {
        slots: 1000,
        prefill: Duration::from_millis(5),
        itl: Duration::from_millis(5),
    })
    .await;
    let mut a = args(&server.url(), 50.0, 10.0);
    a.rps = vec![50.0, 100.0];
    a.no_metrics = false;
    a.scrape_interval_seconds = 0.2;
    let config = LoadtestConfig::try_from(a).unwrap();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        trigger.cancel();
    });
    let report = tokio::time::timeout(Duration::from_secs(60), execute(&config, cancel))
        .await
        .expect("stops promptly")
        .expect("runs");
    assert!(report.interrupted);
    assert_eq!(report.steps.len(), 1, "the second step never started");
    let step = &report.steps[0];
    assert!(step.partial);
    assert!(step.duration_seconds < 10.0);
    assert!(step.sent > 0 && step.ok > 0);
    assert!(
        step.server.is_some(),
        "scrapes before the interruption are kept"
    );
    let dir = tempfile::tempdir().unwrap();
    vllm_keda_scaler::loadtest::report::write_reports(&report, dir.path()).unwrap();
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(
        md.contains("(partial)") && md.contains("interrupted"),
        "{md}"
    );
}
