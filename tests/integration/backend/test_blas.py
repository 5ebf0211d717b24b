"""The fast BLAS: MKL is loaded before mlx on Linux x86_64 and mlx's matmuls really call it."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

FAST_PLATFORM = sys.platform == "linux" and platform.machine() == "x86_64"

# Runs one float32 matmul, then reports the active BLAS and whether MKL's kernels got mapped:
# libmkl_rt only dispatches, the kernels (libmkl_core, libmkl_sequential) load on the first call.
PROBE = """
import json
{pre}
from mlxd.backend import blas
from mlxd.backend.native import prepare_mlx
prepare_mlx()  # what building a backend does first
import mlx.core as mx
a = mx.ones((256, 256))
mx.eval(a @ a)
maps = open("/proc/self/maps").read()
print(json.dumps({{"name": blas.active().name, "detail": blas.active().detail,
                  "kernels": "libmkl_core" in maps}}))
"""


def probe(env: dict[str, str] | None = None, pre: str = "") -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(pre=pre)],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(proc.stdout)


def test_default_blas_is_mkl_where_it_is_installed_and_matmuls_call_it() -> None:
    got = probe({"MLXD_BLAS": "mkl"})
    if FAST_PLATFORM:  # mkl is a dependency there (pyproject environment marker)
        assert got["name"] == "mkl", got
        assert got["kernels"] is True
    else:
        assert got["name"] == "reference"


def test_mlxd_blas_reference_turns_it_off() -> None:
    got = probe({"MLXD_BLAS": "reference"})
    assert got == {"name": "reference", "detail": "MLXD_BLAS=reference", "kernels": False}


def test_mlx_imported_first_is_reported_not_hidden() -> None:
    got = probe({"MLXD_BLAS": "mkl"}, pre="import mlx.core")
    assert got["name"] == "reference"
    assert "before" in str(got["detail"])


@pytest.mark.parametrize("blas_env", ["mkl", "reference"])
def test_version_names_the_active_blas(blas_env: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mlxd.cli.main", "--version"],
        env={**os.environ, "MLXD_BLAS": blas_env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    expected = "mkl" if blas_env == "mkl" and FAST_PLATFORM else "reference"
    assert f"BLAS: {expected}," in proc.stdout
