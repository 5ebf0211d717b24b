"""ModelInfo and the registry of loaded models (load once, reuse by name)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What callers need to build requests for a loaded model. `tokenizer` is mlx-lm's
    TokenizerWrapper, passed through as an opaque value."""

    name: str
    path: Path
    tokenizer: Any
    context_window: int
    generation_defaults: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    eos_token_ids: set[int] = field(default_factory=set)
    vocab_size: int = 0


@dataclass(slots=True)
class Entry:
    info: ModelInfo
    loaded: Any  # backend LoadedModel; only the engine thread touches it


class ModelRegistry:
    """Thread-safe name -> loaded model map. Written on the engine thread, read anywhere."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}

    def get(self, name: str) -> Entry | None:
        with self._lock:
            return self._entries.get(name)

    def put(self, entry: Entry) -> None:
        with self._lock:
            self._entries[entry.info.name] = entry

    def remove(self, name: str) -> Entry | None:
        with self._lock:
            return self._entries.pop(name, None)

    def names(self) -> list[str]:
        with self._lock:
            return list(self._entries)
