"""End to end: `vllm-keda-scaler serve` as a process, vLLM-shaped pods on loopback, and an
independent KEDA/HPA stand-in (Python grpcio, stubs generated from our proto) that follows
KEDA's call order, deadline, value conversion and the HPA formula.

Periods are shortened through the scaler metadata (scrape every 0.5 s, +2 pods per 2 s after
1 s, -1 pod per 2 s after 3 s of calm) and the HPA sync is 1 s instead of 15 s.
"""

import threading
import time

import grpc
import pytest

from conftest import free_port
from keda_client import CHANNEL_OPTIONS, Keda, keda_value
from keda_fleet import Fleet, Pod, pick_shared_port
from scaler_process import NAMESPACE, scaler_process

SCRAPE_INTERVAL = 0.5
HPA_SYNC = 1.0
# One scrape interval plus this margin for the push (a loaded CI machine).
STREAM_MARGIN = 0.75
MIN_REPLICAS = 1
MAX_REPLICAS = 6
QUEUE_PER_REPLICA = 5
SCALE_UP_PODS = 2
SCALE_DOWN_PODS = 1
SCALE_DOWN_PERIOD = 2.0
SCALE_DOWN_STABILIZATION = 3.0


def metadata(**overrides) -> dict:
    m = {
        "scalerAddress": "vllm-keda-scaler.keda.svc:9090",
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "queueDepthPerReplica": str(QUEUE_PER_REPLICA),
        "latencySloSeconds": "5",
        # This test drives the end-to-end SLO; the TTFT and ITL SLOs (on by default) are off.
        "ttftSloSeconds": "off",
        "itlSloSeconds": "off",
        "minReplicas": str(MIN_REPLICAS),
        "maxReplicas": str(MAX_REPLICAS),
        "scaleUpPods": str(SCALE_UP_PODS),
        "scaleUpPeriodSeconds": "2",
        "scaleUpStabilizationSeconds": "1",
        "scaleDownPods": str(SCALE_DOWN_PODS),
        "scaleDownPeriodSeconds": str(SCALE_DOWN_PERIOD),
        "scaleDownStabilizationSeconds": str(SCALE_DOWN_STABILIZATION),
        "startupGraceSeconds": "5",
        "scrapeIntervalSeconds": str(SCRAPE_INTERVAL),
    }
    m.update(overrides)
    return m


@pytest.fixture
def scaler(binary, tmp_path, env_without_proxy):
    with scaler_process(binary, tmp_path, env_without_proxy,
                        ["--stream-heartbeat-seconds", "1"]) as s:
        yield s


def run_hpa(keda: Keda, fleet: Fleet, polls: list, until, timeout: float, what: str):
    """HPA syncs every HPA_SYNC seconds, scaling the fleet to each answer, until `until(poll)`."""
    deadline = time.monotonic() + timeout
    while True:
        p = keda.poll(fleet.size())
        polls.append(p)
        fleet.scale_to(p.desired)
        if until(p):
            return p
        if time.monotonic() > deadline:
            trace = "\n".join(f"  {q.at:.1f} value={q.value} desired={q.desired} active={q.active}"
                              for q in polls[-15:])
            pytest.fail(f"{what}: not reached within {timeout} s; last HPA syncs:\n{trace}")
        time.sleep(HPA_SYNC)


def test_scales_through_ramp_burst_and_scale_in(scaler, stubs):
    name = "chat"
    fleet = Fleet(scaler.hosts_file, "vllm-e2e.test", MAX_REPLICAS)
    keda = Keda(stubs, scaler.grpc_addr, NAMESPACE, name,
                metadata(service="vllm-e2e.test", port=str(fleet.port)),
                MIN_REPLICAS, MAX_REPLICAS)
    try:
        fleet.scale_to(1)
        polls = []

        # Idle: no queue, nothing running, nothing finished -> min replicas, inactive.
        for _ in range(2):
            p = keda.poll(fleet.size())
            polls.append(p)
            assert p.metric_name == "vllm-desired-replicas" and p.target == 1.0
            assert (p.value, p.desired, p.active) == (1.0, 1, False), p
            time.sleep(HPA_SYNC)

        # Ramp: the target follows ceil(queue / N), without overshoot.
        fleet.set_load(running_per_pod=4, finish_per_second=5, kv=0.3)
        for queue, expected in [(8, 2), (16, 4), (24, 5)]:
            fleet.set_load(queue=queue)
            run_hpa(keda, fleet, polls, lambda p: p.desired == expected, 10,
                    f"ramp to queue {queue}: {expected} replicas")
            for _ in range(2):  # holds: queue per replica is now within N
                p = keda.poll(fleet.size())
                polls.append(p)
                assert p.desired == expected and p.active, p
                time.sleep(HPA_SYNC)
        ups = [b.desired - a.desired for a, b in zip(polls, polls[1:])]
        assert max(ups) <= SCALE_UP_PODS, ups
        assert min(ups) >= 0, f"the target fell during the ramp: {ups}"

        # Burst: far above capacity -> maxReplicas, never beyond.
        fleet.set_load(queue=200, kv=0.6)
        run_hpa(keda, fleet, polls, lambda p: p.desired == MAX_REPLICAS, 8, "burst to max")
        for _ in range(2):
            p = keda.poll(fleet.size())
            polls.append(p)
            assert p.desired == MAX_REPLICAS, p
            time.sleep(HPA_SYNC)
        assert max(p.value for p in polls) <= MAX_REPLICAS
        reasons = [d["decision"]["reason"] for d in scaler.debug(name)["decisions"]]
        assert "queue_depth" in reasons and "at_max" in reasons, reasons

        # Calm: queue empty, latency low, KV low -> hold for the calm period, then -1 per period.
        fleet.set_load(queue=0, running_per_pod=2, finish_per_second=4, kv=0.1)
        calm_set = time.monotonic()
        start = len(polls)
        run_hpa(keda, fleet, polls, lambda p: p.desired == MIN_REPLICAS, 40, "scale-in to min")
        calm = polls[start:]
        downs = [a.desired - b.desired for a, b in zip(calm, calm[1:])]
        assert min(downs) >= 0, f"the target rose during calm: {downs}"
        assert max(downs) <= SCALE_DOWN_PODS, downs
        first_drop = next(b.at for a, b in zip(calm, calm[1:]) if b.desired < a.desired)
        assert first_drop - calm_set >= SCALE_DOWN_STABILIZATION - 0.1, (
            f"scaled in {first_drop - calm_set:.2f} s into calm; the calm period is "
            f"{SCALE_DOWN_STABILIZATION} s")
        # 6 -> 1 is five steps at most one per period: at least four periods from first to last.
        assert calm[-1].at - first_drop >= 4 * SCALE_DOWN_PERIOD - HPA_SYNC, (
            calm[-1].at - first_drop)
        assert all(p.active for p in calm), "running requests are work: active throughout"

        detail = scaler.debug(name)
        latest = detail["decisions"][0]["decision"]
        assert latest["target_replicas"] == 1
        calm_steps = [d for d in detail["decisions"] if d["decision"]["reason"] == "scale_in_calm"]
        assert calm_steps and "queue 0" in calm_steps[0]["decision"]["explanation"], detail
        assert all(t["healthy"] for t in detail["targets"]), detail["targets"]

        text = scaler.get("/metrics")
        for needle in [
            f'vllm_keda_scaler_target_replicas{{namespace="{NAMESPACE}",scaledobject="{name}"}} 1.0',
            f'vllm_keda_scaler_decisions_total{{namespace="{NAMESPACE}",scaledobject="{name}",reason="queue_depth"}}',
            f'vllm_keda_scaler_decisions_total{{namespace="{NAMESPACE}",scaledobject="{name}",reason="scale_in_calm"}}',
            'vllm_keda_scaler_rpc_duration_seconds_count{method="GetMetrics"}',
        ]:
            assert needle in text, f"{needle} not in /metrics"
        # 1 -> 2 -> 4 -> 5 -> 6 and five steps back to 1: at least nine target changes.
        log = scaler.log()
        changes = log.count("replica target changed")
        assert changes >= 9, f"expected a log line per target change, saw {changes}"
        assert "reason=scale_in_calm" in log and "reason=queue_depth" in log
        assert "activity changed" in log
    finally:
        keda.close()
        fleet.close()


def test_stream_is_active_pushes_true_within_one_interval(scaler, stubs):
    pb2, pb2_grpc = stubs
    fleet = Fleet(scaler.hosts_file, "vllm-stream.test", 1)
    md = metadata(service="vllm-stream.test", port=str(fleet.port))
    keda = Keda(stubs, scaler.grpc_addr, NAMESPACE, "pushed", md, MIN_REPLICAS, MAX_REPLICAS)
    channel = grpc.insecure_channel(scaler.grpc_addr, options=CHANNEL_OPTIONS)
    messages = []
    try:
        fleet.scale_to(1)
        assert keda.poll(1).active is False
        call = pb2_grpc.ExternalScalerStub(channel).StreamIsActive(keda.ref)

        def read():
            try:
                for m in call:
                    messages.append((time.monotonic(), m.result))
            except grpc.RpcError:
                pass

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        # The current state arrives at once.
        deadline = time.monotonic() + 2
        while not messages and time.monotonic() < deadline:
            time.sleep(0.01)
        assert messages and messages[0][1] is False, messages
        time.sleep(2 * SCRAPE_INTERVAL)
        assert all(r is False for _, r in messages), "no work yet, yet the stream said true"

        # The first waiting request.
        step = time.monotonic()
        fleet.set_load(queue=1)
        deadline = step + SCRAPE_INTERVAL + STREAM_MARGIN
        while time.monotonic() < deadline and not any(r for _, r in messages):
            time.sleep(0.005)
        pushed = [t for t, r in messages if r]
        assert pushed, f"no true within {SCRAPE_INTERVAL + STREAM_MARGIN} s of the first waiting request"
        delay = pushed[0] - step
        assert delay <= SCRAPE_INTERVAL + STREAM_MARGIN, delay
        print(f"StreamIsActive pushed true {delay * 1000:.0f} ms after the queue step")

        # Heartbeat: more `true` while active (heartbeat 1 s in this test).
        time.sleep(2.5)
        assert sum(1 for _, r in messages if r) >= 3, messages
        call.cancel()
    finally:
        channel.close()
        keda.close()
        fleet.close()


def test_bad_metadata_is_invalid_argument(scaler, stubs):
    keda = Keda(stubs, scaler.grpc_addr, NAMESPACE, "bad",
                metadata(endpoints="http://127.0.0.1:9/metrics", queueDepthPerReplica="many"),
                MIN_REPLICAS, MAX_REPLICAS)
    try:
        with pytest.raises(grpc.RpcError) as err:
            keda.poll(1)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "queueDepthPerReplica" in err.value.details()
        assert '"many"' in err.value.details()
    finally:
        keda.close()
    keda = Keda(stubs, scaler.grpc_addr, NAMESPACE, "typo",
                metadata(endpoints="http://127.0.0.1:9/metrics", minReplica="2"),
                MIN_REPLICAS, MAX_REPLICAS)
    try:
        with pytest.raises(grpc.RpcError) as err:
            keda.poll(1)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "minReplica" in err.value.details()
    finally:
        keda.close()


def test_unavailable_when_all_targets_are_down(scaler, stubs):
    # Never up: two dead ports.
    dead = [f"http://127.0.0.1:{free_port()}/metrics" for _ in range(2)]
    keda = Keda(stubs, scaler.grpc_addr, NAMESPACE, "down", metadata(endpoints=",".join(dead)),
                MIN_REPLICAS, MAX_REPLICAS)
    try:
        with pytest.raises(grpc.RpcError) as err:
            keda.poll(1)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value
        for url in dead:
            assert url.split("//")[1].split("/")[0] in err.value.details(), err.value.details()
        # KEDA retried once at once: two Unavailable answers.
        text = scaler.get("/metrics")
        assert (f'vllm_keda_scaler_unavailable_total{{namespace="{NAMESPACE}",'
                f'scaledobject="down"}} 2') in text
    finally:
        keda.close()

    # Up, then every pod gone: Unavailable after a few scrape intervals, naming the pod.
    port = pick_shared_port(1)
    pod = Pod("127.0.0.2", port)
    url = f"http://127.0.0.2:{port}/metrics"
    keda = Keda(stubs, scaler.grpc_addr, NAMESPACE, "lost", metadata(endpoints=url),
                MIN_REPLICAS, MAX_REPLICAS)
    try:
        p = keda.poll(1)
        assert p.desired == 1 and keda_value_ok(p.value)
        pod.stop()
        time.sleep(4 * SCRAPE_INTERVAL + 0.5)
        with pytest.raises(grpc.RpcError) as err:
            keda.poll(1)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert f"127.0.0.2:{port}" in err.value.details(), err.value.details()
    finally:
        keda.close()


def keda_value_ok(value: float) -> bool:
    return value == round(value, 3) and value >= 0


def test_keda_value_conversion_matches_keda():
    class V:
        def __init__(self, i, f):
            self.metricValue, self.metricValueFloat = i, f
    assert keda_value(V(3, 2.5)) == 2.5
    assert keda_value(V(3, 0.0)) == 3.0
    assert keda_value(V(-4, 0.0)) == 0.0
    assert keda_value(V(7, float("nan"))) == 7.0
    assert keda_value(V(0, 1.23456)) == 1.235
