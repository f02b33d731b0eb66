"""A real Prometheus loaded with the shared /metrics fixtures, for test_deploy.py.

The fixtures become two scrapes one minute apart (vLLM V1: the idle then the loaded file; vLLM V0:
half the counters, then the file; DCGM: the file twice) plus a synthetic scaler, written as
OpenMetrics with timestamps, turned into TSDB blocks by `promtool tsdb create-blocks-from
openmetrics`, and served by a `prometheus` process on a free loopback port.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import deploy_support as ds

V1_NAMESPACE = "llm-serving"
V0_NAMESPACE = "llm-legacy"
SCALEDOBJECT = "vllm-llama-8b"
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)")


def _samples(path: Path, extra: str, scale_counters: float = 1.0) -> list[tuple[str, str, float]]:
    """(name, label block, value) for every sample, with extra labels appended; counters,
    buckets, sums and counts multiplied by scale_counters."""
    out = []
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"{path.name}: cannot read {line!r}"
        name, labels, value = m.groups()
        inner = labels[1:-1] if labels else ""
        inner = ",".join(x for x in (inner, extra) if x)
        v = float(value)
        if name.endswith(("_total", "_bucket", "_sum", "_count")) and not name.endswith("_created"):
            v *= scale_counters
        out.append((name, "{" + inner + "}", v))
    return out


def _scaler_samples(namespace: str, t: int, step: int) -> list[tuple[str, str, float]]:
    """What one scaler replica would expose for one ScaledObject (shared metric names)."""
    so = f'namespace="{namespace}",scaledobject="{SCALEDOBJECT}",pod="scaler-0"'
    gauges = {
        "vllm_keda_scaler_target_replicas": 3, "vllm_keda_scaler_desired_replicas": 4,
        "vllm_keda_scaler_ready_replicas": 2, "vllm_keda_scaler_min_replicas": 1,
        "vllm_keda_scaler_max_replicas": 5, "vllm_keda_scaler_queue_depth": 14,
        "vllm_keda_scaler_running_requests": 52, "vllm_keda_scaler_e2e_latency_p95_seconds": 38.3,
        "vllm_keda_scaler_ttft_p95_seconds": 6.95, "vllm_keda_scaler_itl_p95_seconds": 0.074,
        "vllm_keda_scaler_kv_cache_usage_max": 0.9, "vllm_keda_scaler_preemptions_per_second": 0.07,
        "vllm_keda_scaler_hindsight_static_replicas": 3,
        "vllm_keda_scaler_hindsight_static_replica_hours_ratio": 1.2,
        "vllm_keda_scaler_hindsight_static_beats_ours": 0,
        "vllm_keda_scaler_hindsight_served_ratio": 0.97,
        "vllm_keda_scaler_hindsight_served_counted_ratio": 0.91,
        "vllm_keda_scaler_capacity_per_replica": 9.5, "vllm_keda_scaler_startup_seconds": 300,
    }
    out = [(n, "{" + so + "}", float(v)) for n, v in gauges.items()]
    out += [
        ("vllm_keda_scaler_targets", "{" + so + ',health="healthy"}', 2.0),
        ("vllm_keda_scaler_targets", "{" + so + ',health="failing"}', 0.0),
        ("vllm_keda_scaler_last_success_timestamp_seconds", "{" + so + "}", float(t)),
        ("vllm_keda_scaler_decisions_total", "{" + so + ',reason="queue_depth"}', 10.0 * step),
        ("vllm_keda_scaler_scrapes_total", "{" + so + ',result="ok"}', 60.0 * step),
        ("vllm_keda_scaler_scrapes_total", "{" + so + ',result="timeout"}', 1.0 * step),
        ("vllm_keda_scaler_unavailable_total", "{" + so + "}", 0.0),
    ]
    for le, share in (("0.005", 0.2), ("0.01", 0.7), ("0.05", 1.0), ("+Inf", 1.0)):
        out.append(("vllm_keda_scaler_scrape_duration_seconds_bucket", "{" + so + f',le="{le}"' + "}",
                    60.0 * step * share))
    out += [("vllm_keda_scaler_scrape_duration_seconds_sum", "{" + so + "}", 0.6 * step),
            ("vllm_keda_scaler_scrape_duration_seconds_count", "{" + so + "}", 60.0 * step)]
    own = 'namespace="vllm-keda-scaler",pod="scaler-0"'
    for le, share in (("0.0001", 0.5), ("0.001", 1.0), ("+Inf", 1.0)):
        out.append(("vllm_keda_scaler_rpc_duration_seconds_bucket",
                    "{" + own + f',method="GetMetrics",le="{le}"' + "}", 40.0 * step * share))
    out += [("vllm_keda_scaler_rpc_duration_seconds_sum", "{" + own + ',method="GetMetrics"}', 0.004 * step),
            ("vllm_keda_scaler_rpc_duration_seconds_count", "{" + own + ',method="GetMetrics"}', 40.0 * step)]
    if namespace == V1_NAMESPACE:
        out.append(("vllm_keda_scaler_scaledobjects", "{" + own + "}", 2.0))
    return out


def fixture_openmetrics(t: int) -> str:
    """Two scrapes (t-60 and t) of every fixture, as OpenMetrics text with timestamps."""
    f = ds.FIXTURES
    scrapes = [
        (t - 60, _samples(f / "vllm-v1-idle.prom", f'namespace="{V1_NAMESPACE}",pod="vllm-a"')),
        (t, _samples(f / "vllm-v1-loaded.prom", f'namespace="{V1_NAMESPACE}",pod="vllm-a"')),
        (t - 60, _samples(f / "vllm-v0.prom", f'namespace="{V0_NAMESPACE}",pod="vllm-old"', 0.5)),
        (t, _samples(f / "vllm-v0.prom", f'namespace="{V0_NAMESPACE}",pod="vllm-old"')),
        (t - 60, _samples(f / "dcgm.prom", "")),
        (t, _samples(f / "dcgm.prom", "")),
    ]
    for ns in (V1_NAMESPACE, V0_NAMESPACE):
        scrapes += [(t - 60, _scaler_samples(ns, t - 60, 0)), (t, _scaler_samples(ns, t, 1))]
    series: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for ts, samples in scrapes:
        for name, labels, value in samples:
            series.setdefault((name, labels), []).append((ts, value))
    lines = []
    for (name, labels), points in sorted(series.items()):
        for ts, value in sorted(points):
            lines.append(f"{name}{labels} {value!r} {ts}".replace("inf ", "+Inf ").replace("nan ", "NaN "))
    return "\n".join(lines) + "\n# EOF\n"


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@contextlib.contextmanager
def prometheus_with_fixtures(promtool: str, prometheus: str, workdir: Path, t: int):
    """Yields query(expr) -> list of (labels, value) at time t, against a real Prometheus."""
    (workdir / "input.om").write_text(fixture_openmetrics(t))
    data = workdir / "data"
    out = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(workdir / "input.om"),
                          str(data)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    (workdir / "prometheus.yml").write_text("global:\n  scrape_interval: 1h\n")
    port = _free_port()
    log = (workdir / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [prometheus, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=3650d"],
        stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "prometheus exited:\n" + (workdir / "prometheus.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(base + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.2)

        def query(expr: str) -> list[tuple[dict, float]]:
            body = urllib.parse.urlencode({"query": expr, "time": str(t)}).encode()
            with urllib.request.urlopen(base + "/api/v1/query", data=body, timeout=30) as r:
                answer = json.loads(r.read())
            assert answer["status"] == "success", (expr, answer)
            result = answer["data"]["result"]
            if answer["data"]["resultType"] == "scalar":
                return [({}, float(result[1]))]
            return [(s["metric"], float(s["value"][1])) for s in result]

        yield query
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
