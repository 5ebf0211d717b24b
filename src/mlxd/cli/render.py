"""Rendering helpers shared by every command: errors, JSON, sizes."""

from __future__ import annotations

import json
import sys

from mlxd.errors import MlxdError, one_line


def print_error(error: MlxdError | str, *, json_mode: bool = False) -> None:
    """One line on stderr; with --json, one JSON object on stderr."""
    if isinstance(error, str):
        error = MlxdError(error)
    message = one_line(error, with_type=False, whole=True)
    if json_mode:
        body = {"error": error.to_dict() | {"message": message}}
        sys.stderr.write(json.dumps(body) + "\n")
    else:
        sys.stderr.write(f"mlxd: error: {message}\n")
    sys.stderr.flush()


def print_json(obj: object) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()


def human_size(n: int | float | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"
