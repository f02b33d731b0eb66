//! A fast vLLM-shaped server for the load-generator benchmark (`scripts/bench-loadtest`), and
//! a quick in-process check when run by `cargo bench`.
//!
//! `loadtest_server --serve ADDR [--slots N] [--prefill-ms MS] [--itl-ms MS]` serves
//! `/v1/completions` (streaming), `/health` and `/metrics` until killed, so the load test and
//! `wrk` can drive the same server from another process.

#[path = "../tests/loadtest_support/mod.rs"]
mod support;

use std::time::Duration;

use support::{SlotConfig, SlotServer};
use tokio_util::sync::CancellationToken;

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let number = |name: &str, default: u64| {
        flag(&args, name).map_or(default, |v| v.parse().expect("a whole number"))
    };
    let config = SlotConfig {
        slots: number("--slots", 100_000) as usize,
        prefill: Duration::from_millis(number("--prefill-ms", 0)),
        itl: Duration::from_millis(number("--itl-ms", 0)),
    };
    let threads = number("--threads", 1) as usize;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .expect("a runtime");
    if let Some(addr) = flag(&args, "--serve") {
        runtime.block_on(async move {
            let server = SlotServer::start_on(&addr, config).await;
            eprintln!("serving on {}", server.url());
            std::future::pending::<()>().await;
        });
        return;
    }
    // `cargo bench` (passes --bench): a quick in-process run at two rates (server and generator
    // share the CPU). `cargo test --all-targets` (no --bench): a one-second smoke run.
    let bench = args.iter().any(|a| a == "--bench");
    let (rates, seconds) = if bench {
        (vec![250.0, 500.0], 3.0)
    } else {
        (vec![50.0], 1.0)
    };
    runtime.block_on(async move {
        let server = SlotServer::start(config).await;
        for rps in rates {
            let args = support::fixed_args(&server.url(), rps, seconds, 2.0);
            let config = vllm_keda_tools::loadtest::LoadtestConfig::try_from(args).expect("valid");
            let report = vllm_keda_tools::loadtest::execute(&config, CancellationToken::new())
                .await
                .expect("runs");
            let s = &report.steps[0];
            assert_eq!(s.ok, s.sent, "every request answered: {:?}", s.error_kinds);
            println!(
                "offered {rps} req/s: sent {} at {:.1} req/s, ok {}, errors {}, dispatch lag p99 {:.2} ms, start lag p99 {:.2} ms",
                s.sent,
                s.achieved_rps,
                s.ok,
                s.errors,
                s.send_lag.p99.unwrap_or(0.0) * 1e3,
                s.start_lag.p99.unwrap_or(0.0) * 1e3
            );
        }
    });
}
