"""Pure functions of the store: reference validation, file rules, headers, facts."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlxd.errors import InvalidRequest, ModelBroken
from mlxd.store import facts
from mlxd.store.files import is_lfs_pointer, wanted
from mlxd.store.hub.download import parse_repo_ref, safe_repo_path
from mlxd.store.safetensors_meta import count_parameters, read_header


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("org/name", ("org/name", None)),
        ("mlx-community/Qwen3-0.6B-4bit@main", ("mlx-community/Qwen3-0.6B-4bit", "main")),
        ("org/name@refs/pr/1", ("org/name", "refs/pr/1")),
        ("gpt2", ("gpt2", None)),
    ],
)
def test_parse_valid_repo_refs(text: str, expected: tuple[str, str | None]) -> None:
    assert parse_repo_ref(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "../x", "org/na..me", "/abs/path", "~/x", "a/b/c", "org/x@", "org/x@../y", "org--x/y",
     "org/x@a b", "org\\x", ".hidden/x", "org/x@/main"],
)  # fmt: skip
def test_parse_invalid_repo_refs(text: str) -> None:
    with pytest.raises(InvalidRequest):
        parse_repo_ref(text)


@given(st.text(max_size=40))
def test_parse_never_escapes(text: str) -> None:
    try:
        repo_id, rev = parse_repo_ref(text)
    except InvalidRequest:
        return
    assert ".." not in repo_id and not repo_id.startswith("/") and repo_id.count("/") <= 1
    assert rev is None or ".." not in rev.split("/")


@pytest.mark.parametrize(
    ("name", "safe"),
    [("config.json", True), ("sub/dir/x.json", True), ("../../evil", False),
     ("/etc/passwd", False), ("a/../../b", False), ("a\\..\\b", False), ("", False)],
)  # fmt: skip
def test_safe_repo_path(name: str, safe: bool) -> None:
    assert safe_repo_path(name) is safe


@pytest.mark.parametrize(
    ("name", "pulled"),
    [("model-00001-of-00002.safetensors", True), ("config.json", True), ("tokenizer.model", True),
     ("merges.txt", True), ("chat_template.jinja", True), ("qwen.tiktoken", True),
     ("modeling_x.py", False), ("pytorch_model.bin", False), ("model.pt", False),
     ("x.ckpt", False), ("README.md", False), ("x.pkl", False)],
)  # fmt: skip
def test_pull_file_rules(name: str, pulled: bool) -> None:
    assert wanted(name) is pulled


def _write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]]) -> None:
    header, offset = {}, 0
    for name, (dtype, shape, nbytes) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def test_header_roundtrip_and_quantized_count(tmp_path: Path) -> None:
    f = tmp_path / "m.safetensors"
    _write_safetensors(f, {
        "q.weight": ("U32", [8, 4], 128),  # 8 x 32 packed 4-bit values
        "q.scales": ("F16", [8, 1], 16),
        "q.biases": ("F16", [8, 1], 16),
        "norm.weight": ("F32", [8], 32),
    })  # fmt: skip
    header = read_header(f)
    assert [t.name for t in header.tensors][0] == "q.weight"
    assert count_parameters([header], {"bits": 4, "group_size": 32}) == 8 * 32 + 8
    mixed = {"bits": 4, "group_size": 32, "q": {"bits": 8, "group_size": 32}}
    assert count_parameters([header], mixed) == 8 * 16 + 8
    # bits unknown: packed words are counted as stored; scales/biases are never parameters
    assert count_parameters([header], None) == 32 + 8


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda b: b[:-1], "truncated"),
        (lambda b: b + b"\0", "trailing"),
        (lambda b: b[:4], "truncated"),
        (lambda b: struct.pack("<Q", 1 << 40) + b[8:], "exceeds"),
        (lambda b: b[:8] + b"{" * (len(b) - 8), "not valid JSON"),
    ],
)
def test_header_detects_damage(tmp_path: Path, mutate, match: str) -> None:
    f = tmp_path / "m.safetensors"
    _write_safetensors(f, {"w": ("F32", [4, 4], 64)})
    f.write_bytes(mutate(f.read_bytes()))
    with pytest.raises(ModelBroken, match=match):
        read_header(f)


def test_header_shape_must_match_span(tmp_path: Path) -> None:
    f = tmp_path / "m.safetensors"
    _write_safetensors(f, {"w": ("F32", [4, 4], 60)})
    with pytest.raises(ModelBroken, match="shape needs 64"):
        read_header(f)


def test_lfs_pointer(tmp_path: Path) -> None:
    pointer = tmp_path / "p"
    pointer.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n")
    real = tmp_path / "r"
    real.write_bytes(b"\0" * 10)
    assert is_lfs_pointer(pointer) and not is_lfs_pointer(real)


@pytest.mark.parametrize(
    ("template", "vocab", "fmt", "markers"),
    [
        ("{{ '<tool_call>' }}<think>", set(), "hermes", ["<think>", "</think>"]),
        ("[TOOL_CALLS] [THINK]", set(), "mistral", ["[THINK]", "[/THINK]"]),
        ("<|start_header_id|>ipython", {"<|python_tag|>"}, "llama3_json", []),
        ("<|channel|>analysis to=functions.x <|call|>", set(), "harmony",
         ["<|channel|>analysis", "<|end|>"]),
        (None, {"<think>"}, None, ["<think>", "</think>"]),
    ],
)  # fmt: skip
def test_template_capabilities(template, vocab, fmt, markers) -> None:
    assert facts.tool_format(template, vocab) == fmt
    assert facts.reasoning_markers(template, vocab) == markers


@pytest.mark.parametrize(
    ("config", "template", "kind"),
    [
        ({"architectures": ["LlamaForCausalLM"]}, True, "chat"),
        ({"architectures": ["LlamaForCausalLM"]}, False, "base"),
        ({"architectures": ["BertModel"], "model_type": "bert"}, False, "embedding"),
        ({"architectures": ["Qwen2VLForConditionalGeneration"], "vision_config": {}}, True,
         "vision"),
    ],
)  # fmt: skip
def test_kind(tmp_path: Path, config: dict, template: bool, kind: str) -> None:
    assert facts.kind(tmp_path, config, template) == kind


def test_quant_label() -> None:
    cfg = {"quantization": {"bits": 8, "group_size": 64}}
    assert facts.quant_label(cfg, "float16") == "8-bit g64"
    assert facts.quant_label({}, "bfloat16") == "bfloat16"
    mixed = {"group_size": 64, "bits": 4, "mode": "affine",
             "model.layers.0.mlp.down_proj": {"group_size": 64, "bits": 6},
             "model.layers.1.mlp.down_proj": {"group_size": 64, "bits": 3}}  # fmt: skip
    assert facts.quant_label({"quantization": mixed}, None) == "mixed 3/6-bit g64"
    mx = {"group_size": 32, "bits": 4, "mode": "mxfp4"}
    assert facts.quant_label({"quantization": mx}, None) == "mxfp4"


def test_disk_space_is_checked_before_download(isolated_home: Path, monkeypatch) -> None:
    import shutil as real_shutil
    from collections import namedtuple

    from mlxd.errors import DownloadError
    from mlxd.store.hub import download

    plan = download.PullPlan("org/big", None, "f" * 40, (("model.safetensors", 10_000),))
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(real_shutil, "disk_usage", lambda p: usage(0, 0, 9_999))
    with pytest.raises(DownloadError, match="not enough disk space"):
        download.check_disk_space(plan)
    monkeypatch.setattr(real_shutil, "disk_usage", lambda p: usage(0, 0, 10_000))
    download.check_disk_space(plan)
