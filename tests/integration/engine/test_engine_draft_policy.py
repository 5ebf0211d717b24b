"""The drafting policy in a real engine: a row whose drafts keep being rejected stops
drafting when verifying costs something, and drafts every step when it is free; greedy
output is the same either way (real forwards; step costs fixed so the test is exact)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

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


def test_a_parked_dflash_row_runs_no_drafter_forward(
    make_engine: Callable[..., Engine], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the policy parks (a verified position costing 50 plain steps), a DFlash row
    whose pending context outgrows what it keeps drops its oldest states instead of feeding
    them to the drafter: 150 parked steps run no drafter forward, and the answer is plain's.
    Then, with width free, the same request drafts (and still answers the same)."""
    from mlxd.backend.speculation.dflash_drafter import DflashDrafter
    from tests.dflash_checkpoints import make_repeater_pair

    target, drafter = make_repeater_pair(tmp_path)
    engine = make_engine()
    info = engine.load_model(target, draft=drafter)
    fed: list[int] = []
    feed = DflashDrafter._feed

    def counted(self: DflashDrafter, uid: int, pending: list[object]) -> None:
        fed.append(uid)
        feed(self, uid, pending)  # type: ignore[arg-type]

    monkeypatch.setattr(DflashDrafter, "_feed", counted)
    monkeypatch.setattr(StepCosts, "needs_plain", lambda self, rows: False)
    prompt, params = [5, 6, 40] * 7, dict(max_tokens=150, ignore_eos=True)
    plain, _ = engine.submit(request(info, prompt, **params)).collect()
    params.update(draft_kind=DraftKind.DFLASH, num_draft_tokens=4)
    for slope, drafts in ((50.0, False), (0.0, True)):
        monkeypatch.setattr(
            StepCosts, "ratio", lambda self, rows, width, kinds="", s=slope: 1.0 + s * width
        )
        tokens, finish = engine.submit(request(info, prompt, **params)).collect()
        assert tokens == plain
        assert (finish.timings.draft_tokens > 0) is drafts
        if not drafts:
            assert fed == []  # 150 states kept would have fed the drafter past 64
