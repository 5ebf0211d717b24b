"""mlxd.checkpoint: the context-window and generation-default rules, and the layers that
apply them (the store's listing, the backend's loader, the option table) agreeing."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlxd.backend import loader
from mlxd.backend.mlx_lm import compat as mlx_lm_compat
from mlxd.chat.options import ChatOptions, sampling_params
from mlxd.checkpoint import GENERATION_KEYS, context_window, sampling_defaults, vision_family
from mlxd.config import SAMPLING_DEFAULTS
from mlxd.store.catalog import entry

# (config.json, tokenizer model_max_length, expected window)
WINDOWS = [
    ({"max_position_embeddings": 4096, "n_ctx": 2048}, None, 4096),
    ({"n_positions": 1024, "max_sequence_length": 2048}, None, 2048),  # key order
    ({"n_ctx": 2048, "text_config": {"max_position_embeddings": 8192}}, None, 2048),
    ({"text_config": {"max_position_embeddings": 8192}}, 512, 8192),
    ({"max_position_embeddings": 0, "seq_length": True}, 1024, 1024),  # not positive ints
    ({}, 10**30, None),  # transformers' "no limit"
    ({}, None, None),
]


@pytest.mark.parametrize(("config", "limit", "window"), WINDOWS)
def test_context_window_rule(config: dict, limit: int | None, window: int | None) -> None:
    assert context_window(config, limit) == window


@pytest.mark.parametrize(("config", "limit", "window"), WINDOWS)
def test_store_and_loader_read_the_same_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict, limit: int | None, window: int
) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 8, **config}))
    if limit is not None:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": limit}))
    tokenizer = SimpleNamespace(model_max_length=limit, eos_token_ids=[0])
    import mlx.nn as nn

    monkeypatch.setattr(mlx_lm_compat, "load", lambda path, **_: (nn.Module(), tokenizer))
    loaded = loader.load_checkpoint(tmp_path)
    assert entry(tmp_path, "m", "path", None).context_window == window
    assert loaded.context_window == (window or loader.DEFAULT_CONTEXT_WINDOW)


def test_generation_defaults_rule() -> None:
    assert set(GENERATION_KEYS) <= set(SAMPLING_DEFAULTS)
    gen = {"temperature": 0.6, "top_k": 20, "repetition_penalty": 1.1, "seed": 3, "top_p": "x"}
    assert sampling_defaults(gen) == {"temperature": 0.6, "top_k": 20, "repetition_penalty": 1.1}
    greedy = sampling_defaults({**gen, "do_sample": False})
    assert greedy == {"temperature": 0.0, "repetition_penalty": 1.1}
    assert sampling_defaults({"temperature": True}) == {}


def test_loader_and_options_apply_the_same_defaults(tmp_path: Path) -> None:
    gen = {"temperature": 0.7, "top_p": 0.8, "do_sample": False, "repetition_penalty": 1.2}
    (tmp_path / "generation_config.json").write_text(json.dumps(gen))
    from_loader = sampling_params(ChatOptions(), loader.generation_defaults(tmp_path))
    assert from_loader == sampling_params(ChatOptions(), gen)  # the raw file reads the same
    assert (from_loader.temperature, from_loader.top_p) == (0.0, 1.0)
    assert from_loader.repetition_penalty == 1.2


def test_vision_family_names_batching_and_refusals() -> None:
    tower = {"vision_config": {"hidden_size": 8}}
    assert vision_family({"model_type": "llama"}) is None
    gemma = vision_family({"model_type": "gemma3", **tower})
    assert gemma is not None and gemma.batches and gemma.serving == "batched with text"
    mllama = vision_family({"model_type": "mllama", **tower})
    assert mllama is not None and mllama.serving.startswith("refused: ")
    assert "cross-attention" in mllama.serving
    other = vision_family({"model_type": "newvlm", **tower})
    assert other is not None and (other.name, other.serving) == ("newvlm", "not verified")
