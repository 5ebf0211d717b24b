"""Finish the partial downloads an interrupted `pull` left behind, from where they stopped.

huggingface_hub >= 2 writes each download to a process-unique `<etag>.<id>.incomplete`
file and never reuses one after the process dies, so a Ctrl-C'd multi-GB shard would start
over. Over plain HTTP we resume it ourselves with a Range request, verify its sha256 (an LFS
file's etag), and link it into the snapshot; huggingface_hub then sees it present and skips
it. Anything we cannot verify is deleted and left to huggingface_hub to fetch afresh.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mlxd.store.hfcache import lfs_files, read_repo, repo_folder


def resume_partials(repo_id: str, commit: str, endpoint: str | None) -> list[str]:
    """Complete or delete every `blobs/*.incomplete` of the repo; returns the file names
    completed. Call with the repo's pull lock held (no other pull writes these files)."""
    folder = repo_folder(repo_id)
    blobs = folder / "blobs"
    partials = sorted(blobs.glob("*.incomplete")) if blobs.is_dir() else []
    if not partials:
        return []
    by_sha = lfs_files(read_repo(folder), commit)
    snapshot = folder / "snapshots" / commit
    done = []
    for partial in partials:
        sha = partial.name.split(".", 1)[0]
        name, size = by_sha.get(sha, ("", 0))
        if name and not os.path.lexists(snapshot / name):
            try:
                _finish(partial, repo_id, commit, name, size, endpoint)
                _link(blobs / sha, snapshot / name, partial)
                done.append(name)
                continue
            except Exception:  # noqa: BLE001 - any doubt: drop it, huggingface_hub refetches
                pass
        partial.unlink(missing_ok=True)
    return done


def _finish(
    partial: Path, repo_id: str, commit: str, name: str, size: int, endpoint: str | None
) -> None:
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    have = partial.stat().st_size
    if have > size:
        raise ValueError("partial file larger than the file")
    url = hf_hub_url(repo_id, name, revision=commit, endpoint=endpoint)
    meta = get_hf_file_metadata(url, endpoint=endpoint)
    if meta.size != size:
        raise ValueError("the hub reports another size")
    with partial.open("ab") as f:
        http_get(meta.location, f, resume_size=have, headers=build_hf_headers(),
                 expected_size=size)  # fmt: skip
    if _sha256(partial) != partial.name.split(".", 1)[0]:
        raise ValueError("checksum mismatch")


def _link(blob: Path, pointer: Path, partial: Path) -> None:
    os.replace(partial, blob)
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.symlink_to(os.path.relpath(blob, pointer.parent))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
