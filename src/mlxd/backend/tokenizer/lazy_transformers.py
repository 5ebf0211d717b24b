"""Import mlx-lm without importing transformers (about 0.8 s of `mlxd run`'s start-up) or
huggingface_hub's Hub client (about 0.1 s).

The `mlx_lm` package imports four transformers names when it is first imported, none of which
mlxd needs unless a model's tokenizer must load through transformers (checkpoint_tokenizer.py says
which): `PreTrainedTokenizer` (mlx_lm.generate, annotations), `PreTrainedTokenizerBase`,
`PreTrainedTokenizerFast` and `AutoTokenizer` (mlx_lm.tokenizer_utils: NewlineTokenizer
subclasses the second and is registered with the third; TokenizerWrapper compares with the first).

`defer()` (run by mlxd.backend before any mlx import) installs a one-shot import hook: while the
`mlx_lm` package runs its own imports, `transformers` and `transformers.tokenization_utils_base`
are stand-in modules holding those names; then they leave sys.modules, so any later
`import transformers` is the real one. `real_transformers()` imports it and puts the real classes
in place of the stand-ins in mlx_lm's modules (rebasing NewlineTokenizer, replaying its
registration). The `AutoTokenizer` stand-in stays: it calls transformers' AutoTokenizer, except
in mlxd's loader (`checkpoint_tokenizers()`), where a tokenizer that `tokenizer_route` allows
loads as a CheckpointTokenizer.
Likewise `huggingface_hub.snapshot_download` (mlx_lm.utils, called only for a model not on disk)
is a function that imports the real one when called.
tests/integration/backend/tokenizer/test_lazy_transformers.py fails if mlx-lm imports other names.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["AutoTokenizer", "STAND_INS", "checkpoint_tokenizers", "defer", "real_transformers"]


class PreTrainedTokenizerBase:
    """Stand-in for transformers' class of that name while mlx_lm imports."""

    def apply_chat_template(self, *args: object, **kwargs: object) -> object:
        raise NotImplementedError(
            "a transformers stand-in (mlxd.backend.tokenizer.lazy_transformers)"
        )


class PreTrainedTokenizer(PreTrainedTokenizerBase):
    """Stand-in for transformers' class of that name while mlx_lm imports."""


class PreTrainedTokenizerFast(PreTrainedTokenizerBase):
    """Stand-in for transformers' class of that name while mlx_lm imports."""


class AutoTokenizer:
    """transformers.AutoTokenizer as mlx-lm's tokenizer loader sees it: inside
    `checkpoint_tokenizers()` (mlxd's loader), a checkpoint whose tokenizer `tokenizer_route`
    sends to `tokenizers` loads as a CheckpointTokenizer; everything else goes to transformers'
    own AutoTokenizer (imported then), so other callers of mlx-lm get mlx-lm's behaviour."""

    _registrations: list[tuple[tuple[object, ...], dict[str, Any]]] = []

    @classmethod
    def register(cls, *args: object, **kwargs: Any) -> None:
        with _lock:
            if _real is None:
                cls._registrations.append((args, kwargs))
                return
        _real.AutoTokenizer.register(*args, **kwargs)

    @classmethod
    def from_pretrained(cls, path: str | Path, *args: object, **kwargs: Any) -> object:
        if _mlxd_loads.get() and not args and set(kwargs) <= {"trust_remote_code"}:
            from mlxd.backend.tokenizer.checkpoint_tokenizer import (
                CheckpointTokenizer,
                TokenizerLoader,
                tokenizer_route,
            )

            trust = bool(kwargs.get("trust_remote_code"))
            if tokenizer_route(Path(path), trust_remote_code=trust).loader is (
                TokenizerLoader.TOKENIZERS
            ):
                return CheckpointTokenizer(Path(path), real_transformers)
        return real_transformers().AutoTokenizer.from_pretrained(path, *args, **kwargs)


_mlxd_loads: ContextVar[bool] = ContextVar("mlxd_loads", default=False)


@contextmanager
def checkpoint_tokenizers() -> Iterator[None]:
    """Within (this thread or task), mlx-lm's tokenizer loads follow `tokenizer_route`."""
    token = _mlxd_loads.set(True)
    try:
        yield
    finally:
        _mlxd_loads.reset(token)


def snapshot_download(*args: Any, **kwargs: Any) -> str:
    """huggingface_hub.snapshot_download, imported when first called."""
    from huggingface_hub import snapshot_download as download

    return str(download(*args, **kwargs))


# name -> stand-in; the module each lives in for mlx_lm's `from transformers... import`.
STAND_INS: dict[str, type] = {
    "AutoTokenizer": AutoTokenizer,
    "PreTrainedTokenizer": PreTrainedTokenizer,
    "PreTrainedTokenizerFast": PreTrainedTokenizerFast,
    "PreTrainedTokenizerBase": PreTrainedTokenizerBase,
}
_MODULES = {
    "transformers": ("AutoTokenizer", "PreTrainedTokenizer", "PreTrainedTokenizerFast"),
    "transformers.tokenization_utils_base": ("PreTrainedTokenizerBase",),
}

_lock = threading.RLock()
_real: ModuleType | None = None  # transformers, once real_transformers() imported it


def defer() -> None:
    """Make the first import of `mlx_lm` in this process run with the stand-ins."""
    if "mlx_lm" not in sys.modules and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def real_transformers() -> ModuleType:
    """transformers itself; on the first call, mlx_lm's modules get the real classes."""
    global _real
    with _lock:
        if _real is None:
            import transformers

            _swap_in(transformers)
            _real = transformers
            register: Callable[..., None] = transformers.AutoTokenizer.register
            for args, kwargs in AutoTokenizer._registrations:
                register(*args, **kwargs)
            AutoTokenizer._registrations.clear()
        return _real


def _swap_in(transformers: ModuleType) -> None:
    real = {name: getattr(transformers, name) for name in STAND_INS if name != "AutoTokenizer"}
    stand_in_ids = {id(STAND_INS[name]): cls for name, cls in real.items()}
    for name, module in list(sys.modules.items()):
        if name == "mlx_lm" or name.startswith("mlx_lm."):
            for attr, value in list(vars(module).items()):
                if id(value) in stand_in_ids:
                    setattr(module, attr, stand_in_ids[id(value)])
    for name, cls in real.items():
        subclasses: list[type] = STAND_INS[name].__subclasses__()
        for sub in subclasses:
            if sub.__module__ != __name__:  # e.g. mlx-lm's NewlineTokenizer
                sub.__bases__ = tuple(cls if b is STAND_INS[name] else b for b in sub.__bases__)


@contextmanager
def _stand_ins() -> Iterator[None]:
    with _lazy_snapshot_download(), _transformers_stand_ins():
        yield


@contextmanager
def _lazy_snapshot_download() -> Iterator[None]:
    import huggingface_hub  # its package imports its submodules lazily

    if "snapshot_download" in vars(huggingface_hub):  # imported already: nothing to defer
        yield
        return
    huggingface_hub.snapshot_download = snapshot_download  # type: ignore[assignment]
    try:
        yield
    finally:
        del huggingface_hub.snapshot_download  # back to the package's lazy lookup


@contextmanager
def _transformers_stand_ins() -> Iterator[None]:
    if "transformers" in sys.modules:  # already imported for real: nothing to defer
        yield
        return
    modules = {}
    for module_name, names in _MODULES.items():
        module = ModuleType(module_name, "mlxd stand-in (mlxd.backend.tokenizer.lazy_transformers)")
        for name in names:
            setattr(module, name, STAND_INS[name])
        modules[module_name] = module
    sys.modules.update(modules)
    try:
        yield
    finally:
        for module_name, module in modules.items():
            if sys.modules.get(module_name) is module:
                del sys.modules[module_name]


class _Finder(importlib.abc.MetaPathFinder):
    """Finds `mlx_lm` as the other finders do and wraps its loader; leaves sys.meta_path when
    mlx_lm is executed (a find_spec alone, as store.health's, is no import)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "mlx_lm":
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _StandInLoader(spec.loader, self)
                return spec
        return None


class _StandInLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, finder: _Finder) -> None:
        self._loader = loader
        self._finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        module.__loader__ = self._loader  # the package keeps its own loader (resources)
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        with _stand_ins():
            self._loader.exec_module(module)
