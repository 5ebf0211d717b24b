"""The tokenizer rebuilt from GGUF metadata tokenizes exactly like the original tokenizer.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer
from mlx_lm.tokenizer_utils import load as load_tokenizer
from tokenizers import Tokenizer, pre_tokenizers

from mlxd.store.gguf.importer import import_gguf
from tests.checkpoints import CHATML_TEMPLATE, SPECIAL_TOKENS
from tests.integration.store.gguf.gguf_builder import GgufFactory

TEXTS = [
    "The capital of France is Paris.",
    "  leading spaces and\ttabs\nnew lines\n\n",
    "Numbers: 0 1 2 3 2024 3.14159",
    "Unicode: café naïve 日本語 😀 — “quotes”",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>x</think>",
    "",
]
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is the capital of France?"},
]


@pytest.fixture(scope="module")
def pair(tiny_gguf: GgufFactory, tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """(original TokenizerWrapper, imported TokenizerWrapper, imported model dir)."""
    store = tmp_path_factory.mktemp("store")
    result = import_gguf(tiny_gguf("Q8_0").path, "tok", store=store)
    return load_tokenizer(tiny_chat_model), load_tokenizer(result.path), result.path


def test_importer_tokenizer_encodes_identically(pair) -> None:
    original, imported, _ = pair
    for text in TEXTS:
        ids = imported.encode(text, add_special_tokens=True)
        assert ids == original.encode(text, add_special_tokens=True), text
        assert imported.decode(ids) == text


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(max_size=60))
def test_importer_tokenizer_roundtrips_any_text(pair, text: str) -> None:
    original, imported, _ = pair
    ids = imported.encode(text, add_special_tokens=False)
    assert ids == original.encode(text, add_special_tokens=False)
    assert imported.decode(ids) == text


def test_importer_tokenizer_specials_and_template(pair) -> None:
    original, imported, path = pair
    for token in SPECIAL_TOKENS:
        assert imported.encode(token, add_special_tokens=False) == [
            original.convert_tokens_to_ids(token)
        ]
    assert imported.eos_token_ids == original.eos_token_ids
    assert imported.eos_token == "<|im_end|>"
    assert imported.chat_template == CHATML_TEMPLATE
    rendered = imported.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert rendered == original.apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=False
    )
    assert isinstance(imported.detokenizer, BPEStreamingDetokenizer)
    config = json.loads((path / "tokenizer_config.json").read_text())
    assert config["eos_token"] == "<|im_end|>" and config["pad_token"] == "<|endoftext|>"


def test_importer_tokenizer_digit_splitting(
    tiny_gguf: GgufFactory, tiny_chat_model: Path, tmp_path: Path
) -> None:
    """pre='smollm' (SmolLM2, StarCoder) splits every digit, as their HF tokenizers do."""
    result = import_gguf(tiny_gguf("F32", pre="smollm").path, "digits", store=tmp_path)
    imported = Tokenizer.from_file(str(result.path / "tokenizer.json"))
    reference = Tokenizer.from_file(str(tiny_chat_model / "tokenizer.json"))
    reference.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    for text in TEXTS:
        assert imported.encode(text).ids == reference.encode(text).ids, text
    pieces = imported.encode("in 2024").tokens
    assert pieces[-4:] == ["2", "0", "2", "4"]


def test_importer_tokenizer_adds_bos_when_gguf_says_so(
    tiny_gguf: GgufFactory, tiny_chat_model: Path, tmp_path: Path
) -> None:
    result = import_gguf(tiny_gguf("F32", add_bos=True).path, "bos", store=tmp_path)
    imported = load_tokenizer(result.path)
    original = load_tokenizer(tiny_chat_model)
    bos = original.convert_tokens_to_ids("<|endoftext|>")
    assert imported.encode("Hello there") == [bos, *original.encode("Hello there")]
    config = json.loads((result.path / "config.json").read_text())
    assert config["bos_token_id"] == bos


def test_importer_tokenizer_llama3_split(tiny_gguf: GgufFactory, tmp_path: Path) -> None:
    """pre='llama-bpe' (Llama 3): numbers in groups of up to 3 digits, space kept apart."""
    result = import_gguf(tiny_gguf("F32", pre="llama-bpe").path, "llama3", store=tmp_path)
    imported = Tokenizer.from_file(str(result.path / "tokenizer.json"))
    pieces = [p for p, _ in imported.pre_tokenizer.pre_tokenize_str("Hello world 12345's")]
    assert pieces == ["Hello", "Ġworld", "Ġ", "123", "45", "'s"]
    assert json.loads(imported.to_str())["model"]["ignore_merges"] is True
