"""Open an untrusted GGUF file with the `gguf` package and expose checked metadata and tensors.

Every failure (missing file, not a GGUF, truncated, corrupt) becomes one MlxdError with a
one-line message; nothing here writes to disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType
from gguf.gguf_reader import ReaderField, ReaderTensor

from mlxd.errors import InvalidRequest, ModelBroken, ModelNotFound, one_line

GGUF_MAGIC = b"GGUF"
T = TypeVar("T")
MAX_ARRAY_DEPTH = 8  # arrays of arrays: llama.cpp writes none; the spec allows them
MAX_LIST_ITEMS = 1 << 22  # items of an array of strings or arrays (vocabularies hold < 300k)
# The fewest bytes one metadata key/value (8-byte key length, type, a 1-byte value) and one
# tensor description (name length, dimension count, encoding, offset) take in a file.
_MIN_KV_BYTES, _MIN_TENSOR_BYTES = 13, 24

# Tensor encodings gguf.quants.dequantize turns into float32 with numpy. The issue requires
# F32/F16/Q4_0/Q4_1/Q8_0; the other block formats share the same library path.
SUPPORTED_TYPES = frozenset(
    GGMLQuantizationType[name]
    for name in (
        "F32",
        "F16",
        "BF16",
        "Q4_0",
        "Q4_1",
        "Q5_0",
        "Q5_1",
        "Q8_0",
        "Q2_K",
        "Q3_K",
        "Q4_K",
        "Q5_K",
        "Q6_K",
    )
)


class _CheckedReader(GGUFReader):
    """GGUFReader with bounds checks and plain-ndarray views.

    The stock reader silently returns short slices past the end of the file, so a corrupt
    length field can make it loop over billions of empty items; every read is checked here,
    and every count (entries, tensors, array items) against the bytes left before its loop.
    Arrays nest at most MAX_ARRAY_DEPTH deep; an array of numbers is one view, not one per item.
    It also builds one np.memmap view per metadata item, whose subclass hooks cost ~3x the
    parse time on a 49k-token vocabulary; a plain ndarray view of the same mapping avoids that.
    """

    _depth = 0  # arrays being parsed around the current one

    @property  # type: ignore[override]
    def data(self) -> np.ndarray:
        return self._plain

    @data.setter
    def data(self, value: np.ndarray) -> None:
        self._plain = value.view(np.ndarray)

    def _get(
        self,
        offset: int,
        dtype: npt.DTypeLike,
        count: int = 1,
        override_order: Literal["I", "S", "<"] | None = None,
    ) -> np.ndarray:
        count = int(count)
        end = int(offset) + np.dtype(dtype).itemsize * count
        if count < 0 or end > self._plain.size:
            raise ValueError(f"read past the end of the file (offset {end})")
        return super()._get(offset, dtype, count, override_order)

    def _build_fields(self, offs: int, count: int) -> int:
        _fits(int(count), _MIN_KV_BYTES, self._plain.size - offs, "metadata entries")
        return super()._build_fields(offs, count)

    def _build_tensor_info(self, offs: int, count: int) -> tuple[int, list[ReaderField]]:
        _fits(int(count), _MIN_TENSOR_BYTES, self._plain.size - offs, "tensors")
        return super()._build_tensor_info(offs, count)

    def _get_field_parts(
        self, orig_offs: int, raw_type: int
    ) -> tuple[int, list[np.ndarray], list[int], list[GGUFValueType]]:
        """The stock parser, with each array's length checked against the bytes left before
        its loop, its nesting bounded, and an array of numbers read as one view."""
        if raw_type != GGUFValueType.ARRAY:
            return super()._get_field_parts(orig_offs, raw_type)
        head = self._get(orig_offs, np.uint32)
        length = self._get(orig_offs + 4, np.uint64)
        item_type, count = int(head[0]), int(length[0])
        scalar = self.gguf_scalar_to_np.get(GGUFValueType(item_type))
        left = self._plain.size - orig_offs - 12
        if scalar is not None:
            _fits(count, np.dtype(scalar).itemsize, left, "array items")
            items = self._get(orig_offs + 12, scalar, count)
            types = [GGUFValueType.ARRAY, GGUFValueType(item_type)]
            return 12 + int(items.nbytes), [head, length, items], [2], types
        _fits(count, 8 if item_type == GGUFValueType.STRING else 12, left, "array items")
        if count > MAX_LIST_ITEMS:
            raise ValueError(f"an array of {count} strings or arrays (at most {MAX_LIST_ITEMS})")
        if self._depth >= MAX_ARRAY_DEPTH:
            raise ValueError(f"arrays nested deeper than {MAX_ARRAY_DEPTH} levels")
        self._depth += 1
        try:
            return super()._get_field_parts(orig_offs, raw_type)
        finally:
            self._depth -= 1


def _fits(count: int, min_bytes: int, left: int, what: str) -> None:
    """`count` items of at least `min_bytes` each fit in the `left` bytes of the file."""
    if count * min_bytes > max(left, 0):
        raise ValueError(f"{count} {what} cannot fit in the {max(left, 0)} bytes left")


@dataclass(frozen=True, slots=True)
class GgufTensor:
    """One tensor: `shape` is in numpy (row-major) order, `data` the raw encoded array."""

    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]
    data: np.ndarray

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass(frozen=True, slots=True)
class GgufFile:
    """Parsed GGUF: metadata values as plain Python, tensors by name."""

    path: Path
    metadata: dict[str, Any]
    tensors: dict[str, GgufTensor]

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def value(self, key: str, kind: type[T], default: T | None = None) -> T:
        """Metadata `key` checked to be of `kind` (int/float/str/bool/list), or `default`."""
        if key not in self.metadata:
            if default is None:
                raise ModelBroken(f"GGUF file {self.path.name} lacks required metadata {key!r}")
            return default
        value: object = self.metadata[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ModelBroken(
                f"GGUF metadata {key!r} has type {type(value).__name__}, expected {kind.__name__}"
            )
        return value


def open_gguf(path: Path) -> GgufFile:
    """Parse `path` read-only (memory-mapped). Raises ModelNotFound/InvalidRequest/ModelBroken."""
    path = Path(path)
    _check_file(path)
    try:
        reader = _CheckedReader(path, "r")
        metadata = {name: field.contents() for name, field in reader.fields.items()}
        tensors = {t.name: _tensor(t) for t in reader.tensors}
    except (MemoryError, RecursionError) as e:
        raise ModelBroken(f"GGUF file {path.name} is corrupt: implausible sizes") from e
    except (ValueError, IndexError, KeyError, TypeError, OverflowError, UnicodeDecodeError) as e:
        reason = one_line(e, with_type=False)
        raise ModelBroken(f"GGUF file {path.name} is truncated or corrupt: {reason}") from e
    return GgufFile(path=path, metadata=metadata, tensors=tensors)


def _check_file(path: Path) -> None:
    if not path.exists():
        raise ModelNotFound(f"no such file: {path}")
    if not path.is_file():
        raise InvalidRequest(f"not a file: {path}")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise InvalidRequest(f"cannot read {path}: {e.strerror}") from e
    if magic != GGUF_MAGIC:
        raise ModelBroken(f"{path.name} is not a GGUF file (bad magic bytes)")


def _tensor(t: ReaderTensor) -> GgufTensor:
    qtype = GGMLQuantizationType(int(t.tensor_type))
    shape = tuple(int(d) for d in reversed(t.shape.tolist()))
    return GgufTensor(name=t.name, qtype=qtype, shape=shape, data=t.data)
