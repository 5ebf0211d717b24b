"""Which files make an MLX model, and small readers shared by health, inspect and pull."""

from __future__ import annotations

import fnmatch
from pathlib import Path

# What `mlxd pull` downloads: weights, configs, tokenizer files, templates. Never code or
# pickles (*.py, *.bin, *.pt, ...): mlxd never executes code shipped with a model.
ALLOW_PATTERNS = [
    "*.safetensors",
    "*.json",
    "tokenizer.model",
    "*.tiktoken",
    "*.txt",
    "*.jinja",
]
PICKLE_PATTERNS = ["*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl", "*.pickle"]
IGNORE_PATTERNS = ["*.py", *PICKLE_PATTERNS]

LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/"
_LFS_POINTER_MAX = 1024  # pointer files are ~130 bytes


def wanted(name: str) -> bool:
    """True if `pull` would download a repo file with this (relative, posix) name."""
    base = name.rsplit("/", 1)[-1]
    if any(fnmatch.fnmatch(base, p) for p in IGNORE_PATTERNS):
        return False
    return any(fnmatch.fnmatch(base, p) for p in ALLOW_PATTERNS)


def is_pickle(name: str) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in PICKLE_PATTERNS)


def is_lfs_pointer(path: Path) -> bool:
    """A Git-LFS pointer checked out instead of the real file (`git clone` without git-lfs)."""
    try:
        if path.stat().st_size > _LFS_POINTER_MAX:
            return False
        with path.open("rb") as f:
            return f.read(len(LFS_POINTER_PREFIX)) == LFS_POINTER_PREFIX
    except OSError:
        return False


def model_files(path: Path) -> list[Path]:
    """Regular files under a model directory (following snapshot symlinks), sorted.

    Dangling symlinks are included so callers can report them as missing blobs."""
    out = []
    for p in sorted(path.rglob("*")):
        if p.is_file() or p.is_symlink() and not p.exists():
            if not any(part.startswith(".") for part in p.relative_to(path).parts):
                out.append(p)
    return out


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def mtime(path: Path, *, follow_links: bool = True) -> float:
    """The modification time of `path` (of the link itself unless follow_links), 0 if gone."""
    try:
        return (path.stat() if follow_links else path.lstat()).st_mtime
    except OSError:
        return 0.0


def dir_size(path: Path) -> int:
    """Bytes of a model directory's files (snapshot links followed); 0 if unreadable."""
    try:
        return sum(file_size(p) for p in model_files(path))
    except OSError:
        return 0
