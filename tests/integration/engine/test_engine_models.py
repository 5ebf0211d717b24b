"""Model loading (errors in one line, refusal of shipped code), the registry, and swaps."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mlxd.engine import EngineConfig
from mlxd.errors import InvalidRequest, ModelBroken, ModelNotFound, ModelRefused
from mlxd.types import FinishReason

from .engine_helpers import random_prompts, request


def test_model_info(make_engine, tiny_chat_model: Path) -> None:
    engine = make_engine()
    info = engine.load_model(tiny_chat_model, name="tiny")
    assert (info.name, info.path, info.context_window) == ("tiny", tiny_chat_model, 2048)
    assert info.eos_token_ids == {info.tokenizer.convert_tokens_to_ids("<|im_end|>")}
    assert info.config["model_type"] == "llama"
    assert info.generation_defaults == {"temperature": 0.0}  # do_sample false: greedy
    assert engine.load_model(tiny_chat_model, name="tiny") is info  # loaded once
    with pytest.raises(InvalidRequest, match="already loaded"):
        engine.load_model(tiny_chat_model.parent / "elsewhere", name="tiny")


def test_generation_defaults_are_read(tmp_path: Path, make_engine, tiny_chat_model) -> None:
    model = tmp_path / "with-defaults"
    shutil.copytree(tiny_chat_model, model)
    (model / "generation_config.json").write_text(
        json.dumps({"temperature": 0.6, "top_p": 0.9, "top_k": 20, "do_sample": True})
    )
    info = make_engine().load_model(model)
    assert info.generation_defaults == {"temperature": 0.6, "top_p": 0.9, "top_k": 20}


@pytest.mark.parametrize(
    ("mutate", "error", "match"),
    [
        (lambda p: shutil.rmtree(p), ModelNotFound, "no model directory"),
        (lambda p: (p / "config.json").unlink(), ModelBroken, "missing config.json"),
        (lambda p: (p / "config.json").write_text("{oops"), ModelBroken, "unreadable"),
        (lambda p: (p / "model.safetensors").unlink(), ModelBroken, "cannot load"),
        (lambda p: (p / "model.safetensors").write_bytes(b"\0" * 64), ModelBroken, "cannot load"),
        (lambda p: _patch(p / "config.json", model_type="nope"), ModelBroken, "cannot load"),
        (
            lambda p: _patch(p / "config.json", auto_map={"AutoModel": "x.Y"}),
            ModelRefused,
            "auto_map",
        ),
        (
            lambda p: _patch(
                p / "tokenizer_config.json", auto_map={"AutoTokenizer": ["x.T", None]}
            ),
            ModelRefused,
            "auto_map",
        ),
        (lambda p: _patch(p / "config.json", model_file="evil.py"), ModelRefused, "model_file"),
    ],
)
def test_bad_models_fail_in_one_line(
    tmp_path, tiny_chat_model, make_engine, mutate, error, match
) -> None:
    model = tmp_path / "m"
    shutil.copytree(tiny_chat_model, model)
    mutate(model)
    engine = make_engine()
    with pytest.raises(error, match=match) as err:
        engine.load_model(model)
    assert "\n" not in str(err.value)
    assert engine.health().ok  # a bad model never hurts the engine


def test_swap_models_drains_in_flight_work(make_engine, tiny_chat_model, tiny_base_model) -> None:
    solo = make_engine()
    chat_info = solo.load_model(tiny_chat_model)
    base_info = solo.load_model(tiny_base_model)
    prompts = random_prompts(3, min(chat_info.vocab_size, base_info.vocab_size), (4, 20), seed=11)
    params = dict(max_tokens=12, ignore_eos=True)
    expected = {
        (m.name, i): solo.submit(request(m, p, **params)).collect()[0]
        for m in (chat_info, base_info)
        for i, p in enumerate(prompts)
    }
    engine = make_engine()
    engine.load_model(tiny_chat_model)
    engine.load_model(tiny_base_model)
    order = [(m, i) for i in range(3) for m in (chat_info, base_info)]  # interleaved
    handles = [(m.name, i, engine.submit(request(m, prompts[i], **params))) for m, i in order]
    for name, i, handle in handles:
        tokens, fin = handle.collect()
        assert fin.reason is FinishReason.LENGTH
        assert tokens == expected[(name, i)]
    assert set(engine.stats().models_loaded) == {chat_info.name, base_info.name}


def test_trust_remote_code_is_off_by_default() -> None:
    assert EngineConfig.from_settings().trust_remote_code is False


def _patch(path: Path, **values: object) -> None:
    data = json.loads(path.read_text())
    data.update(values)
    path.write_text(json.dumps(data))
