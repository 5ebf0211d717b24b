"""Residency: which loaded models stay (max_models, least recently used first; idle TTL; pins;
reservations), decided on the engine thread between steps.

Choices are made from a snapshot of the table (`LoadedModels.usage()`); each removal is
checked again under the table's lock (`remove_if_idle`), so a model a submit acquired after
the snapshot stays. The policy, in order: unpinned models idle (not in use, see
`ModelUse.in_use`) for more than the TTL go; then, while more than `max_models` are loaded,
the least recently used unpinned ones, except the model loaded last (its caller is about to
submit to it). A model's own keep-alive (`ModelUse.keep_alive`, set by a client such as
Ollama's `keep_alive`) replaces the TTL for that model. A chosen model that is in use is not
swapped for an idle one: it is marked (`doomed`), stays first in line, and goes as soon as it
is idle.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Sequence

from mlxd.engine.loaded_models import LoadedModels, ModelUse
from mlxd.engine.request import Request, RequestStatus
from mlxd.engine.stats import ResidentModel


def choose_unloads(
    uses: Sequence[ModelUse],
    busy: set[str],
    now: float,
    *,
    max_models: int,
    ttl: float,
    keep: str | None = None,
    doomed: Collection[str] = (),
) -> tuple[list[str], set[str]]:
    """(names to unload now, names chosen but in use: they go first once idle). `busy` names
    the models with requests waiting or running; `keep` is never an LRU choice."""
    candidates = [u for u in uses if not u.pinned]
    expired = {
        u.name
        for u in candidates
        if now - u.last_used > idle_limit(u, ttl) and not u.in_use(busy, now)
    }
    surplus = len(uses) - len(expired) - max_models
    ranked = sorted(
        (u for u in candidates if u.name not in expired and u.name != keep),
        key=lambda u: (u.name not in doomed, u.last_used),
    )
    unload, still_doomed = sorted(expired), set()
    for u in ranked[: max(surplus, 0)]:
        if u.in_use(busy, now):
            still_doomed.add(u.name)
        else:
            unload.append(u.name)
    return unload, still_doomed


def idle_limit(use: ModelUse, ttl: float) -> float:
    """Seconds `use`'s model may stay idle: its own keep-alive, else the TTL (0: forever)."""
    if use.keep_alive is not None:
        return use.keep_alive
    return ttl if ttl > 0 else math.inf


def next_check(
    uses: Sequence[ModelUse], busy: set[str], now: float, ttl: float, doomed: Collection[str]
) -> float:
    """When eviction must look again with nothing else happening (math.inf: never): the
    earliest TTL expiry of an unpinned model (when ttl > 0; a model in use now is looked at
    again `ttl` from now, its finish touches it anyway) and the end of the reservation of a
    model chosen to go."""
    times = [u.held_until for u in uses if u.name in doomed and u.reserved and u.held_until > now]
    for u in uses:
        limit = idle_limit(u, ttl)
        if u.pinned or limit == math.inf:
            continue
        # In use: look again later (at least a second on, for a keep-alive of 0; the finish
        # touches it anyway).
        times.append(now + max(limit, 1.0) if u.in_use(busy, now) else u.last_used + limit)
    return min(times, default=math.inf)


class Residency:
    """The engine thread's residency policy over `models`. `busy()` names the models with
    requests waiting or running; `unload(name)` frees a model the table just removed."""

    def __init__(
        self,
        models: LoadedModels,
        max_models: int,
        ttl: float,
        busy: Callable[[], set[str]],
        unload: Callable[[str], None],
    ) -> None:
        self.models = models
        self.max_models = max_models
        self.ttl = ttl
        self._busy = busy
        self._unload = unload
        self.next_check = math.inf  # when a TTL or a reservation comes due
        self.last_loaded: str | None = None  # never the LRU choice: its caller will use it
        self._recheck_limit = False  # a load or a finish may have made a model unloadable
        self._doomed: set[str] = set()

    def loaded(self, name: str) -> None:
        """`name` was just loaded (or asked for again): make room now, never by unloading it."""
        self._note_use(name)
        self.last_loaded = name
        self.evict()

    def used(self, name: str) -> None:
        """A request for `name` finished: it is the most recently used, others may be idle."""
        self.models.touch(name)
        self._note_use(name)

    def maintain(self) -> None:
        """Between steps: unload what the limits let go. Costs a flag test and a clock read
        unless a load or finish happened or a TTL is due."""
        over = self._recheck_limit and self.models.count() > self.max_models
        self._recheck_limit = False
        if over or time.monotonic() >= self.next_check:
            self.evict()

    def idle_timeout(self) -> float | None:
        """How long an idle engine may block on its inbox: until eviction must look again,
        or forever (None) when nothing can come due."""
        if self.next_check == math.inf:
            return None
        return max(0.0, self.next_check - time.monotonic())

    def evict(self) -> None:
        """Unload what the policy (see the module docstring) lets go now. Busy or pinned
        models stay, even over the limit (a later finish looks again)."""
        self._recheck_limit = False
        now, busy = time.monotonic(), self._busy()
        unload, self._doomed = choose_unloads(
            self.models.usage(),
            busy,
            now,
            max_models=self.max_models,
            ttl=self.ttl,
            keep=self.last_loaded,
            doomed=self._doomed,
        )
        for name in unload:
            if self.models.remove_if_idle(name, busy):  # False: a submit got to it first
                self._unload(name)
        self.next_check = next_check(self.models.usage(), busy, now, self.ttl, self._doomed)

    def _note_use(self, name: str) -> None:
        self._recheck_limit = True
        entry = self.models.get(name)  # one entry, not a copy of the table: runs per finish
        limit = idle_limit(entry.use if entry is not None else ModelUse(name), self.ttl)
        if limit < math.inf:
            self.next_check = min(self.next_check, time.monotonic() + limit)


def resident_models(
    models: LoadedModels,
    live: Sequence[Request],
    ttl: float,
    now: float,
    embedding: Sequence[str] = (),
) -> tuple[ResidentModel, ...]:
    """Each loaded model, its live requests (`live`: every accepted, unfinished one; the
    embedding jobs' models in `embedding`, each running) and when the policy above would
    unload it if nothing else came."""
    out = []
    for info, use in models.snapshot():
        mine = [r for r in live if r.model == info.name]
        queued = sum(r.status is RequestStatus.WAITING for r in mine)
        embeds = sum(name == info.name for name in embedding)
        limit = idle_limit(use, ttl)
        busy = {info.name} if mine or embeds else set()
        idle = max(0.0, now - use.last_used)
        never = use.pinned or limit == math.inf or use.in_use(busy, now)
        out.append(
            ResidentModel(
                name=info.name,
                path=info.path,
                kind=info.kind,
                weight_bytes=info.weight_bytes,
                draft=info.draft.name if info.draft is not None else None,
                running=len(mine) - queued + embeds,
                queued=queued,
                pinned=use.pinned,
                idle_seconds=round(idle, 3),
                ttl_seconds=None if limit == math.inf else limit,
                unloads_in_seconds=None if never else round(max(0.0, limit - idle), 3),
            )
        )
    return tuple(out)
