"""Prefix cache: snapshots of KV caches at prompt boundaries, keyed by token ids, bounded in
bytes and shared by every model the engine runs (keys include the model name).

A snapshot holds a model's cache after a prefix of a request's tokens: the end of its system
prompt (SYSTEM), the start of its last message or the point where the next turn's prompt
departs from this one (HISTORY), all but the last prompt token (PROMPT), or the prompt plus
the generated tokens (ANSWER). A later prompt reuses the longest snapshot that is a prefix of
it, or, when the cache can be trimmed (attention KV; a rotating window not yet full), a longer
one cut back to the common prefix. Recurrent states and full rotating windows cannot be cut
back: for them only the snapshots at prompt boundaries are reusable, which is why they exist.

Bounds: the cache counts what it holds, not only the KV arrays: each entry's arrays, its key
and objects (ENTRY_BYTES, KEY_TOKEN_BYTES a token) and the trie's nodes (NODE_BYTES each).
On the tiny test models the index is ~40% of the total (300 bytes a token beside 512 of KV);
on real models well under 1%. Entries are evicted least recently used first past
`max_bytes`; a trimmable entry replaces the entries that are its own prefixes; and when a
request continues an earlier turn (its prompt holds that turn's prompt up to where a next
turn departs), the earlier turn's snapshots go once the new request has stored one, so a
conversation keeps only its latest turn. With a disk tier (backend/prefix/disk_tier.py)
every kept snapshot is also written to a file, and a prompt that a file serves better than
memory loads it.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol

import mlx.core as mx
from mlx.utils import tree_map
from mlx_lm.models.cache import RotatingKVCache, can_trim_prompt_cache

from mlxd.backend.api import PrefixCacheStats
from mlxd.backend.mlx_lm.compat import PromptCache, trim_cache
from mlxd.backend.prefix.disk_tier import DiskTier
from mlxd.backend.prefix.prompt_trie import NODE_BYTES, PromptTrie
from mlxd.backend.prefix.snapshot_file import CacheShape

# A reuse shorter than this is not worth a cache copy (chat prompts of unrelated conversations
# share a handful of template tokens); it is neither used nor counted as a hit.
MIN_REUSE_TOKENS = 16

Key = tuple[str, tuple[int, ...]]  # (model, tokens)
# Memory an entry holds beside its arrays (tests/integration/backend/prefix measures it): its
# Snapshot, LRU slot and cache objects, and its key tuple's slot per token.
ENTRY_BYTES = 2048
KEY_TOKEN_BYTES = 8


class SnapshotKind(StrEnum):
    SYSTEM = "system"  # end of the system prompt: shared across conversations, never pruned
    HISTORY = "history"  # start of the last message, or where the next turn departs
    PROMPT = "prompt"  # all but the last prompt token: a repeat of the same prompt
    ANSWER = "answer"  # prompt + generated tokens (or what a cancelled request holds)


@dataclass(slots=True, eq=False)
class Turn:
    """The request behind a group of snapshots: its prompt, where a next turn departs from it
    (`next_turn`), and the turn it continues (pruned at this turn's first store)."""

    prompt: list[int]
    next_turn: int
    keys: set[Key] = field(default_factory=set)
    continues: Turn | None = None


class SideState(Protocol):
    """What a snapshot may keep beside its cache (an MTP head's state:
    speculation.mtp_drafter.HeadState): counted in its bytes, cut back with it, kept in
    memory only (the disk tier holds the cache alone)."""

    @property
    def nbytes(self) -> int: ...

    def cut(self, tokens: int) -> SideState | None:
        """A copy over the first `tokens` of the positions it covers (None: it cannot)."""
        ...


@dataclass(slots=True, eq=False)
class Snapshot:
    """`nbytes`: what it holds (KV and its own objects); `kv_bytes`: its arrays alone."""

    key: Key
    cache: PromptCache
    nbytes: int
    kv_bytes: int
    kind: SnapshotKind
    trimmable: bool
    turn: Turn | None  # None for SYSTEM snapshots: they belong to no conversation
    side: SideState | None = None  # over the same tokens

    @property
    def length(self) -> int:
        return len(self.key[1])


@dataclass(frozen=True, slots=True)
class Reuse:
    """What `fetch` found: a private cache holding the first `tokens` prompt tokens (None: no
    reuse), and the turn the request's own snapshots belong to."""

    cache: PromptCache | None
    tokens: int
    turn: Turn
    side: SideState | None = None  # the snapshot's, cut to `tokens`


class PrefixCache:
    """Every method runs on the engine thread."""

    def __init__(self, max_bytes: int, disk: DiskTier | None = None) -> None:
        self.max_bytes = max_bytes
        self.disk = disk if max_bytes > 0 else None
        self._trie = PromptTrie()  # its look-up walks one path (see prompt_trie)
        self._lru: OrderedDict[Key, Snapshot] = OrderedDict()
        self._bytes = self._kv_bytes = 0  # entries' nbytes and kv_bytes (trie nodes apart)
        self._stored = self._evictions = self._pruned = 0

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    @property
    def nbytes(self) -> int:
        """What the cache holds: its entries and the trie that finds them."""
        return self._bytes + self._trie.nodes * NODE_BYTES

    def __len__(self) -> int:
        return len(self._lru)

    def stats(self) -> PrefixCacheStats:
        rejected = self.disk.rejected if self.disk is not None else 0
        return PrefixCacheStats(
            self.nbytes,
            len(self._lru),
            self._stored,
            self._evictions,
            self._pruned,
            rejected,
            self._kv_bytes,
        )

    def register(self, model: str, checkpoint: Path, net: object) -> None:
        """`model` is the checkpoint at `checkpoint`, `net` its loaded model (what its disk tier
        files, if any, must hold: one token runs through it to see)."""
        if self.disk is not None:
            self.disk.register(model, checkpoint, CacheShape.probe(net))

    # ---- look-up --------------------------------------------------------------------

    def fetch(self, model: str, prompt: list[int], next_turn: int | None = None) -> Reuse:
        """A private copy of the longest usable snapshot for `prompt`. It never holds the last
        prompt token, which must run through the model to give the first logits."""
        turn = Turn(prompt, next_turn or len(prompt))
        found = self._nearest(model, prompt)
        if self.disk is not None and self._load_better(model, prompt, found):
            found = self._nearest(model, prompt)
        if found is None:
            return Reuse(None, 0, turn)
        snap, usable = found
        cache = copy.deepcopy(snap.cache)
        if snap.length > usable and trim_cache(cache, snap.length - usable) != snap.length - usable:
            return Reuse(None, 0, turn)
        self._lru.move_to_end(snap.key)
        earlier = snap.turn
        side = snap.side.cut(usable) if snap.side is not None else None
        if earlier is not None and earlier.prompt == prompt:
            return Reuse(cache, usable, earlier, side)  # the same prompt again: the same turn
        if earlier is not None and _continues(prompt, earlier):
            turn.continues = earlier
        return Reuse(cache, usable, turn, side)

    def reusable(self, model: str, prompt: list[int]) -> int:
        """How many tokens of `prompt` a fetch would reuse now (0 or >= MIN_REUSE_TOKENS)."""
        found = self._nearest(model, prompt)
        return found[1] if found is not None else 0

    def _load_better(
        self, model: str, prompt: list[int], found: tuple[Snapshot, int] | None
    ) -> bool:
        """Bring into memory the file that serves the most of `prompt`, if it serves more than
        memory does (a file that does not check is deleted: the next best is tried)."""
        assert self.disk is not None
        enough = max((found[1] if found is not None else 0) + MIN_REUSE_TOKENS, MIN_REUSE_TOKENS)
        while (on_disk := self.disk.nearest(model, prompt)) is not None and on_disk[1] >= enough:
            entry = on_disk[0]
            cache = self.disk.load(model, entry)
            if cache is not None:
                self.store(model, list(entry.tokens), cache, SnapshotKind(entry.kind), None)
                return True
        return False

    def _nearest(self, model: str, prompt: list[int]) -> tuple[Snapshot, int] | None:
        """The snapshot serving the most of prompt[:-1], and how many tokens it serves."""
        if not self.enabled or len(prompt) <= MIN_REUSE_TOKENS:
            return None
        head = prompt[:-1]
        found = self._trie.search(model, head)
        best: tuple[Snapshot, int] | None = None
        for tokens in (found.exact, found.shorter):
            if tokens is not None:
                snap: Snapshot = self._trie.get(model, tokens)
                if best is None or snap.length > best[1]:
                    best = (snap, snap.length)
        if found.longer is not None and (best is None or found.common_prefix > best[1]):
            snap = self._trie.get(model, found.longer)
            if snap.trimmable:
                best = (snap, found.common_prefix)
        if best is None or best[1] < MIN_REUSE_TOKENS:
            return None
        return best

    # ---- storing --------------------------------------------------------------------

    def store(
        self,
        model: str,
        tokens: list[int],
        cache: PromptCache,
        kind: SnapshotKind,
        turn: Turn | None,
        side: SideState | None = None,
    ) -> None:
        """Keep `cache`, which holds exactly `tokens` (it is not copied: the caller gives it
        up), and `side` beside it. A snapshot larger than the whole budget is not kept."""
        if not self.enabled or len(tokens) < MIN_REUSE_TOKENS or not cache:
            return
        cache = _detach(cache)
        kv_bytes = sum(int(c.nbytes) for c in cache) + (side.nbytes if side is not None else 0)
        nbytes = kv_bytes + ENTRY_BYTES + len(tokens) * KEY_TOKEN_BYTES
        if nbytes + len(tokens) * NODE_BYTES > self.max_bytes:
            return
        if turn is not None and turn.continues is not None:
            self._prune_turn(turn.continues)  # this conversation moved on
            turn.continues = None
        owner = None if kind is SnapshotKind.SYSTEM else turn
        key: Key = (model, tuple(tokens))
        if key in self._lru:
            self._remove(self._lru[key])
        trimmable = can_trim_prompt_cache(cache)
        snap = Snapshot(key, cache, nbytes, kv_bytes, kind, trimmable, owner, side)
        self._trie.add(model, list(tokens), snap)
        self._lru[key] = snap
        self._bytes += nbytes
        self._kv_bytes += kv_bytes
        self._stored += 1
        if owner is not None:
            owner.keys.add(key)
        if self.disk is not None:
            self.disk.save(model, list(tokens), cache, kind.value)
        if snap.trimmable:  # its own prefixes are redundant: it can be cut back to any of them
            for _, older in self._trie.pop_prefixes(model, list(tokens)):
                self._forget(older)
                self._discard(older)
        while self.nbytes > self.max_bytes:
            oldest = next(iter(self._lru.values()))
            self._remove(oldest)
            self._evictions += 1

    def _prune_turn(self, turn: Turn) -> None:
        for key in list(turn.keys):
            snap = self._lru.get(key)
            if snap is not None:
                self._remove(snap)
                self._discard(snap)
        turn.keys.clear()

    def _discard(self, snap: Snapshot) -> None:
        """`snap` is redundant (pruned): its file goes too."""
        self._pruned += 1
        if self.disk is not None:
            model, tokens = snap.key
            self.disk.discard(model, list(tokens))

    def _remove(self, snap: Snapshot) -> None:
        model, tokens = snap.key
        self._trie.pop(model, list(tokens))
        self._forget(snap)

    def _forget(self, snap: Snapshot) -> None:
        """Drop `snap` from the LRU and the byte count (the trie no longer holds it)."""
        del self._lru[snap.key]
        self._bytes -= snap.nbytes
        self._kv_bytes -= snap.kv_bytes
        if snap.turn is not None:
            snap.turn.keys.discard(snap.key)

    # ---- whole-model removal --------------------------------------------------------

    def drop(self, model: str) -> int:
        """Forget every entry of one model (it was unloaded); returns how many went."""
        gone = [snap for key, snap in self._lru.items() if key[0] == model]
        for snap in gone:
            self._remove(snap)
        return len(gone)

    def clear(self) -> None:
        for snap in list(self._lru.values()):
            self._remove(snap)

    def close(self) -> None:
        """Last call: forget every entry and let go of the disk tier's directory."""
        self.clear()
        if self.disk is not None:
            self.disk.close()


def _continues(prompt: list[int], earlier: Turn) -> bool:
    """`prompt` is a next turn of `earlier`: it holds earlier's prompt up to where a next turn
    departs, and more."""
    point = earlier.next_turn
    return len(prompt) > point and prompt[:point] == earlier.prompt[:point]


def _detach(cache: PromptCache) -> PromptCache:
    """Give each array of `cache` its own buffer: a cache extracted from a batch may be a view
    that keeps the whole batch's buffer alive (and under-reports its bytes)."""
    for layer in cache:
        layer.state = tree_map(_own_buffer, layer.state)  # type: ignore[attr-defined]
    mx.async_eval([layer.state for layer in cache])  # type: ignore[attr-defined,no-untyped-call]
    return cache


def _own_buffer(x: object) -> object:
    return mx.contiguous(x) if isinstance(x, mx.array) else x


def trimmable_at(template: PromptCache, tokens: int) -> bool:
    """Whether a cache of this model (`template`: a fresh one) can be cut back once it holds
    `tokens` tokens: attention KV can, a rotating window only until full, a recurrent state
    never."""
    for layer in template:
        window = _window(layer)
        if window is not None:
            if tokens >= window:
                return False
        elif not layer.is_trimmable():  # type: ignore[attr-defined]
            return False
    return True


def _window(layer: object) -> int | None:
    """A rotating window's size: mlx-lm's RotatingKVCache, or another library's rotating cache
    with the same `max_size` (mlx-vlm's, which vision language models make: a fresh one says
    it is trimmable, though it stops being once full)."""
    if isinstance(layer, RotatingKVCache):
        return int(layer.max_size)
    size = getattr(layer, "max_size", None) if type(layer).__name__.startswith("Rotating") else None
    return size if isinstance(size, int) else None
