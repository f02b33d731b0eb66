//! `vllm-keda-scaler check` run as the real binary: saved bodies and live endpoints.

use std::process::{Command, Output};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_vllm-keda-scaler");

fn fixture(name: &str) -> String {
    format!("{}/data/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn json_of(output: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "{e}\nstdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn within(value: &serde_json::Value, expected: f64, relative: f64) -> bool {
    value
        .as_f64()
        .is_some_and(|v| ((v - expected) / expected).abs() <= relative)
}

#[test]
fn files_mode_reports_the_reference_signals_as_json() {
    let output = Command::new(BIN)
        .args(["check", "--files"])
        .arg(fixture("vllm-v1-idle.prom"))
        .arg(fixture("vllm-v1-loaded.prom"))
        .args(["--elapsed", "660", "--json"])
        .output()
        .expect("run the binary");
    assert!(output.status.success(), "{output:?}");
    let report = json_of(&output);
    let fleet = &report["fleet"];
    assert_eq!(fleet["queue_depth"], 14.0);
    assert_eq!(fleet["running"], 52.0);
    // README reference values (PromQL over the loaded-minus-idle deltas).
    assert!(
        within(&fleet["e2e_latency_seconds"]["p95"], 38.3, 0.01),
        "{fleet}"
    );
    assert!(within(&fleet["ttft_seconds"]["p95"], 6.95, 0.01), "{fleet}");
    assert!(within(&fleet["itl_seconds"]["p95"], 0.074, 0.01), "{fleet}");
    for key in ["p50", "p99"] {
        assert!(fleet["e2e_latency_seconds"][key].is_f64());
    }
    assert_eq!(fleet["kv_cache_usage"]["max"], 0.9003);
    assert!(fleet["kv_cache_usage"]["mean"].is_f64());
    assert!(within(&fleet["preemptions_per_second"], 47.0 / 660.0, 1e-9));
    assert!(fleet["generation_tokens_per_second"].as_f64().unwrap() > 0.0);
    let pods = report["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0]["healthy"], true);
    assert_eq!(pods[0]["generation"], "v1");
    assert_eq!(pods[0]["engines"], 1);
    assert_eq!(pods[0]["gpu_memory_utilization"], 0.9);
    let warnings = report["warnings"].to_string();
    assert!(
        warnings.contains("gpu_memory_utilization 0.9"),
        "{warnings}"
    );
    assert!(warnings.contains("0.85"), "{warnings}");
}

#[test]
fn files_mode_warns_about_v0_buckets_and_the_slo() {
    let output = Command::new(BIN)
        .args(["check", "--files"])
        .arg(fixture("vllm-v0.prom"))
        .arg(fixture("vllm-v0.prom"))
        .args(["--elapsed", "15", "--ttft-slo-seconds", "12", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let report = json_of(&output);
    // Same body twice: nothing finished, quantiles are undefined (null), not zero.
    assert!(report["fleet"]["ttft_seconds"]["p95"].is_null());
    assert_eq!(report["fleet"]["queue_depth"], 9.0);
    assert_eq!(report["pods"][0]["generation"], "v0");
    let warnings = report["warnings"].to_string();
    assert!(
        warnings.contains("TTFT buckets stop at 10 s, below the 12 s SLO"),
        "{warnings}"
    );
    assert!(
        warnings.contains("e2e latency buckets stop at 60 s"),
        "{warnings}"
    );
}

#[test]
fn table_output_and_bad_input_errors() {
    let output = Command::new(BIN)
        .args(["check", "--files"])
        .arg(fixture("vllm-v1-idle.prom"))
        .arg(fixture("vllm-v1-loaded.prom"))
        .args(["--elapsed", "660"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("queue depth            14"), "{table}");
    assert!(table.contains("warnings:"), "{table}");

    let missing = Command::new(BIN)
        .args(["check", "--files"])
        .arg(fixture("vllm-v1-idle.prom"))
        .arg(fixture("vllm-v1-loaded.prom"))
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("--files needs --elapsed SECONDS"),
        "{stderr}"
    );

    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.prom");
    std::fs::write(&garbage, "this is { not metrics\n").unwrap();
    let bad = Command::new(BIN)
        .args(["check", "--json", "--elapsed", "10", "--files"])
        .arg(&garbage)
        .arg(&garbage)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let report = json_of(&bad);
    assert_eq!(report["pods_healthy"], 0);
    assert_eq!(report["pods"][0]["healthy"], false);
    assert!(
        report["warnings"][0]
            .as_str()
            .unwrap()
            .contains("not a metrics body: line 1")
    );
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no target gave a usable vLLM body"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_mode_scrapes_twice_and_keeps_a_dead_target_unknown() {
    let dcgm = std::fs::read_to_string(fixture("dcgm.prom")).unwrap();
    let idle = std::fs::read_to_string(fixture("vllm-v1-idle.prom")).unwrap();
    let loaded = std::fs::read_to_string(fixture("vllm-v1-loaded.prom")).unwrap();
    let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = served.clone();
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let body = if n == 0 { idle.clone() } else { loaded.clone() };
                async move { body }
            }),
        )
        .route("/dcgm", axum::routing::get(move || async move { dcgm }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    // A port nobody listens on: the target is unknown, never zero load.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);

    let endpoints = format!("http://{addr}/metrics,{dead_addr}");
    let dcgm_endpoints = format!("http://{addr}/dcgm");
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(BIN)
            .args([
                "check",
                "--json",
                "--interval",
                "0.5",
                "--endpoints",
                &endpoints,
                "--dcgm-endpoints",
                &dcgm_endpoints,
            ])
            .output(),
    )
    .await
    .expect("check finished in time")
    .unwrap();
    assert!(output.status.success(), "{output:?}");
    let report = json_of(&output);
    assert_eq!(report["pods_total"], 2);
    assert_eq!(report["pods_healthy"], 1);
    assert_eq!(report["fleet"]["queue_depth"], 14.0);
    assert_eq!(report["fleet"]["running"], 52.0);
    assert!(within(
        &report["fleet"]["e2e_latency_seconds"]["p95"],
        38.3,
        0.01
    ));
    assert!(report["elapsed_seconds"].as_f64().unwrap() >= 0.5);
    let pods = report["pods"].as_array().unwrap();
    let dead_pod = pods.iter().find(|p| p["healthy"] == false).unwrap();
    assert!(
        dead_pod["pod"]
            .as_str()
            .unwrap()
            .contains(&dead_addr.port().to_string())
    );
    assert!(!dead_pod["errors"].as_array().unwrap().is_empty());
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 2);
    // IP targets cannot be matched to the `pod` labels: every GPU of the exporter counts.
    assert_eq!(report["gpu"]["gpus"], 2);
    assert!(within(
        &report["gpu"]["power_watts_total"],
        612.347 + 241.905,
        1e-9
    ));
    assert_eq!(report["gpu"]["utilization"]["max"], 0.97);
}

#[test]
fn a_non_vllm_body_is_flagged_and_unknown() {
    let output = Command::new(BIN)
        .args(["check", "--json", "--elapsed", "10", "--files"])
        .arg(fixture("dcgm.prom"))
        .arg(fixture("dcgm.prom"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let report = json_of(&output);
    assert_eq!(report["pods_healthy"], 0);
    assert!(
        report["warnings"]
            .to_string()
            .contains("no vLLM series (no sample name starts with `vllm:`)")
    );
}
