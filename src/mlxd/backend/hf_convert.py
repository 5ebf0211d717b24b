"""A Hugging Face checkpoint to an MLX one through mlx-lm's converter (`mlx_lm.convert`).

The one place mlxd calls it. Quantization choices are mlx-lm's: affine bits, the
microscaling modes, and its mixed-precision recipes; mlx and mlx-lm load on first call.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

AFFINE_BITS = ("2", "3", "4", "5", "6", "8")
# mlx-lm's quantization modes other than affine (each has its own bits and group size).
MODES = ("mxfp4", "mxfp8", "nvfp4")
# mlx_lm.convert.QUANT_RECIPES (a test checks they match): a low and a high bit width mixed
# per layer, like llama.cpp's Q4_K_M.
RECIPES = ("mixed_2_6", "mixed_3_4", "mixed_3_6", "mixed_4_6")
QUANTIZE_CHOICES = AFFINE_BITS + MODES + RECIPES
DTYPES = ("float16", "bfloat16", "float32")

StageFn = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ConvertPlan:
    """What to make: `quantize` one of QUANTIZE_CHOICES (None: keep floats), `dtype` of the
    unquantized weights (None: the checkpoint's torch_dtype)."""

    quantize: str | None = None
    group_size: int | None = None
    dtype: str | None = None
    trust_remote_code: bool = False

    def convert_kwargs(self) -> dict[str, object]:
        """mlx_lm.convert's keyword arguments for this plan."""
        kwargs: dict[str, object] = {
            "dtype": self.dtype,
            "trust_remote_code": self.trust_remote_code,
            "q_group_size": self.group_size,
        }
        q = self.quantize
        if q is None:
            return kwargs
        kwargs["quantize"] = True
        if q in AFFINE_BITS:
            kwargs["q_bits"] = int(q)
        elif q in MODES:
            kwargs["q_mode"] = q
        else:  # a recipe: the predicate needs a group size, mlx-lm's affine default
            kwargs["quant_predicate"] = q
            kwargs["q_group_size"] = self.group_size or 64
        return kwargs


def convert_checkpoint(
    source: Path, target: Path, plan: ConvertPlan, stage: StageFn | None = None
) -> None:
    """Write the MLX checkpoint of the local checkpoint `source` into `target` (which must not
    exist). `stage` hears mlx-lm's steps ("Loading", "Quantizing", ...) as they start.
    Raises whatever mlx-lm raises (ValueError for an unsupported model or option)."""
    from mlx_lm.convert import convert

    with contextlib.redirect_stdout(_StageWriter(stage)):
        convert(str(source), str(target), **plan.convert_kwargs())  # type: ignore[arg-type]


class _StageWriter(io.TextIOBase):
    """mlx-lm reports its steps as "[INFO] Step" prints: pass them on, drop the rest
    (print() writes its arguments one by one, so lines are gathered first)."""

    def __init__(self, stage: StageFn | None) -> None:
        self.stage = stage
        self.pending = ""

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            if line.startswith("[INFO] ") and self.stage is not None:
                self.stage(line.removeprefix("[INFO] ").strip())
        return len(text)
