"""GrammarMask: one sequence's logits processor that keeps only the tokens its grammar allows.

It is a per-row logits processor of mlx-lm's BatchGenerator, so constrained and free sequences
share one batch: a free row has no processor and its logits pass untouched. mlx-lm calls a
row's processors once per step with the row's tokens so far; the first call ends with the
prompt's last token, each later call with the token sampled at the previous step (see
backend/mlx_lm/compat.py), which this processor feeds to its matcher before computing the
next mask. A grammar error raises, and guard_processor fails that request alone.
"""

from __future__ import annotations

from enum import Enum, auto
from typing import cast

import llguidance
import mlx.core as mx
import numpy as np

from mlxd.backend.structured.grammar import CompiledGrammar

__all__ = ["GrammarError", "GrammarMask"]


class GrammarError(RuntimeError):
    """The sequence left its grammar (a matcher error or an exhausted step budget)."""


class Phase(Enum):
    LEAD_IN = auto()  # first token: the answer, or the token that opens a reasoning block
    REASONING = auto()  # free until the reasoning block's end marker
    ANSWER = auto()  # every token through the grammar


class GrammarMask:
    """Masks a row's logits with its grammar; reasoning before the answer is left free."""

    def __init__(self, grammar: CompiledGrammar) -> None:
        self.grammar = grammar
        self.matcher: llguidance.LLMatcher = grammar.new_matcher()
        if grammar.reasoning_open:
            self.phase = Phase.REASONING
        elif grammar.reasoning_start is not None:
            self.phase = Phase.LEAD_IN
        else:
            self.phase = Phase.ANSWER
        self._words = np.zeros((grammar.mask_size + 31) // 32, dtype=np.uint32)
        self._neg_inf: mx.array | None = None  # -inf in the logits' dtype (keeps the batch's)
        self._tail = b""  # the end of the reasoning so far, to spot its end marker
        self._started = False

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        # Reading the token waits for the previous step. Starting this step's forward pass
        # first (async_eval) so that it overlaps the mask measured no faster on the CPU: each
        # extra eval costs the engine thread a GIL hand-off, and the mask took 10x longer
        # next to a running forward pass (benchmarks/structured_bench.py).
        if self._started:
            self._advance(cast(int, tokens[-1].item()))
        self._started = True
        if self.phase is Phase.REASONING:
            return logits
        if self._neg_inf is None:
            self._neg_inf = mx.array(-mx.inf, dtype=logits.dtype)
        return mx.where(self._allowed(logits.shape[-1]), logits, self._neg_inf)

    def _advance(self, token: int) -> None:
        """Feed the token sampled at the previous step."""
        if self.phase is Phase.LEAD_IN:
            if token == self.grammar.reasoning_start:
                self.phase = Phase.REASONING
                return
            self.phase = Phase.ANSWER
        if self.phase is Phase.REASONING:
            end = self.grammar.reasoning_end
            self._tail = (self._tail + self.grammar.tokenizer.decode_bytes([token]))[-len(end) :]
            if self._tail == end:
                self.phase = Phase.ANSWER
            return
        if not self.matcher.consume_token(token):
            raise GrammarError(f"token {token} is outside the grammar: {self._error()}")

    def _allowed(self, width: int) -> mx.array:
        """The next token's mask as booleans over `width` logits."""
        words = self._words
        self.matcher.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
        if self.matcher.is_error():
            raise GrammarError(self._error())
        if self.phase is Phase.LEAD_IN and self.grammar.reasoning_start is not None:
            start = self.grammar.reasoning_start
            words[start // 32] |= np.uint32(1 << (start % 32))
        bits = np.unpackbits(words.view(np.uint8), bitorder="little")  # one byte per token
        if bits.size < width:
            bits = np.concatenate([bits, np.zeros(width - bits.size, dtype=np.uint8)])
        return mx.array(bits[:width].view(np.bool_))

    def _error(self) -> str:
        return self.matcher.get_error() or "no token can continue the answer"
