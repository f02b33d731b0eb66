//! The scaler never answers a replica target from a partial or empty view of the fleet as if it
//! were complete: impossible values, the model filter, unknown and stale pods, and restart
//! safety, through the same `Scaler` the service and the simulator call.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use vllm_keda_core::config::ScalerConfig;
use vllm_keda_core::exposition;
use vllm_keda_core::policy::{CurrentReplicas, Reason, ReplicaSource};
use vllm_keda_core::scaler::{Completeness, Missing};
use vllm_keda_core::signals::{PodSnapshot, SnapshotError};
use vllm_keda_core::{Scaler, ScrapeRound, Step, TargetFailure};

const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// A label value no error text may echo (body bytes).
const SECRET: &str = "b7Zq9XwT4mVn2Lp8Rk6Ys3Hd5Gf1Jc0A";

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn scaler(extra: &[(&str, &str)]) -> Scaler {
    let mut metadata: HashMap<String, String> = [
        ("endpoints", "http://a/metrics"),
        ("maxReplicas", "10"),
        ("model", MODEL),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    for (k, v) in extra {
        metadata.insert((*k).to_owned(), (*v).to_owned());
    }
    Scaler::new(&ScalerConfig::from_metadata(&metadata).expect("valid metadata"))
}

/// A vLLM V1 body of one engine in the shape `prometheus_client` writes: request gauges, KV
/// usage, counters and an e2e histogram.
fn body(waiting: f64, running: f64, finished: f64) -> String {
    let l = format!("engine=\"0\",model_name=\"{MODEL}\"");
    let mut out = String::new();
    writeln!(out, "process_start_time_seconds 1.7e9").unwrap();
    writeln!(out, "# TYPE vllm:num_requests_waiting gauge").unwrap();
    writeln!(out, "vllm:num_requests_waiting{{{l}}} {waiting}").unwrap();
    writeln!(out, "# TYPE vllm:num_requests_running gauge").unwrap();
    writeln!(out, "vllm:num_requests_running{{{l}}} {running}").unwrap();
    writeln!(out, "# TYPE vllm:kv_cache_usage_perc gauge").unwrap();
    writeln!(out, "vllm:kv_cache_usage_perc{{{l}}} 0.1").unwrap();
    writeln!(out, "# TYPE vllm:num_preemptions counter").unwrap();
    writeln!(out, "vllm:num_preemptions_total{{{l}}} 0.0").unwrap();
    writeln!(out, "# TYPE vllm:request_success counter").unwrap();
    writeln!(
        out,
        "vllm:request_success_total{{{l},finished_reason=\"stop\"}} {finished}"
    )
    .unwrap();
    writeln!(out, "# TYPE vllm:e2e_request_latency_seconds histogram").unwrap();
    for (le, share) in [("1.0", 0.5), ("10.0", 1.0), ("+Inf", 1.0)] {
        writeln!(
            out,
            "vllm:e2e_request_latency_seconds_bucket{{{l},le=\"{le}\"}} {}",
            finished * share
        )
        .unwrap();
    }
    writeln!(
        out,
        "vllm:e2e_request_latency_seconds_count{{{l}}} {finished}"
    )
    .unwrap();
    writeln!(
        out,
        "vllm:e2e_request_latency_seconds_sum{{{l}}} {}",
        finished * 0.8
    )
    .unwrap();
    out
}

fn idle() -> String {
    body(0.0, 0.0, 100.0)
}

fn snapshot(text: &str, model: Option<&str>) -> Result<PodSnapshot, SnapshotError> {
    let parsed = exposition::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    PodSnapshot::from_exposition(&parsed, model)
}

type Outcome = Result<String, &'static str>;

fn round(pods: &[(&str, Outcome)]) -> ScrapeRound<&'static str> {
    ScrapeRound::parse(
        pods.iter()
            .map(|(name, body)| ((*name).to_owned(), body.clone())),
        std::iter::empty::<(String, Result<String, &'static str>)>(),
        Some(MODEL),
    )
}

fn ok(body: String) -> Outcome {
    Ok(body)
}

const DOWN: Outcome = Err("connection refused");

#[test]
fn the_reference_body_is_usable() {
    let s = snapshot(&body(3.0, 5.0, 10.0), Some(MODEL)).expect("usable");
    assert_eq!((s.waiting, s.running), (Some(3.0), Some(5.0)));
    assert_eq!(s.e2e_latency.unwrap().count, 10.0);
}

#[test]
fn impossible_values_make_the_sample_an_error_naming_the_series() {
    let l = format!("engine=\"0\",model_name=\"{MODEL}\"");
    let e2e = "vllm:e2e_request_latency_seconds";
    // (what is wrong, the line(s) replaced, their replacement, the series and the problem).
    let cases: Vec<(&str, String, String, &str, &str)> = vec![
        (
            "negative queue",
            format!("vllm:num_requests_waiting{{{l}}} 0"),
            format!("vllm:num_requests_waiting{{{l}}} -40"),
            "vllm:num_requests_waiting",
            "negative value -40",
        ),
        (
            "negative running",
            format!("vllm:num_requests_running{{{l}}} 0"),
            format!("vllm:num_requests_running{{{l}}} -1"),
            "vllm:num_requests_running",
            "negative",
        ),
        (
            "negative counter",
            format!("vllm:num_preemptions_total{{{l}}} 0.0"),
            format!("vllm:num_preemptions_total{{{l}}} -3"),
            "vllm:num_preemptions_total",
            "negative",
        ),
        (
            "KV usage 700 %",
            format!("vllm:kv_cache_usage_perc{{{l}}} 0.1"),
            format!("vllm:kv_cache_usage_perc{{{l}}} 7.0"),
            "vllm:kv_cache_usage_perc",
            "outside [0, 1]",
        ),
        (
            "negative KV usage",
            format!("vllm:kv_cache_usage_perc{{{l}}} 0.1"),
            format!("vllm:kv_cache_usage_perc{{{l}}} -0.5"),
            "vllm:kv_cache_usage_perc",
            "outside [0, 1]",
        ),
        (
            "NaN queue",
            format!("vllm:num_requests_waiting{{{l}}} 0"),
            format!("vllm:num_requests_waiting{{{l}}} NaN"),
            "vllm:num_requests_waiting",
            "NaN or infinite",
        ),
        (
            "infinite counter",
            format!("vllm:request_success_total{{{l},finished_reason=\"stop\"}} 100"),
            format!("vllm:request_success_total{{{l},finished_reason=\"stop\"}} +Inf"),
            "vllm:request_success_total",
            "NaN or infinite",
        ),
        (
            "duplicate series (labels in another order)",
            format!("vllm:num_requests_waiting{{{l}}} 0"),
            format!(
                "vllm:num_requests_waiting{{{l}}} 0\nvllm:num_requests_waiting{{model_name=\"{MODEL}\",engine=\"0\"}} 5"
            ),
            "vllm:num_requests_waiting",
            "duplicate series",
        ),
        (
            "duplicate bucket (le written two ways)",
            format!("{e2e}_bucket{{{l},le=\"1.0\"}} 50"),
            format!("{e2e}_bucket{{{l},le=\"1.0\"}} 50\n{e2e}_bucket{{{l},le=\"1\"}} 50"),
            "vllm:e2e_request_latency_seconds_bucket",
            "duplicate series",
        ),
        (
            "duplicate _count",
            format!("{e2e}_count{{{l}}} 100"),
            format!("{e2e}_count{{{l}}} 100\n{e2e}_count{{{l}}} 100"),
            "vllm:e2e_request_latency_seconds_count",
            "duplicate series",
        ),
        (
            "histogram without +Inf",
            format!("{e2e}_bucket{{{l},le=\"+Inf\"}} 100"),
            String::new(),
            "vllm:e2e_request_latency_seconds_bucket",
            "without a le=\"+Inf\" bucket",
        ),
        (
            "decreasing buckets",
            format!("{e2e}_bucket{{{l},le=\"10.0\"}} 100"),
            format!("{e2e}_bucket{{{l},le=\"10.0\"}} 20"),
            "vllm:e2e_request_latency_seconds_bucket",
            "le=\"10\" is lower than the bucket below it",
        ),
        (
            "count differs from +Inf",
            format!("{e2e}_count{{{l}}} 100"),
            format!("{e2e}_count{{{l}}} 90"),
            "vllm:e2e_request_latency_seconds_count",
            "_count 90 differs from the le=\"+Inf\" bucket 100",
        ),
        (
            "bucket without a numeric le",
            format!("{e2e}_bucket{{{l},le=\"1.0\"}} 50"),
            format!("{e2e}_bucket{{{l},le=\"fast\"}} 50"),
            "vllm:e2e_request_latency_seconds_bucket",
            "non-numeric",
        ),
    ];
    for (what, from, to, series, problem) in cases {
        let good = idle();
        let from = from.clone() + "\n";
        assert!(good.contains(&from), "{what}: {from:?} not in the body");
        let to = if to.is_empty() { to } else { to + "\n" };
        // Every series also carries a label no error may echo.
        let bad = good
            .replacen(&from, &to, 1)
            .replace("engine=\"0\"", &format!("engine=\"0\",token=\"{SECRET}\""));
        let error = snapshot(&bad, Some(MODEL)).expect_err(what);
        let text = error.to_string();
        assert!(
            matches!(error, SnapshotError::Impossible { .. }),
            "{what}: {text}"
        );
        assert!(text.starts_with(series), "{what}: {text}");
        assert!(text.contains(problem), "{what}: {text}");
        assert!(!text.contains(SECRET), "{what}: {text}");
        // Through a round, the target fails as invalid: never a number in the sums.
        let round = round(&[("p", ok(bad))]);
        assert!(
            matches!(round.pods[0].1, Err(TargetFailure::Invalid(_))),
            "{what}"
        );
    }
}

#[test]
fn a_negative_queue_never_cancels_other_pods_queues() {
    let mut s = scaler(&[]);
    let step = s.step(
        secs(0),
        round(&[
            ("a", ok(body(60.0, 10.0, 100.0))),
            ("b", ok(body(60.0, 10.0, 100.0))),
            ("c", ok(body(-100.0, 10.0, 100.0))),
        ]),
    );
    assert_eq!(step.signals.fleet.queue_depth, 120.0);
    assert_eq!(step.view.completeness, Completeness::PartialHeld);
    assert_eq!(step.view.observed, vec!["a", "b"]);
    assert_eq!(step.view.unobserved[0].target, "c");
    let Missing::Invalid { error } = &step.view.unobserved[0].why else {
        panic!("{:?}", step.view.unobserved[0]);
    };
    assert!(
        error.contains("vllm:num_requests_waiting: negative value -100"),
        "{error}"
    );
}

#[test]
fn a_model_typo_names_the_model_and_the_models_the_body_serves() {
    let error = snapshot(&idle(), Some("meta-llama/Llama-3.1-8B-Instrcut")).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "no series for model \"meta-llama/Llama-3.1-8B-Instrcut\": the body's vLLM series are \
             for model_name \"{MODEL}\"; set `model` to the served model's name"
        )
    );
    // Many models, one of them huge and with bytes an error never shows: three named, each
    // capped, the rest counted.
    let long = format!("{}{}", "x".repeat(200), "\u{7}<script>");
    let mut many = String::new();
    for name in ["m-1", long.as_str(), "m-3", "m-4", "m-5"] {
        writeln!(many, "vllm:num_requests_waiting{{model_name=\"{name}\"}} 1").unwrap();
    }
    let text = snapshot(&many, Some("wanted")).unwrap_err().to_string();
    assert!(text.contains("\"m-1\", \"xxxx"), "{text}");
    assert!(text.contains("...\", \"m-3\" and 2 more"), "{text}");
    assert!(
        !text.contains("<script>") && !text.contains('\u{7}'),
        "{text}"
    );
    assert!(text.len() < 300, "{text}");
}

#[test]
fn a_body_without_vllm_series_is_an_error_saying_so() {
    let text = "# TYPE up gauge\nup 1\nprocess_cpu_seconds_total 3.5\n";
    let error = snapshot(text, Some(MODEL)).unwrap_err();
    assert_eq!(error, SnapshotError::NoVllmSeries);
    assert!(error.to_string().contains("no vLLM series"), "{error}");
    // vLLM series, but no request gauges: unknown as well, never zero load.
    let error = snapshot("vllm:num_preemptions_total{engine=\"0\"} 3\n", None).unwrap_err();
    assert_eq!(error, SnapshotError::NoLoadGauges);
    // Twelve non-vLLM endpoints give no answer at all, never maxReplicas or minReplicas.
    let mut s = scaler(&[]);
    let pods: Vec<(String, Outcome)> = (0..12)
        .map(|i| (format!("p{i}"), ok(text.to_owned())))
        .collect();
    let named: Vec<(&str, Outcome)> = pods.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    let step = s.step(secs(0), round(&named));
    assert_eq!(step.view.completeness, Completeness::Unavailable);
    assert_eq!(step.decision.reason, Reason::NoData);
    assert_eq!(step.view.unobserved.len(), 12);
}

#[test]
fn unknown_pods_block_scale_in_while_answering_pods_still_scale_out() {
    let mut s = scaler(&[]).resume_from(3);
    // Two of three pods stop answering (500s, timeouts); the one that answers is idle. Twenty
    // minutes of that never scales in: a pod that does not answer counts as loaded.
    let mut last: Option<Step> = None;
    for t in (0..1200).step_by(2) {
        let step = s.step(
            secs(t),
            round(&[("a", ok(idle())), ("b", DOWN), ("c", DOWN)]),
        );
        assert_eq!(
            step.decision.target_replicas, 3,
            "t={t}: {}",
            step.decision.explanation
        );
        assert_eq!(step.view.completeness, Completeness::PartialHeld);
        last = Some(step);
    }
    let last = last.unwrap();
    assert!(
        last.decision
            .explanation
            .contains("2 of 3 known targets not observed"),
        "{}",
        last.decision.explanation
    );
    assert_eq!(
        last.view
            .unobserved
            .iter()
            .map(|u| (u.target.as_str(), &u.why))
            .collect::<Vec<_>>(),
        vec![("b", &Missing::Fetch), ("c", &Missing::Fetch)]
    );
    assert!(
        last.view
            .summary()
            .starts_with("partial_held: 1 of 3 targets observed; not observed: b (fetch failed)")
    );
    // The answering pod fills up: scale-out on what answers still happens.
    let mut t = 1200;
    let mut target = 3;
    while t < 1400 {
        let step = s.step(
            secs(t),
            round(&[
                ("a", ok(body(200.0, 50.0, 100.0))),
                ("b", DOWN),
                ("c", DOWN),
            ]),
        );
        target = step.decision.target_replicas;
        t += 2;
    }
    assert!(target > 3, "no scale-out on the answering pod's queue");
    // Everyone answers and is idle: scale-in resumes after a full calm period, one step.
    let calm_from = t;
    let mut first_in = None;
    while t < calm_from + 600 {
        let all = [("a", ok(idle())), ("b", ok(idle())), ("c", ok(idle()))];
        let step = s.step(secs(t), round(&all));
        assert_eq!(step.view.completeness, Completeness::Full);
        if step.decision.target_replicas < target && first_in.is_none() {
            first_in = Some(t);
        }
        t += 2;
    }
    assert_eq!(first_in, Some(calm_from + 300));
}

#[test]
fn no_usable_data_from_any_known_target_is_unavailable_and_holds() {
    let mut s = scaler(&[]).resume_from(4);
    let step = s.step(
        secs(0),
        round(&[("a", DOWN), ("b", ok("garbage {".into()))]),
    );
    assert_eq!(step.view.completeness, Completeness::Unavailable);
    assert_eq!(step.decision.reason, Reason::NoData);
    assert_eq!(step.decision.target_replicas, 4);
    assert_eq!(step.view.unobserved[1].why, Missing::Parse { line: 1 });
    assert!(step.view.observed.is_empty());
}

#[test]
fn a_round_naming_no_target_says_so() {
    let mut s = scaler(&[]);
    let step = s.step(secs(0), round(&[]));
    assert_eq!(step.view.completeness, Completeness::NoTargets);
    assert_eq!(step.decision.reason, Reason::NoData);
}

#[test]
fn data_older_than_the_staleness_bound_is_not_current() {
    // 2 s scrape interval: stale after 3 intervals, 6 s.
    let mut s = scaler(&[("scrapeIntervalSeconds", "2")]);
    s.record(secs(0), round(&[("a", ok(idle())), ("b", ok(idle()))]));
    let fresh = s.decide(secs(6));
    assert_eq!(fresh.view.completeness, Completeness::Full);
    assert_eq!(fresh.signals.pods_healthy, 2);
    // Nothing recorded since: at 10 s both pods' data is 10 s old.
    let stale = s.decide(secs(10));
    assert_eq!(stale.signals.pods_healthy, 0);
    assert_eq!(stale.view.completeness, Completeness::Unavailable);
    assert_eq!(
        stale.view.unobserved[0].why,
        Missing::Stale {
            age_seconds: Some(10.0),
            stale_after_seconds: 6.0
        }
    );
    assert_eq!(stale.decision.reason, Reason::NoData);
    // One pod answers again: partial, no scale-in.
    let step = s.step(secs(12), round(&[("a", ok(idle())), ("b", DOWN)]));
    assert_eq!(step.view.completeness, Completeness::PartialHeld);
}

#[test]
fn a_restarted_scaler_holds_the_replicas_the_scale_target_asks_for() {
    // The scaler restarts while the scale target asks for 8: 3 ready, 5 still loading the
    // model (not answering yet, so not in the round).
    let mut s = scaler(&[]);
    s.set_current_replicas(Some(CurrentReplicas {
        spec: 8,
        ready: Some(3),
        source: ReplicaSource::ScaleSubresource,
    }));
    let pods = || round(&[("a", ok(idle())), ("b", ok(idle())), ("c", ok(idle()))]);
    let first = s.step(secs(0), pods());
    assert_eq!(
        first.decision.target_replicas, 8,
        "{}",
        first.decision.explanation
    );
    assert!(
        first.decision.explanation.contains(
            "held at 8, not 3: the scale target asks for 8 (3 ready, 5 starting, counted as capacity on the way)"
        ),
        "{}",
        first.decision.explanation
    );
    // No answer below 8 before this scaler has seen a full calm period (300 s) itself; then
    // one step per scale-down period.
    let mut changes = Vec::new();
    let mut target = 8;
    for t in (2..=700).step_by(2) {
        let step = s.step(secs(t), pods());
        if step.decision.target_replicas != target {
            target = step.decision.target_replicas;
            changes.push((t, target));
        }
    }
    assert_eq!(changes, vec![(300, 7), (420, 6), (540, 5), (660, 4)]);
}

#[test]
fn without_the_scale_subresource_the_observed_pods_are_the_floor() {
    let mut s = scaler(&[]);
    s.set_current_replicas(Some(CurrentReplicas {
        spec: 5,
        ready: None,
        source: ReplicaSource::ObservedPods,
    }));
    let step = s.step(secs(0), round(&[("a", ok(idle())), ("b", ok(idle()))]));
    assert_eq!(step.decision.target_replicas, 5);
    assert!(
        step.decision
            .explanation
            .contains("held at 5, not 2: pods observed 5 (2 ready, 3 starting"),
        "{}",
        step.decision.explanation
    );
}

#[test]
fn a_fresh_scaler_never_scales_in_before_its_own_full_calm_period() {
    let mut s = scaler(&[]).resume_from(5);
    let five: Vec<(String, Outcome)> = (0..5).map(|i| (format!("p{i}"), ok(idle()))).collect();
    let named: Vec<(&str, Outcome)> = five.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    for t in (0..300).step_by(2) {
        let step = s.step(secs(t), round(&named));
        assert_eq!(step.decision.target_replicas, 5, "t={t}");
        assert_eq!(step.decision.reason, Reason::HoldCalmPending, "t={t}");
    }
    assert_eq!(s.step(secs(300), round(&named)).decision.target_replicas, 4);
}

#[test]
fn an_unknown_pod_restarts_the_calm_clock() {
    let mut s = scaler(&[]).resume_from(3);
    let all = || round(&[("a", ok(idle())), ("b", ok(idle())), ("c", ok(idle()))]);
    for t in (0..290).step_by(2) {
        s.step(secs(t), all());
    }
    // One failed scrape just before the calm period ends: the clock starts over.
    let blip = s.step(
        secs(290),
        round(&[("a", ok(idle())), ("b", ok(idle())), ("c", DOWN)]),
    );
    assert_eq!(
        blip.decision.reason,
        Reason::Hold,
        "{}",
        blip.decision.explanation
    );
    for t in (292..592).step_by(2) {
        assert_eq!(s.step(secs(t), all()).decision.target_replicas, 3, "t={t}");
    }
    assert_eq!(s.step(secs(592), all()).decision.target_replicas, 2);
}

/// A pod serving 160,000 distinct `finished_reason` values (about 8 MB): the signals are
/// computed in time that grows with the body, not its square. This asserts only that it
/// completes with every reason accounted for (no wall-clock bound); the time is in
/// `benches/signals.rs`. One body is parsed; the earlier round is the same snapshot with
/// every counter 2 lower, so the test spends its time in the code under test.
#[test]
fn one_hundred_sixty_thousand_reasons_are_one_map_lookup_each() {
    const REASONS: usize = 160_000;
    let mut text = body(1.0, 1.0, 0.0);
    text.reserve(REASONS * 96);
    for r in 0..REASONS {
        writeln!(
            text,
            "vllm:request_success_total{{engine=\"0\",model_name=\"{MODEL}\",finished_reason=\"reason-{r:06}\"}} 3"
        )
        .unwrap();
    }
    assert!(text.len() > 7_000_000, "{} bytes", text.len());
    let later = snapshot(&text, Some(MODEL)).expect("usable");
    assert_eq!(later.request_success_total.len(), REASONS + 1);
    let mut earlier = later.clone();
    for value in earlier.request_success_total.values_mut() {
        *value = (*value - 2.0).max(0.0);
    }
    let one = |snapshot: PodSnapshot| ScrapeRound::<()> {
        pods: vec![("a".to_owned(), Ok(snapshot))],
        gpus: Vec::new(),
    };
    let mut s = scaler(&[]);
    s.record(secs(0), one(earlier));
    let step = s.step(secs(2), one(later));
    let by_reason = &step.signals.fleet.finished_per_second_by_reason;
    assert_eq!(by_reason.len(), REASONS + 1);
    assert_eq!(by_reason["reason-159999"], 1.0);
    assert_eq!(
        step.signals.fleet.requests_finished_in_window,
        2.0 * REASONS as f64
    );
}
