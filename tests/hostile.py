"""Hostile models as real checkpoint directories, and a memory-capped child process.

hostile_copy(src, dst, how) copies a tiny checkpoint and makes it hostile:
  "layers"        config.json declares 10**9 layers (the weights hold 2)
  "layers_float"  the same as a JSON float (1e9)
  "huge_weights"  an extra shard whose header describes HUGE_BYTES of weights: a sparse file,
                  so it is consistent with its size and takes no disk space
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


def memory_capped(limit: int = CHILD_MEMORY_CAP) -> Callable[[], None]:
    """A preexec_fn for subprocess: cap the child's address space at `limit` bytes."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return cap
