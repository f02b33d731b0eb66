//! `demo --quick` end to end: the real binary starts emulated replicas, the scaler over gRPC and
//! the KEDA/HPA stand-in, plays the story, and must scale out under the load (the proactive
//! policy's step to its forecast's need among the scale-outs) and back in afterwards, with
//! reasons, leaving a summary and a plot.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// Generous: the quick story takes under a minute; a loaded CI machine may be much slower.
const TIMEOUT: Duration = Duration::from_secs(240);

/// The guide's triggers, and `hold` for the proactive policy's step up to its need.
const SCALE_OUT_REASONS: [&str; 7] = [
    "hold",
    "queue_depth",
    "e2e_latency_slo",
    "ttft_slo",
    "itl_slo",
    "kv_cache_critical",
    "preemption_rate",
];

/// When the story's phase `name` starts, seconds (the phases before it, summed).
fn phase_start(summary: &Value, name: &str) -> f64 {
    summary["story"]["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .take_while(|p| p["name"] != name)
        .map(|p| p["duration"].as_f64().unwrap_or(0.0))
        .sum()
}

fn run_with_timeout(mut command: Command) -> (std::process::ExitStatus, String, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the vllm-keda-scaler binary");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap_or_default());
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let mut waited = Duration::ZERO;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the demo") {
            break status;
        }
        if waited >= TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "demo --quick did not finish within {TIMEOUT:?}\nstdout:\n{}\nstderr:\n{}",
                out.join().unwrap_or_default(),
                err.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
        waited += Duration::from_millis(200);
    };
    (
        status,
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    )
}

#[test]
fn quick_demo_scales_out_under_the_burst_and_back_in() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let out = dir.path().join("out");
    let mut command = Command::new(env!("CARGO_BIN_EXE_vllm-keda-scaler"));
    command
        .args(["demo", "--quick", "--no-live", "--out"])
        .arg(&out);
    let (status, stdout, stderr) = run_with_timeout(command);
    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(status.success(), "demo --quick failed: {status}\n{context}");

    // It says what it plays and that the periods are shortened.
    assert!(
        stdout.contains("Azure LLM inference trace 2023"),
        "{context}"
    );
    assert!(stdout.contains("periods are shortened"), "{context}");

    let text = std::fs::read_to_string(out.join("summary.json"))
        .unwrap_or_else(|e| panic!("reading summary.json: {e}\n{context}"));
    let summary: Value = serde_json::from_str(&text).expect("summary.json is JSON");
    let events = summary["scale_events"]
        .as_array()
        .unwrap_or_else(|| panic!("no scale_events in {text}"));
    let peak = summary["peak_target_replicas"].as_u64().expect("peak");
    let final_target = summary["final_target_replicas"].as_u64().expect("final");

    // Scaled out under the burst, for a scale-out reason.
    assert!(peak > 1, "never scaled out: peak target {peak}\n{text}");
    let burst_start = phase_start(&summary, "burst");
    let out_events: Vec<&Value> = events.iter().filter(|e| e["direction"] == "out").collect();
    assert!(!out_events.is_empty(), "no scale-out event\n{text}");
    for e in &out_events {
        let reason = e["reason"].as_str().unwrap_or("");
        assert!(
            SCALE_OUT_REASONS.contains(&reason),
            "scale-out with reason {reason:?}\n{text}"
        );
        assert!(
            !e["explanation"].as_str().unwrap_or("").is_empty(),
            "{text}"
        );
    }
    // The proactive policy (the default, with the demo's capacity and start-up as priors)
    // steps up to its forecast's need, explained with its numbers.
    let proactive: Vec<&&Value> = out_events
        .iter()
        .filter(|e| {
            e["reason"] == "hold"
                && e["explanation"].as_str().is_some_and(|x| {
                    x.contains("one step up to the need") && x.contains("forecast")
                })
        })
        .collect();
    assert!(
        !proactive.is_empty(),
        "no proactive step up to the forecast's need\n{text}"
    );
    // Nothing scales out while the load is idle (it starts rising with the ramp).
    let ramp_start = phase_start(&summary, "ramp");
    let first_out = out_events[0]["t_seconds"].as_f64().expect("time");
    assert!(
        first_out >= ramp_start,
        "scaled out at {first_out} s, before the ramp at {ramp_start} s (burst at {burst_start} s)\n{text}"
    );

    // And back in afterwards, after the calm period, for that reason.
    assert!(
        final_target < peak,
        "did not scale back in: final target {final_target}, peak {peak}\n{text}"
    );
    let last_out = out_events
        .iter()
        .filter_map(|e| e["t_seconds"].as_f64())
        .fold(0.0, f64::max);
    // A step down is either the calm scale-in, after every step out, or (the default policy's
    // `settle`) a withdrawal of replicas still starting once the ready ones cover the demand,
    // which the decision explains; whether the latter happens depends on when the replicas
    // answer.
    let in_events: Vec<&Value> = events.iter().filter(|e| e["direction"] == "in").collect();
    let calm: Vec<&&Value> = in_events
        .iter()
        .filter(|e| e["reason"] == "scale_in_calm")
        .collect();
    assert!(!calm.is_empty(), "no calm scale-in event\n{text}");
    for e in &calm {
        assert!(e["t_seconds"].as_f64().unwrap_or(0.0) > last_out, "{text}");
    }
    for e in in_events.iter().filter(|e| e["reason"] != "scale_in_calm") {
        assert_eq!(e["reason"], "hold", "{text}");
        assert!(
            e["explanation"]
                .as_str()
                .is_some_and(|x| x.contains("still starting are no longer needed")),
            "a step down that is neither the calm scale-in nor a withdrawal\n{text}"
        );
    }

    // Requests really went through the emulated replicas.
    let served = summary["requests"]["ok"].as_u64().expect("requests.ok");
    assert!(served >= 10, "only {served} requests served\n{text}");
    assert!(summary["hpa_syncs"].as_u64().unwrap_or(0) > 5, "{text}");

    // The plot and the timeline exist, and the output names them.
    let svg = std::fs::read_to_string(out.join("demo.svg")).expect("demo.svg");
    assert!(
        svg.starts_with("<svg") && svg.contains("replicas"),
        "bad svg"
    );
    let timeline = std::fs::read_to_string(out.join("timeline.csv")).expect("timeline.csv");
    assert!(timeline.lines().count() > 10, "{timeline}");
    assert!(
        stdout.contains("demo.svg") && stdout.contains("summary.json"),
        "{context}"
    );
}
