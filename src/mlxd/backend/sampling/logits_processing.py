"""One decode step's logits processors over a whole batch: every row's logit_bias in one
scatter-add, the other processors (penalties, grammar masks) on their own rows only.

A row's processed logits are the same as when its processors run on that row alone: the bias
is one add per biased entry either way, and the other processors see the biased row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import mlx.core as mx

Processor = Callable[[mx.array, mx.array], mx.array]
OnError = Callable[[BaseException], None]


class TokenContext(Protocol):
    """A row's tokens so far, as processors see them (mlx-lm's TokenBuffer)."""

    def update_and_fetch(self, tokens: mx.array) -> mx.array: ...


class LogitBias:
    """logit_bias as a logits processor; BatchBias adds every row's at once. A request's
    bias must be its first processor for that (sampling.make_processors puts it there)."""

    __slots__ = ("ids", "values", "_ids", "_values")

    def __init__(self, bias: Sequence[tuple[int, float]]) -> None:
        self.ids = [token for token, _ in bias]
        self.values = [value for _, value in bias]
        self._ids = mx.array(self.ids, dtype=mx.int32)
        self._values = mx.array(self.values, dtype=mx.float32)

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        return logits.at[:, self._ids].add(self._values)


class GuardedProcessor:
    """A processor whose exception fails only its request: reported, the logits pass
    through unchanged. `processor` is the one it guards."""

    __slots__ = ("processor", "_on_error")

    def __init__(self, processor: Processor, on_error: OnError) -> None:
        self.processor = processor
        self._on_error = on_error

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        try:
            return self.processor(tokens, logits)
        except Exception as exc:
            self._on_error(exc)
            return logits


class BatchBias:
    """The biases of a batch's rows as one scatter-add, rebuilt only when a row's bias
    changes (rows joined or left); holding the LogitBias objects keeps their identity."""

    __slots__ = ("_biases", "_at")

    def __init__(self) -> None:
        self._biases: list[LogitBias | None] = []
        self._at: tuple[mx.array, mx.array, mx.array] | None = None

    def apply(self, logits: mx.array, biases: list[LogitBias | None]) -> mx.array:
        if (
            self._at is None
            or len(biases) != len(self._biases)
            or any(a is not b for a, b in zip(biases, self._biases, strict=True))
        ):
            rows: list[int] = []
            cols: list[int] = []
            values: list[float] = []
            for e, bias in enumerate(biases):
                if bias is not None:
                    rows += [e] * len(bias.ids)
                    cols += bias.ids
                    values += bias.values
            self._biases = biases
            self._at = (mx.array(rows), mx.array(cols), mx.array(values, dtype=mx.float32))
        rows_at, cols_at, values_at = self._at
        return logits.at[rows_at, cols_at].add(values_at)


def process_rows(
    logits: mx.array,
    inputs: mx.array,
    processors: Sequence[Sequence[Processor] | None],
    contexts: Sequence[TokenContext],
    bias: BatchBias,
) -> tuple[mx.array, list[mx.array]]:
    """`logits` [B, V] after each row's processors (`inputs` [B]: the tokens fed this step,
    appended to the contexts of rows with processors other than a bias). Returns the logits
    and the contexts fetched (to evaluate with the step)."""
    if not any(processors):
        return logits, []
    biases: list[LogitBias | None] = []
    rest: dict[int, Sequence[Processor]] = {}
    for e, procs in enumerate(processors):
        if not procs:
            biases.append(None)
            continue
        found = _bias_of(procs[0])
        biases.append(found)
        others = procs[1:] if found is not None else procs
        if others:
            rest[e] = others
    if any(b is not None for b in biases):
        logits = bias.apply(logits, biases)
    if not rest:
        return logits, []
    rows: dict[int, mx.array] = {}
    fetched = []
    for e, procs in rest.items():
        context = contexts[e].update_and_fetch(inputs[e : e + 1])
        fetched.append(context)
        row = logits[e : e + 1]
        for processor in procs:
            row = processor(context, row)
        rows[e] = row
    return put_rows(logits, rows), fetched


def _bias_of(processor: Processor) -> LogitBias | None:
    inner = processor.processor if isinstance(processor, GuardedProcessor) else processor
    return inner if isinstance(inner, LogitBias) else None


def put_rows(x: mx.array, rows: dict[int, mx.array]) -> mx.array:
    """`x` [B, ...] with row i replaced by `rows[i]` ([1, ...] each), as a new array."""
    if len(rows) == x.shape[0]:
        return mx.concatenate([rows[i] for i in range(x.shape[0])], axis=0).astype(x.dtype)
    values = mx.concatenate(list(rows.values()), axis=0).astype(x.dtype)
    at = mx.array(list(rows), dtype=mx.int32).reshape(-1, *([1] * (x.ndim - 1)))
    return mx.put_along_axis(x, mx.broadcast_to(at, values.shape), values, axis=0)
