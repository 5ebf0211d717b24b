"""The server says which CPU BLAS its engine runs on, in /health and /metrics."""

from __future__ import annotations

import platform
import sys

import httpx

from tests.e2e.server.serverproc import ServerProcess

FAST_PLATFORM = sys.platform == "linux" and platform.machine() == "x86_64"


def test_health_and_metrics_name_the_active_blas(server: ServerProcess) -> None:
    expected = "mkl" if FAST_PLATFORM else "reference"
    health = httpx.get(server.url + "/health", timeout=10).json()
    assert health["blas"] == expected
    metrics = httpx.get(server.url + "/metrics", timeout=10).text
    assert f'mlxd_blas_info{{blas="{expected}"}} 1' in metrics
