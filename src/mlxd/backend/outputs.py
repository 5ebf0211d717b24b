"""What one backend step returns (plain values: no mlx import here)."""

from __future__ import annotations

from dataclasses import dataclass

from mlxd.types import TokenLogprob


@dataclass(slots=True)
class StepOutput:
    """One generated token of one sequence; `finish` is "stop", "length" or None."""

    uid: int
    token: int
    finish: str | None
    logprob: TokenLogprob | None


@dataclass(slots=True)
class PrefillProgress:
    uid: int
    done: int
    total: int


@dataclass(slots=True)
class StepResult:
    tokens: list[StepOutput]
    prefill: list[PrefillProgress]
