"""Which model a request names: only models the store knows, loaded through the engine.

Models stay loaded only as long as the engine keeps them (`max_models`, `model_ttl_seconds`):
a name whose model the engine has unloaded is resolved and loaded again on its next request,
and a model handed to a request is reserved in the engine until the request is submitted, so
no concurrent load can unload it in between. The preloaded model is pinned.

Requests never name paths (no `/`-leading, `..`, `~` or backslashes) and never trigger
downloads: resolution goes through the store, and a store answer that is a bare directory
path is refused too. `model` omitted or "default" means the preloaded model. A model whose
files `mlxd rm` removed is not served any more (404), even while its weights are loaded.
An operator's aliases (`mlxd serve --alias 'claude-*=default'`) map names, globs allowed, to
what is served, before any of this: the first matching pattern wins.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from mlxd.errors import EngineBusy, InvalidRequest, ModelNotFound

if TYPE_CHECKING:
    from mlxd.engine import Engine, ModelInfo

DEFAULT_ALIASES = frozenset({"", "default"})
RFC_3339 = "%Y-%m-%dT%H:%M:%SZ"
LOAD_ATTEMPTS = 2  # loads of one name per request before giving up (it keeps being pushed out)


def parse_aliases(values: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`--alias NAME=MODEL` values as (pattern, model) pairs, in order; NAME may be a glob
    (`claude-*`), MODEL is a name a request could send ("default": the preloaded model)."""
    aliases = []
    for value in values:
        pattern, sep, model = (part.strip() for part in value.partition("="))
        if not sep or not pattern or not model:
            raise InvalidRequest(f"--alias {value!r}: expected NAME=MODEL", param="alias")
        try:
            check_model_name(model)
        except InvalidRequest as e:
            raise InvalidRequest(f"--alias {value!r}: {e.message}", param="alias") from None
        aliases.append((pattern, model))
    return tuple(aliases)


def check_model_name(name: str) -> None:
    """Refuse names that look like filesystem paths (400)."""
    if (
        name.startswith("/")
        or name.startswith("~")
        or "\\" in name
        or ".." in name
        or "\x00" in name
        or name.startswith(".")
    ):
        raise InvalidRequest(
            f"model '{name}' looks like a path; name a model the store knows", param="model"
        )


class ServedModels:
    """Request model names -> loaded ModelInfo; loads on first use, one load at a time."""

    def __init__(
        self,
        engine: Engine,
        default: ModelInfo | None,
        trust_remote_code: bool = False,
        aliases: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.engine = engine
        self.default = default
        self.trust_remote_code = trust_remote_code
        self.aliases = aliases
        self.loaded: dict[str, ModelInfo] = {}
        self.windows: dict[str, int] = {}  # store models' context windows, from the catalog
        self.created = int(time.time())
        if default is not None:
            self.loaded[default.name] = default  # loaded pinned by server.launch.serve
        self._lock = asyncio.Lock()

    async def get(self, name: str | None) -> ModelInfo:
        """The ModelInfo of a loaded model, reserved in the engine (kept loaded for a while:
        the caller submits to it next). Loads a store model on first use, and again when
        the engine has unloaded it (the store check and check_runnable run each time).
        Raises EngineBusy when other loads push the model out again before it is reserved."""
        name = self.aliased((name or "").strip())
        if name in DEFAULT_ALIASES:
            if self.default is None:
                raise ModelNotFound("no default model is loaded; name one in 'model'")
            return self.default  # pinned: never unloaded
        info = self._still_stored(name)
        if info is not None and self._reserve(info.name):
            return info
        check_model_name(name)
        async with self._lock:
            info = self._still_stored(name)
            # A load is followed by a reservation too: another load (from outside this
            # table) may have pushed the model out again in between.
            for _ in range(LOAD_ATTEMPTS):
                if info is not None and self._reserve(info.name):
                    return info
                info = await asyncio.to_thread(self._resolve_and_load, name)
                self.loaded[name] = info
            if info is not None and self._reserve(info.name):
                return info
        raise EngineBusy(f"model '{name}' was unloaded again while loading; try again")

    def aliased(self, name: str) -> str:
        """The model the first alias whose pattern matches `name` names, else `name`."""
        for pattern, model in self.aliases:
            if fnmatchcase(name, pattern):
                return model
        return name

    def _still_stored(self, name: str) -> ModelInfo | None:
        """The loaded model of `name`, unless `mlxd rm` removed its files meanwhile: then it
        is forgotten and the request is a 404, as for any model the store does not know (the
        engine unloads it like any idle model)."""
        info = self.loaded.get(name)
        if info is None or os.path.isdir(info.path):
            return info
        del self.loaded[name]
        raise ModelNotFound(f"model '{name}' was removed from the store", param="model")

    def _reserve(self, name: str) -> bool:
        """Keep `name` loaded until its submit; False when the engine no longer has it."""
        try:
            self.engine.reserve(name)
        except ModelNotFound:
            return False
        return True

    def _resolve_and_load(self, name: str) -> ModelInfo:
        from mlxd.store.runnable import runnable_model

        try:
            ref = runnable_model(name, trust_remote_code=self.trust_remote_code, store_only=True)
        except ModelNotFound as e:
            raise with_alias_hint(name, e) from None
        return self.engine.load_model(ref)

    async def list_ids(self) -> list[str]:
        """The preloaded model first, then every model the store catalog lists."""
        ids = [self.default.name] if self.default is not None else []
        try:
            windows = await asyncio.to_thread(_catalog_windows)
        except Exception:  # the catalog is best effort; /v1/models must still answer
            windows = {}
        self.windows.update({n: w for n, w in windows.items() if w is not None})
        ids += [n for n in windows if n not in ids]
        return ids

    async def exists(self, name: str) -> bool:
        if name in self.loaded and os.path.isdir(self.loaded[name].path):
            return True
        check_model_name(name)
        return name in await self.list_ids()

    def card(self, model_id: str) -> dict[str, Any]:
        """The /v1/models entry, in OpenAI's fields and Anthropic's (`type`, `display_name`,
        `created_at`: the SDKs' models.list() read them); with the context window when it is
        known (`max_input_tokens`: the longest prompt that leaves room to generate). A model
        loaded with a draft model says which (`draft`)."""
        card: dict[str, Any] = {
            "id": model_id,
            "object": "model",
            "created": self.created,
            "owned_by": "mlxd",
            "type": "model",
            "display_name": model_id,
            "created_at": datetime.fromtimestamp(self.created, UTC).strftime(RFC_3339),
        }
        info = self.loaded.get(model_id)
        window = info.context_window if info is not None else self.windows.get(model_id)
        if window:
            card["context_window"] = window
            card["max_input_tokens"] = window - 1
        draft = self.draft(model_id)
        if draft is not None:
            card["draft"] = draft
        return card

    def draft(self, model_id: str) -> dict[str, Any] | None:
        """{"model", "kind", "num_draft_tokens", "kv_bytes_per_token"} of the draft loaded
        with `model_id` (its KV bytes per token: what a row drafting with it holds beside the
        target's), or None."""
        info = self.loaded.get(model_id)
        attached = self.engine.draft_of(info) if info is not None else None
        if attached is None:
            return None
        return {
            "model": attached.model,
            "kind": attached.kind.value,
            "num_draft_tokens": attached.num_draft_tokens,
            "kv_bytes_per_token": attached.kv_bytes_per_token,
        }


# Names hosted APIs give their models, which agents send by default (Claude Code, Codex).
_VENDOR_PREFIXES = ("claude-", "gpt-", "chatgpt-", "o1", "o3", "o4", "codex-")


def with_alias_hint(name: str, err: ModelNotFound) -> ModelNotFound:
    """A 404 for a hosted API's model name says how to serve it (`--alias`), not `mlxd pull`."""
    prefix = next((p for p in _VENDOR_PREFIXES if name.startswith(p)), None)
    if prefix is None:
        return err
    pattern = prefix if prefix.endswith("-") else prefix + "-"
    return ModelNotFound(
        f"model '{name}' is not served here: a client that sends this name needs the server "
        f"to map it, e.g. `mlxd serve --model MODEL --alias '{pattern}*=default'` (or set the "
        "client's model to one of GET /v1/models)",
        param="model",
    )


def _catalog_windows() -> dict[str, int | None]:
    """Each model the store lists -> its context window (None: its config does not say)."""
    from mlxd.store.catalog import list_models

    return {entry.name: entry.context_window for entry in list_models()}
