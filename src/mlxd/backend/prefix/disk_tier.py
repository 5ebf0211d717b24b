"""The prefix cache's disk tier (`serve --prefix-cache-dir DIR`): snapshots kept as files, so a
restarted server still finds the conversations it served.

Layout: DIR/<model fingerprint>/<sha256 of the file>.safetensors, written by mlx-lm's
`save_prompt_cache` with our metadata (format, fingerprint, token ids, kind). The fingerprint
covers mlx-lm's version, the checkpoint's config.json and each weight file's size, header and
first and last MiB, so a file of another model (or another version of it) is never consulted.
A file is checked against its name's digest before it is parsed: a corrupt, truncated, foreign
or unreadable file is never loaded, and is deleted. The directory is bounded in bytes (oldest
files go first). Every method runs on the engine thread; writes happen when a snapshot is
stored, so they cost that thread the file's write time.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from mlx_lm import __version__ as mlx_lm_version
from mlx_lm.models.cache import load_prompt_cache, save_prompt_cache

from mlxd.backend.mlx_lm.compat import PromptCache
from mlxd.types import common_prefix_len

FORMAT = "mlxd-prefix-1"
_SAMPLE = 1 << 20  # bytes of each weight file's start and end in the fingerprint
_CACHE_CLASSES = frozenset(
    {"KVCache", "RotatingKVCache", "QuantizedKVCache", "ChunkedKVCache", "ArraysCache"}
)


@dataclass(frozen=True, slots=True)
class DiskEntry:
    path: Path
    tokens: tuple[int, ...]
    kind: str
    trimmable: bool


class DiskTier:
    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._models: dict[str, str] = {}  # model key -> fingerprint
        self._entries: dict[str, dict[tuple[int, ...], DiskEntry]] = {}  # fingerprint -> ...
        self._sizes = {p: p.stat().st_size for p in self.root.glob("*/*.safetensors")}

    @property
    def nbytes(self) -> int:
        return sum(self._sizes.values())

    def register(self, model: str, checkpoint: Path) -> None:
        """Index the files of `checkpoint`'s fingerprint; unreadable ones are deleted."""
        fp = fingerprint(checkpoint)
        self._models[model] = fp
        if fp in self._entries:
            return
        entries: dict[tuple[int, ...], DiskEntry] = {}
        for path in sorted((self.root / fp).glob("*.safetensors")):
            entry = _read_entry(path, fp)
            if entry is None:
                self._delete(path)
            else:
                entries[entry.tokens] = entry
        self._entries[fp] = entries

    def save(self, model: str, tokens: list[int], cache: PromptCache, kind: str) -> None:
        fp = self._models.get(model)
        if fp is None or tuple(tokens) in self._entries[fp]:
            return
        folder = self.root / fp
        folder.mkdir(exist_ok=True, mode=0o700)
        tmp = folder / f".{os.getpid()}-{time.monotonic_ns()}.safetensors"
        trimmable = all(layer.is_trimmable() for layer in cache)  # type: ignore[attr-defined]
        meta = {"format": FORMAT, "model": fp, "kind": kind, "trimmable": str(trimmable)}
        try:
            save_prompt_cache(str(tmp), cache, {**meta, "tokens": json.dumps(list(tokens))})
            path = folder / f"{_digest(tmp.read_bytes())}.safetensors"
            os.replace(tmp, path)
        except OSError:  # a full or read-only disk: the memory tier still has it
            tmp.unlink(missing_ok=True)
            return
        self._sizes[path] = path.stat().st_size
        self._entries[fp][tuple(tokens)] = DiskEntry(path, tuple(tokens), kind, trimmable)
        self._bound()

    def nearest(self, model: str, prompt: list[int]) -> tuple[DiskEntry, int] | None:
        """The file serving the most of prompt[:-1] (exact prefixes; trimmable ones cut back),
        and how many tokens it serves."""
        fp = self._models.get(model)
        if fp is None:
            return None
        head = tuple(prompt[:-1])
        best: tuple[DiskEntry, int] | None = None
        for entry in self._entries[fp].values():
            n = common_prefix_len(entry.tokens, head)
            usable = n if n == len(entry.tokens) or entry.trimmable else 0
            if usable and (best is None or usable > best[1]):
                best = (entry, usable)
        return best

    def load(self, model: str, entry: DiskEntry) -> PromptCache | None:
        """The verified cache of `entry`, or None (the file is deleted) when it does not check."""
        try:
            data = entry.path.read_bytes()
        except OSError:
            data = b""
        cache = None
        if data and _digest(data) == entry.path.stem:
            try:
                cache = load_prompt_cache(str(entry.path))  # type: ignore[no-untyped-call]
            except Exception:  # noqa: BLE001 - a file that does not parse is not loaded
                cache = None
        if cache is None or not _holds(cache, len(entry.tokens)):
            self.discard(model, list(entry.tokens))
            return None
        os.utime(entry.path)  # recently used: evicted last
        return list(cache)

    def discard(self, model: str, tokens: list[int]) -> None:
        fp = self._models.get(model)
        entry = self._entries.get(fp or "", {}).pop(tuple(tokens), None)
        if entry is not None:
            self._delete(entry.path)

    def _bound(self) -> None:
        """Delete the least recently used files until the directory fits its budget."""
        if self.nbytes <= self.max_bytes:
            return
        for path in sorted(self._sizes, key=_mtime):
            for entries in self._entries.values():
                stale = [t for t, e in entries.items() if e.path == path]
                for tokens in stale:
                    del entries[tokens]
            self._delete(path)
            if self.nbytes <= self.max_bytes:
                return

    def _delete(self, path: Path) -> None:
        self._sizes.pop(path, None)
        path.unlink(missing_ok=True)


def fingerprint(checkpoint: Path) -> str:
    """What identifies a checkpoint's caches: mlx-lm's version, the config and the weights."""
    h = hashlib.sha256(f"{FORMAT}\0{mlx_lm_version}\0".encode())
    h.update((checkpoint / "config.json").read_bytes())
    for weights in sorted(checkpoint.glob("*.safetensors")):
        size = weights.stat().st_size
        h.update(f"\0{weights.name}\0{size}\0".encode())
        with weights.open("rb") as f:
            h.update(f.read(_SAMPLE))
            f.seek(max(0, size - _SAMPLE))
            h.update(f.read(_SAMPLE))
    return h.hexdigest()[:32]


def _read_entry(path: Path, fp: str) -> DiskEntry | None:
    """The entry a file's safetensors header describes, or None if it is not ours or broken."""
    try:
        with path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > 64 << 20:
                return None
            meta = json.loads(f.read(length)).get("__metadata__", {})
        ours = meta.get("0.format") == FORMAT and meta.get("0.model") == fp
        classes = {v for k, v in meta.items() if k.startswith("1.")}
        tokens = json.loads(meta["0.tokens"])
        if not ours or not classes <= _CACHE_CLASSES or len(path.stem) != 64:
            return None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return None
        return DiskEntry(path, tuple(tokens), str(meta["0.kind"]), meta["0.trimmable"] == "True")
    except (OSError, ValueError, KeyError, struct.error, AttributeError):
        return None


def _holds(cache: list[object], tokens: int) -> bool:
    """Every layer that counts its tokens holds `tokens` of them."""
    return all(getattr(layer, "offset", tokens) == tokens for layer in cache)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
