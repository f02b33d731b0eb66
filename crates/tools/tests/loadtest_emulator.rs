//! The saturation finder against the emulator with a known capacity: the saturation point is
//! the step where the emulator's predicted capacity is crossed, the recommended threshold and
//! the capacity match within one step, and client TTFT agrees with the emulator's own TTFT
//! histogram within a bucket.

mod loadtest_support;

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use vllm_emulator::{EngineConfig, LoopbackFleet, ReplicaConfig, RequestShape};
use vllm_keda_tools::loadtest::{LoadtestConfig, LoadtestOptions, execute};

/// vLLM V1's TTFT bucket bounds (the emulator renders these).
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];

fn bucket_index(v: f64) -> usize {
    loadtest_support::bucket_index(TTFT_BUCKETS, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saturation_matches_the_emulators_predicted_capacity() {
    // Four sequences per batch and 20 ms per engine step: 16-token prompts with 8 output
    // tokens saturate at about 25 req/s.
    let engine = EngineConfig {
        max_num_seqs: 4,
        step_base_seconds: 0.02,
        per_token_seconds: 1e-5,
        per_context_token_seconds: 0.0,
        ..EngineConfig::default()
    };
    let predicted = engine
        .predicted_saturation(RequestShape {
            prompt_tokens: 16,
            output_tokens: 8,
        })
        .requests_per_second;
    assert!((23.0..27.0).contains(&predicted), "predicted {predicted}");
    let fleet = LoopbackFleet::start(
        1,
        0,
        ReplicaConfig {
            model: "test-model".into(),
            engine,
            seed: 1,
            default_max_tokens: 16,
        },
    )
    .await
    .unwrap();
    let url = fleet.urls()[0].clone();
    let args = LoadtestOptions {
        url,
        model: "test-model".into(),
        rps: vec![10.0, 20.0, 30.0, 40.0],
        step_seconds: 4.0,
        rest_seconds: 1.5,
        warmup: 5,
        shape: "fixed:16:8".into(),
        metrics_urls: fleet.metrics_urls(),
        out: "unused".into(),
        scrape_interval_seconds: 0.25,
        request_timeout_seconds: 30.0,
        scaler_address: "scaler:9090".into(),
        quiet: true,
        ..Default::default()
    };
    let config = LoadtestConfig::try_from(args).unwrap();
    let report = tokio::time::timeout(
        Duration::from_secs(120),
        execute(&config, CancellationToken::new()),
    )
    .await
    .expect("finishes")
    .expect("runs");
    eprintln!(
        "predicted capacity {predicted:.1} req/s\n{}\n{}",
        vllm_keda_tools::loadtest::report::text_table(&report),
        vllm_keda_tools::loadtest::report::recommendation_text(&report)
    );
    let v = &report.verdict;
    let first_past = [10.0, 20.0, 30.0, 40.0]
        .into_iter()
        .find(|r| *r > predicted)
        .unwrap();
    assert_eq!(v.saturation_rps, Some(first_past), "{:?}", v.steps);

    // Capacity within one step (10 req/s) of the prediction; the peak completion rate near it.
    let c = v.capacity_rps_per_replica.unwrap();
    assert!((predicted - c).abs() <= 10.0, "capacity {c} vs {predicted}");
    let peak = v.peak_ok_rps_per_replica.unwrap();
    assert!(
        (peak - predicted).abs() / predicted < 0.25,
        "peak {peak} vs {predicted}"
    );

    // The threshold is the queue depth seen just before saturation (floored), and the queue in
    // the saturated step went past it.
    let healthy = report.steps[v.last_healthy_step.unwrap()]
        .server
        .clone()
        .unwrap();
    let saturated = report.steps[v.saturation_step.unwrap()]
        .server
        .clone()
        .unwrap();
    let n = v.queue_depth_per_replica.unwrap();
    assert_eq!(n, (healthy.queue.max.unwrap().ceil() as u32).max(3));
    assert!(saturated.queue.max.unwrap() > f64::from(n), "{saturated:?}");
    assert!(saturated.running_max.unwrap() <= 4.0);

    // Client TTFT against the emulator's TTFT histogram, in the calm first step.
    let calm = &report.steps[0];
    let client = calm.ttft.p50.unwrap();
    let server = calm
        .server
        .as_ref()
        .unwrap()
        .ttft
        .p50
        .expect("emulator TTFT");
    let (ci, si) = (bucket_index(client), bucket_index(server));
    assert!(
        ci.abs_diff(si) <= 1,
        "client TTFT p50 {client} (bucket {ci}) vs emulator {server} (bucket {si})"
    );
    assert!(report.steps.iter().all(|s| s.errors == 0));
    fleet.shutdown().await;
}
