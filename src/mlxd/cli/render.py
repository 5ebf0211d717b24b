"""Rendering helpers shared by every command: errors, JSON, sizes, a progress bar."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from mlxd.errors import MlxdError, one_line

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


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


class ProgressBar:
    """A transient rich bar on stderr when `enabled` (a TTY, not --json); every call is a
    no-op otherwise. `update` reports counted work, `stage` names a step of unknown length."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label = label
        self.enabled = enabled
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def __enter__(self) -> ProgressBar:
        if not self.enabled:
            return self
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

        self.bar = Progress(
            TextColumn(self.label),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.description}"),
            console=Console(stderr=True),
            transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task("", total=None)
        return self

    def update(self, done: int, total: int, name: str) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, completed=done, total=total, description=name)

    def stage(self, name: str) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, description=name)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
