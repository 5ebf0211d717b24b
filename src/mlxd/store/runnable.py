"""From a model reference to a model the engine may load: resolve, then check.

The one path every front door takes before `Engine.load_model`: `mlxd run`/`chat` (the CLI's
in-process engine), `mlxd serve --model` (the preloaded model) and the server's per-request
models. Both steps run before any engine exists, so a bad model fails fast, without mlx.
"""

from __future__ import annotations

from collections.abc import Callable

from mlxd.errors import MlxdError, ModelNotFound
from mlxd.store.model_ref import ModelRef


def resolve_or_default(ref: str | None, notify: Callable[[str], None] | None = None) -> ModelRef:
    """The ModelRef of `ref`, or of the embedded default model when ref is None (its first use
    imports it into the store; `notify` hears about it first). Raises ModelNotFound,
    AmbiguousModel or InvalidRequest."""
    if ref is None:
        from mlxd.store.default_model import default_model

        return default_model(notify=notify)
    from mlxd.store.resolve import resolve

    return resolve(ref)


def runnable_model(
    ref: str | ModelRef | None,
    *,
    trust_remote_code: bool = False,
    store_only: bool = False,
    notify: Callable[[str], None] | None = None,
) -> ModelRef:
    """Resolve `ref` (a ModelRef is already resolved) and check it can run: the ModelRef to
    hand to `Engine.load_model`. store_only refuses a directory path (names a client sent).
    Raises ModelNotFound, AmbiguousModel, ModelRefused, ModelBroken or InvalidRequest."""
    asked = ref if isinstance(ref, str) else None
    if not isinstance(ref, ModelRef):
        ref = resolve_or_default(ref, notify)
    if store_only and ref.source == "path":  # named as asked: never say where the directory is
        raise ModelNotFound(f"model '{asked or ref.path.name}' is not in the store", param="model")
    from mlxd.store.health import check_runnable

    check_runnable(ref.path, trust_remote_code=trust_remote_code)
    return ref


def runnable_draft(ref: str, *, trust_remote_code: bool = False) -> ModelRef:
    """runnable_model for a draft model (never the default one); its errors say so."""
    try:
        return runnable_model(ref, trust_remote_code=trust_remote_code)
    except MlxdError as exc:
        raise type(exc)(f"draft model: {exc.message}", param="draft_model") from None
