"""`import_gguf`: turn a llama GGUF file into an MLX checkpoint in mlxd's store, atomically.

Everything is read and validated before the first byte is written; files are written into a
hidden temp dir inside the store and renamed into place, so an interrupted or failed import
never leaves a half model under a real name.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlxd import config
from mlxd.errors import InvalidRequest, MlxdError
from mlxd.store.gguf.format import IMPORT_FORMAT, INFO_KEY, TMP_PREFIX
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

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


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


def slugify(text: str) -> str:
    """'Smollm2 135M Instruct' -> 'smollm2-135m-instruct' (store-safe, lowercase)."""
    slug = re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")
    return re.sub(r"\.{2,}", ".", slug)[:100].strip("-.") or "model"


def check_name(name: str) -> str:
    """A store entry name: one path segment of letters, digits, '.', '_' or '-'."""
    if not _NAME_RE.fullmatch(name) or ".." in name:
        raise InvalidRequest(
            f"invalid model name {name!r}: use letters, digits, '.', '_' and '-' (max 100)",
            param="name",
        )
    return name


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
        _check_free(store, check_name(name), replace)  # fail before the slow parse
    source = Path(source).expanduser()
    plan = _Conversion.read(source, dtype, keep_quantized)
    name = name or slugify(str(plan.gguf.metadata.get("general.name") or source.stem))
    target = _check_free(store, name, replace)
    tmp = store / f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        store.mkdir(parents=True, exist_ok=True)
        _check_space(store, planned_bytes(plan.weights, dtype, keep_quantized))
        _remove_stale_temps(store)
        tmp.mkdir()
        size = plan.write(tmp, dtype, keep_quantized, progress)
        _install(tmp, target, replace)
    except OSError as e:  # unwritable store, disk full, ...: one line, not a traceback
        raise MlxdError(f"cannot write the model into {store}: {e.strerror or e}") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
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


def _check_free(store: Path, name: str, replace: bool) -> Path:
    target = store / name
    if target.exists() and not replace:
        raise InvalidRequest(
            f"model {name!r} already exists in the store: pass --force to replace it "
            "or --name to choose another name",
            param="name",
        )
    return target


def _install(tmp: Path, target: Path, replace: bool) -> None:
    """rename(2) into place; a directory rename never overwrites a non-empty target."""
    old = None
    if replace and target.exists():
        old = target.with_name(f"{TMP_PREFIX}old-{os.getpid()}-{secrets.token_hex(4)}")
        target.rename(old)
    try:
        tmp.rename(target)
    except OSError as e:
        if old is not None:
            old.rename(target)
        raise InvalidRequest(f"model {target.name!r} appeared in the store meanwhile") from e
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _check_space(store: Path, needed: int) -> None:
    free = shutil.disk_usage(store).free
    if free < needed * 1.05:
        raise MlxdError(
            f"not enough disk space in {store}: the import needs {needed / 1e9:.2f} GB, "
            f"{free / 1e9:.2f} GB free"
        )


def _remove_stale_temps(store: Path) -> None:
    """Temp dirs left by imports that were killed (their process is gone)."""
    for entry in store.glob(f"{TMP_PREFIX}*"):
        pid = entry.name.removeprefix(TMP_PREFIX).removeprefix("old-").split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
