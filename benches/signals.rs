//! Time to compute all signals for 1,000 pods per tick.
//!
//! `record_and_compute`: one tick of the control loop for a fleet of 1,000 vLLM pods in steady
//! state (default 60 s latency / 300 s preemption windows, one scrape per pod every 15 s or
//! every 1 s of history): record each pod's new snapshot, then compute the fleet signals.
//! `extract`: turning one parsed `vllm-v1-loaded.prom` body into a `PodSnapshot` (done once
//! per pod per tick, before `record`). Run: `cargo bench --bench signals`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use vllm_keda_scaler::exposition;
use vllm_keda_scaler::signals::{FleetWindow, PodSnapshot, SignalSettings};

const PODS: usize = 1_000;

fn fixture(name: &str) -> String {
    let path = format!("{}/../shared/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn snapshot(name: &str) -> PodSnapshot {
    let body = fixture(name);
    PodSnapshot::from_exposition(&exposition::parse(&body).expect("fixture parses"), None)
}

/// `base + k * step` for every counter and bucket (monotone in `k`, so never a reset).
fn advance(base: &PodSnapshot, step: &PodSnapshot, k: f64) -> PodSnapshot {
    let mut out = base.clone();
    let add = |a: &mut Option<f64>, b: Option<f64>| {
        if let (Some(a), Some(b)) = (a.as_mut(), b) {
            *a += k * b;
        }
    };
    add(&mut out.preemptions_total, step.preemptions_total);
    add(&mut out.prompt_tokens_total, step.prompt_tokens_total);
    add(
        &mut out.generation_tokens_total,
        step.generation_tokens_total,
    );
    for (reason, value) in out.request_success_total.iter_mut() {
        *value += k * step
            .request_success_total
            .get(reason)
            .copied()
            .unwrap_or(0.0);
    }
    for (a, b) in [
        (&mut out.e2e_latency, &step.e2e_latency),
        (&mut out.ttft, &step.ttft),
        (&mut out.itl, &step.itl),
        (&mut out.queue_time, &step.queue_time),
        (&mut out.iteration_tokens, &step.iteration_tokens),
    ] {
        if let (Some(a), Some(b)) = (a.as_mut(), b.as_ref()) {
            for (x, y) in a.buckets.iter_mut().zip(&b.buckets) {
                x.count += k * y.count;
            }
            a.count += k * b.count;
            a.sum += k * b.sum;
        }
    }
    out
}

/// Per-tick increment: (loaded - idle) / 44, so one tick looks like 15 s of the loaded fixture.
fn step(idle: &PodSnapshot, loaded: &PodSnapshot) -> PodSnapshot {
    let mut out = loaded.clone();
    let sub = |a: &mut Option<f64>, b: Option<f64>| {
        if let (Some(a), Some(b)) = (a.as_mut(), b) {
            *a = (*a - b) / 44.0;
        }
    };
    sub(&mut out.preemptions_total, idle.preemptions_total);
    sub(&mut out.prompt_tokens_total, idle.prompt_tokens_total);
    sub(
        &mut out.generation_tokens_total,
        idle.generation_tokens_total,
    );
    for (reason, value) in out.request_success_total.iter_mut() {
        *value = (*value
            - idle
                .request_success_total
                .get(reason)
                .copied()
                .unwrap_or(0.0))
            / 44.0;
    }
    for (a, b) in [
        (&mut out.e2e_latency, &idle.e2e_latency),
        (&mut out.ttft, &idle.ttft),
        (&mut out.itl, &idle.itl),
        (&mut out.queue_time, &idle.queue_time),
        (&mut out.iteration_tokens, &idle.iteration_tokens),
    ] {
        if let (Some(a), Some(b)) = (a.as_mut(), b.as_ref()) {
            for (x, y) in a.buckets.iter_mut().zip(&b.buckets) {
                x.count = (x.count - y.count) / 44.0;
            }
            a.count = (a.count - b.count) / 44.0;
            a.sum = (a.sum - b.sum) / 44.0;
        }
    }
    out
}

fn bench_fleet(c: &mut Criterion, name: &str, interval: Duration) {
    let idle = snapshot("vllm-v1-idle.prom");
    let loaded = snapshot("vllm-v1-loaded.prom");
    let step = step(&idle, &loaded);
    let pods: Vec<String> = (0..PODS)
        .map(|i| format!("http://10.0.{}.{}:8000/metrics", i / 256, i % 256))
        .collect();
    let mut window = FleetWindow::new(SignalSettings::default());
    let mut tick = 0u32;
    let snapshots_for = |tick: u32| -> Vec<PodSnapshot> {
        (0..PODS)
            .map(|i| advance(&idle, &step, f64::from(tick) + (i % 7) as f64 * 0.01))
            .collect()
    };
    // Fill the 300 s preemption window first: steady state.
    let warm_ticks = (300.0 / interval.as_secs_f64()).ceil() as u32 + 2;
    for _ in 0..warm_ticks {
        tick += 1;
        let now = interval * tick;
        for (pod, snapshot) in pods.iter().zip(snapshots_for(tick)) {
            window.record(now, pod, Some(snapshot));
        }
    }
    let signals = window.compute(interval * tick);
    assert_eq!(signals.pods_healthy, PODS);
    assert!(signals.fleet.e2e_latency_seconds.p95.is_some());
    c.bench_function(name, |b| {
        b.iter_batched(
            || {
                tick += 1;
                (interval * tick, snapshots_for(tick))
            },
            |(now, snapshots)| {
                for (pod, snapshot) in pods.iter().zip(snapshots) {
                    window.record(now, pod, Some(snapshot));
                }
                black_box(window.compute(now))
            },
            BatchSize::PerIteration,
        )
    });
}

fn record_and_compute(c: &mut Criterion) {
    bench_fleet(
        c,
        "record_and_compute_1000_pods_15s_scrapes",
        Duration::from_secs(15),
    );
    bench_fleet(
        c,
        "record_and_compute_1000_pods_1s_scrapes",
        Duration::from_secs(1),
    );
}

fn extract(c: &mut Criterion) {
    let body = fixture("vllm-v1-loaded.prom");
    let parsed = exposition::parse(&body).expect("fixture parses");
    c.bench_function("extract_pod_snapshot_v1_loaded", |b| {
        b.iter(|| black_box(PodSnapshot::from_exposition(black_box(&parsed), None)))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(10));
    targets = record_and_compute, extract
}
criterion_main!(benches);
