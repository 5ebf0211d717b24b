"""ModelInfo and LoadedModels, the table of loaded models (load once, reuse by name).

The table also keeps what residency needs: when each model was last used, which names are
pinned, and how many submits are between a caller's check and the engine thread. Eviction
*choices* live here, under the one lock, so a submit can never pass its model check while
the engine thread removes that model; the unloading itself is the engine thread's job.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlxd.types import Tokenizer


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What callers need to build requests for a loaded model. `tokenizer` is mlx-lm's
    TokenizerWrapper (mlxd.types.Tokenizer names what we use of it)."""

    name: str
    path: Path
    tokenizer: Tokenizer
    context_window: int
    generation_defaults: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    eos_token_ids: set[int] = field(default_factory=set)
    vocab_size: int = 0


@dataclass(slots=True)
class ModelEntry:
    info: ModelInfo
    loaded: Any  # backend LoadedModel; only the engine thread touches it
    # Residency bookkeeping, changed only under the table's lock:
    last_used: float = 0.0  # time.monotonic() of the last load, submit or finish
    pending: int = 0  # submits accepted on a caller thread, not yet seen by the engine thread
    reserved: int = 0  # reservations (see reserve) not yet used by a submit
    held_until: float = 0.0  # when the latest reservation lapses
    doomed: bool = False  # chosen to go past max_models while busy: goes when idle

    def in_use(self, busy: set[str], now: float) -> bool:
        """Requests waiting or running (`busy`), a submit in flight, or a live reservation."""
        held = self.reserved > 0 and self.held_until > now
        return self.info.name in busy or self.pending > 0 or held


class LoadedModels:
    """Thread-safe name -> loaded model map. Written on the engine thread, read anywhere."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, ModelEntry] = {}
        self._pinned: set[str] = set()  # names, so a pin survives (and precedes) a load

    def get(self, name: str) -> ModelEntry | None:
        with self._lock:
            return self._entries.get(name)

    def put(self, entry: ModelEntry) -> None:
        """Register (or re-register) a model; counts as a use."""
        with self._lock:
            entry.last_used = time.monotonic()
            self._entries[entry.info.name] = entry

    def remove(self, name: str) -> ModelEntry | None:
        with self._lock:
            return self._entries.pop(name, None)

    def names(self) -> list[str]:
        """Loaded model names in load order."""
        with self._lock:
            return list(self._entries)

    def count(self) -> int:
        with self._lock:
            return len(self._entries)

    # ---- use and pins ---------------------------------------------------------------

    def pin(self, name: str) -> None:
        """Never unload `name` by TTL or LRU (now or after it loads)."""
        with self._lock:
            self._pinned.add(name)

    def pinned(self, name: str) -> bool:
        with self._lock:
            return name in self._pinned

    def touch(self, name: str) -> ModelEntry | None:
        """Mark `name` used now; returns its entry, or None if it is not loaded."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is not None:
                entry.last_used = time.monotonic()
            return entry

    def acquire(self, name: str) -> ModelEntry | None:
        """A submit for `name` begins: mark it used and keep it loaded until `release`.
        None if it is not loaded (then the caller raises ModelNotFound)."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is not None:
                entry.pending += 1
                entry.reserved = max(0, entry.reserved - 1)  # the submit a reservation awaited
                entry.last_used = time.monotonic()
            return entry

    def reserve(self, name: str, seconds: float) -> ModelEntry | None:
        """Keep `name` loaded until a submit uses the reservation (`acquire`), `seconds` at
        most (a caller is about to submit to it); marks it used. None if it is not loaded."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is not None:
                now = time.monotonic()
                entry.last_used = now
                entry.reserved += 1
                entry.held_until = max(entry.held_until, now + seconds)
            return entry

    def release(self, name: str) -> None:
        """The submit reached the engine thread (or was refused before it got there)."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is not None and entry.pending > 0:
                entry.pending -= 1
                entry.last_used = time.monotonic()

    # ---- eviction choices (engine thread) -------------------------------------------

    def evictable(
        self, busy: set[str], now: float, max_models: int, ttl: float, keep: str | None = None
    ) -> list[str]:
        """Names to unload now. First the models idle past `ttl` (when > 0); then, while more
        than `max_models` stay loaded, the least recently used ones, never `keep` (the model
        loaded last: a caller is about to use it). A chosen model in use (see ModelEntry.in_use;
        `busy` names the models with requests waiting or running) is not swapped for another:
        it is marked, stays first in line and goes as soon as it is idle. Never a pinned
        model."""
        with self._lock:
            candidates = [(n, e) for n, e in self._entries.items() if n not in self._pinned]
            expired = {
                name
                for name, e in candidates
                if ttl > 0 and now - e.last_used > ttl and not e.in_use(busy, now)
            }
            surplus = len(self._entries) - len(expired) - max_models
            ranked = sorted(
                ((n, e) for n, e in candidates if n not in expired and n != keep),
                key=lambda item: (not item[1].doomed, item[1].last_used),
            )
            chosen = ranked[: max(surplus, 0)]
            for e in self._entries.values():
                e.doomed = False
            now_idle = []
            for name, e in chosen:
                if e.in_use(busy, now):
                    e.doomed = True
                else:
                    now_idle.append(name)
            return sorted(expired) + now_idle

    def remove_if_idle(self, name: str, busy: set[str]) -> ModelEntry | None:
        """Remove `name` unless it became pinned or in use meanwhile."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is None or name in self._pinned or entry.in_use(busy, time.monotonic()):
                return None
            return self._entries.pop(name)

    def next_check(self, busy: set[str], now: float, ttl: float) -> float:
        """When eviction must look again with nothing else happening (math.inf: never): the
        earliest TTL expiry of an unpinned model (when ttl > 0; a model in use now is looked
        at again `ttl` from now, its finish touches it anyway) and the end of the reservation
        of a model chosen to go."""
        with self._lock:
            times = [
                e.held_until
                for e in self._entries.values()
                if e.doomed and e.reserved and e.held_until > now
            ]
            if ttl > 0:
                times += [
                    now + ttl if e.in_use(busy, now) else e.last_used + ttl
                    for name, e in self._entries.items()
                    if name not in self._pinned
                ]
        return min(times, default=math.inf)
