//! Parser throughput on a loaded vLLM V1 body (MB/s via `Throughput::Bytes`).
//! Run: `cargo bench --bench exposition`. Peers are measured by `scripts/bench-parser`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use vllm_keda_core::exposition;

const BODY_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../data/fixtures/vllm-v1-loaded.prom"
);

fn parse_loaded_body(c: &mut Criterion) {
    let body = std::fs::read_to_string(BODY_PATH).expect("read vllm-v1-loaded.prom");
    let mut group = c.benchmark_group("exposition");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("parse vllm-v1-loaded.prom", |b| {
        b.iter(|| {
            let exp = exposition::parse(black_box(&body)).expect("fixture parses");
            black_box(exp.samples.len())
        })
    });
    group.finish();
}

criterion_group!(benches, parse_loaded_body);
criterion_main!(benches);
