//! Reading the scale target's replicas through the Kubernetes API, and the restart floor it
//! gives the policy. No cluster is available here, so the API's JSON for those objects (a
//! `keda.sh/v1alpha1` ScaledObject, an `autoscaling/v1` Scale, a `v1` Status for refusals) is
//! served by a test HTTP server on loopback, reached through a kubeconfig that points at it,
//! exactly as the scaler reaches a real API server.

mod kube_support;

use kube_support::{start_pod, within};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use tokio::net::TcpListener;
use vllm_keda_service::proto::external_scaler_client::ExternalScalerClient;
use vllm_keda_service::proto::{GetMetricsRequest, ScaledObjectRef};
use vllm_keda_service::scale_target::{KubeApi, KubeClient, Replicas, ScaleTargetRef};
use vllm_keda_service::serve::{self, ServeOptions};

const IDLE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../data/fixtures/vllm-v1-idle.prom"
));

/// A ScaledObject as the API server returns it.
fn scaledobject(name: &str, target: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {
            "name": name,
            "namespace": "llm",
            "uid": "5f0c2c58-3f7e-4d0e-9d39-2b1f6c1f0a11",
            "resourceVersion": "184223",
            "generation": 1,
            "creationTimestamp": "2026-11-30T10:00:00Z",
            "labels": {"scaledobject.keda.sh/name": name}
        },
        "spec": {
            "scaleTargetRef": target,
            "minReplicaCount": 1,
            "maxReplicaCount": 10,
            "fallback": {"failureThreshold": 3, "replicas": 2, "behavior": "currentReplicasIfHigher"},
            "triggers": [{"type": "external", "metadata": {
                "scalerAddress": "vllm-keda-scaler.keda.svc:9090",
                "service": "vllm-headless.llm.svc.cluster.local"
            }}]
        },
        "status": {
            "scaleTargetKind": "apps/v1.Deployment",
            "originalReplicaCount": 1,
            "conditions": [{"type": "Ready", "status": "True", "reason": "ScaledObjectReady"}]
        }
    })
}

/// An `autoscaling/v1` Scale as the API server returns it for `deployments/scale`.
fn scale(name: &str, spec: u32, status: u32) -> serde_json::Value {
    serde_json::json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": name,
            "namespace": "llm",
            "uid": "0d6f8a1e-7c3b-4a57-a0c1-5e2f7d9b3c44",
            "resourceVersion": "184301",
            "creationTimestamp": "2026-11-30T09:58:00Z"
        },
        "spec": {"replicas": spec},
        "status": {"replicas": status, "selector": "app=vllm"}
    })
}

/// The `v1` Status the API server answers a refused request with.
fn forbidden(resource: &str, group: &str, name: &str) -> serde_json::Value {
    serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "{resource}.{group} \"{name}\" is forbidden: User \"system:serviceaccount:keda:vllm-keda-scaler\" cannot get resource \"{resource}\" in API group \"{group}\" in the namespace \"llm\""
        ),
        "reason": "Forbidden",
        "details": {"name": name, "group": group, "kind": resource},
        "code": 403
    })
}

type Routes = Arc<Mutex<HashMap<String, (StatusCode, serde_json::Value)>>>;
/// Each request's path and `Authorization` header.
type Requests = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// The test API server: answers each path with its JSON, 404 otherwise; logs every request.
struct ApiServer {
    routes: Routes,
    requests: Requests,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl ApiServer {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let routes: Routes = Arc::default();
        let requests: Requests = Arc::default();
        let state = (routes.clone(), requests.clone());
        let app = axum::Router::new().fallback(
            |State((routes, requests)): State<(Routes, Requests)>,
             uri: Uri,
             headers: HeaderMap| async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                requests.lock().unwrap().push((uri.path().to_owned(), auth));
                let found = routes.lock().unwrap().get(uri.path()).cloned();
                let (code, body) = found.unwrap_or_else(|| {
                    (
                        StatusCode::NOT_FOUND,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "message": "the server could not find the requested resource",
                            "reason": "NotFound", "code": 404}),
                    )
                });
                (code, axum::Json(body)).into_response()
            },
        );
        let app = app.with_state(state);
        tokio::spawn(async move { axum::serve(listener, app).await });
        let (dir, kubeconfig) = kube_support::kubeconfig(addr, "llm");
        Self {
            routes,
            requests,
            kubeconfig,
            _dir: dir,
        }
    }

    fn route(&self, path: &str, code: StatusCode, body: serde_json::Value) {
        self.routes
            .lock()
            .unwrap()
            .insert(path.to_owned(), (code, body));
    }

    fn paths(&self) -> Vec<String> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .map(|(p, _)| p.clone())
            .collect()
    }

    async fn client(&self) -> KubeClient {
        KubeClient::connect(&KubeApi::Kubeconfig(self.kubeconfig.clone()))
            .await
            .unwrap()
            .expect("a client for an explicit kubeconfig")
    }
}

const SO_PATH: &str = "/apis/keda.sh/v1alpha1/namespaces/llm/scaledobjects/chat";
const DEPLOYMENT_SCALE: &str = "/apis/apps/v1/namespaces/llm/deployments/vllm/scale";

#[tokio::test]
async fn reads_the_scaledobjects_target_then_its_scale_subresource() {
    within("a deployment's scale", async {
        let api = ApiServer::start().await;
        api.route(
            SO_PATH,
            StatusCode::OK,
            scaledobject("chat", serde_json::json!({"name": "vllm"})),
        );
        api.route(DEPLOYMENT_SCALE, StatusCode::OK, scale("vllm", 8, 6));
        let (target, replicas) = api.client().await.read("llm", "chat").await.unwrap();
        assert_eq!(
            target,
            ScaleTargetRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "vllm".into(),
            }
        );
        assert_eq!(replicas, Replicas { spec: 8, status: 6 });
        let requests = api.requests.lock().unwrap().clone();
        assert_eq!(
            requests,
            vec![
                (SO_PATH.to_owned(), Some("Bearer test-token".to_owned())),
                (
                    DEPLOYMENT_SCALE.to_owned(),
                    Some("Bearer test-token".to_owned())
                ),
            ]
        );
    })
    .await;
}

#[tokio::test]
async fn a_statefulset_target_is_read_through_its_own_scale_path() {
    within("a statefulset's scale", async {
        let api = ApiServer::start().await;
        api.route(
            SO_PATH,
            StatusCode::OK,
            scaledobject(
                "chat",
                serde_json::json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "vllm-sts"}),
            ),
        );
        api.route(
            "/apis/apps/v1/namespaces/llm/statefulsets/vllm-sts/scale",
            StatusCode::OK,
            scale("vllm-sts", 4, 4),
        );
        let (target, replicas) = api.client().await.read("llm", "chat").await.unwrap();
        assert_eq!(target.kind, "StatefulSet");
        assert_eq!(replicas, Replicas { spec: 4, status: 4 });
    })
    .await;
}

#[tokio::test]
async fn refusals_and_unread_kinds_name_the_permission_or_the_kind() {
    within("refusals", async {
        let api = ApiServer::start().await;
        api.route(
            SO_PATH,
            StatusCode::FORBIDDEN,
            forbidden("scaledobjects", "keda.sh", "chat"),
        );
        let client = api.client().await;
        let error = client.read("llm", "chat").await.unwrap_err().0;
        assert!(error.contains("forbidden"), "{error}");
        assert!(error.contains("`get` on scaledobjects.keda.sh"), "{error}");
        assert!(error.contains("llm/chat"), "{error}");

        api.route(
            SO_PATH,
            StatusCode::OK,
            scaledobject("chat", serde_json::json!({"name": "vllm"})),
        );
        api.route(
            DEPLOYMENT_SCALE,
            StatusCode::FORBIDDEN,
            forbidden("deployments", "apps", "vllm"),
        );
        let error = client.read("llm", "chat").await.unwrap_err().0;
        assert!(error.contains("`get` on deployments/scale in apps"), "{error}");

        api.route(
            SO_PATH,
            StatusCode::OK,
            scaledobject(
                "chat",
                serde_json::json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "vllm"}),
            ),
        );
        let error = client.read("llm", "chat").await.unwrap_err().0;
        assert!(error.contains("Rollout vllm (argoproj.io/v1alpha1) is not read"), "{error}");

        let error = client.read("llm", "missing").await.unwrap_err().0;
        assert!(error.contains("not found"), "{error}");
    })
    .await;
}

#[tokio::test]
async fn a_missing_kubeconfig_is_an_error_naming_it_and_auto_outside_a_cluster_is_off() {
    let error = KubeClient::connect(&KubeApi::Kubeconfig("/nonexistent/kubeconfig".into()))
        .await
        .unwrap_err();
    let text = format!("{error:#}");
    assert!(text.contains("/nonexistent/kubeconfig"), "{text}");
    assert!(text.contains("--kube-api off"), "{text}");
    assert!(KubeClient::connect(&KubeApi::Off).await.unwrap().is_none());
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() {
        assert!(KubeClient::connect(&KubeApi::Auto).await.unwrap().is_none());
    }
}

async fn target_of(server: &serve::Server, name: &str, endpoints: &str) -> (i64, String) {
    let mut c = ExternalScalerClient::connect(format!("http://{}", server.grpc_addr()))
        .await
        .unwrap();
    let metadata = kube_support::metadata(endpoints);
    let r = ScaledObjectRef {
        name: name.to_owned(),
        namespace: "llm".to_owned(),
        scaler_metadata: metadata,
    };
    let value = c
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(r),
            metric_name: "vllm-desired-replicas".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .metric_values[0]
        .metric_value;
    let so = server.loops().find("llm", name).unwrap();
    let explanation = so.latest().decision.clone().unwrap().explanation;
    (value, explanation)
}

#[tokio::test]
async fn a_restarted_scaler_holds_the_replicas_asked_for_starting_ones_included() {
    within("the restart floor", async {
        // 8 replicas asked for: 3 ready (answering, idle) and 5 still loading the model.
        let api = ApiServer::start().await;
        api.route(
            SO_PATH,
            StatusCode::OK,
            scaledobject("chat", serde_json::json!({"name": "vllm"})),
        );
        api.route(DEPLOYMENT_SCALE, StatusCode::OK, scale("vllm", 8, 8));
        let mut pods = Vec::new();
        for _ in 0..3 {
            pods.push(start_pod(IDLE).await);
        }
        let endpoints = pods.join(",");
        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let options = ServeOptions {
            kube_api: KubeApi::Kubeconfig(api.kubeconfig.clone()),
            // The pods are on loopback, which the default target policy refuses.
            ..ServeOptions::loopback()
        };
        let server = serve::start(grpc, http, options).await.unwrap();
        let (value, explanation) = target_of(&server, "chat", &endpoints).await;
        assert_eq!(value, 8, "{explanation}");
        assert!(explanation.contains('8'), "{explanation}");
        assert!(api.paths().contains(&DEPLOYMENT_SCALE.to_owned()));

        // Without permission to read the scale target, at least the observed pods are held,
        // and the decision says where its floor comes from.
        api.route(
            "/apis/keda.sh/v1alpha1/namespaces/llm/scaledobjects/other",
            StatusCode::FORBIDDEN,
            forbidden("scaledobjects", "keda.sh", "other"),
        );
        let (value, explanation) = target_of(&server, "other", &endpoints).await;
        assert!(value >= 3, "{value}: {explanation}");
        let so = server.loops().find("llm", "other").unwrap();
        let status = so.latest();
        let read = status.scale_target.as_ref().unwrap();
        assert!(
            read.error.as_deref().unwrap().contains("forbidden"),
            "{read:?}"
        );
        server.shutdown().await.unwrap();
    })
    .await;
}
