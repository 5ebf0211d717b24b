"""SentencePiece-style vocabularies (`tokenizer.ggml.model` = llama: Llama 2, Mistral,
TinyLlama) -> a `tokenizers` BPE with byte fallback, as Hugging Face's LlamaConverter builds.

GGUF keeps the pieces and their scores but no merges. SentencePiece BPE merges the adjacent
pair whose merged piece scores highest, so the merges are recovered the way HF's
SentencePieceExtractor does: every split of a piece into two pieces, ranked by its score.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, normalizers

from mlxd.errors import ModelBroken

NORMAL = 1  # llama.cpp token type of ordinary pieces (gguf.TokenType.NORMAL)
SPACE = "\u2581"  # SentencePiece's visible space "▁"


def spm_merges(tokens: list[str], scores: list[float], types: list[int]) -> list[tuple[str, str]]:
    """Merges ranked like SentencePiece applies them: by the merged piece's score."""
    vocab = {t: i for i, t in enumerate(tokens) if types[i] == NORMAL}
    merges: list[tuple[str, str]] = []
    for i in sorted(vocab.values(), key=lambda i: -scores[i]):  # stable: ties keep id order
        piece = tokens[i]
        local = [
            (piece[:k], piece[k:])
            for k in range(1, len(piece))
            if piece[:k] in vocab and piece[k:] in vocab
        ]
        merges += sorted(local, key=lambda lr: (vocab[lr[0]], vocab[lr[1]]))
    return merges


def spm_tokenizer(
    tokens: list[str], scores: list[float], types: list[int], unk: str | None, space_prefix: bool
) -> Tokenizer:
    """The tokenizer before special tokens and post-processing are added."""
    if len(scores) != len(tokens):
        raise ModelBroken("GGUF tokenizer scores and tokens lists differ in length")
    vocab: dict[str, int] = {}
    for i, token in enumerate(tokens):
        vocab.setdefault(token, i)
    try:
        model = models.BPE(
            vocab=vocab,
            merges=spm_merges(tokens, scores, types),
            unk_token=unk,
            fuse_unk=True,
            byte_fallback=True,
        )
    except Exception as e:  # tokenizers raises a bare Exception for bad vocabularies
        raise ModelBroken(f"GGUF SentencePiece vocabulary is inconsistent: {e}") from e
    tok = Tokenizer(model)
    steps: list[normalizers.Normalizer] = [normalizers.Replace(" ", SPACE)]
    decode: list[decoders.Decoder] = [
        decoders.Replace(SPACE, " "),
        decoders.ByteFallback(),
        decoders.Fuse(),
    ]
    if space_prefix:  # SentencePiece's add_dummy_prefix: a leading "▁", removed on decode
        steps.insert(0, normalizers.Prepend(SPACE))
        decode.append(decoders.Strip(" ", 1, 0))
    tok.normalizer = normalizers.Sequence(steps)
    tok.decoder = decoders.Sequence(decode)
    return tok
