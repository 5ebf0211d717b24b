"""A drafter's KV in admission by bytes (issues 27 and 30): a row that speculates with a draft
model, an MTP head or a DFlash drafter holds the drafter's KV of its context beside the
target's, measured from the drafter's own caches; admission counts it for the rows of that
kind only, so a byte budget that runs N plain rows at once runs fewer drafting ones.
Real forwards on tiny float32 checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.engine import RequestHandle, RequestStatus
from mlxd.errors import InvalidRequest
from mlxd.types import DraftKind
from tests.dflash_checkpoints import make_dflash_drafter, make_qwen3_target

from .conftest import EngineFactory
from .engine_helpers import random_prompts, request

# tiny-chat: 2 layers x (keys + values) x 2 KV heads x head dim 16 x float32
TINY_CHAT = 2 * 2 * 2 * 16 * 4


def test_each_drafters_bytes_per_token_are_measured(
    make_engine: EngineFactory,
    tiny_chat_model: Path,
    tiny_draft_model: Path,
    tiny_mtp_model: Path,
    tmp_path: Path,
) -> None:
    engine = make_engine()
    drafted = engine.load_model(tiny_chat_model, draft=tiny_draft_model)
    assert drafted.draft_kv.per_token == TINY_CHAT  # the draft is tiny-chat's shape
    assert drafted.row_kv(DraftKind.MODEL).per_token == 2 * TINY_CHAT
    assert drafted.row_kv(DraftKind.NGRAM) == drafted.kv == drafted.row_kv(DraftKind.NONE)
    attached = engine.draft_of(drafted)  # what /health and /v1/models say
    assert attached is not None and attached.kv_bytes_per_token == TINY_CHAT
    head = make_engine().load_model(tiny_mtp_model)
    assert head.mtp_kv.per_token == TINY_CHAT // 2  # the head's one layer
    assert head.row_kv(DraftKind.MTP).per_token == 3 * TINY_CHAT // 2
    target = make_qwen3_target(tmp_path / "qwen3")
    drafter = make_dflash_drafter(tmp_path / "qwen3-dflash", target)
    dflash = make_engine().load_model(target, draft=drafter)
    # its one layer: (keys + values) x 4 KV heads x head dim 16 x float32, per context position
    assert dflash.draft_kv.per_token == 2 * 4 * 16 * 4
    assert dflash.kv.per_token == 2 * dflash.draft_kv.per_token
    assert dflash.row_kv(DraftKind.DFLASH).per_token == 3 * dflash.draft_kv.per_token


@pytest.mark.parametrize(
    ("kind", "at_once"), [(DraftKind.NONE, 4), (DraftKind.MODEL, 2), (DraftKind.MTP, 2)]
)
def test_a_budget_of_four_plain_rows_runs_fewer_drafting_ones(
    make_engine: EngineFactory,
    tiny_chat_model: Path,
    tiny_draft_model: Path,
    tiny_mtp_model: Path,
    kind: DraftKind,
    at_once: int,
) -> None:
    handles: list[RequestHandle] = []
    running: list[int] = []

    def hook(site: str, request_id: str | None) -> None:
        if site == "step" and len(handles) == 4:  # engine thread: how many decode now
            running.append(sum(h.status is RequestStatus.DECODING for h in handles))

    model, draft = (tiny_mtp_model, None) if kind is DraftKind.MTP else (tiny_chat_model, None)
    if kind is DraftKind.MODEL:
        draft = tiny_draft_model
    plain = make_engine().load_model(model).kv.bytes_for(60 + 20)
    engine = make_engine(max_batch=8, kv_budget_bytes=4 * plain, fault_hook=hook)
    info = engine.load_model(model, draft=draft)
    for prompt in random_prompts(4, info.vocab_size, (60, 61), seed=5):
        params = dict(max_tokens=20, ignore_eos=True, draft_kind=kind)
        handles.append(engine.submit(request(info, prompt, **params)))
    answers = [h.collect()[0] for h in handles]
    assert all(len(tokens) == 20 for tokens in answers)
    assert max(running) == at_once  # MODEL: 2x the bytes a row; MTP: 1.5x (4 / 1.5 -> 2)
    assert engine.stats().kv_bytes_in_use == 0


def test_a_drafting_request_too_large_is_refused_with_the_drafters_share(
    make_engine: EngineFactory, tiny_chat_model: Path, tiny_draft_model: Path
) -> None:
    plain = make_engine().load_model(tiny_chat_model).kv.bytes_for(100 + 50)
    engine = make_engine(kv_budget_bytes=plain)
    info = engine.load_model(tiny_chat_model, draft=tiny_draft_model)
    prompt = random_prompts(1, info.vocab_size, (100, 101), seed=4)[0]
    with pytest.raises(InvalidRequest) as refused:
        engine.submit(request(info, prompt, max_tokens=50, draft_kind=DraftKind.MODEL))
    assert f"at {2 * TINY_CHAT} bytes per token, {TINY_CHAT} of them its model drafter's" in str(
        refused.value
    )
    # the same request without the draft (the default kind here) fits
    alone = request(info, prompt, max_tokens=50, draft_kind=DraftKind.NONE)
    assert len(engine.submit(alone).collect()[0]) > 0
