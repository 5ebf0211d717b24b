"""The benchmark shelf stays a shelf: every script is in benchmarks/README.md, runs as
`python -m benchmarks.NAME` without patching sys.path, imports only what exists (a module
moved in src breaks a benchmark here, not in someone's next measurement), and has at most
one result file, named after it; every benchmark path the docs name exists.

Static checks only (ast and file names): no benchmark runs, nothing imports mlx.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
HELPERS = {"__init__", "common", "kv_peers"}  # the package, helpers (kv_peers: kv_memory_bench's)
DOCS = [ROOT / "README.md", ROOT / "pyproject.toml", BENCH / "README.md"]
DOCS += sorted((ROOT / "docs").rglob("*.md"))


def scripts() -> list[Path]:
    return sorted(p for p in BENCH.rglob("*.py") if p.stem not in HELPERS)


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_the_readme_names_every_script_by_its_command() -> None:
    readme = (BENCH / "README.md").read_text(encoding="utf-8")
    missing = [module_name(p) for p in scripts() if f"python -m {module_name(p)}" not in readme]
    assert not missing, f"benchmarks/README.md gives no `python -m` command for {missing}"


def test_no_script_patches_sys_path() -> None:
    patched = [str(p.relative_to(ROOT)) for p in BENCH.rglob("*.py") if "sys.path" in p.read_text()]
    assert not patched, f"run as `python -m benchmarks.NAME` instead of patching: {patched}"


def test_at_most_one_result_per_script_named_after_it() -> None:
    stems = {p.stem for p in scripts()}
    strays = [p.name for p in RESULTS.iterdir() if p.stem not in stems or p.suffix != ".json"]
    assert not strays, f"results must be NAME.json for a benchmark NAME: {strays}"


def _source_file(module: str) -> Path | None:
    """The file of an mlxd, benchmarks or tests module, found without importing it."""
    parts = module.split(".")
    base = ROOT / "src" if parts[0] == "mlxd" else ROOT
    path = base.joinpath(*parts)
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _defined_names(path: Path) -> set[str]:
    """Names bound at a module's top level (under `if`/`try` too): what `from M import` finds."""
    names: set[str] = set()
    body = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while body:
        node = body.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.If | ast.Try):
            body += node.body + node.orelse + getattr(node, "handlers", [])
            body += getattr(node, "finalbody", [])
        elif isinstance(node, ast.ExceptHandler):
            body += node.body
    return names


def _broken_imports(path: Path) -> list[str]:
    broken = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            wanted = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            wanted = [(node.module, a.name) for a in node.names]
        else:
            continue
        for module, name in wanted:
            if module.split(".")[0] not in ("mlxd", "benchmarks", "tests"):
                continue
            source = _source_file(module)
            if source is None:
                broken.append(f"line {node.lineno}: no module {module}")
            elif (
                name and name not in _defined_names(source) and not _source_file(f"{module}.{name}")
            ):
                broken.append(f"line {node.lineno}: {module} has no {name}")
    return broken


@pytest.mark.parametrize("path", scripts() + [BENCH / "common.py"], ids=module_name)
def test_every_project_import_resolves(path: Path) -> None:
    assert not _broken_imports(path), _broken_imports(path)


def test_every_benchmark_the_docs_name_exists() -> None:
    paths = re.compile(r"benchmarks/[\w/.-]*\w")
    modules = re.compile(r"python -m (benchmarks(?:\.\w+)+)")
    missing = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        missing += [ref for ref in set(paths.findall(text)) if not (ROOT / ref).exists()]
        missing += [ref for ref in set(modules.findall(text)) if not _source_file(ref)]
    assert not missing, f"named in the docs but not in the tree: {sorted(set(missing))}"
