"""The prefix cache's disk tier: snapshots written as files survive an engine restart; a
corrupt, foreign or unknown file is never loaded (a corrupt one it wrote is removed, one it did
not write is left alone); the directory stays within its byte budget. Real forward passes on
the hybrid (recurrent) checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from mlxd.backend.prefix import disk_tier as prefix_disk
from mlxd.backend.prefix.disk_tier import fingerprint
from mlxd.chat.session import start_chat
from mlxd.engine import Engine, ModelInfo
from mlxd.types import FinishEvent, TextDelta, Usage
from tests.chat_requests import chat_request
from tests.checkpoints import make_checkpoint
from tests.integration.engine.conftest import EngineFactory

SYSTEM = "You are a helpful assistant. The quick brown fox jumps over the lazy dog, 0 1 2 3."
USERS = ["Hello, how are you today?", "What is the weather like in Paris?", "Numbers: 4 5 6"]


def ask(engine: Engine, info: ModelInfo, messages: list[dict[str, Any]]) -> tuple[str, Usage]:
    content, usage = "", Usage()
    stream = start_chat(engine, info, chat_request(messages, {"max_tokens": 8, "temperature": 0.0}))
    for event in stream:
        if isinstance(event, TextDelta):
            content += event.text
        elif isinstance(event, FinishEvent):
            usage = event.usage
    return content, usage


def turns(engine: Engine, info: ModelInfo, users: list[str]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for user in users:
        messages.append({"role": "user", "content": user})
        content, _ = ask(engine, info, messages)
        messages.append({"role": "assistant", "content": content})
    return messages


def files(root: Path) -> list[Path]:
    return sorted(root.glob("*/*.safetensors"))


def test_snapshots_survive_a_restart(
    make_engine: EngineFactory, tiny_hybrid_model: Path, tmp_path: Path
) -> None:
    first = make_engine(prefix_cache_dir=str(tmp_path))
    history = turns(first, first.load_model(tiny_hybrid_model), USERS[:2])
    first.close()
    assert files(tmp_path)  # this conversation's latest turn, and the system prompt

    again = make_engine(prefix_cache_dir=str(tmp_path))
    info = again.load_model(tiny_hybrid_model)
    messages = [*history, {"role": "user", "content": USERS[2]}]
    content, usage = ask(again, info, messages)
    cold = make_engine(prefix_cache_bytes=0)
    cold_content, cold_usage = ask(cold, cold.load_model(tiny_hybrid_model), messages)
    assert content == cold_content
    previous = ask(cold, cold.load_model(tiny_hybrid_model), history[:-1])[1].prompt_tokens
    assert usage.cached_tokens >= previous - 1 and cold_usage.cached_tokens == 0


def test_a_corrupt_or_foreign_file_is_never_loaded(
    make_engine: EngineFactory,
    tiny_hybrid_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / "cache"
    first = make_engine(prefix_cache_dir=str(root))
    history = turns(first, first.load_model(tiny_hybrid_model), USERS[:2])
    first.close()
    written = files(root)
    for path in written:  # same name, one byte changed: its digest no longer matches
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
    other = make_checkpoint(tmp_path / "other", "hybrid", seed=5)
    foreign_dir = root / fingerprint(other)
    foreign_dir.mkdir()
    shutil.copy(written[0], foreign_dir / written[0].name)  # a file of another model
    (root / fingerprint(tiny_hybrid_model) / ("0" * 64 + ".safetensors")).write_bytes(b"junk")

    loads: list[bytes] = []
    parse = prefix_disk.read_snapshot

    def watch(data: bytes, *args: Any, **kwargs: Any) -> Any:
        loads.append(data)
        return parse(data, *args, **kwargs)

    monkeypatch.setattr(prefix_disk, "read_snapshot", watch)
    engine = make_engine(prefix_cache_dir=str(root))
    info = engine.load_model(tiny_hybrid_model)
    content, usage = ask(engine, info, [*history, {"role": "user", "content": USERS[2]}])
    ask(engine, engine.load_model(other), history[:-1])
    assert usage.cached_tokens == 0  # nothing usable survived
    assert loads == []  # none was parsed
    # The corrupt files this prompt could use were checked and deleted (an answer the next
    # prompt does not repeat is never a candidate: it stays until the budget removes it).
    assert sum(path.exists() for path in written) < len(written)
    # The tier did not write the foreign one: it is neither loaded nor deleted.
    assert (foreign_dir / written[0].name).exists()
    cold = make_engine(prefix_cache_bytes=0)
    expected = ask(cold, cold.load_model(tiny_hybrid_model), [*history,
                   {"role": "user", "content": USERS[2]}])[0]  # fmt: skip
    assert content == expected


def test_the_directory_stays_within_its_budget(
    make_engine: EngineFactory, tiny_hybrid_model: Path, tmp_path: Path
) -> None:
    probe = make_engine(prefix_cache_dir=str(tmp_path / "probe"))
    turns(probe, probe.load_model(tiny_hybrid_model), USERS[:1])
    one = sum(p.stat().st_size for p in files(tmp_path / "probe"))
    budget = 2 * one
    engine = make_engine(prefix_cache_dir=str(tmp_path / "cache"), prefix_cache_disk_bytes=budget)
    info = engine.load_model(tiny_hybrid_model)
    for i in range(4):
        turns(engine, info, [f"Conversation {i}. {USERS[i % 3]}"])
        assert sum(p.stat().st_size for p in files(tmp_path / "cache")) <= budget
    assert files(tmp_path / "cache")


@pytest.mark.parametrize("key_bits", [0, 16], ids=["8", "k16v8"])
def test_quantized_snapshots_survive_a_restart(
    make_engine: EngineFactory, checkpoints_dir: Path, tmp_path: Path, key_bits: int
) -> None:
    """--kv-bits 8 (keys at 8 bits, or 16-bit levels with --kv-key-bits 16): the files hold the
    quantized cache, a restarted engine under the same setting answers from them as a cold
    one does, and one under the other key setting never uses them."""
    model = checkpoints_dir / "kv-chat"
    if not model.exists():
        make_checkpoint(model, "chat", size="medium")  # head dimension 64
    kv = dict(kv_bits=8, kv_key_bits=key_bits)
    first = make_engine(prefix_cache_dir=str(tmp_path), **kv)
    history = turns(first, first.load_model(model), USERS[:2])
    first.close()
    assert files(tmp_path)

    messages = [*history, {"role": "user", "content": USERS[2]}]
    again = make_engine(prefix_cache_dir=str(tmp_path), **kv)
    content, usage = ask(again, again.load_model(model), messages)
    again.close()
    cold = make_engine(prefix_cache_bytes=0, **kv)
    cold_content, _ = ask(cold, cold.load_model(model), messages)
    assert content == cold_content and usage.cached_tokens > 0

    other = make_engine(prefix_cache_dir=str(tmp_path), kv_bits=8, kv_key_bits=16 - key_bits)
    assert ask(other, other.load_model(model), messages)[1].cached_tokens == 0
