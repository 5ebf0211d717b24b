"""Write models into an HF hub cache layout (`models--org--name/{blobs,snapshots,refs}`)
and into mlxd's store, and break them in the ways health must detect."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

COMMIT = "a" * 40


def place_in_cache(
    cache: Path, repo_id: str, src: Path, commit: str = COMMIT, ref: str | None = "main"
) -> Path:
    """Copy `src`'s files into the cache as blobs + relative snapshot symlinks, like
    huggingface_hub does; returns the snapshot directory."""
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = folder / "snapshots" / commit
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for file in sorted(Path(src).iterdir()):
        if not file.is_file():
            continue
        data = file.read_bytes()
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / file.name
        link.symlink_to(os.path.relpath(blob, snapshot))
    if ref:
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / ref).write_text(commit)
    return snapshot


def place_in_store(store: Path, name: str, src: Path) -> Path:
    dst = store / name
    shutil.copytree(src, dst)
    return dst


def materialize(path: Path, name: str) -> Path:
    """Replace a snapshot symlink by a private copy so it can be corrupted in place."""
    target = path / name
    data = target.read_bytes()
    target.unlink()
    target.write_bytes(data)
    return target


BREAKAGES = [
    "malformed_config",
    "truncated_shard",
    "lfs_pointer",
    "missing_shard",
    "auto_map",
    "model_file",
    "tokenizer_auto_map",
    "pickle_only",
    "no_tokenizer",
    "bad_model_type",
    "bad_tokenizer_json",
]

# breakage -> (expected health status, expected problem code)
EXPECTED = {
    "malformed_config": ("broken", "bad_json"),
    "truncated_shard": ("broken", "bad_safetensors"),
    "lfs_pointer": ("broken", "lfs_pointer"),
    "missing_shard": ("broken", "missing_shard"),
    "auto_map": ("refused", "auto_map"),
    "model_file": ("refused", "model_file"),
    "tokenizer_auto_map": ("refused", "auto_map"),
    "pickle_only": ("refused", "pickle_only"),
    "no_tokenizer": ("broken", "no_tokenizer"),
    "bad_model_type": ("broken", "unsupported"),
    "bad_tokenizer_json": ("broken", "bad_json"),
}


def break_model(path: Path, how: str) -> None:
    """Corrupt the plain model directory `path` in one specific way."""
    config = path / "config.json"
    if how == "malformed_config":
        config.write_text('{"model_type": "llama", ')
    elif how == "truncated_shard":
        shard = path / "model.safetensors"
        data = shard.read_bytes()
        shard.write_bytes(data[: len(data) - 1000])
    elif how == "lfs_pointer":
        oid = hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()
        (path / "model.safetensors").write_text(
            f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize 421628\n"
        )
    elif how == "missing_shard":
        weight_map = {
            "model.embed_tokens.weight": "model.safetensors",
            "lm_head.weight": "model-00002-of-00002.safetensors",
        }
        index = {"metadata": {}, "weight_map": weight_map}
        (path / "model.safetensors.index.json").write_text(json.dumps(index))
    elif how in ("auto_map", "model_file", "bad_model_type"):
        data = json.loads(config.read_text())
        key, value = {
            "auto_map": ("auto_map", {"AutoModelForCausalLM": "modeling_x.Model"}),
            "model_file": ("model_file", "modeling_x.py"),
            "bad_model_type": ("model_type", "no_such_architecture"),
        }[how]
        data[key] = value
        config.write_text(json.dumps(data))
    elif how == "tokenizer_auto_map":
        tok = path / "tokenizer_config.json"
        data = json.loads(tok.read_text())
        data["auto_map"] = {"AutoTokenizer": ["tokenization_x.Tok", None]}
        tok.write_text(json.dumps(data))
    elif how == "pickle_only":
        (path / "model.safetensors").unlink()
        (path / "pytorch_model.bin").write_bytes(b"\x80\x04pickle")
    elif how == "no_tokenizer":
        (path / "tokenizer.json").unlink()
    elif how == "bad_tokenizer_json":
        (path / "tokenizer.json").write_text("{not json")
    else:
        raise ValueError(how)
