"""`import_gguf`: turn a llama GGUF file into an MLX checkpoint in mlxd's store, atomically.

Everything is read and validated before the first byte is written; files are written into a
hidden temp dir inside the store and renamed into place, so an interrupted or failed import
never leaves a half model under a real name.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlxd import config
from mlxd.errors import InvalidRequest, MlxdError
from mlxd.store.gguf.format import IMPORT_FORMAT, INFO_KEY
from mlxd.store.gguf.hparams import LlamaHParams, hf_config, read_hparams, sampling_defaults
from mlxd.store.gguf.reader import GgufFile, open_gguf
from mlxd.store.gguf.tokenizer_files import TokenizerFiles, build_tokenizer
from mlxd.store.gguf.weights import (
    DTYPES,
    ProgressFn,
    WeightPlan,
    plan_weights,
    planned_bytes,
    quantization_config,
    write_safetensors,
)
from mlxd.store.staging import Staging, check_free, check_name, check_space, slugify


@dataclass(frozen=True, slots=True)
class ImportResult:
    name: str
    path: Path
    source: Path
    dtype: str
    parameters: int
    bytes: int
    seconds: float
    context_window: int
    quantized: bool = False
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"path": str(self.path), "source": str(self.source)}


def import_gguf(
    source: Path,
    name: str | None = None,
    *,
    dtype: str = "float32",
    store: Path | None = None,
    replace: bool = False,
    keep_quantized: bool = False,
    progress: ProgressFn | None = None,
) -> ImportResult:
    """Import `source` as store entry `name` (default: slug of GGUF general.name).

    Weights are dequantized to `dtype`; with `keep_quantized`, Q4_0/Q4_1/Q8_0 tensors stay
    quantized (MLX affine, exact) and only their scales/biases and other tensors use `dtype`.
    Raises ModelNotFound (no file), ModelBroken (corrupt/unsupported GGUF), InvalidRequest
    (bad name/dtype, or the entry exists and `replace` is false).
    """
    started = time.monotonic()
    if dtype not in DTYPES:
        raise InvalidRequest(f"unsupported dtype {dtype!r}: choose {', '.join(DTYPES)}")
    store = Path(store) if store is not None else config.store_dir()
    if name is not None:
        check_free(store, check_name(name), replace)  # fail before the slow parse
    source = Path(source).expanduser()
    plan = _Conversion.read(source, dtype, keep_quantized)
    name = name or slugify(str(plan.gguf.metadata.get("general.name") or source.stem))
    try:
        with Staging(store, name, replace) as staging:
            check_space(store, planned_bytes(plan.weights, dtype, keep_quantized))
            size = plan.write(staging.path, dtype, keep_quantized, progress)
            target = staging.install()
    except OSError as e:  # unwritable store, disk full, ...: one line, not a traceback
        raise MlxdError(f"cannot write the model into {store}: {e.strerror or e}") from e
    return ImportResult(
        name=name,
        path=target,
        source=source,
        dtype=dtype,
        parameters=sum(p.source.n_elements for p in plan.weights),
        bytes=size,
        seconds=round(time.monotonic() - started, 3),
        context_window=plan.hparams.context_length,
        quantized="quantization" in plan.config,
        warnings=tuple(plan.tokenizer.warnings),
    )


@dataclass(slots=True)
class _Conversion:
    """Everything read and validated from the GGUF, before anything is written."""

    gguf: GgufFile
    hparams: LlamaHParams
    weights: list[WeightPlan]
    tokenizer: TokenizerFiles
    config: dict[str, Any]
    generation: dict[str, Any]

    @classmethod
    def read(cls, source: Path, dtype: str, keep_quantized: bool) -> _Conversion:
        gguf = open_gguf(source)
        hp = read_hparams(gguf)
        weights = plan_weights(gguf, hp)
        tokenizer = build_tokenizer(gguf, hp)
        model_config = hf_config(hp, dtype, tokenizer.special_ids)
        quantization = quantization_config(weights, keep_quantized)
        if quantization:  # mlx-lm writes both keys; it reads "quantization"
            model_config["quantization"] = model_config["quantization_config"] = quantization
        model_config[INFO_KEY] = {
            "format": IMPORT_FORMAT,
            "source": source.name,
            "gguf_name": gguf.metadata.get("general.name"),
            "gguf_file_type": gguf.metadata.get("general.file_type"),
        }
        generation = tokenizer.special_ids | sampling_defaults(gguf)
        return cls(gguf, hp, weights, tokenizer, model_config, generation)

    def write(
        self, folder: Path, dtype: str, keep_quantized: bool, progress: ProgressFn | None
    ) -> int:
        """Write the checkpoint files into `folder`; return the weights' size in bytes."""
        weights = folder / "model.safetensors"
        size = write_safetensors(weights, self.weights, dtype, progress, keep_quantized)
        _write_json(folder / "config.json", self.config)
        _write_json(folder / "tokenizer_config.json", self.tokenizer.tokenizer_config)
        _write_json(folder / "generation_config.json", self.generation)
        (folder / "tokenizer.json").write_text(self.tokenizer.tokenizer_json, encoding="utf-8")
        return size


def _write_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
