//! What the tests that reach the Kubernetes API share: a kubeconfig pointing at a loopback test
//! API server (no cluster runs here; each test serves the API's JSON for the objects it needs),
//! a vLLM-shaped `/metrics` target, and a time limit.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::net::TcpListener;

/// Runs `future`, failing the test when it takes more than 30 s.
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within 30 s"))
}

/// A kubeconfig whose current context reaches the API at `addr` with a bearer token, in
/// `namespace`; the directory holding it goes when the returned guard does.
pub fn kubeconfig(addr: SocketAddr, namespace: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: http://{addr}\n\
             contexts:\n- name: test\n  context:\n    cluster: test\n    user: scaler\n    namespace: {namespace}\n\
             current-context: test\nusers:\n- name: scaler\n  user:\n    token: test-token\n"
        ),
    )
    .unwrap();
    (dir, path)
}

/// A vLLM-shaped `/metrics` target serving `body`.
pub async fn start_pod(body: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app =
        axum::Router::new().route("/metrics", axum::routing::get(move || async move { body }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/metrics")
}

/// A ScaledObject trigger's metadata for one target at `endpoints`: one to ten replicas, a
/// scrape every 0.2 s, a minute's scale-in stabilisation.
pub fn metadata(endpoints: &str) -> HashMap<String, String> {
    [
        ("endpoints", endpoints),
        ("minReplicas", "1"),
        ("maxReplicas", "10"),
        ("scrapeIntervalSeconds", "0.2"),
        ("scaleDownStabilizationSeconds", "60"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}
