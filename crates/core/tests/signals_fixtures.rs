//! Signals from the shared fixtures: real-shaped bodies rendered by `prometheus_client` from
//! vLLM's own metric definitions, parsed by our parser.

use std::time::Duration;

use vllm_keda_core::exposition;
use vllm_keda_core::signals::{
    FleetWindow, Generation, GpuSnapshot, Latency, PodSnapshot, SignalSettings, SnapshotError,
};

fn fixture(name: &str) -> String {
    let path = format!("{}/../../data/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn snapshot(name: &str, model: Option<&str>) -> PodSnapshot {
    let body = fixture(name);
    let parsed = exposition::parse(&body).unwrap_or_else(|e| panic!("{name}: {e}"));
    PodSnapshot::from_exposition(&parsed, model).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn close(actual: Option<f64>, expected: f64, relative: f64) -> bool {
    actual.is_some_and(|a| ((a - expected) / expected).abs() <= relative)
}

#[test]
fn v1_snapshot_reads_gauges_counters_and_markers() {
    let s = snapshot("vllm-v1-loaded.prom", None);
    assert_eq!(s.waiting, Some(14.0));
    assert_eq!(s.running, Some(52.0));
    assert_eq!(s.kv_cache_usage_max, Some(0.9003));
    assert_eq!(s.preemptions_total, Some(47.0));
    assert_eq!(s.request_success_total.values().sum::<f64>(), 2701.0);
    assert_eq!(s.request_success_total.get("abort"), Some(&33.0));
    assert_eq!(s.info.generation, Generation::V1);
    assert_eq!(s.info.engines, 1);
    assert_eq!(s.info.kv_cache_metric, Some("vllm:kv_cache_usage_perc"));
    assert_eq!(s.info.itl_metric, Some("vllm:inter_token_latency_seconds"));
    assert_eq!(s.info.gpu_memory_utilization(), Some(0.9));
    assert!(s.process_start_time_seconds.is_some());
    assert!(s.created_min_seconds.is_some_and(|c| c > 1.7e9));
    let e2e = s.e2e_latency.as_ref().expect("e2e histogram");
    assert_eq!(e2e.count, 2701.0);
    assert_eq!(e2e.buckets.last().map(|b| b.count), Some(2701.0));
    assert!(e2e.buckets.windows(2).all(|w| w[0].le < w[1].le));
    // `_created` never lands in a histogram: the +Inf bucket equals `_count`.
    let ttft = s.ttft.as_ref().expect("ttft histogram");
    assert_eq!(ttft.top_finite_bound(), Some(2560.0));
    assert_eq!(ttft.buckets.last().map(|b| b.count), Some(ttft.count));
}

#[test]
fn v0_snapshot_uses_old_names() {
    let s = snapshot("vllm-v0.prom", None);
    assert_eq!(s.info.generation, Generation::V0);
    assert_eq!(s.info.engines, 0);
    assert_eq!(s.waiting, Some(9.0));
    assert_eq!(s.running, Some(37.0));
    assert_eq!(s.swapped, Some(0.0));
    assert_eq!(s.kv_cache_usage_max, Some(0.8874));
    assert_eq!(s.info.kv_cache_metric, Some("vllm:gpu_cache_usage_perc"));
    assert_eq!(
        s.info.itl_metric,
        Some("vllm:time_per_output_token_seconds")
    );
    assert_eq!(s.itl.as_ref().map(|h| h.count), Some(238148.0));
    assert_eq!(
        s.ttft.as_ref().and_then(|h| h.top_finite_bound()),
        Some(10.0)
    );
    assert_eq!(s.process_start_time_seconds, None);
    assert_eq!(s.created_min_seconds, None);
}

#[test]
fn model_filter_keeps_only_that_model() {
    let model = "meta-llama/Llama-3.1-8B-Instruct";
    let kept = snapshot("vllm-v1-loaded.prom", Some(model));
    assert_eq!(kept.waiting, Some(14.0));
    // Another model's series are never read as this one's: the body is an error naming the
    // configured model and the model it serves.
    let body = fixture("vllm-v1-loaded.prom");
    let parsed = exposition::parse(&body).unwrap();
    let other = PodSnapshot::from_exposition(&parsed, Some("other-model")).unwrap_err();
    assert_eq!(
        other,
        SnapshotError::ModelNotFound {
            model: "other-model".into(),
            found: vec![model.to_string()],
            found_total: 1,
        }
    );
}

#[test]
fn idle_to_loaded_matches_the_reference_quantiles() {
    let elapsed = Duration::from_secs(660);
    let mut window = FleetWindow::new(SignalSettings {
        latency_window: elapsed,
        preemption_window: elapsed,
        model: None,
        ..SignalSettings::default()
    });
    window.record(
        Duration::ZERO,
        "pod-a",
        Some(snapshot("vllm-v1-idle.prom", None)),
    );
    window.record(
        elapsed,
        "pod-a",
        Some(snapshot("vllm-v1-loaded.prom", None)),
    );
    let signals = window.compute(elapsed);
    let fleet = &signals.fleet;
    assert_eq!((signals.pods_total, signals.pods_healthy), (1, 1));
    assert_eq!(fleet.queue_depth, 14.0);
    assert_eq!(fleet.running, 52.0);
    // Reference values from the fixtures' README (PromQL over the same bucket deltas).
    assert!(
        close(fleet.e2e_latency_seconds.p95, 38.3, 0.01),
        "{fleet:?}"
    );
    assert!(close(fleet.ttft_seconds.p95, 6.95, 0.01), "{fleet:?}");
    assert!(close(fleet.itl_seconds.p95, 0.074, 0.01), "{fleet:?}");
    assert!(close(fleet.queue_time_seconds.p95, 7.84, 0.01), "{fleet:?}");
    // Rates are difference quotients over the 660 s between the scrapes (the idle file has
    // 0 preemptions, whatever its README line says).
    assert!(
        close(fleet.preemptions_per_second, 47.0 / 660.0, 1e-12),
        "{fleet:?}"
    );
    assert!(close(
        fleet.requests_per_second,
        (2701.0 - 1187.0) / 660.0,
        1e-12
    ));
    assert!(fleet.generation_tokens_per_second.is_some_and(|r| r > 0.0));
    assert_eq!(fleet.requests_finished_in_window, 2701.0 - 1187.0);
    assert_eq!(fleet.kv_cache_usage.max, Some(0.9003));
    assert!(fleet.batch_tokens_per_step.is_some_and(|t| t > 1.0));
    // The mean inter-token gap: the `_sum` delta over the `_count` delta.
    let itl_mean = (26_856.075_883_959_63 - 4_326.611_637_986_492) / (728_103.0 - 320_408.0);
    assert!(close(fleet.itl_mean_seconds, itl_mean, 1e-12), "{fleet:?}");
    // Each request's own time per output token, over the 1,514 requests that finished
    // between the scrapes: a P95 inside the histogram's range and above its mean.
    let request_mean = (99.916_038_052_896_5 - 16.034_713_061_275_692) / 1_514.0;
    let p95 = fleet
        .request_tpot_seconds
        .p95
        .expect("a per-request TPOT P95");
    assert!(
        p95 > request_mean && p95 < 1.0,
        "{p95} vs mean {request_mean}"
    );
    // The histogram is kept whole for the engines' count of misses: it holds those 1,514
    // requests, and fewer of them are within 50 ms a token than within 1 s.
    assert_eq!(fleet.observations(Latency::RequestTpot), Some(1_514.0));
    let within = |s| {
        fleet
            .share_within(Latency::RequestTpot, s)
            .expect("a share")
    };
    assert!(within(0.05) < within(1.0), "{fleet:?}");
}

#[test]
fn dcgm_fixture_gives_gpu_signals_matched_to_pods() {
    let body = fixture("dcgm.prom");
    let parsed = exposition::parse(&body).expect("dcgm parses");
    let gpus = GpuSnapshot::from_exposition(&parsed);
    assert_eq!(gpus.gpus.len(), 2);
    let first = &gpus.gpus[0];
    assert_eq!(first.hostname.as_deref(), Some("node-gpu-a17"));
    assert_eq!(first.pod.as_deref(), Some("vllm-llama-8b-6d9f7c5b8-x2kqp"));
    assert_eq!(first.fb_used_mib, Some(74595.0));
    assert_eq!(first.power_watts, Some(612.347));
    assert_eq!(gpus.gpus[1].ecc_sbe_total, Some(3.0));

    let mut window = FleetWindow::new(SignalSettings::default());
    let pod = "http://vllm-llama-8b-6d9f7c5b8-x2kqp.vllm.llm-serving.svc:8000/metrics";
    window.record(
        Duration::ZERO,
        pod,
        Some(snapshot("vllm-v1-idle.prom", None)),
    );
    window.record_gpu(Duration::ZERO, "dcgm", Some(gpus.clone()));
    let mut later = gpus.clone();
    later.gpus[1].ecc_sbe_total = Some(9.0);
    window.record(
        Duration::from_secs(15),
        pod,
        Some(snapshot("vllm-v1-loaded.prom", None)),
    );
    window.record_gpu(Duration::from_secs(15), "dcgm", Some(later));
    let signals = window.compute(Duration::from_secs(15));
    // One GPU belongs to the known pod: only it counts for the fleet.
    let gpu = signals.gpu.expect("gpu signals");
    assert_eq!(gpu.gpus, 1);
    assert_eq!(gpu.power_watts_total, Some(612.347));
    assert!(close(
        gpu.memory_used_fraction.max,
        74595.0 / (74595.0 + 6482.0),
        1e-12
    ));
    assert_eq!(gpu.utilization.max, Some(0.97));
    assert_eq!(signals.pods[0].gpu.as_ref().map(|g| g.gpus), Some(1));

    // With IP targets nothing can be matched: every GPU counts, ECC rate from the counter.
    let mut window = FleetWindow::new(SignalSettings::default());
    window.record_gpu(Duration::ZERO, "dcgm", Some(gpus.clone()));
    let mut later = gpus;
    later.gpus[1].ecc_sbe_total = Some(9.0);
    window.record_gpu(Duration::from_secs(15), "dcgm", Some(later));
    let gpu = window.compute(Duration::from_secs(15)).gpu.expect("gpu");
    assert_eq!(gpu.gpus, 2);
    assert!(close(gpu.power_watts_total, 612.347 + 241.905, 1e-12));
    assert!(close(gpu.ecc_errors_per_second, 6.0 / 15.0, 1e-12));
    // A failed exporter scrape: no GPU signals rather than stale ones.
    let mut window2 = window.clone();
    window2.record_gpu(Duration::from_secs(30), "dcgm", None);
    assert_eq!(window2.compute(Duration::from_secs(30)).gpu, None);
}

#[test]
fn hostname_label_in_either_case_is_accepted() {
    let body = "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",hostname=\"n1\"} 50\n\
                DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",Hostname=\"n2\"} 70\n\
                DCGM_FI_DEV_FB_USED{gpu=\"0\",hostname=\"n1\"} 10\n";
    let parsed = exposition::parse(body).expect("parses");
    let gpus = GpuSnapshot::from_exposition(&parsed);
    assert_eq!(gpus.gpus.len(), 2);
    assert_eq!(gpus.gpus[0].hostname.as_deref(), Some("n1"));
    assert_eq!(gpus.gpus[0].fb_used_mib, Some(10.0));
    assert_eq!(gpus.gpus[1].hostname.as_deref(), Some("n2"));
}
