//! The service's control loop and the simulator decide identically on the same bodies.
//!
//! Two emulated engines are driven past saturation in virtual time and their `/metrics` bodies
//! rendered once per scrape interval. A loopback HTTP server hands each pod's bodies out in
//! order, one per request, and the real control loop (`serve::start`, a registered
//! ScaledObject, real HTTP scrapes) runs over them. Every cycle it publishes, with the instant
//! it used, is then replayed through the simulator's `Ours` at the same instants with the same
//! bodies: the signals and the decisions must match exactly, cycle by cycle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::get;
use tokio::net::TcpListener;

use vllm_emulator::{Engine, EngineConfig, RenderInfo, RequestSpec, render_string};
use vllm_keda_core::config::ScalerConfig;
use vllm_keda_service::serve::{ServeOptions, start};
use vllm_keda_tools::simulate::controllers::Ours;

const PODS: usize = 2;
const ROUNDS: usize = 14;
const INTERVAL: Duration = Duration::from_millis(500);

/// `bodies[pod][round]`: each engine's `/metrics` after `round` intervals of heavy load.
fn bodies() -> Vec<Vec<String>> {
    (0..PODS)
        .map(|pod| {
            let mut engine = Engine::new(EngineConfig::default()).expect("default engine");
            let mut events = Vec::new();
            let info = RenderInfo {
                model_name: "meta-llama/Llama-3.1-8B-Instruct",
                engine_index: 0,
                start_unix_seconds: 1.767e9,
                http: None,
            };
            (0..ROUNDS)
                .map(|round| {
                    // 60 req/s on one pod, 80 on the other: past saturation, so queues build.
                    let start = Duration::from_secs(round as u64 * 10);
                    for i in 0..(600 + 200 * pod as u64) {
                        let at =
                            start + Duration::from_millis(i * 10_000 / (600 + 200 * pod as u64));
                        let spec = RequestSpec {
                            prompt_tokens: 1_500,
                            output_tokens: 300,
                            max_tokens: 512,
                            stream_tokens: false,
                        };
                        engine.add_request(at, spec).expect("request accepted");
                    }
                    engine.advance_to(start + Duration::from_secs(10), &mut events);
                    events.clear();
                    render_string(&engine, &info)
                })
                .collect()
        })
        .collect()
}

#[derive(Clone)]
struct Served {
    bodies: Arc<Vec<Vec<String>>>,
    served: Arc<Mutex<Vec<usize>>>,
}

/// Pod `pod`'s next body: the first request gets round 0, the next round 1, and so on; past the
/// last round the last body again.
async fn metrics(State(s): State<Served>, Path(pod): Path<usize>) -> String {
    let mut served = s.served.lock().unwrap();
    let round = served[pod].min(ROUNDS - 1);
    served[pod] += 1;
    s.bodies[pod][round].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_loop_and_the_simulator_decide_alike() {
    let bodies = Arc::new(bodies());
    let state = Served {
        bodies: bodies.clone(),
        served: Arc::new(Mutex::new(vec![0; PODS])),
    };
    let app = axum::Router::new()
        .route("/pod/{pod}/metrics", get(metrics))
        .with_state(state.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let pods_addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let urls: Vec<String> = (0..PODS)
        .map(|pod| format!("http://{pods_addr}/pod/{pod}/metrics"))
        .collect();
    let metadata: HashMap<String, String> = [
        ("endpoints", urls.join(",")),
        ("scrapeIntervalSeconds", INTERVAL.as_secs_f64().to_string()),
        ("maxReplicas", "20".to_owned()),
        ("scaleUpStabilizationSeconds", "0".to_owned()),
        ("scaleUpPeriodSeconds", "1".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();

    let server = start(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        ServeOptions::loopback(),
    )
    .await
    .unwrap();
    let so = server
        .loops()
        .get_or_start("inference", "llama", &metadata)
        .expect("valid metadata");

    // Every published cycle: its instant, signals and decision. The watch channel keeps only
    // the latest value, so a skipped cycle is detected by its count and fails the test.
    let mut updates = so.subscribe();
    let mut cycles = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while cycles.len() < ROUNDS {
        tokio::time::timeout_at(deadline, updates.changed())
            .await
            .expect("the loop publishes a cycle within 60 s")
            .expect("the loop is running");
        let status = updates.borrow_and_update().clone();
        if status.cycles == 0 {
            continue;
        }
        assert_eq!(
            status.cycles as usize,
            cycles.len() + 1,
            "a published cycle was missed; the replay needs every one"
        );
        let signals = status.signals.clone().expect("a cycle publishes signals");
        let decision = status
            .decision
            .clone()
            .expect("a cycle publishes a decision");
        assert!(
            status.targets.iter().all(|t| t.healthy),
            "every scrape answered: {:?}",
            status.targets
        );
        cycles.push((signals, decision));
    }
    server.shutdown().await.unwrap();

    let config = ScalerConfig::from_metadata(&metadata).unwrap();
    let mut ours = Ours::new(&config, 1);
    let mut targets = Vec::new();
    for (round, (signals, decision)) in cycles.iter().enumerate() {
        let step = ours.observe(
            signals.at,
            urls.iter()
                .enumerate()
                .map(|(pod, url)| (url.clone(), bodies[pod][round].as_str())),
        );
        assert_eq!(&step.signals, signals, "signals of cycle {round}");
        assert_eq!(&step.decision, decision, "decision of cycle {round}");
        targets.push(decision.target_replicas);
    }
    // The bodies drive the fleet past saturation and the rate limit allows +2 a second: the
    // comparison covers several scale-outs, not one repeated answer.
    let raised = targets.windows(2).filter(|w| w[1] > w[0]).count();
    assert!(
        targets[0] > PODS as u32 && raised >= 2,
        "the load should raise the target more than once: {targets:?}"
    );
}
