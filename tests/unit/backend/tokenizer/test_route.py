"""Which checkpoints load their tokenizer through `tokenizers` and which need transformers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlxd.backend.tokenizer.checkpoint_tokenizer import TokenizerLoader, tokenizer_route

GENERIC = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "</s>"}


def checkpoint(
    tmp_path: Path,
    tokenizer_config: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    files: tuple[str, ...] = ("tokenizer.json",),
) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config or {"model_type": "llama"}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config or GENERIC))
    for name in files:
        (tmp_path / name).write_text(json.dumps({"model": {"type": "BPE"}}))
    return tmp_path


@pytest.mark.parametrize(
    "tokenizer_config",
    [
        GENERIC,
        {**GENERIC, "tokenizer_class": "TokenizersBackend"},
        {**GENERIC, "clean_up_tokenization_spaces": True},  # ignored for BPE by transformers
        {**GENERIC, "bos_token": {"__type": "AddedToken", "content": "<s>"}},
        {**GENERIC, "additional_special_tokens": ["<a>", {"__type": "AddedToken", "content": "b"}]},
        {**GENERIC, "extra_special_tokens": {"image_token": "<image>"}},
        {**GENERIC, "added_tokens_decoder": {"5": {"content": "<x>", "special": True}}},
    ],
)
def test_generic_fast_tokenizers_load_through_tokenizers(
    tmp_path: Path, tokenizer_config: dict[str, Any]
) -> None:
    route = tokenizer_route(checkpoint(tmp_path, tokenizer_config))
    assert route.loader is TokenizerLoader.TOKENIZERS and route.reason is None
    assert route.describe() == "tokenizers"


def test_a_generic_class_declared_in_config_json_counts(tmp_path: Path) -> None:
    path = checkpoint(tmp_path, {"eos_token": "</s>"}, {"model_type": "llama", **GENERIC})
    assert tokenizer_route(path).loader is TokenizerLoader.TOKENIZERS


@pytest.mark.parametrize(
    ("tokenizer_config", "config", "files", "reason"),
    [
        (GENERIC, None, (), "no tokenizer.json"),
        ({**GENERIC, "tokenizer_class": "LlamaTokenizer"}, None, None, "class LlamaTokenizer"),
        ({"eos_token": "</s>"}, None, None, "no tokenizer_class"),
        ({**GENERIC, "auto_map": {"AutoTokenizer": ["a.B", None]}}, None, None, "auto_map"),
        (GENERIC, {"model_type": "qwen2"}, None, "own tokenizer class for qwen2"),
        (GENERIC, None, ("tokenizer.json", "added_tokens.json"), "added_tokens.json"),
        (GENERIC, None, ("tokenizer.json", "special_tokens_map.json"), "special_tokens_map"),
        ({**GENERIC, "fast_tokenizer_files": ["x"]}, None, None, "fast_tokenizer_files"),
        ({**GENERIC, "split_special_tokens": True}, None, None, "split_special_tokens"),
        ({**GENERIC, "bos_token": {"content": "<s>"}}, None, None, "special tokens"),
        ({**GENERIC, "extra_special_tokens": "<a>"}, None, None, "extra_special_tokens"),
        ({**GENERIC, "added_tokens_decoder": {"x": {}}}, None, None, "added_tokens_decoder"),
    ],
)
def test_other_tokenizers_need_transformers(
    tmp_path: Path,
    tokenizer_config: dict[str, Any],
    config: dict[str, Any] | None,
    files: tuple[str, ...] | None,
    reason: str,
) -> None:
    path = checkpoint(
        tmp_path, tokenizer_config, config, ("tokenizer.json",) if files is None else files
    )
    route = tokenizer_route(path)
    assert route.loader is TokenizerLoader.TRANSFORMERS
    assert route.reason is not None and reason in route.reason
    assert route.describe() == f"transformers ({route.reason})"


def test_special_tokens_map_is_read_only_without_added_tokens_decoder(tmp_path: Path) -> None:
    config = {**GENERIC, "added_tokens_decoder": {}}
    path = checkpoint(tmp_path, config, files=("tokenizer.json", "special_tokens_map.json"))
    assert tokenizer_route(path).loader is TokenizerLoader.TOKENIZERS


def test_clean_up_spaces_needs_transformers_for_other_models(tmp_path: Path) -> None:
    path = checkpoint(tmp_path, {**GENERIC, "clean_up_tokenization_spaces": True})
    (path / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece"}}))
    assert tokenizer_route(path).reason == "clean_up_tokenization_spaces"


def test_trust_remote_code_needs_transformers(tmp_path: Path) -> None:
    route = tokenizer_route(checkpoint(tmp_path), trust_remote_code=True)
    assert route.loader is TokenizerLoader.TRANSFORMERS and "trust_remote_code" in str(route.reason)


@pytest.mark.parametrize(
    ("listed", "fast"),
    [({"<x>": 5, "<y>": 6}, True), ({"<x>": 5}, True), ({"<x>": 7}, False), ({"<z>": 9}, False)],
)
def test_added_tokens_json_that_restates_tokenizer_json_stays_fast(
    tmp_path: Path, listed: dict[str, int], fast: bool
) -> None:
    """save_pretrained's added_tokens.json (mlx-community repos ship it) names the tokens
    tokenizer.json adds: transformers adds nothing then; a new token or id needs it."""
    path = checkpoint(tmp_path)
    added = [{"id": 5, "content": "<x>"}, {"id": 6, "content": "<y>"}]
    (path / "tokenizer.json").write_text(
        json.dumps({"version": "1.0", "added_tokens": added, "model": {"type": "BPE"}})
    )
    (path / "added_tokens.json").write_text(json.dumps(listed))
    route = tokenizer_route(path)
    assert (route.loader is TokenizerLoader.TOKENIZERS) is fast, route.reason
