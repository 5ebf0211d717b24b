"""New store entries are written into a hidden work dir in the store, then renamed into place.

`Staging` is that protocol for `mlxd import` and `mlxd convert`: an interrupted or failed write
(even kill -9) never leaves a half model under a real name, and the work dirs of processes that
died are removed by the next write.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from pathlib import Path
from types import TracebackType

from mlxd.errors import InvalidRequest, MlxdError

# Hidden work dirs inside the store (store listings skip dot-names); "<prefix><pid>-<hex>".
TMP_PREFIX = ".import-"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_name(name: str) -> str:
    """A store entry name: one path segment of letters, digits, '.', '_' or '-'."""
    if not _NAME_RE.fullmatch(name) or ".." in name:
        raise InvalidRequest(
            f"invalid model name {name!r}: use letters, digits, '.', '_' and '-' (max 100)",
            param="name",
        )
    return name


def slugify(text: str) -> str:
    """'Smollm2 135M Instruct' -> 'smollm2-135m-instruct' (store-safe, lowercase)."""
    slug = re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")
    return re.sub(r"\.{2,}", ".", slug)[:100].strip("-.") or "model"


def check_free(store: Path, name: str, replace: bool) -> Path:
    """The entry's path; InvalidRequest if it exists and `replace` is false."""
    target = store / name
    if target.exists() and not replace:
        raise InvalidRequest(
            f"model {name!r} already exists in the store: pass --force to replace it "
            "or --name to choose another name",
            param="name",
        )
    return target


def check_space(store: Path, needed: int, what: str = "the import") -> None:
    free = shutil.disk_usage(store).free
    if free < needed * 1.05:
        raise MlxdError(
            f"not enough disk space in {store}: {what} needs {needed / 1e9:.2f} GB, "
            f"{free / 1e9:.2f} GB free"
        )


class Staging:
    """`with Staging(store, name, replace) as s:` write into `s.path`, then `s.install()`;
    leaving the block removes whatever was not installed."""

    def __init__(self, store: Path, name: str, replace: bool) -> None:
        self.store = store
        self.target = check_free(store, name, replace)
        self.replace = replace
        self.path = store / f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"

    def __enter__(self) -> Staging:
        self.store.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(self.store)
        self.path.mkdir()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def install(self, folder: Path | None = None) -> Path:
        """rename(2) `folder` (default: the work dir itself) to the entry's name; a directory
        rename never overwrites a non-empty target, so a racing writer is refused."""
        folder = folder or self.path
        old = None
        if self.replace and self.target.exists():
            old = self.target.with_name(f"{TMP_PREFIX}old-{os.getpid()}-{secrets.token_hex(4)}")
            self.target.rename(old)
        try:
            folder.rename(self.target)
        except OSError as e:
            if old is not None:
                old.rename(self.target)
            raise InvalidRequest(
                f"model {self.target.name!r} appeared in the store meanwhile"
            ) from e
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.target


def remove_stale_temps(store: Path) -> None:
    """Work dirs left by writers that were killed (their process is gone)."""
    for entry in store.glob(f"{TMP_PREFIX}*"):
        pid = entry.name.removeprefix(TMP_PREFIX).removeprefix("old-").split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
