//! `loadtest` and `warmup` options as asked for, and their validation into configs that cannot
//! hold a bad value.

use std::path::PathBuf;
use std::time::Duration;

use super::shape::{Arrivals, Shape};
use super::verdict::{LatencySlo, VerdictSettings};
use crate::seconds;
use crate::trace::{LoadStep, step_plan};

/// A load test as asked for, before validation into a [`LoadtestConfig`]. [`Default`] is the
/// command line's defaults (`url` and `model` have none: set them).
#[derive(Debug, Clone, PartialEq)]
pub struct LoadtestOptions {
    /// Base URL of the OpenAI-compatible server (e.g. http://vllm:8000).
    pub url: String,
    /// Model name to request.
    pub model: String,
    /// Offered rates in requests per second (empty: 10,20,...,70 unless `rps_range` is set).
    pub rps: Vec<f64>,
    /// Offered rates as FROM:TO:STEP (e.g. 10:70:10); wins over `rps`.
    pub rps_range: Option<String>,
    /// Seconds of load per step.
    pub step_seconds: f64,
    /// Seconds of rest between steps (and the drain after the last).
    pub rest_seconds: f64,
    /// Sequential warm-up requests before the first step.
    pub warmup: u32,
    /// Request sizes: fixed:PROMPT:OUTPUT, uniform:PLO-PHI:OLO-OHI or trace:FILE.
    pub shape: String,
    /// Arrival spacing within a step.
    pub arrivals: Arrivals,
    /// The vLLM pods' /metrics URLs (empty: URL/metrics).
    pub metrics_urls: Vec<String>,
    /// Skip scraping /metrics (client-side measurements only).
    pub no_metrics: bool,
    /// Replicas behind the URL (default: the number of metrics URLs).
    pub replicas: Option<usize>,
    /// Directory for the reports.
    pub out: PathBuf,
    /// Seconds between /metrics scrapes.
    pub scrape_interval_seconds: f64,
    /// Per-request timeout in seconds.
    pub request_timeout_seconds: f64,
    /// Most requests in flight; arrivals beyond it are counted as dropped.
    pub max_in_flight: u64,
    /// Queue depth per replica still counted as about zero.
    pub queue_tolerance: f64,
    /// Latency has bent when P95 e2e exceeds this factor of the best earlier step.
    pub latency_bend: f64,
    /// Smallest queueDepthPerReplica to recommend.
    pub min_queue_depth: u32,
    /// The P95 TTFT SLO, seconds: with it (or `itl_slo_seconds`) the capacity within the SLO is
    /// measured and is the prior the snippet prints.
    pub ttft_slo_seconds: Option<f64>,
    /// The P95 ITL SLO, seconds.
    pub itl_slo_seconds: Option<f64>,
    /// Seed for sizes and Poisson arrivals.
    pub seed: u64,
    /// scalerAddress written into the ScaledObject snippet.
    pub scaler_address: String,
    /// No live progress line.
    pub quiet: bool,
}

impl Default for LoadtestOptions {
    fn default() -> Self {
        Self {
            url: String::new(),
            model: String::new(),
            rps: Vec::new(),
            rps_range: None,
            step_seconds: 60.0,
            rest_seconds: 30.0,
            warmup: 100,
            shape: "fixed:512:128".to_owned(),
            arrivals: Arrivals::Uniform,
            metrics_urls: Vec::new(),
            no_metrics: false,
            replicas: None,
            out: PathBuf::from("loadtest-report"),
            scrape_interval_seconds: 1.0,
            request_timeout_seconds: 300.0,
            max_in_flight: 20_000,
            queue_tolerance: 1.0,
            latency_bend: 2.0,
            min_queue_depth: 3,
            ttft_slo_seconds: None,
            itl_slo_seconds: None,
            seed: 1,
            scaler_address: "vllm-keda-scaler.keda.svc.cluster.local:9090".to_owned(),
            quiet: false,
        }
    }
}

/// A validated load test.
#[derive(Debug, Clone)]
pub struct LoadtestConfig {
    /// Base URL without a trailing slash.
    pub url: String,
    /// Model name.
    pub model: String,
    /// The steps.
    pub plan: Vec<LoadStep>,
    /// Rest between steps.
    pub rest: Duration,
    /// Warm-up requests.
    pub warmup: u32,
    /// Request sizes.
    pub shape: Shape,
    /// Arrival spacing.
    pub arrivals: Arrivals,
    /// /metrics URLs (empty: none).
    pub metrics_urls: Vec<String>,
    /// Output directory.
    pub out: PathBuf,
    /// Scrape interval.
    pub scrape_interval: Duration,
    /// Per-request timeout.
    pub request_timeout: Duration,
    /// In-flight limit.
    pub max_in_flight: u64,
    /// Verdict rules.
    pub verdict: VerdictSettings,
    /// Seed.
    pub seed: u64,
    /// scalerAddress for the snippet.
    pub scaler_address: String,
    /// Show the progress line.
    pub progress: bool,
}

/// Parses `FROM:TO:STEP` into the rates FROM, FROM+STEP, ... up to TO.
pub fn parse_rps_range(text: &str) -> anyhow::Result<Vec<f64>> {
    let bad = || {
        anyhow::anyhow!(
            "--rps-range {text:?}: expected FROM:TO:STEP with 0 < FROM <= TO and STEP > 0 (e.g. 10:70:10)"
        )
    };
    let parts: Vec<f64> = text
        .split(':')
        .map(|p| p.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    let [from, to, step] = parts[..] else {
        return Err(bad());
    };
    if !(from.is_finite()
        && to.is_finite()
        && step.is_finite()
        && from > 0.0
        && to >= from
        && step > 0.0)
    {
        return Err(bad());
    }
    let count = ((to - from) / step + 1e-9).floor() as usize + 1;
    anyhow::ensure!(
        count <= 1000,
        "--rps-range {text:?}: {count} steps is too many (at most 1000)"
    );
    // Rounded to a billionth, so 0.2:1.6:0.2 offers 0.6 req/s, not 0.6000000000000001.
    Ok((0..count)
        .map(|k| ((from + k as f64 * step) * 1e9).round() / 1e9)
        .collect())
}

/// The base URL: trimmed, without a trailing slash, http(s) only.
pub fn base_url(flag: &str, url: &str) -> anyhow::Result<String> {
    let url = url.trim().trim_end_matches('/');
    anyhow::ensure!(
        (url.starts_with("http://") || url.starts_with("https://")) && url.len() > "http://".len(),
        "--{flag} {url:?}: expected an http:// URL such as http://127.0.0.1:8000"
    );
    Ok(url.to_string())
}

impl TryFrom<LoadtestOptions> for LoadtestConfig {
    type Error = anyhow::Error;

    fn try_from(a: LoadtestOptions) -> anyhow::Result<Self> {
        let url = base_url("url", &a.url)?;
        anyhow::ensure!(
            !a.model.trim().is_empty(),
            "--model: expected the served model name"
        );
        let rates = match (&a.rps_range, a.rps.is_empty()) {
            (Some(range), _) => parse_rps_range(range)?,
            (None, true) => (1..=7).map(|k| 10.0 * f64::from(k)).collect(),
            (None, false) => a.rps.clone(),
        };
        for r in &rates {
            anyhow::ensure!(
                r.is_finite() && *r > 0.0,
                "--rps {r}: expected positive requests per second"
            );
        }
        let step = seconds::flag("step-seconds", a.step_seconds, false)?;
        let rest = seconds::flag("rest-seconds", a.rest_seconds, true)?;
        let plan = step_plan(&rates, step, rest);
        let shape = Shape::parse(&a.shape)?;
        let metrics_urls = if a.no_metrics {
            Vec::new()
        } else if a.metrics_urls.is_empty() {
            vec![format!("{url}/metrics")]
        } else {
            a.metrics_urls
                .iter()
                .map(|u| base_url("metrics-url", u))
                .collect::<anyhow::Result<_>>()?
        };
        let replicas = a.replicas.unwrap_or(metrics_urls.len().max(1));
        anyhow::ensure!(replicas > 0, "--replicas 0: expected at least one replica");
        anyhow::ensure!(
            a.max_in_flight > 0,
            "--max-in-flight 0: expected at least 1"
        );
        anyhow::ensure!(
            a.latency_bend.is_finite() && a.latency_bend > 1.0,
            "--latency-bend {}: expected a factor above 1 (e.g. 2)",
            a.latency_bend
        );
        anyhow::ensure!(
            a.queue_tolerance.is_finite() && a.queue_tolerance >= 0.0,
            "--queue-tolerance {}: expected a non-negative queue depth",
            a.queue_tolerance
        );
        for (flag, v) in [
            ("ttft-slo-seconds", a.ttft_slo_seconds),
            ("itl-slo-seconds", a.itl_slo_seconds),
        ] {
            if let Some(v) = v {
                anyhow::ensure!(
                    v.is_finite() && v > 0.0 && v <= 3600.0,
                    "--{flag} {v}: expected a P95 latency SLO in seconds, above 0 and at most 3600 (e.g. 2 for TTFT, 0.07 for ITL)"
                );
            }
        }
        let slo =
            (a.ttft_slo_seconds.is_some() || a.itl_slo_seconds.is_some()).then_some(LatencySlo {
                ttft_seconds: a.ttft_slo_seconds,
                itl_seconds: a.itl_slo_seconds,
            });
        Ok(LoadtestConfig {
            url,
            model: a.model.trim().to_string(),
            plan,
            rest,
            warmup: a.warmup,
            shape,
            arrivals: a.arrivals,
            metrics_urls,
            out: a.out,
            scrape_interval: seconds::flag(
                "scrape-interval-seconds",
                a.scrape_interval_seconds,
                false,
            )?,
            request_timeout: seconds::flag(
                "request-timeout-seconds",
                a.request_timeout_seconds,
                false,
            )?,
            max_in_flight: a.max_in_flight,
            verdict: VerdictSettings {
                replicas,
                queue_zero_tolerance: a.queue_tolerance,
                latency_bend_factor: a.latency_bend,
                max_error_rate: 0.01,
                min_queue_depth_per_replica: a.min_queue_depth.max(1),
                slo,
            },
            seed: a.seed,
            scaler_address: a.scaler_address,
            progress: !a.quiet,
        })
    }
}

/// A warm-up as asked for. [`Default`] is the command line's defaults (`url` and `model` have
/// none: set them).
#[derive(Debug, Clone, PartialEq)]
pub struct WarmupOptions {
    /// Base URL of the OpenAI-compatible server (e.g. http://127.0.0.1:8000).
    pub url: String,
    /// Model name to request.
    pub model: String,
    /// Sequential requests to send once the server is healthy.
    pub requests: u32,
    /// File written after the warm-up succeeded (for a readiness probe).
    pub ready_file: Option<PathBuf>,
    /// Give up (an error) when the server is not healthy and warmed up within this time.
    pub timeout_seconds: f64,
    /// Prompt tokens per warm-up request.
    pub prompt_tokens: u32,
    /// Output tokens per warm-up request.
    pub output_tokens: u32,
    /// Health path polled before the first request.
    pub health_path: String,
}

impl Default for WarmupOptions {
    fn default() -> Self {
        Self {
            url: String::new(),
            model: String::new(),
            requests: 100,
            ready_file: None,
            timeout_seconds: 600.0,
            prompt_tokens: 128,
            output_tokens: 32,
            health_path: "/health".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rps_ranges() {
        assert_eq!(
            parse_rps_range("10:70:10").unwrap(),
            vec![10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0]
        );
        assert_eq!(parse_rps_range("0.5:1.5:0.5").unwrap(), vec![0.5, 1.0, 1.5]);
        // A decimal step adds up exactly as written, as the tables print the rates.
        assert_eq!(
            parse_rps_range("0.2:1.6:0.2").unwrap(),
            vec![0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6]
        );
        for bad in ["10:70", "70:10:10", "10:70:0", "a:b:c", "0:10:1"] {
            assert!(
                parse_rps_range(bad)
                    .unwrap_err()
                    .to_string()
                    .contains("FROM:TO:STEP"),
                "{bad}"
            );
        }
        assert!(base_url("url", "localhost:8000").is_err());
    }

    #[test]
    fn latency_slos_are_checked_and_become_the_verdicts_slo() {
        let opts = |ttft, itl| LoadtestOptions {
            url: "http://127.0.0.1:8000".into(),
            model: "m".into(),
            ttft_slo_seconds: ttft,
            itl_slo_seconds: itl,
            ..LoadtestOptions::default()
        };
        let c = LoadtestConfig::try_from(opts(Some(2.0), None)).unwrap();
        assert_eq!(
            c.verdict.slo,
            Some(LatencySlo {
                ttft_seconds: Some(2.0),
                itl_seconds: None
            })
        );
        let c = LoadtestConfig::try_from(opts(None, None)).unwrap();
        assert_eq!(c.verdict.slo, None);
        for (ttft, itl, flag) in [
            (Some(0.0), None, "--ttft-slo-seconds 0"),
            (None, Some(f64::NAN), "--itl-slo-seconds NaN"),
            (Some(-1.0), Some(0.07), "--ttft-slo-seconds -1"),
        ] {
            let e = LoadtestConfig::try_from(opts(ttft, itl))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(flag) && e.contains("SLO in seconds"), "{e}");
        }
        assert_eq!(base_url("url", "http://h:1/").unwrap(), "http://h:1");
    }
}
