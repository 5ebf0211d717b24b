"""The real `mlxd list/show/health/rm` entry points: exit codes, one-line errors, JSON."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from mlxd.errors import InvalidRequest, ModelBroken, ModelNotFound
from tests.integration.store.cachefixture import break_model, place_in_cache, place_in_store
from tests.integration.store.clirun import cli_env, command, mlxd


@pytest.fixture
def home(tmp_path: Path, tiny_chat_model: Path, tiny_quant_model: Path) -> Path:
    cache, store = tmp_path / "hf" / "hub", tmp_path / "mlxd" / "models"
    store.mkdir(parents=True)
    place_in_cache(cache, "org/tiny-chat", tiny_chat_model)
    place_in_cache(cache, "org/tiny-quant", tiny_quant_model)
    break_model(place_in_store(store, "broken", tiny_chat_model), "truncated_shard")
    return tmp_path


def test_list_plain_and_json(home: Path) -> None:
    plain = mlxd(home, "list")
    assert plain.code == 0
    lines = plain.stdout.splitlines()
    assert lines[0].split() == ["NAME", "SIZE", "MODIFIED", "KIND", "QUANT", "CONTEXT", "HEALTH"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {"org/tiny-chat", "org/tiny-quant", "broken"}
    assert rows["broken"].endswith("broken") and rows["org/tiny-chat"].endswith("ok")
    assert "4-bit g32" in rows["org/tiny-quant"]
    data = mlxd(home, "list", "quant", "--json").json()
    assert [(e["id"], e["quantization"], e["kind"]) for e in data] == [
        ("org/tiny-quant", "4-bit g32", "chat")
    ]


def test_list_empty_home(tmp_path: Path) -> None:
    assert mlxd(tmp_path, "list", "--json").json() == []
    assert mlxd(tmp_path, "list").code == 0


def test_show_json_and_text(home: Path) -> None:
    result = mlxd(home, "show", "tiny-chat", "--json", "--config")
    assert result.code == 0, result.stderr
    info = result.json()
    assert info["name"] == "org/tiny-chat" and info["parameters"] > 0
    assert info["tool_format"] == "hermes" and info["reasoning_markers"][0] == "<think>"
    assert info["config"]["model_type"] == "llama" and info["runnable"] is True
    assert info["tokenizer"] == {"loader": "tokenizers", "reason": None}
    text = mlxd(home, "show", "org/tiny-quant", "--files", "--config")
    assert text.code == 0
    assert "4-bit, group 32" in text.stdout and "model.safetensors" in text.stdout
    assert "\ntokenizer       tokenizers\n" in text.stdout
    assert '"quantization"' in text.stdout  # --config prints config.json


def test_show_broken_model_describes_then_fails(home: Path) -> None:
    result = mlxd(home, "show", "broken", "--json")
    assert result.code == ModelBroken.exit_code
    assert result.json()["health"]["status"] == "broken"
    assert "truncated" in result.error()["message"]


@pytest.mark.parametrize(
    ("ref", "code", "error_code"),
    [
        ("org/nothing", ModelNotFound.exit_code, "model_not_found"),
        ("tiny", ModelNotFound.exit_code, "ambiguous_model"),
        ("./no/such/dir", ModelNotFound.exit_code, "model_not_found"),
        ("x@", InvalidRequest.exit_code, "invalid_request"),
    ],
)
def test_show_bad_references(home: Path, ref: str, code: int, error_code: str) -> None:
    result = mlxd(home, "show", ref, "--json")
    assert result.code == code and result.stdout == ""
    assert result.error()["code"] == error_code
    plain = mlxd(home, "show", ref)
    assert plain.stderr.count("\n") == 1 and plain.stderr.startswith("mlxd: error:")


@pytest.mark.parametrize("how", ["malformed_config", "truncated_shard", "lfs_pointer", "auto_map"])
def test_health_of_a_broken_directory(tmp_path: Path, tiny_chat_model: Path, how: str) -> None:
    model = place_in_store(tmp_path, "m", tiny_chat_model)
    break_model(model, how)
    result = mlxd(tmp_path, "health", str(model), "--json")
    assert result.code == ModelBroken.exit_code
    assert json.loads(result.stdout)[0]["status"] in ("broken", "refused")
    assert result.error()["code"] == "model_unusable"


def test_health_all_and_one(home: Path) -> None:
    everything = mlxd(home, "health")
    assert everything.code == ModelBroken.exit_code
    assert "1 of 3" in everything.stderr and everything.stderr.count("\n") == 1
    one = mlxd(home, "health", "org/tiny-chat", "--json")
    assert one.code == 0 and one.json()[0]["status"] == "ok"


def test_rm_refuses_without_yes_when_not_a_terminal(home: Path) -> None:
    result = mlxd(home, "rm", "org/tiny-chat", "--json")
    assert result.code == InvalidRequest.exit_code and "--yes" in result.error()["message"]
    assert (home / "hf" / "hub" / "models--org--tiny-chat").exists()


def test_rm_with_yes(home: Path) -> None:
    result = mlxd(home, "rm", "org/tiny-chat", "--yes", "--json")
    assert result.code == 0 and result.json()["removed"]["name"] == "org/tiny-chat"
    assert not (home / "hf" / "hub" / "models--org--tiny-chat").exists()
    assert mlxd(home, "rm", "broken", "-y").code == 0
    assert [e["id"] for e in mlxd(home, "list", "--json").json()] == ["org/tiny-quant"]


@pytest.mark.parametrize(("answer", "removed"), [("n\n", False), ("y\n", True)])
def test_rm_asks_on_a_terminal(home: Path, answer: str, removed: bool) -> None:
    leader, follower = os.openpty()
    try:
        os.write(leader, answer.encode())
        proc = subprocess.run(command("rm", "org/tiny-quant"), env=cli_env(home), stdin=follower,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    finally:
        os.close(leader)
        os.close(follower)
    assert proc.returncode == (0 if removed else 1)
    assert (home / "hf" / "hub" / "models--org--tiny-quant").exists() is not removed


def test_list_and_show_name_the_vision_family_and_how_it_is_served(
    tmp_path: Path, tiny_vision_model: Path
) -> None:
    from tests.vision_families import make_family_checkpoint

    gemma = make_family_checkpoint("gemma3", tmp_path / "src" / "gemma3")
    store = tmp_path / "mlxd" / "models"
    store.mkdir(parents=True)
    place_in_cache(tmp_path / "hf" / "hub", "org/tiny-gemma3", gemma)
    place_in_store(store, "llava", tiny_vision_model)
    refused = place_in_store(store, "gemma3n", gemma)
    config = json.loads((refused / "config.json").read_text())
    (refused / "config.json").write_text(json.dumps({**config, "model_type": "gemma3n"}))

    rows = {line.split()[0]: line for line in mlxd(tmp_path, "list").stdout.splitlines()[1:]}
    assert "vision (Gemma 3, batches)" in rows["org/tiny-gemma3"]
    assert "vision (LLaVA, batches)" in rows["llava"]
    assert "vision (Gemma 3n, refused)" in rows["gemma3n"]
    listed = {e["id"]: e["vision"] for e in mlxd(tmp_path, "list", "--json").json()}
    assert listed["org/tiny-gemma3"] == {"family": "Gemma 3", "batches": True, "refused": None}
    assert "per-layer inputs" in listed["gemma3n"]["refused"]
    shown = mlxd(tmp_path, "show", "gemma3n")
    assert "\nimages          Gemma 3n: refused: its language model takes per-layer" in shown.stdout
    assert mlxd(tmp_path, "show", "tiny-gemma3", "--json").json()["vision"]["batches"] is True
    assert rows["gemma3n"].endswith("broken") and rows["org/tiny-gemma3"].endswith("ok")
    health = mlxd(tmp_path, "health", "gemma3n")
    assert health.code == ModelBroken.exit_code and "Gemma 3n is not served" in health.stdout
