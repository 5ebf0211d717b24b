"""The load check counts the weights and the configured KV budget against free memory."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mlxd.store import limits


@pytest.fixture
def memory(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(limits, "available_memory", lambda: (10_000_000_000, "available memory"))
    monkeypatch.delenv("MLXD_LOAD_MEMORY_FRACTION", raising=False)
    monkeypatch.delenv("MLXD_KV_BUDGET_BYTES", raising=False)
    return monkeypatch


def test_weights_and_kv_budget_must_fit_together(memory: pytest.MonkeyPatch) -> None:
    weights = [SimpleNamespace(data_bytes=6_000_000_000)]
    assert limits.memory_problems(weights) == []  # type: ignore[arg-type]
    memory.setenv("MLXD_KV_BUDGET_BYTES", str(4_000_000_000))
    (problem,) = limits.memory_problems(weights)  # type: ignore[arg-type]
    assert problem.message.startswith(
        "its weights need 6.0 GB and the KV budget (MLXD_KV_BUDGET_BYTES) 4.0 GB of memory, "
        "10.0 GB is available (available memory)"
    )
    memory.setenv("MLXD_KV_BUDGET_BYTES", str(2_000_000_000))
    assert limits.memory_problems(weights) == []  # type: ignore[arg-type]
