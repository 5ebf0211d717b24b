"""backend.vision.load_vision refuses, before loading any weight, the families whose language
model needs more than input embeddings (checkpoint.VISION_FAMILIES)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxd.backend.vision import load_vision
from mlxd.errors import ModelBroken


@pytest.mark.parametrize(
    ("model_type", "why"),
    [("mllama", "cross-attention"), ("gemma3n", "per-layer inputs")],
)
def test_refused_families_are_named_with_the_reason(
    tmp_path: Path, model_type: str, why: str
) -> None:
    config = {"model_type": model_type, "vision_config": {"hidden_size": 8}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelBroken, match=why) as refused:
        load_vision(tmp_path, trust_remote_code=False)
    assert "is refused" in str(refused.value)
