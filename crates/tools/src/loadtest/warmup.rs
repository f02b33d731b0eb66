//! The warm-up: wait for the server's health endpoint, send sequential requests (CUDA graph
//! capture and kernel compilation happen on the first ones), then write a ready file that a
//! readiness probe can test for.
//!
//! Owns: the wait, the sequential requests and the ready file. Does not own: the HTTP exchange
//! of a completion (see the client).

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use tokio::time::Instant;

use super::client::CompletionClient;
use super::config::{WarmupOptions, base_url};

/// What a warm-up did.
#[derive(Debug, Clone, PartialEq)]
pub struct WarmupOutcome {
    /// Requests sent.
    pub requests: u32,
    /// Requests that failed.
    pub failures: u32,
    /// Time waiting for health.
    pub waited_for_health: Duration,
    /// Mean end-to-end latency of the successful requests.
    pub mean_e2e: Option<Duration>,
    /// End-to-end latency of the first request (usually the slowest).
    pub first_e2e: Option<Duration>,
}

/// Polls `health_url` until it answers 2xx or `deadline` passes.
pub async fn wait_for_health(
    http: &reqwest::Client,
    health_url: &str,
    deadline: Instant,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let mut last_error = String::from("no answer yet");
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            anyhow::bail!(
                "{health_url} did not become healthy within {:.0} s ({attempt} attempts; last: {last_error}); \
                 fix: check that the server is running and loading the model, or raise --timeout-seconds",
                (Instant::now() - start).as_secs_f64()
            );
        }
        match tokio::time::timeout(
            left.min(Duration::from_secs(5)),
            http.get(health_url).send(),
        )
        .await
        {
            Ok(Ok(r)) if r.status().is_success() => return Ok(start.elapsed()),
            Ok(Ok(r)) => last_error = format!("status {}", r.status().as_u16()),
            Ok(Err(e)) => {
                last_error = if e.is_connect() {
                    "connection refused".into()
                } else {
                    e.to_string()
                }
            }
            Err(_) => last_error = "timed out".into(),
        }
        let pause = Duration::from_millis(200 * u64::from(attempt.min(5)));
        tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

/// Sends `requests` sequential requests; each failure is counted, none aborts the warm-up.
pub async fn sequential_requests(
    client: &CompletionClient,
    requests: u32,
    prompt_tokens: u32,
    output_tokens: u32,
    deadline: Instant,
    mut progress: impl FnMut(u32, u32),
) -> anyhow::Result<WarmupOutcome> {
    let mut failures = 0;
    let mut total = Duration::ZERO;
    let mut first = None;
    let mut last_error = None;
    for i in 0..requests {
        let left = deadline.saturating_duration_since(Instant::now());
        anyhow::ensure!(
            !left.is_zero(),
            "warm-up ran out of time after {i} of {requests} requests ({failures} failed); fix: raise --timeout-seconds"
        );
        let outcome = match tokio::time::timeout(
            left,
            client.complete(prompt_tokens, output_tokens),
        )
        .await
        {
            Ok(o) => o,
            Err(_) => anyhow::bail!(
                "warm-up ran out of time during request {} of {requests}; fix: raise --timeout-seconds",
                i + 1
            ),
        };
        match outcome.result {
            Ok(()) => {
                total += outcome.e2e;
                first.get_or_insert(outcome.e2e);
            }
            Err(kind) => {
                failures += 1;
                last_error = Some(kind);
            }
        }
        progress(i + 1, failures);
    }
    if requests > 0 && failures == requests {
        anyhow::bail!(
            "all {requests} warm-up requests failed (last: {}); fix: check --url and --model",
            last_error.map_or_else(|| "unknown".into(), |k| k.to_string())
        );
    }
    let ok = requests - failures;
    Ok(WarmupOutcome {
        requests,
        failures,
        waited_for_health: Duration::ZERO,
        mean_e2e: (ok > 0).then(|| total / ok),
        first_e2e: first,
    })
}

/// Runs the `warmup` command: health, requests, ready file.
pub async fn warmup(args: &WarmupOptions) -> anyhow::Result<WarmupOutcome> {
    let url = base_url("url", &args.url)?;
    anyhow::ensure!(
        !args.model.trim().is_empty(),
        "--model: expected the served model name"
    );
    anyhow::ensure!(
        args.timeout_seconds.is_finite() && args.timeout_seconds > 0.0,
        "--timeout-seconds {}: expected a positive number",
        args.timeout_seconds
    );
    let timeout = Duration::from_secs_f64(args.timeout_seconds.min(1e7));
    let deadline = Instant::now() + timeout;
    let http = reqwest::Client::builder().build()?;
    let path = if args.health_path.starts_with('/') {
        args.health_path.clone()
    } else {
        format!("/{}", args.health_path)
    };
    let health_url = format!("{url}{path}");
    eprintln!(
        "warmup: waiting for {health_url} (up to {:.0} s)",
        timeout.as_secs_f64()
    );
    let waited = wait_for_health(&http, &health_url, deadline).await?;
    eprintln!(
        "warmup: healthy after {:.1} s; sending {} sequential requests",
        waited.as_secs_f64(),
        args.requests
    );
    let client = CompletionClient::new(&url, args.model.trim(), timeout, 1)?;
    let requests = args.requests;
    let mut outcome = sequential_requests(
        &client,
        requests,
        args.prompt_tokens.max(1),
        args.output_tokens.max(1),
        deadline,
        |done, failed| {
            if done % 10 == 0 || done == requests {
                eprintln!("warmup: {done}/{requests} requests ({failed} failed)");
            }
        },
    )
    .await?;
    outcome.waited_for_health = waited;
    if let Some(path) = &args.ready_file {
        write_ready_file(path, &outcome)?;
        eprintln!("warmup: wrote {}", path.display());
    }
    Ok(outcome)
}

fn write_ready_file(path: &Path, outcome: &WarmupOutcome) -> anyhow::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let body = format!(
        "warmed up: {} requests, {} failed, mean e2e {:.3} s, first e2e {:.3} s\n",
        outcome.requests,
        outcome.failures,
        outcome.mean_e2e.unwrap_or_default().as_secs_f64(),
        outcome.first_e2e.unwrap_or_default().as_secs_f64()
    );
    // Write then rename so a probe never sees a half-written file.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, body)
        .with_context(|| format!("writing the ready file {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("moving the ready file into place at {}", path.display()))?;
    Ok(())
}
