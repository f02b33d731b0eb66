//! The demo's KEDA/HPA stand-in against the real scaler over gRPC: it reads the target the
//! scaler returns and feeds the HPA model, and when the scaler cannot answer the HPA keeps the
//! replicas it has.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use vllm_emulator::{ReplicaConfig, ReplicaHandle};
use vllm_keda_service::serve::{self, ServeOptions};
use vllm_keda_tools::demo::keda::{CallError, KedaHpa};
use vllm_keda_tools::keda::ours_hpa_spec;

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), future)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

fn metadata(endpoints: &str) -> HashMap<String, String> {
    [
        ("scalerAddress", "127.0.0.1"),
        ("endpoints", endpoints),
        ("minReplicas", "1"),
        ("maxReplicas", "4"),
        ("scrapeIntervalSeconds", "0.2"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

async fn scaler() -> serve::Server {
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    serve::start(grpc, http, ServeOptions::loopback())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hpa_follows_the_scaler_and_holds_when_it_cannot_answer() {
    within("the stand-in against the scaler", async {
        let server = scaler().await;
        let replica = ReplicaHandle::start(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            ReplicaConfig::default(),
        )
        .await
        .unwrap();

        // An idle replica: the scaler's target is its minimum, 1; from 3 replicas the HPA
        // (no scale-down stabilisation, tolerance 0 downwards) goes to 1.
        let mut keda = KedaHpa::connect(
            server.grpc_addr(),
            "demo",
            "ok",
            metadata(&replica.metrics_url()),
            ours_hpa_spec(1, 4),
        )
        .await
        .unwrap();
        let mut answer = None;
        for _ in 0..50 {
            let (desired, result) = keda.hpa_sync(Duration::from_secs(100), 3).await;
            if let Ok(a) = result {
                answer = Some((desired, a));
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (desired, a) = answer.expect("the scaler answered within 5 s");
        assert_eq!(a.target, 1.0, "the metric's AverageValue target");
        assert!(
            (1.0..=4.0).contains(&a.value),
            "the value is a replica target: {}",
            a.value
        );
        assert_eq!(desired, a.value as u32, "AverageValue with target 1");
        assert!(keda.poll().await.is_ok());

        // Nothing answers at this address: the scaler answers Unavailable (twice: KEDA retries
        // once), and the HPA keeps its 3 replicas.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let mut blind = KedaHpa::connect(
            server.grpc_addr(),
            "demo",
            "blind",
            metadata(&format!("http://{closed}/metrics")),
            ours_hpa_spec(1, 4),
        )
        .await
        .unwrap();
        let (desired, result) = blind.hpa_sync(Duration::from_secs(100), 3).await;
        assert_eq!(
            desired, 3,
            "the HPA does not scale on a metric it cannot read"
        );
        match result {
            Err(CallError::Rpc { method, status }) => {
                assert_eq!(method, "GetMetrics", "{status}");
                assert!(status.contains("Unavailable"), "{status}");
            }
            other => panic!("expected an Unavailable GetMetrics, got {other:?}"),
        }

        // Invalid metadata: GetMetricSpec fails, naming the key.
        let mut bad = metadata(&replica.metrics_url());
        bad.insert("maxReplicas".into(), "many".into());
        let mut invalid = KedaHpa::connect(
            server.grpc_addr(),
            "demo",
            "invalid",
            bad,
            ours_hpa_spec(1, 4),
        )
        .await
        .unwrap();
        let (desired, result) = invalid.hpa_sync(Duration::from_secs(100), 2).await;
        assert_eq!(desired, 2);
        match result {
            Err(CallError::Rpc { method, status }) => {
                assert_eq!(method, "GetMetricSpec");
                assert!(status.contains("maxReplicas"), "{status}");
            }
            other => panic!("expected a failing GetMetricSpec, got {other:?}"),
        }

        replica.stop().await;
        server.shutdown().await.unwrap();
    })
    .await;
}
