//! The proactive policy's learning kept in a ConfigMap (`--learned-state-configmap`): a scaler
//! that starts finds what an earlier pod learned for the same trigger and starts from it, and
//! a loop's learning is written back with a merge patch. No cluster is available here, so the
//! API's JSON for a `v1` ConfigMap (GET, and PATCH with `application/merge-patch+json`) is
//! served by a test HTTP server on loopback, reached through a kubeconfig that points at it, as
//! the scaler reaches a real API server.

mod kube_support;

use kube_support::{metadata, start_pod, within};

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use tokio::net::TcpListener;
use vllm_keda_core::policy::proactive::{KeptMinute, Persisted, PersistedFloor};
use vllm_keda_service::control::trigger_id;
use vllm_keda_service::learned_store::{self, LearnedStore, Record, WriteError};
use vllm_keda_service::proto::external_scaler_client::ExternalScalerClient;
use vllm_keda_service::proto::{GetMetricsRequest, ScaledObjectRef};
use vllm_keda_service::scale_target::{KubeApi, KubeClient};
use vllm_keda_service::serve::{self, ServeOptions};

const IDLE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../data/fixtures/vllm-v1-idle.prom"
));
const CONFIGMAP: &str = "/api/v1/namespaces/keda/configmaps/vllm-keda-scaler-learned";

/// The ConfigMap's data, and each request's method, path and content type.
type Data = Arc<Mutex<Option<BTreeMap<String, String>>>>;
type Requests = Arc<Mutex<Vec<(Method, String, Option<String>)>>>;

/// A peer's write the test API server makes just before the next PATCH that carries a
/// `resourceVersion`: the key and value it writes.
type Interpose = Arc<Mutex<Option<(String, String)>>>;

/// What the test API server's handler shares with the test: the ConfigMap's data, the
/// requests, the `resourceVersion`, a peer's write to interpose and whether reads fail.
type Shared = (Data, Requests, Arc<AtomicU64>, Interpose, Arc<AtomicBool>);

/// The test API server: the one ConfigMap (absent while its data is `None`), answered as the
/// API server answers GET and a JSON merge PATCH on it, with its `resourceVersion` bumped at
/// every write and a patch that names another `resourceVersion` refused with 409 Conflict;
/// every GET refused with 500 while `fail_reads` is set; 404 for every other path.
struct ApiServer {
    data: Data,
    requests: Requests,
    version: Arc<AtomicU64>,
    interpose: Interpose,
    fail_reads: Arc<AtomicBool>,
    kubeconfig: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn configmap(data: &BTreeMap<String, String>, version: u64) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "vllm-keda-scaler-learned",
            "namespace": "keda",
            "uid": "7a1c5e0f-2b1d-4c8e-9f3a-6d2e8b4c1a57",
            "resourceVersion": version.to_string(),
            "creationTimestamp": "2026-11-30T10:00:00Z"
        },
        "data": data
    })
}

/// The API server's answer to a write onto a `resourceVersion` that is no longer current.
fn conflict() -> (StatusCode, serde_json::Value) {
    (
        StatusCode::CONFLICT,
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure",
            "message": "Operation cannot be fulfilled on configmaps \"vllm-keda-scaler-learned\": \
                the object has been modified; please apply your changes to the latest version \
                and try again",
            "reason": "Conflict",
            "details": {"name": "vllm-keda-scaler-learned", "kind": "configmaps"}, "code": 409}),
    )
}

/// The API server's answer to a request it could not serve (etcd unreachable, say).
fn internal_error() -> (StatusCode, serde_json::Value) {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": "etcdserver: request timed out",
            "reason": "InternalError", "code": 500}),
    )
}

fn not_found() -> (StatusCode, serde_json::Value) {
    (
        StatusCode::NOT_FOUND,
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": "the server could not find the requested resource",
            "reason": "NotFound", "code": 404}),
    )
}

impl ApiServer {
    async fn start(data: Option<BTreeMap<String, String>>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let data: Data = Arc::new(Mutex::new(data));
        let requests: Requests = Arc::default();
        let version = Arc::new(AtomicU64::new(90_211));
        let interpose: Interpose = Arc::default();
        let fail_reads = Arc::new(AtomicBool::new(false));
        let app = axum::Router::new()
            .fallback(
                |State((data, requests, version, interpose, fail_reads)): State<Shared>,
                 method: Method,
                 uri: Uri,
                 headers: HeaderMap,
                 body: Bytes| async move {
                    let kind = headers
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    requests
                        .lock()
                        .unwrap()
                        .push((method.clone(), uri.path().to_owned(), kind));
                    let mut stored = data.lock().unwrap();
                    let (code, json) = match (uri.path() == CONFIGMAP, stored.as_mut()) {
                        (true, _) if method == Method::GET && fail_reads.load(Ordering::SeqCst) => {
                            internal_error()
                        }
                        (true, Some(map)) if method == Method::GET => (
                            StatusCode::OK,
                            configmap(map, version.load(Ordering::SeqCst)),
                        ),
                        (true, Some(map)) if method == Method::PATCH => {
                            // A JSON merge patch of `data`: keys set, null deletes; a
                            // `metadata.resourceVersion` in it is a precondition.
                            let patch: serde_json::Value = serde_json::from_slice(&body).unwrap();
                            let expected = patch["metadata"]["resourceVersion"].as_str();
                            if expected.is_some()
                                && let Some((k, v)) = interpose.lock().unwrap().take()
                            {
                                map.insert(k, v);
                                version.fetch_add(1, Ordering::SeqCst);
                            }
                            let current = version.load(Ordering::SeqCst).to_string();
                            if expected.is_some_and(|e| e != current) {
                                conflict()
                            } else {
                                for (k, v) in patch["data"].as_object().unwrap() {
                                    match v.as_str() {
                                        Some(s) => map.insert(k.clone(), s.to_owned()),
                                        None => map.remove(k),
                                    };
                                }
                                let now = version.fetch_add(1, Ordering::SeqCst) + 1;
                                (StatusCode::OK, configmap(map, now))
                            }
                        }
                        _ => not_found(),
                    };
                    (code, axum::Json(json)).into_response()
                },
            )
            .with_state((
                data.clone(),
                requests.clone(),
                version.clone(),
                interpose.clone(),
                fail_reads.clone(),
            ));
        tokio::spawn(async move { axum::serve(listener, app).await });
        let (dir, kubeconfig) = kube_support::kubeconfig(addr, "keda");
        Self {
            data,
            requests,
            version,
            interpose,
            fail_reads,
            kubeconfig,
            _dir: dir,
        }
    }

    /// Writes `value` under `key` as another pod's merge patch would: a new `resourceVersion`.
    fn put(&self, key: &str, value: String) {
        self.data
            .lock()
            .unwrap()
            .as_mut()
            .unwrap()
            .insert(key.to_owned(), value);
        self.version.fetch_add(1, Ordering::SeqCst);
    }

    /// The value under `key`, as written.
    fn raw(&self, key: &str) -> Option<String> {
        self.data.lock().unwrap().as_ref()?.get(key).cloned()
    }

    /// The record under `key`.
    fn kept(&self, key: &str) -> Option<Record> {
        Some(serde_json::from_str(&self.raw(key)?).unwrap())
    }

    /// A scaler reaching this API, keeping its learning in the ConfigMap, written every second.
    async fn scaler(&self) -> serve::Server {
        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let options = ServeOptions {
            kube_api: KubeApi::Kubeconfig(self.kubeconfig.clone()),
            learned_state: Some((
                "keda".into(),
                "vllm-keda-scaler-learned".into(),
                Duration::from_secs(1),
            )),
            ..ServeOptions::loopback()
        };
        serve::start(grpc, http, options).await.unwrap()
    }

    async fn store(&self) -> LearnedStore {
        let client = KubeClient::connect(&KubeApi::Kubeconfig(self.kubeconfig.clone()))
            .await
            .unwrap()
            .expect("a client for an explicit kubeconfig");
        LearnedStore::new(
            client,
            "keda".into(),
            "vllm-keda-scaler-learned".into(),
            Duration::from_secs(1),
        )
    }
}

/// Unix time now, seconds.
fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn record(capacity: f64, startup: f64, age: Duration) -> Record {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    Record {
        persisted: Persisted {
            capacity_per_replica: Some(capacity),
            capacity_verified: Some(capacity / 1.5),
            startup_seconds: Some(startup),
            observed_seconds: 3_600.0,
            hindsight_floor: None,
            light_share: None,
            demand_history: vec![],
        },
        written_unix_seconds: now.saturating_sub(age).as_secs_f64(),
    }
}

#[tokio::test]
async fn a_record_is_written_with_a_merge_patch_and_read_back() {
    within("a write and a read", async {
        let others = BTreeMap::from([("llm.other.0000000000000001".to_owned(), "{}".to_owned())]);
        let api = ApiServer::start(Some(others)).await;
        let store = api.store().await;
        assert_eq!(store.read("llm.chat.00ff").await, Ok(None));
        let r = record(13.5, 254.0, Duration::ZERO);
        store.write("llm.chat.00ff", &r, None, &[]).await.unwrap();
        // JSON keeps the learning exactly and the time to well within a millisecond (the
        // last bit of a 10-digit float may differ after a round trip).
        let back = store.read("llm.chat.00ff").await.unwrap().unwrap();
        assert_eq!(back.persisted, r.persisted);
        assert!((back.written_unix_seconds - r.written_unix_seconds).abs() < 1e-3);
        // The other trigger's key stays: a merge patch, not a replacement.
        let data = api.data.lock().unwrap().clone().unwrap();
        assert_eq!(data.len(), 2, "{data:?}");
        let patch = api
            .requests
            .lock()
            .unwrap()
            .iter()
            .find(|(m, _, _)| m == Method::PATCH)
            .cloned()
            .unwrap();
        assert_eq!(patch.1, CONFIGMAP);
        assert_eq!(patch.2.as_deref(), Some("application/merge-patch+json"));
        // A write based on a read is made only onto what was read: when another pod wrote in
        // between, nothing is written and the store says so; read again, the write is made.
        let read = store
            .read_before_write("llm.chat.00ff", now())
            .await
            .unwrap();
        assert_eq!(
            read.record.as_ref().unwrap().as_ref().unwrap().persisted,
            r.persisted
        );
        let peer = record(2.0, 100.0, Duration::ZERO);
        api.put("llm.chat.00ff", serde_json::to_string(&peer).unwrap());
        let mine = record(14.0, 254.0, Duration::ZERO);
        assert_eq!(
            store
                .write("llm.chat.00ff", &mine, read.version.as_deref(), &[])
                .await,
            Err(WriteError::Conflict)
        );
        let kept = store.read("llm.chat.00ff").await.unwrap().unwrap();
        assert_eq!(kept.persisted, peer.persisted);
        let read = store
            .read_before_write("llm.chat.00ff", now())
            .await
            .unwrap();
        store
            .write("llm.chat.00ff", &mine, read.version.as_deref(), &[])
            .await
            .unwrap();
        let kept = store.read("llm.chat.00ff").await.unwrap().unwrap();
        assert_eq!(kept.persisted, mine.persisted);
        // A value that is not a record names the key and does not repeat the value.
        api.data
            .lock()
            .unwrap()
            .as_mut()
            .unwrap()
            .insert("llm.chat.00ff".into(), "secret-ish {not json".into());
        let error = store.read("llm.chat.00ff").await.unwrap_err();
        assert!(error.contains("llm.chat.00ff"), "{error}");
        assert!(error.contains("not JSON"), "{error}");
        assert!(!error.contains("secret-ish"), "{error}");
        // A ConfigMap that does not exist: the read says so, naming it.
        *api.data.lock().unwrap() = None;
        let error = store.read("llm.chat.00ff").await.unwrap_err();
        assert!(
            error.contains("ConfigMap keda/vllm-keda-scaler-learned")
                && error.contains("not found"),
            "{error}"
        );
        // Nor is there anything to write onto: no room, no `resourceVersion`.
        let error = store
            .read_before_write("llm.chat.00ff", now())
            .await
            .unwrap_err();
        assert!(error.contains("not found"), "{error}");
        let error = store
            .write("llm.chat.00ff", &r, None, &[])
            .await
            .unwrap_err();
        let WriteError::Failed(error) = error else {
            panic!("{error:?}")
        };
        assert!(error.starts_with("writing ConfigMap"), "{error}");
    })
    .await;
}

/// Asks for `name`'s target once and returns the loop's latest explanation and `/debug`
/// learned state.
async fn ask(server: &serve::Server, name: &str, metadata: &HashMap<String, String>) -> String {
    let mut c = ExternalScalerClient::connect(format!("http://{}", server.grpc_addr()))
        .await
        .unwrap();
    let r = ScaledObjectRef {
        name: name.to_owned(),
        namespace: "llm".to_owned(),
        scaler_metadata: metadata.clone(),
    };
    c.get_metrics(GetMetricsRequest {
        scaled_object_ref: Some(r),
        metric_name: "vllm-desired-replicas".into(),
    })
    .await
    .unwrap();
    let so = server.loops().find("llm", name).unwrap();
    so.latest().decision.clone().unwrap().explanation
}

/// Keeps asking for `name`'s target (a loop stops when KEDA does not ask) every 200 ms until
/// `found` returns something for the latest explanation; the test's time limit bounds it.
async fn ask_until<T>(
    server: &serve::Server,
    name: &str,
    metadata: &HashMap<String, String>,
    mut found: impl FnMut(&str) -> Option<T>,
) -> T {
    loop {
        let explanation = ask(server, name, metadata).await;
        if let Some(t) = found(&explanation) {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_starting_scaler_inherits_what_an_earlier_pod_kept_for_the_same_trigger() {
    within("inheritance", async {
        let pod = start_pod(IDLE).await;
        let md = metadata(&pod);
        let fresh_key = learned_store::key("llm", "chat", trigger_id(&md));
        let mut other = md.clone();
        other.insert("maxReplicas".into(), "12".into());
        let changed_key = learned_store::key("llm", "old", trigger_id(&other));
        // The earlier pod held a hindsight floor of 3 replicas, found half an hour before it
        // wrote the record.
        let mut kept = record(13.5, 254.0, Duration::from_secs(600));
        kept.persisted.hindsight_floor = Some(PersistedFloor {
            replicas: 3,
            served_percent: 100.0,
            replica_hours: 6.0,
            ours_served_percent: 92.0,
            ours_replica_hours: 7.0,
            minutes: 120,
            peak_demand: 30.0,
            age_seconds: 1_800.0,
            capacity_per_replica: Some(10.0),
            served_beyond_requests: None,
        });
        // And the demand history of its last twenty minutes: a burst of 60 req/s ten minutes
        // before it wrote the record (twenty by now, within the peak floor's half hour).
        kept.persisted.demand_history = (1..=20)
            .rev()
            .map(|ago| {
                let demand = if ago == 10 { 60.0 } else { 2.0 };
                KeptMinute(60 * ago, demand, demand, 3.0, 3.0)
            })
            .collect();
        let data = BTreeMap::from([
            (fresh_key.clone(), serde_json::to_string(&kept).unwrap()),
            // Kept for other metadata (another trigger id): not this trigger's.
            (
                changed_key,
                serde_json::to_string(&record(2.0, 30.0, Duration::ZERO)).unwrap(),
            ),
            // Kept two days ago: too old to inherit.
            (
                learned_store::key("llm", "stale", trigger_id(&md)),
                serde_json::to_string(&record(9.0, 200.0, Duration::from_secs(48 * 3600))).unwrap(),
            ),
        ]);
        let api = ApiServer::start(Some(data)).await;
        let server = api.scaler().await;

        // The first decision already starts from the kept estimate and start-up time.
        let explanation = ask(&server, "chat", &md).await;
        assert!(
            explanation
                .contains("capacity 13.5 req/s per replica (inherited from another scaler pod)"),
            "{explanation}"
        );
        // It holds the floor the earlier pod held, for what is left of its day.
        assert!(
            explanation.contains("hindsight floor: over 120 min a static fleet of 3 replicas")
                && explanation.contains("by an earlier pod, whose floor this is")
                && explanation.contains("-> 3 replicas"),
            "{explanation}"
        );
        let status = server.loops().find("llm", "chat").unwrap().latest();
        let learned = status.learned.unwrap();
        assert_eq!(
            (learned.capacity_source, learned.startup_source),
            ("inherited", "inherited")
        );
        assert_eq!(learned.startup_seconds, 254.0);
        let state = status.learned_state.clone().unwrap();
        assert_eq!(state.key, fresh_key);
        let read = state.read.unwrap();
        assert!(read.starts_with("inherited a record written"), "{read}");
        assert!(
            read.contains("hindsight floor 3 replicas found 1800 s before the record was written")
                && read.contains("20 minutes of demand history over the last 20 minutes"),
            "{read}"
        );
        // The burst in the earlier pod's history is behind this pod's first minute: its peak
        // floor holds the 5 replicas that carry 60 req/s at 13.5 each.
        assert!(
            explanation.contains("floor: peak 60 req/s") && explanation.contains("-> 5 replicas"),
            "{explanation}"
        );

        // Another ScaledObject with no record of its own, and one whose record is two days
        // old: both start from nothing, and say why.
        for (name, why) in [
            ("old", "nothing kept for this trigger yet"),
            ("stale", "h old (at most 24 h is inherited)"),
        ] {
            let explanation = ask(&server, name, &md).await;
            assert!(
                explanation.contains("no capacity estimate yet"),
                "{name}: {explanation}"
            );
            let status = server.loops().find("llm", name).unwrap().latest();
            let read = status.learned_state.as_ref().unwrap().read.clone().unwrap();
            assert!(read.contains(why), "{name}: {read}");
        }

        // An inherited estimate that observations have not moved is not written back, so a
        // record ages out while nothing is learned: after several write intervals nothing was
        // patched.
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        let patches = api
            .requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, _, _)| m == Method::PATCH)
            .count();
        assert_eq!(patches, 0);
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn without_an_api_the_flag_is_refused_with_the_fix() {
    within("the refusal", async {
        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let options = ServeOptions {
            learned_state: Some((
                "keda".into(),
                "vllm-keda-scaler-learned".into(),
                Duration::from_secs(300),
            )),
            ..ServeOptions::loopback()
        };
        let error = serve::start(grpc, http, options)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--learned-state-configmap keda/vllm-keda-scaler-learned"),
            "{error}"
        );
        assert!(error.contains("--kube-api"), "{error}");
    })
    .await;
}

/// A vLLM-shaped target whose counters grow: every counter, histogram bucket, count and sum of
/// the idle fixture multiplied by `1 + 0.05 n` at its n-th scrape, so the window sees requests
/// finish at a steady rate with the fixture's latency distribution.
async fn start_busy_pod() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    let scrapes = Arc::new(AtomicU64::new(0));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let n = scrapes.fetch_add(1, Ordering::Relaxed);
            async move {
                let factor = 1.0 + 0.05 * n as f64;
                let mut out = String::with_capacity(IDLE.len());
                for line in IDLE.lines() {
                    let name = line.split(['{', ' ']).next().unwrap_or_default();
                    let grows = !line.starts_with('#')
                        && ["_total", "_count", "_sum", "_bucket"]
                            .iter()
                            .any(|s| name.ends_with(s));
                    match line.rsplit_once(' ') {
                        Some((head, value)) if grows => {
                            let v: f64 = value.parse().unwrap();
                            out.push_str(&format!("{head} {}\n", v * factor));
                        }
                        _ => {
                            out.push_str(line);
                            out.push('\n');
                        }
                    }
                }
                out
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/metrics")
}

/// A trigger on a busy pod whose loop learns its own estimate within seconds: the metadata
/// (a 1 s rate window, so the fleet reads stable and within the SLO within a second) and the
/// trigger's key in the ConfigMap under the ScaledObject `name`.
async fn learning_trigger(name: &str) -> (HashMap<String, String>, String) {
    let pod = start_busy_pod().await;
    let mut md = metadata(&pod);
    md.insert("rateWindowSeconds".into(), "1".into());
    let key = learned_store::key("llm", name, trigger_id(&md));
    (md, key)
}

#[tokio::test]
async fn a_loop_that_learns_writes_its_learning_for_the_next_pod() {
    within("a write from a running loop", async {
        let (md, key) = learning_trigger("busy").await;
        // Beside it: a record of another trigger written two days ago (its metadata changed
        // since, say), one written an hour ago, and a value that is not a record.
        let record_of = |age_hours: u64| {
            serde_json::to_string(&record(9.0, 200.0, Duration::from_secs(age_hours * 3600)))
                .unwrap()
        };
        let others = BTreeMap::from([
            ("llm.old.00000000000000aa".to_owned(), record_of(48)),
            ("llm.recent.00000000000000bb".to_owned(), record_of(1)),
            ("notes".to_owned(), "kept by hand".to_owned()),
        ]);
        let api = ApiServer::start(Some(others)).await;
        let server = api.scaler().await;
        ask(&server, "busy", &md).await;
        // Keep KEDA asking (a loop stops when it is not asked), until a record is kept.
        let kept = ask_until(&server, "busy", &md, |_| api.kept(&key)).await;
        // The write removed the record no pod would inherit, and left the others.
        let keys: Vec<String> = api
            .data
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            keys,
            [key.as_str(), "llm.recent.00000000000000bb", "notes"],
            "{keys:?}"
        );
        let removed = ask_until(&server, "busy", &md, |_| {
            let status = server.loops().find("llm", "busy").unwrap().latest();
            let state = status.learned_state.as_ref()?;
            state
                .written_unix_seconds
                .map(|_| state.expired_records_removed)
        })
        .await;
        assert_eq!(removed, 1);
        let status = server.loops().find("llm", "busy").unwrap().latest();
        let learned = status.learned.unwrap();
        assert_eq!(learned.capacity_source, "learned", "{learned:?}");
        let capacity = kept.persisted.capacity_per_replica.unwrap();
        assert!(capacity > 0.0, "{kept:?}");
        let state = status.learned_state.clone().unwrap();
        assert!(state.read.unwrap().starts_with("nothing kept"));
        server.shutdown().await.unwrap();

        // A second scaler (a restarted pod) starts from that record.
        let next = api.scaler().await;
        let explanation = ask(&next, "busy", &md).await;
        assert!(
            explanation.contains("(inherited from another scaler pod)"),
            "{explanation}"
        );
        next.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_running_loop_adopts_a_peers_longer_history_and_outlasts_a_shorter_one() {
    within("the exchange between two pods", async {
        let (md, key) = learning_trigger("pair").await;
        let api = ApiServer::start(Some(BTreeMap::new())).await;
        let raw = || api.raw(&key);
        let kept = || api.kept(&key);
        let put = |record: &Record| api.put(&key, serde_json::to_string(record).unwrap());
        let server = api.scaler().await;
        let status = || server.loops().find("llm", "pair").unwrap().latest();
        // This loop learns and writes its record, with the history it rests on.
        let ours = ask_until(&server, "pair", &md, |_| {
            kept().filter(|r| r.persisted.observed_seconds > 0.0)
        })
        .await;

        // A peer that observed for less (half as long as this loop had when it wrote) writes
        // its record over it: this loop keeps its own learning, and its next exchange writes
        // it back.
        let mut short = record(3.25, 100.0, Duration::ZERO);
        short.persisted.observed_seconds = ours.persisted.observed_seconds / 2.0;
        put(&short);
        let shorts = raw();
        ask_until(&server, "pair", &md, |_| (raw() != shorts).then_some(())).await;
        let learned = status().learned.unwrap();
        assert_eq!(learned.capacity_source, "learned", "{learned:?}");
        assert_ne!(learned.capacity_per_replica, Some(3.25));
        let rewritten = kept().unwrap();
        assert!(
            rewritten.persisted.observed_seconds > short.persisted.observed_seconds,
            "{rewritten:?}"
        );
        assert_eq!(status().learned_state.as_ref().unwrap().adoptions, 0);

        // A peer that has observed for a day writes its record: this loop adopts it, and says
        // so in its decision and in `/debug`. (Its estimate is far above what the test's pod
        // serves, which then neither raises it nor probes it.)
        let mut long = record(5_000.0, 254.0, Duration::ZERO);
        long.persisted.observed_seconds = 86_000.0;
        put(&long);
        let peers = raw();
        ask_until(&server, "pair", &md, |explanation| {
            explanation
                .contains("capacity 5000 req/s per replica (inherited from another scaler pod)")
                .then_some(())
        })
        .await;
        let now = status();
        let learned = now.learned.unwrap();
        assert_eq!(learned.startup_seconds, 254.0);
        assert!(learned.observed_seconds >= 86_000.0, "{learned:?}");
        let state = now.learned_state.clone().unwrap();
        assert_eq!(state.adoptions, 1);
        let adopted = state.adopted.unwrap();
        assert!(adopted.contains("with a longer history"), "{adopted}");
        assert!(adopted.contains("86000 s observed"), "{adopted}");
        // The adopted estimate, not moved since, is not written back: the record stays the
        // peer's, and it is not adopted again.
        for _ in 0..12 {
            ask(&server, "pair", &md).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(raw(), peers);
        assert_eq!(status().learned_state.as_ref().unwrap().adoptions, 1);
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_write_near_the_configmaps_size_limit_leaves_out_the_oldest_minutes_and_says_so() {
    within("a write that must fit", async {
        let (md, key) = learning_trigger("full").await;
        // An earlier pod kept a day of demand history (about 40 KB) with an estimate far below
        // what the test's pod serves, so this loop's own observations move it and it writes.
        let mut inherited = record(0.01, 254.0, Duration::from_secs(60));
        inherited.persisted.demand_history = (1..=1_380)
            .rev()
            .map(|ago| KeptMinute(60 * ago, 2.0, 3.0, 1.0, 1.0))
            .collect();
        // The other triggers' keys leave this one 6,000 bytes: the record and its newest
        // minutes fit, the rest of the day does not.
        let room = 6_000;
        let filler_key = "llm.other.0123456789abcdef".to_owned();
        let filler = "x".repeat(learned_store::CONFIGMAP_BUDGET - room - filler_key.len());
        let data = BTreeMap::from([
            (key.clone(), serde_json::to_string(&inherited).unwrap()),
            (filler_key.clone(), filler.clone()),
        ]);
        let api = ApiServer::start(Some(data)).await;
        let server = api.scaler().await;
        // The inherited record was written a minute ago, and the pod's write is stamped now.
        // A second's margin: read back from JSON, the inherited time itself may come out a bit
        // above what was written (serde_json's default parsing is not exact in the last bit),
        // and a bare `>` then took the inherited record, whole, for the pod's write.
        let written_after = inherited.written_unix_seconds + 1.0;
        let (raw, kept) = ask_until(&server, "full", &md, |_| {
            let kept = api.kept(&key)?;
            (kept.written_unix_seconds > written_after).then(|| (api.raw(&key).unwrap(), kept))
        })
        .await;
        // Written within the room, the other key untouched, the newest minutes kept and the
        // oldest left out.
        assert!(
            key.len() + raw.len() <= room,
            "{} bytes",
            key.len() + raw.len()
        );
        assert_eq!(
            api.data.lock().unwrap().as_ref().unwrap().get(&filler_key),
            Some(&filler)
        );
        let history = &kept.persisted.demand_history;
        assert!(
            history.len() > 50 && history.len() < 1_000,
            "{} minutes",
            history.len()
        );
        let oldest = history.first().unwrap().seconds_ago();
        assert!(
            oldest < 1_000 * 60,
            "the oldest kept minute began {oldest} s ago"
        );
        assert!(
            kept.persisted.capacity_per_replica.unwrap() > 0.01,
            "{kept:?}"
        );

        // `/debug` says how many minutes were left out, the rest of the inherited day, once
        // the loop has taken in the write's outcome (at its next cycle).
        let left_out = ask_until(&server, "full", &md, |_| {
            let status = server.loops().find("llm", "full").unwrap().latest();
            let state = status.learned_state.as_ref()?;
            state
                .written_unix_seconds
                .map(|_| state.history_minutes_left_out)
        })
        .await;
        assert!(
            left_out > 0 && left_out + history.len() >= 1_380,
            "{left_out} left out, {} kept",
            history.len()
        );
        let detail = reqwest::get(format!(
            "http://{}/debug/scaledobjects/llm/full",
            server.http_addr()
        ))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
        let detail: serde_json::Value = serde_json::from_str(&detail).unwrap();
        assert_eq!(
            detail["learned_state"]["history_minutes_left_out"],
            serde_json::json!(left_out),
            "{detail}"
        );
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_write_that_meets_a_peers_write_is_not_made_and_the_loop_reads_again() {
    within("a write under contention", async {
        let (md, key) = learning_trigger("race").await;
        let api = ApiServer::start(Some(BTreeMap::new())).await;
        let server = api.scaler().await;
        let status = || server.loops().find("llm", "race").unwrap().latest();
        let first = ask_until(&server, "race", &md, |_| {
            api.kept(&key)
                .filter(|r| r.persisted.observed_seconds > 0.0)
        })
        .await;

        // A peer that has observed for longer writes its record between this loop's next read
        // and its write: the write is refused (409), nothing of the peer's is lost, and the
        // loop's next exchange reads the peer's record and adopts it.
        let mut peer = record(5_000.0, 254.0, Duration::ZERO);
        peer.persisted.observed_seconds = 86_000.0;
        *api.interpose.lock().unwrap() = Some((key.clone(), serde_json::to_string(&peer).unwrap()));
        ask_until(&server, "race", &md, |_| {
            let now = status();
            let state = now.learned_state.as_ref()?;
            let adopted = now.learned?.observed_seconds >= 86_000.0;
            (state.conflicts == 1 && state.adoptions == 1 && adopted).then_some(())
        })
        .await;
        assert!(api.interpose.lock().unwrap().is_none());
        let now = api.kept(&key).unwrap();
        assert_eq!(now.persisted, peer.persisted, "the peer's record stays");
        assert!(first.persisted.observed_seconds < 86_000.0);
        let state = status().learned_state.clone().unwrap();
        assert_eq!(state.error, None, "a conflict is not an error: {state:?}");
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_loop_whose_read_fails_writes_nothing_and_says_why() {
    within("a write after a failed read", async {
        let (md, key) = learning_trigger("blind").await;
        let api = ApiServer::start(Some(BTreeMap::new())).await;
        let server = api.scaler().await;
        // The loop writes once its learning is its own.
        ask_until(&server, "blind", &md, |_| api.kept(&key)).await;
        // Then every read of the ConfigMap fails. A write without it would be blind (no room
        // known, no `resourceVersion` to write onto): the loop reports the read's failure
        // and writes nothing.
        api.fail_reads.store(true, Ordering::SeqCst);
        let count = |wanted: Method| {
            api.requests
                .lock()
                .unwrap()
                .iter()
                .filter(|r| r.0 == wanted)
                .count()
        };
        let patches = count(Method::PATCH);
        let reads = count(Method::GET);
        let error = ask_until(&server, "blind", &md, |_| {
            if count(Method::PATCH) > patches {
                return Some(Err("a write after a failed read"));
            }
            // Two failed reads after the switch, two exchanges the loop would have written in,
            // and the read's failure reported (an exchange that timed out on a loaded machine
            // reports that instead, and the next one the read's).
            let status = server.loops().find("llm", "blind").unwrap().latest();
            let error = status.learned_state.as_ref()?.error.clone()?;
            (count(Method::GET) >= reads + 2 && error.starts_with("reading ConfigMap"))
                .then_some(Ok(error))
        })
        .await
        .unwrap();
        assert!(error.contains("vllm-keda-scaler-learned"), "{error}");
        assert_eq!(count(Method::PATCH), patches);
        // Once reads come back, so do the writes.
        api.fail_reads.store(false, Ordering::SeqCst);
        ask_until(&server, "blind", &md, |_| {
            (count(Method::PATCH) > patches).then_some(())
        })
        .await;
        server.shutdown().await.unwrap();
    })
    .await;
}
