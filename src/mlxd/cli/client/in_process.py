"""The CLI's in-process engine (the default cli.model_client.ModelClient): resolve a model
through the store, check it, load it into an Engine with max_batch=1 (no socket), and ask it
through the chat layer's start_chat, exactly as the server does. Heavy imports (engine, mlx)
happen only when a model is opened.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlxd.errors import MlxdError

if TYPE_CHECKING:
    from mlxd.chat.chat_request import ChatRequest
    from mlxd.chat.session import ChatStream
    from mlxd.engine import Engine, ModelInfo
    from mlxd.store.model_ref import ModelRef


@dataclass(slots=True)
class InProcessModel:
    """One engine with one model loaded; close() stops the engine thread."""

    engine: Engine
    info: ModelInfo
    ref: ModelRef

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def takes_images(self) -> bool:
        return self.info.image_processor is not None

    @property
    def server_url(self) -> None:
        return None

    def ask(self, request: ChatRequest) -> ChatStream:
        """Submit one chat request; returns the chat layer's ChatStream (iterable, cancel()).
        The request's max_tokens policy is its own: the CLI's is the whole remaining window."""
        from mlxd.chat.session import start_chat

        return start_chat(self.engine, self.info, request)

    def close(self) -> None:
        self.engine.close()


def resolve_model(ref: str | None, *, quiet: bool = False) -> ModelRef:
    """A ModelRef for `ref`, or the embedded default model when ref is None (its first use
    imports it into the store, announced on stderr unless quiet)."""
    from mlxd.store.runnable import resolve_or_default

    return resolve_or_default(ref, notify=None if quiet else _notify)


def _notify(message: str) -> None:
    sys.stderr.write(f"mlxd: {message}\n")
    sys.stderr.flush()


@contextmanager
def open_model(
    ref: ModelRef,
    *,
    trust_remote_code: bool = False,
    draft: str | None = None,
    overrides: dict[str, int] | None = None,
) -> Iterator[InProcessModel]:
    """Check and load `ref` (a ModelRef), with the draft model `draft` (a reference) when
    given, into a fresh single-request engine (`overrides`: EngineConfig settings, such as
    kv_bits); close it after."""
    from mlxd.store.runnable import runnable_draft, runnable_model

    ref = runnable_model(ref, trust_remote_code=trust_remote_code)
    drafter = runnable_draft(draft, trust_remote_code=trust_remote_code) if draft else None
    from mlxd.engine import Engine, EngineConfig

    config = EngineConfig.from_settings(
        max_batch=1, trust_remote_code=trust_remote_code, **(overrides or {})
    )
    engine = Engine(config)
    try:
        # A chat keeps its model (and the draft, loaded with it).
        info = engine.load_model(ref.path, ref.name, pin=True, draft=drafter)
        yield InProcessModel(engine=engine, info=info, ref=ref)
    finally:
        _close_quietly(engine)


def _close_quietly(engine: Engine) -> None:
    """Closing must not hide the error that got us here (or add a second traceback)."""
    try:
        engine.close()
    except MlxdError:
        pass
