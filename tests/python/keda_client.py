"""A stand-in for KEDA and the HPA, written from KEDA's documented behaviour, independent of the
Rust code: it speaks gRPC through stubs generated from our proto by grpc_tools.

What it does, per HPA sync (KEDA's HPA path):
  GetMetricSpec -> GetMetrics -> IsActive, all within one 3 s deadline;
  an error from GetMetrics or IsActive is retried once at once (KEDA's behaviour);
  value conversion: the float field when > 0, else the int field; rounded to 3 decimals;
  negative or NaN -> 0;
  the HPA AverageValue rule: desired = ceil(sum / target) unless
  |sum / (target x current) - 1| <= tolerance (0.1, inclusive), then unchanged;
  clamped to the ScaledObject's [minReplicaCount, maxReplicaCount].
The HPA's own behaviour policies are taken as permissive (stabilisation 0, no rate limit), so
the scaler's rate limits and hysteresis are what the test observes.
"""

import math
import time
from dataclasses import dataclass

import grpc

HPA_DEADLINE_SECONDS = 3.0
CHANNEL_OPTIONS = [("grpc.enable_http_proxy", 0)]


def keda_value(metric_value) -> float:
    """KEDA's conversion of one MetricValue to a quantity."""
    v = metric_value.metricValueFloat
    if not (v > 0):  # also catches NaN
        v = float(metric_value.metricValue)
    if math.isnan(v) or v < 0:
        return 0.0
    return round(v, 3)


def spec_target(spec) -> float:
    v = spec.targetSizeFloat
    return v if v > 0 else float(spec.targetSize)


def hpa_average_value(total: float, target: float, current: int, tolerance: float = 0.1) -> int:
    """The HPA's desired replicas for an AverageValue metric."""
    if current > 0:
        ratio = total / (target * current)
        if abs(ratio - 1.0) <= tolerance:
            return current
    return int(math.ceil(total / target))


@dataclass
class Poll:
    """One HPA sync as KEDA performs it."""
    at: float
    metric_name: str
    target: float
    value: float
    desired: int
    active: bool


class Keda:
    """KEDA's scaler client for one ScaledObject (trigger type `external`)."""

    def __init__(self, stubs, address: str, namespace: str, name: str, metadata: dict,
                 min_replicas: int, max_replicas: int, tolerance: float = 0.1,
                 credentials=None, server_name: str = ""):
        """`credentials` (grpc.ssl_channel_credentials) makes it KEDA with `enableTLS`;
        `server_name` is then the name the server certificate must carry (KEDA checks the
        host of its `scalerAddress`)."""
        self.pb2, pb2_grpc = stubs
        if credentials is None:
            self.channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        else:
            options = CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", server_name)]
            self.channel = grpc.secure_channel(address, credentials, options=options)
        self.stub = pb2_grpc.ExternalScalerStub(self.channel)
        self.ref = self.pb2.ScaledObjectRef(name=name, namespace=namespace,
                                            scalerMetadata=metadata)
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self.tolerance = tolerance

    def close(self):
        self.channel.close()

    def _call(self, method, request, deadline: float, retry: bool):
        attempts = 2 if retry else 1
        for attempt in range(attempts):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the HPA's 3 s deadline ran out")
            try:
                return method(request, timeout=remaining)
            except grpc.RpcError:
                if attempt == attempts - 1:
                    raise

    def poll(self, current_replicas: int) -> Poll:
        """One HPA sync; raises grpc.RpcError when the scaler answered an error twice."""
        deadline = time.monotonic() + HPA_DEADLINE_SECONDS
        spec = self._call(self.stub.GetMetricSpec, self.ref, deadline, retry=False)
        assert len(spec.metricSpecs) == 1, spec
        metric = spec.metricSpecs[0]
        request = self.pb2.GetMetricsRequest(scaledObjectRef=self.ref,
                                             metricName=metric.metricName)
        metrics = self._call(self.stub.GetMetrics, request, deadline, retry=True)
        assert len(metrics.metricValues) >= 1, "GetMetrics must return at least one value"
        total = sum(keda_value(v) for v in metrics.metricValues)
        target = spec_target(metric)
        active = self._call(self.stub.IsActive, self.ref, deadline, retry=True).result
        desired = hpa_average_value(total, target, current_replicas, self.tolerance)
        desired = max(self.min_replicas, min(self.max_replicas, desired))
        return Poll(at=time.monotonic(), metric_name=metric.metricName, target=target,
                    value=total, desired=desired, active=active)


FALLBACK_BEHAVIORS = ("static", "currentReplicas", "currentReplicasIfHigher",
                      "currentReplicasIfLower")


class KedaWithFallback(Keda):
    """KEDA with `spec.fallback {failureThreshold, replicas, behavior}` on the HPA path.

    KEDA counts consecutive failed metric reads; a success resets the count. While the count is
    at most `failureThreshold` the error reaches the HPA, which then keeps the current replicas.
    Beyond it KEDA answers the HPA with `replicas x target` instead of an error, where
    `replicas` depends on `behavior`: `static` the fallback replicas (which can be a scale-in),
    `currentReplicas` the current ones, `currentReplicasIfHigher` the larger of the two,
    `currentReplicasIfLower` the smaller.
    """

    def __init__(self, *args, failure_threshold: int, fallback_replicas: int,
                 behavior: str = "static", **kwargs):
        super().__init__(*args, **kwargs)
        assert behavior in FALLBACK_BEHAVIORS, behavior
        self.failure_threshold = failure_threshold
        self.fallback_replicas = fallback_replicas
        self.behavior = behavior
        self.failures = 0

    def fallback_for(self, current: int) -> int:
        r = self.fallback_replicas
        return {"static": r, "currentReplicas": current,
                "currentReplicasIfHigher": max(current, r),
                "currentReplicasIfLower": min(current, r)}[self.behavior]

    def hpa_sync(self, current_replicas: int):
        """One HPA sync: (the replicas the HPA sets, the scaler's error or None)."""
        try:
            p = self.poll(current_replicas)
        except grpc.RpcError as error:
            self.failures += 1
            if self.failures <= self.failure_threshold:
                return current_replicas, error
            desired = max(self.min_replicas, min(self.max_replicas,
                                                 self.fallback_for(current_replicas)))
            return desired, error
        self.failures = 0
        return p.desired, None
