"""The prefix cache's disk tier (`serve --prefix-cache-dir DIR`): snapshots kept as files, so a
restarted server still finds the conversations it served.

Layout: DIR/<model fingerprint>/<sha256 of the file>.safetensors, written by mlx-lm's
`save_prompt_cache` with our metadata (format, fingerprint, token ids, kind). The fingerprint
covers mlx-lm's version, the checkpoint's config.json and each weight file's size, header and
first and last MiB, so a file of another model (or another version of it) is never consulted.
A file is checked against its name's digest before it is parsed: a corrupt, truncated, foreign
or unreadable file is never loaded, and is deleted. The tier touches only the files it wrote
(cache_dir: a manifest, no link followed, a directory holding anything else refused at start).
The directory is bounded in bytes (least recently used files go first). Every method runs on
the engine thread; writes happen when a snapshot is stored, so they cost that thread the
file's write time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from mlx_lm import __version__ as mlx_lm_version
from mlx_lm.models.cache import save_prompt_cache

from mlxd.backend.mlx_lm.compat import PromptCache
from mlxd.backend.prefix.cache_dir import CacheDir
from mlxd.backend.prefix.snapshot_file import (
    CACHE_CLASSES,
    BadSnapshot,
    CacheShape,
    read_snapshot,
)
from mlxd.types import common_prefix_len

FORMAT = "mlxd-prefix-2"  # 2: 16-bit keys are levels (quantized16), no longer float16
_SAMPLE = 1 << 20  # bytes of each weight file's start and end in the fingerprint
_MAX_HEADER = 64 << 20
log = logging.getLogger("mlxd.prefix")


@dataclass(frozen=True, slots=True)
class DiskEntry:
    name: str  # in its CacheDir: <fingerprint>/<digest>.safetensors
    tokens: tuple[int, ...]
    kind: str
    trimmable: bool


class DiskTier:
    def __init__(self, root: Path, max_bytes: int) -> None:
        self.files = CacheDir(root)  # raises InvalidRequest if root holds foreign files
        self.max_bytes = max_bytes
        self._models: dict[str, str] = {}  # model key -> fingerprint
        self._entries: dict[str, dict[tuple[int, ...], DiskEntry]] = {}  # fingerprint -> ...
        self._shapes: dict[str, CacheShape] = {}  # fingerprint -> its model's cache
        self.rejected = 0  # files deleted because they did not check

    @property
    def nbytes(self) -> int:
        return self.files.nbytes

    def close(self) -> None:
        self.files.close()

    def register(self, model: str, checkpoint: Path, shape: CacheShape) -> None:
        """Index the files of `checkpoint`'s fingerprint (`shape`: its caches); unreadable
        ones are deleted."""
        fp = fingerprint(checkpoint)
        self._models[model] = fp
        self._shapes[fp] = shape
        if fp in self._entries:
            return
        entries: dict[tuple[int, ...], DiskEntry] = {}
        for name in self.files.names(fp):
            entry = _read_entry(self._head(name), name, fp)
            if entry is None:
                self._reject(name, "unreadable, or not a cache of this model")
            else:
                entries[entry.tokens] = entry
        self._entries[fp] = entries

    def save(self, model: str, tokens: list[int], cache: PromptCache, kind: str) -> None:
        fp = self._models.get(model)
        if fp is None or tuple(tokens) in self._entries[fp]:
            return
        tmp = self.files.temp_path()
        trimmable = all(layer.is_trimmable() for layer in cache)  # type: ignore[attr-defined]
        meta = {"format": FORMAT, "model": fp, "kind": kind, "trimmable": str(trimmable)}
        try:
            save_prompt_cache(str(tmp), cache, {**meta, "tokens": json.dumps(list(tokens))})
            name = f"{fp}/{_digest(tmp.read_bytes())}.safetensors"
            self.files.commit(tmp, name)
        except OSError:  # a full or read-only disk: the memory tier still has it
            tmp.unlink(missing_ok=True)
            return
        self._entries[fp][tuple(tokens)] = DiskEntry(name, tuple(tokens), kind, trimmable)
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
        """The verified cache of `entry`, or None when it does not check: the file is then
        deleted, logged and counted (`rejected`)."""
        try:
            cache = self._verified(self._models[model], entry)
        except BadSnapshot as e:
            fp = self._models.get(model, "")
            self._entries.get(fp, {}).pop(entry.tokens, None)
            self._reject(entry.name, str(e))
            return None
        self.files.touch(entry.name)  # recently used: evicted last
        return cache

    def _verified(self, fp: str, entry: DiskEntry) -> PromptCache:
        """Parsed from the bytes whose digest was just checked (the file may change after the
        check), then checked against the model (snapshot_file)."""
        try:
            with self.files.open(entry.name) as f:
                size = os.fstat(f.fileno()).st_size
                if size > self.max_bytes:
                    raise BadSnapshot(f"{size} bytes, more than the tier's budget")
                data = f.read(size)
        except OSError as e:
            raise BadSnapshot(f"unreadable ({e})") from e
        if _digest(data) != Path(entry.name).stem:
            raise BadSnapshot("its bytes do not match its name's digest")
        cache, meta = read_snapshot(data, len(entry.tokens), self._shapes[fp])
        if meta.get("format") != FORMAT or meta.get("model") != fp:
            raise BadSnapshot("not a cache of this model")
        if meta.get("tokens") != json.dumps(list(entry.tokens)):
            raise BadSnapshot("its tokens changed since it was indexed")
        return cache

    def _reject(self, name: str, reason: str) -> None:
        log.warning("prefix cache: dropped %s: %s", self.files.root / name, reason)
        self.rejected += 1
        self.files.delete(name)

    def _head(self, name: str) -> bytes | None:
        """A file's safetensors length and header, or None if unreadable."""
        try:
            with self.files.open(name) as f:
                start = f.read(8)
                if len(start) < 8 or struct.unpack("<Q", start)[0] > _MAX_HEADER:
                    return None
                return start + f.read(struct.unpack("<Q", start)[0])
        except OSError:
            return None

    def discard(self, model: str, tokens: list[int]) -> None:
        fp = self._models.get(model)
        entry = self._entries.get(fp or "", {}).pop(tuple(tokens), None)
        if entry is not None:
            self.files.delete(entry.name)

    def _bound(self) -> None:
        """Delete the least recently used files until the directory fits its budget."""
        while self.files.nbytes > self.max_bytes and (name := self.files.oldest()) is not None:
            fp = name.partition("/")[0]
            entries = self._entries.get(fp, {})
            for tokens in [t for t, e in entries.items() if e.name == name]:
                del entries[tokens]
            self.files.delete(name)


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


def _read_entry(head: bytes | None, name: str, fp: str) -> DiskEntry | None:
    """The entry a file's safetensors header (`head`: its first bytes) describes, or None if
    it is not ours or broken."""
    try:
        if head is None:
            return None
        (length,) = struct.unpack("<Q", head[:8])
        if length > len(head) - 8:
            return None
        meta = json.loads(head[8 : 8 + length]).get("__metadata__", {})
        ours = meta.get("0.format") == FORMAT and meta.get("0.model") == fp
        classes = {v for k, v in meta.items() if k.startswith("1.")}
        tokens = json.loads(meta["0.tokens"])
        if not ours or not classes <= CACHE_CLASSES:
            return None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return None
        return DiskEntry(name, tuple(tokens), str(meta["0.kind"]), meta["0.trimmable"] == "True")
    except (ValueError, KeyError, struct.error, AttributeError):
        return None


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
