//! `warmup` through the real binary: success writes the ready file and exits 0; a server that
//! never comes up gives a clear non-zero exit; bad flags are rejected with the fix.

#[path = "../crates/tools/tests/loadtest_support/mod.rs"]
mod loadtest_support;

use std::process::Command;
use std::time::Duration;

use loadtest_support::{SlotConfig, SlotServer};

const BIN: &str = env!("CARGO_BIN_EXE_vllm-keda-scaler");

async fn run(args: Vec<String>) -> std::process::Output {
    let out = tokio::task::spawn_blocking(move || Command::new(BIN).args(&args).output().unwrap());
    tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("warmup finishes")
        .unwrap()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warmup_sends_sequential_requests_then_writes_the_ready_file() {
    let server = SlotServer::start(SlotConfig {
        slots: 1,
        prefill: Duration::from_millis(2),
        itl: Duration::from_millis(1),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("sub/ready");
    let out = run(strings(&[
        "warmup",
        "--url",
        &server.url(),
        "--model",
        "test-model",
        "--requests",
        "12",
        "--ready-file",
        ready.to_str().unwrap(),
        "--timeout-seconds",
        "30",
    ]))
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    assert_eq!(server.completions(), 12);
    let body = std::fs::read_to_string(&ready).expect("ready file written");
    assert!(
        body.starts_with("warmed up: 12 requests, 0 failed"),
        "{body}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("warmed up: 12 requests"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_exits_non_zero_with_a_message_and_no_ready_file() {
    // A port that was just free: nothing listens on it.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let out = run(strings(&[
        "warmup",
        "--url",
        &format!("http://127.0.0.1:{port}"),
        "--model",
        "m",
        "--ready-file",
        ready.to_str().unwrap(),
        "--timeout-seconds",
        "1.5",
    ]))
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("did not become healthy within"), "{stderr}");
    assert!(stderr.contains("connection refused"), "{stderr}");
    assert!(stderr.contains("--timeout-seconds"), "{stderr}");
    assert!(!ready.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_flags_are_rejected_with_the_fix() {
    let out = run(strings(&[
        "warmup",
        "--url",
        "localhost:8000",
        "--model",
        "m",
    ]))
    .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("expected an http:// URL"), "{stderr}");
    let out = run(strings(&[
        "loadtest",
        "--url",
        "http://127.0.0.1:1",
        "--model",
        "m",
        "--rps-range",
        "70:10:10",
    ]))
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("FROM:TO:STEP"),
        "{stderr}"
    );
    let out = run(strings(&[
        "loadtest",
        "--url",
        "http://127.0.0.1:1",
        "--model",
        "m",
        "--shape",
        "fixed:0:4",
    ]))
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("--shape"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warmup_waits_for_a_server_that_comes_up_late() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let warmup = tokio::spawn(run(strings(&[
        "warmup",
        "--url",
        &format!("http://127.0.0.1:{port}"),
        "--model",
        "m",
        "--requests",
        "3",
        "--ready-file",
        ready.to_str().unwrap(),
        "--timeout-seconds",
        "40",
    ])));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!ready.exists(), "no ready file before the server is up");
    let server = SlotServer::start_on(
        &format!("127.0.0.1:{port}"),
        SlotConfig {
            slots: 1,
            prefill: Duration::from_millis(1),
            itl: Duration::from_millis(1),
        },
    )
    .await;
    let out = warmup.await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("waiting for"), "{stderr}");
    assert_eq!(server.completions(), 3);
    assert!(ready.exists());
}
