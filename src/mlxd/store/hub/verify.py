"""Checksums of downloaded files against the hub's: the LFS sha256 of a weight file, the git
blob id (sha1 of `blob <size>\\0` + content) of any other file.

`pull` checks every file it downloads against what the hub's API listed before the download
(not against the file server's own headers); `health --verify` checks a cached snapshot
against the listing huggingface_hub recorded for its commit (`trees/<commit>.json`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mlxd.store.hfcache import CachedRepo, repo_for_snapshot
from mlxd.store.problems import Problem, broken

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Checksum:
    """What a file must hash to: `sha256` (LFS files) or `git-sha1` (the git blob id)."""

    kind: str
    digest: str

    @classmethod
    def of_listing(cls, lfs_sha256: str | None, blob_id: str | None) -> Checksum | None:
        if lfs_sha256:
            return cls("sha256", lfs_sha256.lower())
        if blob_id:
            return cls("git-sha1", blob_id.lower())
        return None

    def actual(self, path: Path) -> str:
        """The same kind of digest of the file at `path` (read in chunks)."""
        if self.kind == "sha256":
            digest = hashlib.sha256()
        else:
            digest = hashlib.sha1()
            digest.update(b"blob %d\0" % path.stat().st_size)
        with path.open("rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class Mismatch:
    name: str
    expected: Checksum
    actual: str

    @property
    def message(self) -> str:
        return (
            f"{self.name}: checksum mismatch ({self.expected.kind} is {self.actual[:12]}..., "
            f"the hub says {self.expected.digest[:12]}...)"
        )


def mismatches(
    root: Path, expected: dict[str, Checksum], names: Iterable[str] | None = None
) -> list[Mismatch]:
    """Files under `root` (all of `expected`, or only `names`) whose content does not hash to
    what is expected. Missing files are not mismatches (health reports them)."""
    out = []
    for name in sorted(expected if names is None else names):
        want = expected.get(name)
        path = root / name
        if want is None or not path.is_file():
            continue
        got = want.actual(path)
        if got != want.digest:
            out.append(Mismatch(name, want, got))
    return out


def recorded_checksums(repo: CachedRepo, commit: str) -> dict[str, Checksum]:
    """Checksums of `commit` from huggingface_hub's recorded listing ({} if none)."""
    try:
        data = json.loads((repo.folder / "trees" / f"{commit}.json").read_text())
        files = data["files"].items()
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    out = {}
    for name, info in files:
        if isinstance(info, dict):
            checksum = Checksum.of_listing(info.get("lfs_sha256"), info.get("blob_id"))
            if checksum is not None:
                out[name] = checksum
    return out


def verify_problems(path: Path) -> list[Problem]:
    """`health --verify`: every file of a cached snapshot against its recorded checksum."""
    repo = repo_for_snapshot(path)
    expected = recorded_checksums(repo, path.name) if repo is not None else {}
    return [broken("checksum_mismatch", m.message) for m in mismatches(path, expected)]


def discard(path: Path) -> None:
    """Remove a snapshot file and, if it is a link into the cache, the blob behind it (so
    nothing loads the bad copy and the next pull fetches it again)."""
    if path.is_symlink():
        target = Path(os.path.realpath(path))
        path.unlink()
        target.unlink(missing_ok=True)
    else:
        path.unlink(missing_ok=True)
