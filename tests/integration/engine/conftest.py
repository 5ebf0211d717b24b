"""Engine fixtures: engines on the real tiny checkpoints, closed after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mlxd.backend.speculation.draft_policy import StepCosts
from mlxd.engine import Engine, EngineConfig, ModelInfo

EngineFactory = Callable[..., Engine]


@pytest.fixture
def make_engine() -> Iterator[EngineFactory]:
    """make_engine(**EngineConfig overrides) -> a started Engine, closed at teardown."""
    engines: list[Engine] = []

    def make(**overrides: Any) -> Engine:
        overrides.setdefault("max_batch", 8)
        engine = Engine(EngineConfig.from_settings(**overrides))
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


@pytest.fixture
def chat(make_engine: EngineFactory, tiny_chat_model: Path) -> tuple[Engine, ModelInfo]:
    engine = make_engine()
    return engine, engine.load_model(tiny_chat_model)


@pytest.fixture
def verify_every_draft(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps cost the same at every width, measured: the drafting policy verifies every draft
    (exactness tests exercise the verify step at each step, whatever this machine's costs)."""
    monkeypatch.setattr(StepCosts, "ratio", lambda self, rows, width, kinds="": 1.0)
    monkeypatch.setattr(StepCosts, "needs_plain", lambda self, rows: False)
    monkeypatch.setattr(StepCosts, "look_cost", lambda self, rows: 0.0)
