"""The maps of store, server and cli in docs/ARCHITECTURE.md (`<!-- arch: store -->`, ...),
enforced as the backend's is: each feature folder or top-level module imports only the parts
of its package that its row lists, rows point down, `types:` edges are annotations only, and
a feature folder's `__init__.py` holds nothing but a docstring and re-exports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.arch.test_arch_layers import ARROW, SRC, doc_block
from tests.unit.arch.test_backend_features import backend_rows as rows_of

PACKAGES = ("store", "server", "cli")


def part_of(path: Path, package: str) -> str | None:
    """The feature folder or top-level module of `package` that `path` is (None: its init)."""
    rel = path.relative_to(SRC / package)
    if len(rel.parts) > 1:
        return rel.parts[0]
    return None if rel.name == "__init__.py" else rel.stem


def package_imports(path: Path, package: str) -> list[tuple[str, bool]]:
    """(part of `package`, under TYPE_CHECKING) for every import of the package in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typed = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for stmt in node.body
        for n in ast.walk(stmt)
    }
    prefix = f"mlxd.{package}"
    found: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == prefix:
            names = [f"{prefix}.{a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        else:
            continue
        parts = [n.split(".")[2] for n in names if n.startswith(prefix + ".")]
        found.extend((part, id(node) in typed) for part in parts)
    return found


def violations(package: str, rows: dict[str, tuple[list[str], list[str]]]) -> list[str]:
    bad: list[str] = []
    for f in sorted((SRC / package).rglob("*.py")):
        part = part_of(f, package)
        if part is None:
            continue
        runtime, typed = rows.get(part, ([], []))
        for target, annotation in package_imports(f, package):
            if target != part and target not in runtime and not (annotation and target in typed):
                bad.append(f"{f.relative_to(SRC)} imports {package}.{target}: not in its row")
    return bad


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_follow_the_package_map(package: str) -> None:
    bad = violations(package, rows_of(doc_block(package)))
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package", PACKAGES)
def test_the_package_map_names_every_part_and_points_down(package: str) -> None:
    rows = rows_of(doc_block(package))
    parts = {part_of(f, package) for f in (SRC / package).rglob("*.py")} - {None}
    assert set(rows) == parts
    order = list(rows)
    for part, (runtime, typed) in rows.items():
        for target in runtime:
            assert order.index(target) > order.index(part), f"{part} {ARROW} {target}"
        assert set(typed) <= set(rows)


@pytest.mark.parametrize("package", PACKAGES)
def test_feature_inits_only_reexport(package: str) -> None:
    for init in (SRC / package).glob("*/__init__.py"):
        for node in ast.parse(init.read_text(encoding="utf-8")).body:
            is_doc = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            is_all = isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__"
            assert is_doc or is_all or isinstance(node, ast.ImportFrom), ast.unparse(node)


def test_the_checker_sees_a_feature_reaching_up() -> None:
    fake = SRC / "server" / "openai" / "routes.py"
    assert part_of(fake, "server") == "openai"
    assert ("generation", False) in package_imports(fake, "server")
    rows = {"openai": ([], []), "generation": ([], [])}
    assert any("imports server.generation" in v for v in violations("server", rows))
