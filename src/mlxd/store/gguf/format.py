"""Markers of mlxd's GGUF imports, kept light (no numpy/gguf import) for fast store scans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Bumped when the produced checkpoint changes, so the default model is re-imported.
IMPORT_FORMAT = 1
# config.json key recording where an imported checkpoint came from.
INFO_KEY = "mlxd_import"


def import_info(path: Path) -> dict[str, Any] | None:
    """The `mlxd_import` block of `path`/config.json, or None if absent or unreadable."""
    try:
        meta = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    info = meta.get(INFO_KEY) if isinstance(meta, dict) else None
    return info if isinstance(info, dict) else None


def is_current(path: Path) -> bool:
    """True if `path` holds a complete import made by this version of the importer."""
    info = import_info(path)
    fresh = info is not None and info.get("format") == IMPORT_FORMAT
    return fresh and (path / "model.safetensors").is_file()
