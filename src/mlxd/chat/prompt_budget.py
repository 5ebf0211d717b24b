"""Bounds on a prompt before and while it is tokenized.

Tokenizing costs far more memory than the text: ~200 bytes per byte of prompt while the
tokenizer runs (a 3.8 MB prompt peaked at ~800 MB). So a prompt is refused before it is
tokenized when it cannot fit the context window, and large prompts take turns.

- `check_fits`: every token of the vocabulary spells at most `longest_token` characters, and a
  tokenizer's normalizer may fold up to `_FOLD` characters into one (NFKC compositions), so a
  text has at least (its non-space characters) / (_FOLD * longest_token) tokens: whitespace is
  left out because some tokenizers fold runs of it into a neighbouring token. A text whose
  bound reaches the window is refused with the ContextOverflow the engine would raise.
- `tokenizing`: prompts of LARGE_PROMPT_BYTES or more tokenize at most
  MLXD_TOKENIZE_BYTES of text at once (one alone may exceed it); afterwards the C heap's freed
  pages go back to the system (glibc keeps them otherwise: 4 concurrent 3.5 MB prompts left
  513 MB resident, 185 MB after the trim).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mlxd.config import setting_int
from mlxd.errors import ContextOverflow
from mlxd.types import Tokenizer

__all__ = ["LARGE_PROMPT_BYTES", "check_fits", "least_tokens", "tokenizing"]

LARGE_PROMPT_BYTES = 64 << 10  # smaller prompts cost under ~15 MB each: they never wait
_FOLD = 3
_SPACES = [chr(c) for c in range(0x3001) if chr(c).isspace()]
_longest: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def check_fits(tokenizer: Tokenizer, text: str, window: int, param: str = "messages") -> None:
    """Raise ContextOverflow (with counts) when `text` has at least `window` tokens for sure."""
    least = least_tokens(tokenizer, text)
    if least >= window:
        raise ContextOverflow(
            f"prompt has at least {least} tokens ({len(text.encode('utf-8', 'replace'))} "
            f"bytes) but the context window is {window}: no room to generate",
            param=param,
            prompt_tokens=least,
            window=window,
            at_least=True,
        )


def least_tokens(tokenizer: Tokenizer, text: str) -> int:
    """A lower bound of the tokens `text` encodes to (see the module), without tokenizing."""
    solid = len(text) - sum(text.count(space) for space in _SPACES)
    return -(-solid // (_FOLD * longest_token(tokenizer)))


def longest_token(tokenizer: Tokenizer) -> int:
    """The most characters one vocabulary token spells (computed once per tokenizer)."""
    try:
        return _longest[tokenizer]
    except (KeyError, TypeError):
        pass
    longest = max((len(token) for token in tokenizer.get_vocab()), default=1)
    try:
        _longest[tokenizer] = max(1, longest)
    except TypeError:  # not weakly referenceable: computed again next time
        pass
    return max(1, longest)


class _TextBudget:
    """Characters of text being tokenized at once, at most `limit` (one text alone may be
    larger: it then waits until nothing else tokenizes)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._in_use = 0

    @contextmanager
    def hold(self, size: int) -> Iterator[None]:
        limit = setting_int("tokenize_bytes")
        with self._cond:
            self._cond.wait_for(lambda: self._in_use == 0 or self._in_use + size <= limit)
            self._in_use += size
        try:
            yield
        finally:
            with self._cond:
                self._in_use -= size
                self._cond.notify_all()


_BUDGET = _TextBudget()


@contextmanager
def tokenizing(text: str) -> Iterator[None]:
    """Around the tokenization of `text`: a large one waits for its turn, and the memory it
    used goes back to the system after."""
    if len(text) < LARGE_PROMPT_BYTES:
        yield
        return
    try:
        with _BUDGET.hold(len(text)):
            yield
    finally:
        _trim_heap()


def _trim_heap() -> None:
    """glibc's malloc_trim: hand the heap's free pages back (elsewhere: nothing to do)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # musl has no malloc_trim
        return None
