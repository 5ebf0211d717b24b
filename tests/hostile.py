"""Hostile models as real checkpoint directories, and a memory-capped child process.

hostile_copy(src, dst, how) copies a tiny checkpoint and makes it hostile:
  "layers"        config.json declares 10**9 layers (the weights hold 2)
  "layers_float"  the same as a JSON float (1e9)
  "huge_weights"  an extra shard whose header describes HUGE_BYTES of weights: a sparse file,
                  so it is consistent with its size and takes no disk space
gguf_lying_array / gguf_nested_arrays / gguf_lying_counts write GGUF files whose metadata lies
(an array longer than the file, arrays nested `depth` deep, entry counts no file could hold).
A regression that loads one of these must not take the machine down: children run under
`memory_capped` (RLIMIT_AS), so they fail instead of growing until the kernel kills something.
"""

from __future__ import annotations

import json
import resource
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

CHILD_MEMORY_CAP = 3 << 30  # address space of a test child (mlxd serve needs under 1 GiB)
HUGE_BYTES = 8 << 30  # more than the cap: a load that reads it cannot fit


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


def memory_capped(limit: int = CHILD_MEMORY_CAP) -> Callable[[], None]:
    """A preexec_fn for subprocess: cap the child's address space at `limit` bytes."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return cap
