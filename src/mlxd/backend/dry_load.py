"""Bind a checkpoint's weights to its architecture without reading them.

`health` uses this to find what a load would refuse (a tensor the architecture needs but the
files lack, an unexpected one, a wrong shape, a dtype mlx cannot load) while checking, not
when someone asks the model a question. mlx-lm builds the model with lazy parameters and
mx.load maps the tensors lazily, so no weight data is read. Run it only on models whose
config passed the store's checks (store.limits): building a model loops over its layers.
"""

from __future__ import annotations

from pathlib import Path

from mlxd.errors import one_line

_MAX_CHARS = 300


def weight_mismatch(path: Path) -> str | None:
    """Why mlx-lm would refuse these weights for this architecture, in one line; None if it
    would not."""
    from mlxd.backend.native import prepare_mlx

    prepare_mlx()  # the fast BLAS before mlx, and mlx_lm without transformers
    from mlx_lm.utils import load_model

    from mlxd.backend.mlx_lm.flat_body import embedding_classes
    from mlxd.checkpoint import embedding_spec, read_json_object

    # A decoder embedding checkpoint binds as its loader binds it (flat bodies included).
    spec = embedding_spec(Path(path), read_json_object(Path(path) / "config.json"))
    try:
        if spec is not None and not spec.encoder:
            load_model(Path(path), lazy=True, strict=True, get_model_classes=embedding_classes)
        else:
            load_model(Path(path), lazy=True, strict=True)
    except Exception as exc:  # noqa: BLE001 - any refusal is the answer
        text = one_line(exc, with_type=False, whole=True)
        return text if len(text) <= _MAX_CHARS else text[: _MAX_CHARS - 3] + "..."
    return None
