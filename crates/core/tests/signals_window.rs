//! FleetWindow semantics: engine sums, twins, health, restarts, baselines, fleet merges.
//! Bodies are rendered here in the shape vLLM writes and parsed by our parser.

use std::fmt::Write as _;
use std::time::Duration;

use vllm_keda_core::exposition;
use vllm_keda_core::signals::{
    Bucket, FleetWindow, PodSnapshot, SignalSettings, SnapshotError, histogram_quantile,
};

/// One vLLM pod's state; every engine reports the same numbers.
#[derive(Clone)]
struct Pod {
    engines: usize,
    waiting: f64,
    running: f64,
    kv: Vec<f64>,
    preemptions: f64,
    generation_tokens: f64,
    stop: f64,
    length: f64,
    /// Cumulative e2e buckets per engine for `les`.
    e2e: Vec<f64>,
    les: Vec<&'static str>,
    start_time: f64,
    created: f64,
    /// Also write the old ITL name with identical data (vLLM 0.11 does).
    itl_twin: bool,
    /// `vllm:iteration_tokens_total` (steps, tokens), when written.
    iteration: Option<(f64, f64)>,
    /// A third finished reason, `abort`, when written (sorts before the others).
    abort: Option<f64>,
}

impl Pod {
    fn new() -> Self {
        Pod {
            engines: 1,
            waiting: 3.0,
            running: 5.0,
            kv: vec![0.5],
            preemptions: 10.0,
            generation_tokens: 1000.0,
            stop: 100.0,
            length: 10.0,
            e2e: vec![20.0, 60.0, 100.0, 110.0],
            les: vec!["1.0", "2.5", "10.0", "+Inf"],
            start_time: 1.7e9,
            created: 1.7e9 + 5.0,
            itl_twin: false,
            iteration: None,
            abort: None,
        }
    }

    /// Adds `n` finished requests per engine, spread over the e2e buckets by `weights`.
    fn finish(&mut self, per_bucket: &[f64]) {
        let mut cumulative = 0.0;
        for (bucket, add) in self.e2e.iter_mut().zip(per_bucket) {
            cumulative += add;
            *bucket += cumulative;
        }
        self.stop += cumulative;
        self.generation_tokens += 100.0 * cumulative;
    }

    fn body(&self) -> String {
        let mut out = String::new();
        let m = "model_name=\"m\"";
        writeln!(out, "process_start_time_seconds {}", self.start_time).unwrap();
        for e in 0..self.engines {
            let l = format!("engine=\"{e}\",{m}");
            let kv = self.kv[e.min(self.kv.len() - 1)];
            writeln!(out, "vllm:num_requests_waiting{{{l}}} {}", self.waiting).unwrap();
            writeln!(out, "vllm:num_requests_running{{{l}}} {}", self.running).unwrap();
            writeln!(out, "vllm:kv_cache_usage_perc{{{l}}} {kv}").unwrap();
            writeln!(
                out,
                "vllm:num_preemptions_total{{{l}}} {}",
                self.preemptions
            )
            .unwrap();
            writeln!(out, "vllm:num_preemptions_created{{{l}}} {}", self.created).unwrap();
            writeln!(
                out,
                "vllm:generation_tokens_total{{{l}}} {}",
                self.generation_tokens
            )
            .unwrap();
            writeln!(
                out,
                "vllm:generation_tokens_created{{{l}}} {}",
                self.created
            )
            .unwrap();
            if let Some((steps, tokens)) = self.iteration {
                let name = "vllm:iteration_tokens_total";
                writeln!(out, "{name}_bucket{{{l},le=\"1.0\"}} 0").unwrap();
                writeln!(out, "{name}_bucket{{{l},le=\"+Inf\"}} {steps}").unwrap();
                writeln!(out, "{name}_count{{{l}}} {steps}").unwrap();
                writeln!(out, "{name}_sum{{{l}}} {tokens}").unwrap();
            }
            let abort = self.abort.map(|v| ("abort", v));
            for (reason, v) in abort
                .into_iter()
                .chain([("stop", self.stop), ("length", self.length)])
            {
                writeln!(
                    out,
                    "vllm:request_success_total{{{l},finished_reason=\"{reason}\"}} {v}"
                )
                .unwrap();
            }
            let mut names = vec!["e2e_request_latency_seconds", "inter_token_latency_seconds"];
            if self.itl_twin {
                names.push("time_per_output_token_seconds");
            }
            for name in names {
                for (le, count) in self.les.iter().zip(&self.e2e) {
                    writeln!(out, "vllm:{name}_bucket{{{l},le=\"{le}\"}} {count}").unwrap();
                }
                let count = self.e2e.last().unwrap();
                writeln!(out, "vllm:{name}_count{{{l}}} {count}").unwrap();
                writeln!(out, "vllm:{name}_sum{{{l}}} {}", count * 2.0).unwrap();
                writeln!(out, "vllm:{name}_created{{{l}}} {}", self.created).unwrap();
            }
        }
        out
    }

    fn snapshot(&self) -> PodSnapshot {
        let body = self.body();
        let parsed = exposition::parse(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
        PodSnapshot::from_exposition(&parsed, None).unwrap_or_else(|e| panic!("{e}\n{body}"))
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn window() -> FleetWindow {
    FleetWindow::new(SignalSettings::default())
}

#[test]
fn engines_are_summed_and_twins_never_added() {
    let mut pod = Pod::new();
    pod.engines = 2;
    pod.kv = vec![0.2, 0.8];
    pod.itl_twin = true;
    let s = pod.snapshot();
    assert_eq!(s.waiting, Some(6.0));
    assert_eq!(s.running, Some(10.0));
    assert_eq!(s.kv_cache_usage_max, Some(0.8));
    assert!((s.kv_cache_usage_mean.unwrap() - 0.5).abs() < 1e-12);
    assert_eq!(s.request_success_total.get("stop"), Some(&200.0));
    assert_eq!(s.info.engines, 2);
    // The twin carries identical data: counted once, under the new name.
    assert_eq!(s.itl.as_ref().map(|h| h.count), Some(220.0));
    assert_eq!(
        s.info.ignored_twins,
        vec!["vllm:time_per_output_token_seconds"]
    );
    let e2e = s.e2e_latency.unwrap();
    let top = e2e.buckets.last().unwrap();
    assert_eq!((top.le, top.count), (f64::INFINITY, 220.0));
    // `_created` (about 1.7e9) was not added into anything.
    assert_eq!(e2e.count, 220.0);
    assert_eq!(s.created_min_seconds, Some(1.7e9 + 5.0));
}

#[test]
fn rates_and_quantiles_from_two_samples() {
    let mut w = window();
    let mut pod = Pod::new();
    w.record(secs(0), "a", Some(pod.snapshot()));
    // One sample: gauges, but no rates or quantiles yet.
    let first = w.compute(secs(0));
    assert_eq!(first.fleet.queue_depth, 3.0);
    assert_eq!(first.fleet.requests_per_second, None);
    assert_eq!(first.fleet.e2e_latency_seconds.p95, None);

    pod.finish(&[10.0, 20.0, 10.0, 0.0]);
    pod.preemptions += 6.0;
    w.record(secs(30), "a", Some(pod.snapshot()));
    let f = w.compute(secs(30)).fleet;
    assert_eq!(f.requests_per_second, Some(40.0 / 30.0));
    assert_eq!(f.requests_finished_in_window, 40.0);
    assert_eq!(f.finished_per_second_by_reason.get("length"), Some(&0.0));
    assert_eq!(f.generation_tokens_per_second, Some(4000.0 / 30.0));
    assert_eq!(f.preemptions_per_second, Some(6.0 / 30.0));
    let deltas = [
        (1.0, 10.0),
        (2.5, 30.0),
        (10.0, 40.0),
        (f64::INFINITY, 40.0),
    ]
    .map(|(le, count)| Bucket { le, count });
    assert_eq!(f.e2e_latency_seconds.p95, histogram_quantile(0.95, &deltas));
    assert_eq!(f.e2e_latency_seconds.p50, Some(1.75));
    assert_eq!(f.itl_seconds, f.e2e_latency_seconds);
}

#[test]
fn idle_is_calm_undefined_quantiles_and_zero_rates() {
    let mut w = window();
    let pod = Pod::new();
    w.record(secs(0), "a", Some(pod.snapshot()));
    w.record(secs(15), "a", Some(pod.snapshot()));
    let f = w.compute(secs(15)).fleet;
    assert_eq!(f.e2e_latency_seconds.p50, None);
    assert_eq!(f.ttft_seconds.p99, None);
    assert_eq!(f.requests_per_second, Some(0.0));
    assert_eq!(f.preemptions_per_second, Some(0.0));
    let json = serde_json::to_value(&f).unwrap();
    assert!(json["e2e_latency_seconds"]["p95"].is_null());
}

#[test]
fn failed_pod_is_unknown_never_zero_load() {
    let mut w = window();
    let mut a = Pod::new();
    let b = Pod::new();
    w.record(secs(0), "a", Some(a.snapshot()));
    w.record(secs(0), "b", Some(b.snapshot()));
    a.finish(&[1.0, 0.0, 0.0, 0.0]);
    w.record(secs(15), "a", Some(a.snapshot()));
    w.record(secs(15), "b", None);
    w.record(secs(15), "c", None);
    let s = w.compute(secs(15));
    assert_eq!((s.pods_total, s.pods_healthy), (3, 1));
    assert_eq!(s.fleet.queue_depth, 3.0);
    assert_eq!(s.fleet.running, 5.0);
    assert_eq!(s.fleet.requests_per_second, Some(1.0 / 15.0));
    assert_eq!(s.fleet.kv_cache_usage.mean, Some(0.5));
    let b_signals = s.pods.iter().find(|p| p.pod == "b").unwrap();
    assert!(!b_signals.healthy);
    // Forgetting pods gone from discovery.
    w.retain_pods(&["a".to_string()]);
    let s = w.compute(secs(15));
    assert_eq!((s.pods_total, s.pods_healthy), (1, 1));
}

#[test]
fn counter_reset_drops_the_pods_delta_never_negative() {
    let mut w = window();
    let mut pod = Pod::new();
    let other = Pod::new();
    w.record(secs(0), "a", Some(pod.snapshot()));
    w.record(secs(0), "b", Some(other.snapshot()));
    // Restart: counters start over (lower), markers change.
    let mut restarted = Pod::new();
    restarted.e2e = vec![1.0, 1.0, 1.0, 1.0];
    restarted.stop = 1.0;
    restarted.length = 0.0;
    restarted.preemptions = 0.0;
    restarted.generation_tokens = 5.0;
    restarted.start_time += 100.0;
    restarted.created += 100.0;
    w.record(secs(15), "a", Some(restarted.snapshot()));
    let mut other2 = other.clone();
    other2.finish(&[0.0, 3.0, 0.0, 0.0]);
    w.record(secs(15), "b", Some(other2.snapshot()));
    let s = w.compute(secs(15));
    let a = s.pods.iter().find(|p| p.pod == "a").unwrap();
    assert!(a.healthy && a.reset_in_window);
    assert_eq!(a.signals.requests_per_second, None);
    assert_eq!(a.signals.preemptions_per_second, None);
    assert_eq!(a.signals.e2e_latency_seconds.p50, None);
    assert_eq!(a.signals.queue_depth, 3.0);
    // The fleet keeps the other pod's rate and both pods' gauges.
    assert_eq!(s.fleet.requests_per_second, Some(3.0 / 15.0));
    assert_eq!(s.fleet.queue_depth, 6.0);
    assert!(
        s.fleet
            .e2e_latency_seconds
            .p50
            .is_some_and(|p| p > 1.0 && p <= 2.5)
    );

    // Once the window no longer spans the restart, the pod's deltas are back.
    pod = restarted;
    for t in (30..=90).step_by(15) {
        pod.finish(&[1.0, 0.0, 0.0, 0.0]);
        w.record(secs(t), "a", Some(pod.snapshot()));
    }
    let a = w
        .compute(secs(90))
        .pods
        .into_iter()
        .find(|p| p.pod == "a")
        .unwrap();
    assert_eq!(a.signals.requests_per_second, Some(4.0 / 60.0));
    // The 300 s preemption window still spans the restart.
    assert_eq!(a.signals.preemptions_per_second, None);
    assert!(a.reset_in_window);
}

#[test]
fn restart_markers_alone_drop_the_delta() {
    for change in ["start_time", "created", "layout"] {
        let mut w = window();
        let mut pod = Pod::new();
        w.record(secs(0), "a", Some(pod.snapshot()));
        pod.finish(&[100.0, 0.0, 0.0, 0.0]);
        match change {
            "start_time" => pod.start_time += 60.0,
            "created" => pod.created += 60.0,
            _ => pod.les = vec!["1.5", "2.5", "10.0", "+Inf"],
        }
        w.record(secs(15), "a", Some(pod.snapshot()));
        let a = &w.compute(secs(15)).pods[0];
        assert!(a.reset_in_window, "{change}");
        assert_eq!(a.signals.requests_per_second, None, "{change}");
    }
}

#[test]
fn baseline_is_the_sample_at_or_just_before_the_window_start() {
    let mut w = FleetWindow::new(SignalSettings {
        latency_window: secs(60),
        preemption_window: secs(300),
        model: None,
        ..SignalSettings::default()
    });
    let mut pod = Pod::new();
    // One request per 15 s scrape, then a burst in the last interval.
    for t in (0..=120).step_by(15) {
        if t == 120 {
            pod.finish(&[30.0, 0.0, 0.0, 0.0]);
            pod.preemptions += 10.0;
        } else if t > 0 {
            pod.finish(&[1.0, 0.0, 0.0, 0.0]);
        }
        w.record(secs(t), "a", Some(pod.snapshot()));
    }
    // now = 125: window start 65, the sample at 60 is the baseline (3 + 30 requests since).
    let f = w.compute(secs(125)).fleet;
    assert_eq!(f.requests_finished_in_window, 33.0);
    assert_eq!(f.requests_per_second, Some(33.0 / 60.0));
    // Preemptions over everything kept (history shorter than 300 s): 10 in 120 s.
    assert_eq!(f.preemptions_per_second, Some(10.0 / 120.0));
}

#[test]
fn fleet_quantiles_merge_pods_with_different_layouts_like_sum_by_le() {
    let mut w = window();
    let mut a = Pod::new();
    let mut b = Pod::new();
    b.les = vec!["0.5", "2.5", "20", "+Inf"];
    w.record(secs(0), "a", Some(a.snapshot()));
    w.record(secs(0), "b", Some(b.snapshot()));
    a.finish(&[5.0, 5.0, 5.0, 1.0]);
    b.finish(&[2.0, 2.0, 8.0, 0.0]);
    w.record(secs(15), "a", Some(a.snapshot()));
    w.record(secs(15), "b", Some(b.snapshot()));
    let f = w.compute(secs(15)).fleet;
    let union = [
        (0.5, 2.0),
        (1.0, 5.0),
        (2.5, 10.0 + 4.0),
        (10.0, 15.0),
        (20.0, 12.0),
        (f64::INFINITY, 16.0 + 12.0),
    ]
    .map(|(le, count)| Bucket { le, count });
    for (q, got) in [
        (0.5, f.e2e_latency_seconds.p50),
        (0.95, f.e2e_latency_seconds.p95),
        (0.99, f.e2e_latency_seconds.p99),
    ] {
        assert_eq!(got, histogram_quantile(q, &union), "q={q}");
    }
}

#[test]
fn a_body_without_vllm_load_gauges_is_unknown_not_idle() {
    let mut w = window();
    let parsed = exposition::parse("process_cpu_seconds_total 12.5\nup 1\n").unwrap();
    // Not a vLLM body: an error saying so, and the target counts as unknown.
    let sidecar = PodSnapshot::from_exposition(&parsed, None);
    assert!(
        matches!(sidecar, Err(SnapshotError::NoVllmSeries)),
        "{sidecar:?}"
    );
    w.record(secs(0), "sidecar", sidecar.ok());
    w.record(secs(0), "a", Some(Pod::new().snapshot()));
    // The model filter matching nothing is the same: an error naming both models.
    let body = Pod::new().body();
    let parsed = exposition::parse(&body).unwrap();
    let other_model = PodSnapshot::from_exposition(&parsed, Some("another-model"));
    let error = other_model.clone().unwrap_err().to_string();
    assert!(error.contains("\"another-model\""), "{error}");
    assert!(error.contains("model_name \"m\""), "{error}");
    w.record(secs(0), "b", other_model.ok());
    let s = w.compute(secs(0));
    assert_eq!((s.pods_total, s.pods_healthy), (3, 1));
    assert_eq!(s.fleet.queue_depth, 3.0);
}

#[test]
fn a_scrape_gap_longer_than_the_window_gives_no_stale_delta() {
    let mut w = window();
    let mut pod = Pod::new();
    w.record(secs(0), "a", Some(pod.snapshot()));
    pod.finish(&[1.0, 0.0, 0.0, 0.0]);
    w.record(secs(15), "a", Some(pod.snapshot()));
    for t in (30..=300).step_by(15) {
        w.record(secs(t), "a", None);
    }
    assert_eq!(w.compute(secs(300)).pods_healthy, 0);
    pod.finish(&[5.0, 0.0, 0.0, 0.0]);
    w.record(secs(315), "a", Some(pod.snapshot()));
    // Back, but the only earlier sample is 300 s old: no 60 s rate from it.
    let s = w.compute(secs(315));
    assert_eq!(s.pods_healthy, 1);
    assert_eq!(s.fleet.requests_per_second, None);
    assert_eq!(s.fleet.queue_depth, 3.0);
    pod.finish(&[3.0, 0.0, 0.0, 0.0]);
    w.record(secs(330), "a", Some(pod.snapshot()));
    assert_eq!(
        w.compute(secs(330)).fleet.requests_per_second,
        Some(3.0 / 15.0)
    );
}

#[test]
fn a_baseline_exactly_two_windows_old_still_counts_and_one_second_more_does_not() {
    // The 60 s latency window: a previous sample up to 120 s old is a usable baseline (the
    // bound is inclusive); older is a gap, and the delta would average over it.
    for (gap, expected) in [(120, Some(12.0 / 120.0)), (121, None)] {
        let mut w = window();
        let mut pod = Pod::new();
        w.record(secs(0), "a", Some(pod.snapshot()));
        pod.finish(&[12.0, 0.0, 0.0, 0.0]);
        w.record(secs(gap), "a", Some(pod.snapshot()));
        let f = w.compute(secs(gap)).fleet;
        assert_eq!(f.requests_per_second, expected, "gap {gap} s");
    }
}

#[test]
fn a_reason_that_vanishes_then_returns_lower_gives_no_negative_rate() {
    // A restart with no marker (vLLM V0) whose first scrape after it has no `stop` series
    // yet (labels appear on first use): no consecutive pair shows the drop, so the window's
    // own delta must refuse the decrease rather than report a negative rate.
    let mut w = window();
    let mut pod = Pod::new();
    w.record(secs(0), "a", Some(pod.snapshot()));
    let without_stop: String = pod
        .body()
        .lines()
        .filter(|l| !l.contains("finished_reason=\"stop\""))
        .map(|l| format!("{l}\n"))
        .collect();
    let parsed = exposition::parse(&without_stop).unwrap();
    w.record(
        secs(10),
        "a",
        Some(PodSnapshot::from_exposition(&parsed, None).unwrap()),
    );
    pod.stop = 5.0;
    w.record(secs(20), "a", Some(pod.snapshot()));
    let f = w.compute(secs(20)).fleet;
    assert_eq!(f.finished_per_second_by_reason.get("stop"), None);
    assert_eq!(f.finished_per_second_by_reason.get("length"), Some(&0.0));
    assert_eq!(f.requests_per_second, Some(0.0));
    assert_eq!(f.requests_finished_in_window, 0.0);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Whatever the counters do (grow, stall, restart), rates are never negative and
    /// quantiles stay inside [0, highest finite bucket].
    #[test]
    fn rates_never_negative_quantiles_bounded(
        steps in proptest::collection::vec((0u8..6, 0u32..20, 0u32..20, 0u32..20), 2..40),
    ) {
        let mut w = window();
        let mut pod = Pod::new();
        for (i, (action, a, b, c)) in steps.into_iter().enumerate() {
            if action == 0 {
                // Restart: everything starts over lower.
                let start = pod.start_time + 1.0;
                pod = Pod::new();
                pod.e2e = vec![0.0, 0.0, 0.0, 0.0];
                pod.stop = 0.0;
                pod.preemptions = 0.0;
                pod.generation_tokens = 0.0;
                pod.start_time = start;
            } else {
                pod.finish(&[f64::from(a), f64::from(b), f64::from(c), 0.0]);
                pod.preemptions += f64::from(a % 3);
            }
            let now = secs(15 * i as u64);
            w.record(now, "a", Some(pod.snapshot()));
            let s = w.compute(now);
            let f = &s.fleet;
            for rate in [
                f.requests_per_second,
                f.preemptions_per_second,
                f.generation_tokens_per_second,
                f.prompt_tokens_per_second,
            ]
            .into_iter()
            .flatten()
            {
                proptest::prop_assert!(rate >= 0.0 && rate.is_finite(), "{rate}");
            }
            proptest::prop_assert!(f.requests_finished_in_window >= 0.0);
            let e2e = f.e2e_latency_seconds;
            for q in [e2e.p50, e2e.p95, e2e.p99].into_iter().flatten() {
                proptest::prop_assert!((0.0..=10.0).contains(&q), "{q}");
            }
        }
    }
}

#[test]
fn batch_size_per_pod_and_fleet_and_a_reason_first_seen_mid_window() {
    let mut w = window();
    let mut pod = Pod::new();
    pod.iteration = Some((100.0, 1600.0));
    w.record(secs(0), "a", Some(pod.snapshot()));
    w.record(secs(0), "idle", Some(Pod::new().snapshot()));
    let mut still = Pod::new();
    still.iteration = Some((100.0, 1600.0));
    w.record(secs(0), "still", Some(still.snapshot()));
    // 10 requests finish; 50 engine steps of 1,000 tokens in all: 20 tokens per step. A
    // reason not seen before (`abort`, first in sort order) has no baseline: no rate, and
    // it must not hide the reasons that have one.
    pod.finish(&[10.0, 0.0, 0.0, 0.0]);
    pod.iteration = Some((150.0, 2600.0));
    pod.abort = Some(4.0);
    w.record(secs(20), "a", Some(pod.snapshot()));
    w.record(secs(20), "idle", Some(Pod::new().snapshot()));
    w.record(secs(20), "still", Some(still.snapshot()));
    let s = w.compute(secs(20));
    let a = &s.pods.iter().find(|p| p.pod == "a").unwrap().signals;
    assert_eq!(a.batch_tokens_per_step, Some(20.0));
    assert_eq!(a.finished_per_second_by_reason.get("stop"), Some(&0.5));
    assert_eq!(a.finished_per_second_by_reason.get("length"), Some(&0.0));
    assert_eq!(a.finished_per_second_by_reason.get("abort"), None);
    assert_eq!(a.requests_per_second, Some(0.5));
    // A pod without the histogram has no batch size (not 0/0).
    let idle = &s.pods.iter().find(|p| p.pod == "idle").unwrap().signals;
    assert_eq!(idle.batch_tokens_per_step, None);
    assert_eq!(idle.requests_per_second, Some(0.0));
    // Nor does one whose engine took no step in the window (0 tokens over 0 steps).
    let still = &s.pods.iter().find(|p| p.pod == "still").unwrap().signals;
    assert_eq!(still.batch_tokens_per_step, None);
    assert_eq!(s.fleet.batch_tokens_per_step, Some(20.0));
    assert_eq!(
        s.fleet.finished_per_second_by_reason.get("stop"),
        Some(&0.5)
    );
}

#[test]
fn two_pods_add_their_rates_by_reason_and_average_their_kv_usage() {
    let mut w = window();
    let (mut a, mut b) = (Pod::new(), Pod::new());
    a.kv = vec![0.2];
    b.kv = vec![0.6];
    w.record(secs(0), "a", Some(a.snapshot()));
    w.record(secs(0), "b", Some(b.snapshot()));
    a.finish(&[10.0, 20.0, 0.0, 0.0]);
    b.finish(&[0.0, 15.0, 0.0, 0.0]);
    w.record(secs(30), "a", Some(a.snapshot()));
    w.record(secs(30), "b", Some(b.snapshot()));
    let f = w.compute(secs(30)).fleet;
    // `stop` grew by 30 on one pod and 15 on the other: their rates add up.
    assert_eq!(
        f.finished_per_second_by_reason.get("stop"),
        Some(&(30.0 / 30.0 + 15.0 / 30.0))
    );
    assert_eq!(f.requests_per_second, Some(45.0 / 30.0));
    // The fleet's KV usage: the fullest pod, and the mean over the pods.
    assert_eq!(f.kv_cache_usage.max, Some(0.6));
    assert!(
        (f.kv_cache_usage.mean.unwrap() - 0.4).abs() < 1e-12,
        "{f:?}"
    );
}

#[test]
fn the_fleet_counts_finished_requests_over_its_longest_pod_span() {
    // Pod `a` is scraped over the whole window and finishes 30 requests in 30 s; pod `b`
    // becomes ready at 20 s and finishes 40 in its first 10 s, draining a backlog.
    let mut w = window();
    let mut a = Pod::new();
    let mut b = Pod::new();
    w.record(secs(0), "a", Some(a.snapshot()));
    w.record(secs(20), "b", Some(b.snapshot()));
    a.finish(&[10.0, 10.0, 10.0, 0.0]);
    b.finish(&[20.0, 20.0, 0.0, 0.0]);
    w.record(secs(30), "a", Some(a.snapshot()));
    w.record(secs(30), "b", Some(b.snapshot()));
    let f = w.compute(secs(30)).fleet;
    // The sum of rates reads 1 + 4 = 5 per second, as if `b` had served 4 per second for 30 s.
    assert_eq!(f.requests_per_second, Some(5.0));
    // The count is 70 over the fleet's 30 s: 7/3 per second.
    assert_eq!(f.requests_finished_in_window, 70.0);
    assert_eq!(f.finished_window_seconds, Some(30.0));
    let pods = w.compute(secs(30)).pods;
    let b = pods.iter().find(|p| p.pod == "b").unwrap();
    assert_eq!(b.signals.finished_window_seconds, Some(10.0));
    // No finished counters at all: no span either.
    let mut idle = window();
    idle.record(secs(0), "a", Some(Pod::new().snapshot()));
    assert_eq!(idle.compute(secs(0)).fleet.finished_window_seconds, None);
}
