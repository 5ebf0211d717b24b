"""`pull`: validate, preflight, then download an MLX model's files with huggingface_hub.

The network is touched only after the repo id passed validation, and the cache only after
the preflight (repo reachable, files safe, disk space) passed, so a refused pull leaves
nothing behind.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from mlxd.errors import DownloadError, InvalidRequest, ModelNotFound, ModelRefused, one_line
from mlxd.store import files as F
from mlxd.store.hfcache import hub_cache_dir, locks_folder, repo_folder
from mlxd.store.hub.resume import resume_partials
from mlxd.store.hub.verify import Checksum, discard, mismatches

if TYPE_CHECKING:
    from filelock import FileLock

_REVISION = re.compile(r"[A-Za-z0-9._/-]{1,200}")


@dataclass(frozen=True, slots=True)
class PullPlan:
    repo_id: str
    revision: str | None  # as requested (None: main)
    commit: str
    files: tuple[tuple[str, int], ...]  # (repo-relative name, size) to download
    # What each file must hash to, per the hub's API listing (LFS sha256 or git blob id).
    checksums: dict[str, Checksum] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)

    @property
    def snapshot(self) -> Path:
        return repo_folder(self.repo_id) / "snapshots" / self.commit


def parse_repo_ref(text: str) -> tuple[str, str | None]:
    """`org/name[@rev]` -> (repo_id, revision); raises InvalidRequest before any network use."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    repo_id, _, revision = text.strip().partition("@")
    if not repo_id or repo_id.startswith(("/", "~", ".")) or ".." in repo_id or "\\" in repo_id:
        raise InvalidRequest(f"invalid repo id {text!r}: expected ORG/NAME", param="model")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        reason = one_line(e, with_type=False)
        raise InvalidRequest(f"invalid repo id {repo_id!r}: {reason}", param="model") from e
    if "@" in text and not _valid_revision(revision):
        raise InvalidRequest(f"invalid revision {revision!r}", param="model")
    return repo_id, revision or None


def _valid_revision(rev: str) -> bool:
    parts = rev.split("/")
    return bool(_REVISION.fullmatch(rev)) and all(p not in ("", ".", "..") for p in parts)


def safe_repo_path(name: str) -> bool:
    """A repo file name that stays inside the snapshot folder."""
    p = PurePosixPath(name)
    return bool(name) and "\\" not in name and not p.is_absolute() and ".." not in p.parts


def hub_endpoint() -> str | None:
    """HF_ENDPOINT read now (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_ENDPOINT") or None


def preflight(repo_id: str, revision: str | None) -> PullPlan:
    """Ask the hub what to download. Gated/private/missing repos, unsafe file lists and
    pickle-only repos fail here, before anything is written to the cache: a gated repo by its
    `gated` field and a HEAD on one file (its metadata is public, its files are not)."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub_endpoint())
    try:
        info = api.model_info(repo_id, revision=revision, files_metadata=True)
    except Exception as e:  # noqa: BLE001 - mapped to one clear line
        raise hub_error(e, repo_id, revision) from e
    siblings = [(s.rfilename, int(s.size or 0)) for s in info.siblings or []]
    checksums = {
        s.rfilename: c
        for s in info.siblings or []
        if (c := Checksum.of_listing(s.lfs.sha256 if s.lfs else None, s.blob_id)) is not None
    }
    unsafe = [name for name, _ in siblings if not safe_repo_path(name)]
    if unsafe:
        raise ModelRefused(f"{repo_id} lists a file outside its folder ({unsafe[0]!r}); refused")
    wanted = tuple((n, s) for n, s in siblings if F.wanted(n))
    if not any(n.endswith(".safetensors") for n, _ in wanted):
        if any(F.is_pickle(n) for n, _ in siblings):
            raise ModelRefused(f"{repo_id} has only pickle weights (*.bin/*.pt); refused")
        raise DownloadError(f"{repo_id} has no *.safetensors weights: not an MLX-loadable model")
    if not info.sha:
        raise DownloadError(f"the hub did not report a commit for {repo_id}")
    _check_file_access(repo_id, revision, info.sha, bool(info.gated), wanted)
    return PullPlan(repo_id, revision, info.sha, wanted, checksums)


def _check_file_access(
    repo_id: str, revision: str | None, commit: str, gated: bool, files: tuple[tuple[str, int], ...]
) -> None:
    """HEAD one file before anything is written: the hub lists a gated repo's metadata to
    everyone and refuses only its file downloads (401 without a token, 403 without access)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    name = next((n for n, _ in files if n == "config.json"), files[0][0])
    url = hf_hub_url(repo_id, name, revision=commit, endpoint=hub_endpoint())
    try:
        get_hf_file_metadata(url, endpoint=hub_endpoint())
    except Exception as e:  # noqa: BLE001 - mapped to one clear line
        status = getattr(getattr(e, "response", None), "status_code", None)
        if gated and status in (401, 403):
            raise DownloadError(_gated_message(repo_id, revision)) from e
        raise hub_error(e, repo_id, revision) from e


def _gated_message(repo_id: str, revision: str | None) -> str:
    what = f"{repo_id}@{revision}" if revision else repo_id
    return f"{what} is gated: accept its terms on the hub and log in (`hf auth login` or HF_TOKEN)"


def check_disk_space(plan: PullPlan) -> None:
    needed = plan.total_bytes - downloaded_bytes(plan)
    target = hub_cache_dir()
    while not target.exists() and target != target.parent:
        target = target.parent
    free = shutil.disk_usage(target).free
    if needed > free:
        raise DownloadError(f"not enough disk space for {plan.repo_id}: needs {needed} bytes, "
                            f"{free} free in {target}")  # fmt: skip


def downloaded_bytes(plan: PullPlan) -> int:
    """Bytes of the plan already on disk: finished files plus partial `.incomplete` blobs."""
    done = sum(size for name, size in plan.files if (plan.snapshot / name).exists())
    blobs = repo_folder(plan.repo_id) / "blobs"
    partial = sum(F.file_size(p) for p in blobs.glob("*.incomplete")) if blobs.is_dir() else 0
    return done + partial


def download(plan: PullPlan) -> Path:
    """Download the plan's files into the HF cache; returns the snapshot directory.

    Completed files of an earlier, interrupted pull are kept and skipped. Raises
    DownloadError with one line on any failure."""
    from huggingface_hub import ResolvedRevision, snapshot_download
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # the CLI draws its own bar from bytes on disk
    with _repo_lock(plan.repo_id):
        # Files already in the snapshot were checked by the pull that fetched them; resumed
        # ones are checked by resume_partials.
        present = {name for name, _ in plan.files if os.path.lexists(plan.snapshot / name)}
        present |= set(resume_partials(plan.repo_id, plan.commit, hub_endpoint()))
        try:
            # A resolved revision makes huggingface_hub download exactly the preflighted commit.
            path = snapshot_download(
                plan.repo_id,
                revision=ResolvedRevision(plan.commit, initial=plan.revision, repo_id=plan.repo_id),
                cache_dir=hub_cache_dir(),
                allow_patterns=[glob.escape(name) for name, _ in plan.files],
                endpoint=hub_endpoint(),
                max_workers=4,
            )
        except Exception as e:  # noqa: BLE001 - mapped to one clear line
            raise hub_error(e, plan.repo_id, plan.revision) from e
        _verify(plan, Path(path), [name for name, _ in plan.files if name not in present])
        _write_ref(plan)
    return Path(path)


def _verify(plan: PullPlan, snapshot: Path, names: list[str]) -> None:
    """Check the files just downloaded against the hub's listing; a bad one is removed (the
    next pull fetches it again) and the pull fails."""
    bad = mismatches(snapshot, plan.checksums, names)
    for mismatch in bad:
        discard(snapshot / mismatch.name)
    if bad:
        raise DownloadError(
            f"download of {plan.repo_id} is corrupt: {bad[0].message}; removed "
            f"{len(bad)} bad file(s), run `mlxd pull {plan.repo_id}` again"
        )


def _write_ref(plan: PullPlan) -> None:
    """Point refs/<revision> (default main) at the commit, atomically, once the files are in:
    huggingface_hub skips this when handed an already resolved revision."""
    name = plan.revision or "main"
    if name == plan.commit:
        return
    ref = repo_folder(plan.repo_id) / "refs" / name
    ref.parent.mkdir(parents=True, exist_ok=True)
    tmp = ref.with_name(f".{ref.name}.mlxd-tmp")
    tmp.write_text(plan.commit)
    os.replace(tmp, ref)


def _repo_lock(repo_id: str) -> FileLock:
    """One pull per repo at a time, so stale partial files can be cleared safely."""
    from filelock import FileLock

    folder = locks_folder(repo_id)
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(str(folder / "mlxd-pull.lock"))


def hub_error(e: BaseException, repo_id: str, revision: str | None) -> Exception:
    """Map a huggingface_hub / network exception to one clear MlxdError."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    what = f"{repo_id}@{revision}" if revision else repo_id
    reason = one_line(e, with_type=False)
    if isinstance(e, GatedRepoError):
        return DownloadError(_gated_message(repo_id, revision))
    if isinstance(e, RepositoryNotFoundError):
        return ModelNotFound(f"{repo_id} not found on the hub (or private: log in with "
                             "`hf auth login` or set HF_TOKEN)")  # fmt: skip
    if isinstance(e, RevisionNotFoundError):
        return ModelNotFound(f"revision {revision!r} of {repo_id} not found on the hub")
    if isinstance(e, OfflineModeIsEnabled):
        return DownloadError(f"cannot pull {what}: offline mode is on (HF_HUB_OFFLINE)")
    if isinstance(e, HfHubHTTPError):
        status = e.response.status_code if e.response is not None else "?"
        if status in (401, 403):
            return DownloadError(f"{what}: access denied ({status}); it may be private or gated")
        return DownloadError(f"hub error pulling {what} (HTTP {status}): {reason}")
    if "httpx" in type(e).__module__ and any(
        word in type(e).__name__ for word in ("Connect", "Timeout", "Network", "Protocol")
    ):
        where = hub_endpoint() or "https://huggingface.co"
        return DownloadError(f"cannot reach the hub at {where}: {reason}")
    if isinstance(e, ValueError | OSError | ConnectionError) or "httpx" in type(e).__module__:
        return DownloadError(f"download of {what} failed: {reason}")
    return DownloadError(f"download of {what} failed: {one_line(e)}")
