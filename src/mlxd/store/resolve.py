"""Turn a user's model reference into a ModelRef.

Forms: a directory path (absolute, ./ ../ ~, or an existing directory), `org/name[@rev]`
in the HF cache, a name in mlxd's store, or a unique case-insensitive substring of either.
"""

from __future__ import annotations

import os
from pathlib import Path

from mlxd.config import store_dir
from mlxd.errors import AmbiguousModel, InvalidRequest, ModelBroken, ModelNotFound
from mlxd.store.hfcache import CachedRepo, scan_repos
from mlxd.store.model_ref import ModelRef

_PATH_PREFIXES = ("/", "./", "../", "~", ".\\", "..\\")


def resolve(ref: str) -> ModelRef:
    """Resolve `ref`; raises ModelNotFound, AmbiguousModel (listing candidates) or
    InvalidRequest (empty reference)."""
    ref = ref.strip()
    if not ref:
        raise InvalidRequest("empty model reference", param="model")
    if _looks_like_path(ref):
        return _resolve_path(ref)
    name, _, revision = ref.partition("@")
    rev = revision or None
    if "@" in ref and not (name and revision):
        raise InvalidRequest(f"invalid model reference {ref!r}: expected NAME@REVISION")
    store = store_names()
    if rev is None and name in store:
        return _store_ref(name)
    repos = scan_repos()
    exact = [r for r in repos if r.repo_id == name] or [
        r for r in repos if r.repo_id.lower() == name.lower()
    ]
    if len(exact) == 1:
        return _hf_ref(exact[0], rev)
    store_exact = [s for s in store if s.lower() == name.lower()]
    if rev is None and len(store_exact) == 1:
        return _store_ref(store_exact[0])
    return _fuzzy(name, rev, repos, store)


def store_names() -> list[str]:
    """Names of the checkpoints in mlxd's own store (its subdirectories)."""
    try:
        return sorted(p.name for p in store_dir().iterdir() if p.is_dir() and p.name[0] != ".")
    except OSError:
        return []


def _looks_like_path(ref: str) -> bool:
    return ref.startswith(_PATH_PREFIXES) or os.path.isdir(ref)


def _resolve_path(ref: str) -> ModelRef:
    path = Path(ref).expanduser()
    if not path.exists():
        raise ModelNotFound(f"model directory {ref} not found", param="model")
    if not path.is_dir():
        raise ModelNotFound(f"{ref} is not a model directory", param="model")
    if not os.access(path, os.R_OK | os.X_OK):
        raise ModelBroken(f"model directory {ref} is not readable", param="model")
    path = path.resolve()
    return ModelRef(name=str(path), path=path, source="path", revision=None)


def _store_ref(name: str) -> ModelRef:
    return ModelRef(name=name, path=store_dir() / name, source="store", revision=None)


def _hf_ref(repo: CachedRepo, rev: str | None) -> ModelRef:
    snapshot = repo.snapshot(rev)
    if snapshot is None:
        what = f"{repo.repo_id}@{rev}" if rev else repo.repo_id
        raise ModelNotFound(
            f"model {what} has no downloaded snapshot, try `mlxd pull {what}`", param="model"
        )
    return ModelRef(name=repo.repo_id, path=snapshot, source="hf", revision=snapshot.name)


def _fuzzy(name: str, rev: str | None, repos: list[CachedRepo], store: list[str]) -> ModelRef:
    needle = name.lower()
    hf_hits = [r for r in repos if needle in r.repo_id.lower()]
    store_hits = [] if rev else [s for s in store if needle in s.lower()]
    total = len(hf_hits) + len(store_hits)
    if total == 1:
        return _hf_ref(hf_hits[0], rev) if hf_hits else _store_ref(store_hits[0])
    if total > 1:
        names = [r.repo_id for r in hf_hits] + [f"{s} (store)" for s in store_hits]
        raise AmbiguousModel(
            f"model {name!r} is ambiguous, it matches: {', '.join(names)}", param="model"
        )
    hint = name if "/" in name else "ORG/NAME"
    raise ModelNotFound(f"model {name!r} not found, try `mlxd pull {hint}`", param="model")
