//! The service end to end in one process: the real server on loopback listeners, real vLLM-shaped
//! HTTP targets serving fixture bodies, and a tonic client calling the five RPCs the way KEDA
//! does, plus gRPC health and the admin HTTP routes.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::Code;
use vllm_keda_service::control::ControlOptions;
use vllm_keda_service::proto::external_scaler_client::ExternalScalerClient;
use vllm_keda_service::proto::{GetMetricsRequest, ScaledObjectRef};
use vllm_keda_service::serve::{self, ServeOptions, Server};

const IDLE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../data/fixtures/vllm-v1-idle.prom"
));
const LOADED: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../data/fixtures/vllm-v1-loaded.prom"
));

/// Fails the test instead of hanging it.
async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within 20 s"))
}

/// A vLLM-shaped `/metrics` target whose body can be swapped.
struct Pod {
    url: String,
    body: Arc<RwLock<String>>,
}

async fn start_pod(body: &str) -> Pod {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shared = Arc::new(RwLock::new(body.to_owned()));
    let state = shared.clone();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let state = state.clone();
            async move { state.read().unwrap().clone() }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Pod {
        url: format!("http://{addr}/metrics"),
        body: shared,
    }
}

async fn start_server() -> Server {
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let options = ServeOptions {
        stream_heartbeat: Duration::from_millis(200),
        ..ServeOptions::loopback()
    };
    serve::start(grpc, http, options).await.unwrap()
}

async fn client(addr: SocketAddr) -> ExternalScalerClient<tonic::transport::Channel> {
    ExternalScalerClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

fn metadata(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn so_ref(name: &str, metadata: HashMap<String, String>) -> ScaledObjectRef {
    ScaledObjectRef {
        name: name.to_owned(),
        namespace: "llm".to_owned(),
        scaler_metadata: metadata,
    }
}

fn valid(endpoints: &str) -> HashMap<String, String> {
    metadata(&[
        ("scalerAddress", "vllm-keda-scaler.keda:9090"),
        ("endpoints", endpoints),
        ("minReplicas", "1"),
        ("maxReplicas", "5"),
        ("scrapeIntervalSeconds", "0.2"),
    ])
}

#[tokio::test]
async fn spec_metrics_and_activity_answer_from_the_loop() {
    within("the basic RPCs", async {
        let pod = start_pod(LOADED).await;
        let server = start_server().await;
        let mut c = client(server.grpc_addr()).await;
        let r = so_ref("chat", valid(&pod.url));

        let spec = c.get_metric_spec(r.clone()).await.unwrap().into_inner();
        assert_eq!(spec.metric_specs.len(), 1);
        let s = &spec.metric_specs[0];
        assert_eq!(s.metric_name, "vllm-desired-replicas");
        assert_eq!((s.target_size, s.target_size_float), (1, 1.0));

        let metrics = c
            .get_metrics(GetMetricsRequest {
                scaled_object_ref: Some(r.clone()),
                metric_name: "vllm-desired-replicas".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(metrics.metric_values.len(), 1);
        let v = &metrics.metric_values[0];
        assert_eq!(v.metric_name, "vllm-desired-replicas");
        assert_eq!(v.metric_value as f64, v.metric_value_float);
        // One ready pod and no breach held for the 30 s stabilization (the test ends well
        // before): the target is the one replica that runs.
        assert_eq!(v.metric_value, 1, "{v:?}");

        // 14 waiting and 52 running requests: there is work.
        let active = c.is_active(r.clone()).await.unwrap().into_inner();
        assert!(active.result);

        // The loop keeps the answer fresh: latest() agrees with GetMetrics.
        let so = server.loops().find("llm", "chat").expect("loop running");
        let decision = so.latest().decision.clone().expect("a decision");
        assert_eq!(decision.target_replicas, 1, "{decision:?}");
        drop(pod);
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn bad_metadata_is_invalid_argument_naming_the_key() {
    within("bad metadata", async {
        let server = start_server().await;
        let mut c = client(server.grpc_addr()).await;
        let mut bad = valid("http://127.0.0.1:9/metrics");
        bad.insert("queueDepthPerReplica".into(), "lots".into());
        let err = c
            .get_metric_spec(so_ref("bad", bad.clone()))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains("queueDepthPerReplica"), "{err:?}");
        assert!(err.message().contains("lots"), "{err:?}");
        assert!(err.message().contains("llm/bad"), "{err:?}");
        let err = c
            .get_metrics(GetMetricsRequest {
                scaled_object_ref: Some(so_ref("bad", bad)),
                metric_name: "vllm-desired-replicas".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

        let mut typo = valid("http://127.0.0.1:9/metrics");
        typo.insert("maxReplica".into(), "3".into());
        let err = c.is_active(so_ref("typo", typo)).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains("maxReplica"), "{err:?}");
        assert!(server.loops().find("llm", "bad").is_none());
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn all_targets_down_is_unavailable_naming_them() {
    within("unavailable", async {
        // A port that was just free: connection refused.
        let dead = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap()
        };
        let url = format!("http://{dead}/metrics");
        let server = start_server().await;
        let mut c = client(server.grpc_addr()).await;
        let r = so_ref("down", valid(&url));
        // The spec never fails for valid metadata, even with every target down.
        c.get_metric_spec(r.clone()).await.unwrap();
        let err = c
            .get_metrics(GetMetricsRequest {
                scaled_object_ref: Some(r.clone()),
                metric_name: "vllm-desired-replicas".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
        assert!(err.message().contains(&dead.to_string()), "{err:?}");
        let err = c.is_active(r).await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");

        let text = reqwest::get(format!("http://{}/metrics", server.http_addr()))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            text.contains(
                "vllm_keda_scaler_unavailable_total{namespace=\"llm\",scaledobject=\"down\"} 2"
            ),
            "{text}"
        );
        assert!(text.contains("result=\"connect_error\""), "{text}");
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn streams_push_at_once_and_end_on_shutdown() {
    within("streams", async {
        let pod = start_pod(IDLE).await;
        let server = start_server().await;
        let mut c = client(server.grpc_addr()).await;
        let r = so_ref("stream", valid(&pod.url));

        let mut specs = c.stream_metric_spec(r.clone()).await.unwrap().into_inner();
        let first = specs.message().await.unwrap().expect("a spec at once");
        assert_eq!(first.metric_specs[0].metric_name, "vllm-desired-replicas");

        // Load arrives: the stream pushes `true`, then heartbeats `true` while active.
        *pod.body.write().unwrap() = LOADED.to_owned();
        let mut active = c.stream_is_active(r.clone()).await.unwrap().into_inner();
        let mut trues = 0;
        while trues < 3 {
            let m = active.message().await.unwrap().expect("stream open");
            if m.result {
                trues += 1;
            }
        }

        // Shutdown ends both streams (no hang in the drain).
        server.shutdown().await.unwrap();
        while let Ok(Some(_)) = active.message().await {}
        while let Ok(Some(_)) = specs.message().await {}
    })
    .await;
}

/// A server with these loop settings, loopback targets allowed (the pods here are on loopback).
async fn start_server_with(control: ControlOptions) -> Server {
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let options = ServeOptions {
        stream_heartbeat: Duration::from_millis(200),
        control: ControlOptions {
            scrape: vllm_keda_service::scrape::ScrapeSettings::loopback(),
            ..control
        },
        ..ServeOptions::default()
    };
    serve::start(grpc, http, options).await.unwrap()
}

#[tokio::test]
async fn each_trigger_of_a_scaledobject_has_its_own_loop_and_flapping_restarts_none() {
    within("two triggers", async {
        // No request waiting or running: inactive.
        let quiet: String = IDLE
            .lines()
            .map(|l| match l.strip_prefix("vllm:num_requests_running{") {
                Some(rest) => format!("vllm:num_requests_running{{{} 0.0\n", rest.rsplit_once(' ').unwrap().0),
                None => format!("{l}\n"),
            })
            .collect();
        let a = start_pod(&quiet).await;
        let b = start_pod(LOADED).await;
        let server = start_server().await;
        let mut c = client(server.grpc_addr()).await;
        // KEDA sends each trigger's metadata under the same namespace/name, alternating.
        let (one, two) = (valid(&a.url), valid(&b.url));
        for _ in 0..100 {
            c.get_metric_spec(so_ref("two", one.clone())).await.unwrap();
            c.get_metric_spec(so_ref("two", two.clone())).await.unwrap();
        }
        let loops = server.loops().find_all("llm", "two");
        assert_eq!(loops.len(), 2, "one loop per trigger");
        let first = server.loops().find_trigger("llm", "two", &one).unwrap();
        let second = server.loops().find_trigger("llm", "two", &two).unwrap();
        assert_ne!(first.key.trigger, second.key.trigger);
        // Each loop answers from its own targets: the loaded trigger is active, the quiet one
        // is not (both run at once; neither restarted the other).
        let on_one = c.is_active(so_ref("two", one.clone())).await.unwrap();
        let on_two = c.is_active(so_ref("two", two.clone())).await.unwrap();
        assert!(!on_one.into_inner().result);
        assert!(on_two.into_inner().result);
        assert!(!first.is_stopped() && !second.is_stopped());
        assert!(Arc::ptr_eq(
            &first,
            &server.loops().find_trigger("llm", "two", &one).unwrap()
        ));
        // The second loop's series carry its trigger id; the first's keep the two labels.
        let text = server.loops().metrics().encode();
        let labelled = format!(
            "vllm_keda_scaler_min_replicas{{namespace=\"llm\",scaledobject=\"two\",trigger=\"{}\"}} 1.0",
            second.key.trigger
        );
        assert!(text.contains(&labelled), "missing {labelled:?} in:\n{text}");
        assert!(
            text.contains("vllm_keda_scaler_min_replicas{namespace=\"llm\",scaledobject=\"two\"} 1.0"),
            "{text}"
        );
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn replaced_metadata_stops_the_old_loop_once_keda_asks_only_the_new() {
    within("replaced metadata", async {
        let a = start_pod(IDLE).await;
        let b = start_pod(IDLE).await;
        let server = start_server_with(ControlOptions {
            superseded_stop: Duration::from_millis(300),
            ..ControlOptions::default()
        })
        .await;
        let mut c = client(server.grpc_addr()).await;
        c.get_metric_spec(so_ref("moving", valid(&a.url)))
            .await
            .unwrap();
        let first = server.loops().find("llm", "moving").unwrap();
        while !first.is_stopped() {
            c.get_metrics(GetMetricsRequest {
                scaled_object_ref: Some(so_ref("moving", valid(&b.url))),
                metric_name: "vllm-desired-replicas".into(),
            })
            .await
            .unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Stopped only once it had gone unasked for superseded_stop.
        assert!(first.idle_for() >= Duration::from_millis(300));
        let second = server.loops().find("llm", "moving").unwrap();
        assert!(!second.is_stopped());
        assert_eq!(second.metadata["endpoints"], b.url);
        while server.loops().list().len() != 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn metadata_changing_on_every_call_cannot_start_loops_without_bound() {
    within("metadata flapping", async {
        let a = start_pod(IDLE).await;
        let server = start_server_with(ControlOptions {
            max_triggers: 4,
            ..ControlOptions::default()
        })
        .await;
        let mut c = client(server.grpc_addr()).await;
        let mut busy = 0;
        for i in 0..50 {
            let mut m = valid(&a.url);
            // A scrape interval longer than this test: no loop is idle for one.
            m.insert("scrapeIntervalSeconds".into(), "30".into());
            m.insert("queueDepthPerReplica".into(), format!("{}", 10 + i));
            match c.get_metric_spec(so_ref("flapping", m)).await {
                Ok(_) => {}
                Err(err) => {
                    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
                    assert!(err.message().contains("llm/flapping"), "{err:?}");
                    busy += 1;
                }
            }
        }
        // Four loops at most, each asked within its scrape interval: the rest wait.
        assert_eq!(server.loops().find_all("llm", "flapping").len(), 4);
        assert_eq!(busy, 46);
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn health_and_admin_routes() {
    within("health and admin", async {
        let pod = start_pod(LOADED).await;
        let server = start_server().await;
        let channel = tonic::transport::Endpoint::from_shared(format!(
            "http://{}",
            server.grpc_addr()
        ))
        .unwrap()
        .connect()
        .await
        .unwrap();
        let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
        let status = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: "externalscaler.ExternalScaler".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            status.status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        );

        let mut c = ExternalScalerClient::new(channel);
        let r = so_ref("admin", valid(&pod.url));
        c.get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(r),
            metric_name: "vllm-desired-replicas".into(),
        })
        .await
        .unwrap();

        let base = format!("http://{}", server.http_addr());
        let get = |path: &str| reqwest::get(format!("{base}{path}"));
        assert_eq!(get("/livez").await.unwrap().status(), 200);
        assert_eq!(get("/readyz").await.unwrap().status(), 200);
        let json = |text: String| -> serde_json::Value { serde_json::from_str(&text).unwrap() };
        let list = json(get("/debug/scaledobjects").await.unwrap().text().await.unwrap());
        assert_eq!(list["scaledobjects"][0]["name"], "admin", "{list}");
        let detail = json(
            get("/debug/scaledobjects/llm/admin")
                .await
                .unwrap()
                .text()
                .await
                .unwrap(),
        );
        assert_eq!(detail["targets"][0]["url"], pod.url.as_str(), "{detail}");
        assert_eq!(detail["targets"][0]["healthy"], true, "{detail}");
        assert_eq!(detail["config"]["metadata"]["maxReplicas"], "5", "{detail}");
        assert!(detail["decisions"][0]["decision"]["reason"].is_string(), "{detail}");
        assert!(detail["signals"]["fleet"]["queue_depth"].is_number(), "{detail}");
        // Half an hour of history before the comparison with static fleets says anything.
        // (`get`: indexing a missing key would read null too.)
        assert!(
            detail
                .get("hindsight")
                .is_some_and(serde_json::Value::is_null),
            "{detail}"
        );
        // What the proactive policy (the default) has learned: nothing yet within a second, so
        // no capacity estimate, and the start-up time is its default.
        assert_eq!(detail["learned"]["capacity_source"], "none", "{detail}");
        assert_eq!(detail["learned"]["capacity_tested"], false, "{detail}");
        assert!(detail["learned"]["capacity_per_replica"].is_null(), "{detail}");
        assert_eq!(detail["learned"]["startup_seconds"], 300.0, "{detail}");
        assert_eq!(detail["learned"]["startup_source"], "default", "{detail}");
        let missing = get("/debug/scaledobjects/llm/nope").await.unwrap();
        assert_eq!(missing.status(), 404);

        let text = get("/metrics").await.unwrap().text().await.unwrap();
        for name in [
            "vllm_keda_scaler_target_replicas{namespace=\"llm\",scaledobject=\"admin\"}",
            "vllm_keda_scaler_ready_replicas{namespace=\"llm\",scaledobject=\"admin\"} 1",
            "vllm_keda_scaler_scrapes_total{namespace=\"llm\",scaledobject=\"admin\",result=\"ok\"}",
            "vllm_keda_scaler_rpc_duration_seconds_count{method=\"GetMetrics\"} 1",
            "vllm_keda_scaler_scaledobjects 1",
            "vllm_keda_scaler_capacity_per_replica{namespace=\"llm\",scaledobject=\"admin\"} NaN",
            "vllm_keda_scaler_startup_seconds{namespace=\"llm\",scaledobject=\"admin\"} 300",
            "vllm_keda_scaler_targets{namespace=\"llm\",scaledobject=\"admin\",health=\"healthy\"} 1",
        ] {
            assert!(text.contains(name), "missing {name}:\n{text}");
        }
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_loop_stops_when_keda_stops_asking() {
    within("idle stop", async {
        let pod = start_pod(IDLE).await;
        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut options = ServeOptions::loopback();
        options.control.idle_stop = Duration::from_millis(600);
        let server = serve::start(grpc, http, options).await.unwrap();
        let mut c = client(server.grpc_addr()).await;
        c.get_metric_spec(so_ref("idle", valid(&pod.url)))
            .await
            .unwrap();
        let so = server.loops().find("llm", "idle").unwrap();
        // The loop is cancelled first and leaves the registry once its state is dropped.
        while !so.is_stopped() || server.loops().find("llm", "idle").is_some() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(server.loops().list().is_empty());
        let text = reqwest::get(format!("http://{}/metrics", server.http_addr()))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(!text.contains("scaledobject=\"idle\""), "{text}");
        assert!(text.contains("vllm_keda_scaler_scaledobjects 0"), "{text}");
        server.shutdown().await.unwrap();
    })
    .await;
}

/// How often the allocator's release was called by the test below (a `fn` pointer carries no
/// state, so the count is a static; only that test uses it).
static RELEASES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn count_release() -> bool {
    RELEASES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    true
}

#[tokio::test]
async fn free_memory_is_given_back_after_loops_stop_and_not_before() {
    use std::sync::atomic::Ordering::SeqCst;
    // Four release checks are waited out on purpose, so this test takes its own, longer bound.
    let test = async {
        let pod = start_pod(IDLE).await;
        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut options = ServeOptions::loopback();
        options.control.idle_stop = Duration::from_millis(600);
        options.release_memory = Some(count_release);
        let server = serve::start(grpc, http, options).await.unwrap();
        let mut c = client(server.grpc_addr()).await;
        c.get_metric_spec(so_ref("release", valid(&pod.url)))
            .await
            .unwrap();
        let so = server.loops().find("llm", "release").unwrap();
        // While the loop runs nothing has been freed in bulk: no release yet.
        assert_eq!(RELEASES.load(SeqCst), 0);
        // The stop is counted once the loop's state is dropped, a moment after it is cancelled.
        while !so.is_stopped() || server.loops().stopped_loops() == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(server.loops().stopped_loops(), 1);
        // The next check (within RELEASE_CHECK) sees the stopped loop and releases once.
        while RELEASES.load(SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The first check with no new stop releases once more (what the loop dropped after
        // it deregistered) ...
        while RELEASES.load(SeqCst) == 1 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // ... and no further loop stops, so the checks after it call nothing more.
        tokio::time::sleep(serve::RELEASE_CHECK * 2).await;
        assert_eq!(RELEASES.load(SeqCst), 2);
        server.shutdown().await.unwrap();
    };
    tokio::time::timeout(Duration::from_secs(60), test)
        .await
        .expect("the release test did not finish within 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_scrape_a_scaledobject_at_the_same_instants() {
    // The scaler's replicas behind the headless Service each run a loop per ScaledObject; KEDA
    // may ask them at different times. After the first cycle both sit on the same phase of a
    // wall-clock grid, so they read the pods at the same moments and answer from the same data.
    let pod = start_pod(IDLE).await;
    let md = metadata(&[("endpoints", &pod.url), ("scrapeIntervalSeconds", "1")]);
    let first = start_server().await;
    let mut c = client(first.grpc_addr()).await;
    c.get_metric_spec(so_ref("chat", md.clone())).await.unwrap();
    tokio::time::sleep(Duration::from_millis(370)).await;
    let second = start_server().await;
    let mut c = client(second.grpc_addr()).await;
    c.get_metric_spec(so_ref("chat", md)).await.unwrap();

    // When each replica's cycles 3 to 5 finished, read as they are published.
    let cycle_times = |server: &Server| {
        let mut rx = server.loops().find("llm", "chat").unwrap().subscribe();
        async move {
            let mut times = Vec::new();
            for n in 3..=5 {
                let status = rx.wait_for(|s| s.cycles >= n).await.unwrap().clone();
                times.push(status.last_healthy_unix_seconds.unwrap());
            }
            times
        }
    };
    let (a, b) = within("five cycles on both replicas", async {
        tokio::join!(cycle_times(&first), cycle_times(&second))
    })
    .await;
    // Same phase of the 1 s grid (they may be whole intervals apart). The closest pair is
    // compared, so one cycle slowed by a busy machine does not decide; out of phase, every
    // pair stays about 0.37 s apart, so 0.25 s separates the two with room for a cycle that a
    // loaded machine publishes late.
    let phase_gap = |x: f64, y: f64| {
        let apart = (x - y).rem_euclid(1.0);
        apart.min(1.0 - apart)
    };
    let closest = a
        .iter()
        .flat_map(|x| b.iter().map(move |y| phase_gap(*x, *y)))
        .fold(f64::INFINITY, f64::min);
    assert!(
        closest < 0.25,
        "cycles {a:?} and {b:?} are at least {closest:.3} s out of phase"
    );
    first.shutdown().await.unwrap();
    second.shutdown().await.unwrap();
}

/// The IDLE fixture with no request running: nothing waiting, running or finished (inactive).
fn quiet() -> String {
    IDLE.lines()
        .map(|l| match l.strip_prefix("vllm:num_requests_running{") {
            Some(rest) => format!(
                "vllm:num_requests_running{{{} 0.0\n",
                rest.rsplit_once(' ').unwrap().0
            ),
            None => format!("{l}\n"),
        })
        .collect()
}

/// Waits until the loop has published `n` more cycles (each one scrape interval of the
/// loop's own clock: the event the stream's heartbeats are compared with).
async fn cycles(so: &vllm_keda_service::control::ScaledObject, n: u64) {
    let mut rx = so.subscribe();
    let start = rx.borrow().cycles;
    rx.wait_for(|s| s.cycles >= start + n)
        .await
        .expect("the loop stopped");
}

/// Asserts the stream sends nothing while the loop publishes `n` cycles (at 0.2 s each and a
/// 0.2 s heartbeat, a stream that heartbeats would send about `n` messages meanwhile).
async fn silent_for_cycles(
    stream: &mut tonic::Streaming<vllm_keda_service::proto::IsActiveResponse>,
    so: &vllm_keda_service::control::ScaledObject,
    n: u64,
    why: &str,
) {
    tokio::select! {
        m = stream.message() => panic!("{why}: the stream sent {m:?}"),
        () = cycles(so, n) => {}
    }
}

/// Receives every message that arrives while the loop publishes `n` cycles.
async fn drain_for_cycles(
    stream: &mut tonic::Streaming<vllm_keda_service::proto::IsActiveResponse>,
    so: &vllm_keda_service::control::ScaledObject,
    n: u64,
) -> Vec<bool> {
    let mut got = Vec::new();
    let wait = cycles(so, n);
    tokio::pin!(wait);
    loop {
        tokio::select! {
            m = stream.message() => got.push(m.unwrap().expect("stream open").result),
            () = &mut wait => return got,
        }
    }
}

#[tokio::test]
async fn stream_is_active_heartbeats_only_while_active() {
    within("heartbeats", async {
        let pod = start_pod(&quiet()).await;
        let server = start_server().await;
        let mut c = client(server.grpc_addr()).await;
        let r = so_ref("beat", valid(&pod.url));
        let mut stream = c.stream_is_active(r.clone()).await.unwrap().into_inner();
        // The current state at once: inactive; then nothing while it stays inactive.
        let first = stream.message().await.unwrap().expect("stream open");
        assert!(!first.result);
        let so = server.loops().find("llm", "beat").unwrap();
        silent_for_cycles(&mut stream, &so, 8, "inactive").await;

        // Load arrives: `true` at once, then `true` heartbeats while active.
        *pod.body.write().unwrap() = LOADED.to_owned();
        for _ in 0..3 {
            let m = stream.message().await.unwrap().expect("stream open");
            assert!(m.result, "only `true` while active");
        }

        // Load leaves: one `false` (after any heartbeat already on its way), then silence.
        *pod.body.write().unwrap() = quiet();
        loop {
            let m = stream.message().await.unwrap().expect("stream open");
            if !m.result {
                break;
            }
        }
        silent_for_cycles(&mut stream, &so, 8, "inactive again").await;
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn stream_is_active_is_silent_while_the_view_is_unavailable() {
    within("unavailable stream", async {
        let pod = start_pod(LOADED).await;
        let server = start_server().await;
        let mut c = client(server.grpc_addr()).await;
        let r = so_ref("dark", valid(&pod.url));
        let mut stream = c.stream_is_active(r.clone()).await.unwrap().into_inner();
        for _ in 0..2 {
            assert!(stream.message().await.unwrap().expect("stream open").result);
        }
        let so = server.loops().find("llm", "dark").unwrap();

        // The pod's answers become unusable: after the stale bound the answer is unavailable.
        *pod.body.write().unwrap() = "not a metrics body\n".to_owned();
        let mut rx = so.subscribe();
        rx.wait_for(|s| {
            s.answer(tokio::time::Instant::now(), so.stale_after())
                .is_err()
        })
        .await
        .unwrap();
        let err = c.is_active(r.clone()).await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
        // Heartbeats sent before that instant may still be on their way: let them arrive.
        let late = drain_for_cycles(&mut stream, &so, 3).await;
        assert!(
            late.iter().all(|&a| a),
            "{late:?}: never `false` for unknown"
        );
        silent_for_cycles(&mut stream, &so, 8, "unavailable").await;

        // The pod answers again: the heartbeats resume.
        *pod.body.write().unwrap() = LOADED.to_owned();
        assert!(stream.message().await.unwrap().expect("stream open").result);
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn stream_is_active_ends_when_the_scaledobjects_metadata_changes() {
    within("stream on replaced metadata", async {
        let a = start_pod(LOADED).await;
        let b = start_pod(LOADED).await;
        let server = start_server_with(ControlOptions {
            superseded_stop: Duration::from_millis(300),
            ..ControlOptions::default()
        })
        .await;
        let mut c = client(server.grpc_addr()).await;
        let mut stream = c
            .stream_is_active(so_ref("edited", valid(&a.url)))
            .await
            .unwrap()
            .into_inner();
        assert!(stream.message().await.unwrap().expect("stream open").result);
        let old = server.loops().find("llm", "edited").unwrap();

        // The ScaledObject is edited: KEDA asks with the new metadata only, while the old
        // stream (heartbeating) stays open. The old loop stops and its stream ends.
        let mut asker = c.clone();
        let ask_new = async move {
            loop {
                asker
                    .get_metrics(GetMetricsRequest {
                        scaled_object_ref: Some(so_ref("edited", valid(&b.url))),
                        metric_name: "vllm-desired-replicas".into(),
                    })
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        let ended = async {
            while let Ok(Some(m)) = stream.message().await {
                assert!(m.result);
            }
        };
        tokio::select! {
            _ = ask_new => unreachable!(),
            () = ended => {}
        }
        assert!(old.is_stopped());
        let new = server.loops().find("llm", "edited").unwrap();
        assert!(!new.is_stopped());
        assert_ne!(new.key.trigger, old.key.trigger);
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_push_only_client_keeps_its_loop_alive() {
    within("push-only client", async {
        let pod = start_pod(LOADED).await;
        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut options = ServeOptions::loopback();
        options.stream_heartbeat = Duration::from_millis(200);
        options.control.idle_stop = Duration::from_millis(600);
        let server = serve::start(grpc, http, options).await.unwrap();
        let mut c = client(server.grpc_addr()).await;
        // Only StreamIsActive, never GetMetrics: the open stream is what keeps the loop.
        let mut stream = c
            .stream_is_active(so_ref("listener", valid(&pod.url)))
            .await
            .unwrap()
            .into_inner();
        assert!(stream.message().await.unwrap().expect("stream open").result);
        let so = server.loops().find("llm", "listener").unwrap();
        // 15 cycles of 0.2 s: 3 s, five times the idle stop.
        let beats = drain_for_cycles(&mut stream, &so, 15).await;
        assert!(!so.is_stopped(), "the loop stopped under an open stream");
        assert!(!beats.is_empty() && beats.iter().all(|&a| a), "{beats:?}");

        // Closing the stream lets the idle stop end the loop.
        drop(stream);
        while !so.is_stopped() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server.shutdown().await.unwrap();
    })
    .await;
}
