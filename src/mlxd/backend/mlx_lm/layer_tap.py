"""The target's hidden states after some of its decoder layers (speculation's DFlash drafter).

A DFlash drafter is conditioned on the outputs of a few of the target's decoder layers (its
config's `target_layer_ids`: layer i's output, 0-based, as mlx-vlm captures them). mlx-lm's
models return logits only, so the tap swaps the class of each of those layer modules
(`model.model.layers[i]`; `language_model.model.layers[i]` for a wrapper) for a subclass
that keeps its last output; the layer computes as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mlx.core as mx

if TYPE_CHECKING:
    from mlx.nn.layers.base import Module


class LayerTap:
    """The outputs of some decoder layers of one model (each batch x positions x hidden): the
    last forward's, and every forward's since the last `take_seen` (a prefill may run many)."""

    def __init__(self, ids: tuple[int, ...]) -> None:
        self.ids = ids
        self.last: dict[int, mx.array] = {}
        self.seen: dict[int, list[mx.array]] = {i: [] for i in ids}

    @classmethod
    def on(cls, model: Module, ids: list[int]) -> LayerTap | None:
        """A tap on `model`'s decoder layers `ids`; None when it has no layer list where
        mlx-lm puts it or fewer layers than the ids name."""
        layers = decoder_layers(model)
        if layers is None or not ids or max(ids) >= len(layers) or min(ids) < 0:
            return None
        existing = getattr(type(layers[ids[0]]), "_mlxd_layer_tap", None)
        if isinstance(existing, LayerTap) and existing.ids == tuple(ids):
            return existing  # tapped already (a runner built for this model before)
        tap = cls(tuple(ids))
        for index in ids:
            _swap(layers[index], tap, index)
        return tap

    def outputs(self) -> tuple[mx.array, ...] | None:
        """The tapped layers' last outputs, in the order of `ids` (no array op); None before
        a forward."""
        last = self.last
        if any(i not in last for i in self.ids):
            return None
        return tuple(last[i] for i in self.ids)

    def forget_seen(self) -> None:
        """Drop the outputs kept since the last `take_seen` unread."""
        for outputs in self.seen.values():
            outputs.clear()

    def take_seen(self) -> list[mx.array]:
        """Each forward's tapped outputs since the last call, side by side (batch x positions
        x n * hidden); then forgets them (the reader calls it after every forward, so nothing
        piles up)."""
        per_layer = [self.seen[i] for i in self.ids]
        forwards = min(len(outputs) for outputs in per_layer)
        taken = [mx.concatenate([o[j] for o in per_layer], axis=-1) for j in range(forwards)]
        for outputs in per_layer:
            outputs.clear()
        return taken


def _swap(layer: Module, tap: LayerTap, index: int) -> None:
    base = type(layer)

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = base.__call__(self, *args, **kwargs)
        tap.last[index] = out if isinstance(out, mx.array) else out[0]
        tap.seen[index].append(tap.last[index])
        return out

    attrs = {"__call__": __call__, "_mlxd_layer_tap": tap}
    layer.__class__ = type(f"LayerTapped{base.__name__}", (base,), attrs)


def decoder_layers(model: Module) -> list[Module] | None:
    """`model`'s decoder layers, where mlx-lm keeps them; None when not found."""
    inner = getattr(model, "model", None)
    if inner is None:
        inner = getattr(getattr(model, "language_model", None), "model", None)
    layers = getattr(inner, "layers", None) if inner is not None else None
    return layers if isinstance(layers, list) else None
