"""stream_interval_s on a real checkpoint: fewer, larger TokenEvents, the same tokens."""

from __future__ import annotations

import math
import time

from mlxd.types import FinishEvent, TokenEvent

from .engine_helpers import random_prompts, request


def token_events(engine, info, prompt) -> tuple[list[TokenEvent], FinishEvent, float]:
    start = time.monotonic()
    events = list(engine.submit(request(info, prompt, max_tokens=40, ignore_eos=True)))
    finish = events[-1]
    assert isinstance(finish, FinishEvent) and finish.error is None
    return [e for e in events if isinstance(e, TokenEvent)], finish, time.monotonic() - start


def test_stream_interval_merges_deltas_and_keeps_tokens(make_engine, tiny_chat_model) -> None:
    every = make_engine(stream_interval_s=0.0)
    coalesced = make_engine(stream_interval_s=1.0)
    info_every = every.load_model(tiny_chat_model)
    info_coalesced = coalesced.load_model(tiny_chat_model)
    for prompt in random_prompts(3, info_every.vocab_size, (5, 60), seed=9):
        events_every, _, _ = token_events(every, info_every, prompt)
        events_coalesced, finish, seconds = token_events(coalesced, info_coalesced, prompt)
        joined = [t for e in events_coalesced for t in e.token_ids]
        assert joined == [t for e in events_every for t in e.token_ids]
        assert len(joined) == finish.usage.completion_tokens == 40
        # The consumer is woken for the first token, then at most once per 1 s interval, and
        # by the finish: 40 tokens take ~40 ms here (2 events), longer on a loaded machine.
        assert len(events_coalesced) <= 2 + math.floor(seconds)
