//! Emulated replicas over real HTTP on loopback: OpenAI routes (streaming and not), `/metrics`
//! consistent with the traffic served (checked with our parser and with Python
//! `prometheus_client`), fault controls, client aborts, and fleet add/remove.

mod emulator_common;

use std::future::Future;
use std::time::Duration;

use emulator_common::python_parse;
use serde_json::{Value, json};
use vllm_emulator::{EngineConfig, LoopbackFleet, MetricsShape, ReplicaConfig};
use vllm_keda_core::exposition;

async fn within<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("test timed out")
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

async fn post(c: &reqwest::Client, url: &str, body: Value) -> (u16, String) {
    let resp = c
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

async fn metrics(c: &reqwest::Client, base: &str) -> String {
    c.get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Sum of every sample named `name` whose labels include `labels`, via our parser.
fn sum(body: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let parsed = exposition::parse(body).expect("our parser accepts /metrics");
    parsed
        .samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .map(|s| s.value)
        .sum()
}

/// The SSE `data:` payloads of a streamed body.
fn sse_payloads(body: &str) -> Vec<&str> {
    body.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_openai_routes_and_metrics_match_the_traffic() {
    within(async {
        let fleet = LoopbackFleet::start(2, 0, ReplicaConfig::default()).await.unwrap();
        let base = fleet.urls()[0].clone();
        let c = client();
        assert_eq!(c.get(format!("{base}/health")).send().await.unwrap().status(), 200);
        let models: Value =
            serde_json::from_str(&c.get(format!("{base}/v1/models")).send().await.unwrap().text().await.unwrap())
                .unwrap();
        assert_eq!(models["data"][0]["id"], "meta-llama/Llama-3.1-8B-Instruct");

        let mut tasks = Vec::new();
        for i in 0..24u32 {
            let c = c.clone();
            let base = base.clone();
            tasks.push(tokio::spawn(async move {
                let stream = i % 2 == 0;
                let chat = i % 3 == 0;
                let (url, body) = if chat {
                    (
                        format!("{base}/v1/chat/completions"),
                        json!({"model": "meta-llama/Llama-3.1-8B-Instruct",
                               "messages": [{"role": "user", "content": "x".repeat(40 * i as usize + 4)}],
                               "max_tokens": 5 + i, "stream": stream,
                               "stream_options": {"include_usage": true}}),
                    )
                } else {
                    (
                        format!("{base}/v1/completions"),
                        json!({"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": "hello",
                               "prompt_tokens": 100 + i, "max_tokens": 8 + i,
                               "output_tokens": if i % 4 == 1 { 3 } else { 8 + i },
                               "stream": stream, "stream_options": {"include_usage": true}}),
                    )
                };
                let (status, text) = post(&c, &url, body).await;
                assert_eq!(status, 200, "{text}");
                let usage: Value = if stream {
                    let payloads = sse_payloads(&text);
                    assert_eq!(*payloads.last().unwrap(), "[DONE]");
                    let usage: Value = serde_json::from_str(payloads[payloads.len() - 2]).unwrap();
                    let tokens = payloads.len() - 2 - usize::from(chat);
                    let completion = usage["usage"]["completion_tokens"].as_u64().unwrap();
                    assert_eq!(tokens as u64, completion, "one chunk per token");
                    let last: Value = serde_json::from_str(payloads[payloads.len() - 3]).unwrap();
                    assert!(last["choices"][0]["finish_reason"].is_string());
                    usage["usage"].clone()
                } else {
                    let v: Value = serde_json::from_str(&text).unwrap();
                    let reason = v["choices"][0]["finish_reason"].as_str().unwrap().to_string();
                    let completion = v["usage"]["completion_tokens"].as_u64().unwrap();
                    if !chat && i % 4 == 1 {
                        assert_eq!((reason.as_str(), completion), ("stop", 3));
                    } else {
                        assert_eq!(reason, "length");
                    }
                    v["usage"].clone()
                };
                (
                    usage["prompt_tokens"].as_u64().unwrap(),
                    usage["completion_tokens"].as_u64().unwrap(),
                    chat,
                )
            }));
        }
        let (mut prompt, mut generated, mut chats) = (0u64, 0u64, 0u64);
        for t in tasks {
            let (p, g, chat) = t.await.unwrap();
            prompt += p;
            generated += g;
            chats += u64::from(chat);
        }
        let body = metrics(&c, &base).await;
        let n = 24.0;
        assert_eq!(sum(&body, "vllm:request_success_total", &[]), n);
        assert_eq!(sum(&body, "vllm:e2e_request_latency_seconds_count", &[]), n);
        assert_eq!(sum(&body, "vllm:time_to_first_token_seconds_count", &[]), n);
        assert_eq!(sum(&body, "vllm:prompt_tokens_total", &[]), prompt as f64);
        assert_eq!(sum(&body, "vllm:generation_tokens_total", &[]), generated as f64);
        assert_eq!(sum(&body, "vllm:num_requests_running", &[]), 0.0);
        assert_eq!(
            sum(&body, "http_requests_total", &[("handler", "/v1/chat/completions"), ("status", "2xx")]),
            chats as f64
        );
        assert_eq!(
            sum(&body, "http_requests_total", &[("handler", "/v1/completions"), ("status", "2xx")]),
            n - chats as f64
        );
        // The other replica saw nothing.
        let other = metrics(&c, &fleet.urls()[1]).await;
        assert_eq!(sum(&other, "vllm:request_success_total", &[]), 0.0);
        if let Some(py) = python_parse(&body) {
            let finished: f64 = py
                .iter()
                .filter(|s| s.name == "vllm:request_success_total")
                .map(|s| s.value)
                .sum();
            assert_eq!(finished, n);
        }
        // gzip when asked: read through a client that does not decompress, so the bytes on the
        // wire are what is checked, then inflated here.
        let raw = reqwest::Client::builder().no_gzip().build().unwrap();
        let gz = raw
            .get(format!("{base}/metrics"))
            .header("accept-encoding", "gzip")
            .send()
            .await
            .unwrap();
        assert_eq!(
            gz.headers().get("content-encoding").map(|v| v.as_bytes()),
            Some(&b"gzip"[..])
        );
        let wire = gz.bytes().await.unwrap();
        assert_eq!(&wire[..2], &[0x1f, 0x8b], "a gzip stream");
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&wire[..]), &mut text)
            .unwrap();
        assert!(text.contains("vllm:num_requests_waiting"));
        assert!(wire.len() < text.len(), "compressed");
        fleet.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_errors() {
    within(async {
        let fleet = LoopbackFleet::start(1, 0, ReplicaConfig::default())
            .await
            .unwrap();
        let base = fleet.urls()[0].clone();
        let c = client();
        let cases = [
            (
                "/v1/completions",
                json!({"prompt": "a", "max_tokens": "many"}),
                400,
                "max_tokens",
            ),
            (
                "/v1/completions",
                json!({"model": "gpt-4", "prompt": "a"}),
                404,
                "does not exist",
            ),
            (
                "/v1/chat/completions",
                json!({"prompt": "a"}),
                400,
                "messages",
            ),
            (
                "/v1/completions",
                json!({"prompt": "a", "prompt_tokens": 131000, "max_tokens": 1000}),
                400,
                "maximum context length",
            ),
        ];
        for (path, body, want_status, want_text) in cases {
            let (status, text) = post(&c, &format!("{base}{path}"), body).await;
            assert_eq!(status, want_status, "{text}");
            assert!(text.contains(want_text), "{text}");
        }
        let (status, _) = post(&c, &format!("{base}/admin/fault"), json!({"slowdown": -1})).await;
        assert_eq!(status, 400);
        let (status, text) = post(&c, &format!("{base}/admin/fault"), json!({"slow": 2})).await;
        assert_eq!(status, 400);
        assert!(text.contains("unknown field"), "{text}");
        let body = metrics(&c, &base).await;
        assert_eq!(sum(&body, "http_requests_total", &[("status", "4xx")]), 4.0);
        assert_eq!(sum(&body, "vllm:request_success_total", &[]), 0.0);
        fleet.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_fail_hang_slow_down_and_restart() {
    within(async {
        let fleet = LoopbackFleet::start(1, 0, ReplicaConfig::default())
            .await
            .unwrap();
        let base = fleet.urls()[0].clone();
        let c = client();
        let req = json!({"prompt": "a", "prompt_tokens": 200, "max_tokens": 10});
        let fault = |body: Value| {
            let c = c.clone();
            let url = format!("{base}/admin/fault");
            async move {
                let (status, text) = post(&c, &url, body).await;
                assert_eq!(status, 200, "{text}");
                serde_json::from_str::<Value>(&text).unwrap()
            }
        };
        // One request at normal speed, one at 3x: the model's e2e grows exactly 3x.
        assert_eq!(
            post(&c, &format!("{base}/v1/completions"), req.clone())
                .await
                .0,
            200
        );
        let e2e_1 = sum(
            &metrics(&c, &base).await,
            "vllm:e2e_request_latency_seconds_sum",
            &[],
        );
        let state = fault(json!({"slowdown": 3.0})).await;
        assert_eq!(state["slowdown"], 3.0);
        assert_eq!(
            post(&c, &format!("{base}/v1/completions"), req.clone())
                .await
                .0,
            200
        );
        let e2e_2 = sum(
            &metrics(&c, &base).await,
            "vllm:e2e_request_latency_seconds_sum",
            &[],
        ) - e2e_1;
        assert!((e2e_2 / e2e_1 - 3.0).abs() < 0.01, "{e2e_1} then {e2e_2}");
        fault(json!({"slowdown": 1.0})).await;

        fault(json!({"fail_rate": 1.0})).await;
        let (status, text) = post(&c, &format!("{base}/v1/completions"), req.clone()).await;
        assert_eq!(status, 500, "{text}");
        fault(json!({"fail_rate": 0.0})).await;
        let body = metrics(&c, &base).await;
        assert_eq!(sum(&body, "http_requests_total", &[("status", "5xx")]), 1.0);

        fault(json!({"hang_metrics": true})).await;
        let hung = c
            .get(format!("{base}/metrics"))
            .timeout(Duration::from_millis(300))
            .send()
            .await;
        assert!(hung.is_err(), "/metrics answered while hung");
        fault(json!({"hang_metrics": false})).await;
        let before = metrics(&c, &base).await;
        let start_before = sum(&before, "process_start_time_seconds", &[]);
        assert_eq!(sum(&before, "vllm:request_success_total", &[]), 2.0);

        tokio::time::sleep(Duration::from_millis(20)).await;
        let state = fault(json!({"restart": true})).await;
        assert_eq!(state["restarts"], 1);
        let after = metrics(&c, &base).await;
        assert_eq!(sum(&after, "vllm:request_success_total", &[]), 0.0);
        assert!(sum(&after, "process_start_time_seconds", &[]) > start_before);
        assert!(
            sum(&after, "vllm:prompt_tokens_created", &[])
                > sum(&before, "vllm:prompt_tokens_created", &[])
        );
        // Library calls do the same as the endpoint.
        fleet.replicas()[0].replica().restart();
        assert_eq!(fleet.replicas()[0].replica().snapshot().restarts, 2);
        fleet.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_is_aborted() {
    within(async {
        let fleet = LoopbackFleet::start(1, 0, ReplicaConfig::default())
            .await
            .unwrap();
        let base = fleet.urls()[0].clone();
        let c = client();
        let mut resp = c
            .post(format!("{base}/v1/completions"))
            .header("content-type", "application/json")
            .body(json!({"prompt": "a", "max_tokens": 100000, "stream": true}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let first = resp.chunk().await.unwrap().unwrap();
        assert!(first.starts_with(b"data: "));
        drop(resp);
        let replica = fleet.replicas()[0].replica().clone();
        for _ in 0..200 {
            if replica.snapshot().finished_total == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let body = metrics(&c, &base).await;
        assert_eq!(
            sum(
                &body,
                "vllm:request_success_total",
                &[("finished_reason", "abort")]
            ),
            1.0
        );
        assert_eq!(sum(&body, "vllm:kv_cache_usage_perc", &[]), 0.0);
        fleet.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_grows_and_shrinks_on_consecutive_ports_and_serves_v0() {
    within(async {
        let config = ReplicaConfig {
            engine: EngineConfig {
                metrics_shape: MetricsShape::V0,
                ..EngineConfig::default()
            },
            ..ReplicaConfig::default()
        };
        // A block of three free ports below the kernel's ephemeral range: ports there are
        // only taken by a process that asks for them by number, never by the many clients and
        // listeners (this suite's, or a benchmark's thousands) that ask for any free port, so
        // the third port is still free when the fleet grows. Probed by binding all three;
        // another block is tried if one is taken.
        let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
            .unwrap_or(32768);
        let mut started = None;
        for attempt in 0..20u16 {
            let base_port =
                ephemeral_low - 3000 + (std::process::id() as u16 % 1000) * 2 + attempt * 101;
            let probes: Vec<_> = (0..3)
                .map_while(|i| std::net::TcpListener::bind(("127.0.0.1", base_port + i)).ok())
                .collect();
            if probes.len() < 3 {
                continue;
            }
            drop(probes);
            if let Ok(fleet) = LoopbackFleet::start(2, base_port, config.clone()).await {
                started = Some((fleet, base_port));
                break;
            }
        }
        let (mut fleet, base_port) =
            started.expect("no block of 3 free loopback ports below the ephemeral range");
        assert_eq!(fleet.replicas()[1].addr().port(), base_port + 1);
        fleet.add_replica().await.unwrap();
        assert_eq!(fleet.len(), 3);
        assert_eq!(fleet.replicas()[2].addr().port(), base_port + 2);
        let c = client();
        let body = metrics(&c, &fleet.urls()[2]).await;
        assert!(body.contains("vllm:gpu_cache_usage_perc{model_name="));
        assert!(!body.contains("engine=\""));
        exposition::parse(&body).expect("our parser accepts the V0 body");
        python_parse(&body);
        let gone = fleet.urls()[2].clone();
        assert!(fleet.remove_replica().await);
        assert!(c.get(format!("{gone}/health")).send().await.is_err());
        fleet.shutdown().await;
    })
    .await;
}
