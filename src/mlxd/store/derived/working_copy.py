"""`clone_model`: a working copy of a model as plain files in a directory of the user's (to edit
a chat template or a config), never symlinks into the hub cache.

The copy is written into a hidden sibling of the target and renamed into place, so an
interrupted clone leaves no half copy under the asked name; both ends are health-checked.
"""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxd.errors import InvalidRequest, ModelBroken, ModelTooLarge
from mlxd.store.files import model_files
from mlxd.store.health import check, check_runnable
from mlxd.store.problems import Severity
from mlxd.store.resolve import resolve


@dataclass(frozen=True, slots=True)
class CloneResult:
    source: str
    path: Path
    files: int
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "path": str(self.path), "files": self.files,
                "bytes": self.bytes}  # fmt: skip


def clone_model(source: str, directory: Path) -> CloneResult:
    """Copy the model `source` resolves to into `directory` (absent or empty).

    Raises ModelNotFound / AmbiguousModel, ModelBroken (a broken or incomplete source, or a
    copy that fails its check), InvalidRequest (a non-empty or unusable directory)."""
    target = Path(directory).expanduser().absolute()
    _check_target(target)
    ref = resolve(source)
    try:  # shipped code is copied as a file, never run: only broken sources are refused
        check_runnable(ref.path, trust_remote_code=True)
    except ModelTooLarge:
        pass
    work = target.with_name(f".{target.name}.clone-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        copied = _copy_files(ref.path, work)
        bad = [p for p in check(work, deep=True).problems if p.severity is not Severity.TOO_LARGE]
        if bad:
            raise ModelBroken(f"the copy of {ref.name} failed its health check: {bad[0].message}")
        _check_target(target)  # nothing appeared there meanwhile
        os.replace(work, target)  # replaces an empty directory, never a non-empty one
    except OSError as e:
        raise InvalidRequest(f"cannot write {target}: {e.strerror or e}") from e
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return CloneResult(ref.name, target, len(copied), sum(copied))


def _check_target(target: Path) -> None:
    if target.is_symlink() or target.exists() and not target.is_dir():
        raise InvalidRequest(f"{target} exists and is not a directory", param="directory")
    if target.is_dir() and any(target.iterdir()):
        raise InvalidRequest(f"directory {target} is not empty", param="directory")


def _copy_files(source: Path, work: Path) -> list[int]:
    """Copy every model file's bytes (links followed); the sizes written."""
    work.mkdir(parents=True)
    sizes = []
    for path in model_files(source):
        dest = work / path.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)  # copies the bytes a snapshot link points at
        sizes.append(dest.stat().st_size)
    return sizes
