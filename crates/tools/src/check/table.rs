//! The human-readable rendering of a [`Report`]: fleet block, per-target table, found and
//! warning lines.

use std::fmt::Write as _;

use vllm_keda_core::signals::{Quantiles, SignalSet};

use super::report::Report;

impl Report {
    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let o = &mut out;
        let _ = writeln!(
            o,
            "vLLM check: {} of {} target(s) healthy, {:.1} s between the two rounds\n",
            self.pods_healthy, self.pods_total, self.elapsed_seconds
        );
        let _ = writeln!(o, "fleet (healthy targets only)");
        signal_block(o, &self.fleet);
        if let Some(gpu) = &self.gpu {
            let _ = writeln!(
                o,
                "  {:<22} {} GPUs, memory used max {} mean {}, util max {} mean {}, power {} W, \
                 ECC errors/s {}",
                "gpu (dcgm)",
                gpu.gpus,
                num(gpu.memory_used_fraction.max),
                num(gpu.memory_used_fraction.mean),
                num(gpu.utilization.max),
                num(gpu.utilization.mean),
                num(gpu.power_watts_total),
                num(gpu.ecc_errors_per_second)
            );
        }
        let _ = writeln!(
            o,
            "\n{:<44} {:>7} {:>6} {:>7} {:>7} {:>7} {:>8} {:>7} {:>9}",
            "target",
            "health",
            "queue",
            "running",
            "kv max",
            "e2e p95",
            "ttft p95",
            "itl p95",
            "req/s"
        );
        for pod in &self.pods {
            let s = &pod.signals;
            let health = match (pod.healthy, pod.reset_in_window) {
                (false, _) => "unknown",
                (true, true) => "restart",
                (true, false) => "ok",
            };
            let _ = writeln!(
                o,
                "{:<44} {:>7} {:>6} {:>7} {:>7} {:>7} {:>8} {:>7} {:>9}",
                shorten(&pod.pod, 44),
                health,
                if pod.healthy {
                    num(Some(s.queue_depth))
                } else {
                    "-".into()
                },
                if pod.healthy {
                    num(Some(s.running))
                } else {
                    "-".into()
                },
                num(s.kv_cache_usage.max),
                num(s.e2e_latency_seconds.p95),
                num(s.ttft_seconds.p95),
                num(s.itl_seconds.p95),
                num(s.requests_per_second)
            );
        }
        for (title, lines) in [("found", &self.found), ("warnings", &self.warnings)] {
            let _ = writeln!(o, "\n{title}:");
            if lines.is_empty() {
                let _ = writeln!(o, "  none");
            }
            for line in lines {
                let _ = writeln!(o, "  - {line}");
            }
        }
        out
    }
}

fn num(value: Option<f64>) -> String {
    match value {
        None => "-".into(),
        Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0}"),
        Some(v) if v.abs() >= 1000.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 100.0 => format!("{v:.1}"),
        Some(v) if v.abs() >= 1.0 => format!("{v:.2}"),
        Some(v) => format!("{v:.4}"),
    }
}

fn shorten(text: &str, width: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= width {
        return text.to_owned();
    }
    let tail: String = chars[chars.len() - (width - 3)..].iter().collect();
    format!("...{tail}")
}

fn signal_block(o: &mut String, s: &SignalSet) {
    let q = |q: &Quantiles| {
        format!(
            "p50 {:<9} p95 {:<9} p99 {}",
            num(q.p50),
            num(q.p95),
            num(q.p99)
        )
    };
    let reasons: Vec<String> = s
        .finished_per_second_by_reason
        .iter()
        .map(|(reason, rate)| format!("{reason} {}", num(Some(*rate))))
        .collect();
    let rows = [
        ("queue depth", num(Some(s.queue_depth))),
        ("running", num(Some(s.running))),
        (
            "kv cache usage",
            format!(
                "max {}  mean {}",
                num(s.kv_cache_usage.max),
                num(s.kv_cache_usage.mean)
            ),
        ),
        ("e2e latency (s)", q(&s.e2e_latency_seconds)),
        ("ttft (s)", q(&s.ttft_seconds)),
        ("itl (s)", q(&s.itl_seconds)),
        ("queue time (s)", q(&s.queue_time_seconds)),
        (
            "requests/s",
            format!("{}  ({})", num(s.requests_per_second), reasons.join(", ")),
        ),
        ("preemptions/s", num(s.preemptions_per_second)),
        ("prompt tokens/s", num(s.prompt_tokens_per_second)),
        ("generation tokens/s", num(s.generation_tokens_per_second)),
        ("tokens per step", num(s.batch_tokens_per_step)),
    ];
    for (label, value) in rows {
        let _ = writeln!(o, "  {label:<22} {value}");
    }
}
