"""Which model a request names: only models the store knows, loaded through the engine.

Models stay loaded only as long as the engine keeps them (`max_models`, `model_ttl_seconds`):
a name whose model the engine has unloaded is resolved and loaded again on its next request.
The preloaded model is pinned, so it never unloads.

Requests never name paths (no `/`-leading, `..`, `~` or backslashes) and never trigger
downloads: resolution goes through the store, and a store answer that is a bare directory
path is refused too. `model` omitted or "default" means the preloaded model.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

from mlxd.errors import InvalidRequest, ModelNotFound

DEFAULT_ALIASES = frozenset({"", "default"})
T = TypeVar("T")


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


class ModelRegistry:
    """Request model names -> loaded ModelInfo; loads on first use, one load at a time."""

    def __init__(self, engine: Any, default: Any | None, trust_remote_code: bool = False) -> None:
        self.engine = engine
        self.default = default
        self.trust_remote_code = trust_remote_code
        self.loaded: dict[str, Any] = {}
        self.created = int(time.time())
        if default is not None:
            self.loaded[default.name] = default
            if hasattr(engine, "load_model"):  # already loaded: this only pins it
                engine.load_model(default.path, default.name, pin=True)
        self._lock = asyncio.Lock()

    async def get(self, name: str | None) -> Any:
        """The ModelInfo of a loaded model; loads a store model on first use, and again
        after the engine unloaded it (the store check and check_runnable run each time)."""
        name = (name or "").strip()
        if name in DEFAULT_ALIASES:
            if self.default is None:
                raise ModelNotFound("no default model is loaded; name one in 'model'")
            return self.default
        info = self.loaded.get(name)
        if info is not None and self._engine_has(info.name):
            return info
        check_model_name(name)
        async with self._lock:
            info = self.loaded.get(name)
            if info is None or not self._engine_has(info.name):
                info = await asyncio.to_thread(self._resolve_and_load, name)
                self.loaded[name] = info
        return info

    async def start(self, name: str | None, submit: Callable[[Any], T]) -> tuple[Any, T]:
        """(info, submit(info)), `submit` running in a worker thread. When the engine unloaded
        the model between `get` and the submit (ModelNotFound from the engine, for a store
        model), load it again and retry once."""
        info = await self.get(name)
        try:
            return info, await asyncio.to_thread(submit, info)
        except ModelNotFound:
            if info is self.default or self._engine_has(info.name):
                raise
        info = await self.get(name)
        return info, await asyncio.to_thread(submit, info)

    def _engine_has(self, name: str) -> bool:
        """Whether the engine still has `name` loaded (a cheap, non-blocking look-up)."""
        try:
            self.engine.model(name)
        except ModelNotFound:
            return False
        return True

    def _resolve_and_load(self, name: str) -> Any:
        from mlxd.store.health import check_runnable
        from mlxd.store.resolve import resolve

        ref = resolve(name)
        if ref.source == "path":
            raise ModelNotFound(f"model '{name}' is not in the store", param="model")
        check_runnable(ref.path, trust_remote_code=self.trust_remote_code)
        return load_model(self.engine, ref)

    async def list_ids(self) -> list[str]:
        """The preloaded model first, then every model the store catalog lists."""
        ids = [self.default.name] if self.default is not None else []
        try:
            names = await asyncio.to_thread(_catalog_names)
        except Exception:  # the catalog is best effort; /v1/models must still answer
            names = []
        ids += [n for n in names if n not in ids]
        return ids

    async def exists(self, name: str) -> bool:
        if name in self.loaded:
            return True
        check_model_name(name)
        return name in await self.list_ids()

    def card(self, model_id: str) -> dict[str, Any]:
        return {"id": model_id, "object": "model", "created": self.created, "owned_by": "mlxd"}


def _catalog_names() -> list[str]:
    from mlxd.store.catalog import list_models

    return [str(getattr(entry, "name", entry)) for entry in list_models()]


def load_model(engine: Any, ref: Any) -> Any:
    """engine.load_model(ref) -> ModelInfo (the engine's registry keeps it)."""
    return engine.load_model(ref)
