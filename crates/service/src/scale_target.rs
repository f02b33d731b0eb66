//! The scale target's replicas, read through the Kubernetes API when the scaler may.
//!
//! Owns: connecting to the API (`--kube-api`), reading the ScaledObject named in a request
//! (`keda.sh/v1alpha1`, its `spec.scaleTargetRef`), then that target's `/scale` subresource
//! (`apps/v1` Deployment or StatefulSet): the replicas asked for (`spec.replicas`) and those
//! that exist (`status.replicas`). Does not own: what the policy does with them (the core's
//! floor), or when a loop reads them ([`crate::control`]).
//!
//! Read-only: the scaler needs `get` on `scaledobjects.keda.sh` and on `deployments/scale`
//! and `statefulsets/scale` in `apps`, nothing else. Without that permission (or without an
//! API) the loop holds at least the replicas it observes, and says so.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde::Serialize;

/// How `serve` reaches the Kubernetes API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeApi {
    /// The in-cluster configuration when `KUBERNETES_SERVICE_HOST` is set (running in a pod),
    /// else no API (`serve`'s default).
    Auto,
    /// The in-cluster configuration (service account token and CA); an error without it.
    InCluster,
    /// The cluster and credentials of this kubeconfig file's current context.
    Kubeconfig(PathBuf),
    /// No API: hold at least the observed replicas.
    Off,
}

/// How long one API request may take.
pub const API_TIMEOUT: Duration = Duration::from_secs(5);

/// A connected API client (cheap to clone).
#[derive(Clone)]
pub struct KubeClient {
    client: Client,
    server: String,
}

impl std::fmt::Debug for KubeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeClient")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// What a ScaledObject scales (`spec.scaleTargetRef`, with KEDA's defaults).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScaleTargetRef {
    /// `apiVersion` (KEDA's default `apps/v1`).
    pub api_version: String,
    /// `kind` (KEDA's default `Deployment`).
    pub kind: String,
    /// `name`.
    pub name: String,
}

impl std::fmt::Display for ScaleTargetRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ({})", self.kind, self.name, self.api_version)
    }
}

/// The target's `/scale` subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Replicas {
    /// Replicas asked for (`spec.replicas`): ready, starting and not yet scheduled.
    pub spec: u32,
    /// Replicas that exist (`status.replicas`).
    pub status: u32,
}

/// A read that failed: what was read, why, and the fix where there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScaleReadError(pub String);

impl KubeClient {
    /// The connected client, for the other readers of the API in this crate.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Connects as `api` says; `None` for [`KubeApi::Off`], and for [`KubeApi::Auto`] outside
    /// a cluster (or when the in-cluster configuration cannot be read, which is logged).
    pub async fn connect(api: &KubeApi) -> anyhow::Result<Option<Self>> {
        let config = match api {
            KubeApi::Off => return Ok(None),
            KubeApi::Auto => {
                if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() {
                    return Ok(None);
                }
                match Config::incluster() {
                    Ok(config) => config,
                    Err(error) => {
                        tracing::warn!(
                            error = %error,
                            "--kube-api auto: cannot read the in-cluster configuration; \
                             scale targets are not read (holding at least the observed pods)"
                        );
                        return Ok(None);
                    }
                }
            }
            KubeApi::InCluster => Config::incluster().context(
                "--kube-api in-cluster: reading the in-cluster configuration (service account \
                 token and KUBERNETES_SERVICE_HOST); run in a pod, or use --kube-api off",
            )?,
            KubeApi::Kubeconfig(path) => {
                let kubeconfig = Kubeconfig::read_from(path).with_context(|| {
                    format!(
                        "--kube-api kubeconfig: reading {}; point KUBECONFIG at a kubeconfig \
                         file, or use --kube-api off",
                        path.display()
                    )
                })?;
                Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await
                    .with_context(|| {
                        format!(
                            "--kube-api kubeconfig: using the current context of {}",
                            path.display()
                        )
                    })?
            }
        };
        Self::from_config(config).map(Some)
    }

    fn from_config(mut config: Config) -> anyhow::Result<Self> {
        config.connect_timeout = Some(API_TIMEOUT);
        config.read_timeout = Some(API_TIMEOUT);
        config.write_timeout = Some(API_TIMEOUT);
        let server = config.cluster_url.to_string();
        let client = Client::try_from(config)
            .with_context(|| format!("creating the Kubernetes API client for {server}"))?;
        tracing::info!(server = %server, "reading scale targets through the Kubernetes API");
        Ok(Self { client, server })
    }

    /// The API server's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The scale target of ScaledObject `namespace/name`.
    pub async fn scale_target(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ScaleTargetRef, ScaleReadError> {
        let gvk = GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "scaledobjects");
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &resource);
        let what = format!("scaledobject {namespace}/{name} (keda.sh/v1alpha1)");
        let object = api
            .get(name)
            .await
            .map_err(|e| read_error(&what, "scaledobjects.keda.sh", e))?;
        target_ref(&object.data)
            .map_err(|message| ScaleReadError(format!("reading {what}: {message}")))
    }

    /// The `/scale` subresource of `target` in `namespace`.
    pub async fn replicas(
        &self,
        namespace: &str,
        target: &ScaleTargetRef,
    ) -> Result<Replicas, ScaleReadError> {
        let plural = match (target.api_version.as_str(), target.kind.as_str()) {
            ("apps/v1", "Deployment") => "deployments",
            ("apps/v1", "StatefulSet") => "statefulsets",
            _ => {
                return Err(ScaleReadError(format!(
                    "scale target {target} is not read: only apps/v1 Deployment and \
                     StatefulSet are"
                )));
            }
        };
        let gvk = GroupVersionKind::gvk("apps", "v1", &target.kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &resource);
        let what = format!("{plural}/scale {namespace}/{}", target.name);
        let scale = api
            .get_scale(&target.name)
            .await
            .map_err(|e| read_error(&what, &format!("{plural}/scale in apps"), e))?;
        let count = |n: Option<i32>| u32::try_from(n.unwrap_or(0)).unwrap_or(0);
        Ok(Replicas {
            spec: count(scale.spec.and_then(|s| s.replicas)),
            status: count(scale.status.map(|s| s.replicas)),
        })
    }

    /// The ScaledObject's scale target and its replicas.
    pub async fn read(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<(ScaleTargetRef, Replicas), ScaleReadError> {
        let target = self.scale_target(namespace, name).await?;
        let replicas = self.replicas(namespace, &target).await?;
        Ok((target, replicas))
    }
}

/// `spec.scaleTargetRef` of a ScaledObject, with KEDA's defaults for `apiVersion` and `kind`.
fn target_ref(object: &serde_json::Value) -> Result<ScaleTargetRef, String> {
    let reference = object
        .pointer("/spec/scaleTargetRef")
        .ok_or("it has no spec.scaleTargetRef")?;
    let text = |field: &str, default: &str| -> Result<String, String> {
        match reference.get(field) {
            None | Some(serde_json::Value::Null) => Ok(default.to_owned()),
            Some(serde_json::Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(serde_json::Value::String(_)) => Ok(default.to_owned()),
            Some(other) => Err(format!(
                "spec.scaleTargetRef.{field} is not a string: {other}"
            )),
        }
    };
    let name = text("name", "")?;
    if name.is_empty() {
        return Err("spec.scaleTargetRef.name is missing".to_owned());
    }
    Ok(ScaleTargetRef {
        api_version: text("apiVersion", "apps/v1")?,
        kind: text("kind", "Deployment")?,
        name,
    })
}

/// An API error as a message naming what was read and, for a refusal, the permission needed.
pub(crate) fn read_error(what: &str, resource: &str, error: kube::Error) -> ScaleReadError {
    let message = match &error {
        kube::Error::Api(status) if status.code == 403 => format!(
            "reading {what}: forbidden ({}); grant the scaler's service account `get` on \
             {resource} (the RBAC in deploy/ does)",
            status.message
        ),
        kube::Error::Api(status) if status.code == 401 => format!(
            "reading {what}: unauthorized ({}); check the scaler's credentials",
            status.message
        ),
        kube::Error::Api(status) if status.code == 404 => {
            format!("reading {what}: not found ({})", status.message)
        }
        kube::Error::Api(status) => format!(
            "reading {what}: the API answered {} ({})",
            status.code, status.message
        ),
        other => format!("reading {what}: {other}"),
    };
    ScaleReadError(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scale_target_ref_takes_kedas_defaults() {
        let object = serde_json::json!({"spec": {"scaleTargetRef": {"name": "vllm"}}});
        assert_eq!(
            target_ref(&object),
            Ok(ScaleTargetRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "vllm".into(),
            })
        );
        let object = serde_json::json!({"spec": {"scaleTargetRef": {
            "name": "vllm", "kind": "StatefulSet", "apiVersion": "apps/v1"}}});
        assert_eq!(target_ref(&object).unwrap().kind, "StatefulSet");
    }

    #[test]
    fn a_scale_target_ref_without_a_name_is_an_error() {
        for object in [
            serde_json::json!({"spec": {}}),
            serde_json::json!({"spec": {"scaleTargetRef": {"kind": "Deployment"}}}),
            serde_json::json!({"spec": {"scaleTargetRef": {"name": 3}}}),
        ] {
            assert!(target_ref(&object).is_err(), "{object}");
        }
    }
}
