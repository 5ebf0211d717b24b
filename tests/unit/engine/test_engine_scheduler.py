"""Scheduler policy, the budget rule and request validation: pure Python."""

from __future__ import annotations

import pytest

from mlxd.engine.collector import Collector
from mlxd.engine.request import EngineRequest, Request, RequestStatus, budget, validate
from mlxd.engine.scheduler import Scheduler
from mlxd.errors import ContextOverflow, InvalidRequest
from mlxd.types import SamplingParams


def make_request(n: int, model: str = "a", prompt: int = 10, max_tokens: int = 10) -> Request:
    return Request(f"r{n}", model, [1] * prompt, SamplingParams(), max_tokens, Collector())


def test_first_come_first_served_up_to_max_batch() -> None:
    s = Scheduler(max_batch=2, kv_budget_tokens=1000)
    reqs = [make_request(i) for i in range(3)]
    for r in reqs:
        s.add(r)
    admitted = s.admissible("a")
    assert admitted == reqs[:2]
    for uid, r in enumerate(admitted):
        s.start(r, uid)
    assert s.admissible("a") == [] and s.kv_in_use == 40
    s.remove(reqs[0])
    assert s.admissible("a") == [reqs[2]]
    assert reqs[0].status is RequestStatus.FINISHED


def test_kv_budget_and_the_alone_rule() -> None:
    s = Scheduler(max_batch=8, kv_budget_tokens=50)
    big, small = make_request(0, prompt=100), make_request(1)
    s.add(big)
    s.add(small)
    assert s.admissible("a") == [big]  # over budget, but runs alone rather than starve
    s.start(big, 0)
    assert s.admissible("a") == []  # small waits behind it
    s.remove(big)
    assert s.admissible("a") == [small] and s.kv_in_use == 0


def test_head_of_line_model_blocks_until_drained() -> None:
    s = Scheduler(max_batch=8, kv_budget_tokens=1000)
    a1, b1, a2 = make_request(0, "a"), make_request(1, "b"), make_request(2, "a")
    for r in (a1, b1, a2):
        s.add(r)
    assert s.model_to_swap_in(None) == "a"
    assert s.admissible("a") == [a1]  # b1 blocks a2: first come first served
    s.start(a1, 0)
    assert s.model_to_swap_in("a") is None  # a1 still running
    s.remove(a1)
    assert s.model_to_swap_in("a") == "b"
    assert s.admissible("b") == [b1]


def test_removing_a_waiting_request() -> None:
    s = Scheduler(max_batch=1, kv_budget_tokens=100)
    r = make_request(0)
    s.add(r)
    s.remove(r)
    assert not s.has_work and r.status is RequestStatus.FINISHED


@pytest.mark.parametrize(
    ("prompt", "window", "params", "ceiling", "expected"),
    [
        (10, 100, SamplingParams(), None, 90),
        (10, 100, SamplingParams(max_tokens=5), None, 5),
        (10, 100, SamplingParams(max_tokens=500), None, 90),
        (10, 100, SamplingParams(max_tokens=45), None, 45),
        (10, 100, SamplingParams(), 30, 30),
        (10, 100, SamplingParams(max_tokens=40), 30, 30),
        (99, 100, SamplingParams(max_tokens=45), 30, 1),
    ],
)
def test_budget_rule(prompt, window, params, ceiling, expected) -> None:
    assert budget(prompt, window, params, ceiling) == expected


@pytest.mark.parametrize("prompt", [100, 101])
def test_prompt_filling_the_window_overflows(prompt: int) -> None:
    with pytest.raises(ContextOverflow, match=f"{prompt} tokens.*window is 100"):
        budget(prompt, 100, SamplingParams(), None)


def test_validate_accepts_good_and_names_bad_fields() -> None:
    good = SamplingParams(
        temperature=0.7,
        top_p=0.9,
        top_k=40,
        min_p=0.05,
        seed=1,
        logit_bias=((3, -5.0),),
        logprobs=True,
        top_logprobs=5,
    )
    validate(EngineRequest("m", [1, 2, 3], good), vocab_size=10)
    with pytest.raises(InvalidRequest) as err:
        validate(EngineRequest("m", [1], SamplingParams(presence_penalty=3.0)), vocab_size=10)
    assert err.value.param == "presence_penalty"
    with pytest.raises(InvalidRequest) as err:
        validate(EngineRequest("m", [1], SamplingParams(max_tokens=0)), vocab_size=10)
    assert err.value.param == "max_tokens"
    with pytest.raises(InvalidRequest) as err:
        validate(EngineRequest("m", [1], SamplingParams(seed=-1)), vocab_size=10)
    assert err.value.param == "seed"


def test_kv_byte_budget_admits_what_fits_next_to_the_running() -> None:
    s = Scheduler(max_batch=8, kv_budget_tokens=10_000)
    reqs = [make_request(i) for i in range(4)]
    for r in reqs:
        r.kv_bytes, r.kv_budget = 300, 1000
        s.add(r)
    admitted = s.admissible("a")
    assert admitted == reqs[:3]  # 900 bytes; a fourth would need 1200
    for uid, r in enumerate(admitted):
        s.start(r, uid)
    assert (s.kv_bytes_in_use, s.kv_budget_bytes) == (900, 1000)
    assert s.admissible("a") == []
    s.remove(reqs[1])
    assert s.kv_bytes_in_use == 600
    assert s.admissible("a") == [reqs[3]]


def test_kv_bytes_of_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from mlxd.backend.api import KvFootprint
    from mlxd.engine import kv_budget
    from mlxd.engine.loaded_models import ModelInfo

    monkeypatch.delenv("MLXD_LOAD_MEMORY_FRACTION", raising=False)
    kv = KvFootprint(per_token=100, windows=((16, 10),), fixed=7)
    assert kv.bytes_for(4) == 400 + 40 + 7 and kv.bytes_for(64) == 6400 + 160 + 7
    assert kv.bytes_per_token == 110
    info = ModelInfo("m", None, None, 4096, kv=kv, kv_headroom=10_000)  # type: ignore[arg-type]
    assert kv_budget.budget_bytes(5000, info) == 5000
    assert kv_budget.budget_bytes(0, info) == 9000  # MLXD_LOAD_MEMORY_FRACTION 0.9
    assert kv_budget.request_bytes(30, 10, info, 5000) == 4000 + 160 + 7
    with pytest.raises(
        InvalidRequest,
        match=r"4167 bytes of KV \(30 prompt \+ 10 new tokens at "
        r"110 bytes per token\), more than the KV budget of 4000 bytes",
    ):
        kv_budget.request_bytes(30, 10, info, 4000)


def test_a_drafters_kv_adds_to_its_rows_only() -> None:
    from mlxd.backend.api import KvFootprint
    from mlxd.engine import kv_budget
    from mlxd.engine.loaded_models import ModelInfo
    from mlxd.types import DraftKind

    kv = KvFootprint(per_token=100, windows=((16, 10),), fixed=7)
    draft = KvFootprint(per_token=50, windows=((16, 5), (8, 1)), fixed=3)
    assert kv.plus(draft) == KvFootprint(150, ((8, 1), (16, 15)), 10)
    info = ModelInfo("m", None, None, 4096, kv=kv, draft_kv=draft)  # type: ignore[arg-type]
    assert kv_budget.request_bytes(30, 10, info, None, DraftKind.MODEL) == 6000 + 248 + 10
    for kind in (None, DraftKind.NONE, DraftKind.NGRAM, DraftKind.MTP):  # MTP: no head here
        assert kv_budget.request_bytes(30, 10, info, None, kind) == 4000 + 160 + 7
    with pytest.raises(InvalidRequest, match=r"at 166 bytes per token, 56 of them its dflash"):
        kv_budget.request_bytes(30, 10, info, 5000, DraftKind.DFLASH)


def test_a_one_row_model_admits_one_at_a_time() -> None:
    s = Scheduler(max_batch=8, kv_budget_tokens=1000)
    reqs = [make_request(i) for i in range(3)]
    for r in reqs:
        s.add(r)
    assert s.admissible("a", rows=1) == [reqs[0]]
    s.start(reqs[0], 0)
    assert s.admissible("a", rows=1) == []
    s.remove(reqs[0])
    assert s.admissible("a", rows=1) == [reqs[1]]
