"""Typed commands that cross into the engine thread (one inbox, one dataclass per kind)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from mlxd.engine.embedding import EmbedJob
from mlxd.engine.loaded_models import DraftInfo, ModelInfo
from mlxd.engine.request import Request


@dataclass(frozen=True, slots=True)
class Submit:
    request: Request


@dataclass(frozen=True, slots=True)
class Embed:
    job: EmbedJob


@dataclass(frozen=True, slots=True)
class Cancel:
    request_id: str


@dataclass(frozen=True, slots=True)
class LoadModel:
    name: str
    path: Path
    reply: Future[ModelInfo]
    draft: DraftInfo | None = None  # a draft model loaded with it (speculation, kind model)


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """A client's keep-alive for a loaded model (see ModelUse.keep_alive); counts as a use."""

    name: str
    seconds: float | None


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Fail whatever is pending and stop the thread."""


Message = Submit | Embed | Cancel | LoadModel | KeepAlive | Shutdown
