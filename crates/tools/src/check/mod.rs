//! One-shot signal report: `check` scrapes vLLM endpoints twice, the interval apart (or reads
//! two saved bodies), and prints per-pod and fleet signals with go-live warnings.
//!
//! Owns: the `check` options (the binary maps its flags onto them), gathering the two rounds,
//! and feeding them through the same parser and [`vllm_keda_core::signals::FleetWindow`] the
//! service uses. Does not own: the signal math (see [`vllm_keda_core::signals`]); the report and
//! its advice live in [`report`], the table rendering in `table`.

pub mod report;
mod table;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};

use vllm_keda_service::scrape::{ScrapeSettings, Scraper};

use crate::seconds;

/// What `check` reads and how it reports. [`Default`] is the command line's defaults (no
/// targets: set `endpoints` or `files`).
#[derive(Debug, Clone, PartialEq)]
pub struct CheckOptions {
    /// vLLM `/metrics` endpoints (`http://host:port/metrics` or `host:port`).
    pub endpoints: Vec<String>,
    /// Seconds between the two scrapes (with `endpoints`).
    pub interval: f64,
    /// Two saved bodies of one pod, the earlier first (instead of `endpoints`).
    pub files: Vec<PathBuf>,
    /// Seconds between the two saved bodies (required with `files`).
    pub elapsed: Option<f64>,
    /// Only series whose `model_name` is this (all models when absent).
    pub model: Option<String>,
    /// Print one JSON object instead of the table.
    pub json: bool,
    /// DCGM exporter endpoints for GPU signals (with `endpoints`).
    pub dcgm_endpoints: Vec<String>,
    /// Two saved DCGM exporter bodies, the earlier first (with `files`).
    pub dcgm_files: Vec<PathBuf>,
    /// SLOs to judge the latency bucket resolution against (each must be positive when set).
    pub slo: report::Slos,
    /// Per-endpoint scrape timeout in seconds.
    pub timeout: f64,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            endpoints: Vec::new(),
            interval: 10.0,
            files: Vec::new(),
            elapsed: None,
            model: None,
            json: false,
            dcgm_endpoints: Vec::new(),
            dcgm_files: Vec::new(),
            slo: report::Slos::default(),
            timeout: 5.0,
        }
    }
}

/// One target's two bodies (or why each is missing).
#[derive(Debug, Clone)]
pub struct Rounds {
    /// The target (normalised URL or file path).
    pub target: String,
    /// The earlier body.
    pub earlier: Result<String, String>,
    /// The later body.
    pub later: Result<String, String>,
}

/// Everything gathered: vLLM targets, DCGM targets, and the time between the rounds.
#[derive(Debug, Clone)]
pub struct Gathered {
    /// vLLM targets.
    pub pods: Vec<Rounds>,
    /// DCGM exporter targets.
    pub gpus: Vec<Rounds>,
    /// Time between the two rounds.
    pub elapsed: Duration,
}

/// Runs the command.
pub fn run(args: CheckOptions) -> anyhow::Result<()> {
    let slo = report::Slos {
        latency_seconds: positive("--latency-slo-seconds", args.slo.latency_seconds)?,
        ttft_seconds: positive("--ttft-slo-seconds", args.slo.ttft_seconds)?,
        itl_seconds: positive("--itl-slo-seconds", args.slo.itl_seconds)?,
    };
    let gathered = if !args.files.is_empty() {
        gather_files(&args)?
    } else {
        gather_endpoints(&args)?
    };
    let report = report::Report::build(&gathered, args.model.as_deref(), &slo);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    if report.signals.pods_healthy == 0 {
        bail!("no target gave a usable vLLM body in the later round; see the warnings above");
    }
    Ok(())
}

fn positive(flag: &str, value: Option<f64>) -> anyhow::Result<Option<f64>> {
    match value {
        Some(v) if !(v.is_finite() && v > 0.0) => {
            bail!("{flag}: expected a positive number of seconds, got {v}")
        }
        other => Ok(other),
    }
}

fn read_pair(paths: &[PathBuf], flag: &str) -> anyhow::Result<Rounds> {
    let read = |path: &PathBuf| {
        std::fs::read_to_string(path)
            .with_context(|| format!("{flag}: cannot read {}", path.display()))
    };
    Ok(Rounds {
        target: paths[1].display().to_string(),
        earlier: Ok(read(&paths[0])?),
        later: Ok(read(&paths[1])?),
    })
}

fn gather_files(args: &CheckOptions) -> anyhow::Result<Gathered> {
    let Some(elapsed) = args.elapsed else {
        bail!("--files needs --elapsed SECONDS: the time between the two saved bodies");
    };
    if !seconds::fits(elapsed, false) {
        bail!(
            "--elapsed: expected a number of seconds {}, got {elapsed:?}",
            seconds::range(false)
        );
    }
    if !args.endpoints.is_empty() || !args.dcgm_endpoints.is_empty() {
        bail!("--files reads saved bodies: drop --endpoints/--dcgm-endpoints (use --dcgm-files)");
    }
    let gpus = if args.dcgm_files.is_empty() {
        Vec::new()
    } else {
        vec![read_pair(&args.dcgm_files, "--dcgm-files")?]
    };
    Ok(Gathered {
        pods: vec![read_pair(&args.files, "--files")?],
        gpus,
        elapsed: Duration::from_secs_f64(elapsed),
    })
}

/// Normalised targets, duplicates dropped (order kept).
fn normalize_all(targets: &[String], flag: &str) -> anyhow::Result<Vec<String>> {
    let mut out: Vec<String> = Vec::with_capacity(targets.len());
    for target in targets {
        let url = vllm_keda_service::discovery::normalize_target(target)
            .with_context(|| flag.to_string())?;
        if !out.contains(&url) {
            out.push(url);
        }
    }
    Ok(out)
}

fn gather_endpoints(args: &CheckOptions) -> anyhow::Result<Gathered> {
    if args.elapsed.is_some() || !args.dcgm_files.is_empty() {
        bail!("--elapsed and --dcgm-files go with --files; with --endpoints use --interval");
    }
    if !(args.interval.is_finite() && args.interval > 0.0 && args.interval <= 3600.0) {
        bail!(
            "--interval: expected seconds between 0 and 3600, got {:?}",
            args.interval
        );
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0 && args.timeout <= 3600.0) {
        bail!(
            "--timeout: expected seconds between 0 and 3600, got {:?}",
            args.timeout
        );
    }
    let pods = normalize_all(&args.endpoints, "--endpoints")?;
    let gpus = normalize_all(&args.dcgm_endpoints, "--dcgm-endpoints")?;
    let scraper = Scraper::new(ScrapeSettings {
        timeout: Duration::from_secs_f64(args.timeout),
        ..ScrapeSettings::loopback()
    });
    let interval = Duration::from_secs_f64(args.interval);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let all: Vec<String> = pods.iter().chain(&gpus).cloned().collect();
        if !args.json {
            eprintln!(
                "scraping {} target(s), then again in {:.1} s...",
                all.len(),
                args.interval
            );
        }
        let start = tokio::time::Instant::now();
        let earlier = scraper.scrape_all(&all).await;
        tokio::time::sleep_until(start + interval).await;
        let second = tokio::time::Instant::now();
        let later = scraper.scrape_all(&all).await;
        let rounds: Vec<Rounds> = earlier
            .into_iter()
            .zip(later)
            .map(|(a, b)| Rounds {
                target: a.url,
                earlier: a.result.map_err(|e| e.to_string()),
                later: b.result.map_err(|e| e.to_string()),
            })
            .collect();
        let (pod_rounds, gpu_rounds) = rounds.split_at(pods.len());
        Ok(Gathered {
            pods: pod_rounds.to_vec(),
            gpus: gpu_rounds.to_vec(),
            elapsed: second - start,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interval, the timeout and the saved bodies' elapsed time are refused before anything
    /// is scraped or read, each naming its flag and range; a number too large for a duration is
    /// one of them, not a panic.
    #[test]
    fn the_interval_timeout_and_elapsed_time_out_of_range_are_refused_naming_the_flag() {
        for (interval, timeout, expected) in [
            (
                1e300,
                5.0,
                "--interval: expected seconds between 0 and 3600, got 1e300",
            ),
            (
                10.0,
                1e300,
                "--timeout: expected seconds between 0 and 3600, got 1e300",
            ),
            (
                10.0,
                0.0,
                "--timeout: expected seconds between 0 and 3600, got 0.0",
            ),
            (
                10.0,
                f64::NAN,
                "--timeout: expected seconds between 0 and 3600, got NaN",
            ),
        ] {
            let e = run(CheckOptions {
                endpoints: vec!["127.0.0.1:9".into()],
                interval,
                timeout,
                ..CheckOptions::default()
            })
            .unwrap_err()
            .to_string();
            assert!(e.contains(expected), "{interval} {timeout}: {e}");
        }
        let e = run(CheckOptions {
            files: vec!["earlier.prom".into(), "later.prom".into()],
            elapsed: Some(1e300),
            ..CheckOptions::default()
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(
                "--elapsed: expected a number of seconds above 0 to 31536000 (a year), got 1e300"
            ),
            "{e}"
        );
    }
}
