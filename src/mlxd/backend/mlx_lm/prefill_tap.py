"""The target's pre-norm hidden states over each prompt, read from mlx-lm's prefill (an MTP
head is primed over the prompt with them: speculation/mtp_drafter.py).

What we rely on (besides mlx_lm/compat.py's notes): a `BatchGenerator` keeps one
`_prompt_batch` for its life (`extend`ed with new prompts; `split` copies it with `_copy`,
which keeps `self.__class__`), so swapping its class swaps `prompt` and `generate` for every
prompt after. `prompt(tokens)` runs row i's `tokens[i]` (right-padded to the longest) through the
model in one or more forwards and appends them to `tokens[i]`, which then holds what the
row's cache holds; `generate(last)` returns a `GenerationBatch` whose `__init__` ran the
rows' last prompt tokens through the model (one forward, one position per row) and appended
them to its `tokens`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

import mlx.core as mx
from mlx_lm.generate import GenerationBatch, PromptProcessingBatch

if TYPE_CHECKING:
    from mlxd.backend.mlx_lm.compat import BatchGen
    from mlxd.backend.mlx_lm.hidden_tap import HiddenTap


class Primer(Protocol):
    """What the prefill hands its hidden states to (speculation.mtp_drafter.MtpDrafter)."""

    def prime(
        self, uids: list[int], hidden: mx.array, lengths: list[int], contexts: list[list[int]]
    ) -> None: ...


def enable_priming(gen: BatchGen, primer: Primer, tap: HiddenTap) -> None:
    """From now on every prefill forward of `gen` hands `primer` its rows' hidden states."""
    batch = gen._prompt_batch
    batch.__class__ = PrimingPromptBatch
    batch._mlxd_primer = primer  # type: ignore[attr-defined]
    batch._mlxd_tap = tap  # type: ignore[attr-defined]


class PrimingPromptBatch(PromptProcessingBatch):
    """mlx-lm's PromptProcessingBatch whose forwards' hidden states go to a Primer: row i's
    first len(tokens[i]) positions of each chunk, and its last prompt token's position."""

    _mlxd_primer: Primer
    _mlxd_tap: HiddenTap

    def _copy(self) -> PrimingPromptBatch:
        copied = cast("PrimingPromptBatch", super()._copy())  # type: ignore[no-untyped-call]
        copied._mlxd_primer, copied._mlxd_tap = self._mlxd_primer, self._mlxd_tap
        return copied

    def prompt(self, tokens: list[list[int]]) -> None:
        uids, tap = list(self.uids), self._mlxd_tap
        tap.seen = []
        try:
            super().prompt(tokens)
            seen = tap.seen
        finally:
            tap.seen = None
        if uids and seen and any(tokens):
            hidden = seen[0] if len(seen) == 1 else mx.concatenate(seen, axis=1)
            self._mlxd_primer.prime(uids, hidden, [len(t) for t in tokens], self.tokens)

    def generate(self, tokens: list[list[int]]) -> GenerationBatch:
        uids = list(self.uids)
        batch = cast("GenerationBatch", super().generate(tokens))
        last = self._mlxd_tap.last
        if uids and last is not None and last.shape[0] == len(uids):
            self._mlxd_primer.prime(uids, last[:, -1:, :], [1] * len(uids), batch.tokens)
        return batch
