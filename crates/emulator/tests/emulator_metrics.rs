//! The rendered `/metrics` body against the real vLLM shapes: same families, types, order,
//! label names and bucket lists as the fixtures, parseable by our parser and by Python
//! `prometheus_client`, and consistent with the traffic the engine served.

mod emulator_common;

use std::collections::BTreeMap;
use std::time::Duration;

use emulator_common::{PySample, python_parse};
use vllm_emulator::{
    Engine, EngineConfig, HttpObservation, HttpStats, MetricsShape, RenderInfo, RequestSpec,
    render_string,
};

const FIXTURE_V1: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../data/fixtures/vllm-v1-loaded.prom"
));
const FIXTURE_V0: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../data/fixtures/vllm-v0.prom"
));
const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// An engine that served some traffic, including a preemption-free mix and an abort.
fn busy_engine(shape: MetricsShape) -> Engine {
    let mut e = Engine::new(EngineConfig {
        metrics_shape: shape,
        ..EngineConfig::default()
    })
    .unwrap();
    let mut events = Vec::new();
    for i in 0..40u32 {
        let t = Duration::from_millis(u64::from(i) * 50);
        let mut spec = RequestSpec::new(100 + i * 37, 20 + i);
        spec.max_tokens = if i % 3 == 0 {
            spec.output_tokens + 10
        } else {
            spec.output_tokens
        };
        e.add_request(t, spec).unwrap();
    }
    e.abort(Duration::from_millis(1990), 39);
    e.advance_to(Duration::from_secs(4), &mut events);
    e
}

fn http_stats() -> HttpStats {
    let mut h = HttpStats::new(1.7e9);
    h.record(
        &HttpObservation {
            handler: "/v1/models",
            method: "GET",
            status: 200,
            request_bytes: 0,
            response_bytes: 512,
            duration_seconds: 0.002,
        },
        1.7e9,
    );
    h.record(
        &HttpObservation {
            handler: "/v1/chat/completions",
            method: "POST",
            status: 200,
            request_bytes: 300,
            response_bytes: 0,
            duration_seconds: 3.5,
        },
        1.7e9,
    );
    h.record(
        &HttpObservation {
            handler: "/v1/chat/completions",
            method: "POST",
            status: 400,
            request_bytes: 30,
            response_bytes: 120,
            duration_seconds: 0.001,
        },
        1.7e9,
    );
    h
}

/// (family, type) from `# TYPE` lines, in order.
fn types(body: &str) -> Vec<(String, String)> {
    body.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (n, t) = l.split_once(' ').unwrap();
            (n.to_string(), t.to_string())
        })
        .collect()
}

/// For each sample name: its sorted label names (without values), and for `_bucket` samples the
/// `le` values in order, per label set without `le`.
fn shape_of(body: &str) -> BTreeMap<String, (Vec<String>, Vec<String>)> {
    let mut out: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, rest) = match line.find('{') {
            Some(i) => (&line[..i], &line[i + 1..line.rfind('}').unwrap()]),
            None => (line.split(' ').next().unwrap(), ""),
        };
        let mut names = Vec::new();
        let mut le = None;
        for pair in rest.split("\",").filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once("=\"").unwrap();
            names.push(k.to_string());
            if k == "le" {
                le = Some(v.trim_end_matches('"').to_string());
            }
        }
        let entry = out.entry(name.to_string()).or_default();
        if entry.0.is_empty() {
            entry.0 = names;
        }
        if let Some(le) = le
            && !entry.1.contains(&le)
        {
            entry.1.push(le);
        }
    }
    out
}

#[test]
fn v1_body_has_the_fixture_shape() {
    let e = busy_engine(MetricsShape::V1);
    let http = http_stats();
    let info = RenderInfo {
        model_name: MODEL,
        engine_index: 0,
        start_unix_seconds: 1767258059.1200001,
        http: Some(&http),
    };
    let body = render_string(&e, &info);
    assert_eq!(types(&body), types(FIXTURE_V1));
    assert_eq!(shape_of(&body), shape_of(FIXTURE_V1));
    assert!(body.contains(
        "vllm:prompt_tokens_created{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1.7672580591200001e+09\n"
    ));
    assert!(body.contains("vllm:num_requests_waiting{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.0\n"));
}

#[test]
fn v0_body_has_the_fixture_shape() {
    let e = busy_engine(MetricsShape::V0);
    let info = RenderInfo {
        model_name: MODEL,
        engine_index: 0,
        start_unix_seconds: 1.7e9,
        http: None,
    };
    let body = render_string(&e, &info);
    assert_eq!(types(&body), types(FIXTURE_V0));
    assert_eq!(shape_of(&body), shape_of(FIXTURE_V0));
    assert!(!body.contains("_created"));
    // Multiprocess order: _sum first, then buckets, then _count.
    let ttft: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("vllm:time_to_first_token_seconds_"))
        .collect();
    assert!(ttft[0].starts_with("vllm:time_to_first_token_seconds_sum"));
    assert!(
        ttft.last()
            .unwrap()
            .starts_with("vllm:time_to_first_token_seconds_count")
    );
}

fn value(samples: &[PySample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

#[test]
fn python_and_our_parser_agree_and_counters_match_the_traffic() {
    let e = busy_engine(MetricsShape::V1);
    let http = http_stats();
    let info = RenderInfo {
        model_name: MODEL,
        engine_index: 0,
        start_unix_seconds: 1.7e9,
        http: Some(&http),
    };
    let body = render_string(&e, &info);
    let ours = vllm_keda_core::exposition::parse(&body).expect("our parser accepts the body");
    let Some(py) = python_parse(&body) else {
        return;
    };
    assert_eq!(
        ours.samples.len(),
        py.len(),
        "sample count: ours vs prometheus_client"
    );
    for (o, p) in ours.samples.iter().zip(&py) {
        assert_eq!(o.name, p.name);
        assert!(
            o.value == p.value || (o.value.is_nan() && p.value.is_nan()),
            "{}",
            o.name
        );
    }
    let st = e.stats();
    let finished = value(&py, "vllm:request_success_total", &[]);
    assert_eq!(finished, st.finished_total() as f64);
    assert_eq!(finished, 40.0 - (e.num_running() + e.num_waiting()) as f64);
    assert_eq!(
        value(&py, "vllm:e2e_request_latency_seconds_count", &[]),
        finished
    );
    assert_eq!(
        value(
            &py,
            "vllm:request_success_total",
            &[("finished_reason", "abort")]
        ),
        1.0
    );
    assert_eq!(
        value(&py, "vllm:time_to_first_token_seconds_count", &[]),
        st.time_to_first_token.count() as f64
    );
    assert_eq!(
        value(&py, "vllm:iteration_tokens_total_sum", &[]),
        value(&py, "vllm:prompt_tokens_total", &[])
            + value(&py, "vllm:generation_tokens_total", &[])
    );
    let inf = value(
        &py,
        "vllm:time_to_first_token_seconds_bucket",
        &[("le", "+Inf")],
    );
    assert_eq!(
        inf,
        value(&py, "vllm:time_to_first_token_seconds_count", &[])
    );
}

#[test]
fn bodies_carry_the_catalog_names_kinds_and_buckets() {
    use vllm_keda_core::catalog::{Kind, Version};
    use vllm_keda_core::signals::{Generation, PodSnapshot};
    for (shape, version, families, generation) in [
        (
            MetricsShape::V1,
            Version::V1,
            vllm_emulator::metrics::V1_FAMILIES,
            Generation::V1,
        ),
        (
            MetricsShape::V0,
            Version::V0,
            vllm_emulator::metrics::V0_FAMILIES,
            Generation::V0,
        ),
    ] {
        let e = busy_engine(shape);
        let info = RenderInfo {
            model_name: MODEL,
            engine_index: 0,
            start_unix_seconds: 1.7e9,
            http: None,
        };
        let body = render_string(&e, &info);
        let shapes = shape_of(&body);
        for metric in families {
            let family = metric.family();
            let series = family
                .series(version)
                .unwrap_or_else(|| panic!("{metric:?} listed for {version:?}"));
            let exposed = match family.kind {
                Kind::Counter => format!("{}_total", series.name),
                _ => series.name.to_string(),
            };
            let type_line = format!("# TYPE {exposed} {}\n", family.kind.as_str());
            assert!(body.contains(&type_line), "{type_line}");
            let help_line = format!("# HELP {exposed} {}\n", series.help);
            assert!(body.contains(&help_line), "{help_line}");
            if family.kind == Kind::Histogram {
                let want: Vec<String> = series
                    .buckets
                    .iter()
                    .copied()
                    .chain([f64::INFINITY])
                    .map(|b| {
                        let mut s = String::new();
                        vllm_emulator::py_float(b, &mut s);
                        s
                    })
                    .collect();
                let bucket = format!("{}_bucket", series.name);
                assert_eq!(shapes[&bucket].1, want, "{bucket}");
                let mut labels = series.labels.to_vec();
                labels.push("le");
                labels.sort_unstable();
                assert_eq!(shapes[&bucket].0, labels, "{bucket}");
            } else {
                let sample = shapes
                    .get(&exposed)
                    .unwrap_or_else(|| panic!("{exposed} has samples"));
                assert_eq!(sample.0, series.labels, "{exposed}");
            }
        }
        let snapshot = PodSnapshot::from_exposition(
            &vllm_keda_core::exposition::parse(&body).unwrap(),
            Some(MODEL),
        )
        .expect("a usable snapshot");
        assert_eq!(snapshot.info.generation, generation);
        let kv = vllm_keda_core::catalog::Metric::KvCacheUsage.family();
        assert_eq!(
            snapshot.info.kv_cache_metric,
            Some(kv.series(version).unwrap().name)
        );
    }
}
