"""The value every layer passes around to name one model on disk."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Source = Literal["hf", "store", "path"]


@dataclass(frozen=True, slots=True)
class ModelRef:
    """A resolved model: `path` is a directory holding config.json, weights and tokenizer.

    `name` is the repo id (hf), the store name (store) or the directory path (path);
    `revision` is the commit hash of an HF snapshot, None otherwise.
    """

    name: str
    path: Path
    source: Source
    revision: str | None = None
