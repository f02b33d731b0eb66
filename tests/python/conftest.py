"""Shared pytest fixtures for the Python tests: the built binary, free loopback ports, and
gRPC stubs generated from our own proto (crates/service/proto/externalscaler.proto) with
grpc_tools.

Run after `cargo build` (scripts/test does both)."""

import importlib
import os
import socket
import sys
from pathlib import Path

import pytest

from deploy_support import PROTO_DIR, REPO

BINARY = REPO / "target" / "debug" / "vllm-keda-scaler"


@pytest.fixture(scope="session")
def binary() -> Path:
    """Path of target/debug/vllm-keda-scaler; fails with the fix when it is missing."""
    if not BINARY.exists():
        pytest.fail(f"{BINARY} is missing: run `cargo build` first (scripts/test does)")
    return BINARY


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free on `host` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def stubs(tmp_path_factory):
    """(messages, services) modules generated from proto/externalscaler.proto."""
    from grpc_tools import protoc

    out = tmp_path_factory.mktemp("stubs")
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    rc = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"-I{include}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            str(PROTO_DIR / "externalscaler.proto"),
        ]
    )
    assert rc == 0, f"grpc_tools.protoc failed on {PROTO_DIR / 'externalscaler.proto'} (exit {rc})"
    sys.path.insert(0, str(out))
    try:
        pb2 = importlib.import_module("externalscaler_pb2")
        pb2_grpc = importlib.import_module("externalscaler_pb2_grpc")
    finally:
        sys.path.remove(str(out))
    return pb2, pb2_grpc


@pytest.fixture
def env_without_proxy():
    """The environment for child processes, without proxies that would catch loopback."""
    env = dict(os.environ)
    for key in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        env.pop(key, None)
    env["NO_PROXY"] = "127.0.0.1,localhost"
    return env
