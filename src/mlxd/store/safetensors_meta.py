"""Read safetensors headers (8-byte little-endian length + JSON) without loading tensors.

Written by hand rather than with `safetensors.safe_open` because that memory-maps the
file and fails on exactly the truncated files we want to describe; a header is all we need.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxd.errors import ModelBroken

_MAX_HEADER = 100 << 20  # the format caps headers at 100 MB
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True, slots=True)
class SafetensorsHeader:
    path: Path
    tensors: tuple[TensorInfo, ...]
    metadata: dict[str, str]
    data_bytes: int  # bytes the header says follow it


def read_header(path: Path) -> SafetensorsHeader:
    """Parse and validate one file's header against its size; raises ModelBroken."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            raw_len = f.read(8)
            if len(raw_len) < 8:
                raise ModelBroken(f"{path.name}: truncated safetensors file ({size} bytes)")
            (header_len,) = struct.unpack("<Q", raw_len)
            if header_len > min(_MAX_HEADER, size - 8):
                raise ModelBroken(
                    f"{path.name}: safetensors header length {header_len} "
                    f"exceeds the file size {size} (truncated or not safetensors)"
                )
            header = json.loads(f.read(header_len))
    except OSError as e:
        raise ModelBroken(f"{path.name}: cannot read ({e.strerror})") from e
    except (ValueError, UnicodeDecodeError) as e:
        raise ModelBroken(f"{path.name}: safetensors header is not valid JSON") from e
    if not isinstance(header, dict):
        raise ModelBroken(f"{path.name}: safetensors header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    tensors, end = _tensors(path, header)
    available = size - 8 - header_len
    if end != available:
        state = "truncated" if end > available else "has trailing bytes"
        raise ModelBroken(
            f"{path.name}: {state}: header describes {end} data bytes, file holds {available}"
        )
    return SafetensorsHeader(path, tensors, dict(metadata), end)


def _tensors(path: Path, header: dict[str, Any]) -> tuple[tuple[TensorInfo, ...], int]:
    tensors, end = [], 0
    for name, info in header.items():
        try:
            dtype, shape = str(info["dtype"]), tuple(int(d) for d in info["shape"])
            start, stop = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise ModelBroken(f"{path.name}: malformed header entry for {name!r}") from e
        if dtype not in DTYPE_BYTES:
            raise ModelBroken(f"{path.name}: tensor {name!r} has dtype {dtype!r}, "
                              "which is not a safetensors dtype")  # fmt: skip
        expected = math.prod(shape) * DTYPE_BYTES[dtype]
        if stop - start != expected:
            raise ModelBroken(
                f"{path.name}: tensor {name!r} spans {stop - start} bytes, "
                f"its shape needs {expected}"
            )
        tensors.append(TensorInfo(name, dtype, shape))
        end = max(end, stop)
    return tuple(tensors), end


def count_parameters(headers: list[SafetensorsHeader], quantization: dict[str, Any] | None) -> int:
    """Logical parameter count: packed quantized weights (uint32 words holding 32/bits values)
    are unpacked, and their per-group scales and biases are not parameters. `quantization` is
    the config's block: global "bits", optionally overridden per layer path (mixed precision)."""
    names = {t.name for h in headers for t in h.tensors}
    total = 0
    for h in headers:
        for t in h.tensors:
            stem = t.name.rsplit(".", 1)[0]
            quantized = f"{stem}.scales" in names
            if quantized and t.name.endswith((".scales", ".biases")):
                continue  # quantization metadata, not parameters
            bits = _bits_for(stem, quantization) if quantized and t.dtype == "U32" else None
            total += t.numel * (32 // bits) if bits else t.numel
    return total


def _bits_for(stem: str, quantization: dict[str, Any] | None) -> int | None:
    q = quantization or {}
    layer = q.get(stem) or q.get(stem.removeprefix("model.")) or q.get(f"model.{stem}")
    bits = layer.get("bits") if isinstance(layer, dict) else q.get("bits")
    return bits if isinstance(bits, int) and 0 < bits <= 32 else None
