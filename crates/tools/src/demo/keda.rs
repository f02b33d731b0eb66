//! A stand-in for KEDA and the HPA: a real gRPC client of the scaler that follows KEDA's call
//! pattern and value conversion, and the HPA's replica computation.
//!
//! Owns: one ScaledObject's calls (every HPA sync: `GetMetricSpec`, `GetMetrics`, `IsActive`
//! within one 3 s deadline, a failing `GetMetrics`/`IsActive` retried once at once; every KEDA
//! poll: the same three without a deadline), KEDA's value conversion, and feeding the result to
//! the HPA model. Does not own: the HPA's formula and behaviour (see [`crate::keda::hpa`]),
//! when syncs happen, or the replicas (see the parent module).

use std::collections::HashMap;
use std::time::Duration;

use tonic::transport::Channel;

use crate::keda::hpa::{AverageValueMetric, Hpa, HpaSpec};
use crate::keda::keda_value;
use vllm_keda_service::proto::external_scaler_client::ExternalScalerClient;
use vllm_keda_service::proto::{GetMetricsRequest, MetricSpec, MetricValue, ScaledObjectRef};

/// KEDA's deadline for the three calls of one HPA sync.
pub const HPA_DEADLINE: Duration = Duration::from_secs(3);

/// What one sync (HPA path) or poll (KEDA's polling loop) got from the scaler.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The summed metric value after KEDA's conversion.
    pub value: f64,
    /// The metric's `AverageValue` target.
    pub target: f64,
    /// `IsActive`.
    pub active: bool,
}

/// Why a sync or poll got no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// A call failed (after KEDA's one retry where KEDA retries).
    #[error("{method}: {status}")]
    Rpc {
        /// The RPC.
        method: &'static str,
        /// The gRPC status code and message.
        status: String,
    },
    /// The 3 s deadline of the HPA path ran out.
    #[error("the HPA's 3 s deadline ran out")]
    Deadline,
    /// The answer broke the protocol (no spec, no value, target not > 0).
    #[error("protocol: {0}")]
    Protocol(String),
}

/// KEDA's client for one ScaledObject with an external trigger, and the HPA KEDA created for it.
#[derive(Debug)]
pub struct KedaHpa {
    client: ExternalScalerClient<Channel>,
    object: ScaledObjectRef,
    hpa: Hpa,
}

impl KedaHpa {
    /// Connects to the scaler at `address` (like KEDA's pooled connection per address).
    pub async fn connect(
        address: std::net::SocketAddr,
        namespace: &str,
        name: &str,
        metadata: HashMap<String, String>,
        hpa: HpaSpec,
    ) -> anyhow::Result<Self> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))?
            .connect_timeout(Duration::from_secs(3))
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| anyhow::anyhow!("connecting to the scaler's gRPC at {address}: {e}"))?;
        Ok(Self {
            client: ExternalScalerClient::new(channel),
            object: ScaledObjectRef {
                name: name.to_owned(),
                namespace: namespace.to_owned(),
                scaler_metadata: metadata,
            },
            hpa: Hpa::new(hpa),
        })
    }

    /// The HPA's spec.
    pub fn hpa_spec(&self) -> &HpaSpec {
        self.hpa.spec()
    }

    /// One HPA sync at `now` (time since the demo's start) with `current` replicas: KEDA's
    /// three calls within the deadline, then the HPA's computation. On an error the HPA keeps
    /// `current` (it does not scale on a metric it cannot read) and the error is returned
    /// beside it.
    pub async fn hpa_sync(
        &mut self,
        now: Duration,
        current: u32,
    ) -> (u32, Result<Answer, CallError>) {
        let answer = match tokio::time::timeout(HPA_DEADLINE, self.calls()).await {
            Ok(result) => result,
            Err(_) => Err(CallError::Deadline),
        };
        match &answer {
            Ok(a) => {
                let metric = AverageValueMetric {
                    value: a.value,
                    target: a.target,
                };
                (self.hpa.sync(now, &[metric], current), answer)
            }
            Err(_) => (current, answer),
        }
    }

    /// One KEDA poll (its `pollingInterval` loop, no deadline): with `minReplicaCount` at 1 or
    /// more only the activity matters, and only for scale from and to zero.
    pub async fn poll(&mut self) -> Result<Answer, CallError> {
        self.calls().await
    }

    async fn calls(&mut self) -> Result<Answer, CallError> {
        let spec = self
            .client
            .get_metric_spec(self.object.clone())
            .await
            .map_err(|s| rpc("GetMetricSpec", &s))?
            .into_inner();
        let Some(metric) = spec.metric_specs.first().cloned() else {
            return Err(CallError::Protocol(
                "GetMetricSpec returned no metric spec".into(),
            ));
        };
        let target = spec_target(&metric);
        if target.is_nan() || target <= 0.0 {
            return Err(CallError::Protocol(format!(
                "metric {:?} has target {target}, KEDA needs > 0",
                metric.metric_name
            )));
        }
        let request = GetMetricsRequest {
            scaled_object_ref: Some(self.object.clone()),
            metric_name: metric.metric_name.clone(),
        };
        let values = retry_once(|| {
            let mut client = self.client.clone();
            let request = request.clone();
            async move { client.get_metrics(request).await }
        })
        .await
        .map_err(|s| rpc("GetMetrics", &s))?
        .into_inner()
        .metric_values;
        if values.is_empty() {
            return Err(CallError::Protocol(
                "GetMetrics returned no value for the requested metric".into(),
            ));
        }
        // KEDA sums the values it gets (it ignores the name inside each value).
        let value = values.iter().map(value_of).sum();
        let active = retry_once(|| {
            let mut client = self.client.clone();
            let object = self.object.clone();
            async move { client.is_active(object).await }
        })
        .await
        .map_err(|s| rpc("IsActive", &s))?
        .into_inner()
        .result;
        Ok(Answer {
            value,
            target,
            active,
        })
    }
}

/// KEDA's retry: a failing `GetMetrics` or `IsActive` is called once more at once.
async fn retry_once<T, F, Fut>(mut call: F) -> Result<T, tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    match call().await {
        Ok(v) => Ok(v),
        Err(_) => call().await,
    }
}

fn rpc(method: &'static str, status: &tonic::Status) -> CallError {
    CallError::Rpc {
        method,
        status: format!("{:?}: {}", status.code(), status.message()),
    }
}

/// A metric spec's target as KEDA reads it: the float field when > 0, else the int field.
pub fn spec_target(spec: &MetricSpec) -> f64 {
    if spec.target_size_float > 0.0 {
        spec.target_size_float
    } else {
        spec.target_size as f64
    }
}

/// A metric value as KEDA reads it: the float field when > 0, else the int field; rounded to 3
/// decimals, negative or NaN as 0.
pub fn value_of(value: &MetricValue) -> f64 {
    let v = if value.metric_value_float > 0.0 {
        value.metric_value_float
    } else {
        value.metric_value as f64
    };
    keda_value(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_read_like_keda() {
        let v = |int, float| MetricValue {
            metric_name: "m".into(),
            metric_value: int,
            metric_value_float: float,
        };
        assert_eq!(value_of(&v(3, 2.5)), 2.5);
        assert_eq!(value_of(&v(3, 0.0)), 3.0);
        assert_eq!(value_of(&v(-2, f64::NAN)), 0.0);
        assert_eq!(value_of(&v(0, 1.23456)), 1.235);
        let s = |int, float| MetricSpec {
            metric_name: "m".into(),
            target_size: int,
            target_size_float: float,
        };
        assert_eq!(spec_target(&s(1, 0.0)), 1.0);
        assert_eq!(spec_target(&s(1, 2.0)), 2.0);
    }
}
