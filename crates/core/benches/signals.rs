//! Time to compute all signals for 1,000 pods per tick.
//!
//! `record_and_compute`: one tick of the control loop for a fleet of 1,000 vLLM pods in steady
//! state (default 60 s latency / 300 s preemption windows, one scrape per pod every 15 s or
//! every 1 s of history): record each pod's new snapshot, then compute the fleet signals.
//! `extract`: turning one parsed `vllm-v1-loaded.prom` body into a `PodSnapshot` (done once
//! per pod per tick, before `record`). `many_reasons`: one pod serving N distinct
//! `finished_reason` values (160,000 is about 8 MB): parse, extract, record and compute one
//! round after a first one, the whole of a cycle's pure work for that pod (it grows with the
//! body, never its square). Run: `cargo bench --bench signals`.

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{BatchSize, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use vllm_keda_core::exposition;
use vllm_keda_core::policy::PolicyConfig;
use vllm_keda_core::signals::{FleetWindow, PodSnapshot, SignalSettings};
use vllm_keda_core::{Scaler, ScrapeRound};

const PODS: usize = 1_000;

fn fixture(name: &str) -> String {
    let path = format!("{}/../../data/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn snapshot(name: &str) -> PodSnapshot {
    let body = fixture(name);
    PodSnapshot::from_exposition(&exposition::parse(&body).expect("fixture parses"), None)
        .expect("fixture is usable")
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
        (&mut out.request_tpot, &step.request_tpot),
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
        (&mut out.request_tpot, &idle.request_tpot),
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

/// CPU time of the benchmark thread (Linux `/proc/thread-self/schedstat`, nanoseconds): on a
/// shared machine this leaves out the time other jobs held the cores. The kernel updates it at
/// scheduler ticks, so single readings can be a tick late; over many samples that averages out.
struct ThreadCpuTime;

fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, typical_ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if typical_ns < 1e3 {
            (1.0, "ns cpu")
        } else if typical_ns < 1e6 {
            (1e-3, "µs cpu")
        } else if typical_ns < 1e9 {
            (1e-6, "ms cpu")
        } else {
            (1e-9, "s cpu")
        };
        for value in values {
            *value *= factor;
        }
        unit
    }
    fn scale_throughputs(&self, _: f64, _: &Throughput, values: &mut [f64]) -> &'static str {
        for value in values {
            *value = 0.0;
        }
        "n/a"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

fn bench_fleet<M: Measurement + 'static>(c: &mut Criterion<M>, name: &str, interval: Duration) {
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

fn record_and_compute(c: &mut Criterion<WallTime>) {
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

fn record_and_compute_cpu(c: &mut Criterion<ThreadCpuTime>) {
    bench_fleet(
        c,
        "cpu/record_and_compute_1000_pods_15s_scrapes",
        Duration::from_secs(15),
    );
    bench_fleet(
        c,
        "cpu/record_and_compute_1000_pods_1s_scrapes",
        Duration::from_secs(1),
    );
}

fn extract(c: &mut Criterion) {
    let body = fixture("vllm-v1-loaded.prom");
    let parsed = exposition::parse(&body).expect("fixture parses");
    c.bench_function("extract_pod_snapshot_v1_loaded", |b| {
        b.iter(|| black_box(PodSnapshot::from_exposition(black_box(&parsed), None)).is_ok())
    });
}

/// A pod's body with `reasons` distinct `finished_reason` values, each finished `n` times.
fn many_reasons_body(reasons: usize, n: usize) -> String {
    use std::fmt::Write as _;
    let l = "engine=\"0\",model_name=\"m\"";
    let mut out =
        format!("vllm:num_requests_waiting{{{l}}} 1\nvllm:num_requests_running{{{l}}} 1\n");
    for r in 0..reasons {
        writeln!(
            out,
            "vllm:request_success_total{{{l},finished_reason=\"reason-{r:06}\"}} {n}"
        )
        .unwrap();
    }
    out
}

fn many_reasons(c: &mut Criterion) {
    let mut group = c.benchmark_group("many_reasons");
    // Flat: ten iterations in all, so a quadratic baseline (seconds per round) stays runnable.
    group.sampling_mode(SamplingMode::Flat);
    for reasons in [10_000usize, 40_000, 160_000] {
        let (first, second) = (many_reasons_body(reasons, 1), many_reasons_body(reasons, 2));
        group.throughput(Throughput::Bytes(second.len() as u64));
        let mut scaler = Scaler::with_settings(SignalSettings::default(), PolicyConfig::default());
        let round = |body: &str| ScrapeRound::<()>::parse([("pod".to_owned(), Ok(body))], [], None);
        scaler.record(Duration::ZERO, round(&first));
        let now = Duration::from_secs(2);
        group.bench_function(format!("parse_record_compute_{reasons}"), |b| {
            b.iter(|| {
                // Recording at the same instant replaces the previous second round.
                scaler.record(now, round(black_box(&second)));
                black_box(scaler.signals(now))
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = reasons;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(5));
    targets = many_reasons
}
criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(10));
    targets = record_and_compute, extract
}
criterion_group! {
    name = cpu;
    config = Criterion::default()
        .with_measurement(ThreadCpuTime)
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    targets = record_and_compute_cpu
}
criterion_main!(benches, cpu, reasons);
