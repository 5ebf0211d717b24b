"""Store entries and cached snapshots stay inside their folders: a link out is never followed.

mlxd's store (`$MLXD_HOME/models/NAME`) and the hub cache (`models--org--name/`) are folders
mlxd lists, checks and deletes on its own. A store entry that is a symlink to elsewhere, or a
file in one that links elsewhere, would make `list` and `health` read (and a careless `rm`
delete) whatever it points to. Such entries are reported, never read. Directories named by
path belong to the user and may link anywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

from mlxd.config import store_dir
from mlxd.store.files import model_files
from mlxd.store.hfcache import repo_for_snapshot
from mlxd.store.problems import Problem, broken

CODE = "outside_store"


def outside_problems(path: Path) -> list[Problem]:
    """Links of a store entry or cached snapshot that lead out of the store or the cached
    repo ([] for other directories). An entry that is itself such a link is not opened."""
    path = Path(os.path.abspath(path))
    store = Path(os.path.abspath(store_dir()))
    if path.parent == store:
        bound = Path(os.path.realpath(store))
        if not _inside(Path(os.path.realpath(path)), bound):
            return [broken(CODE, f"store entry {path.name} links outside the store "
                                 f"(to {os.path.realpath(path)}); not followed")]  # fmt: skip
    else:
        repo = repo_for_snapshot(path)
        if repo is None:
            return []
        bound = Path(os.path.realpath(repo.folder))
    leaks = [
        p.relative_to(path).as_posix()
        for p in model_files(path)
        if p.is_symlink() and not _inside(Path(os.path.realpath(p)), bound)
    ]
    if not leaks:
        return []
    return [broken(CODE, f"{len(leaks)} file(s) link outside the store (e.g. {leaks[0]}); "
                         "not followed")]  # fmt: skip


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents
