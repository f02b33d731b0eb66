//! The live emulator and the simulator run the same engine code: the same short request
//! stream, replayed over real HTTP against one emulated replica in real time and through the
//! simulator in virtual time, gives the same server-side latencies.

use std::time::Duration;

use vllm_emulator::{LoopbackFleet, ReplicaConfig};
use vllm_keda_core::exposition;
use vllm_keda_tools::simulate::controllers::Static;
use vllm_keda_tools::simulate::fleet::{self, FleetSettings};
use vllm_keda_tools::trace::TraceRequest;

/// 48 requests, one every 250 ms, of 512 prompt and 96 output tokens: well below one
/// replica's capacity, so each request's latency is the engine's, not the queue's.
fn requests() -> Vec<TraceRequest> {
    (0..48)
        .map(|i| TraceRequest {
            arrival: Duration::from_millis(250 * i),
            prompt_tokens: 512,
            output_tokens: 96,
        })
        .collect()
}

fn sum_and_count(body: &str, family: &str) -> (f64, f64) {
    let parsed = exposition::parse(body).expect("the emulator's body parses");
    let value = |name: String| {
        parsed
            .samples
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.value)
            .sum::<f64>()
    };
    (
        value(format!("{family}_sum")),
        value(format!("{family}_count")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_emulator_and_simulator_agree() {
    let requests = requests();
    // Virtual time.
    let settings = FleetSettings::default();
    let run = fleet::run(&requests, &settings, 1, &mut Static);
    let simulated: Vec<f64> = run
        .outcomes
        .iter()
        .map(|o| o.e2e_seconds().expect("every request finishes"))
        .collect();
    let simulated_mean = simulated.iter().sum::<f64>() / simulated.len() as f64;

    // Real time, over HTTP.
    let fleet = LoopbackFleet::start(1, 0, ReplicaConfig::default())
        .await
        .unwrap();
    let url = fleet.urls()[0].clone();
    let client = reqwest::Client::new();
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for r in &requests {
        tokio::time::sleep_until(start + r.arrival).await;
        let client = client.clone();
        let url = format!("{url}/v1/completions");
        let body = serde_json::json!({
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "prompt": "x",
            "prompt_tokens": r.prompt_tokens,
            "max_tokens": r.output_tokens,
        });
        tasks.push(tokio::spawn(async move {
            let response = client
                .post(url)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            assert!(response.status().is_success(), "{}", response.status());
        }));
    }
    let all = async {
        for t in tasks {
            t.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("live requests finish");
    let body = reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    fleet.shutdown().await;

    let (sum, count) = sum_and_count(&body, "vllm:e2e_request_latency_seconds");
    assert_eq!(count, requests.len() as f64);
    let live_mean = sum / count;
    // Same engine code: the only difference is when requests really arrived (scheduler
    // jitter on a shared machine), so the means agree closely.
    let relative = (live_mean - simulated_mean).abs() / simulated_mean;
    assert!(
        relative < 0.15,
        "live mean e2e {live_mean:.4} s vs simulated {simulated_mean:.4} s"
    );
    let (prompt_sum, _) = sum_and_count(&body, "vllm:request_prompt_tokens");
    assert_eq!(prompt_sum, 512.0 * requests.len() as f64);
}
