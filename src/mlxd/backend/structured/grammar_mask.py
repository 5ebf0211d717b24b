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
    """Masks a row's logits with its grammar; reasoning before the answer is left free, but
    for ending the turn."""

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
        # While reasoning: where the EOS ids are, and the token that closes reasoning.
        self._ends: mx.array | None = None
        self._close: mx.array | None = None

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        # Reading the token waits for the previous step. Starting this step's forward pass
        # first (async_eval) so that it overlaps the mask measured no faster on the CPU: each
        # extra eval costs the engine thread a GIL hand-off, and the mask took 10x longer
        # next to a running forward pass (benchmarks/structured_bench.py).
        if self._started:
            self._advance(cast(int, tokens[-1].item()))
        self._started = True
        if self.phase is Phase.REASONING:
            return self._without_end(logits)
        if self._neg_inf is None:
            self._neg_inf = mx.array(-mx.inf, dtype=logits.dtype)
        return mx.where(self._allowed(logits.shape[-1]), logits, self._neg_inf)

    def _without_end(self, logits: mx.array) -> mx.array:
        """Reasoning is free but for EOS: where the model would end the turn it closes its
        reasoning instead (the closing token gets EOS's best logit), so the answer comes."""
        width = logits.shape[-1]
        if self._ends is None or self._ends.shape[-1] != width:
            self._ends, self._close = self._reasoning_masks(width)
        if self._ends is None:
            return logits
        if self._neg_inf is None:
            self._neg_inf = mx.array(-mx.inf, dtype=logits.dtype)
        out = logits
        if self._close is not None:
            best_end = mx.max(mx.where(self._ends, logits, self._neg_inf), axis=-1, keepdims=True)
            out = mx.where(self._close, mx.maximum(out, best_end), out)
        return mx.where(self._ends, self._neg_inf, out)

    def _reasoning_masks(self, width: int) -> tuple[mx.array | None, mx.array | None]:
        ends = [t for t in self.grammar.end_tokens if t < width]
        if not ends:
            return None, None
        end_mask = np.zeros(width, dtype=np.bool_)
        end_mask[ends] = True
        close = self.grammar.reasoning_close
        if close is None or close >= width:
            return mx.array(end_mask), None
        close_mask = np.zeros(width, dtype=np.bool_)
        close_mask[close] = True
        return mx.array(end_mask), mx.array(close_mask)

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
