//! The saturation finder (the source guide's stepped open-loop load test) and the warm-up
//! command.
//!
//! Owns: running a load test end to end (warm-up, steps, rests, scraping, progress, Ctrl-C)
//! and the `loadtest` and `warmup` commands. Does not own: the request traces (see
//! [`crate::trace`]), the charts (see [`crate::plot`]) or the scrape/parse/signal code it reuses.
//!
//! Layout: [`config`] (options and their validation), [`shape`] (request sizes, arrival
//! spacing), [`client`] (one streaming request), [`generator`] (the open-loop schedule and
//! per-step recording), [`monitor`] (server-side scrapes), [`verdict`] (pure decision rules),
//! [`report`] (table, Markdown, JSON, SVG, ScaledObject snippet), [`warmup`].

pub mod client;
pub mod config;
pub mod generator;
pub mod monitor;
pub mod report;
pub mod shape;
pub mod verdict;
pub mod warmup;

use std::io::{IsTerminal as _, Write as _};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use config::{LoadtestConfig, LoadtestOptions, WarmupOptions};
pub use report::LoadtestReport;

use client::CompletionClient;
use generator::{Recorder, drive_on_own_thread, schedule};
use monitor::{MonitorLog, run_monitor, server_step};
use shape::{Shape, SizeSampler};

/// Runs a whole load test; stops early (keeping what was measured) when `cancel` fires.
pub async fn execute(
    config: &LoadtestConfig,
    cancel: CancellationToken,
) -> anyhow::Result<LoadtestReport> {
    let connections = usize::try_from(config.max_in_flight)
        .unwrap_or(usize::MAX)
        .min(4096);
    let client = Arc::new(CompletionClient::new(
        &config.url,
        &config.model,
        config.request_timeout,
        connections,
    )?);
    let mut sizes = SizeSampler::new(config.shape.clone(), config.seed);
    let warmup_failures = warm_up(config, &client, &mut sizes, &cancel).await?;

    let arrivals = schedule(&config.plan, config.arrivals, &mut sizes, config.seed);
    let recorder = Arc::new(Recorder::new(config.plan.len()));
    let log = Arc::new(MonitorLog::default());
    // Start a little ahead so the first sends are not late by construction.
    let origin = Instant::now() + Duration::from_millis(50);
    let step_length = config
        .plan
        .first()
        .map_or(Duration::from_secs(60), |s| s.duration);
    let background = Background::start(config, origin, step_length, &recorder, &log);
    let run = cancel.child_token();
    let driver = drive_on_own_thread(
        client,
        arrivals,
        recorder.clone(),
        origin,
        config.max_in_flight,
        run.clone(),
    );
    let end = wait_for_the_end(config, driver, &recorder, origin, &cancel, &run).await;
    background.stop().await;

    let samples = log.samples();
    let steps = step_results(config, &recorder, &samples, end.stopped_at);
    let verdict = verdict::decide(&steps, &config.verdict);
    Ok(LoadtestReport {
        url: config.url.clone(),
        model: config.model.clone(),
        shape: config.shape.describe(),
        arrivals: format!("{:?}", config.arrivals).to_lowercase(),
        metrics_urls: config.metrics_urls.clone(),
        step_seconds: step_length.as_secs_f64(),
        rest_seconds: config.rest.as_secs_f64(),
        warmup_requests: config.warmup,
        warmup_failures,
        interrupted: end.interrupted,
        settings: config.verdict.clone(),
        steps,
        verdict,
        queue_timeline: report::queue_timeline(&samples),
        scrape_error: samples.iter().find_map(|s| s.error.clone()),
        scaler_address: config.scaler_address.clone(),
    })
}

/// The warm-up: sequential requests, the same sizes as the test's first ones. Returns how many
/// failed; an error when every one did.
async fn warm_up(
    config: &LoadtestConfig,
    client: &CompletionClient,
    sizes: &mut SizeSampler,
    cancel: &CancellationToken,
) -> anyhow::Result<u32> {
    let (mut warmup_failures, mut last_failure) = (0u32, None);
    for i in 0..config.warmup {
        if cancel.is_cancelled() {
            break;
        }
        let (p, o) = match &config.shape {
            Shape::Fixed { .. } => sizes.sample(),
            _ => SizeSampler::new(config.shape.clone(), config.seed.wrapping_add(u64::from(i)))
                .sample(),
        };
        let outcome = client.complete(p, o).await;
        if let Err(kind) = outcome.result {
            warmup_failures += 1;
            last_failure = Some(kind);
        }
        if config.progress && ((i + 1) % 10 == 0 || i + 1 == config.warmup) {
            eprint!(
                "\rwarm-up {}/{} ({warmup_failures} failed)   ",
                i + 1,
                config.warmup
            );
        }
    }
    if config.progress && config.warmup > 0 {
        eprintln!();
    }
    if config.warmup > 0 && warmup_failures == config.warmup {
        anyhow::bail!(
            "all {} warm-up requests to {} failed (last: {}); fix: check --url, --model and that the server is up",
            config.warmup,
            config.url,
            last_failure.map_or_else(|| "unknown".into(), |k| k.to_string())
        );
    }
    Ok(warmup_failures)
}

/// The tasks beside the generator: the /metrics monitor and the live progress line.
struct Background {
    cancel: CancellationToken,
    monitor: tokio::task::JoinHandle<()>,
    progress: Option<tokio::task::JoinHandle<()>>,
}

impl Background {
    fn start(
        config: &LoadtestConfig,
        origin: Instant,
        step_length: Duration,
        recorder: &Arc<Recorder>,
        log: &Arc<MonitorLog>,
    ) -> Self {
        let cancel = CancellationToken::new();
        let monitor = tokio::spawn(run_monitor(
            config.metrics_urls.clone(),
            config.scrape_interval,
            step_length,
            origin,
            log.clone(),
            cancel.clone(),
        ));
        let progress = config.progress.then(|| {
            tokio::spawn(progress_loop(
                config.plan.clone(),
                origin,
                recorder.clone(),
                log.clone(),
                cancel.clone(),
            ))
        });
        Self {
            cancel,
            monitor,
            progress,
        }
    }

    /// Stops both tasks and waits for them.
    async fn stop(self) {
        self.cancel.cancel();
        let _ = self.monitor.await;
        if let Some(p) = self.progress {
            let _ = p.await;
        }
    }
}

/// Where the generator stopped.
struct End {
    /// Time since the origin at which the test stopped.
    stopped_at: Duration,
    /// Stopped by `cancel` (Ctrl-C) rather than at the end of the plan.
    interrupted: bool,
}

/// Waits until every scheduled request has been sent and the last step has ended, then for a
/// drain (the rest length, at least 2 s) while requests are in flight; or for `cancel`
/// (Ctrl-C). Then stops the generator (`run`) and waits for it.
async fn wait_for_the_end(
    config: &LoadtestConfig,
    mut driver: tokio::task::JoinHandle<()>,
    recorder: &Recorder,
    origin: Instant,
    cancel: &CancellationToken,
    run: &CancellationToken,
) -> End {
    let last_end = config.plan.last().map_or(Duration::ZERO, |s| s.end());
    let drain = config.rest.max(Duration::from_secs(2));
    let mut driver_done = false;
    let mut interrupted = tokio::select! {
        _ = &mut driver => { driver_done = true; false }
        () = cancel.cancelled() => true,
    };
    if !interrupted {
        interrupted = tokio::select! {
            () = tokio::time::sleep_until(origin + last_end) => false,
            () = cancel.cancelled() => true,
        };
    }
    if !interrupted {
        let drain_deadline = Instant::now() + drain;
        while recorder.in_flight() > 0 && Instant::now() < drain_deadline {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
                () = cancel.cancelled() => { interrupted = true; break; }
            }
        }
    }
    let stopped_at = if interrupted {
        origin.elapsed()
    } else {
        origin.elapsed().max(last_end)
    };
    run.cancel();
    if !driver_done {
        let _ = driver.await;
    }
    End {
        stopped_at,
        interrupted,
    }
}

/// One result per step that started before `stopped_at`, client side and server side (a step
/// cut short is marked partial).
fn step_results(
    config: &LoadtestConfig,
    recorder: &Recorder,
    samples: &[monitor::MonitorSample],
    stopped_at: Duration,
) -> Vec<verdict::StepResult> {
    let mut steps = Vec::new();
    for (index, step) in config.plan.iter().enumerate() {
        if stopped_at <= step.start {
            break;
        }
        let ran_until = stopped_at.min(step.end());
        let partial = ran_until < step.end();
        let stats = recorder.snapshot(index);
        let mut result = stats.to_result(index, step, ran_until - step.start, partial);
        result.completed_rps = recorder.completion_rate(step.start, ran_until);
        result.server = server_step(
            samples,
            step.start,
            ran_until,
            (step.end() + step.rest).min(stopped_at),
        );
        steps.push(result);
    }
    steps
}

/// The live progress line: step, elapsed and remaining time, achieved rate, in flight, queue
/// depth and P95 so far.
async fn progress_loop(
    plan: Vec<crate::trace::LoadStep>,
    origin: Instant,
    recorder: Arc<Recorder>,
    log: Arc<MonitorLog>,
    cancel: CancellationToken,
) {
    let tty = std::io::stderr().is_terminal();
    let total = plan.last().map_or(Duration::ZERO, |s| s.end());
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    let mut ticks = 0u64;
    let mut last_sent = (0u64, Duration::ZERO);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = cancel.cancelled() => break,
        }
        ticks += 1;
        let now = origin.elapsed();
        let sent = recorder.sent_total();
        let rate =
            (sent - last_sent.0) as f64 / (now.saturating_sub(last_sent.1)).as_secs_f64().max(1e-3);
        last_sent = (sent, now);
        let (label, p95) = match plan.iter().position(|s| now < s.end() + s.rest) {
            Some(i) if now >= plan[i].start && now < plan[i].end() => {
                let p95 = recorder
                    .with_step(i, |s| {
                        (!s.e2e_us.is_empty())
                            .then(|| s.e2e_us.value_at_quantile(0.95) as f64 / 1e6)
                    })
                    .flatten();
                (
                    format!(
                        "step {}/{} {} req/s {:>3.0}/{:.0}s",
                        i + 1,
                        plan.len(),
                        plan[i].rps,
                        (now - plan[i].start).as_secs_f64(),
                        plan[i].duration.as_secs_f64()
                    ),
                    p95,
                )
            }
            Some(i) => (format!("rest after step {}/{}", i + 1, plan.len()), None),
            None => ("draining".to_string(), None),
        };
        let queue = log
            .latest()
            .and_then(|s| s.signals)
            .map_or_else(|| "-".into(), |s| format!("{:.0}", s.fleet.queue_depth));
        let line = format!(
            "{label} | elapsed {:.0}s remaining {:.0}s | sending {rate:.1} req/s | in flight {} | queue {queue} | p95 e2e {}",
            now.as_secs_f64(),
            total.saturating_sub(now).as_secs_f64(),
            recorder.in_flight(),
            p95.map_or_else(|| "-".into(), |v| format!("{v:.2}s")),
        );
        if tty {
            eprint!("\r\x1b[2K{line}");
            let _ = std::io::stderr().flush();
        } else if ticks % 5 == 0 {
            eprintln!("{line}");
        }
    }
    if tty {
        eprintln!();
    }
}

/// Runs `loadtest`: the test, the table on stdout, the reports in `--out`. Ctrl-C stops early
/// and still writes what was measured.
pub fn run(options: LoadtestOptions) -> anyhow::Result<()> {
    let config = LoadtestConfig::try_from(options)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let cancel = cancel_on_ctrl_c();
        let report = execute(&config, cancel).await?;
        print_and_write(&report, &config)
    })
}

/// A token cancelled by the first Ctrl-C (the test stops and writes what it measured); a second
/// Ctrl-C exits at once.
fn cancel_on_ctrl_c() -> CancellationToken {
    let cancel = CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!(
                "\ninterrupted: stopping and writing what was measured (Ctrl-C again to quit at once)"
            );
            on_signal.cancel();
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        }
    });
    cancel
}

/// The table and the recommendation on stdout, the reports into `config.out`.
fn print_and_write(report: &LoadtestReport, config: &LoadtestConfig) -> anyhow::Result<()> {
    print!("{}", report::text_table(report));
    println!();
    print!("{}", report::recommendation_text(report));
    let written = report::write_reports(report, &config.out)?;
    println!();
    for path in written {
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Runs `warmup`: exit 0 after the requests (and the ready file); an error (non-zero exit) when
/// the server is not healthy and warmed up within the timeout.
pub fn run_warmup(options: WarmupOptions) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    let outcome = runtime.block_on(warmup::warmup(&options))?;
    println!(
        "warmed up: {} requests, {} failed, first e2e {:.3} s, mean e2e {:.3} s",
        outcome.requests,
        outcome.failures,
        outcome.first_e2e.unwrap_or_default().as_secs_f64(),
        outcome.mean_e2e.unwrap_or_default().as_secs_f64()
    );
    Ok(())
}
