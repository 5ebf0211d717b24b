"""Refusals at submit (queue full, context overflow, bad params, unknown model, closed
engine) and admission by the KV token budget."""

from __future__ import annotations

import threading

import pytest

from mlxd.engine import Engine, EngineRequest, ModelInfo
from mlxd.errors import (
    ContextOverflow,
    EngineBusy,
    EngineUnavailable,
    InvalidRequest,
    ModelNotFound,
)
from mlxd.types import FinishReason, SamplingParams

from .engine_helpers import random_prompts, request


def test_queue_full_raises_engine_busy_at_once(make_engine, tiny_chat_model) -> None:
    gate = threading.Event()

    def hook(site: str, request_id: str | None) -> None:
        if site == "step":
            gate.wait()  # hold the engine so that submitted requests stay queued

    engine = make_engine(max_queue=2, fault_hook=hook)
    info = engine.load_model(tiny_chat_model)
    accepted = [engine.submit(request(info, [80, 81], max_tokens=2)) for _ in range(2)]
    with pytest.raises(EngineBusy, match="queue is full"):
        engine.submit(request(info, [80, 81], max_tokens=2))
    assert engine.stats().waiting == 2
    gate.set()
    ok = {FinishReason.STOP, FinishReason.LENGTH}
    assert all(h.collect()[1].reason in ok for h in accepted)
    engine.submit(request(info, [80, 81], max_tokens=2)).collect()  # room again


def test_prompt_filling_the_window_is_refused_with_counts(chat: tuple[Engine, ModelInfo]) -> None:
    engine, info = chat
    window = info.context_window
    prompt = random_prompts(1, info.vocab_size, (window, window + 1), seed=8)[0]
    with pytest.raises(ContextOverflow, match=rf"{window} tokens.*window is {window}"):
        engine.submit(request(info, prompt, max_tokens=1))
    assert engine.stats().counters.requests_total == 0


@pytest.mark.parametrize(
    ("prompt", "params", "param"),
    [
        ([], {}, "prompt"),
        ([10**6], {}, "prompt"),
        ([5], {"temperature": -1.0}, "temperature"),
        ([5], {"top_p": 0.0}, "top_p"),
        ([5], {"min_p": 1.5}, "min_p"),
        ([5], {"top_k": -1}, "top_k"),
        ([5], {"max_tokens": 0}, "max_tokens"),
        ([5], {"repetition_penalty": 0.0}, "repetition_penalty"),
        ([5], {"logit_bias": ((10**6, 1.0),)}, "logit_bias"),
        ([5], {"top_logprobs": 50}, "top_logprobs"),
        ([5], {"stop_token_ids": (-1,)}, "stop_token_ids"),
    ],
)
def test_bad_params_are_refused(chat, prompt, params, param) -> None:
    engine, info = chat
    with pytest.raises(InvalidRequest) as err:
        engine.submit(EngineRequest(info.name, prompt, SamplingParams(**params)))
    assert err.value.param == param


def test_unknown_model_and_closed_engine(chat: tuple[Engine, ModelInfo]) -> None:
    engine, info = chat
    with pytest.raises(ModelNotFound):
        engine.submit(EngineRequest("no-such-model", [5]))
    engine.close()
    with pytest.raises(EngineUnavailable, match="closed"):
        engine.submit(request(info, [5], max_tokens=1))
    assert engine.health().ok is False and engine.health().state == "closed"


def test_close_fails_pending_handles(make_engine, tiny_chat_model) -> None:
    engine = make_engine(max_batch=1)
    info = engine.load_model(tiny_chat_model)
    handles = [
        engine.submit(request(info, [90], max_tokens=2000, ignore_eos=True)) for _ in range(3)
    ]
    engine.close()
    finishes = [h.collect()[1] for h in handles]
    assert {f.reason for f in finishes} == {FinishReason.ERROR}
    assert {f.error_code for f in finishes} == {"unavailable"}


def test_kv_budget_limits_how_many_run_together(make_engine, tiny_chat_model) -> None:
    def max_running(budget: int) -> int:
        seen = [0]
        engine: Engine | None = None

        def hook(site: str, request_id: str | None) -> None:
            if site == "step" and engine is not None:
                seen[0] = max(seen[0], engine.stats().running)

        engine = make_engine(kv_budget_tokens=budget, fault_hook=hook)
        info = engine.load_model(tiny_chat_model)
        # each request needs 10 + 20 = 30 KV positions
        prompts = random_prompts(4, info.vocab_size, (10, 11), seed=9)
        handles = [engine.submit(request(info, p, max_tokens=20, ignore_eos=True)) for p in prompts]
        assert all(len(h.collect()[0]) == 20 for h in handles)
        return seen[0]

    assert max_running(10_000) == 4
    assert max_running(65) == 2
    assert max_running(10) == 1  # bigger than the whole budget: runs, but only alone


def test_drain_waits_for_accepted_requests(chat: tuple[Engine, ModelInfo]) -> None:
    engine, info = chat
    handles = [
        engine.submit(request(info, [95, 96], max_tokens=30, ignore_eos=True)) for _ in range(3)
    ]
    assert engine.drain(60) is True
    assert all(h.finished for h in handles)
    assert engine.health().state == "draining"
    with pytest.raises(EngineUnavailable, match="draining"):
        engine.submit(request(info, [5], max_tokens=1))
