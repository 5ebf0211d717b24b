"""SentencePiece GGUF vocabularies (Llama 2 / Mistral style) tokenize exactly like
SentencePiece itself, once rebuilt as a Hugging Face tokenizer."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import sentencepiece as spm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mlx_lm.tokenizer_utils import SPMStreamingDetokenizer
from mlx_lm.tokenizer_utils import load as load_tokenizer

from mlxd.store.gguf.importer import import_gguf
from tests.checkpoints import _CORPUS
from tests.integration.store.gguf.gguf_builder import build_gguf

TEXTS = [
    "The capital of France is Paris.",
    "Hello,  how are you?\n\nFine, 2024 日本語 😀 Ω≈ç√",
    "  leading spaces",
    " x ",
    "unseen words zyxwv qqq",
    "<|im_start|>user\nHi<|im_end|>",
]


@pytest.fixture(scope="module")
def sp_and_imported(tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """A Llama-2-like SentencePiece BPE model (identity normalization, byte fallback, split
    digits), written into a GGUF as llama.cpp would, then imported."""
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_CORPUS.splitlines() * 20),
        model_writer=proto,
        vocab_size=400,
        model_type="bpe",
        byte_fallback=True,
        split_digits=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        character_coverage=1.0,
        user_defined_symbols=["<|im_start|>", "<|im_end|>"],
        minloglevel=2,
    )
    folder = tmp_path_factory.mktemp("spm")
    built = build_gguf(tiny_chat_model, folder / "spm.gguf", "Q8_0", spm_model=proto.getvalue())
    result = import_gguf(built.path, "spm", store=folder / "store")
    sp = spm.SentencePieceProcessor(model_proto=proto.getvalue())
    return sp, load_tokenizer(result.path)


def test_importer_spm_encodes_like_sentencepiece(sp_and_imported) -> None:
    sp, imported = sp_and_imported
    assert isinstance(imported.detokenizer, SPMStreamingDetokenizer)
    for text in TEXTS[:-1]:
        ids = imported.encode(text)
        assert ids == [sp.bos_id(), *sp.encode(text)], text
        assert imported.decode(ids, skip_special_tokens=True) == sp.decode(ids[1:])
    assert imported.eos_token_ids == {sp.eos_id()}


def test_importer_spm_user_defined_tokens(sp_and_imported) -> None:
    sp, imported = sp_and_imported
    ids = imported.encode(TEXTS[-1], add_special_tokens=False)
    assert ids[0] == sp.piece_to_id("<|im_start|>") and sp.piece_to_id("<|im_end|>") in ids


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(st.characters(exclude_categories=("Cs",)), max_size=40))
def test_importer_spm_any_text(sp_and_imported, text: str) -> None:
    sp, imported = sp_and_imported
    if "<|" in text:  # user-defined symbols split differently by design; covered above
        return
    assert imported.encode(text, add_special_tokens=False) == sp.encode(text)
