//! Presenting a load test: a plain-text table, Markdown and JSON reports, an SVG plot and a
//! ScaledObject metadata snippet.
//!
//! Owns: formats and file names in the output directory. Does not own: the numbers (see the
//! verdict). Everything but [`write_reports`] is pure string building.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::monitor::MonitorSample;
use super::verdict::{Percentiles, SloCapacity, StepResult, Verdict, VerdictSettings};
use crate::plot::{Axis, Chart, Series, stack};
use vllm_keda_core::policy::proactive::capacity_setting;

/// Everything a load test produced.
#[derive(Debug, Clone, Serialize)]
pub struct LoadtestReport {
    /// Base URL tested.
    pub url: String,
    /// Model requested.
    pub model: String,
    /// Request sizes.
    pub shape: String,
    /// Arrival spacing.
    pub arrivals: String,
    /// /metrics URLs scraped.
    pub metrics_urls: Vec<String>,
    /// Seconds of load per step.
    pub step_seconds: f64,
    /// Seconds of rest between steps.
    pub rest_seconds: f64,
    /// Warm-up requests sent (and how many failed).
    pub warmup_requests: u32,
    /// Warm-up requests that failed.
    pub warmup_failures: u32,
    /// Stopped early by Ctrl-C.
    pub interrupted: bool,
    /// The verdict rules used.
    pub settings: VerdictSettings,
    /// Measured steps.
    pub steps: Vec<StepResult>,
    /// The outcome.
    pub verdict: Verdict,
    /// Queue depth over time: `(seconds since start, queue depth)`.
    pub queue_timeline: Vec<(f64, f64)>,
    /// The first scrape error seen, if any.
    pub scrape_error: Option<String>,
    /// scalerAddress for the snippet.
    pub scaler_address: String,
}

/// Builds the queue timeline from monitor samples.
pub fn queue_timeline(samples: &[MonitorSample]) -> Vec<(f64, f64)> {
    samples
        .iter()
        .map(|s| {
            let q = s
                .signals
                .as_ref()
                .map_or(f64::NAN, |sig| sig.fleet.queue_depth);
            (s.at.as_secs_f64(), q)
        })
        .collect()
}

fn secs(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v < 0.01 => format!("{:.1}ms", v * 1000.0),
        Some(v) if v < 1.0 => format!("{:.0}ms", v * 1000.0),
        Some(v) => format!("{v:.2}s"),
    }
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

/// An offered rate as given ("0.6"), or "-".
fn rate(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn p3(p: &Percentiles) -> String {
    format!("{}/{}/{}", secs(p.p50), secs(p.p95), secs(p.p99))
}

/// The per-step table, in plain text with aligned columns.
pub fn text_table(report: &LoadtestReport) -> String {
    let header = [
        "step",
        "offered",
        "sent/s",
        "done/s",
        "err%",
        "TTFT p50/95/99",
        "ITL p50/95/99",
        "e2e p50/95/99",
        "srv e2e p95",
        "queue mean/max",
        "run max",
        "KV max",
        "lag p99 disp/start",
        "verdict",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for (s, j) in report.steps.iter().zip(&report.verdict.steps) {
        let server = s.server.as_ref();
        rows.push(vec![
            format!("{}{}", s.index + 1, if s.partial { "*" } else { "" }),
            format!("{}", s.offered_rps),
            format!("{:.1}", s.achieved_rps),
            format!("{:.1}", s.completed_rps),
            format!("{:.1}", s.error_rate() * 100.0),
            p3(&s.ttft),
            p3(&s.itl),
            p3(&s.e2e),
            secs(server.and_then(|v| v.e2e.p95)),
            format!(
                "{}/{}",
                num(server.and_then(|v| v.queue.mean), 1),
                num(server.and_then(|v| v.queue.max), 0)
            ),
            num(server.and_then(|v| v.running_max), 0),
            server
                .and_then(|v| v.kv_usage_max)
                .map_or_else(|| "-".into(), |k| format!("{:.0}%", k * 100.0)),
            format!("{}/{}", secs(s.send_lag.p99), secs(s.start_lag.p99)),
            if j.saturated {
                "SATURATED".into()
            } else {
                "ok".into()
            },
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:>w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
        if i == 0 {
            let _ = writeln!(
                out,
                "{}",
                "-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1))
            );
        }
    }
    out
}

/// The recommendation in a few lines.
pub fn recommendation_text(report: &LoadtestReport) -> String {
    let v = &report.verdict;
    let mut out = String::new();
    let _ = writeln!(out, "verdict: {}", v.summary);
    match v.queue_depth_per_replica {
        Some(n) => {
            let _ = writeln!(
                out,
                "recommended queueDepthPerReplica: {n} ({})",
                v.queue_depth_basis
            );
        }
        None => {
            let _ = writeln!(
                out,
                "recommended queueDepthPerReplica: none ({})",
                v.queue_depth_basis
            );
        }
    }
    if let Some(c) = v.capacity_rps_per_replica {
        let _ = writeln!(
            out,
            "per-replica capacity: {c:.1} req/s, {} tokens/s ({} output tokens/s); peak completions {} req/s",
            num(v.capacity_tokens_per_second_per_replica, 0),
            num(v.capacity_output_tokens_per_second_per_replica, 0),
            num(v.peak_ok_rps_per_replica, 1)
        );
    }
    if let Some(c) = &v.slo_capacity {
        let _ = writeln!(out, "{}", slo_capacity_text(c));
    }
    if report.interrupted {
        let _ = writeln!(
            out,
            "interrupted: the results cover the steps measured before Ctrl-C (* = partial step)"
        );
    }
    if let Some(e) = &report.scrape_error {
        let _ = writeln!(out, "note: scraping /metrics failed at least once: {e}");
    }
    out
}

/// One line on the capacity within the latency SLO.
fn slo_capacity_text(c: &SloCapacity) -> String {
    let slo = c.slo.describe();
    let broken = |i: usize| {
        format!(
            "step {} ({} req/s) broke it: {}",
            i + 1,
            rate(c.broken_rps),
            c.reasons.join("; ")
        )
    };
    match (c.step, c.rps_per_replica, c.broken_at) {
        (Some(i), Some(r), Some(b)) => format!(
            "capacity within the SLO ({slo}): {r:.2} req/s per replica at {} req/s offered (step {}); {}",
            rate(c.offered_rps),
            i + 1,
            broken(b)
        ),
        (Some(i), Some(r), None) => format!(
            "capacity within the SLO ({slo}): at least {r:.2} req/s per replica: every step held it, up to {} req/s offered (step {}); rerun with higher rates to find it",
            rate(c.offered_rps),
            i + 1
        ),
        (_, _, Some(b)) => format!(
            "capacity within the SLO ({slo}): none measured: the first {}; rerun with lower rates",
            broken(b)
        ),
        _ => format!("capacity within the SLO ({slo}): no steps were measured"),
    }
}

/// The ScaledObject trigger with the measured values.
pub fn scaledobject_snippet(report: &LoadtestReport) -> String {
    let v = &report.verdict;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Measured by `vllm-keda-scaler loadtest` against {}.",
        report.url
    );
    let _ = writeln!(out, "# {}", v.summary);
    if let Some(c) = v.capacity_rps_per_replica {
        let _ = writeln!(
            out,
            "# Per-replica capacity: {c:.1} req/s, {} tokens/s.",
            num(v.capacity_tokens_per_second_per_replica, 0)
        );
    }
    let _ = writeln!(out, "triggers:");
    let _ = writeln!(out, "  - type: external");
    let _ = writeln!(out, "    metadata:");
    let _ = writeln!(out, "      scalerAddress: {}", report.scaler_address);
    let _ = writeln!(out, "      model: {:?}", report.model);
    // The proactive policy starts from this capacity instead of learning it from the fleet
    // first; the start-up time is not measured here (the comment asks for it). With a latency SLO
    // given, the prior is the capacity within it (what the policy learns: a throughput
    // served within the SLO), not the guide's saturation.
    let prior = match &v.slo_capacity {
        Some(c) => c
            .rps_per_replica
            .map(|r| {
                let at_least = if c.broken_at.is_none() {
                    " (at least: every step held it)"
                } else {
                    ""
                };
                (
                    r,
                    format!(
                        "one replica's capacity within the SLO ({}){at_least}",
                        c.slo.describe()
                    ),
                )
            })
            .ok_or_else(|| format!("no step held the SLO: {}", c.slo.describe())),
        None => v
            .capacity_rps_per_replica
            .map(|r| {
                (
                    r,
                    "one replica's capacity at the last healthy step".to_owned(),
                )
            })
            .ok_or_else(|| "no healthy step measured a prior".to_owned()),
    };
    match prior {
        Ok((r, basis)) => {
            let _ = writeln!(
                out,
                "      policy: \"proactive; {}\"  # prior: {basis}, for these request sizes ({}); add `; startup=S`, your pods' mean start-up in seconds (recommended, docs/policy.md)",
                capacity_setting(r),
                report.shape
            );
        }
        Err(why) => {
            let _ = writeln!(
                out,
                "      # policy: proactive, its capacity learned from the fleet ({why})"
            );
        }
    }
    match v.queue_depth_per_replica {
        Some(n) => {
            let _ = writeln!(out, "      queueDepthPerReplica: \"{n}\"");
        }
        None => {
            let _ = writeln!(
                out,
                "      # queueDepthPerReplica: not measured ({})",
                v.queue_depth_basis
            );
        }
    }
    // Scale-in waits for each latency below half its SLO, so an SLO at twice the healthy P95
    // lets a healthy fleet scale in while a bending one scales out.
    // The SLOs the capacity was measured within, when given, are the ones to deploy with.
    let slo = v.slo_capacity.as_ref().map(|c| c.slo);
    for (key, what, p95, step, default, given) in [
        (
            "ttftSloSeconds",
            "TTFT",
            v.healthy_ttft_p95_seconds,
            0.1,
            "2",
            slo.and_then(|s| s.ttft_seconds),
        ),
        (
            "itlSloSeconds",
            "ITL",
            v.healthy_itl_p95_seconds,
            0.005,
            "0.07",
            slo.and_then(|s| s.itl_seconds),
        ),
    ] {
        if let Some(slo) = given {
            let _ = writeln!(
                out,
                "      {key}: \"{slo}\"  # the SLO the capacity was measured within"
            );
        } else if let Some(p95) = p95 {
            let slo = format!("{:.3}", (p95 * 2.0 / step).ceil() * step);
            let slo = slo.trim_end_matches('0').trim_end_matches('.');
            let _ = writeln!(
                out,
                "      {key}: \"{slo}\"  # twice the healthy P95 {what} ({p95:.3} s); default {default}; use your own SLO if stricter"
            );
        }
    }
    if let Some(p95) = v.healthy_e2e_p95_seconds {
        let _ = writeln!(
            out,
            "      # latencySloSeconds: left at its 60 s default (a runaway guard): e2e latency grows with output length (healthy P95 here {p95:.2} s)"
        );
    }
    out
}

/// The Markdown report.
pub fn markdown(report: &LoadtestReport) -> String {
    let v = &report.verdict;
    let mut out = String::new();
    let _ = writeln!(out, "# Load test: {} ({})\n", report.url, report.model);
    let _ = writeln!(
        out,
        "Steps of {} s with {} s rests; {}; {} arrivals; warm-up {} requests ({} failed); metrics from {}.\n",
        report.step_seconds,
        report.rest_seconds,
        report.shape,
        report.arrivals,
        report.warmup_requests,
        report.warmup_failures,
        if report.metrics_urls.is_empty() {
            "nowhere (client side only)".to_string()
        } else {
            report.metrics_urls.join(", ")
        }
    );
    let _ = writeln!(out, "## Verdict\n");
    for line in recommendation_text(report).lines() {
        let _ = writeln!(out, "- {line}");
    }
    let _ = writeln!(
        out,
        "\n![offered load against queue depth and P95 latency](loadtest.svg)\n"
    );
    let _ = writeln!(out, "## Steps (client side)\n");
    let _ = writeln!(
        out,
        "| step | offered req/s | sent req/s | completed req/s in the step | ok | errors | TTFT p50/p95/p99 | ITL p50/p95/p99 | e2e p50/p95/p99 | lag p99 dispatch / start | verdict |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
    for (s, j) in report.steps.iter().zip(&v.steps) {
        let errors = if s.error_kinds.is_empty() && s.dropped == 0 {
            "0".to_string()
        } else {
            let mut kinds: Vec<String> = s
                .error_kinds
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            if s.dropped > 0 {
                kinds.push(format!("dropped {}", s.dropped));
            }
            kinds.join(", ")
        };
        let _ = writeln!(
            out,
            "| {}{} | {} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} | {} |",
            s.index + 1,
            if s.partial { " (partial)" } else { "" },
            s.offered_rps,
            s.achieved_rps,
            s.completed_rps,
            s.ok,
            errors,
            p3(&s.ttft),
            p3(&s.itl),
            p3(&s.e2e),
            secs(s.send_lag.p99),
            if j.saturated {
                format!("**saturated**: {}", j.reasons.join("; "))
            } else {
                "ok".into()
            }
        );
    }
    let _ = writeln!(out, "\n## Steps (server side, from /metrics)\n");
    let _ = writeln!(
        out,
        "| step | pods | queue mean / 2nd-half mean / max / after rest | running mean / max | KV mean / max | TTFT p50/p95/p99 | ITL p50/p95/p99 | e2e p50/p95/p99 | req/s | prompt tok/s | output tok/s |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
    for s in &report.steps {
        match &s.server {
            None => {
                let _ = writeln!(
                    out,
                    "| {} | - | no scrape answered | | | | | | | | |",
                    s.index + 1
                );
            }
            Some(sv) => {
                let pct =
                    |v: Option<f64>| v.map_or_else(|| "-".into(), |k| format!("{:.0}%", k * 100.0));
                let _ = writeln!(
                    out,
                    "| {} | {} | {} / {} / {} / {} | {} / {} | {} / {} | {} | {} | {} | {} | {} | {} |",
                    s.index + 1,
                    sv.pods_healthy,
                    num(sv.queue.mean, 1),
                    num(sv.queue.second_half_mean, 1),
                    num(sv.queue.max, 0),
                    num(sv.queue.after_rest, 0),
                    num(sv.running_mean, 1),
                    num(sv.running_max, 0),
                    pct(sv.kv_usage_mean),
                    pct(sv.kv_usage_max),
                    p3(&sv.ttft),
                    p3(&sv.itl),
                    p3(&sv.e2e),
                    num(sv.requests_per_second, 1),
                    num(sv.prompt_tokens_per_second, 0),
                    num(sv.generation_tokens_per_second, 0),
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "\n## ScaledObject trigger\n\n```yaml\n{}```",
        scaledobject_snippet(report)
    );
    out
}

/// The plot: offered load against queue depth (left) and P95 latency (right), the saturation
/// point marked; below it, the queue depth over time when it was scraped.
pub fn svg(report: &LoadtestReport) -> String {
    let by_step = |f: &dyn Fn(&StepResult) -> Option<f64>| -> Vec<(f64, f64)> {
        report
            .steps
            .iter()
            .map(|s| (s.offered_rps, f(s).unwrap_or(f64::NAN)))
            .collect()
    };
    let mut chart = Chart::new(format!("Load test: {} ({})", report.url, report.model))
        .x_label("offered load (req/s)")
        .y_label("queue depth (waiting requests)")
        .y2_label("P95 latency (s)")
        .series(
            Series::new(
                "queue max",
                by_step(&|s| s.server.as_ref().and_then(|v| v.queue.max)),
            )
            .dots(),
        )
        .series(
            Series::new(
                "queue mean, 2nd half",
                by_step(&|s| s.server.as_ref().and_then(|v| v.queue.second_half_mean)),
            )
            .dots(),
        )
        .series(
            Series::new("client P95 e2e", by_step(&|s| s.e2e.p95))
                .axis(Axis::Right)
                .dots(),
        )
        .series(
            Series::new("client P95 TTFT", by_step(&|s| s.ttft.p95))
                .axis(Axis::Right)
                .dashed(),
        )
        .series(
            Series::new(
                "server P95 e2e",
                by_step(&|s| s.server.as_ref().and_then(|v| v.e2e.p95)),
            )
            .axis(Axis::Right)
            .dashed(),
        );
    if let Some(rps) = report.verdict.saturation_rps {
        chart = chart.marker_colored(rps, format!("saturation at {rps} req/s"), "#d62728");
    }
    if let Some(n) = report.verdict.queue_depth_per_replica {
        chart = chart.ref_line(
            f64::from(n) * report.settings.replicas as f64,
            Axis::Left,
            format!("threshold N = {n} per replica"),
        );
    }
    let has_timeline = report.queue_timeline.iter().any(|p| p.1.is_finite());
    if !has_timeline {
        return chart.to_svg();
    }
    let mut timeline = Chart::new("Queue depth over time")
        .x_label("time since the first step (s)")
        .y_label("queue depth")
        .series(Series::new("queue depth", report.queue_timeline.clone()).color("#1f77b4"));
    let mut start = 0.0;
    for s in &report.steps {
        timeline = timeline.marker(start, format!("{} req/s", s.offered_rps));
        start += report.step_seconds + report.rest_seconds;
    }
    stack(&[chart, timeline])
}

/// Writes `report.json`, `report.md`, `loadtest.svg` and `scaledobject-snippet.yaml` into `dir`
/// (created if needed); returns the paths written.
pub fn write_reports(report: &LoadtestReport, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    use anyhow::Context as _;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the output directory {}", dir.display()))?;
    let files = [
        ("report.json", serde_json::to_string_pretty(report)? + "\n"),
        ("report.md", markdown(report)),
        ("loadtest.svg", svg(report)),
        ("scaledobject-snippet.yaml", scaledobject_snippet(report)),
    ];
    let mut written = Vec::new();
    for (name, body) in files {
        let path = dir.join(name);
        std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}
