"""docs/ARCHITECTURE.md names every module of src/mlxd, so the map cannot lag the tree.

A module counts as named when the doc spells its file (`name.py`, `name.symbol`) or, in the
packages whose folders have an arch block of their own, when a row of that block is its name.
"""

from __future__ import annotations

import re

from tests.unit.arch.test_arch_layers import DOC, SRC

ROW_PACKAGES = {"backend", "store", "server", "cli"}  # packages mapped row by row


def _named(stem: str, package: str, doc: str, rows: set[str]) -> bool:
    if f"{stem}.py" in doc or f"`{stem}." in doc:
        return True
    return package in ROW_PACKAGES and stem in rows


def test_every_module_is_named_in_the_map() -> None:
    doc = DOC.read_text(encoding="utf-8")
    rows = {m.group(1) for m in re.finditer(r"^(\w+)\s+──▶", doc, re.M)}
    unnamed = [
        str(path.relative_to(SRC))
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "__init__.py"
        and not _named(path.stem, path.relative_to(SRC).parts[0], doc, rows)
    ]
    assert not unnamed, f"docs/ARCHITECTURE.md does not name: {unnamed}"
