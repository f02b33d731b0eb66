//! Every fixture body parses, with the expected sample counts and a few known values.

use std::path::{Path, PathBuf};

use vllm_keda_core::exposition::{self, Exposition, MetricType};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/fixtures");

fn fixture_paths() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(FIXTURES)
        .unwrap_or_else(|e| panic!("cannot list {FIXTURES}: {e}"))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|ext| ext == "prom"))
        .collect();
    paths.sort();
    paths
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// Sample lines in a body, counted the simple way: non-blank lines that are not comments.
fn count_sample_lines(body: &str) -> usize {
    body.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count()
}

fn value(exp: &Exposition<'_>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let matching: Vec<f64> = exp
        .samples_named(name)
        .filter(|s| labels.iter().all(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value)
        .collect();
    assert_eq!(matching.len(), 1, "{name} {labels:?}: {matching:?}");
    matching[0]
}

#[test]
fn every_fixture_parses_with_all_its_samples() {
    let paths = fixture_paths();
    assert!(
        paths.len() >= 4,
        "expected at least 4 fixtures in {FIXTURES}"
    );
    for path in &paths {
        let file = file_name(path);
        let body = read(path);
        let exp = exposition::parse(&body).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(
            exp.samples.len(),
            count_sample_lines(&body),
            "{file}: sample count"
        );
        let type_lines = body.lines().filter(|l| l.starts_with("# TYPE ")).count();
        assert_eq!(exp.families.len(), type_lines, "{file}: family count");
        for s in &exp.samples {
            assert!(
                exp.family_of(s.name).is_some(),
                "{file}: sample {} has no declared family",
                s.name
            );
            assert_eq!(s.timestamp_ms, None, "{file}: {}", s.name);
            // No escapes in the fixtures, so no label value may have been copied.
            for l in &s.labels {
                assert!(
                    matches!(l.value, std::borrow::Cow::Borrowed(_)),
                    "{file}: {} label {} was copied",
                    s.name,
                    l.name
                );
            }
        }
        // Every histogram's +Inf bucket equals its _count, per label set.
        for fam in exp
            .families
            .iter()
            .filter(|f| f.metric_type == MetricType::Histogram)
        {
            let bucket = format!("{}_bucket", fam.name);
            let count = format!("{}_count", fam.name);
            let inf_buckets: Vec<_> = exp
                .samples_named(&bucket)
                .filter(|s| s.label("le") == Some("+Inf"))
                .collect();
            assert!(
                !inf_buckets.is_empty(),
                "{file}: {bucket} has no +Inf bucket"
            );
            for inf in inf_buckets {
                let others: Vec<_> = inf.labels.iter().filter(|l| l.name != "le").collect();
                let matching: Vec<_> = exp
                    .samples_named(&count)
                    .filter(|c| c.labels.iter().collect::<Vec<_>>() == others)
                    .collect();
                assert_eq!(matching.len(), 1, "{file}: {count} for {others:?}");
                assert_eq!(
                    inf.value, matching[0].value,
                    "{file}: {bucket} +Inf vs {count}"
                );
            }
        }
    }
}

#[test]
fn known_values_of_the_loaded_v1_body() {
    let body = read(&Path::new(FIXTURES).join("vllm-v1-loaded.prom"));
    let exp = exposition::parse(&body).expect("vllm-v1-loaded.prom parses");
    assert_eq!(exp.samples.len(), 399, "vllm-v1-loaded.prom");
    let model = ("model_name", "meta-llama/Llama-3.1-8B-Instruct");
    let engine = ("engine", "0");
    assert_eq!(
        value(&exp, "vllm:num_requests_waiting", &[model, engine]),
        14.0
    );
    assert_eq!(
        value(&exp, "vllm:num_requests_running", &[model, engine]),
        52.0
    );
    assert_eq!(
        value(&exp, "vllm:kv_cache_usage_perc", &[model, engine]),
        0.9003
    );
    assert_eq!(
        value(&exp, "vllm:num_preemptions_total", &[model, engine]),
        47.0
    );
    assert_eq!(
        value(&exp, "process_virtual_memory_bytes", &[]),
        6.0521304064e10
    );
    assert_eq!(
        value(&exp, "vllm:prefix_cache_queries_created", &[model, engine]),
        1.767_258_059_120_000_1e9
    );
    let finished: f64 = exp
        .samples_named("vllm:request_success_total")
        .map(|s| s.value)
        .sum();
    assert_eq!(finished, 2701.0, "vllm-v1-loaded.prom: finished requests");
    assert_eq!(
        exp.metric_type("vllm:num_requests_waiting"),
        Some(MetricType::Gauge)
    );
    assert_eq!(
        exp.metric_type("vllm:e2e_request_latency_seconds"),
        Some(MetricType::Histogram)
    );
    let help = exp
        .family("vllm:num_requests_waiting")
        .and_then(|f| f.help.as_deref());
    assert_eq!(help, Some("Number of requests waiting to be processed."));
    // Label values are borrowed from the body when they hold no escapes.
    let waiting = exp
        .samples_named("vllm:num_requests_waiting")
        .next()
        .unwrap();
    assert!(
        waiting
            .labels
            .iter()
            .all(|l| matches!(l.value, std::borrow::Cow::Borrowed(_)))
    );
}

#[test]
fn known_values_of_the_other_fixtures() {
    let v0 = read(&Path::new(FIXTURES).join("vllm-v0.prom"));
    let exp = exposition::parse(&v0).expect("vllm-v0.prom parses");
    let model = exp
        .samples_named("vllm:num_requests_waiting")
        .next()
        .unwrap();
    assert_eq!(model.value, 9.0, "vllm-v0.prom: waiting");
    assert_eq!(
        exp.samples_named("vllm:gpu_cache_usage_perc")
            .next()
            .map(|s| s.value),
        Some(0.8874),
        "vllm-v0.prom: kv"
    );
    // Multiprocess mode writes `_sum` before the buckets.
    let first_e2e = exp
        .samples
        .iter()
        .find(|s| s.name.starts_with("vllm:e2e_request_latency_seconds"))
        .unwrap();
    assert_eq!(
        first_e2e.name, "vllm:e2e_request_latency_seconds_sum",
        "vllm-v0.prom"
    );

    let idle = read(&Path::new(FIXTURES).join("vllm-v1-idle.prom"));
    let exp = exposition::parse(&idle).expect("vllm-v1-idle.prom parses");
    assert_eq!(
        exp.samples_named("vllm:num_requests_waiting")
            .next()
            .map(|s| s.value),
        Some(0.0),
        "vllm-v1-idle.prom: waiting"
    );

    let dcgm = read(&Path::new(FIXTURES).join("dcgm.prom"));
    let exp = exposition::parse(&dcgm).expect("dcgm.prom parses");
    let power: Vec<f64> = exp
        .samples_named("DCGM_FI_DEV_POWER_USAGE")
        .map(|s| s.value)
        .collect();
    assert_eq!(power, [612.347, 241.905], "dcgm.prom: power");
    let pod = exp
        .samples_named("DCGM_FI_DEV_GPU_UTIL")
        .next()
        .unwrap()
        .label("pod");
    assert_eq!(
        pod,
        Some("vllm-llama-8b-6d9f7c5b8-x2kqp"),
        "dcgm.prom: pod label"
    );
}

#[test]
fn ten_thousand_series_body() {
    let mut body = String::from(
        "# HELP vllm:num_requests_waiting Waiting.\n# TYPE vllm:num_requests_waiting gauge\n",
    );
    for i in 0..10_000 {
        body.push_str(&format!(
            "vllm:num_requests_waiting{{engine=\"{i}\",model_name=\"m\"}} {i}.0\n"
        ));
    }
    let exp = exposition::parse(&body).expect("10,000 series parse");
    assert_eq!(exp.samples.len(), 10_000);
    let total: f64 = exp.samples.iter().map(|s| s.value).sum();
    assert_eq!(total, (0..10_000).map(f64::from).sum::<f64>());
    assert_eq!(exp.samples[9_999].label("engine"), Some("9999"));
}
