"""Cancel while speculating (issue 14): a streaming row whose drafts are being accepted is
cancelled mid-stream in a batch; the other rows (speculating, sampled, plain) finish exactly
as they do alone, and the engine keeps serving. Real forwards."""

from __future__ import annotations

import pytest

from mlxd.engine import Engine, ModelInfo
from mlxd.types import DraftKind, FinishReason, TokenEvent

from .engine_helpers import random_prompts, request

# The drafting policy verifies every draft: these tests check the verify step itself.
pytestmark = pytest.mark.usefixtures("verify_every_draft")

NGRAM = DraftKind.NGRAM
LOOP = [20] * 25  # the tiny checkpoint loops after it: prompt lookup drafts are accepted


def test_cancel_mid_stream_while_speculating(chat: tuple[Engine, ModelInfo]) -> None:
    engine, info = chat
    starts = random_prompts(3, info.vocab_size, (4, 9), seed=21)
    others = [
        (LOOP[:20], dict(draft_kind=NGRAM, num_draft_tokens=3)),
        (starts[0] + LOOP, dict(draft_kind=NGRAM, temperature=0.3, top_k=4, seed=5)),
        (starts[1], dict(temperature=0.8, seed=6)),
        (starts[2], {}),
    ]
    params = dict(max_tokens=40, ignore_eos=True)
    solo = [engine.submit(request(info, p, **o, **params)).collect()[0] for p, o in others]
    long = dict(draft_kind=NGRAM, max_tokens=300, ignore_eos=True)
    victim_alone = engine.submit(request(info, LOOP, **long)).collect()

    victim = engine.submit(request(info, LOOP, **long))
    handles = [engine.submit(request(info, p, **o, **params)) for p, o in others]
    streamed: list[int] = []
    events = iter(victim)
    for event in events:
        assert isinstance(event, TokenEvent)
        streamed += event.token_ids
        if len(streamed) >= 12:
            break
    victim.cancel()
    fin = list(events)[-1]
    assert fin.reason is FinishReason.CANCELLED
    assert fin.timings.accepted_draft_tokens > 0  # it was speculating when cancelled
    assert 12 <= fin.usage.completion_tokens < 300
    assert streamed == victim_alone[0][: len(streamed)]  # greedy: exact up to the cancel

    assert [h.collect()[0] for h in handles] == solo
    again, fin = engine.submit(request(info, LOOP, **long)).collect()
    assert again == victim_alone[0] and fin.reason is FinishReason.LENGTH
    stats = engine.stats()
    assert (stats.running, stats.waiting, stats.kv_tokens_in_use) == (0, 0, 0)
