//! Counter resets seen by a value drop alone. vLLM V0's multiprocess collector writes no
//! `process_start_time_seconds` and no `_created` series, so when its process restarts the only
//! sign is a counter or bucket that went down. Each case below drops exactly one of them (every
//! other value keeps growing, and no restart marker exists) and must make the pod's deltas
//! undefined for a window that spans the drop, never negative, never a mix of two processes.

use std::time::Duration;

use vllm_keda_core::exposition;
use vllm_keda_core::signals::{FleetWindow, PodSnapshot, SignalSettings};

/// A V0-shaped pod: old names, no restart markers, one engine.
#[derive(Clone)]
struct V0Pod {
    preemptions: f64,
    prompt: f64,
    generation: f64,
    stop: f64,
    length: f64,
    /// Cumulative e2e buckets for le 1, 2.5, 10, +Inf.
    e2e: [f64; 4],
}

impl V0Pod {
    fn new() -> Self {
        V0Pod {
            preemptions: 10.0,
            prompt: 50_000.0,
            generation: 9_000.0,
            stop: 100.0,
            length: 20.0,
            e2e: [30.0, 80.0, 110.0, 120.0],
        }
    }

    /// Every counter and bucket grows.
    fn grow(&mut self) {
        self.preemptions += 1.0;
        self.prompt += 4_000.0;
        self.generation += 900.0;
        self.stop += 9.0;
        self.length += 1.0;
        for (bucket, add) in self.e2e.iter_mut().zip([3.0, 5.0, 8.0, 10.0]) {
            *bucket += add;
        }
    }

    fn body(&self) -> String {
        let m = "model_name=\"m\"";
        let les = ["1.0", "2.5", "10.0", "+Inf"];
        let mut out = format!(
            "vllm:num_requests_waiting{{{m}}} 2\n\
             vllm:num_requests_running{{{m}}} 4\n\
             vllm:num_requests_swapped{{{m}}} 0\n\
             vllm:gpu_cache_usage_perc{{{m}}} 0.4\n\
             vllm:num_preemptions_total{{{m}}} {}\n\
             vllm:prompt_tokens_total{{{m}}} {}\n\
             vllm:generation_tokens_total{{{m}}} {}\n\
             vllm:request_success_total{{finished_reason=\"stop\",{m}}} {}\n\
             vllm:request_success_total{{finished_reason=\"length\",{m}}} {}\n",
            self.preemptions, self.prompt, self.generation, self.stop, self.length
        );
        out += &format!(
            "vllm:e2e_request_latency_seconds_sum{{{m}}} {}\n",
            self.e2e[3] * 3.0
        );
        for (le, count) in les.iter().zip(self.e2e) {
            out += &format!("vllm:e2e_request_latency_seconds_bucket{{le=\"{le}\",{m}}} {count}\n");
        }
        out += &format!(
            "vllm:e2e_request_latency_seconds_count{{{m}}} {}\n",
            self.e2e[3]
        );
        out
    }

    fn snapshot(&self) -> PodSnapshot {
        let body = self.body();
        let parsed = exposition::parse(&body).expect("a valid body");
        PodSnapshot::from_exposition(&parsed, Some("m")).expect("a valid snapshot")
    }
}

fn window() -> FleetWindow {
    FleetWindow::new(SignalSettings {
        latency_window: Duration::from_secs(60),
        preemption_window: Duration::from_secs(60),
        model: Some("m".into()),
        stale_after: Duration::from_secs(60),
    })
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// One case: what drops, and how.
type Case = (&'static str, fn(&mut V0Pod));

/// The cases: which single value drops.
const DROPS: [Case; 6] = [
    ("preemptions", |p| p.preemptions = 1.0),
    ("prompt tokens", |p| p.prompt = 100.0),
    ("generation tokens", |p| p.generation = 10.0),
    ("one finished reason", |p| p.length = 0.0),
    ("one histogram bucket", |p| p.e2e[0] = 0.0),
    ("histogram count", |p| {
        p.e2e = [1.0, 1.0, 2.0, 2.0];
    }),
];

#[test]
fn baseline_has_every_delta() {
    // Without a drop, the same sequence gives defined, positive rates and quantiles: the cases
    // below fail for the drop, not for the body.
    let mut w = window();
    let mut pod = V0Pod::new();
    w.record(secs(0), "a", Some(pod.snapshot()));
    pod.grow();
    w.record(secs(15), "a", Some(pod.snapshot()));
    let a = &w.compute(secs(15)).pods[0];
    assert!(a.healthy && !a.reset_in_window);
    let s = &a.signals;
    assert!(s.requests_per_second.unwrap() > 0.0);
    assert!(s.generation_tokens_per_second.unwrap() > 0.0);
    assert!(s.prompt_tokens_per_second.unwrap() > 0.0);
    assert!(s.preemptions_per_second.unwrap() > 0.0);
    assert!(s.e2e_latency_seconds.p95.is_some());
}

#[test]
fn a_single_value_drop_without_markers_is_a_restart() {
    for (what, drop) in DROPS {
        let mut w = window();
        let mut pod = V0Pod::new();
        w.record(secs(0), "a", Some(pod.snapshot()));
        pod.grow();
        w.record(secs(15), "a", Some(pod.snapshot()));
        pod.grow();
        drop(&mut pod);
        w.record(secs(30), "a", Some(pod.snapshot()));
        let signals = w.compute(secs(30));
        let a = &signals.pods[0];
        assert!(a.healthy, "{what}");
        assert!(
            a.reset_in_window,
            "{what}: a drop alone must read as a restart"
        );
        let s = &a.signals;
        assert_eq!(s.requests_per_second, None, "{what}");
        assert_eq!(s.generation_tokens_per_second, None, "{what}");
        assert_eq!(s.e2e_latency_seconds.p95, None, "{what}");
        // Gauges still count: the pod is there, only its deltas are undefined.
        assert_eq!(signals.fleet.queue_depth, 2.0, "{what}");
        assert_eq!(signals.fleet.running, 4.0, "{what}");
    }
}

#[test]
fn after_a_drop_leaves_the_window_the_deltas_return() {
    for (what, drop) in DROPS {
        let mut w = window();
        let mut pod = V0Pod::new();
        w.record(secs(0), "a", Some(pod.snapshot()));
        drop(&mut pod);
        w.record(secs(10), "a", Some(pod.snapshot()));
        // Growth after the restart, sampled until the restart is older than the window.
        let mut t = 10;
        while t < 100 {
            t += 10;
            pod.grow();
            w.record(secs(t), "a", Some(pod.snapshot()));
        }
        let a = &w.compute(secs(t)).pods[0];
        assert!(!a.reset_in_window, "{what}");
        let rps = a
            .signals
            .requests_per_second
            .expect("a rate once past the drop");
        // 10 finished requests per 10 s, measured only after the restart.
        assert!((rps - 1.0).abs() < 1e-9, "{what}: {rps}");
    }
}
