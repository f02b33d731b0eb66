//! Cost of one policy decision (every scrape interval, per ScaledObject) and of validating a
//! ScaledObject's metadata (once), beside the cost of cloning the signals the decision reads.
//!
//! Run: `cargo bench --bench policy`

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use vllm_keda_core::config::ScalerConfig;
use vllm_keda_core::policy::{Policy, PolicyConfig, PolicyState};
use vllm_keda_core::signals::{FleetSignals, MaxMean, Quantiles, SignalSet};

fn signals(queue: f64, p95: Option<f64>) -> FleetSignals {
    FleetSignals {
        pods_total: 4,
        pods_healthy: 4,
        fleet: SignalSet {
            queue_depth: queue,
            running: 40.0,
            e2e_latency_seconds: Quantiles {
                p50: p95.map(|p| p / 2.0),
                p95,
                p99: p95.map(|p| p * 1.5),
            },
            requests_finished_in_window: 300.0,
            kv_cache_usage: MaxMean {
                max: Some(0.5),
                mean: Some(0.4),
            },
            preemptions_per_second: Some(0.0),
            ..SignalSet::default()
        },
        ..FleetSignals::default()
    }
}

fn bench(c: &mut Criterion) {
    let policy = Policy::new(PolicyConfig {
        max_replicas: 100,
        ..PolicyConfig::default()
    });
    let breach = signals(400.0, Some(7.2));
    let calm = signals(0.0, Some(1.0));

    c.bench_function("decide/breach (scale-up path, 2 s steps)", |b| {
        let mut state = PolicyState::default();
        let mut t = 0u64;
        b.iter(|| {
            t += 2;
            black_box(policy.decide(Duration::from_secs(t), black_box(&breach), &mut state))
        });
    });
    c.bench_function("decide/calm (scale-in path, 2 s steps)", |b| {
        let mut state = PolicyState::with_previous_target(100);
        let mut t = 0u64;
        b.iter(|| {
            t += 2;
            black_box(policy.decide(Duration::from_secs(t), black_box(&calm), &mut state))
        });
    });
    c.bench_function("peer: clone FleetSignals", |b| {
        b.iter(|| black_box(black_box(&breach).clone()));
    });

    let metadata: HashMap<String, String> = [
        ("scalerAddress", "vllm-keda-scaler.keda:9090"),
        ("service", "vllm-headless.default.svc.cluster.local"),
        ("model", "meta-llama/Llama-3.1-8B-Instruct"),
        ("queueDepthPerReplica", "25"),
        ("latencySloSeconds", "5"),
        ("minReplicas", "1"),
        ("maxReplicas", "20"),
        ("hpaTolerance", "0.01"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    c.bench_function("ScalerConfig::from_metadata (8 keys)", |b| {
        b.iter(|| black_box(ScalerConfig::from_metadata(black_box(&metadata))))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
