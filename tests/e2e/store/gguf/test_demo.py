"""The real SmolLM2-135M-Instruct GGUF, imported through `mlxd import` (the demo_model fixture)."""

from __future__ import annotations

import json

import pytest

from mlxd import config
from mlxd.store.default_model import default_model

pytestmark = pytest.mark.demo


def test_importer_demo_config_facts(demo_model) -> None:
    cfg = json.loads((demo_model.path / "config.json").read_text())
    facts = {
        "model_type": "llama",
        "num_hidden_layers": 30,
        "hidden_size": 576,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "vocab_size": 49152,
        "rope_theta": 100000.0,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": True,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    assert {k: cfg[k] for k in facts} == facts
    assert demo_model.report["parameters"] == 134_515_008  # SmolLM2-135M
    tok_config = json.loads((demo_model.path / "tokenizer_config.json").read_text())
    assert tok_config["eos_token"] == "<|im_end|>"
    assert "<|im_start|>" in tok_config["chat_template"]


def test_importer_demo_answers_paris(demo_model) -> None:
    from mlx_lm import generate, load

    model, tokenizer = load(str(demo_model.path))
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt.endswith("<|im_start|>assistant\n")
    answer = generate(model, tokenizer, prompt, max_tokens=12)  # greedy by default
    assert "Paris" in answer
    assert [tokenizer.decode([t]) for t in tokenizer.encode("2024")] == ["2", "0", "2", "4"]


def test_importer_demo_is_the_default_model(demo_model, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLXD_HOME", str(demo_model.home))
    weights = (demo_model.path / "model.safetensors").stat().st_mtime_ns
    notes: list[str] = []
    ref = default_model(notes.append)
    assert ref.path == demo_model.path and ref.name == config.DEFAULT_MODEL_NAME
    assert notes == []  # already imported: reused, not imported again
    assert (demo_model.path / "model.safetensors").stat().st_mtime_ns == weights
