"""Keep GGUF Q4_0 / Q4_1 / Q8_0 blocks as MLX affine quantization, exactly.

All three are affine over groups of 32 along a row, like MLX's affine mode, so each block
maps to one MLX group with no rounding (w = scale * q + bias):
  Q4_0  w = d * (q - 8)      -> scale d, bias -8d,   q = the 4-bit code
  Q4_1  w = d * q + m        -> scale d, bias m,     q = the 4-bit code
  Q8_0  w = d * x (int8 x)   -> scale d, bias -128d, q = x + 128
gguf has no such converter (only dequantize), hence the byte-level code here.
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as Q

GROUP_SIZE = 32
KEEPABLE_BITS = {Q.Q4_0: 4, Q.Q4_1: 4, Q.Q8_0: 8}
_BLOCK_BYTES = {Q.Q4_0: 18, Q.Q4_1: 20, Q.Q8_0: 34}


def kept_bits(qtype: Q, shape: tuple[int, ...]) -> int:
    """MLX bits if a tensor of this encoding/shape is kept quantized, else 0."""
    if len(shape) != 2 or shape[1] % GROUP_SIZE:
        return 0
    return KEEPABLE_BITS.get(qtype, 0)


def affine_parts(
    data: np.ndarray, qtype: Q, shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes uint8 [rows, cols], scales f32 [rows, groups], biases f32 [rows, groups])."""
    rows, cols = shape
    groups = cols // GROUP_SIZE
    blocks = np.ascontiguousarray(data).reshape(rows, groups, _BLOCK_BYTES[qtype])
    d = _f16(blocks[..., 0:2])
    if qtype == Q.Q8_0:
        codes = (blocks[..., 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        return codes.reshape(rows, cols), d, -128.0 * d
    nibbles = blocks[..., 4:] if qtype == Q.Q4_1 else blocks[..., 2:]
    # 16 bytes per block: value j in the low nibble of byte j, value 16+j in its high nibble.
    codes = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)
    bias = _f16(blocks[..., 2:4]) if qtype == Q.Q4_1 else -8.0 * d
    return codes.reshape(rows, cols), d, bias


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """MLX's packing: 32/bits codes per uint32, the first one in the lowest bits."""
    per = 32 // bits
    rows, cols = codes.shape
    grouped = codes.reshape(rows, cols // per, per).astype(np.uint32)
    shifts = (np.arange(per, dtype=np.uint32) * bits).reshape(1, 1, per)
    packed: np.ndarray = np.bitwise_or.reduce(grouped << shifts, axis=-1)
    return packed


def _f16(raw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw).view(np.float16)[..., 0].astype(np.float32)
