"""The disk tier's directory: the files it wrote, and nothing else.

A marker file (`mlxd-prefix-cache.json`) identifies the directory as the disk tier's and is its
manifest: every file the tier wrote (`<fingerprint>/<digest>.safetensors`), with its size, least
recently used first. Only those files are counted, read or deleted; anything else in the
directory is left alone. A directory without the marker is taken only when it is empty (or new),
or holds nothing but such files (an earlier mlxd's tier, whose files every load still checks);
otherwise the tier refuses it at start, so pointing it at a folder of checkpoints deletes
nothing. No link is followed: each folder is opened relative to its parent with O_NOFOLLOW,
so a fingerprint folder replaced by a link to elsewhere is never read from, written to or
deleted in.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import time
from collections import OrderedDict
from pathlib import Path
from typing import BinaryIO

from mlxd.errors import InvalidRequest

MARKER = "mlxd-prefix-cache.json"
DIR_FORMAT = "mlxd-prefix-dir-1"
_FOLDER = re.compile(r"[0-9a-f]{32}")
_FILE = re.compile(r"[0-9a-f]{64}\.safetensors")
_TMP = re.compile(r"\.tmp-\d+-\d+\.safetensors|\.mlxd-prefix-cache\.json\.\d+")  # a crash's
_MAX_MARKER = 64 << 20
_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NOFOLLOW_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class CacheDir:
    """The disk tier's own files under `root`; raises InvalidRequest at start when `root`
    holds anything the tier did not write. Names are `<folder>/<file>` (see the module)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser().resolve()  # a link naming the root is the user's
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._fd = os.open(self.root, _NOFOLLOW_DIR)
        except OSError as e:
            raise InvalidRequest(
                f"cannot use {self.root} for the prefix cache: {e.strerror}"
            ) from e
        marked = self._read_marker()
        self._files = marked if marked is not None else self._adopt()
        if marked is None:
            self._write_marker()
        for name in os.listdir(self._fd):
            if _TMP.fullmatch(name) and self._is_file(self._fd, name):
                os.unlink(name, dir_fd=self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @property
    def nbytes(self) -> int:
        return sum(self._files.values())

    def names(self, folder: str) -> list[str]:
        """The files of `folder` the tier wrote, least recently used first."""
        return [name for name in self._files if name.partition("/")[0] == folder]

    def oldest(self) -> str | None:
        return next(iter(self._files), None)

    def open(self, name: str) -> BinaryIO:
        """`name` opened for reading, following no link on the way; only a plain file opens
        (a FIFO would block a read forever). Raises OSError."""
        folder, _, file = name.rpartition("/")
        dir_fd = os.open(folder, _NOFOLLOW_DIR, dir_fd=self._fd) if folder else self._fd
        try:
            fd = os.open(file, _NOFOLLOW_READ, dir_fd=dir_fd)
        finally:
            if folder:
                os.close(dir_fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(f"{name} is not a plain file")
        return os.fdopen(fd, "rb")

    def temp_path(self) -> Path:
        """Where to write a file before `commit` names it (in the root: no folder to follow)."""
        return self.root / f".tmp-{os.getpid()}-{time.monotonic_ns()}.safetensors"

    def commit(self, temp: Path, name: str) -> None:
        """Move the written `temp` to `name` and record it. Raises OSError (temp removed)."""
        folder, _, file = name.partition("/")
        try:
            size = os.stat(temp.name, dir_fd=self._fd, follow_symlinks=False).st_size
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder, 0o700, dir_fd=self._fd)
            fd = os.open(folder, _NOFOLLOW_DIR, dir_fd=self._fd)
            try:
                os.replace(temp.name, file, src_dir_fd=self._fd, dst_dir_fd=fd)
            finally:
                os.close(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temp.name, dir_fd=self._fd)
            raise
        self._files[name] = size
        self._files.move_to_end(name)
        self._write_marker()

    def touch(self, name: str) -> None:
        """`name` was used: evicted last."""
        if name in self._files:
            self._files.move_to_end(name)
            self._write_marker()

    def delete(self, name: str) -> None:
        """Forget `name` and remove it, unless its folder is no longer a plain folder."""
        if self._files.pop(name, None) is None:
            return
        folder, _, file = name.partition("/")
        try:
            fd = os.open(folder, _NOFOLLOW_DIR, dir_fd=self._fd)
        except OSError:
            fd = -1  # gone, or replaced by a link: nothing of ours to remove there
        if fd >= 0:
            try:
                if self._is_file(fd, file):
                    os.unlink(file, dir_fd=fd)
            except OSError:
                pass
            finally:
                os.close(fd)
        self._write_marker()

    # ---- the marker -----------------------------------------------------------------

    def _read_marker(self) -> OrderedDict[str, int] | None:
        """The files the marker lists (None: no marker)."""
        if MARKER not in os.listdir(self._fd):
            return None
        try:
            with self.open(MARKER) as f:
                if os.fstat(f.fileno()).st_size > _MAX_MARKER:
                    raise ValueError("too large")
                data = json.loads(f.read())
            if data.get("format") != DIR_FORMAT:
                raise ValueError("another format")
            return OrderedDict((str(n), int(s)) for n, s in data["files"] if _ours(str(n)))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise InvalidRequest(
                f"{self.root / MARKER} is not a prefix cache marker mlxd can read ({e}): "
                "give the prefix cache an empty or new directory"
            ) from e

    def _write_marker(self) -> None:
        """Replace the marker at once (a crash leaves the old one or the new one)."""
        body = json.dumps({"format": DIR_FORMAT, "files": list(self._files.items())})
        temp = f".{MARKER}.{os.getpid()}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(temp, flags, 0o600, dir_fd=self._fd)
            with os.fdopen(fd, "w") as f:
                f.write(body)
            os.replace(temp, MARKER, src_dir_fd=self._fd, dst_dir_fd=self._fd)
        except OSError:  # a full or read-only disk: the next write tries again
            pass

    def _adopt(self) -> OrderedDict[str, int]:
        """An unmarked root: empty, or an earlier tier's files only (taken), else refused."""
        files: OrderedDict[str, int] = OrderedDict()
        for folder in sorted(os.listdir(self._fd)):
            if not (_FOLDER.fullmatch(folder) and self._is_dir(folder)):
                self._refuse(folder)
            fd = os.open(folder, _NOFOLLOW_DIR, dir_fd=self._fd)
            try:
                for file in sorted(os.listdir(fd)):
                    info = os.stat(file, dir_fd=fd, follow_symlinks=False)
                    if not (_FILE.fullmatch(file) and stat.S_ISREG(info.st_mode)):
                        self._refuse(f"{folder}/{file}")
                    files[f"{folder}/{file}"] = info.st_size
            finally:
                os.close(fd)
        return files

    def _refuse(self, name: str) -> None:
        raise InvalidRequest(
            f"the prefix cache directory {self.root} holds {name!r}, which mlxd did not "
            "write: give it an empty or new directory (--prefix-cache-dir, "
            "MLXD_PREFIX_CACHE_DIR)"
        )

    # ---- no links -------------------------------------------------------------------

    def _is_dir(self, name: str) -> bool:
        try:
            return stat.S_ISDIR(os.stat(name, dir_fd=self._fd, follow_symlinks=False).st_mode)
        except OSError:
            return False

    @staticmethod
    def _is_file(dir_fd: int, name: str) -> bool:
        try:
            return stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except OSError:
            return False


def _ours(name: str) -> bool:
    folder, _, file = name.partition("/")
    return bool(_FOLDER.fullmatch(folder) and _FILE.fullmatch(file))
