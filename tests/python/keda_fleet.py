"""A fleet of vLLM-shaped `/metrics` servers on loopback, for the KEDA end-to-end test.

Each pod is an HTTP server thread on its own loopback address (127.0.0.2, 127.0.0.3, ...) and
one shared port, like the pods behind a headless Service. The fleet writes a hosts(5) file
naming every live pod under one service name; the scaler runs with `--hosts-file` so that
"DNS" sees pods come and go as the stand-in HPA scales the fleet.

Bodies are rendered by prometheus_client (the library vLLM itself uses) in the vLLM V1 shape:
`model_name` and `engine` labels, waiting/running gauges, KV-cache usage, preemption and
success counters, and e2e / TTFT / ITL histograms with vLLM's V1 bucket bounds. A ticker
thread makes requests finish at the configured rate, so histogram counts grow over time.
"""

import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
E2E_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0]


class Pod:
    """One vLLM-shaped `/metrics` endpoint."""

    def __init__(self, host: str, port: int):
        self.host = host
        self.port = port
        self.lock = threading.Lock()
        reg = CollectorRegistry()
        self.registry = reg
        labels = ["model_name", "engine"]
        self.waiting = Gauge("vllm:num_requests_waiting",
                             "Number of requests waiting to be processed.", labels, registry=reg)
        self.running = Gauge("vllm:num_requests_running",
                             "Number of requests in model execution batches.", labels, registry=reg)
        self.kv = Gauge("vllm:kv_cache_usage_perc",
                        "KV-cache usage. 1 means 100 percent usage.", labels, registry=reg)
        self.preemptions = Counter("vllm:num_preemptions",
                                   "Cumulative number of preemption from the engine.", labels,
                                   registry=reg)
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               labels + ["finished_reason"], registry=reg)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                                     labels, registry=reg)
        self.generation_tokens = Counter("vllm:generation_tokens",
                                         "Number of generation tokens processed.", labels,
                                         registry=reg)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds",
                             "Histogram of e2e request latency in seconds.", labels,
                             buckets=E2E_BUCKETS, registry=reg)
        self.ttft = Histogram("vllm:time_to_first_token_seconds",
                              "Histogram of time to first token in seconds.", labels,
                              buckets=TTFT_BUCKETS, registry=reg)
        self.itl = Histogram("vllm:inter_token_latency_seconds",
                             "Histogram of inter-token latency in seconds.", labels,
                             buckets=ITL_BUCKETS, registry=reg)
        self.lv = {"model_name": MODEL, "engine": "0"}
        for reason in ("stop", "length", "abort"):
            self.success.labels(finished_reason=reason, **self.lv)
        for metric in (self.waiting, self.running, self.kv, self.preemptions, self.prompt_tokens,
                       self.generation_tokens, self.e2e, self.ttft, self.itl):
            metric.labels(**self.lv)
        self.scrapes = 0

        pod = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                with pod.lock:
                    body = generate_latest(pod.registry)
                    pod.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def set_state(self, waiting: float, running: float, kv: float):
        with self.lock:
            self.waiting.labels(**self.lv).set(waiting)
            self.running.labels(**self.lv).set(running)
            self.kv.labels(**self.lv).set(kv)

    def finish(self, n: int, e2e_seconds: float, ttft_seconds: float, itl_seconds: float):
        with self.lock:
            for _ in range(n):
                self.e2e.labels(**self.lv).observe(e2e_seconds)
                self.ttft.labels(**self.lv).observe(ttft_seconds)
                self.itl.labels(**self.lv).observe(itl_seconds)
            self.success.labels(finished_reason="stop", **self.lv).inc(n)
            self.prompt_tokens.labels(**self.lv).inc(200 * n)
            self.generation_tokens.labels(**self.lv).inc(150 * n)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def pick_shared_port(count: int) -> int:
    """A port free on 127.0.0.2 .. 127.0.0.(count+1)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.2", 0))
            port = s.getsockname()[1]
        ok = True
        for i in range(count):
            with socket.socket() as t:
                try:
                    t.bind((f"127.0.0.{i + 2}", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    raise RuntimeError("no port free on every 127.0.0.x address")


class Fleet:
    """Pods behind one service name, scaled by the test, with a load model.

    Load is fleet-wide: `queue` waiting requests spread over the live pods, `running` per pod,
    `finish_per_second` requests finishing across the fleet at `e2e_seconds` each.
    """

    def __init__(self, hosts_file: str, service: str, max_pods: int):
        self.hosts_file = hosts_file
        self.service = service
        self.max_pods = max_pods
        self.port = pick_shared_port(max_pods)
        self.pods: list[Pod] = []
        self.lock = threading.Lock()
        self.queue = 0.0
        self.running_per_pod = 0.0
        self.kv = 0.05
        self.finish_per_second = 0.0
        self.e2e_seconds = 1.0
        self.carry = 0.0
        self.stopped = threading.Event()
        self.write_hosts()
        self.ticker = threading.Thread(target=self.tick_forever, daemon=True)
        self.ticker.start()

    def write_hosts(self):
        lines = [f"{p.host} {self.service}\n" for p in self.pods]
        tmp = self.hosts_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("# pods of the end-to-end test fleet\n")
            f.writelines(lines)
        os.replace(tmp, self.hosts_file)

    def scale_to(self, n: int):
        """Starts or stops pods until `n` are live (at least 1, at most max_pods)."""
        n = max(1, min(self.max_pods, n))
        with self.lock:
            while len(self.pods) < n:
                self.pods.append(Pod(f"127.0.0.{len(self.pods) + 2}", self.port))
            removed = []
            while len(self.pods) > n:
                removed.append(self.pods.pop())
            self.write_hosts()
            self.apply()
        for pod in removed:
            pod.stop()

    def set_load(self, queue=None, running_per_pod=None, finish_per_second=None, kv=None,
                 e2e_seconds=None):
        with self.lock:
            if queue is not None:
                self.queue = queue
            if running_per_pod is not None:
                self.running_per_pod = running_per_pod
            if finish_per_second is not None:
                self.finish_per_second = finish_per_second
            if kv is not None:
                self.kv = kv
            if e2e_seconds is not None:
                self.e2e_seconds = e2e_seconds
            self.apply()

    def apply(self):
        n = len(self.pods)
        if n == 0:
            return
        base, extra = divmod(int(round(self.queue)), n)
        for i, pod in enumerate(self.pods):
            pod.set_state(base + (1 if i < extra else 0), self.running_per_pod, self.kv)

    def tick_forever(self, period: float = 0.1):
        while not self.stopped.wait(period):
            with self.lock:
                self.carry += self.finish_per_second * period
                whole = int(self.carry)
                self.carry -= whole
                n = len(self.pods)
                for i, pod in enumerate(self.pods):
                    share = whole // n + (1 if i < whole % n else 0)
                    if share:
                        pod.finish(share, self.e2e_seconds, self.e2e_seconds / 10, 0.02)

    def size(self) -> int:
        with self.lock:
            return len(self.pods)

    def close(self):
        self.stopped.set()
        with self.lock:
            pods, self.pods = self.pods, []
        for pod in pods:
            pod.stop()
