"""Faults on loopback for the fail-safe tests: vLLM-shaped pods that can fail in the ways real
pods do, a fleet of them behind a hosts(5) name, and a stand-in for the Kubernetes API server.

No cluster is available here, so the Kubernetes API's JSON for the objects the scaler reads (a
keda.sh/v1alpha1 ScaledObject, an autoscaling/v1 Scale, a v1 Status for refusals) is served by
`FakeKubeApi`, an HTTP server on loopback that the scaler reaches through a kubeconfig.
"""

import json
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import generate_latest

from keda_fleet import Pod, pick_shared_port

# What a pod can do instead of answering its /metrics normally.
FAULTS = ("ok", "500", "hang", "garbage", "no_vllm", "nan", "negative_queue", "kv_7",
          "duplicate", "no_inf", "refuse")

HANG_SECONDS = 3.0


def faulty_body(fault: str, body: bytes) -> bytes:
    """`body` (a healthy vLLM exposition) turned into what a pod with `fault` serves."""
    text = body.decode()
    if fault == "garbage":
        return b"<html>this { is not a metrics body\n"
    if fault == "no_vllm":
        return (b"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n"
                b"# TYPE go_goroutines gauge\ngo_goroutines 30\n")
    if fault == "nan":
        return re.sub(r"^(vllm:num_requests_waiting\{[^}]*\}) \S+$", r"\1 NaN", text,
                      flags=re.M).encode()
    if fault == "negative_queue":
        return re.sub(r"^(vllm:num_requests_waiting\{[^}]*\}) \S+$", r"\1 -50.0", text,
                      flags=re.M).encode()
    if fault == "kv_7":
        return re.sub(r"^(vllm:kv_cache_usage_perc\{[^}]*\}) \S+$", r"\1 7.0", text,
                      flags=re.M).encode()
    if fault == "duplicate":
        lines = [l for l in text.splitlines() if l.startswith("vllm:num_requests_running{")]
        return (text + "\n".join(lines) + "\n").encode()
    if fault == "no_inf":
        return "".join(l + "\n" for l in text.splitlines()
                       if not (l.startswith("vllm:e2e_request_latency_seconds_bucket")
                               and 'le="+Inf"' in l)).encode()
    return body


class FaultyPod(Pod):
    """A `keda_fleet.Pod` whose /metrics can be switched to a fault (see FAULTS)."""

    def __init__(self, host: str, port: int):
        super().__init__(host, port)
        self.fault = "ok"
        pod = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                try:
                    self.answer()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the scraper gave up (timeout): nothing to answer

            def answer(self):
                fault = pod.fault
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                if fault == "500":
                    self.send_error(500, "engine overloaded")
                    return
                if fault == "hang":
                    time.sleep(HANG_SECONDS)
                    self.send_error(503)
                    return
                with pod.lock:
                    body = generate_latest(pod.registry)
                    pod.scrapes += 1
                body = faulty_body(fault, body)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server.RequestHandlerClass = Handler


class FaultyFleet:
    """Pods behind one name in a hosts(5) file. Unlike `keda_fleet.Fleet`, a pod can be
    killed (its address stays listed: the scaler gets connection refused, as with a crashed
    pod behind a not-yet-updated DNS answer), restarted (a new process: counters reset), made
    slow or made to serve a broken body."""

    def __init__(self, hosts_file: str, service: str, max_pods: int):
        self.hosts_file = hosts_file
        self.service = service
        self.max_pods = max_pods
        self.port = pick_shared_port(max_pods)
        self.lock = threading.Lock()
        self.pods: list = []  # FaultyPod, or None for a killed pod (still listed)
        self.queue = 0.0
        self.running = 0.0
        self.kv = 0.05
        self.write_hosts()

    def host(self, i: int) -> str:
        return f"127.0.0.{i + 2}"

    def write_hosts(self):
        tmp = self.hosts_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("# pods of the fail-safe test fleet\n")
            for i in range(len(self.pods)):
                f.write(f"{self.host(i)} {self.service}\n")
        os.replace(tmp, self.hosts_file)

    def scale_to(self, n: int):
        n = max(0, min(self.max_pods, n))
        removed = []
        with self.lock:
            while len(self.pods) < n:
                self.pods.append(FaultyPod(self.host(len(self.pods)), self.port))
            while len(self.pods) > n:
                removed.append(self.pods.pop())
            self.write_hosts()
            self._apply()
        for pod in removed:
            if pod is not None:
                pod.stop()

    def size(self) -> int:
        with self.lock:
            return len(self.pods)

    def set_load(self, queue=None, running=None, kv=None):
        with self.lock:
            if queue is not None:
                self.queue = queue
            if running is not None:
                self.running = running
            if kv is not None:
                self.kv = kv
            self._apply()

    def _apply(self):
        live = [p for p in self.pods if p is not None]
        if not live:
            return
        base, extra = divmod(int(round(self.queue)), len(live))
        for i, pod in enumerate(live):
            pod.set_state(base + (1 if i < extra else 0), self.running, self.kv)

    def set_fault(self, i: int, fault: str):
        with self.lock:
            pod = self.pods[i]
            if fault == "refuse":
                if pod is not None:
                    self.pods[i] = None
                    pod.stop()
                return
            if pod is None:
                pod = self.pods[i] = FaultyPod(self.host(i), self.port)
                self._apply()
            pod.fault = fault

    def restart(self, i: int):
        """A new process on the same address: counters start from zero."""
        with self.lock:
            old = self.pods[i]
            self.pods[i] = None
        if old is not None:
            old.stop()
        with self.lock:
            self.pods[i] = FaultyPod(self.host(i), self.port)
            self._apply()

    def faults(self) -> list:
        with self.lock:
            return ["refuse" if p is None else p.fault for p in self.pods]

    def close(self):
        with self.lock:
            pods, self.pods = self.pods, []
        for pod in pods:
            if pod is not None:
                pod.stop()


def scaledobject_json(namespace: str, name: str, target: str) -> dict:
    """A keda.sh/v1alpha1 ScaledObject as the API server returns it."""
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": namespace,
                     "uid": "6a2f6d0e-9a53-4c1b-8f0e-3b7d2c9e1a01", "resourceVersion": "51234",
                     "generation": 1, "creationTimestamp": "2026-11-30T10:00:00Z"},
        "spec": {"scaleTargetRef": {"name": target}, "minReplicaCount": 1,
                 "maxReplicaCount": 10,
                 "fallback": {"failureThreshold": 3, "replicas": 2,
                              "behavior": "currentReplicasIfHigher"},
                 "triggers": [{"type": "external", "metadata": {"scalerAddress": "x:9090"}}]},
        "status": {"scaleTargetKind": "apps/v1.Deployment", "originalReplicaCount": 1},
    }


def scale_json(namespace: str, name: str, spec: int, status: int) -> dict:
    """An autoscaling/v1 Scale as the API server returns it for deployments/scale."""
    return {
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": name, "namespace": namespace,
                     "uid": "1c9e4b7a-2d3f-4e5a-9b8c-7d6e5f4a3b21", "resourceVersion": "51301",
                     "creationTimestamp": "2026-11-30T09:58:00Z"},
        "spec": {"replicas": spec},
        "status": {"replicas": status, "selector": f"app={name}"},
    }


class FakeKubeApi:
    """Serves GET of ScaledObjects and of deployments/scale on loopback, as the Kubernetes API
    does; `replicas(name)` is what the deployment asks for now (set by the test, like the HPA
    would). Writes a kubeconfig pointing at itself."""

    def __init__(self, tmp_path, namespace: str):
        self.namespace = namespace
        self.lock = threading.Lock()
        self.scaledobjects = {}  # scaledobject name -> deployment name
        self.replicas = {}  # deployment name -> (spec, status)
        self.forbidden = False
        self.requests = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                code, body = api.answer(self.path)
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        host, port = self.server.server_address
        self.kubeconfig = str(tmp_path / "kubeconfig")
        with open(self.kubeconfig, "w") as f:
            f.write(f"""apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: http://{host}:{port}
contexts:
- name: test
  context:
    cluster: test
    user: scaler
current-context: test
users:
- name: scaler
  user:
    token: test-token
""")

    def set(self, scaledobject: str, deployment: str, spec: int, status=None):
        with self.lock:
            self.scaledobjects[scaledobject] = deployment
            self.replicas[deployment] = (spec, spec if status is None else status)

    def answer(self, path: str):
        ns = self.namespace
        with self.lock:
            self.requests.append(path)
            so = re.fullmatch(f"/apis/keda.sh/v1alpha1/namespaces/{ns}/scaledobjects/([^/]+)", path)
            scale = re.fullmatch(f"/apis/apps/v1/namespaces/{ns}/deployments/([^/]+)/scale", path)
            if self.forbidden and (so or scale):
                resource, group, name = (("scaledobjects", "keda.sh", so.group(1)) if so
                                         else ("deployments", "apps", scale.group(1)))
                return 403, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                             "status": "Failure", "reason": "Forbidden", "code": 403,
                             "message": f'{resource}.{group} "{name}" is forbidden: User '
                                        f'"system:serviceaccount:keda:vllm-keda-scaler" cannot '
                                        f'get resource "{resource}" in API group "{group}" in the '
                                        f'namespace "{ns}"',
                             "details": {"name": name, "group": group, "kind": resource}}
            if so and so.group(1) in self.scaledobjects:
                return 200, scaledobject_json(ns, so.group(1), self.scaledobjects[so.group(1)])
            if scale and scale.group(1) in self.replicas:
                spec, status = self.replicas[scale.group(1)]
                return 200, scale_json(ns, scale.group(1), spec, status)
        return 404, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                     "message": "the server could not find the requested resource",
                     "reason": "NotFound", "code": 404}

    def close(self):
        self.server.shutdown()
        self.server.server_close()
