//! Tight-loop parser throughput for `scripts/bench-parser`, which runs the peer parsers on the
//! same file in the same run.
//!
//! Usage: `cargo run --release --example parse_bench -- FILE [SECONDS] [--extract]`
//! Prints one line: `bytes=.. samples=.. iterations=.. seconds=.. mb_per_s=.. samples_per_s=..`.
//! With `--extract` each iteration also builds the pod's snapshot from the parsed body
//! ([`PodSnapshot::from_exposition`]): the per-body work of one scrape in `serve`.

// A benchmark's own wall clock: the core has no async runtime, and nothing here is a loop a
// paused-time test would need to control.
#![allow(clippy::disallowed_types)]

use std::hint::black_box;
use std::time::Instant;
use vllm_keda_core::exposition;
use vllm_keda_core::signals::PodSnapshot;

/// One iteration: parse, and with `extract` build the snapshot; the sample count (or 0).
fn once(body: &str, extract: bool) -> usize {
    match exposition::parse(black_box(body)) {
        Ok(e) if extract => PodSnapshot::from_exposition(&e, None).map_or(0, |_| e.samples.len()),
        Ok(e) => e.samples.len(),
        Err(_) => 0,
    }
}

fn main() -> anyhow::Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let extract = args.iter().any(|a| a == "--extract");
    args.retain(|a| a != "--extract");
    let mut args = args.into_iter();
    let path = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: parse_bench FILE [SECONDS] [--extract]"))?;
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
    if extract {
        let parsed = exposition::parse(&body).map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
        PodSnapshot::from_exposition(&parsed, None)
            .map_err(|e| anyhow::anyhow!("{path}: not a vLLM body: {e}"))?;
    }

    // Warm up caches and the allocator, then time batches until the budget is spent.
    for _ in 0..200 {
        black_box(once(&body, extract));
    }
    let start = Instant::now();
    let mut iterations: u64 = 0;
    loop {
        for _ in 0..100 {
            black_box(once(&body, extract));
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
