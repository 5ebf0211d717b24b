"""Rebuild a Hugging Face `tokenizer.json` + `tokenizer_config.json` from GGUF metadata.

Byte-level BPE vocabularies (`tokenizer.ggml.model` = gpt2) get the pre-tokenizer named by
`tokenizer.ggml.pre`, llama.cpp's name for each regex family; SentencePiece ones (llama)
are rebuilt in gguf_spm.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from mlxd.errors import ModelBroken
from mlxd.store.gguf.hparams import LlamaHParams
from mlxd.store.gguf.reader import GgufFile
from mlxd.store.gguf.spm import spm_tokenizer

# llama.cpp token types (gguf.TokenType): which ids become HF added tokens.
_UNKNOWN, _CONTROL, _USER_DEFINED = 2, 3, 4

# The Llama 3 split regex (llama.cpp LLAMA_VOCAB_PRE_TYPE_LLAMA3 == HF's Llama 3 tokenizer.json).
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT2_PRE = {"default", "gpt2"}
_DIGITS_PRE = {"smollm", "starcoder", "refact", "codeshell"}  # each digit alone, then gpt2
_LLAMA3_PRE = {"llama-bpe", "llama3"}


@dataclass(slots=True)
class TokenizerFiles:
    """Contents of the tokenizer files plus special ids for config.json."""

    tokenizer_json: str
    tokenizer_config: dict[str, Any]
    special_ids: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def build_tokenizer(gguf: GgufFile, hp: LlamaHParams) -> TokenizerFiles:
    """Raise ModelBroken for an unsupported or inconsistent GGUF vocabulary."""
    kind = gguf.value("tokenizer.ggml.model", str, "(none)")
    if kind not in ("gpt2", "llama"):
        raise ModelBroken(
            f"unsupported GGUF tokenizer {kind!r}: mlxd rebuilds byte-level BPE (gpt2) "
            "and SentencePiece (llama) vocabularies"
        )
    tokens = _str_list(gguf, "tokenizer.ggml.tokens")
    if not tokens or len(tokens) > hp.vocab_size:
        raise ModelBroken(f"GGUF vocabulary has {len(tokens)} tokens for {hp.vocab_size} rows")
    types = gguf.value("tokenizer.ggml.token_type", list, [1] * len(tokens))
    if len(types) != len(tokens):
        raise ModelBroken("GGUF token_type and tokens lists differ in length")
    warnings: list[str] = []
    special = _special_tokens(gguf, tokens)
    spm = kind == "llama"
    if spm:
        tok = _spm_tokenizer(gguf, tokens, types, special)
    else:
        tok = _bpe_tokenizer(gguf, tokens, warnings)
    # llama.cpp's defaults when the file does not say: SentencePiece vocabularies add a BOS.
    add_bos = gguf.value("tokenizer.ggml.add_bos_token", bool, spm)
    add_eos = gguf.value("tokenizer.ggml.add_eos_token", bool, False)
    tok.add_special_tokens(_added(tokens, types, (_UNKNOWN, _CONTROL), special=True))
    tok.add_tokens(_added(tokens, types, (_USER_DEFINED,), special=False))
    processor = _post_processor(special, tokens, add_bos, add_eos)
    if processor is None and not spm:
        processor = processors.ByteLevel(trim_offsets=False)  # as HF's byte-level tokenizers
    if processor is not None:
        tok.post_processor = processor
    config = _tokenizer_config(gguf, tokens, types, special, hp, add_bos, add_eos)
    return TokenizerFiles(tok.to_str(), config, _special_ids(special), warnings)


def _spm_tokenizer(
    gguf: GgufFile, tokens: list[str], types: list[int], special: dict[str, int]
) -> Tokenizer:
    scores = gguf.value("tokenizer.ggml.scores", list)
    if not all(isinstance(v, int | float) for v in scores):
        raise ModelBroken("GGUF metadata tokenizer.ggml.scores is not a list of numbers")
    unk = tokens[special["unk"]] if "unk" in special else None
    space_prefix = gguf.value("tokenizer.ggml.add_space_prefix", bool, True)
    return spm_tokenizer(tokens, [float(v) for v in scores], types, unk, space_prefix)


def _bpe_tokenizer(gguf: GgufFile, tokens: list[str], warnings: list[str]) -> Tokenizer:
    vocab: dict[str, int] = {}
    for i, token in enumerate(tokens):
        vocab.setdefault(token, i)
    if len(vocab) != len(tokens):
        warnings.append(f"{len(tokens) - len(vocab)} duplicate vocabulary entries kept once")
    merges = [_merge(m) for m in _str_list(gguf, "tokenizer.ggml.merges")]
    pre = gguf.value("tokenizer.ggml.pre", str, "default")
    try:
        model = models.BPE(vocab=vocab, merges=merges, ignore_merges=pre in _LLAMA3_PRE)
    except Exception as e:  # tokenizers raises a bare Exception for bad merges
        raise ModelBroken(f"GGUF BPE vocabulary is inconsistent: {e}") from e
    tok = Tokenizer(model)
    tok.pre_tokenizer = _pre_tokenizer(pre, warnings)
    tok.decoder = decoders.ByteLevel()
    return tok


def _pre_tokenizer(pre: str, warnings: list[str]) -> pre_tokenizers.PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _DIGITS_PRE:
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre in _LLAMA3_PRE:
        split = pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated")
        no_regex = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        return pre_tokenizers.Sequence([split, no_regex])
    if pre not in _GPT2_PRE:
        warnings.append(f"unknown GGUF pre-tokenizer {pre!r}: using GPT-2's split rules")
    return byte_level


def _merge(entry: str) -> tuple[str, str]:
    left, sep, right = entry.partition(" ")
    if not (sep and left and right) or " " in right:
        raise ModelBroken(f"malformed GGUF BPE merge {entry[:40]!r}")
    return left, right


def _str_list(gguf: GgufFile, key: str) -> list[str]:
    values = gguf.value(key, list)
    if not all(isinstance(v, str) for v in values):
        raise ModelBroken(f"GGUF metadata {key} is not a list of strings")
    return values


def _special_tokens(gguf: GgufFile, tokens: list[str]) -> dict[str, int]:
    """role (bos/eos/unk/pad/eot/eom) -> token id, for ids present in the file."""
    out: dict[str, int] = {}
    for role, key in (
        ("bos", "bos_token_id"),
        ("eos", "eos_token_id"),
        ("unk", "unknown_token_id"),
        ("pad", "padding_token_id"),
        ("eot", "eot_token_id"),
        ("eom", "eom_token_id"),
    ):
        token_id = gguf.value(f"tokenizer.ggml.{key}", int, -1)
        if token_id == -1:
            continue
        if not 0 <= token_id < len(tokens):
            raise ModelBroken(f"GGUF {key} {token_id} is outside the vocabulary")
        out[role] = token_id
    return out


def _added(
    tokens: list[str], types: list[int], wanted: tuple[int, ...], *, special: bool
) -> list[AddedToken]:
    return [
        AddedToken(tokens[i], special=special, normalized=False)
        for i, kind in enumerate(types)
        if kind in wanted
    ]


def _post_processor(
    special: dict[str, int], tokens: list[str], add_bos: bool, add_eos: bool
) -> processors.PostProcessor | None:
    """A template adding BOS/EOS as the GGUF asks, or None when it adds neither."""
    pieces = [("bos", add_bos), ("eos", add_eos)]
    if not any(flag and role in special for role, flag in pieces):
        return None
    bos = f"{tokens[special['bos']]} " if add_bos and "bos" in special else ""
    eos = f" {tokens[special['eos']]}" if add_eos and "eos" in special else ""
    used = [(tokens[special[r]], special[r]) for r, flag in pieces if flag and r in special]
    return processors.TemplateProcessing(
        single=f"{bos}$A{eos}", pair=f"{bos}$A{eos} {bos}$B{eos}".strip(), special_tokens=used
    )


def _tokenizer_config(
    gguf: GgufFile,
    tokens: list[str],
    types: list[int],
    special: dict[str, int],
    hp: LlamaHParams,
    add_bos: bool,
    add_eos: bool,
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "clean_up_tokenization_spaces": False,
        "model_max_length": hp.context_length,
        "added_tokens_decoder": {
            str(i): {"content": tokens[i], "special": kind != _USER_DEFINED, "normalized": False}
            for i, kind in enumerate(types)
            if kind in (_UNKNOWN, _CONTROL, _USER_DEFINED)
        },
    }
    for role in ("bos", "eos", "unk", "pad"):
        config[f"{role}_token"] = tokens[special[role]] if role in special else None
    template = _chat_template(gguf)
    if template is not None:
        config["chat_template"] = template
    return config


def _chat_template(gguf: GgufFile) -> str | list[dict[str, str]] | None:
    """The default template, or HF's list form when the file also names extra templates."""
    default = gguf.value("tokenizer.chat_template", str, "") or None
    names = gguf.value("tokenizer.chat_templates", list, [])
    named = [
        {"name": str(n), "template": gguf.value(f"tokenizer.chat_template.{n}", str)}
        for n in names
        if f"tokenizer.chat_template.{n}" in gguf.metadata
    ]
    if not named:
        return default
    return ([{"name": "default", "template": default}] if default else []) + named


def _special_ids(special: dict[str, int]) -> dict[str, Any]:
    """bos/eos/pad ids for config.json; eot/eom join eos so generation stops on them."""
    eos = [special[r] for r in ("eos", "eot", "eom") if r in special]
    eos = list(dict.fromkeys(eos))
    ids: dict[str, Any] = {}
    if "bos" in special:
        ids["bos_token_id"] = special["bos"]
    if eos:
        ids["eos_token_id"] = eos[0] if len(eos) == 1 else eos
    if "pad" in special:
        ids["pad_token_id"] = special["pad"]
    return ids
