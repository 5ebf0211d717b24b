"""The backend's own map in docs/ARCHITECTURE.md (`<!-- arch: backend -->`), enforced: each
feature folder or top-level module imports only the backend parts its row lists, runtime
imports point down the rows, and `types:` names may be imported under TYPE_CHECKING only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.arch.test_arch_layers import ARROW, SRC, doc_block

BACKEND = SRC / "backend"
TYPES = "types:"
MAX_MODULES = 16  # STYLE.md habit 20: past ~15 modules a flat folder stops drawing the system


def backend_rows(lines: list[str]) -> dict[str, tuple[list[str], list[str]]]:
    """part -> (what it may import, what it may import for annotations only), top first."""
    rows: dict[str, tuple[list[str], list[str]]] = {}
    for line in lines:
        part, arrow, allowed = line.partition(ARROW)
        assert arrow, f"not a `part {ARROW} parts` row: {line!r}"
        runtime, _, typed = allowed.partition(TYPES)
        rows[part.strip()] = (runtime.split(), typed.split())
    return rows


def part_of(path: Path) -> str | None:
    """The feature folder or top-level module `path` belongs to (None: the package init)."""
    rel = path.relative_to(BACKEND)
    if len(rel.parts) > 1:
        return rel.parts[0]
    return None if rel.name == "__init__.py" else rel.stem


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            inside.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return inside


def backend_imports(path: Path) -> list[tuple[str, bool]]:
    """(backend part, under TYPE_CHECKING) for every import of the backend in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typed = _type_checking_nodes(tree)
    found: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "mlxd.backend":
            names = [f"mlxd.backend.{a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        else:
            continue
        parts = [n.split(".")[2] for n in names if n.startswith("mlxd.backend.")]
        found.extend((part, id(node) in typed) for part in parts)
    return found


def part_violations(
    part: str, imports: list[tuple[str, bool]], rows: dict[str, tuple[list[str], list[str]]]
) -> list[str]:
    """What of `imports` (part, under TYPE_CHECKING) the row of `part` does not allow."""
    runtime, typed = rows.get(part, ([], []))
    return [
        f"{part} imports {target}{' (annotations)' if annotation else ''}: not in its row"
        for target, annotation in imports
        if target != part and target not in runtime and not (annotation and target in typed)
    ]


def violations(files: list[Path], rows: dict[str, tuple[list[str], list[str]]]) -> list[str]:
    bad: list[str] = []
    for f in files:
        part = part_of(f)
        if part is not None:
            found = part_violations(part, backend_imports(f), rows)
            bad.extend(f"{f.relative_to(SRC)}: {v}" for v in found)
    return bad


ROWS = backend_rows(doc_block("backend"))
FILES = sorted(BACKEND.rglob("*.py"))


def test_backend_imports_follow_the_map() -> None:
    bad = violations(FILES, ROWS)
    assert not bad, "\n".join(bad)


def test_the_backend_map_names_every_part_and_points_down() -> None:
    assert set(ROWS) == {p for p in map(part_of, FILES) if p is not None}
    order = list(ROWS)
    for part, (runtime, typed) in ROWS.items():
        for target in runtime:
            assert target in ROWS, f"{part} {ARROW} {target}: no row for {target}"
            assert order.index(target) > order.index(part), f"{part} {ARROW} {target}"
        assert set(typed) <= set(ROWS)


def test_speculation_may_not_import_distributed(tmp_path: Path) -> None:
    """The checker sees a forbidden edge, and an annotation-only edge used at runtime."""
    fake = tmp_path / "m.py"
    fake.write_text(
        "from typing import TYPE_CHECKING\n"
        "from mlxd.backend.distributed.cluster import follow\n"
        "if TYPE_CHECKING:\n    from mlxd.backend import vision\n"
    )
    assert backend_imports(fake) == [("distributed", False), ("vision", True)]
    assert part_violations("speculation", [("distributed", False)], ROWS)
    assert part_violations("api", [("vision", False)], ROWS)
    assert part_violations("api", [("vision", True)], ROWS) == []
    assert part_of(BACKEND / "speculation" / "drafts.py") == "speculation"
    assert part_of(BACKEND / "batch.py") == "batch" and part_of(BACKEND / "__init__.py") is None


@pytest.mark.parametrize(
    "folder", sorted({p.parent for p in SRC.rglob("*.py")}), ids=lambda p: str(p.relative_to(SRC))
)
def test_no_folder_holds_more_than_16_modules(folder: Path) -> None:
    modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
    assert len(modules) <= MAX_MODULES, f"{folder.relative_to(SRC)}: {len(modules)} modules"


def test_feature_folders_init_only_reexports() -> None:
    """A feature folder's `__init__.py` holds a docstring, imports and `__all__`, nothing else."""
    for init in BACKEND.glob("*/__init__.py"):
        for node in ast.parse(init.read_text(encoding="utf-8")).body:
            is_doc = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            is_all = isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__"
            assert is_doc or is_all or isinstance(node, ast.ImportFrom), ast.unparse(node)
