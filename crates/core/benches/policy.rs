//! Cost of one policy decision (every scrape interval, per ScaledObject): the guide's rules,
//! and the proactive policy (the default) under a first-token tail light load shows too, with
//! `tail=lighter` (the default) and `tail=p95`; of the proactive policy's hindsight (a record
//! per decision, a comparison per minute), of its learned state's day of demand history (kept
//! as JSON, read back and inherited) and of validating a
//! ScaledObject's metadata (once), beside the cost of cloning the signals the decision reads.
//!
//! Run: `cargo bench --bench policy`

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use vllm_keda_core::config::ScalerConfig;
use vllm_keda_core::policy::proactive::hindsight::Hindsight;
use vllm_keda_core::policy::proactive::{Persisted, Proactive, parse_policy};
use vllm_keda_core::policy::{Policy, PolicyConfig, PolicyState};
use vllm_keda_core::signals::{Bucket, FleetSignals, MaxMean, Quantiles, SignalSet};

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
    // Four replicas at 1 req/s each, 93 of every 100 first tokens within the 2 s SLO at any
    // load (Mooncake's longest prompts): under `tail=lighter` the share is read every decision
    // and the signals are cloned to hide the P95 from the guide.
    let mut tail = signals(0.0, Some(1.0));
    tail.fleet.requests_per_second = Some(4.0);
    tail.fleet.ttft_seconds.p95 = Some(2.4);
    tail.fleet.ttft_buckets = [
        (0.5, 46.5),
        (1.0, 93.0),
        (2.5, 93.0),
        (f64::INFINITY, 100.0),
    ]
    .into_iter()
    .map(|(le, count)| Bucket { le, count })
    .collect();
    // The same 100 requests' own times per output token, 97 within the 70 ms ITL SLO, finished
    // over a minute: read every decision for the engines' count of misses.
    tail.fleet.finished_window_seconds = Some(60.0);
    tail.fleet.request_tpot_buckets = [(0.05, 90.0), (0.075, 97.0), (f64::INFINITY, 100.0)]
        .into_iter()
        .map(|(le, count)| Bucket { le, count })
        .collect();
    let proactive_policy = Policy::new(PolicyConfig {
        max_replicas: 20,
        ttft_slo_seconds: Some(2.0),
        ..PolicyConfig::default()
    });
    for (name, value) in [
        (
            "proactive decide, defaults (tail=lighter), TTFT tail, 2 s steps",
            "proactive; capacity=2",
        ),
        (
            "proactive decide, tail=p95, TTFT tail, 2 s steps",
            "proactive; capacity=2; tail=p95",
        ),
        (
            "proactive decide, early=0, TTFT tail, 2 s steps",
            "proactive; capacity=2; early=0",
        ),
        (
            "proactive decide, settle=stay, TTFT tail, 2 s steps",
            "proactive; capacity=2; settle=stay",
        ),
        (
            "proactive decide, trendreach=history, TTFT tail, 2 s steps",
            "proactive; capacity=2; trendreach=history",
        ),
    ] {
        let config = parse_policy(value).expect("valid").expect("proactive");
        c.bench_function(name, |b| {
            let mut p = Proactive::new(config.clone());
            let mut state = PolicyState::default();
            let mut t = 0u64;
            b.iter(|| {
                t += 2;
                black_box(p.decide(
                    &proactive_policy,
                    Duration::from_secs(t),
                    black_box(&tail),
                    &mut state,
                ))
            });
        });
    }
    c.bench_function("peer: clone FleetSignals", |b| {
        b.iter(|| black_box(black_box(&breach).clone()));
    });

    // The proactive policy's hindsight: one decision's record, and the once-a-minute
    // comparison over a full day against 20 static fleets.
    // The same day is also kept with what the engines counted at every decision (aborted
    // requests, and late first tokens or slow requests), for the comparison that judges ours by it
    // (`oursby=counted`).
    let mut day = Hindsight::default();
    let mut counted = Hindsight::default();
    for t in (0..24 * 3600u64).step_by(2) {
        let demand = 20.0 + 15.0 * ((t as f64) / 3600.0).sin();
        day.observe(Duration::from_secs(t), demand, 3, 4);
        counted.observe(Duration::from_secs(t), demand, 3, 4);
        counted.count_missed((demand - 30.0).max(0.0));
    }
    c.bench_function("hindsight: record one decision", |b| {
        let mut h = day.clone();
        let mut t = 24 * 3600u64;
        b.iter(|| {
            t += 2;
            black_box(h.observe(Duration::from_secs(t), black_box(20.0), 3, 4))
        });
    });
    c.bench_function(
        "hindsight: compare a day (1,440 minutes) with 20 static fleets",
        |b| b.iter(|| black_box(black_box(&day).compare(10.0, 1, 20))),
    );
    c.bench_function(
        "hindsight: compare a day with the engines' count, ours judged by it",
        |b| b.iter(|| black_box(black_box(&counted).compare_by(10.0, 1, 20, true))),
    );
    // The learned state's demand history: a day of minutes taken and written as JSON (every
    // write interval, five minutes by default), and read back and put behind a new pod's
    // first minute (once, when the pod starts).
    let end = Duration::from_secs(24 * 3600);
    c.bench_function("learned state: keep a day's demand history as JSON", |b| {
        b.iter(|| black_box(serde_json::to_string(&black_box(&day).kept(end)).expect("JSON")))
    });
    let config = parse_policy("proactive; capacity=10")
        .expect("valid")
        .expect("proactive");
    let mut old = Proactive::new(config.clone());
    let mut state = PolicyState::default();
    // A fleet whose finished rate is known: while it is not, no minute is recorded.
    let mut serving = signals(0.0, None);
    serving.fleet.requests_per_second = Some(4.0);
    for t in (0..=24 * 3600u64).step_by(2) {
        old.decide(
            &proactive_policy,
            Duration::from_secs(t),
            &serving,
            &mut state,
        );
    }
    let record = old.persisted();
    assert!(record.demand_history.len() > 1_000, "a day of history");
    let json = serde_json::to_string(&record).expect("JSON");
    c.bench_function("learned state: read a day's record and inherit it", |b| {
        b.iter(|| {
            let read: Persisted = serde_json::from_str(black_box(&json)).expect("a record");
            let mut new = Proactive::new(config.clone());
            new.inherit(&read);
            black_box(new)
        })
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
