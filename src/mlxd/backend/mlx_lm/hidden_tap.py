"""The target's pre-norm hidden states, read from its forward (speculation's MTP head).

mlx-lm's models return logits only; the hidden state before the final norm is the input of
`model.model.norm` (llama, qwen3_next, deepseek_v3, ...; `language_model.model.norm` for
Qwen3.5's wrapper). The tap swaps that module's class for a subclass that keeps its last
input; nothing else changes (the norm computes as before).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import mlx.core as mx
    from mlx.nn.layers.base import Module


class HiddenTap:
    """The last input of a model's final norm (batch x positions x hidden); while `seen` is
    a list, every input is appended to it too (a prefill chunk may run several forwards)."""

    def __init__(self) -> None:
        self.last: mx.array | None = None
        self.seen: list[mx.array] | None = None

    @classmethod
    def on(cls, model: Module) -> HiddenTap | None:
        """A tap on `model`'s final norm; None when it has none where mlx-lm puts it."""
        norm = _final_norm(model)
        if norm is None:
            return None
        existing = getattr(type(norm), "_mlxd_hidden_tap", None)
        if isinstance(existing, HiddenTap):
            return existing  # tapped already (a runner built for this model before)
        tap = cls()
        base = type(norm)

        def __call__(self: Any, x: mx.array, *args: Any, **kwargs: Any) -> Any:
            tap.last = x
            if tap.seen is not None:
                tap.seen.append(x)
            return base.__call__(self, x, *args, **kwargs)

        attrs = {"__call__": __call__, "_mlxd_hidden_tap": tap}
        norm.__class__ = type(f"Tapped{base.__name__}", (base,), attrs)
        return tap


def _final_norm(model: Module) -> Module | None:
    inner = getattr(model, "model", None)
    if inner is None:
        language = getattr(model, "language_model", None)
        inner = getattr(language, "model", None)
    norm = getattr(inner, "norm", None) if inner is not None else None
    return norm if callable(norm) else None
