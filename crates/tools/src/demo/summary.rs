//! What the demo recorded and what it leaves behind: the timeline, the scale events, the
//! request outcomes, the machine-readable `summary.json`, the text summary and the SVG plot.
//!
//! Owns: the record types and turning them into files and text. Does not own: collecting them
//! (see the parent module).

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::plot::{Axis, Chart, Series};

/// One row of the timeline (one per sample period).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// Seconds since the story started.
    pub t_seconds: f64,
    /// The story's phase.
    pub phase: &'static str,
    /// Requests sent per second (averaged over the last few seconds).
    pub offered_rps: f64,
    /// Requests answered per second (same averaging).
    pub completed_rps: f64,
    /// Requests sent and not answered yet (client side).
    pub in_flight: usize,
    /// Waiting requests over the fleet, as the scaler last saw them.
    pub queue: Option<f64>,
    /// Running requests over the fleet, as the scaler last saw them.
    pub running: Option<f64>,
    /// P95 end-to-end latency over the scaler's latency window.
    pub p95_e2e_seconds: Option<f64>,
    /// KV-cache usage of the fullest replica (0..1).
    pub kv_usage_max: Option<f64>,
    /// Replicas serving (ready and not draining).
    pub ready_replicas: u32,
    /// Replicas the HPA set (the Deployment's `spec.replicas`).
    pub hpa_replicas: u32,
    /// The scaler's latest replica target.
    pub target_replicas: Option<u32>,
    /// The reason code of the scaler's latest decision.
    pub reason: Option<String>,
}

/// A change of the scaler's target, with the decision that made it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScaleEvent {
    /// Seconds since the story started.
    pub t_seconds: f64,
    /// `out` or `in`.
    pub direction: &'static str,
    /// Target before.
    pub from: u32,
    /// Target after.
    pub to: u32,
    /// The decision's reason code (`queue_depth`, `scale_in_calm`, ...).
    pub reason: String,
    /// The decision's explanation.
    pub explanation: String,
}

/// Something that happened to the replicas or the HPA, for the log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetEvent {
    /// Seconds since the story started.
    pub t_seconds: f64,
    /// What happened.
    pub what: String,
}

/// The requests' outcomes, client side.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RequestTotals {
    /// Requests sent.
    pub sent: u64,
    /// Requests answered with a completion.
    pub ok: u64,
    /// Requests that failed (error status, connection error, timeout).
    pub failed: u64,
    /// Requests still unanswered when the demo stopped waiting.
    pub unfinished: u64,
    /// The end-to-end latency SLO the scaler was given.
    pub slo_seconds: f64,
    /// Answered requests within the SLO.
    pub within_slo: u64,
    /// `within_slo / ok` (1 when none was answered).
    pub slo_share: f64,
    /// Median end-to-end latency of answered requests.
    pub p50_e2e_seconds: Option<f64>,
    /// P95 end-to-end latency of answered requests.
    pub p95_e2e_seconds: Option<f64>,
}

impl RequestTotals {
    /// Totals from the answered requests' latencies and the counts.
    pub fn from_latencies(
        mut latencies: Vec<f64>,
        sent: u64,
        failed: u64,
        unfinished: u64,
        slo_seconds: f64,
    ) -> Self {
        latencies.sort_by(f64::total_cmp);
        let ok = latencies.len() as u64;
        let within_slo = latencies.iter().filter(|&&l| l <= slo_seconds).count() as u64;
        let quantile = |q: f64| -> Option<f64> {
            if latencies.is_empty() {
                return None;
            }
            let rank = ((q * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len());
            Some(latencies[rank - 1])
        };
        Self {
            sent,
            ok,
            failed,
            unfinished,
            slo_seconds,
            within_slo,
            slo_share: if ok == 0 {
                1.0
            } else {
                within_slo as f64 / ok as f64
            },
            p50_e2e_seconds: quantile(0.5),
            p95_e2e_seconds: quantile(0.95),
        }
    }
}

/// Paths of the files written.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Files {
    /// `summary.json`.
    pub summary: PathBuf,
    /// The SVG plot.
    pub plot: PathBuf,
    /// The timeline as CSV.
    pub timeline: PathBuf,
}

/// Everything `summary.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// `full` or `quick`.
    pub mode: &'static str,
    /// Wall-clock length of the story in seconds (load start to load end).
    pub story_seconds: f64,
    /// Wall-clock length of the whole run in seconds (start-up to summary).
    pub run_seconds: f64,
    /// The trace played and its attribution.
    pub trace: String,
    /// The story's phases.
    pub story: super::load::Story,
    /// The shortened periods and the scaler metadata used.
    pub settings: serde_json::Value,
    /// Highest scaler target.
    pub peak_target_replicas: u32,
    /// Highest count of serving replicas.
    pub peak_ready_replicas: u32,
    /// The scaler's target at the end.
    pub final_target_replicas: u32,
    /// Serving replicas at the end.
    pub final_ready_replicas: u32,
    /// Every change of the scaler's target, with its reason.
    pub scale_events: Vec<ScaleEvent>,
    /// Replica and HPA events.
    pub fleet_events: Vec<FleetEvent>,
    /// HPA syncs done, and how many got no answer.
    pub hpa_syncs: u64,
    /// HPA syncs whose calls failed (the HPA then keeps its replicas).
    pub hpa_sync_errors: u64,
    /// KEDA polls done.
    pub keda_polls: u64,
    /// Client-side request outcomes.
    pub requests: RequestTotals,
    /// The files written.
    pub files: Files,
}

impl Summary {
    /// The text summary printed at the end.
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(s, "summary ({} demo)", self.mode);
        let _ = writeln!(
            s,
            "  run {:.0} s (story {:.0} s); replicas: peak target {}, peak ready {}, final target {}, final ready {}",
            self.run_seconds,
            self.story_seconds,
            self.peak_target_replicas,
            self.peak_ready_replicas,
            self.final_target_replicas,
            self.final_ready_replicas
        );
        let r = &self.requests;
        let _ = writeln!(
            s,
            "  requests: {} sent, {} served, {} failed, {} unfinished; {:.1} % within the {} s SLO; P50 {} P95 {}",
            r.sent,
            r.ok,
            r.failed,
            r.unfinished,
            r.slo_share * 100.0,
            r.slo_seconds,
            secs(r.p50_e2e_seconds),
            secs(r.p95_e2e_seconds)
        );
        let _ = writeln!(
            s,
            "  KEDA/HPA: {} HPA syncs ({} without an answer), {} KEDA polls",
            self.hpa_syncs, self.hpa_sync_errors, self.keda_polls
        );
        let _ = writeln!(s, "  scale events:");
        if self.scale_events.is_empty() {
            let _ = writeln!(s, "    none");
        }
        for e in &self.scale_events {
            let _ = writeln!(
                s,
                "    {:>6.1} s  {} -> {}  {}: {}",
                e.t_seconds, e.from, e.to, e.reason, e.explanation
            );
        }
        s
    }
}

fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2} s"))
}

/// Writes the timeline as CSV.
pub fn write_timeline(path: &Path, samples: &[Sample]) -> std::io::Result<()> {
    use std::fmt::Write as _;
    let opt = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.4}"));
    let mut s = String::from(
        "t_seconds,phase,offered_rps,completed_rps,in_flight,queue,running,p95_e2e_seconds,kv_usage_max,ready_replicas,hpa_replicas,target_replicas,reason\n",
    );
    for x in samples {
        let _ = writeln!(
            s,
            "{:.2},{},{:.3},{:.3},{},{},{},{},{},{},{},{},{}",
            x.t_seconds,
            x.phase,
            x.offered_rps,
            x.completed_rps,
            x.in_flight,
            opt(x.queue),
            opt(x.running),
            opt(x.p95_e2e_seconds),
            opt(x.kv_usage_max),
            x.ready_replicas,
            x.hpa_replicas,
            x.target_replicas
                .map_or_else(String::new, |v| v.to_string()),
            x.reason.as_deref().unwrap_or("")
        );
    }
    std::fs::write(path, s)
}

/// The plot: load, queue and latency, replicas, over time, with the scale events marked.
pub fn plot(
    samples: &[Sample],
    events: &[ScaleEvent],
    slo_seconds: f64,
    story: &super::load::Story,
) -> String {
    let pts = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        samples
            .iter()
            .map(|s| (s.t_seconds, f(s).unwrap_or(f64::NAN)))
            .collect()
    };
    let mut phase_marks = Vec::new();
    let mut start = 0.0;
    for p in &story.phases {
        phase_marks.push((start, p.name));
        start += p.duration.as_secs_f64();
    }
    let with_phases = |mut chart: Chart| {
        for (x, name) in &phase_marks {
            chart = chart.marker(*x, *name);
        }
        chart
    };
    let load = with_phases(
        Chart::new("offered load and KV-cache usage")
            .x_label("seconds")
            .y_label("requests per second")
            .y2_label("KV-cache usage, fullest replica (%)")
            .size(900.0, 260.0)
            .series(Series::new("offered req/s", pts(&|s| Some(s.offered_rps))))
            .series(Series::new("served req/s", pts(&|s| Some(s.completed_rps))).dashed())
            .series(
                Series::new("KV usage %", pts(&|s| s.kv_usage_max.map(|v| v * 100.0)))
                    .axis(Axis::Right),
            ),
    );
    let queue = with_phases(
        Chart::new("queue and latency (as the scaler sees them)")
            .x_label("seconds")
            .y_label("waiting requests")
            .y2_label("P95 end-to-end latency (s)")
            .size(900.0, 260.0)
            .series(Series::new("queue", pts(&|s| s.queue)))
            .series(Series::new("P95 e2e s", pts(&|s| s.p95_e2e_seconds)).axis(Axis::Right))
            .ref_line(slo_seconds, Axis::Right, "latency SLO"),
    );
    let mut replicas =
        Chart::new("replicas (markers: the scaler's target changes, red out, green in)")
            .x_label("seconds")
            .y_label("replicas")
            .size(900.0, 300.0)
            .series(Series::new("scaler target", pts(&|s| s.target_replicas.map(f64::from))).step())
            .series(
                Series::new("HPA replicas", pts(&|s| Some(f64::from(s.hpa_replicas))))
                    .step()
                    .dashed(),
            )
            .series(
                Series::new(
                    "ready replicas",
                    pts(&|s| Some(f64::from(s.ready_replicas))),
                )
                .step(),
            );
    for e in events {
        let color = if e.direction == "out" {
            "#d62728"
        } else {
            "#2ca02c"
        };
        replicas = replicas.marker_colored(e.t_seconds, e.to.to_string(), color);
    }
    crate::plot::stack(&[load, queue, replicas])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_count_the_slo_share_and_quantiles() {
        let t = RequestTotals::from_latencies(vec![1.0, 2.0, 3.0, 12.0], 6, 1, 1, 10.0);
        assert_eq!(t.ok, 4);
        assert_eq!(t.within_slo, 3);
        assert!((t.slo_share - 0.75).abs() < 1e-12);
        assert_eq!(t.p50_e2e_seconds, Some(2.0));
        assert_eq!(t.p95_e2e_seconds, Some(12.0));
        let none = RequestTotals::from_latencies(Vec::new(), 0, 0, 0, 10.0);
        assert_eq!(none.slo_share, 1.0);
        assert_eq!(none.p95_e2e_seconds, None);
    }
}
