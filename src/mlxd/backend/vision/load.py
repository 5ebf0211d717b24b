"""Loading a vision checkpoint with mlx-vlm: its whole model, its processor, and the language
model the batch runs."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx.nn.layers.base import Module

from mlxd.backend.vision.probe import probe_images
from mlxd.backend.vision.processor import VisionProcessor, placeholder_of
from mlxd.backend.vision.text_model import TextModel
from mlxd.checkpoint import read_json_object, vision_family
from mlxd.errors import ModelBroken

__all__ = ["MROPE_FAMILIES", "VisionParts", "is_vision_config", "load_vision"]

# M-RoPE language models checked to batch (alone == batched == mlx-vlm's own generation).
MROPE_FAMILIES = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"})


def is_vision_config(config: dict[str, Any]) -> bool:
    """A checkpoint mlxd serves through mlx-vlm: its config describes a vision tower."""
    return isinstance(config.get("vision_config"), dict)


@dataclass(frozen=True, slots=True, eq=False)
class VisionParts:
    """What a vision checkpoint adds to a LoadedModel: the whole mlx-vlm model (vision tower,
    projector, language model) and its image processor."""

    model: Module
    processor: VisionProcessor


def load_vision(path: Path, *, trust_remote_code: bool) -> tuple[TextModel, VisionParts]:
    """Load a vision checkpoint's model and processor with mlx-vlm (local files only)."""
    try:
        from mlx_vlm.utils import load_model, load_processor
    except ImportError as exc:
        raise ModelBroken(
            f"{path.name} is a vision model: install mlx-vlm (pip install 'mlxd[vision]')"
        ) from exc
    family = vision_family(read_json_object(path / "config.json"))
    if family is not None and family.refused:
        raise ModelBroken(f"{path.name} ({family.name}) is refused: {family.refused}")
    vlm = load_model(path, lazy=False, trust_remote_code=trust_remote_code)
    text_model = TextModel(vlm)
    _check_positions(path, vlm, text_model)
    processor = load_processor(path, False, trust_remote_code=trust_remote_code)
    token = placeholder_of(processor)
    token_id = getattr(processor, "image_token_id", None)
    if not isinstance(token, str) or not isinstance(token_id, int):
        raise ModelBroken(f"{path.name}: its processor names no image token")
    vlm.eval()
    images = VisionProcessor(processor, token, token_id)
    if family is None or not family.batches:
        probe_images(path, vlm, images)
    return text_model, VisionParts(vlm, images)


def _check_positions(path: Path, vlm: Module, text_model: TextModel) -> None:
    """Refuse a language model whose positions the batch would get wrong: M-RoPE families not
    checked against mlx-vlm's own generation, or other position-id schemes."""
    family = str(getattr(vlm.config, "model_type", ""))
    if text_model.mrope and family not in MROPE_FAMILIES:
        raise ModelBroken(
            f"{path.name}: {family} takes multimodal position ids (M-RoPE); mlxd batches "
            f"{', '.join(sorted(MROPE_FAMILIES))} so far"
        )
    takes = inspect.signature(vlm.language_model.__call__).parameters
    if not text_model.mrope and "position_ids" in takes:
        raise ModelBroken(
            f"{path.name}: its language model needs position ids of its own, which mlxd's "
            f"batch does not carry"
        )
