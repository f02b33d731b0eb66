//! Scaler metadata: defaults, every key's accepted values, bad values and unknown keys, with
//! the exact error messages KEDA users will read.

use std::collections::HashMap;
use std::time::Duration;

use vllm_keda_core::config::{ConfigError, IGNORED_KEYS, KEYS, Mode, ScalerConfig, TargetSource};
use vllm_keda_core::policy::PolicyConfig;

fn meta(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    let mut m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    if !m.contains_key("service") && !m.contains_key("endpoints") {
        m.insert("endpoints".into(), "10.0.0.7:8000".into());
    }
    m
}

fn parse(pairs: &[(&str, &str)]) -> Result<ScalerConfig, ConfigError> {
    ScalerConfig::from_metadata(&meta(pairs))
}

fn err(pairs: &[(&str, &str)]) -> String {
    match parse(pairs) {
        Ok(c) => panic!("{pairs:?} accepted: {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn defaults_are_the_source_guides_example() {
    let c = parse(&[
        ("scalerAddress", "scaler:9090"),
        ("enableTLS", "false"),
        ("unsafeSsl", "x"),
    ])
    .unwrap();
    assert_eq!(
        c.targets,
        TargetSource::Static(vec!["http://10.0.0.7:8000/metrics".into()])
    );
    assert_eq!(c.dcgm_targets, None);
    assert_eq!(c.model, None);
    assert_eq!(c.scrape_interval, Duration::from_secs(2));
    assert_eq!(c.policy, PolicyConfig::default());
    let p = &c.policy;
    assert_eq!((p.min_replicas, p.max_replicas), (1, 5));
    assert_eq!(p.queue_depth_per_replica, 25.0);
    assert_eq!(
        (
            p.e2e_latency_slo_seconds,
            p.ttft_slo_seconds,
            p.itl_slo_seconds
        ),
        (Some(60.0), Some(2.0), Some(0.07))
    );
    assert_eq!((p.kv_cache_warning, p.kv_cache_critical), (0.80, 0.95));
    assert_eq!(p.preemptions_per_second_per_replica, 5.0);
    assert_eq!(
        (p.scale_up_pods, p.scale_up_period, p.scale_up_stabilization),
        (2, Duration::from_secs(60), Duration::from_secs(30))
    );
    assert_eq!(
        (
            p.scale_down_pods,
            p.scale_down_period,
            p.scale_down_stabilization
        ),
        (1, Duration::from_secs(120), Duration::from_secs(300))
    );
    assert_eq!(p.startup_grace, Duration::from_secs(600));
    assert_eq!(p.hpa_tolerance, 0.1);
    assert_eq!(p.mode, Mode::Active);
}

#[test]
fn every_key_sets_its_field() {
    let c = parse(&[
        ("model", " meta-llama/Llama-3.1-8B-Instruct "),
        ("queueDepthPerReplica", "12.5"),
        ("latencySloSeconds", "3"),
        ("ttftSloSeconds", "1.5"),
        ("itlSloSeconds", "0.08"),
        ("kvCacheWarning", "0.7"),
        ("kvCacheCritical", "0.9"),
        ("preemptionRateThreshold", "0.5"),
        ("minReplicas", "2"),
        ("maxReplicas", "12.0"),
        ("scaleUpPods", "3"),
        ("scaleUpPeriodSeconds", "45"),
        ("scaleUpStabilizationSeconds", "0"),
        ("scaleDownPods", "2"),
        ("scaleDownPeriodSeconds", "90.5"),
        ("scaleDownStabilizationSeconds", "600"),
        ("startupGraceSeconds", "300"),
        ("scrapeIntervalSeconds", "0.5"),
        ("hpaTolerance", "0.05"),
        ("mode", "advisory"),
        (
            "dcgmEndpoints",
            "10.0.1.1:9400, http://10.0.1.2:9400/metrics",
        ),
    ])
    .unwrap();
    assert_eq!(c.model.as_deref(), Some("meta-llama/Llama-3.1-8B-Instruct"));
    assert_eq!(c.scrape_interval, Duration::from_millis(500));
    assert_eq!(
        c.dcgm_targets,
        Some(TargetSource::Static(vec![
            "http://10.0.1.1:9400/metrics".into(),
            "http://10.0.1.2:9400/metrics".into()
        ]))
    );
    let want = PolicyConfig {
        min_replicas: 2,
        max_replicas: 12,
        queue_depth_per_replica: 12.5,
        e2e_latency_slo_seconds: Some(3.0),
        ttft_slo_seconds: Some(1.5),
        itl_slo_seconds: Some(0.08),
        kv_cache_warning: 0.7,
        kv_cache_critical: 0.9,
        preemptions_per_second_per_replica: 0.5,
        scale_up_pods: 3,
        scale_up_period: Duration::from_secs(45),
        scale_up_stabilization: Duration::ZERO,
        scale_down_pods: 2,
        scale_down_period: Duration::from_secs_f64(90.5),
        scale_down_stabilization: Duration::from_secs(600),
        startup_grace: Duration::from_secs(300),
        hpa_tolerance: 0.05,
        mode: Mode::Advisory,
        gpu_memory_required: true,
        ..PolicyConfig::default()
    };
    assert_eq!(c.policy, want);
}

#[test]
fn latency_slos_can_be_off() {
    // Each one alone: off, the others keep their defaults.
    let d = PolicyConfig::default();
    let c = parse(&[("ttftSloSeconds", "off")]).unwrap().policy;
    assert_eq!(
        (
            c.e2e_latency_slo_seconds,
            c.ttft_slo_seconds,
            c.itl_slo_seconds
        ),
        (d.e2e_latency_slo_seconds, None, d.itl_slo_seconds)
    );
    let c = parse(&[("itlSloSeconds", " Off ")]).unwrap().policy;
    assert_eq!(
        (c.ttft_slo_seconds, c.itl_slo_seconds),
        (d.ttft_slo_seconds, None)
    );
    let c = parse(&[("latencySloSeconds", "OFF"), ("ttftSloSeconds", "1.5")])
        .unwrap()
        .policy;
    assert_eq!(
        (c.e2e_latency_slo_seconds, c.ttft_slo_seconds),
        (None, Some(1.5))
    );
    // All three off is allowed: the queue, KV-cache and preemption rules remain.
    let c = parse(&[
        ("latencySloSeconds", "off"),
        ("ttftSloSeconds", "off"),
        ("itlSloSeconds", "off"),
    ])
    .unwrap();
    assert_eq!(
        c.policy,
        PolicyConfig {
            e2e_latency_slo_seconds: None,
            ttft_slo_seconds: None,
            itl_slo_seconds: None,
            ..PolicyConfig::default()
        }
    );
    // What /debug/scaledobjects shows: `None`, never NaN or 0.
    let shown = format!("{c:?}");
    assert!(shown.contains("e2e_latency_slo_seconds: None"), "{shown}");
    assert!(!shown.contains("NaN"), "{shown}");
}

#[test]
fn targets_take_each_form() {
    let cases: &[(&[(&str, &str)], TargetSource)] = &[
        (
            &[(
                "endpoints",
                "a:8000,http://b.example:8443/v/metrics,a:8000, ,http://c:9000/",
            )],
            TargetSource::Static(vec![
                "http://a:8000/metrics".into(),
                "http://b.example:8443/v/metrics".into(),
                "http://c:9000/metrics".into(),
            ]),
        ),
        (
            &[
                ("endpoints", "10.0.0.1:8000"),
                ("metricsPath", "/vllm/metrics"),
            ],
            TargetSource::Static(vec!["http://10.0.0.1:8000/vllm/metrics".into()]),
        ),
        (
            &[("service", "vllm-headless.default.svc.cluster.local")],
            TargetSource::Dns {
                host: "vllm-headless.default.svc.cluster.local".into(),
                port: 8000,
                path: "/metrics".into(),
            },
        ),
        (
            &[("service", "vllm"), ("port", "8080"), ("metricsPath", "/m")],
            TargetSource::Dns {
                host: "vllm".into(),
                port: 8080,
                path: "/m".into(),
            },
        ),
        (
            &[("service", "vllm:9000")],
            TargetSource::Dns {
                host: "vllm".into(),
                port: 9000,
                path: "/metrics".into(),
            },
        ),
    ];
    for (pairs, want) in cases {
        assert_eq!(&parse(pairs).unwrap().targets, want, "{pairs:?}");
    }
    let c = parse(&[("dcgmService", "dcgm-exporter.gpu-operator")]).unwrap();
    assert_eq!(
        c.dcgm_targets,
        Some(TargetSource::Dns {
            host: "dcgm-exporter.gpu-operator".into(),
            port: 9400,
            path: "/metrics".into()
        })
    );
}

#[test]
fn bad_values_name_the_key_the_value_and_what_is_expected() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "queueDepthPerReplica",
            "abc",
            "expected a positive number, got \"abc\"",
        ),
        (
            "queueDepthPerReplica",
            "0",
            "expected a positive number, got \"0\"",
        ),
        (
            "queueDepthPerReplica",
            "-5",
            "expected a positive number, got \"-5\"",
        ),
        (
            "queueDepthPerReplica",
            "NaN",
            "expected a positive number, got \"NaN\"",
        ),
        (
            "queueDepthPerReplica",
            "inf",
            "expected a positive number, got \"inf\"",
        ),
        (
            "queueDepthPerReplica",
            "1e3",
            "expected a positive number, got \"1e3\"",
        ),
        (
            "queueDepthPerReplica",
            "",
            "expected a positive number, got \"\"",
        ),
        (
            "latencySloSeconds",
            "5s",
            "expected a positive number of seconds or \"off\", got \"5s\"",
        ),
        (
            "ttftSloSeconds",
            "0",
            "expected a positive number of seconds or \"off\", got \"0\"",
        ),
        (
            "itlSloSeconds",
            "-0.1",
            "expected a positive number of seconds or \"off\", got \"-0.1\"",
        ),
        (
            "itlSloSeconds",
            "none",
            "expected a positive number of seconds or \"off\", got \"none\"",
        ),
        (
            "latencySloSeconds",
            "false",
            "expected a positive number of seconds or \"off\", got \"false\"",
        ),
        (
            "kvCacheWarning",
            "80",
            "expected a fraction above 0 and at most 1 (0.8 means 80 %), got \"80\"",
        ),
        (
            "kvCacheCritical",
            "0",
            "expected a fraction above 0 and at most 1 (0.8 means 80 %), got \"0\"",
        ),
        (
            "preemptionRateThreshold",
            "lots",
            "expected a positive number of preemptions per second per replica, got \"lots\"",
        ),
        (
            "minReplicas",
            "0",
            "expected a whole number >= 1, got \"0\"",
        ),
        (
            "minReplicas",
            "1.5",
            "expected a whole number >= 1, got \"1.5\"",
        ),
        (
            "maxReplicas",
            "99999999999",
            "expected a whole number >= 1, got \"99999999999\"",
        ),
        (
            "scaleUpPods",
            "0",
            "expected a whole number of pods >= 1, got \"0\"",
        ),
        (
            "scaleUpPeriodSeconds",
            "0",
            "expected a positive number of seconds, got \"0\"",
        ),
        (
            "scaleUpStabilizationSeconds",
            "-1",
            "expected a number of seconds >= 0, got \"-1\"",
        ),
        (
            "scaleDownPods",
            "one",
            "expected a whole number of pods >= 1, got \"one\"",
        ),
        (
            "scaleDownPeriodSeconds",
            "2m",
            "expected a positive number of seconds, got \"2m\"",
        ),
        (
            "scaleDownStabilizationSeconds",
            "5m",
            "expected a number of seconds >= 0, got \"5m\"",
        ),
        (
            "startupGraceSeconds",
            "ten",
            "expected a number of seconds >= 0, got \"ten\"",
        ),
        (
            "scrapeIntervalSeconds",
            "0.05",
            "expected a number of seconds >= 0.1, got \"0.05\"",
        ),
        (
            "hpaTolerance",
            "1",
            "expected a fraction >= 0 and below 1 (0.1 means 10 %), got \"1\"",
        ),
        (
            "mode",
            "passive",
            "expected \"active\" or \"advisory\", got \"passive\"",
        ),
        (
            "model",
            " ",
            "expected a model name (the `model_name` label), got \" \"",
        ),
        (
            "metricsPath",
            "metrics",
            "expected a path starting with \"/\", got \"metrics\"",
        ),
        (
            "endpoints",
            "10.0.0.7",
            "expected comma-separated http://host:port/path URLs or host:port entries, got \"10.0.0.7\"",
        ),
        (
            "endpoints",
            "a:8000,ftp://b:21",
            "expected comma-separated http://host:port/path URLs or host:port entries, got \"ftp://b:21\"",
        ),
        (
            "endpoints",
            "http://a:8000,https://b:8443/metrics",
            "entry \"https://b:8443/metrics\" uses https://, which the scaler does not scrape (it has no TLS client for targets; vLLM serves /metrics over plain HTTP): write it as \"http://b:8443/metrics\" or remove it",
        ),
        (
            "dcgmEndpoints",
            "https://dcgm:9400",
            "entry \"https://dcgm:9400\" uses https://, which the scaler does not scrape (it has no TLS client for targets; vLLM serves /metrics over plain HTTP): write it as \"http://dcgm:9400\" or remove it",
        ),
        (
            "endpoints",
            " , ",
            "expected comma-separated http://host:port/path URLs or host:port entries, got \" , \"",
        ),
        (
            "service",
            "under_score.svc",
            "expected a DNS name such as vllm-headless.default.svc.cluster.local, optionally name:port, got \"under_score.svc\"",
        ),
        (
            "dcgmService",
            "dcgm:0",
            "expected a DNS name such as vllm-headless.default.svc.cluster.local, optionally name:port, got \"dcgm:0\"",
        ),
        (
            "dcgmEndpoints",
            "dcgm",
            "expected comma-separated http://host:port/path URLs or host:port entries, got \"dcgm\"",
        ),
    ];
    for (key, value, message) in cases {
        let got = err(&[(key, value)]);
        assert_eq!(
            got,
            format!("scaler metadata \"{key}\": {message}"),
            "{key}={value:?}"
        );
    }
}

#[test]
fn port_is_checked_with_service() {
    assert_eq!(
        err(&[("service", "vllm"), ("port", "70000")]),
        "scaler metadata \"port\": expected a port number from 1 to 65535, got \"70000\""
    );
    assert_eq!(
        err(&[("port", "8000")]),
        "scaler metadata \"port\": only used with \"service\"; put the port in each entry of \"endpoints\""
    );
    assert_eq!(
        err(&[("service", "vllm:8000"), ("port", "8000")]),
        "scaler metadata \"port\": expected the port either in \"service\" (name:port) or in \"port\", not both"
    );
}

#[test]
fn exactly_one_target_source() {
    let none = ScalerConfig::from_metadata(&HashMap::new()).unwrap_err();
    assert_eq!(
        none.to_string(),
        "scaler metadata \"endpoints\": required: comma-separated vLLM metrics URLs or host:port entries (or set \"service\" to a headless Service name)"
    );
    assert_eq!(none.key, "endpoints");
    assert_eq!(
        err(&[("endpoints", "a:1"), ("service", "vllm")]),
        "scaler metadata \"service\": expected either \"endpoints\" or \"service\", not both"
    );
    assert_eq!(
        err(&[("dcgmEndpoints", "a:1"), ("dcgmService", "dcgm")]),
        "scaler metadata \"dcgmService\": expected either \"dcgmEndpoints\" or \"dcgmService\", not both"
    );
}

#[test]
fn cross_field_checks_blame_the_key_written() {
    assert_eq!(
        err(&[("minReplicas", "4"), ("maxReplicas", "3")]),
        "scaler metadata \"maxReplicas\": expected a whole number >= minReplicas (4), got \"3\""
    );
    assert_eq!(
        err(&[("minReplicas", "8")]),
        "scaler metadata \"minReplicas\": expected a whole number <= maxReplicas (5, the default; set maxReplicas too), got \"8\""
    );
    assert_eq!(
        err(&[("kvCacheWarning", "0.9"), ("kvCacheCritical", "0.9")]),
        "scaler metadata \"kvCacheCritical\": expected a fraction above kvCacheWarning (0.9), got \"0.9\""
    );
    assert_eq!(
        err(&[("kvCacheWarning", "0.97")]),
        "scaler metadata \"kvCacheWarning\": expected a fraction below kvCacheCritical (0.95), got \"0.97\""
    );
    assert!(parse(&[("minReplicas", "3"), ("maxReplicas", "3")]).is_ok());
}

#[test]
fn unknown_keys_are_errors_with_a_suggestion() {
    let cases: &[(&str, &str)] = &[
        (
            "queueDepthPerReplcia",
            "unknown key; did you mean \"queueDepthPerReplica\"?",
        ),
        ("MinReplicas", "unknown key; did you mean \"minReplicas\"?"),
        (
            "minReplicaCount",
            "unknown key; did you mean \"minReplicas\"?",
        ),
        (
            "latencySlo",
            "unknown key; did you mean \"latencySloSeconds\"?",
        ),
        (
            "kvCacheWarn",
            "unknown key; did you mean \"kvCacheWarning\"?",
        ),
        ("enableTls", "unknown key; did you mean \"enableTLS\"?"),
    ];
    for (key, message) in cases {
        assert_eq!(
            err(&[(key, "1")]),
            format!("scaler metadata \"{key}\": {message}")
        );
    }
    let far = err(&[("threshold", "25")]);
    assert!(
        far.starts_with(
            "scaler metadata \"threshold\": unknown key; known keys are endpoints, service, port,"
        ),
        "{far}"
    );
    // The first unknown key alphabetically, before any value check.
    assert_eq!(
        err(&[("zeta", "1"), ("alpha", "1"), ("minReplicas", "x")]),
        "scaler metadata \"alpha\": unknown key; known keys are ".to_owned()
            + &KEYS.iter().map(|k| k.key).collect::<Vec<_>>().join(", ")
    );
}

#[test]
fn every_documented_key_is_accepted_and_keda_keys_are_ignored() {
    assert_eq!(KEYS.len(), 28);
    for k in KEYS {
        let e = parse(&[(k.key, "\u{1}")]);
        if let Err(e) = e {
            assert!(!e.message.starts_with("unknown key"), "{}: {e}", k.key);
        }
    }
    for k in IGNORED_KEYS {
        assert!(parse(&[(k, "anything")]).is_ok(), "{k}");
    }
}

#[test]
fn docs_tables_list_every_key_with_its_default_and_meaning() {
    for file in ["README.md", "docs/policy.md"] {
        let path = format!("{}/../../{file}", env!("CARGO_MANIFEST_DIR"));
        let doc = std::fs::read_to_string(&path).expect(file);
        for k in KEYS {
            let row = format!("| `{}` | {} | {} |", k.key, k.default, k.meaning);
            assert!(doc.contains(&row), "{file} lacks the row {row:?}");
        }
    }
}

/// One row of docs/policy.md's "Proactive policy settings" table.
struct SettingRow {
    /// The setting's name, `backstop` in `backstop=always|growing`.
    name: String,
    /// What follows the `=`: `always|growing`, or `F`, `S`, `K`, ... for a number.
    form: String,
    values: String,
    default: String,
}

/// The rows of docs/policy.md's "Proactive policy settings" table, in order.
fn proactive_settings_table() -> Vec<SettingRow> {
    let path = format!("{}/../../docs/policy.md", env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(&path).expect("docs/policy.md");
    let section = doc
        .split("\n### Proactive policy settings\n")
        .nth(1)
        .expect("docs/policy.md has no section \"### Proactive policy settings\"");
    let section = section.split("\n#").next().unwrap();
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|line| {
            // A `|` within a cell is written `\|`.
            let cells: Vec<String> = line
                .replace("\\|", "\u{0}")
                .trim_start_matches("| ")
                .trim_end_matches(" |")
                .split(" | ")
                .map(|c| c.replace('\u{0}', "|"))
                .collect();
            assert_eq!(
                cells.len(),
                4,
                "not setting | values | default | what: {line}"
            );
            let setting = cells[0].trim_matches('`');
            let (name, form) = setting
                .split_once('=')
                .unwrap_or_else(|| panic!("not NAME=VALUE: {line}"));
            SettingRow {
                name: name.to_owned(),
                form: form.to_owned(),
                values: cells[1].clone(),
                default: cells[2].clone(),
            }
        })
        .collect()
}

/// The settings the `policy` key's parser lists in its error message, in its order.
fn proactive_settings_parsed() -> Vec<String> {
    let e = err(&[("policy", "proactive; nosuchsetting=1")]);
    assert!(e.contains("unknown setting"), "{e}");
    // Each setting is listed as `; NAME=...`.
    let names: Vec<String> = e
        .split("`; ")
        .skip(1)
        .map(|s| s.split('=').next().unwrap().to_owned())
        .collect();
    for n in &names {
        assert!(
            !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric()),
            "{n:?} in {e}"
        );
    }
    names
}

#[test]
fn the_proactive_settings_table_lists_every_setting_the_parser_takes() {
    let table = proactive_settings_table();
    let mut documented: Vec<&str> = table.iter().map(|r| r.name.as_str()).collect();
    documented.sort_unstable();
    let listed = documented.len();
    documented.dedup();
    assert_eq!(documented.len(), listed, "a setting is listed twice");

    let mut parsed = proactive_settings_parsed();
    parsed.sort_unstable();
    let missing: Vec<&String> = parsed
        .iter()
        .filter(|n| !documented.contains(&n.as_str()))
        .collect();
    let extra: Vec<&&str> = documented
        .iter()
        .filter(|n| !parsed.iter().any(|p| p == **n))
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/policy.md's \"Proactive policy settings\" misses {missing:?} and lists {extra:?}, \
         which the parser does not"
    );

    // Each row parses: every named value, or a number from its values or default cell (or 1).
    let parses = |name: &str, v: &str| parse(&[("policy", &format!("proactive; {name}={v}"))]);
    for r in &table {
        if r.form.contains(|c: char| c.is_ascii_lowercase()) {
            for v in r.form.split('|') {
                if let Err(e) = parses(&r.name, v) {
                    panic!("{}={v}, as the table lists it: {e}", r.name);
                }
            }
        } else {
            let cells = format!("{} {}", r.values, r.default);
            let mut numbers: Vec<&str> = cells
                .split(|c: char| !(c.is_ascii_digit() || c == '.'))
                .filter(|t| t.parse::<f64>().is_ok())
                .collect();
            numbers.push("1");
            assert!(
                numbers.iter().any(|v| parses(&r.name, v).is_ok()),
                "{}: none of {numbers:?} parses",
                r.name
            );
        }
    }
}

#[test]
fn the_proactive_settings_table_gives_the_defaults() {
    let base = parse(&[("policy", "proactive")]).unwrap();
    let mut unset = 0;
    let mut wrong = Vec::new();
    for r in proactive_settings_table() {
        // The default cell starts with the default value, or `unset`.
        let value = r.default.split([' ', ',', ':', ';']).next().unwrap();
        if value == "unset" {
            unset += 1;
            continue;
        }
        let set = format!("proactive; {}={value}", r.name);
        match parse(&[("policy", &set)]) {
            Ok(read) if read == base => {}
            Ok(_) => wrong.push(format!("{set}: not the default")),
            Err(e) => wrong.push(format!("{set}: {}", e.message.split(';').next().unwrap())),
        }
    }
    assert!(wrong.is_empty(), "documented defaults: {wrong:#?}");
    // capacity, startup, backlog and attainment.
    assert_eq!(unset, 4);
}

/// For each key: the metadata it is set beside and a valid value other than its default.
fn non_default(key: &str) -> Option<(&'static [(&'static str, &'static str)], &'static str)> {
    const ENDPOINTS: &[(&str, &str)] = &[("endpoints", "10.0.0.7:8000")];
    const SERVICE: &[(&str, &str)] = &[("service", "vllm")];
    Some(match key {
        "endpoints" => (ENDPOINTS, "10.0.0.8:8000"),
        "service" => (SERVICE, "vllm-other:8001"),
        "port" => (SERVICE, "8080"),
        "metricsPath" => (ENDPOINTS, "/vllm/metrics"),
        "model" => (ENDPOINTS, "m"),
        "queueDepthPerReplica" => (ENDPOINTS, "10"),
        "latencySloSeconds" => (ENDPOINTS, "off"),
        "ttftSloSeconds" => (ENDPOINTS, "1"),
        "itlSloSeconds" => (ENDPOINTS, "0.1"),
        "kvCacheWarning" => (ENDPOINTS, "0.5"),
        "kvCacheCritical" => (ENDPOINTS, "0.9"),
        "preemptionRateThreshold" => (ENDPOINTS, "1"),
        "minReplicas" => (ENDPOINTS, "2"),
        "maxReplicas" => (ENDPOINTS, "9"),
        "scaleUpPods" => (ENDPOINTS, "1"),
        "scaleUpPeriodSeconds" => (ENDPOINTS, "30"),
        "scaleUpStabilizationSeconds" => (ENDPOINTS, "0"),
        "scaleDownPods" => (ENDPOINTS, "2"),
        "scaleDownPeriodSeconds" => (ENDPOINTS, "60"),
        "scaleDownStabilizationSeconds" => (ENDPOINTS, "30"),
        "startupGraceSeconds" => (ENDPOINTS, "60"),
        "scrapeIntervalSeconds" => (ENDPOINTS, "5"),
        "rateWindowSeconds" => (ENDPOINTS, "30"),
        "hpaTolerance" => (ENDPOINTS, "0"),
        "mode" => (ENDPOINTS, "advisory"),
        "policy" => (ENDPOINTS, "guide"),
        "dcgmEndpoints" => (ENDPOINTS, "10.0.1.1:9400"),
        "dcgmService" => (ENDPOINTS, "dcgm"),
        _ => return None,
    })
}

fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn every_key_in_the_table_is_read() {
    for k in KEYS {
        let (beside, value) = non_default(k.key)
            .unwrap_or_else(|| panic!("{}: give it a non-default value here", k.key));
        let base = ScalerConfig::from_metadata(&map(beside)).unwrap();
        let mut set = map(beside);
        set.insert(k.key.to_owned(), value.to_owned());
        let read = ScalerConfig::from_metadata(&set)
            .unwrap_or_else(|e| panic!("{}={value:?}: {e}", k.key));
        assert_ne!(read, base, "{}={value:?} changed nothing", k.key);
    }
}

#[test]
fn documented_defaults_are_the_defaults() {
    let mut checked = 0;
    for k in KEYS {
        let Some((beside, _)) = non_default(k.key) else {
            continue;
        };
        if k.default.starts_with("required") || k.default.starts_with("unset") {
            continue;
        }
        let base = ScalerConfig::from_metadata(&map(beside)).unwrap();
        let mut set = map(beside);
        set.insert(k.key.to_owned(), k.default.to_owned());
        let read = ScalerConfig::from_metadata(&set)
            .unwrap_or_else(|e| panic!("{} default {:?}: {e}", k.key, k.default));
        assert_eq!(read, base, "{} default {:?}", k.key, k.default);
        checked += 1;
    }
    // Every key but the two target sources, model and the two DCGM keys has a value default.
    assert_eq!(checked, KEYS.len() - 5);
}

#[test]
fn metadata_sizes_are_refused_just_past_their_limits() {
    use vllm_keda_core::config::{
        MAX_METADATA_KEY_BYTES, MAX_METADATA_KEYS, MAX_METADATA_VALUE_BYTES,
    };
    assert_eq!(
        (
            MAX_METADATA_KEYS,
            MAX_METADATA_KEY_BYTES,
            MAX_METADATA_VALUE_BYTES
        ),
        (64, 128, 32 * 1024)
    );
    let over = |e: &ConfigError| e.message.contains("more than the limit");

    // Keys: 64 pass the size check (and fail on the first unknown one), 65 do not.
    let with_keys = |n: usize| {
        let mut m = map(&[("endpoints", "10.0.0.7:8000")]);
        for i in 1..n {
            m.insert(format!("extra{i:03}"), "1".to_owned());
        }
        assert_eq!(m.len(), n);
        ScalerConfig::from_metadata(&m).unwrap_err()
    };
    let at = with_keys(64);
    assert!(!over(&at), "{at}");
    assert_eq!(at.key, "extra001");
    let past = with_keys(65);
    assert_eq!(
        past.to_string(),
        "scaler metadata \"(all keys)\": 65 keys, more than the limit of 64"
    );

    // Key length: 128 bytes pass (an unknown key), 129 do not, shown cut to 32 characters.
    let key_at = "k".repeat(128);
    let at = ScalerConfig::from_metadata(&meta(&[(&key_at, "1")])).unwrap_err();
    assert!(!over(&at), "{at}");
    assert_eq!(at.key, key_at);
    let key_past = "k".repeat(129);
    let past = ScalerConfig::from_metadata(&meta(&[(&key_past, "1")])).unwrap_err();
    assert_eq!(
        past.to_string(),
        format!(
            "scaler metadata \"{}...\": the key is 129 bytes long, more than the limit of 128",
            "k".repeat(32)
        )
    );

    // Value length: an endpoints list padded to exactly 32 KiB is read; one byte more is not.
    let value_at = format!("10.0.0.7:8000,{}", " ".repeat(32 * 1024 - 14));
    assert_eq!(value_at.len(), 32 * 1024);
    let c = ScalerConfig::from_metadata(&map(&[("endpoints", &value_at)])).unwrap();
    assert_eq!(
        c.targets,
        TargetSource::Static(vec!["http://10.0.0.7:8000/metrics".into()])
    );
    let value_past = format!("{value_at} ");
    let past = ScalerConfig::from_metadata(&map(&[("endpoints", &value_past)])).unwrap_err();
    assert_eq!(
        past.to_string(),
        "scaler metadata \"endpoints\": the value is 32769 bytes long, more than the limit of 32768"
    );
}

#[test]
fn the_scrape_interval_serializes_as_seconds() {
    let c = parse(&[("scrapeIntervalSeconds", "0.5")]).unwrap();
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["scrape_interval"], serde_json::json!(0.5));
    let c = parse(&[]).unwrap();
    assert_eq!(
        serde_json::to_value(&c).unwrap()["scrape_interval"],
        serde_json::json!(2.0)
    );
}

#[test]
fn a_rate_window_holds_at_least_three_scrapes() {
    let with = |pairs: &[(&str, &str)]| {
        let mut m = map(&[("endpoints", "10.0.0.7:8000")]);
        m.extend(map(pairs));
        ScalerConfig::from_metadata(&m)
    };
    let ok = with(&[("rateWindowSeconds", "10"), ("scrapeIntervalSeconds", "1")]).unwrap();
    assert_eq!(ok.policy.rate_window, std::time::Duration::from_secs(10));
    assert_eq!(
        with(&[("rateWindowSeconds", "10"), ("scrapeIntervalSeconds", "5")])
            .unwrap_err()
            .to_string(),
        "scaler metadata \"rateWindowSeconds\": expected at least 3 scrape intervals (15 s with scrapeIntervalSeconds 5), got \"10\""
    );
    for bad in ["0", "0.5", "181", "1m"] {
        let e = with(&[("rateWindowSeconds", bad)]).unwrap_err();
        assert_eq!(e.key, "rateWindowSeconds", "{bad}: {e}");
    }
    // Unset, the 60 s default is not checked against a long scrape interval.
    assert!(with(&[("scrapeIntervalSeconds", "30")]).is_ok());
}
