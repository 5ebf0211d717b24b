"""ModelInfo and LoadedModels, the thread-safe table of loaded models (load once, reuse by name).

Each entry carries its residency bookkeeping (`ModelUse`): when it was last used, whether it
is pinned, how many submits are between a caller's model check and the engine thread, and
its reservations. Callers change it on their own threads; the engine thread decides what to
unload from `usage()` snapshots (engine/residency.py) and removes a model only through
`remove_if_idle`, under the same lock as `acquire`, so a submit can never pass its model
check while the engine thread removes that model.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mlxd.backend.api import KvFootprint, LoadedModel
from mlxd.checkpoint import EmbeddingSpec
from mlxd.errors import InvalidRequest
from mlxd.types import DraftKind, ImageProcessor, ModelKind, Tokenizer


@dataclass(frozen=True, slots=True)
class DraftInfo:
    """The draft model attached to a loaded model (loaded and unloaded with it): a draft
    model (kind `model`) or a DFlash drafter (kind `dflash`), as the backend found it."""

    name: str
    path: Path
    kind: DraftKind = field(default=DraftKind.MODEL, compare=False)


@dataclass(frozen=True, slots=True)
class AttachedDraft:
    """What a server says about a model's draft: its name, the draft kind requests that do
    not choose get, the most draft tokens per step, and the KV bytes per token a row
    drafting with it holds beside the target's (admission counts them)."""

    model: str
    kind: DraftKind
    num_draft_tokens: int
    kv_bytes_per_token: int = 0


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
    image_processor: ImageProcessor | None = None  # vision models: their image preprocessing
    draft: DraftInfo | None = None  # speculation's draft model, kind `model`
    kind: ModelKind = ModelKind.GENERATION
    dimensions: int = 0  # an embedding model's vector length
    weight_bytes: int = 0  # its parameters and its draft's, as loaded
    kv: KvFootprint = field(default_factory=KvFootprint)  # KV bytes of one sequence
    draft_kv: KvFootprint = field(default_factory=KvFootprint)  # its draft's/DFlash's, a row
    mtp_kv: KvFootprint = field(default_factory=KvFootprint)  # its MTP head's, a row
    kv_headroom: int | None = None  # memory the process could still use once it loaded
    embedding: EmbeddingSpec | None = None  # an embedding model's pooling and normalizing
    mtp_problem: str | None = None  # why kind `mtp` cannot draft on it (None: it has a head)
    unbatchable: tuple[str, ...] = ()  # cache layers the batch cannot hold: one at a time

    def row_kv(self, kind: DraftKind | None) -> KvFootprint:
        """The KV bytes one sequence holds when it speculates with `kind`: the target's,
        plus its drafter's (a draft model, a DFlash drafter, an MTP head) when it has one."""
        if kind in (DraftKind.MODEL, DraftKind.DFLASH):
            return self.kv.plus(self.draft_kv)
        if kind is DraftKind.MTP:
            return self.kv.plus(self.mtp_kv)
        return self.kv

    def require(self, kind: ModelKind) -> None:
        """Raise InvalidRequest (param `model`) unless this model serves `kind`."""
        if kind is self.kind:
            return
        if self.kind is ModelKind.EMBEDDING:
            why = "serves embeddings (/v1/embeddings, /api/embed), not chat or completions"
        else:
            why = "is not an embedding model (bge, e5, gte, nomic, Qwen3-Embedding...)"
        raise InvalidRequest(f"model {self.name!r} {why}", param="model")


@dataclass(slots=True)
class ModelUse:
    """Residency bookkeeping of one loaded model; changed only under the table's lock."""

    name: str
    last_used: float = 0.0  # time.monotonic() of the last load, submit or finish
    pinned: bool = False  # never unloaded by TTL or LRU
    pending: int = 0  # submits accepted on a caller thread, not yet seen by the engine thread
    reserved: int = 0  # reservations (see LoadedModels.reserve) not yet used by a submit
    held_until: float = 0.0  # when the latest reservation lapses
    # A client's keep-alive: seconds it may stay idle, replacing the TTL (math.inf: no
    # TTL, 0: unload once idle); None: the engine's TTL.
    keep_alive: float | None = None

    def in_use(self, busy: set[str], now: float) -> bool:
        """Requests waiting or running (`busy`), a submit in flight, or a live reservation."""
        held = self.reserved > 0 and self.held_until > now
        return self.name in busy or self.pending > 0 or held


@dataclass(slots=True)
class ModelEntry:
    info: ModelInfo
    loaded: LoadedModel  # only the engine thread touches it
    use: ModelUse = field(init=False)

    def __post_init__(self) -> None:
        self.use = ModelUse(self.info.name)

    @classmethod
    def of(cls, name: str, loaded: LoadedModel, draft: DraftInfo | None = None) -> ModelEntry:
        """The entry of a model the backend just loaded, known to callers as `name`, with
        the draft model loaded with it."""
        if draft is not None and loaded.dflash is not None:
            draft = replace(draft, kind=DraftKind.DFLASH)
        info = ModelInfo(
            name=name,
            path=loaded.path,
            tokenizer=loaded.tokenizer,
            context_window=loaded.context_window,
            generation_defaults=dict(loaded.generation_defaults),
            config=dict(loaded.config),
            eos_token_ids=set(loaded.eos_token_ids),
            vocab_size=loaded.vocab_size,
            image_processor=loaded.vision.processor if loaded.vision is not None else None,
            draft=draft,
            kind=ModelKind.GENERATION if loaded.embedder is None else ModelKind.EMBEDDING,
            dimensions=loaded.embedder.dimensions if loaded.embedder is not None else 0,
            weight_bytes=loaded.weight_bytes + (loaded.draft.weight_bytes if loaded.draft else 0),
            kv=loaded.kv,
            draft_kv=loaded.draft_kv,
            mtp_kv=loaded.mtp_kv,
            kv_headroom=loaded.kv_headroom,
            embedding=loaded.embedder.spec if loaded.embedder is not None else None,
            mtp_problem=None if loaded.mtp is not None else loaded.mtp_problem or "no MTP head",
            unbatchable=loaded.unbatchable,
        )
        return cls(info, loaded)


class LoadedModels:
    """Thread-safe name -> loaded model table. Written on the engine thread, read anywhere."""

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
            entry.use.last_used = time.monotonic()
            entry.use.pinned = entry.info.name in self._pinned
            self._entries[entry.info.name] = entry

    def names(self) -> list[str]:
        """Loaded model names in load order."""
        with self._lock:
            return list(self._entries)

    def count(self) -> int:
        with self._lock:
            return len(self._entries)

    def snapshot(self) -> list[tuple[ModelInfo, ModelUse]]:
        """Every loaded model's info and a copy of its bookkeeping, in load order."""
        with self._lock:
            return [(e.info, replace(e.use)) for e in self._entries.values()]

    def usage(self) -> list[ModelUse]:
        """A copy of every loaded model's bookkeeping, in load order."""
        with self._lock:
            return [replace(e.use) for e in self._entries.values()]

    # ---- use and pins (any thread) --------------------------------------------------

    def pin(self, name: str) -> None:
        """Never unload `name` by TTL or LRU (now or after it loads)."""
        with self._lock:
            self._pinned.add(name)
            entry = self._entries.get(name)
            if entry is not None:
                entry.use.pinned = True

    def keep_alive(self, name: str, seconds: float | None) -> bool:
        """Set `name`'s keep-alive (see ModelUse.keep_alive); False if it is not loaded."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is not None:
                entry.use.keep_alive = seconds
            return entry is not None

    def touch(self, name: str) -> ModelEntry | None:
        """Mark `name` used now; returns its entry, or None if it is not loaded."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is not None:
                entry.use.last_used = time.monotonic()
            return entry

    def acquire(self, name: str) -> ModelEntry | None:
        """A submit for `name` begins: mark it used and keep it loaded until `release`.
        None if it is not loaded (then the caller raises ModelNotFound)."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is not None:
                use = entry.use
                use.pending += 1
                use.reserved = max(0, use.reserved - 1)  # the submit a reservation awaited
                use.last_used = time.monotonic()
            return entry

    def reserve(self, name: str, seconds: float) -> ModelEntry | None:
        """Keep `name` loaded until a submit uses the reservation (`acquire`), `seconds` at
        most (a caller is about to submit to it); marks it used. None if it is not loaded."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is not None:
                use, now = entry.use, time.monotonic()
                use.last_used = now
                use.reserved += 1
                use.held_until = max(use.held_until, now + seconds)
            return entry

    def release(self, name: str) -> None:
        """The submit reached the engine thread (or was refused before it got there)."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is not None and entry.use.pending > 0:
                entry.use.pending -= 1
                entry.use.last_used = time.monotonic()

    # ---- removal (engine thread) ----------------------------------------------------

    def remove_if_idle(self, name: str, busy: set[str]) -> bool:
        """Remove `name` unless it became pinned or in use meanwhile; True if removed."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is None or entry.use.pinned or entry.use.in_use(busy, time.monotonic()):
                return False
            del self._entries[name]
            return True
