"""`list_models()`: every model in the HF cache and mlxd's store, broken ones included.

The server's GET /v1/models uses this too, so an entry never raises: problems land in
`status`/`problems`.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from mlxd.checkpoint import VisionFamily, context_window, vision_family
from mlxd.config import store_dir
from mlxd.store import facts
from mlxd.store.containment import CODE as OUTSIDE
from mlxd.store.files import file_size, model_files, mtime
from mlxd.store.health import check
from mlxd.store.hfcache import CachedRepo, scan_repos
from mlxd.store.model_ref import ModelRef, Source
from mlxd.store.problems import Problem, Severity
from mlxd.store.resolve import store_names


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One listed model. `id` is what `resolve()` accepts and what /v1/models reports."""

    id: str
    source: Source
    path: Path
    revision: str | None
    size: int  # bytes of the files in the model directory
    modified: float  # unix time of the newest file
    kind: str  # chat / base / embedding / vision / unknown
    quantization: str  # "4-bit g32", or the dtype when not quantized
    context_window: int | None
    status: str  # ok / incomplete / broken / refused
    problems: tuple[Problem, ...] = field(default=())
    vision: VisionFamily | None = None  # a vision model's family: batches, or why refused

    @property
    def name(self) -> str:
        return self.id

    @property
    def created(self) -> int:
        return int(self.modified)

    def ref(self) -> ModelRef:
        return ModelRef(name=self.id, path=self.path, source=self.source, revision=self.revision)

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "source": self.source,
            "path": str(self.path),
            "revision": self.revision,
            "size": self.size,
            "modified": self.modified,
            "kind": self.kind,
            "quantization": self.quantization,
            "context_window": self.context_window,
            "status": self.status,
            "problems": [p.to_dict() for p in self.problems],
            "vision": facts.vision_dict(self.vision),
        }


def list_models(pattern: str | None = None) -> list[CatalogEntry]:
    """Models whose id matches `pattern` (case-insensitive substring, or a glob with * ? [)."""
    entries = [_hf_entry(repo) for repo in scan_repos()]
    entries += [entry(store_dir() / name, name, "store", None) for name in store_names()]
    return [e for e in entries if _matches(e.id, pattern)]


def _matches(name: str, pattern: str | None) -> bool:
    if not pattern:
        return True
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatch(name.lower(), pattern.lower())
    return pattern.lower() in name.lower()


def _hf_entry(repo: CachedRepo) -> CatalogEntry:
    snapshot = repo.snapshot()
    if snapshot is None:
        status = Severity.INCOMPLETE if repo.incomplete_blobs() else Severity.BROKEN
        problem = Problem(status, "no_snapshot", f"no snapshot downloaded for {repo.repo_id}")
        return _bare(repo.repo_id, repo.folder, (problem,))
    return entry(snapshot, repo.repo_id, "hf", snapshot.name)


def entry(path: Path, name: str, source: Source, revision: str | None) -> CatalogEntry:
    """Describe one model directory for listing (headers only, never tensors)."""
    report = check(path)
    if any(p.code == OUTSIDE for p in report.problems):  # never read through the link
        modified = mtime(path, follow_links=False)
        return CatalogEntry(name, source, path, revision, 0, modified, "unknown", "-", None,
                            report.status, report.problems)  # fmt: skip
    config = facts.read_json(path / "config.json")
    tok_config = facts.read_json(path / "tokenizer_config.json")
    if not config:
        return _bare(name, path, report.problems, source, revision)
    template = facts.chat_template(path, tok_config)
    dtypes = [t.dtype for h in report.headers for t in h.tensors]
    size, modified = _size_and_mtime(path)
    return CatalogEntry(
        id=name,
        source=source,
        path=path,
        revision=revision,
        size=size,
        modified=modified,
        kind=facts.kind(path, config, template is not None),
        quantization=facts.quant_label(config, facts.dtype(config, dtypes)),
        context_window=context_window(config, tok_config.get("model_max_length")),
        status=report.status,
        problems=report.problems,
        vision=vision_family(config),
    )


def _bare(
    name: str,
    path: Path,
    problems: tuple[Problem, ...],
    source: Source = "hf",
    revision: str | None = None,
) -> CatalogEntry:
    size, modified = _size_and_mtime(path)
    status = next((s.value for s in Severity if any(p.severity is s for p in problems)), "ok")
    return CatalogEntry(name, source, path, revision, size, modified, "unknown", "-", None,
                      status, problems)  # fmt: skip


def _size_and_mtime(path: Path) -> tuple[int, float]:
    try:
        files = model_files(path)
    except OSError:
        files = []
    mtimes = [mtime(p) for p in files] or [mtime(path)]
    return sum(file_size(p) for p in files), max(mtimes)
