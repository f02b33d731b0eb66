"""`vllm-keda-scaler serve` as a child process on loopback, for the end-to-end tests."""

import json
import signal
import subprocess
import time
import urllib.request
from contextlib import contextmanager

import pytest

from conftest import free_port

NAMESPACE = "llm"


class Scaler:
    """The scaler process and its addresses."""

    def __init__(self, proc, grpc_addr, http_addr, hosts_file, log_path):
        self.proc = proc
        self.grpc_addr = grpc_addr
        self.http_addr = http_addr
        self.hosts_file = hosts_file
        self.log_path = log_path

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def get(self, path: str) -> str:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://{self.http_addr}{path}", timeout=5) as r:
            return r.read().decode()

    def debug(self, name: str, namespace: str = NAMESPACE) -> dict:
        return json.loads(self.get(f"/debug/scaledobjects/{namespace}/{name}"))


@contextmanager
def scaler_process(binary, tmp_path, env, args=(), extra_env=None):
    """Starts `serve` with `args` (gRPC and HTTP on free loopback ports, an empty hosts file),
    waits for /readyz, yields a Scaler, and on exit checks that SIGTERM stops it with exit 0."""
    hosts_file = str(tmp_path / "hosts")
    with open(hosts_file, "w") as f:
        f.write("# empty\n")
    grpc_addr = f"127.0.0.1:{free_port()}"
    http_addr = f"127.0.0.1:{free_port()}"
    log_path = tmp_path / "scaler.log"
    env = dict(env)
    env["VLLM_KEDA_SCALER_HTTP_ADDR"] = http_addr  # the env form of a flag
    env.setdefault("RUST_LOG", "info")
    env.update(extra_env or {})
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [str(binary), "serve", "--grpc-addr", grpc_addr, "--hosts-file", hosts_file,
         "--shutdown-grace-seconds", "5", "--allow-targets", "127.0.0.0/8", *args],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )
    s = Scaler(proc, grpc_addr, http_addr, hosts_file, log_path)
    deadline = time.monotonic() + 10
    while True:
        try:
            if s.get("/readyz").startswith("ready"):
                break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            log.close()
            pytest.fail(f"scaler did not become ready:\n{s.log()}")
        time.sleep(0.05)
    try:
        yield s
    finally:
        # Graceful shutdown on SIGTERM: exit 0 within the grace period.
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"scaler did not stop within 10 s of SIGTERM:\n{s.log()}")
        log.close()
    assert code == 0, f"scaler exited {code} after SIGTERM:\n{s.log()}"
