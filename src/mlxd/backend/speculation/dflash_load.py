"""A DFlash block-diffusion drafter attached to its target (`--draft-kind dflash`).

A DFlash drafter (z-lab's checkpoints: a config with `dflash_config`, architecture
`DFlashDraftModel`) is a few non-causal decoder layers over [next token, mask x K], whose
keys and values also hold a projection (`fc`) of the target's hidden states after the layers
`target_layer_ids`; it has no embedding or head of its own (the target's serve). mlx-vlm
0.7.10 ships its MLX model class (speculative/drafters/qwen3_dflash); this module checks a
drafter fits its target from both config.json files, before any weights load, then loads
it through mlx-vlm's loader and binds it to the target's embedding and head.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlxd.errors import InvalidRequest, ModelBroken, one_line

if TYPE_CHECKING:
    from mlx.nn.layers.base import Module

    from mlxd.backend.api import LoadedModel


def is_dflash_drafter(path: Path) -> bool:
    """The checkpoint at `path` is a DFlash drafter (its config says so)."""
    config = _config(path)
    return "dflash_config" in config or "DFlashDraftModel" in (config.get("architectures") or ())


def check_dflash_fit(target: Path, draft: Path) -> None:
    """Raise InvalidRequest (one line, param draft_model) when the drafter at `draft` was not
    made for the target at `target`: hidden size, vocabulary, layer ids, mask token. Reads
    config.json only."""
    from mlx_vlm.speculative.drafters.qwen3_dflash import ModelConfig

    wanted = ModelConfig.from_dict(_config(draft))
    whole = _config(target)
    text = whole.get("text_config") or whole
    layers = int(text.get("num_hidden_layers", 0))
    vocab = int(text.get("vocab_size") or whole.get("vocab_size") or 0)
    problems = []
    if int(text.get("hidden_size", 0)) != wanted.hidden_size:
        problems.append(f"hidden size {wanted.hidden_size}, not {text.get('hidden_size')}")
    if vocab != wanted.vocab_size:
        problems.append(f"vocabulary {wanted.vocab_size}, not {vocab}")
    ids = list(wanted.target_layer_ids)
    if not ids or min(ids) < 0 or max(ids) >= layers:
        problems.append(f"target layers {ids}, of {layers}")
    if not 0 <= wanted.mask_token_id < vocab:
        problems.append(f"mask token {wanted.mask_token_id} outside the vocabulary")
    if wanted.block_size < 2:
        problems.append(f"block size {wanted.block_size}")
    if problems:
        raise InvalidRequest(
            f"DFlash drafter {draft.name} does not fit {target.name}: " + "; ".join(problems),
            param="draft_model",
        )


def with_dflash(loaded: LoadedModel, draft: Path) -> LoadedModel:
    """`loaded` with the DFlash drafter at `draft` (check_dflash_fit passed) attached: loaded
    through mlx-vlm and bound to the target's embedding and head. Raises InvalidRequest when
    the target's cache cannot be rewound after a verify, ModelBroken when the drafter's
    weights do not load."""
    from mlxd.backend.mlx_lm.verify_step import target_rewindable

    if not target_rewindable(loaded.model):
        raise InvalidRequest(
            f"{loaded.path.name} has sliding-window layers or recurrent ones mlxd cannot roll "
            "back: speculation with a DFlash drafter cannot rewind it",
            param="draft_model",
        )
    drafter = _load(draft)
    try:
        drafter.bind(loaded.model)
    except AttributeError as exc:
        raise InvalidRequest(
            f"DFlash drafter {draft.name}: {one_line(exc)}", param="draft_model"
        ) from exc
    return replace(loaded, dflash=drafter)


def _load(draft: Path) -> Module:
    from mlx_vlm.speculative.drafters.qwen3_dflash import DFlashDraftModel
    from mlx_vlm.utils import load_model

    try:
        model = load_model(draft)
    except Exception as exc:  # any loader failure is a broken drafter, said in one line
        raise ModelBroken(f"cannot load DFlash drafter {draft.name}: {one_line(exc)}") from exc
    if not isinstance(model, DFlashDraftModel):
        raise InvalidRequest(
            f"{draft.name} is not a DFlash drafter mlxd runs ({type(model).__name__})",
            param="draft_model",
        )
    return model


def _config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelBroken(f"{path.name}: unreadable config.json: {one_line(exc)}") from exc
    return data if isinstance(data, dict) else {}
