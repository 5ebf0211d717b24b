"""The real `mlxd convert` / `mlxd quantize`: a Hugging Face-layout checkpoint the test writes
(bf16 shards, an index, "pt" metadata, rotary buffers) into the store, then `mlxd run` on it."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mlxd.backend.hf_convert import RECIPES, ConvertPlan
from mlxd.errors import InvalidRequest, ModelNotFound, ModelRefused
from tests.checkpoints import make_hf_checkpoint
from tests.integration.store.clirun import cli_env, command, mlxd


@pytest.fixture(scope="module")
def hf_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_hf_checkpoint(tmp_path_factory.mktemp("hf") / "Tiny-Llama-HF")


def _greedy(home: Path, model: str) -> str:
    answer = mlxd(home, "run", model, "tell me a story", "--max-tokens", "12", "--json")
    assert answer.code == 0, answer.stderr
    content = answer.json()["content"]
    assert isinstance(content, str) and content
    return content


@pytest.mark.parametrize(
    ("bits", "name"), [("4", "tiny-llama-hf-4bit"), ("8", "tiny-llama-hf-8bit")]
)
def test_convert_quantized_answers(tmp_path: Path, hf_source: Path, bits: str, name: str) -> None:
    result = mlxd(tmp_path, "convert", str(hf_source), "--quantize", bits, "--json")
    assert result.code == 0, result.stderr
    made = result.json()
    assert (made["name"], made["quantize"]) == (name, bits)
    config = json.loads((Path(made["path"]) / "config.json").read_text())
    assert config["quantization"]["bits"] == int(bits)
    assert mlxd(tmp_path, "health", name).code == 0
    listed = {e["id"]: e for e in mlxd(tmp_path, "list", "--json").json()}
    assert listed[name]["quantization"].startswith(f"{bits}-bit")
    _greedy(tmp_path, name)


def test_float_conversion_answers_as_the_source(tmp_path: Path, hf_source: Path) -> None:
    result = mlxd(tmp_path, "convert", str(hf_source), "--name", "floats", "--json")
    assert result.code == 0, result.stderr
    assert _greedy(tmp_path, "floats") == _greedy(tmp_path, str(hf_source))


def test_quantize_is_convert_at_4_bits(tmp_path: Path, hf_source: Path) -> None:
    result = mlxd(tmp_path, "quantize", str(hf_source), "--name", "q", "--json")
    assert result.code == 0, result.stderr
    config = json.loads((Path(result.json()["path"]) / "config.json").read_text())
    assert config["quantization"] == {"group_size": 64, "bits": 4, "mode": "affine"}


def test_mixed_recipe_mixes_bit_widths(tmp_path: Path, hf_source: Path) -> None:
    result = mlxd(tmp_path, "convert", str(hf_source), "-q", "mixed_3_6", "--json")
    assert result.code == 0, result.stderr
    config = json.loads((Path(result.json()["path"]) / "config.json").read_text())
    bits = {v["bits"] for v in config["quantization"].values() if isinstance(v, dict)}
    assert bits == {3, 6}
    listed = {e["id"]: e for e in mlxd(tmp_path, "list", "--json").json()}
    assert listed[result.json()["name"]]["quantization"] == "mixed 3/6-bit g64"


def test_errors_are_one_line_with_exit_codes(tmp_path: Path, hf_source: Path) -> None:
    assert mlxd(tmp_path, "convert", str(hf_source), "--name", "once").code == 0
    again = mlxd(tmp_path, "convert", str(hf_source), "--name", "once", "--json")
    assert again.code == InvalidRequest.exit_code and "--force" in again.error()["message"]
    assert mlxd(tmp_path, "convert", str(hf_source), "--name", "once", "--force").code == 0
    missing = mlxd(tmp_path, "convert", "org/nothing-here", "--json")
    assert missing.code == ModelNotFound.exit_code and missing.error()["code"] == "model_not_found"
    bad_group = mlxd(tmp_path, "convert", str(hf_source), "-q", "mxfp4", "--group-size", "64")
    assert bad_group.code == InvalidRequest.exit_code
    assert bad_group.stderr.count("\n") == 1 and "group size 32" in bad_group.stderr
    assert _entries(tmp_path) == ["once"]


def test_remote_code_is_refused_as_for_loading(tmp_path: Path, hf_source: Path) -> None:
    source = tmp_path / "remote"
    source.mkdir()
    for file in hf_source.iterdir():
        (source / file.name).write_bytes(file.read_bytes())
    config = json.loads((source / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling.Model"}
    (source / "config.json").write_text(json.dumps(config))
    refused = mlxd(tmp_path, "convert", str(source), "--json")
    assert refused.code == ModelRefused.exit_code
    assert "--trust-remote-code" in refused.error()["message"]
    assert _entries(tmp_path) == []


def test_kill_9_mid_convert_leaves_the_store_clean(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    source = make_hf_checkpoint(tmp_path_factory.mktemp("big") / "big", size="big")
    store = tmp_path / "mlxd" / "models"
    proc = subprocess.Popen(
        command("convert", str(source), "--name", "half"), env=cli_env(tmp_path),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_for_weights(store, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert _entries(tmp_path) == [] and list(store.glob(".import-*"))  # only the hidden work dir
    assert mlxd(tmp_path, "list", "--json").json() == []
    again = mlxd(tmp_path, "convert", str(source), "--name", "half")
    assert again.code == 0, again.stderr
    assert sorted(p.name for p in store.iterdir()) == ["half"]  # the dead work dir is gone


def test_recipes_are_mlx_lms() -> None:
    from mlx_lm.convert import QUANT_RECIPES

    assert tuple(QUANT_RECIPES) == RECIPES
    kwargs = ConvertPlan("mixed_4_6").convert_kwargs()
    assert kwargs["quant_predicate"] == "mixed_4_6" and kwargs["q_group_size"] == 64


def _wait_for_weights(store: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until mlx-lm has started writing the new checkpoint (polling: no hook in a child)."""
    while proc.poll() is None:
        if any(p.stat().st_size > 0 for p in store.glob(".import-*/model/*.safetensors")):
            return
        time.sleep(0.01)
    raise AssertionError(f"convert ended before it could be killed: {proc.returncode}")


def _entries(home: Path) -> list[str]:
    store = home / "mlxd" / "models"
    names = [p.name for p in store.iterdir()] if store.exists() else []
    return sorted(n for n in names if not n.startswith("."))


def test_convert_a_cached_repo(tmp_path: Path, hf_source: Path) -> None:
    from tests.integration.store.cachefixture import place_in_cache

    place_in_cache(tmp_path / "hf" / "hub", "org/Tiny-HF", hf_source)
    result = mlxd(tmp_path, "quantize", "org/Tiny-HF", "--json")
    assert result.code == 0, result.stderr
    made = result.json()
    assert (made["name"], made["source"], made["quantize"]) == ("tiny-hf-4bit", "org/Tiny-HF", "4")
    assert not any(p.is_symlink() for p in Path(made["path"]).iterdir())
    _greedy(tmp_path, "tiny-hf-4bit")
