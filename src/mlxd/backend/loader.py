"""Load an MLX checkpoint from a local directory into a `LoadedModel`.

Embedding checkpoints (mlxd.checkpoint.embedding_spec) load through backend.embedding.
Never downloads and never runs code shipped with a model unless `trust_remote_code` is set:
`auto_map` (tokenizer or model code) and `model_file` are refused with `ModelRefused`.
Every other failure becomes a one-line `ModelBroken`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlxd.backend.api import LoadedModel
from mlxd.checkpoint import context_window, embedding_spec, runs_own_network, sampling_defaults
from mlxd.errors import InvalidRequest, ModelBroken, ModelNotFound, ModelRefused, one_line

if TYPE_CHECKING:
    from mlx.nn.layers.base import Module
    from mlx_lm.tokenizer_utils import TokenizerWrapper

    from mlxd.backend.vision import VisionParts

# The context window of a checkpoint whose files do not say.
DEFAULT_CONTEXT_WINDOW = 4096
EMBEDDING_CONTEXT_WINDOW = 512  # an embedding checkpoint's, likewise (BERT's positions)


def load_checkpoint(
    path: Path | str, *, trust_remote_code: bool = False, lazy: bool = False
) -> LoadedModel:
    """Load model + tokenizer from `path` (a local directory) or raise an MlxdError.
    `lazy` leaves the weights unevaluated (to shard them first: backend.distributed)."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise ModelNotFound(f"no model directory at {path}")
    config = _read_json(path / "config.json", required=True)
    if not trust_remote_code:
        _refuse_remote_code(path, config)
    spec = embedding_spec(path, config) if "vision_config" not in config else None
    vision, embedder = None, None
    try:
        if spec is not None:
            from mlxd.backend.embedding import load_embedding

            model, tokenizer, embedder = load_embedding(
                path, config, spec, trust_remote_code=trust_remote_code
            )
        elif "vision_config" in config:
            model, tokenizer, vision = _load_vision(path, config, trust_remote_code)
        else:
            from mlxd.backend.mlx_lm.compat import load

            model, tokenizer = load(path, trust_remote_code=trust_remote_code, lazy=lazy)
    except ModelBroken:
        raise
    except Exception as exc:  # any loader failure is a broken model, said in one line
        raise ModelBroken(f"cannot load {path.name}: {one_line(exc)}") from exc
    return LoadedModel(
        path=path,
        model=model,
        tokenizer=tokenizer,
        config=config,
        context_window=context_window(config, getattr(tokenizer, "model_max_length", None))
        or (EMBEDDING_CONTEXT_WINDOW if embedder is not None else DEFAULT_CONTEXT_WINDOW),
        vocab_size=vocab_size(config, tokenizer),
        generation_defaults=generation_defaults(path),
        eos_token_ids={t for t in tokenizer.eos_token_ids or () if t is not None},
        vision=vision,
        embedder=embedder,
        weight_bytes=_weight_bytes(vision.model if vision is not None else model),
    )


def _weight_bytes(module: Module) -> int:
    """Bytes of every parameter (lazy ones counted by shape, nothing is evaluated)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    params = module.parameters()  # type: ignore[no-untyped-call]
    flat: list[tuple[str, mx.array]] = tree_flatten(params)  # type: ignore[assignment]
    return sum(int(array.nbytes) for _, array in flat)


def load_with_draft(path: Path, draft: Path, *, trust_remote_code: bool = False) -> LoadedModel:
    """The model at `path` with the draft model at `draft` attached. The draft must share the
    target's vocabulary: checked from both tokenizer.json files before any weights load
    (after, from the loaded tokenizers, when a checkpoint has none). Raises InvalidRequest
    naming both models on a mismatch, else what load_checkpoint raises."""
    path, draft = Path(path).expanduser(), Path(draft).expanduser()
    for directory in (path, draft):
        if not directory.is_dir():
            raise ModelNotFound(f"no model directory at {directory}")
        if "vision_config" in _read_json(directory / "config.json", required=True):
            raise InvalidRequest(
                f"{directory.name} is a vision model: a draft model pairs text models",
                param="draft_model",
            )
    fingerprints = _vocab_fingerprint(path), _vocab_fingerprint(draft)
    if None not in fingerprints and fingerprints[0] != fingerprints[1]:
        raise _vocab_mismatch(path, draft, "their tokenizers map tokens to different ids")
    target = load_checkpoint(path, trust_remote_code=trust_remote_code)
    drafter = load_checkpoint(draft, trust_remote_code=trust_remote_code)
    if None in fingerprints and target.tokenizer.get_vocab() != drafter.tokenizer.get_vocab():
        raise _vocab_mismatch(path, draft, "their tokenizers map tokens to different ids")
    known = len(target.tokenizer.get_vocab())
    if min(target.vocab_size, drafter.vocab_size) < known:
        raise _vocab_mismatch(path, draft, "one model's vocab_size is smaller than the tokenizer")
    from mlxd.backend.mlx_lm.verify_step import rows_rewindable, target_rewindable

    if not target_rewindable(target.model):
        raise InvalidRequest(
            f"{path.name} has sliding-window layers or recurrent ones mlxd cannot roll "
            "back: speculation with a draft model cannot rewind it",
            param="draft_model",
        )
    if not rows_rewindable(drafter.model):
        raise InvalidRequest(
            f"{draft.name} has sliding-window or recurrent layers: a draft model needs "
            "plain KV caches",
            param="draft_model",
        )
    return replace(target, draft=drafter)


def _vocab_mismatch(target: Path, draft: Path, why: str) -> InvalidRequest:
    return InvalidRequest(
        f"draft model {draft.name} does not share the vocabulary of {target.name}: {why}",
        param="draft_model",
    )


def _vocab_fingerprint(path: Path) -> str | None:
    """A digest of tokenizer.json's token -> id map and added tokens (None: no such file)."""
    data = _read_json(path / "tokenizer.json", required=False)
    if not data:
        return None
    model = data.get("model") or {}
    added = sorted((t.get("id"), t.get("content")) for t in data.get("added_tokens") or [])
    text = json.dumps([model.get("vocab"), added], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _load_vision(
    path: Path, config: dict[str, Any], trust_remote_code: bool
) -> tuple[Module, TokenizerWrapper, VisionParts]:
    """mlx-vlm's model and processor; mlxd's own tokenizer for the text (as for text models)."""
    from mlxd.backend.mlx_lm.compat import load_tokenizer
    from mlxd.backend.vision import load_vision

    text_model, vision = load_vision(path, trust_remote_code=trust_remote_code)
    eos = config.get("eos_token_id") or (config.get("text_config") or {}).get("eos_token_id")
    tokenizer = load_tokenizer(path, eos, trust_remote_code=trust_remote_code)
    token, vocab = vision.processor.image_token, tokenizer.get_vocab()
    if token not in vocab or vision.processor.image_token_id not in vocab.values():
        raise ModelBroken(f"{path.name}: the tokenizer and the processor disagree on {token!r}")
    return text_model, tokenizer, vision


def vocab_size(config: dict[str, Any], tokenizer: TokenizerWrapper) -> int:
    """The model's vocabulary size from its config (or text_config), else the tokenizer's."""
    size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    return int(size) if size else len(tokenizer.vocab)


def generation_defaults(path: Path) -> dict[str, int | float]:
    """Sampling defaults from the checkpoint's generation_config.json (mlxd.checkpoint)."""
    return sampling_defaults(_read_json(path / "generation_config.json", required=False))


def refuse_remote_code(path: Path) -> None:
    """Raise ModelRefused when the checkpoint at `path` ships code (trust_remote_code off)."""
    _refuse_remote_code(path, _read_json(path / "config.json", required=True))


def _refuse_remote_code(path: Path, config: dict[str, Any]) -> None:
    tok_config = _read_json(path / "tokenizer_config.json", required=False)
    if "model_file" in config:
        raise ModelRefused(f"{path.name} ships model code (model_file); trust_remote_code is off")
    if ("auto_map" in config and not runs_own_network(config)) or "auto_map" in tok_config:
        raise ModelRefused(f"{path.name} ships custom code (auto_map); trust_remote_code is off")


def _read_json(path: Path, *, required: bool) -> dict[str, Any]:
    if not path.exists():
        if required:
            raise ModelBroken(f"{path.parent.name}: missing {path.name}")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelBroken(f"{path.parent.name}: unreadable {path.name}: {one_line(exc)}") from exc
    if not isinstance(data, dict):
        raise ModelBroken(f"{path.parent.name}: {path.name} is not a JSON object")
    return data
