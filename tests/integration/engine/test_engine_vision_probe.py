"""A vision architecture no test has verified (not batching in checkpoint.VISION_FAMILIES) is
probed at load (backend/vision/probe.py): one whose image path works loads and answers, one
whose embeddings step needs more than input embeddings is refused at load, naming why."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd import checkpoint
from mlxd.backend.vision import embeddings
from mlxd.errors import ModelBroken
from tests.integration.engine.conftest import EngineFactory
from tests.integration.engine.test_engine_vision import uncached
from tests.integration.engine.test_engine_vision_families import image_part, run, turn
from tests.vision_families import make_family_checkpoint


def test_an_unverified_family_whose_image_path_works_loads_and_answers(
    make_engine: EngineFactory, tiny_vision_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(checkpoint.VISION_FAMILIES, "llava")
    engine, info = uncached(make_engine, tiny_vision_model)
    _, text, finish = run(engine, info, [turn(image_part(0))])
    assert text and finish.usage.prompt_tokens > 4


def test_an_unverified_family_needing_more_than_embeddings_is_refused_at_load(
    make_engine: EngineFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gemma = make_family_checkpoint("gemma3", tmp_path / "gemma3")
    monkeypatch.delitem(checkpoint.VISION_FAMILIES, "gemma3")
    monkeypatch.setattr(embeddings, "_UNREAD", {})  # as if its 4-D mask were read
    with pytest.raises(ModelBroken, match="has not verified .* attention_mask_4d"):
        make_engine().load_model(gemma)
