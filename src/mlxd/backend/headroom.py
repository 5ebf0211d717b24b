"""How much more memory this process may use: free RAM, the cgroup's and the rlimits' headroom.

Pure Python (no mlx): the store's load check and the backend's default KV budget read it.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path


def available_memory() -> tuple[int, str] | None:
    """(bytes, what limits them): the least of free RAM, the cgroup's and the rlimits'
    headroom. None when nothing is known."""
    candidates = [c for c in (_ram(), _cgroup(), *_rlimits()) if c is not None]
    return min(candidates, default=None)


def _ram() -> tuple[int, str] | None:
    """MemAvailable on Linux; physical memory elsewhere (macOS shares it with the GPU)."""
    meminfo = _read_kb_fields(Path("/proc/meminfo"))
    if "MemAvailable" in meminfo:
        return meminfo["MemAvailable"], "available memory"
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "physical memory"
    except (ValueError, OSError):
        return None


def _cgroup() -> tuple[int, str] | None:
    """cgroup v2 headroom (containers): memory.max minus memory.current."""
    try:
        line = Path("/proc/self/cgroup").read_text().splitlines()[0]
        folder = Path("/sys/fs/cgroup") / line.split("::", 1)[1].lstrip("/")
        limit = (folder / "memory.max").read_text().strip()
        used = int((folder / "memory.current").read_text())
    except (OSError, IndexError, ValueError):
        return None
    if not limit.isdigit():  # "max": no limit
        return None
    return max(int(limit) - used, 0), "cgroup memory limit"


def _rlimits() -> list[tuple[int, str] | None]:
    """Headroom under RLIMIT_AS and RLIMIT_DATA (ulimit -v / -d) of this process."""
    status = _read_kb_fields(Path("/proc/self/status"))
    out: list[tuple[int, str] | None] = []
    for limit, used_field, name in (
        (resource.RLIMIT_AS, "VmSize", "address-space limit"),
        (resource.RLIMIT_DATA, "VmData", "data-size limit"),
    ):
        soft, _hard = resource.getrlimit(limit)
        if soft != resource.RLIM_INFINITY:
            out.append((max(soft - status.get(used_field, 0), 0), name))
    return out


def _read_kb_fields(path: Path) -> dict[str, int]:
    """`Name:   1234 kB` lines (/proc/meminfo, /proc/self/status) as bytes."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[name] = int(parts[0]) * 1024
    return out
