//! Tight-loop parser throughput for `scripts/bench-parser`, which runs the peer parsers on the
//! same file in the same run.
//!
//! Usage: `cargo run --release --example parse_bench -- FILE [SECONDS]`
//! Prints one line: `bytes=.. samples=.. iterations=.. seconds=.. mb_per_s=.. samples_per_s=..`.

// A benchmark's own wall clock: the core has no async runtime, and nothing here is a loop a
// paused-time test would need to control.
#![allow(clippy::disallowed_types)]

use std::hint::black_box;
use std::time::Instant;
use vllm_keda_core::exposition;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: parse_bench FILE [SECONDS]"))?;
    let seconds: f64 = match args.next() {
        Some(s) => s
            .parse()
            .map_err(|e| anyhow::anyhow!("SECONDS {s:?}: expected a number: {e}"))?,
        None => 3.0,
    };
    let body = std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("read {path}: {e}"))?;
    let samples = exposition::parse(&body)
        .map_err(|e| anyhow::anyhow!("{path}: {e}"))?
        .samples
        .len();

    // Warm up caches and the allocator, then time batches until the budget is spent.
    for _ in 0..200 {
        black_box(
            exposition::parse(black_box(&body))
                .map(|e| e.samples.len())
                .ok(),
        );
    }
    let start = Instant::now();
    let mut iterations: u64 = 0;
    loop {
        for _ in 0..100 {
            let exp = exposition::parse(black_box(&body));
            black_box(exp.map(|e| e.samples.len()).ok());
        }
        iterations += 100;
        if start.elapsed().as_secs_f64() >= seconds {
            break;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let bytes = body.len();
    println!(
        "bytes={bytes} samples={samples} iterations={iterations} seconds={elapsed:.3} mb_per_s={:.1} samples_per_s={:.0}",
        bytes as f64 * iterations as f64 / elapsed / 1e6,
        samples as f64 * iterations as f64 / elapsed,
    );
    Ok(())
}
