"""The real scaler binary, driven the way KEDA drives it, for test_deploy.py.

Starts `vllm-keda-scaler serve` on loopback beside a vLLM-shaped and a DCGM-shaped HTTP server
(serving the shared fixtures), generates gRPC stubs from the repository's proto with grpcio-tools,
registers ScaledObjects with the deploy examples' own trigger metadata (targets pointed at the
loopback servers), and reads the scaler's /metrics.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import deploy_support as ds


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@contextlib.contextmanager
def fixture_server(body: bytes):
    """An HTTP server on 127.0.0.1 answering GET /metrics with `body`."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server naming
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def generate_stubs(workdir: Path):
    """Python modules generated from proto/externalscaler.proto; returns (pb2, pb2_grpc)."""
    out = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{ds.PROTO_DIR}", f"--python_out={workdir}",
         f"--grpc_python_out={workdir}", str(ds.PROTO_DIR / "externalscaler.proto")],
        capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    sys.path.insert(0, str(workdir))
    try:
        import externalscaler_pb2 as pb2  # type: ignore
        import externalscaler_pb2_grpc as pb2_grpc  # type: ignore
    finally:
        sys.path.remove(str(workdir))
    return pb2, pb2_grpc


class Scaler:
    """A running `serve` process."""

    def __init__(self, binary: Path, workdir: Path):
        self.grpc_port = _free_port()
        self.http_port = _free_port()
        env = dict(os.environ, VLLM_KEDA_SCALER_GRPC_ADDR=f"127.0.0.1:{self.grpc_port}",
                   VLLM_KEDA_SCALER_HTTP_ADDR=f"127.0.0.1:{self.http_port}", RUST_LOG="warn",
                   VLLM_KEDA_SCALER_ALLOW_TARGETS="127.0.0.0/8")
        self.log_path = workdir / "serve.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen([str(binary), "serve"], env=env, stdout=subprocess.DEVNULL,
                                     stderr=self._log)

    def http(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=3) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def wait_ready(self, timeout: float = 30) -> bool:
        """True when /readyz answers 200; False when the process exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if self.http("/readyz")[0] == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("serve did not become ready:\n" + self.log())

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()[-3000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def loopback_metadata(metadata: dict[str, str], vllm_port: int, dcgm_port: int) -> dict[str, str]:
    """An example's trigger metadata with the cluster DNS targets swapped for the loopback
    servers, and a fast scrape interval; every other key as the example writes it."""
    md = {k: v for k, v in metadata.items() if k not in ("service", "port", "dcgmService")}
    md["endpoints"] = f"127.0.0.1:{vllm_port}"
    if "dcgmService" in metadata:
        md["dcgmEndpoints"] = f"127.0.0.1:{dcgm_port}"
    md["scrapeIntervalSeconds"] = "0.2"
    return md


@contextlib.contextmanager
def openai_stream_server(model: str):
    """A loopback HTTP server with vLLM's /health and a streaming /v1/completions (three tokens,
    a usage chunk, [DONE]) for the given model; yields (port, counter dict)."""
    import json

    counts = {"completions": 0, "wrong_model": 0}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802
            if self.path == "/health":
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self.send_error(404)

        def do_POST(self):  # noqa: N802
            length = int(self.headers.get("Content-Length", "0"))
            request = json.loads(self.rfile.read(length) or b"{}")
            if self.path != "/v1/completions" or request.get("model") != model:
                with lock:
                    counts["wrong_model"] += 1
                self.send_error(404)
                return
            chunks = [{"choices": [{"index": 0, "text": t}]} for t in ("a", "b", "c")]
            chunks.append({"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": 3,
                                                      "total_tokens": 11}})
            body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            data = body.encode()
            with lock:  # counted before the answer leaves, so a caller never sees it uncounted
                counts["completions"] += 1
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], counts
    finally:
        server.shutdown()
        server.server_close()
