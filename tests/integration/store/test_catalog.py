"""list_models, describe and removal on real tiny checkpoints in a real cache layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.errors import InvalidRequest, ModelNotFound
from mlxd.store.catalog import list_models
from mlxd.store.inspect import describe
from mlxd.store.remove import execute, plan_removal
from mlxd.store.resolve import resolve
from tests.integration.store.cachefixture import break_model, place_in_cache, place_in_store

OTHER = "c" * 40


@pytest.fixture
def populated(
    hub_cache: Path, store: Path, tiny_chat_model: Path, tiny_base_model: Path,
    tiny_quant_model: Path, tmp_path: Path,
) -> Path:  # fmt: skip
    place_in_cache(hub_cache, "org/chat", tiny_chat_model)
    place_in_cache(hub_cache, "org/quant", tiny_quant_model)
    place_in_store(store, "base-local", tiny_base_model)
    broken = place_in_store(store, "broken-one", tiny_chat_model)
    break_model(broken, "malformed_config")
    refused = place_in_store(store, "refused-one", tiny_chat_model)
    break_model(refused, "auto_map")
    # A pull interrupted before any file landed: a repo folder with only a partial blob.
    (hub_cache / "models--org--interrupted" / "blobs").mkdir(parents=True)
    (hub_cache / "models--org--interrupted" / "blobs" / "ab.cd.incomplete").write_bytes(b"x")
    return hub_cache


def test_list_shows_everything_and_marks_bad_entries(populated: Path) -> None:
    entries = {e.id: e for e in list_models()}
    assert set(entries) == {"org/chat", "org/quant", "org/interrupted", "base-local",
                            "broken-one", "refused-one"}  # fmt: skip
    chat, quant, base = entries["org/chat"], entries["org/quant"], entries["base-local"]
    assert (chat.kind, chat.quantization, chat.context_window, chat.status) == (
        "chat", "float32", 2048, "ok")  # fmt: skip
    assert quant.quantization == "4-bit g32" and quant.kind == "chat"
    assert base.kind == "base" and base.source == "store"
    assert chat.size == sum(p.stat().st_size for p in chat.path.iterdir())
    assert chat.created > 0 and chat.path.is_dir()
    assert entries["broken-one"].status == "broken"
    assert entries["refused-one"].status == "refused"
    assert entries["org/interrupted"].status == "incomplete"


def test_list_pattern(populated: Path) -> None:
    assert [e.id for e in list_models("ORG/Q")] == ["org/quant"]
    assert {e.id for e in list_models("*-one")} == {"broken-one", "refused-one"}
    assert list_models("nothing-matches") == []


def test_list_survives_an_unscannable_cache(hub_cache: Path) -> None:
    (hub_cache / "models--junk").write_text("a file where a folder should be")
    (hub_cache / "models--org--nosnap").mkdir()
    entries = {e.id: e for e in list_models()}
    assert entries["org/nosnap"].status == "broken"


def test_describe_chat_model(populated: Path, tiny_chat_model: Path) -> None:
    info = describe("org/chat")
    assert info.architecture == "LlamaForCausalLM" and info.model_type == "llama"
    assert info.parameters == _param_count(tiny_chat_model)
    assert info.dtype == "float32" and info.quantization is None
    assert info.context_window == 2048
    assert info.chat_template and info.kind == "chat"
    assert info.reasoning_markers == ["<think>", "</think>"]
    assert info.tool_format == "hermes"
    assert info.eos_tokens == ["<|im_end|>"]
    assert {n for n, _ in info.files} >= {"config.json", "model.safetensors", "tokenizer.json"}
    assert info.runnable and info.not_runnable_reason is None
    data = info.to_dict(with_config=True)
    assert data["config"]["model_type"] == "llama" and data["health"]["status"] == "ok"


def test_describe_quantized_counts_unpacked_parameters(populated: Path) -> None:
    info = describe("org/quant")
    assert info.quantization == {"bits": 4, "group_size": 32, "mode": "affine"}
    assert info.parameters == describe("org/chat").parameters


def test_describe_base_and_refused(populated: Path) -> None:
    base = describe("base-local")
    assert not base.chat_template and base.kind == "base" and base.eos_tokens == ["<|endoftext|>"]
    refused = describe("refused-one")
    assert not refused.runnable and "auto_map" in (refused.not_runnable_reason or "")


def test_remove_whole_repo_keeps_others(populated: Path) -> None:
    plan = plan_removal("org/chat")
    assert plan.revision is None and plan.size > 0
    execute(plan)
    assert not (populated / "models--org--chat").exists()
    assert not (populated / ".locks" / "models--org--chat").exists()
    assert not [p for p in populated.iterdir() if p.name.startswith(".mlxd-trash")]
    assert {e.id for e in list_models("org/")} == {"org/quant", "org/interrupted"}
    with pytest.raises(ModelNotFound):
        resolve("org/chat")


def test_remove_one_revision_keeps_shared_blobs(populated: Path, tiny_base_model: Path) -> None:
    place_in_cache(populated, "org/chat", tiny_base_model, OTHER, "v2")
    plan = plan_removal(f"org/chat@{OTHER}")
    assert plan.revision == OTHER
    execute(plan)
    assert resolve("org/chat").revision == "a" * 40  # main survives, with its files intact
    assert describe("org/chat").health.ok
    assert not (populated / "models--org--chat" / "refs" / "v2").exists()
    with pytest.raises(ModelNotFound):
        resolve("org/chat@v2")


def test_remove_store_entry_and_interrupted_repo(populated: Path, store: Path) -> None:
    execute(plan_removal("broken-one"))
    assert not (store / "broken-one").exists()
    execute(plan_removal("org/interrupted"))
    assert not (populated / "models--org--interrupted").exists()


def test_remove_refuses_plain_directories(populated: Path, tiny_chat_model: Path) -> None:
    with pytest.raises(InvalidRequest, match="delete it yourself"):
        plan_removal(str(tiny_chat_model))
    assert tiny_chat_model.exists()


def test_remove_unknown(populated: Path) -> None:
    with pytest.raises(ModelNotFound):
        plan_removal("org/nothing")


def _param_count(path: Path) -> int:
    import mlx.core as mx

    return sum(v.size for v in mx.load(str(path / "model.safetensors")).values())
