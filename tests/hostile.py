"""Hostile models as real checkpoint directories, and a memory-capped child process.

hostile_copy(src, dst, how) copies a tiny checkpoint and makes it hostile:
  "layers"        config.json declares 10**9 layers (the weights hold 2)
  "layers_float"  the same as a JSON float (1e9)
  "huge_weights"  an extra shard whose header describes HUGE_BYTES of weights: a sparse file,
                  so it is consistent with its size and takes no disk space
gguf_lying_array / gguf_nested_arrays / gguf_lying_counts write GGUF files whose metadata lies
(an array longer than the file, arrays nested `depth` deep, entry counts no file could hold).
forge_snapshot rewrites a prefix-cache disk tier file as an attacker who can write its folder
would: a KV array reshaped to the same byte count, the metadata kept, the file renamed to its
new digest (and the tier's manifest pointed at it).
A regression that loads one of these must not take the machine down: children run under
`memory_capped` (RLIMIT_AS), so they fail instead of growing until the kernel kills something.
SLOW_SCHEMA is a 1.4 KB JSON schema llguidance compiles for minutes, growing ~70 MB/s.
"""

from __future__ import annotations

import hashlib
import json
import resource
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

CHILD_MEMORY_CAP = 3 << 30  # address space of a test child (mlxd serve needs under 1 GiB)
HUGE_BYTES = 8 << 30  # more than the cap: a load that reads it cannot fit
# 40 patterns a string must all match: llguidance's emptiness proof of their intersection
# takes 10,000 derivative steps of a regex that grows with each (no ParserLimits bound it).
SLOW_SCHEMA = {
    "type": "string",
    "allOf": [{"pattern": f"^(a|b)*a(a|b){{{k}}}$"} for k in range(8, 48)],
}


def hostile_copy(src: Path, dst: Path, how: str) -> Path:
    shutil.copytree(src, dst)
    config_file = dst / "config.json"
    config = json.loads(config_file.read_text())
    if how == "layers":
        config["num_hidden_layers"] = 10**9
    elif how == "layers_float":
        config["num_hidden_layers"] = 1e9
    elif how == "huge_weights":
        write_sparse_safetensors(dst / "model-huge.safetensors", "padding.weight", HUGE_BYTES)
    else:
        raise ValueError(how)
    config_file.write_text(json.dumps(config))
    return dst


def write_sparse_safetensors(path: Path, name: str, nbytes: int) -> None:
    """One U8 tensor of `nbytes` bytes: a valid header, then a hole of that size."""
    header = json.dumps({name: {"dtype": "U8", "shape": [nbytes], "data_offsets": [0, nbytes]}})
    raw = header.encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + nbytes)


def _gguf_head(tensors: int, entries: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, tensors, entries)


def gguf_lying_array(path: Path, items: int = 1 << 40, pad: int = 1 << 20) -> Path:
    """One uint8 array claiming `items` items, then `pad` zero bytes."""
    entry = struct.pack("<Q", 1) + b"a" + struct.pack("<IIQ", 9, 0, items)
    path.write_bytes(_gguf_head(0, 1) + entry + b"\0" * pad)
    return path


def gguf_nested_arrays(path: Path, depth: int = 2000) -> Path:
    """One array of one array ... `depth` levels down to a single uint8."""
    entry = struct.pack("<Q", 1) + b"a" + struct.pack("<I", 9)
    entry += struct.pack("<IQ", 9, 1) * (depth - 1) + struct.pack("<IQ", 0, 1) + b"\0"
    path.write_bytes(_gguf_head(0, 1) + entry + b"\0" * 64)
    return path


def gguf_lying_counts(path: Path, tensors: int, entries: int, pad: int = 1 << 20) -> Path:
    """A header claiming `tensors` tensors and `entries` metadata entries, then zeros."""
    path.write_bytes(_gguf_head(tensors, entries) + b"\0" * pad)
    return path


def forge_snapshot(path: Path) -> Path:
    """Reshape the first 4-D array of the snapshot file at `path` (1, H, T, D) -> (1, 2H, T,
    D/2), keep its metadata, and rename it to its new digest; returns the new path."""
    import mlx.core as mx

    arrays, meta = mx.load(str(path), return_metadata=True)
    assert isinstance(arrays, dict) and isinstance(meta, dict)
    key = next(k for k, a in sorted(arrays.items()) if a.ndim == 4)
    b, h, t, d = arrays[key].shape
    arrays[key] = arrays[key].reshape(b, 2 * h, t, d // 2)
    temp = path.with_name("forged.safetensors")
    mx.save_safetensors(str(temp), arrays, meta)
    forged = path.with_name(hashlib.sha256(temp.read_bytes()).hexdigest() + ".safetensors")
    temp.rename(forged)
    path.unlink()
    marker = path.parent.parent / "mlxd-prefix-cache.json"
    if marker.exists():  # a tier that keeps a manifest: list the forged file instead
        old, new = f"{path.parent.name}/{path.name}", f"{path.parent.name}/{forged.name}"
        manifest = json.loads(marker.read_text())
        manifest["files"] = [[new if n == old else n, s] for n, s in manifest["files"]]
        marker.write_text(json.dumps(manifest))
    return forged


def memory_capped(limit: int = CHILD_MEMORY_CAP) -> Callable[[], None]:
    """A preexec_fn for subprocess: cap the child's address space at `limit` bytes."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return cap
