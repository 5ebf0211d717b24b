"""`convert_model`: a Hugging Face checkpoint (a directory, a cached repo or a store entry) to
an MLX checkpoint in mlxd's store, through mlx-lm's converter, written by `Staging`.

The source is checked as for loading first (remote code needs `trust_remote_code`; a model
too large to run may still be converted, quantizing is how it gets to fit), and the result is
checked by `health` before it gets its name, so the store never holds a failed conversion.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlxd import config
from mlxd.errors import InvalidRequest, MlxdError, ModelBroken, ModelTooLarge, one_line
from mlxd.store.files import dir_size
from mlxd.store.health import check, check_runnable
from mlxd.store.problems import Severity
from mlxd.store.resolve import resolve
from mlxd.store.staging import Staging, check_free, check_name, check_space, slugify

if TYPE_CHECKING:
    from mlxd.backend.hf_convert import ConvertPlan, StageFn


@dataclass(frozen=True, slots=True)
class ConvertResult:
    name: str
    path: Path
    source: str
    quantize: str | None
    dtype: str | None
    bytes: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"path": str(self.path)}


def default_name(source: str, plan: ConvertPlan) -> str:
    """'org/Qwen3-0.6B' at 4 bits -> 'qwen3-0.6b-4bit'; a float conversion says its dtype."""
    base = slugify(Path(source.rstrip("/")).name.partition("@")[0])
    q = plan.quantize
    suffix = f"{q}bit" if q is not None and q.isdigit() else q or plan.dtype or "mlx"
    return f"{base[: 99 - len(suffix)]}-{suffix}"


def convert_model(
    source: str,
    plan: ConvertPlan,
    name: str | None = None,
    *,
    store: Path | None = None,
    replace: bool = False,
    stage: StageFn | None = None,
) -> ConvertResult:
    """Convert `source` (any reference `resolve` takes) into store entry `name`.

    Raises ModelNotFound / AmbiguousModel (source), ModelRefused (remote code without
    trust_remote_code), ModelBroken (a broken source, or a conversion that fails its
    health check), InvalidRequest (bad name, an existing entry without `replace`, an option
    mlx-lm refuses for this model) or MlxdError (the store cannot be written)."""
    started = time.monotonic()
    store = Path(store) if store is not None else config.store_dir()
    name = check_name(name or default_name(source, plan))
    check_free(store, name, replace)
    ref = resolve(source)
    try:
        check_runnable(ref.path, trust_remote_code=plan.trust_remote_code)
    except ModelTooLarge:
        pass
    try:
        with Staging(store, name, replace) as staging:
            check_space(store, dir_size(ref.path) // 2, "the conversion")
            out = staging.path / "model"
            _run_converter(ref.path, out, plan, stage, source)
            _check_result(out)
            target = staging.install(out)
    except OSError as e:
        raise MlxdError(f"cannot write the model into {store}: {e.strerror or e}") from e
    return ConvertResult(
        name=name,
        path=target,
        source=ref.name,
        quantize=plan.quantize,
        dtype=plan.dtype,
        bytes=dir_size(target),
        seconds=round(time.monotonic() - started, 3),
    )


def _run_converter(
    source: Path, out: Path, plan: ConvertPlan, stage: StageFn | None, asked: str
) -> None:
    from mlxd.backend.hf_convert import convert_checkpoint

    try:
        convert_checkpoint(source, out, plan, stage)
    except (ValueError, TypeError, KeyError) as e:  # mlx-lm's words for a model it cannot take
        raise InvalidRequest(f"cannot convert {asked}: {one_line(e, with_type=False)}") from e
    except FileNotFoundError as e:
        raise ModelBroken(f"cannot convert {asked}: {one_line(e, with_type=False)}") from e


def _check_result(out: Path) -> None:
    """The new checkpoint passes `mlxd health` (too large to run here is still a result)."""
    report = check(out, deep=True)
    bad = [p for p in report.problems if p.severity is not Severity.TOO_LARGE]
    if bad:
        raise ModelBroken(f"the converted model failed its health check: {bad[0].message}")
