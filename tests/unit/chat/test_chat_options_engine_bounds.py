"""One range per sampling option: the option table and the engine accept exactly the same values."""

from __future__ import annotations

import math
from typing import Any

import pytest

from mlxd.chat.options import OPTIONS, ChatOptions, Option, OptionKind, sampling_params
from mlxd.engine.request import EngineRequest, validate
from mlxd.errors import InvalidRequest
from mlxd.types import SamplingParams


def resolve(
    raw: dict[Any, Any], model_defaults: dict[str, object] | None = None, **kw: Any
) -> SamplingParams:
    """Raw options (as a front door gets them) through ChatOptions into SamplingParams."""
    return sampling_params(ChatOptions.parse(raw), model_defaults, **kw)


BOUNDED = [o for o in OPTIONS.values() if o.bounds is not None]


def edges(opt: Option) -> tuple[list[float], list[float]]:
    """(values just inside the range, values just outside it), down to the last float."""
    b = opt.bounds
    assert b is not None
    if opt.kind in (OptionKind.INT, OptionKind.SEED):
        low, high = int(b.low), int(b.high)
        inside = [low + 1 if b.low_open else low, high]
        return inside, [low if b.low_open else low - 1, high + 1]
    up, down = math.inf, -math.inf
    inside = [math.nextafter(b.low, up) if b.low_open else b.low, (b.low + b.high) / 2, b.high]
    outside = [b.low if b.low_open else math.nextafter(b.low, down), math.nextafter(b.high, up)]
    return inside, outside + [math.inf, -math.inf, math.nan]


def option_accepts(opt: Option, value: float) -> bool:
    raw: object = {7: value} if opt.name == "logit_bias" else value
    try:
        resolve({opt.name: raw})
    except InvalidRequest as e:
        assert e.param == opt.name
        return False
    return True


def engine_accepts(opt: Option, value: float) -> bool:
    assert opt.target is not None
    field: object = ((7, value),) if opt.name == "logit_bias" else value
    params = SamplingParams(**{opt.target: field})  # type: ignore[arg-type]
    try:
        validate(EngineRequest("m", [1, 2], params), vocab_size=10)
    except InvalidRequest as e:
        assert e.param == opt.target  # an alias (repeat_last_n) is its target's field there
        return False
    return True


def test_every_numeric_sampling_field_is_bounded() -> None:
    numeric = {"temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed"}
    assert numeric <= {o.name for o in BOUNDED}
    assert all(o.target is not None for o in BOUNDED)


@pytest.mark.parametrize("opt", BOUNDED, ids=[o.name for o in BOUNDED])
def test_option_table_and_engine_agree_at_every_edge(opt: Option) -> None:
    inside, outside = edges(opt)
    for value in inside:
        assert option_accepts(opt, value), (opt.name, value)
        assert engine_accepts(opt, value), (opt.name, value)
    for value in outside:
        assert not option_accepts(opt, value), (opt.name, value)
        assert not engine_accepts(opt, value), (opt.name, value)


def test_top_p_zero_is_refused_by_the_table_not_only_by_the_engine() -> None:
    with pytest.raises(InvalidRequest, match="top_p must be > 0"):
        resolve({"top_p": 0.0})
