//! The `emulate` command as users run it: the real binary serves every replica it prints, stops
//! cleanly on SIGTERM, and rejects impossible engine flags with a message naming the fix.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_vllm-keda-scaler");

#[test]
fn emulate_serves_the_printed_replicas_and_stops_on_sigterm() {
    let mut child = Command::new(BIN)
        .args([
            "emulate",
            "--replicas",
            "3",
            "--base-port",
            "0",
            "--metrics-shape",
            "v0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    stdout.read_line(&mut banner).unwrap();
    let urls: Vec<String> = banner
        .split_whitespace()
        .filter(|w| w.starts_with("http://"))
        .map(str::to_string)
        .collect();
    assert_eq!(urls.len(), 3, "banner: {banner}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        for url in &urls {
            let body = c
                .get(format!("{url}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            assert!(
                body.contains("vllm:gpu_cache_usage_perc"),
                "v0 names expected"
            );
        }
    });
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    for attempt in 0.. {
        if let Some(code) = child.try_wait().unwrap() {
            assert!(code.success(), "exit status {code}");
            break;
        }
        assert!(attempt < 500, "emulate did not stop within 10 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn impossible_engine_flags_are_rejected_with_the_fix() {
    let out = Command::new(BIN)
        .args(["emulate", "--num-gpu-blocks", "100", "--base-port", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("max-model-len") && err.contains("--num-gpu-blocks"),
        "{err}"
    );
    let out = Command::new(BIN)
        .args(["emulate", "--slowdown", "0", "--base-port", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("slowdown"));
}
