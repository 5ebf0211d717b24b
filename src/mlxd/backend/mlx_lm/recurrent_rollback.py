"""Rollback for recurrent layers (gated delta-nets, short convolutions) after a verify step.

A recurrent layer's cache (mlx-lm's `ArraysCache`) holds one state per row, not one entry per
token, so it cannot be trimmed: after a verify forward over [next token, drafts...] every
row's state has consumed all of them, the rejected drafts included. The rollback keeps the
states from before the forward (free: mlx arrays are immutable, the layer assigns new ones)
and the input each recurrent layer saw, and after the verdict recomputes only those layers
over each row's kept positions (`ArraysCache.lengths`: positions past a row's length leave
its state untouched). The attention, MLP and head of the forward are not run again; mlx's
lazy graph drops the recomputed layers' outputs, only their states are evaluated.

Why recompute, not per-step states: the fused recurrence (mlx-lm's Metal kernel) returns
only the final state, so per-position states need a T-step loop of one-token updates on
every verify step and keep T states per row and layer (Hv x Dv x Dk floats each), while
the recompute costs one more pass of the recurrent layers only when some row rejected a
draft. benchmarks/speculation_kinds_bench.py measures both on this machine (its
`rollback` figures); the recompute was the cheaper one.

What we rely on (mlx-lm 0.32.2): `model.layers[i]` owns `make_prompt_cache(model)[i]`; a
recurrent layer calls a child named in `_MIXERS` as child(x, mask, cache), and that child
honours `cache.lengths` (qwen3_next / qwen3_5 `linear_attn`, lfm2 `conv`). Other recurrent
families are not rewindable: rows on them do not speculate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, make_prompt_cache

if TYPE_CHECKING:
    from mlx.nn.layers.base import Module

    from mlxd.backend.mlx_lm.compat import PromptCache

# Children of a decoder layer that run its recurrence and honour ArraysCache.lengths.
_MIXERS = ("linear_attn", "conv")


@dataclass(slots=True)
class _Tape:
    """The inputs the recurrent layers saw during one verify forward, by cache index."""

    recording: bool = False
    inputs: dict[int, mx.array] = field(default_factory=dict)


@dataclass(slots=True)
class Saved:
    """Each recurrent layer's cache state from before a verify forward, by cache index."""

    states: dict[int, tuple[list[mx.array | None], Any, Any]]


class RecurrentRollback:
    """Puts the recurrent layers of a batch cache back at each row's accepted length."""

    def __init__(self, mixers: dict[int, Module]) -> None:
        self._mixers = mixers  # cache index -> the recurrent child module
        self._tape = _Tape()
        for index, mixer in mixers.items():
            mixer.__class__ = _recording_class(type(mixer), self._tape, index)

    @classmethod
    def for_model(cls, model: Module) -> RecurrentRollback | None:
        """The rollback for `model`'s recurrent layers; None when it has none it can roll
        back, or one of a family it does not know (verify_step.target_rewindable tells which)."""
        mixers = recurrent_mixers(model)
        return cls(mixers) if mixers else None

    def save(self, cache: PromptCache) -> Saved:
        """Keep the recurrent states and record the layers' inputs of the next forward."""
        self._tape.inputs.clear()
        self._tape.recording = True
        states = {}
        for index in self._mixers:
            layer = _arrays(cache[index])
            states[index] = (list(layer.cache), layer.left_padding, layer.lengths)
        return Saved(states)

    def restore(self, cache: PromptCache, saved: Saved, kept: list[int]) -> None:
        """After the forward `save` preceded (width S): leave each row's recurrent state
        after its first `kept[i]` positions (rows keeping all S are recomputed alike)."""
        self._tape.recording = False
        inputs, self._tape.inputs = self._tape.inputs, {}
        if not inputs:
            return
        width = next(iter(inputs.values())).shape[1]
        if min(kept) >= width:
            return  # every row accepted its whole window: the states are right
        for index, mixer in self._mixers.items():
            layer = _arrays(cache[index])
            layer.state = saved.states[index]
            layer.cache = list(layer.cache)
            layer.lengths = mx.array(kept)  # one per layer: advance() subtracts in place
            _call_plain(mixer, inputs[index], layer.make_mask(width), layer)
            layer.lengths = None
        mx.eval([_arrays(cache[i]).cache for i in self._mixers])

    def stop(self) -> None:
        """The forward after `save` failed or was not verified: record nothing more."""
        self._tape.recording = False
        self._tape.inputs.clear()


def recurrent_mixers(model: Module) -> dict[int, Module]:
    """Cache index -> recurrent child module, for every layer with an ArraysCache; empty
    when any such layer has no child this module knows to roll back."""
    caches = make_prompt_cache(model)
    layers = cast("list[Module]", getattr(model, "layers", []))
    if len(layers) != len(caches):
        return {}
    mixers: dict[int, Module] = {}
    for index, (layer, layer_cache) in enumerate(zip(layers, caches, strict=True)):
        if type(layer_cache) is not ArraysCache:
            continue
        child = next((layer[name] for name in _MIXERS if name in layer), None)
        if child is None:
            return {}
        mixers[index] = child
    return mixers


def _recording_class(base: type, tape: _Tape, index: int) -> type:
    """A subclass of the mixer's class whose call records its input on `tape` (class
    attributes: a module's own attributes holding arrays would become its parameters)."""
    if getattr(base, "_mlxd_tape", None) is not None:
        base = base.__mro__[1]  # already swapped by an earlier rollback on this model

    def __call__(self: Any, x: mx.array, *args: Any, **kwargs: Any) -> Any:
        if tape.recording:
            tape.inputs[index] = x
        return base.__call__(self, x, *args, **kwargs)

    return type(f"Recorded{base.__name__}", (base,), {"__call__": __call__, "_mlxd_tape": tape})


def _arrays(layer: object) -> Any:
    """A recurrent layer's cache, untyped: mlx-lm declares its `lengths` as None only."""
    assert type(layer) is ArraysCache, "a recurrent layer's cache"
    return layer


def _call_plain(mixer: Module, x: mx.array, mask: mx.array | None, cache: Any) -> None:
    base = type(mixer).__mro__[1]
    base.__call__(mixer, x, mask, cache)
