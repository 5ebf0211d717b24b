"""mlxd's tokenizer load (CheckpointTokenizer, through `tokenizers`) against mlx-lm's own load
(through transformers), on every tiny checkpoint, tokenizer variants and the demo model: ids with
and without special tokens, decoded text, the vocabulary and special tokens, what mlx-lm's
TokenizerWrapper infers (detokenizer, eos ids, think and tool markers, tool parser), mlxd's
format detection and chat prompts, and the text streamed token by token."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from mlx_lm.tokenizer_utils import TokenizerWrapper
from mlx_lm.utils import load_config, load_tokenizer

from mlxd.backend.mlx_lm import compat
from mlxd.backend.tokenizer.checkpoint_tokenizer import (
    CheckpointTokenizer,
    TokenizerLoader,
    tokenizer_route,
)
from mlxd.chat.builder import build_chat_prompt, build_text_prompt
from mlxd.chat.formats import detect_formats
from tests.integration.backend.tokenizer.tokenizer_variants import VARIANTS, make_variant

TEXTS = [
    "",
    "hi",
    "The capital of France is Paris.",
    "  two leading spaces,\n\nblank lines\tand a tab  ",
    "Numbers 0 12 345 6789 and 3.14159",
    "café naïve 日本語 😀 — “quotes” Zebra ZZZ qqq",
    "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
    '<think>plan</think><tool_call>{"name": "f"}</tool_call><|endoftext|>',
    "<s> a ,b </s><unk><image><|extra|><|tool|> <think> x",
    " a ,b",
    "\n",
]
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris? 😀"},
]
WRAPPER_FACTS = (
    "eos_token_ids", "think_start", "think_end", "think_start_tokens", "think_end_tokens",
    "tool_call_start", "tool_call_end", "tool_call_start_tokens", "tool_call_end_tokens",
    "tool_parser", "has_chat_template", "has_thinking", "structural_markers",
    "response_transitions", "response_initial_state", "_chat_template", "_thinking_kwarg",
)  # fmt: skip
TOKENIZER_FACTS = (
    "bos_token", "eos_token", "unk_token", "pad_token", "bos_token_id", "eos_token_id",
    "unk_token_id", "pad_token_id", "chat_template", "model_max_length", "vocab_size",
)  # fmt: skip


def load_both(path: Path) -> tuple[TokenizerWrapper, TokenizerWrapper]:
    """(mlxd's, mlx-lm's through transformers) for the checkpoint at `path`."""
    eos = load_config(path).get("eos_token_id")
    ours = compat.load_tokenizer(path, eos)
    theirs = load_tokenizer(path, eos_token_ids=eos)
    compat.keep_leading_space(theirs)  # mlxd streams the exact text (docs/prefix-cache.md)
    assert tokenizer_route(path).loader is TokenizerLoader.TOKENIZERS
    assert isinstance(ours._tokenizer, CheckpointTokenizer)
    assert type(theirs._tokenizer).__name__ == "TokenizersBackend"
    return ours, theirs


def assert_same_tokenizer(path: Path) -> None:
    ours, theirs = load_both(path)
    assert_same_ids_and_text(ours, theirs)
    assert_same_vocabulary(ours, theirs)
    assert_same_wrapper(ours, theirs)
    assert_same_prompts(ours, theirs)
    assert_same_stream(ours, theirs)


def assert_same_ids_and_text(ours: Any, theirs: Any) -> None:
    for text in TEXTS:
        for special in (True, False):
            ids = theirs.encode(text, add_special_tokens=special)
            assert ours.encode(text, add_special_tokens=special) == ids, (text, special)
            assert ours.decode(ids) == theirs.decode(ids), text
            skip = {"skip_special_tokens": True}
            assert ours.decode(ids, **skip) == theirs.decode(ids, **skip), text


def assert_same_vocabulary(ours: Any, theirs: Any) -> None:
    size = len(theirs)
    assert len(ours) == size and ours.get_vocab() == theirs.get_vocab()
    assert ours.convert_ids_to_tokens(range(size)) == theirs.convert_ids_to_tokens(range(size))
    assert ours.convert_ids_to_tokens(size - 1) == theirs.convert_ids_to_tokens(size - 1)
    added, expected = ours.added_tokens_decoder, theirs.added_tokens_decoder
    assert {i: repr(t) for i, t in added.items()} == {i: repr(t) for i, t in expected.items()}
    assert list(ours.get_added_vocab().items()) == list(theirs.get_added_vocab().items())
    assert ours.backend_tokenizer.to_str() == theirs.backend_tokenizer.to_str()
    for token in [*map(str, expected.values()), "Paris", "no-such-token"]:
        assert ours.convert_tokens_to_ids(token) == theirs.convert_tokens_to_ids(token), token
    assert ours.convert_tokens_to_ids(["a", "b"]) == theirs.convert_tokens_to_ids(["a", "b"])
    for fact in TOKENIZER_FACTS:
        assert getattr(ours, fact) == getattr(theirs, fact), fact
    assert ours.decode(list(range(size))) == theirs.decode(list(range(size)))


def assert_same_wrapper(ours: TokenizerWrapper, theirs: TokenizerWrapper) -> None:
    assert _detokenizer_kind(ours) == _detokenizer_kind(theirs)
    for fact in WRAPPER_FACTS:
        assert getattr(ours, fact) == getattr(theirs, fact), fact
    assert _formats(ours) == _formats(theirs)


def assert_same_prompts(ours: TokenizerWrapper, theirs: TokenizerWrapper) -> None:
    for text in TEXTS:
        if text:
            assert build_text_prompt(ours, text) == build_text_prompt(theirs, text), text
    assert build_chat_prompt(ours, MESSAGES) == build_chat_prompt(theirs, MESSAGES)


def assert_same_stream(ours: TokenizerWrapper, theirs: TokenizerWrapper) -> None:
    """mlx-lm's streaming detokenizer over each sequence: the same segment after every token."""
    rng = random.Random(0)
    size = len(theirs)
    sequences = [theirs.encode(t, add_special_tokens=s) for t in TEXTS for s in (True, False)]
    sequences += [[rng.randrange(size) for _ in range(64)] for _ in range(4)]
    sequences.append(list(range(size)))
    for ids in sequences:
        mine, reference = ours.detokenizer, theirs.detokenizer
        for token in ids:
            mine.add_token(token)
            reference.add_token(token)
            assert mine.last_segment == reference.last_segment, ids
        mine.finalize()
        reference.finalize()
        assert mine.last_segment == reference.last_segment
        assert mine.text == reference.text


def _detokenizer_kind(wrapper: TokenizerWrapper) -> object:
    detok = wrapper._detokenizer
    return type(detok), getattr(detok, "trim_space", None)


def _formats(wrapper: TokenizerWrapper) -> object:
    """mlxd's detected reasoning markers and tool format (its parser compared by name)."""
    found = detect_formats(wrapper)
    tool = found.tool
    shape = None if tool is None else (tool.name, tool.start, tool.end, tool.json_at_start)
    return found.reasoning, found.harmony, shape


@pytest.mark.parametrize(
    "kind", ["chat", "base", "quant", "thinking", "sliding", "hybrid", "gated"]
)
def test_tiny_checkpoints_tokenize_as_mlx_lm_does(kind: str, request: pytest.FixtureRequest):
    assert_same_tokenizer(request.getfixturevalue(f"tiny_{kind}_model"))


def test_small_checkpoint_tokenizes_as_mlx_lm_does(checkpoints_dir: Path) -> None:
    """("big" writes the same tokenizer files as "small" and "chat".)"""
    from tests.checkpoints import make_checkpoint

    assert_same_tokenizer(make_checkpoint(checkpoints_dir / "tiny-small", "small"))


@pytest.mark.parametrize("variant", VARIANTS)
def test_tokenizer_variants_tokenize_as_mlx_lm_does(
    variant: str, tiny_chat_model: Path, tmp_path: Path
) -> None:
    assert_same_tokenizer(make_variant(tiny_chat_model, tmp_path / variant, variant))


def test_variants_cover_what_they_claim(tiny_chat_model: Path, tmp_path: Path) -> None:
    """Each variant changes what a plain tokenizer.json load would give, or the wrapper."""
    from tokenizers import Tokenizer

    wrappers = {v: load_both(make_variant(tiny_chat_model, tmp_path / v, v))[0] for v in VARIANTS}
    for name in ("declared", "legacy"):
        path = tmp_path / name
        plain = Tokenizer.from_file(str(path / "tokenizer.json"))
        assert len(wrappers[name]) > plain.get_vocab_size(), name
    assert isinstance(wrappers["template_files"].chat_template, dict)
    assert wrappers["coder_tools"].tool_parser is not None
    spm = wrappers["spm"]
    assert type(spm._detokenizer).__name__ == "SPMStreamingDetokenizer"
    assert spm.encode("Zebra 😀")[0] == spm.bos_token_id == 1
    assert "<0xE6>" in spm.convert_ids_to_tokens(spm.encode("日"))  # byte fallback


@pytest.mark.demo
def test_demo_model_tokenizes_as_mlx_lm_does(demo_model) -> None:
    assert_same_tokenizer(demo_model.path)
