"""Read-only view of the Hugging Face hub cache (`models--org--name/{blobs,refs,snapshots}`).

We scan the layout ourselves instead of `huggingface_hub.scan_cache_dir` because that
function drops a corrupted repo into its warnings, while `mlxd list` must still show it,
marked broken. Paths are computed from the environment at call time (tests and users set
HF_HOME / HF_HUB_CACHE per process or per test; huggingface_hub reads them at import).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from mlxd.store.files import mtime

REPO_PREFIX = "models--"


def hub_cache_dir() -> Path:
    """The hub cache directory, honouring HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE and HF_HOME."""
    env = os.environ
    explicit = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(explicit)).expanduser()
    home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface",
    )
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def repo_folder(repo_id: str, cache_dir: Path | None = None) -> Path:
    """`models--org--name` under the cache (repo_id must already be validated)."""
    return (cache_dir or hub_cache_dir()) / (REPO_PREFIX + repo_id.replace("/", "--"))


def locks_folder(repo_id: str, cache_dir: Path | None = None) -> Path:
    return (cache_dir or hub_cache_dir()) / ".locks" / (REPO_PREFIX + repo_id.replace("/", "--"))


@dataclass(frozen=True, slots=True)
class CachedRepo:
    """One model repo in the cache: its refs (name -> commit) and snapshot directories."""

    repo_id: str
    folder: Path
    refs: dict[str, str] = field(default_factory=dict)
    snapshots: tuple[Path, ...] = ()

    def snapshot(self, revision: str | None = None) -> Path | None:
        """The snapshot for a ref name or (a prefix of) a commit hash; default: refs/main,
        else the only or newest snapshot."""
        by_hash = {p.name: p for p in self.snapshots}
        if revision is None:
            if "main" in self.refs and self.refs["main"] in by_hash:
                return by_hash[self.refs["main"]]
            return max(self.snapshots, key=mtime, default=None)
        if revision in self.refs:
            return by_hash.get(self.refs[revision])
        if revision in by_hash:
            return by_hash[revision]
        prefixed = [p for h, p in by_hash.items() if len(revision) >= 7 and h.startswith(revision)]
        return prefixed[0] if len(prefixed) == 1 else None

    def incomplete_blobs(self) -> list[Path]:
        """Partial downloads (`blobs/*.incomplete`) left by an interrupted pull."""
        try:
            return sorted((self.folder / "blobs").glob("*.incomplete"))
        except OSError:
            return []


def scan_repos(cache_dir: Path | None = None) -> list[CachedRepo]:
    """Every model repo folder in the cache, sorted by repo id; never raises on bad layout."""
    root = cache_dir or hub_cache_dir()
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    repos = []
    for folder in entries:
        if folder.name.startswith(REPO_PREFIX) and folder.is_dir():
            repos.append(read_repo(folder))
    return sorted(repos, key=lambda r: r.repo_id.lower())


def read_repo(folder: Path) -> CachedRepo:
    repo_id = folder.name[len(REPO_PREFIX) :].replace("--", "/")
    refs: dict[str, str] = {}
    refs_dir = folder / "refs"
    try:
        for ref in refs_dir.rglob("*"):
            if ref.is_file():
                refs[ref.relative_to(refs_dir).as_posix()] = ref.read_text().strip()
    except OSError:
        pass
    try:
        snapshots = tuple(sorted(p for p in (folder / "snapshots").iterdir() if p.is_dir()))
    except OSError:
        snapshots = ()
    return CachedRepo(repo_id=repo_id, folder=folder, refs=refs, snapshots=snapshots)


def repo_for_snapshot(path: Path) -> CachedRepo | None:
    """The cached repo a snapshot directory belongs to, if `path` is one."""
    path = Path(os.path.abspath(path))
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith(REPO_PREFIX):
        return read_repo(path.parent.parent)
    return None


def expected_files(repo: CachedRepo, commit: str) -> dict[str, int] | None:
    """Files and sizes of `commit` per huggingface_hub's tree cache (`trees/<commit>.json`,
    written before a snapshot download starts), or None when it was not recorded."""
    try:
        data = json.loads((repo.folder / "trees" / f"{commit}.json").read_text())
        return {name: int(info["size"]) for name, info in data["files"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def lfs_files(repo: CachedRepo, commit: str) -> dict[str, tuple[str, int]]:
    """sha256 -> (name, size) of the LFS files of `commit` per the recorded tree; the sha256
    is also the blob's name (its ETag) in the cache."""
    try:
        data = json.loads((repo.folder / "trees" / f"{commit}.json").read_text())
        files = data["files"].items()
        return {
            str(info["lfs_sha256"]): (name, int(info["size"]))
            for name, info in files
            if info.get("lfs_sha256")
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
