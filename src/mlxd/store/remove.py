"""Remove a model from the HF cache or mlxd's store without ever leaving a corrupt entry."""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from mlxd.errors import InvalidRequest, ModelNotFound
from mlxd.store.files import file_size, model_files
from mlxd.store.hfcache import hub_cache_dir, locks_folder, scan_repos
from mlxd.store.model_ref import ModelRef
from mlxd.store.resolve import resolve


@dataclass(frozen=True, slots=True)
class RemovalPlan:
    """What `rm` will delete: a whole repo/store entry, or one revision of a cached repo."""

    name: str
    source: str
    folder: Path  # the repo folder (hf) or the checkpoint directory (store)
    revision: str | None  # set when only this snapshot of a multi-revision repo goes
    size: int

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "source": self.source, "path": str(self.folder),
                "revision": self.revision, "size": self.size}  # fmt: skip


def plan_removal(ref: str) -> RemovalPlan:
    """Find what `ref` names. Broken or snapshot-less cache entries can be named by their
    exact repo id, so an interrupted pull can always be removed."""
    try:
        model = resolve(ref)
    except ModelNotFound:
        repo = next((r for r in scan_repos() if r.repo_id.lower() == ref.lower()), None)
        if repo is None:
            raise
        return RemovalPlan(repo.repo_id, "hf", repo.folder, None, _tree_size(repo.folder))
    return _plan_for(model, explicit_revision="@" in ref)


def _plan_for(model: ModelRef, explicit_revision: bool) -> RemovalPlan:
    if model.source == "path":
        raise InvalidRequest(
            f"{model.path} is a directory, not a cached or stored model; delete it yourself"
        )
    if model.source == "store":
        return RemovalPlan(model.name, "store", model.path, None, _tree_size(model.path))
    folder = model.path.parent.parent
    repo = next(r for r in scan_repos() if r.folder == folder)
    if explicit_revision and len(repo.snapshots) > 1:
        size = sum(file_size(p) for p in model_files(model.path))
        return RemovalPlan(model.name, "hf", folder, model.revision, size)
    return RemovalPlan(model.name, "hf", folder, None, _tree_size(folder))


def execute(plan: RemovalPlan) -> None:
    """Delete per plan. Whole entries are first renamed out of sight (atomic), so an
    interrupted rm leaves either the full entry or nothing visible. An entry that is a
    symlink loses only the link: what it points to is never touched."""
    if plan.revision is not None:
        _remove_revision(plan)
        return
    if plan.folder.is_symlink():
        plan.folder.unlink()
        return
    _atomic_rmtree(plan.folder)
    if plan.source == "hf":
        shutil.rmtree(locks_folder(plan.name), ignore_errors=True)


def _remove_revision(plan: RemovalPlan) -> None:
    # huggingface_hub's strategy removes the snapshot, its refs and only the blobs that no
    # other revision links, in a safe order (refs and links before blobs).
    from huggingface_hub import scan_cache_dir

    scan_cache_dir(hub_cache_dir()).delete_revisions(plan.revision or "").execute()
    _drop_stale_locks(plan.name)


def _drop_stale_locks(repo_id: str) -> None:
    """Lock files of blobs that no longer exist are leftovers of finished or dead pulls."""
    locks = locks_folder(repo_id)
    blobs = hub_cache_dir() / f"models--{repo_id.replace('/', '--')}" / "blobs"
    for lock in locks.glob("*.lock") if locks.is_dir() else []:
        if not (blobs / lock.name.removesuffix(".lock")).exists():
            lock.unlink(missing_ok=True)


def _atomic_rmtree(folder: Path) -> None:
    trash = folder.parent / f".mlxd-trash-{uuid.uuid4().hex[:12]}"
    try:
        folder.rename(trash)
    except OSError as e:
        raise InvalidRequest(f"cannot remove {folder}: {e.strerror}") from e
    shutil.rmtree(trash, ignore_errors=True)


def _tree_size(folder: Path) -> int:
    """Bytes on disk; symlinks are skipped (cached blobs count once, and a link's target is
    not what rm deletes)."""
    if folder.is_symlink():
        return 0
    try:
        return sum(file_size(p) for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    except OSError:
        return 0
