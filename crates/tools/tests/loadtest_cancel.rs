//! Ctrl-C (a cancelled token) mid-step stops promptly and keeps what was measured.

mod loadtest_support;

use std::time::Duration;

use loadtest_support::{SlotConfig, SlotServer, fixed_args};
use tokio_util::sync::CancellationToken;
use vllm_keda_tools::loadtest::{LoadtestConfig, LoadtestOptions, execute};

fn args(url: &str, rps: f64, seconds: f64) -> LoadtestOptions {
    fixed_args(url, rps, seconds, 2.0)
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
    vllm_keda_tools::loadtest::report::write_reports(&report, dir.path()).unwrap();
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(
        md.contains("(partial)") && md.contains("interrupted"),
        "{md}"
    );
}
