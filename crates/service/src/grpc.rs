//! KEDA's external-scaler gRPC service, answering from [`crate::control`]'s state.
//!
//! Owns: the five RPCs, their error codes and the static metric spec. Does not own: scraping or
//! deciding; no handler does I/O or waits on a scrape, except that the first `GetMetrics` or
//! `IsActive` for a new ScaledObject waits (bounded) for that loop's first cycle.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::control::{LoopRegistry, ScaledObject, StartError};
use crate::proto::external_scaler_server::{ExternalScaler, ExternalScalerServer};
use crate::proto::{
    GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse, IsActiveResponse, MetricSpec,
    MetricValue, ScaledObjectRef,
};
use crate::telemetry::{MethodLabels, ScaledObjectLabels};

/// The one metric returned to KEDA.
pub const METRIC_NAME: &str = "vllm-desired-replicas";

/// Its target: the value is the desired replica count, so `AverageValue` with target 1 makes
/// the HPA's `ceil(sum / target)` equal to it.
pub const METRIC_TARGET: i64 = 1;

/// The static metric spec.
pub fn metric_spec() -> GetMetricSpecResponse {
    GetMetricSpecResponse {
        metric_specs: vec![MetricSpec {
            metric_name: METRIC_NAME.to_owned(),
            target_size: METRIC_TARGET,
            target_size_float: METRIC_TARGET as f64,
        }],
    }
}

type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The gRPC service.
#[derive(Debug, Clone)]
pub struct ScalerService {
    loops: LoopRegistry,
    heartbeat: Duration,
    shutdown: CancellationToken,
    timers: Arc<[Histogram; Method::ALL.len()]>,
}

/// The RPCs, as the `method` label of `vllm_keda_scaler_rpc_duration_seconds` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    IsActive,
    StreamIsActive,
    GetMetricSpec,
    GetMetrics,
    StreamMetricSpec,
}

impl Method {
    /// Every method, each at its own index (`method as usize`).
    const ALL: [Self; 5] = [
        Self::IsActive,
        Self::StreamIsActive,
        Self::GetMetricSpec,
        Self::GetMetrics,
        Self::StreamMetricSpec,
    ];

    /// The gRPC method name.
    fn name(self) -> &'static str {
        match self {
            Self::IsActive => "IsActive",
            Self::StreamIsActive => "StreamIsActive",
            Self::GetMetricSpec => "GetMetricSpec",
            Self::GetMetrics => "GetMetrics",
            Self::StreamMetricSpec => "StreamMetricSpec",
        }
    }
}

impl ScalerService {
    /// A service answering from `loops`; streams send a `true` heartbeat every `heartbeat`
    /// while active and end when `shutdown` is cancelled.
    pub fn new(loops: LoopRegistry, heartbeat: Duration, shutdown: CancellationToken) -> Self {
        let metrics = loops.metrics().clone();
        let timers = Method::ALL.map(|method| {
            metrics
                .rpc_duration_seconds
                .get_or_create_owned(&MethodLabels {
                    method: method.name().to_owned(),
                })
        });
        Self {
            loops,
            heartbeat: heartbeat.max(Duration::from_millis(100)),
            shutdown,
            timers: Arc::new(timers),
        }
    }

    /// The tonic server wrapping this service.
    pub fn into_server(self) -> ExternalScalerServer<Self> {
        ExternalScalerServer::new(self)
    }

    fn lookup(&self, r: &ScaledObjectRef) -> Result<Arc<ScaledObject>, Status> {
        // Kubernetes' own limits: a DNS subdomain name and a DNS label namespace.
        if r.name.len() > 253 || r.namespace.len() > 63 {
            self.loops.metrics().count_limit("scaledobject_name");
            return Err(Status::invalid_argument(
                "the ScaledObject's name (at most 253 bytes) or namespace (at most 63) is too long",
            ));
        }
        if self.loops.at_capacity(&r.namespace, &r.name) {
            return Err(Status::resource_exhausted(format!(
                "this scaler already serves {} ScaledObjects, its limit; raise \
                 --max-scaledobjects or run another scaler",
                self.loops.options().max_scaledobjects
            )));
        }
        self.loops
            .get_or_start(&r.namespace, &r.name, &r.scaler_metadata)
            .map_err(|e| match e {
                StartError::Invalid(e) => Status::invalid_argument(format!(
                    "scaledobject {}/{}: {e}",
                    r.namespace, r.name
                )),
                StartError::Busy(e) => Status::unavailable(e),
                StartError::OtherNamespace(e) => Status::invalid_argument(format!(
                    "scaledobject {}/{}: {e}",
                    r.namespace, r.name
                )),
            })
    }

    fn observe(&self, method: Method, started: Instant) {
        self.timers[method as usize].observe(started.elapsed().as_secs_f64());
    }

    async fn answer(&self, so: &ScaledObject) -> Result<(u32, bool), Status> {
        so.answer().await.map_err(|e| {
            self.loops
                .metrics()
                .unavailable
                .get_or_create(&ScaledObjectLabels::of(so))
                .inc();
            Status::unavailable(format!("scaledobject {}: {e}", so.key))
        })
    }
}

#[tonic::async_trait]
impl ExternalScaler for ScalerService {
    async fn is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<IsActiveResponse>, Status> {
        let started = Instant::now();
        let so = self.lookup(request.get_ref())?;
        let result = self.answer(&so).await;
        self.observe(Method::IsActive, started);
        let (_, active) = result?;
        Ok(Response::new(IsActiveResponse { result: active }))
    }

    type StreamIsActiveStream = ResponseStream<IsActiveResponse>;

    async fn stream_is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamIsActiveStream>, Status> {
        let started = Instant::now();
        let so = self.lookup(request.get_ref())?;
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(push_activity(so, tx, self.heartbeat, self.shutdown.clone()));
        self.observe(Method::StreamIsActive, started);
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<GetMetricSpecResponse>, Status> {
        let started = Instant::now();
        let result = self.lookup(request.get_ref());
        self.observe(Method::GetMetricSpec, started);
        result?;
        Ok(Response::new(metric_spec()))
    }

    async fn get_metrics(
        &self,
        request: Request<GetMetricsRequest>,
    ) -> Result<Response<GetMetricsResponse>, Status> {
        let started = Instant::now();
        let request = request.into_inner();
        let Some(so_ref) = request.scaled_object_ref.as_ref() else {
            return Err(Status::invalid_argument(
                "GetMetricsRequest.scaledObjectRef is missing: send the ScaledObject reference",
            ));
        };
        let so = self.lookup(so_ref)?;
        let result = self.answer(&so).await;
        self.observe(Method::GetMetrics, started);
        let (target, _) = result?;
        // Always one value, under the name asked for (KEDA ignores the name but needs a value).
        let metric_name = if request.metric_name.is_empty() {
            METRIC_NAME.to_owned()
        } else {
            request.metric_name
        };
        Ok(Response::new(GetMetricsResponse {
            metric_values: vec![MetricValue {
                metric_name,
                metric_value: i64::from(target),
                metric_value_float: f64::from(target),
            }],
        }))
    }

    type StreamMetricSpecStream = ResponseStream<GetMetricSpecResponse>;

    async fn stream_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamMetricSpecStream>, Status> {
        let started = Instant::now();
        self.lookup(request.get_ref())?;
        let (tx, rx) = mpsc::channel(1);
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            if tx.send(Ok(metric_spec())).await.is_err() {
                return;
            }
            // The spec is static: hold the stream open until the client leaves or we stop.
            tokio::select! {
                _ = tx.closed() => {}
                _ = shutdown.cancelled() => {}
            }
        });
        self.observe(Method::StreamMetricSpec, started);
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Feeds one `StreamIsActive` stream: the current state at once (after the first cycle), then
/// every change, and `true` every `heartbeat` while the answer is available and active.
/// While the view is unavailable the stream is silent (KEDA keeps its last state; `GetMetrics`
/// answers the error). Keeps the loop running while open; ends when the loop stops (its
/// metadata was replaced, or shutdown).
async fn push_activity(
    so: Arc<ScaledObject>,
    tx: mpsc::Sender<Result<IsActiveResponse, Status>>,
    heartbeat: Duration,
    shutdown: CancellationToken,
) {
    let mut rx = so.subscribe();
    let mut last: Option<bool> = None;
    let mut ticker = tokio::time::interval(heartbeat);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        let status = rx.borrow_and_update().clone();
        if let Ok(decision) = status.answer(Instant::now(), so.stale_after()) {
            if last != Some(decision.active) {
                last = Some(decision.active);
                let message = IsActiveResponse {
                    result: decision.active,
                };
                if tx.send(Ok(message)).await.is_err() {
                    return;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tx.closed() => return,
            changed = rx.changed() => {
                if changed.is_err() {
                    // The loop stopped (replaced or shut down): end the stream; KEDA reconnects.
                    return;
                }
            }
            _ = ticker.tick() => {
                so.touch_stream();
                let active_now = rx
                    .borrow()
                    .answer(Instant::now(), so.stale_after())
                    .is_ok_and(|d| d.active);
                if active_now
                    && last == Some(true)
                    && tx.send(Ok(IsActiveResponse { result: true })).await.is_err()
                {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_method_times_into_its_own_histogram_under_its_grpc_name() {
        for (i, method) in Method::ALL.into_iter().enumerate() {
            assert_eq!(method as usize, i, "{method:?}");
        }
        let names: Vec<&str> = Method::ALL.map(Method::name).to_vec();
        assert_eq!(
            names,
            [
                "IsActive",
                "StreamIsActive",
                "GetMetricSpec",
                "GetMetrics",
                "StreamMetricSpec"
            ]
        );
    }
}
