//! Engine and renderer speed: one replica-hour of Poisson traffic in virtual time (the fleet
//! simulator's inner loop; target: 10 replica-hours in under 10 s), and rendering a `/metrics`
//! body, with parsing the same body by our parser as the peer measured in the same run.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use vllm_emulator::{
    Engine, EngineConfig, RenderInfo, RequestShape, RequestSpec, SplitMix64, render_string,
};

const SHAPE: RequestShape = RequestShape {
    prompt_tokens: 512,
    output_tokens: 128,
};

/// Runs one engine for `seconds` of virtual time at `load` x its predicted capacity and returns
/// the number of finished requests.
fn replica_hour(load: f64, seconds: f64) -> usize {
    let cfg = EngineConfig::default();
    let rate = cfg.predicted_saturation(SHAPE).requests_per_second * load;
    let mut e = Engine::new(cfg).unwrap();
    let mut rng = SplitMix64::new(1);
    let mut events = Vec::new();
    let mut finished = 0;
    let mut t = 0.0;
    while t < seconds {
        t += rng.next_exp(rate);
        e.add_request(
            Duration::from_secs_f64(t),
            RequestSpec::new(SHAPE.prompt_tokens, SHAPE.output_tokens),
        )
        .unwrap();
        e.advance_to(Duration::from_secs_f64(t), &mut events);
        finished += events.len();
        events.clear();
    }
    finished
}

fn bench_engine(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    g.sample_size(10);
    for load in [0.5, 0.9] {
        g.bench_function(format!("one_replica_hour_at_{load}_of_capacity"), |b| {
            b.iter(|| replica_hour(load, 3600.0))
        });
    }
    g.finish();
}

fn bench_render(c: &mut Criterion) {
    let cfg = EngineConfig::default();
    let mut e = Engine::new(cfg).unwrap();
    let mut events = Vec::new();
    for i in 0..300u32 {
        let t = Duration::from_millis(u64::from(i) * 20);
        e.add_request(t, RequestSpec::new(200 + i, 100)).unwrap();
    }
    e.advance_to(Duration::from_secs(8), &mut events);
    let info = RenderInfo {
        model_name: "meta-llama/Llama-3.1-8B-Instruct",
        engine_index: 0,
        start_unix_seconds: 1.7e9,
        http: None,
    };
    let body = render_string(&e, &info);
    let mut g = c.benchmark_group("metrics_body");
    g.bench_function("render_v1", |b| b.iter(|| render_string(&e, &info)));
    g.bench_function("peer_parse_same_body", |b| {
        b.iter(|| {
            vllm_keda_core::exposition::parse(&body)
                .unwrap()
                .samples
                .len()
        })
    });
    g.finish();
}

criterion_group!(benches, bench_engine, bench_render);
criterion_main!(benches);
