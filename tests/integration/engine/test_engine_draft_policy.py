"""The drafting policy in a real engine: a row whose drafts keep being rejected stops
drafting when verifying costs something, and drafts every step when it is free; greedy
output is the same either way (real forwards; step costs fixed so the test is exact)."""

from __future__ import annotations

import pytest

from mlxd.backend.speculation.draft_policy import StepCosts
from mlxd.backend.speculation.drafts import NgramIndex
from mlxd.engine import Engine, ModelInfo
from mlxd.types import DraftKind

from .engine_helpers import request

TOKENS = 120


def _run(engine: Engine, info: ModelInfo, draft: bool) -> tuple[list[int], int]:
    params = dict(max_tokens=TOKENS, ignore_eos=True)
    if draft:
        params.update(draft_kind=DraftKind.NGRAM, num_draft_tokens=4)
    tokens, finish = engine.submit(request(info, [20, 100, 300] * 8, **params)).collect()
    return tokens, finish.timings.draft_tokens


@pytest.mark.parametrize("slope", [0.0, 0.25])
def test_a_row_whose_drafts_are_rejected_stops_drafting_when_width_costs(
    chat: tuple[Engine, ModelInfo], monkeypatch: pytest.MonkeyPatch, slope: float
) -> None:
    engine, info = chat
    wrong = info.vocab_size - 1  # proposed at every step; the target (almost) never says it

    def propose(self: NgramIndex, tokens: list[int], last: int, k: int) -> list[int]:
        return [wrong] * k

    monkeypatch.setattr(NgramIndex, "propose", propose)
    monkeypatch.setattr(NgramIndex, "may_propose", lambda self, tokens: True)
    monkeypatch.setattr(StepCosts, "ratio", lambda self, rows, width, kinds="": 1.0 + slope * width)
    monkeypatch.setattr(StepCosts, "needs_plain", lambda self, rows: False)
    plain, _ = _run(engine, info, draft=False)
    spec, drafted = _run(engine, info, draft=True)
    assert spec == plain
    assert wrong not in plain
    if slope == 0.0:  # free width: every step verifies a full draft
        assert drafted >= 4 * (TOKENS - 4)  # the last steps have less room
    else:  # a few probes: the first steps, then one now and then as the record relaxes
        assert 0 < drafted <= TOKENS // 8
        assert engine.stats().counters.parked_steps_total > TOKENS // 2  # parked, counted


def test_a_seeded_sampled_row_repeats_whatever_the_step_costs(
    chat: tuple[Engine, ModelInfo], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its tokens depend on which drafts are verified: it verifies all of its own. After a run
    of one token the checkpoint loops at a low temperature, so drafts come whatever the seed."""
    engine, info = chat
    params = dict(max_tokens=60, ignore_eos=True, temperature=0.3, seed=11)
    params.update(draft_kind=DraftKind.NGRAM, num_draft_tokens=4)
    outputs = []
    for slope in (0.0, 5.0):
        monkeypatch.setattr(
            StepCosts, "ratio", lambda self, rows, width, kinds="", s=slope: 1 + s * width
        )
        monkeypatch.setattr(StepCosts, "needs_plain", lambda self, rows: False)
        handle = engine.submit(request(info, [20] * 25, **params))
        tokens, finish = handle.collect()
        outputs.append(tokens)
        assert finish.timings.draft_tokens > 0
    assert outputs[0] == outputs[1]
