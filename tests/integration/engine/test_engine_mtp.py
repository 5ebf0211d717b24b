"""Speculation with the checkpoint's MTP head (issue 27, kind `mtp`): greedy output equals
greedy output without speculation on a tiny llama and a tiny Qwen3-Next with random heads
(an mtp.safetensors beside each), alone and in a batch of 8 mixing mtp, ngram and no
drafts; a head built to predict its target exactly has every draft accepted; a checkpoint
without a head, or with one that does not fit, is refused in one line. Real forwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.engine import Engine, ModelInfo
from mlxd.errors import InvalidRequest
from mlxd.types import DraftKind
from tests.mtp_checkpoints import copy_with_head, make_successor_checkpoint, successor

from .engine_helpers import random_prompts, request

pytestmark = pytest.mark.usefixtures("verify_every_draft")

MTP, NGRAM, NONE = DraftKind.MTP, DraftKind.NGRAM, DraftKind.NONE


def _prompts(info: ModelInfo, n: int) -> list[list[int]]:
    return random_prompts(n, info.vocab_size, (5, 25), seed=13)


def _run(engine: Engine, info: ModelInfo, prompts: list[list[int]], **params: object):
    handles = [engine.submit(request(info, p, **params)) for p in prompts]
    return [h.collect()[0] for h in handles]


def _counts(engine: Engine) -> tuple[int, int, int]:
    c = engine.stats().counters
    return c.draft_tokens_total, c.accepted_tokens_total, c.steps_total


@pytest.fixture(params=["tiny_mtp_model", "tiny_gated_mtp_model"])
def with_head(request: pytest.FixtureRequest, make_engine) -> tuple[Engine, ModelInfo]:
    engine = make_engine()
    return engine, engine.load_model(request.getfixturevalue(request.param))


def test_mtp_alone_equals_plain(with_head: tuple[Engine, ModelInfo]) -> None:
    engine, info = with_head
    assert info.mtp_problem is None
    params = dict(max_tokens=30, ignore_eos=True)
    for prompt in _prompts(info, 3):
        plain = _run(engine, info, [prompt], draft_kind=NONE, **params)
        assert _run(engine, info, [prompt], draft_kind=MTP, num_draft_tokens=3, **params) == plain
    drafted, _, _ = _counts(engine)
    assert drafted > 0


def test_mtp_mixed_batch_of_8_equals_plain(with_head: tuple[Engine, ModelInfo]) -> None:
    engine, info = with_head
    prompts = _prompts(info, 8)
    params = dict(max_tokens=24, ignore_eos=True)
    plain = _run(engine, info, prompts, draft_kind=NONE, **params)
    kinds = [MTP, NGRAM, NONE]
    handles = [
        engine.submit(
            request(info, p, draft_kind=kinds[i % 3], num_draft_tokens=1 + i % 4, **params)
        )
        for i, p in enumerate(prompts)
    ]
    results = [h.collect() for h in handles]
    assert [tokens for tokens, _ in results] == plain
    drafted, accepted, _ = _counts(engine)
    assert drafted > 0
    counters = engine.stats().counters  # per kind, adding up to the totals
    assert counters.drafted_by_kind["mtp"] > 0 and counters.drafted_by_kind["model"] == 0
    assert sum(counters.drafted_by_kind.values()) == drafted
    assert sum(counters.accepted_by_kind.values()) == accepted
    kinds_seen = [finish.timings.draft_kind for _, finish in results]
    assert kinds_seen[:3] == ["mtp", "ngram", None]


def test_a_head_that_predicts_its_target_has_every_draft_accepted(
    make_engine, tmp_path: Path
) -> None:
    """The target's next token is successor(current); the head computes the same map, so
    after the first step every draft is accepted: 1 + K tokens per forward."""
    path = make_successor_checkpoint(tmp_path / "successor")
    engine = make_engine()
    info = engine.load_model(path)
    prompts = _prompts(info, 4)
    params = dict(max_tokens=40, ignore_eos=True)
    plain = _run(engine, info, prompts, draft_kind=NONE, **params)
    for prompt, tokens in zip(prompts, plain, strict=True):
        expected = [successor(prompt[-1], info.vocab_size)]
        while len(expected) < len(tokens):
            expected.append(successor(expected[-1], info.vocab_size))
        assert tokens == expected  # the checkpoint does what it says
    _, _, before = _counts(engine)
    for prompt, tokens in zip(prompts, plain, strict=True):
        assert _run(engine, info, [prompt], draft_kind=MTP, num_draft_tokens=3, **params) == [
            tokens
        ]
    drafted, accepted, after = _counts(engine)
    assert drafted > 0 and accepted == drafted
    assert 160 / (after - before) >= 3.0  # tokens per step: 4 per forward, less the first


@pytest.mark.parametrize("chunk", [512, 7])
def test_the_head_primed_over_the_prompt_drafts_at_the_first_step(
    make_engine, tmp_path: Path, chunk: int
) -> None:
    """The head's KV holds the prompt (prefilled whole, or in chunks of 7 tokens): the first
    decode step already drafts, and the head that predicts its target has it all accepted
    (4 tokens in one verify step: the sampled first token and 3 drafts)."""
    path = make_successor_checkpoint(tmp_path / "successor")
    engine = make_engine(prefill_chunk=chunk)
    info = engine.load_model(path)
    prompts = random_prompts(3, info.vocab_size, (9, 30), seed=5)
    params = dict(max_tokens=4, ignore_eos=True, num_draft_tokens=3)
    plain = _run(engine, info, prompts, draft_kind=NONE, **params)
    for prompt, tokens in zip(prompts, plain, strict=True):
        handle = engine.submit(request(info, prompt, draft_kind=MTP, **params))
        out, finish = handle.collect()
        assert out == tokens
        assert (finish.timings.draft_tokens, finish.timings.accepted_draft_tokens) == (3, 3)


def test_a_parked_row_never_runs_the_head(
    make_engine, tiny_mtp_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the policy parks every step, rows of kind `mtp` cost no head forward: not its
    priming over the prompt, not at their end (their answers keep no head state), not on a
    prefix hit of the same prompts; greedy output as without drafts."""
    from mlxd.backend.speculation.draft_policy import StepCosts
    from mlxd.backend.speculation.mtp_head import MtpHead

    monkeypatch.setattr(StepCosts, "ratio", lambda self, rows, width, kinds="": 100.0)
    calls = []
    head_call = MtpHead.__call__

    def counted(self: MtpHead, *args: object, **kwargs: object) -> object:
        calls.append(1)
        return head_call(self, *args, **kwargs)

    monkeypatch.setattr(MtpHead, "__call__", counted)
    engine = make_engine()
    info = engine.load_model(tiny_mtp_model)
    prompts = _prompts(info, 4)
    params = dict(max_tokens=12, ignore_eos=True)
    plain = _run(engine, info, prompts, draft_kind=NONE, **params)
    for _ in range(2):  # the second time from the prefix cache
        assert _run(engine, info, prompts, draft_kind=MTP, num_draft_tokens=3, **params) == plain
    assert _counts(engine)[0] == 0 and calls == []


def _first_head_kv(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """After each MtpDrafter.propose, the keys of its batch's first row (numpy)."""
    import numpy as np

    from mlxd.backend.speculation.mtp_drafter import MtpDrafter

    seen: list[object] = []
    propose = MtpDrafter.propose

    def recording(self: MtpDrafter, asks: list) -> list[list[int]]:
        drafts = propose(self, asks)
        assert self._cache is not None
        seen.append(np.array(self._cache[0].extract(0).keys))
        return drafts

    monkeypatch.setattr(MtpDrafter, "propose", recording)
    return seen


def test_a_prefix_hit_restores_the_heads_kv(
    make_engine, tiny_mtp_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second turn reuses the first's snapshot and the head's state kept with it: its
    first draft reads a head KV over its whole context, as a cold prefill of the same
    prompt gives (not only over the tokens it prefilled); greedy output as without drafts."""
    import numpy as np

    seen = _first_head_kv(monkeypatch)
    params = dict(max_tokens=8, ignore_eos=True, num_draft_tokens=2)
    warm = make_engine()
    info = warm.load_model(tiny_mtp_model)
    first = random_prompts(1, info.vocab_size, (40, 41), seed=3)[0]
    answer, _ = warm.submit(request(info, first, draft_kind=MTP, **params)).collect()
    second = [*first, *answer, 7, 8, 9, 10, 11]
    seen.clear()
    tokens, finish = warm.submit(request(info, second, draft_kind=MTP, **params)).collect()
    assert finish.usage.cached_tokens >= len(first)
    restored = seen[0]
    cold = make_engine(prefix_cache_bytes=0)
    cold_info = cold.load_model(tiny_mtp_model)
    seen.clear()
    again, _ = cold.submit(request(cold_info, second, draft_kind=MTP, **params)).collect()
    plain, _ = cold.submit(request(cold_info, second, draft_kind=NONE, **params)).collect()
    assert tokens == again == plain
    assert restored.shape == seen[0].shape and restored.shape[2] == len(second)
    np.testing.assert_allclose(restored, seen[0], rtol=1e-3, atol=1e-4)


def test_a_prefix_hit_cut_inside_the_heads_kv(
    make_engine, tiny_mtp_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prompt departing from the first turn's inside its prompt reuses the snapshot cut
    back: the head's KV is cut with it (the pair at the cut goes: the head reads that
    position by its token alone), the rest as a cold prefill gives; output exact."""
    import numpy as np

    seen = _first_head_kv(monkeypatch)
    params = dict(max_tokens=6, ignore_eos=True, num_draft_tokens=2)
    warm = make_engine()
    info = warm.load_model(tiny_mtp_model)
    first = random_prompts(1, info.vocab_size, (40, 41), seed=4)[0]
    warm.submit(request(info, first, draft_kind=MTP, **params)).collect()
    second = [*first[:30], *(t % 500 + 3 for t in first[30:])]
    seen.clear()
    tokens, finish = warm.submit(request(info, second, draft_kind=MTP, **params)).collect()
    assert finish.usage.cached_tokens == 30
    restored = seen[0]
    cold = make_engine(prefix_cache_bytes=0)
    cold_info = cold.load_model(tiny_mtp_model)
    seen.clear()
    plain, _ = cold.submit(request(cold_info, second, draft_kind=NONE, **params)).collect()
    cold.submit(request(cold_info, second, draft_kind=MTP, **params)).collect()
    assert tokens == plain and restored.shape == seen[0].shape
    kept = [j for j in range(len(second)) if j != 29]  # the pair of the cut position differs
    np.testing.assert_allclose(restored[:, :, kept], seen[0][:, :, kept], rtol=1e-3, atol=1e-4)
    assert not np.allclose(restored[:, :, 29], seen[0][:, :, 29])


def test_no_head_is_refused_in_one_line(make_engine, tiny_chat_model: Path) -> None:
    engine = make_engine()
    info = engine.load_model(tiny_chat_model)
    with pytest.raises(InvalidRequest, match="carries no MTP head") as caught:
        engine.submit(request(info, [5, 6, 7], draft_kind=MTP, max_tokens=4))
    assert "\n" not in str(caught.value) and caught.value.param == "draft_kind"
    # The engine's default kind falls back to none on it (as `model` without a draft).
    default = make_engine(draft_kind=MTP)
    other = default.load_model(tiny_chat_model)
    assert len(_run(default, other, [[5, 6, 7]], max_tokens=4, ignore_eos=True)[0]) == 4


def test_a_head_that_does_not_fit_is_refused(
    make_engine, tiny_chat_model: Path, tmp_path: Path
) -> None:
    path = copy_with_head(tiny_chat_model, tmp_path / "misfit", shapes={"mtp.fc.weight": (8, 8)})
    engine = make_engine()
    info = engine.load_model(path)
    assert info.mtp_problem is not None and "does not fit" in info.mtp_problem
    with pytest.raises(InvalidRequest, match="does not fit") as caught:
        engine.submit(request(info, [5, 6, 7], draft_kind=MTP, max_tokens=4))
    assert "\n" not in str(caught.value)
    plain = _run(engine, info, [[5, 6, 7]], max_tokens=4, ignore_eos=True)
    assert len(plain[0]) == 4  # the model itself serves as before


def _drafts_exactly(make_engine, path: Path, rows: int, alone_first: bool = False) -> None:
    """The checkpoint at `path` loads with a usable head, and K=2 MTP drafting gives plain
    greedy's answers (first alone if asked, then for `rows` rows side by side), drafting."""
    engine = make_engine()
    info = engine.load_model(path)
    assert info.mtp_problem is None
    params = dict(max_tokens=16, ignore_eos=True)
    prompts = _prompts(info, rows)
    plain = _run(engine, info, prompts, draft_kind=NONE, **params)
    if alone_first:
        one = _run(engine, info, prompts[:1], draft_kind=MTP, num_draft_tokens=2, **params)
        assert one == plain[:1]
    assert _run(engine, info, prompts, draft_kind=MTP, num_draft_tokens=2, **params) == plain
    assert _counts(engine)[0] > 0


def test_an_moe_head_with_its_experts_apart_loads(make_engine, tmp_path: Path) -> None:
    """A Qwen3-Next with MoE layers and a head whose experts come apart, as HF ships them
    (mlx-lm's layer wants them stacked): it loads and drafts, exactly."""
    from tests.checkpoints import make_checkpoint
    from tests.mtp_checkpoints import add_mtp_head, unstack_experts

    path = unstack_experts(add_mtp_head(make_checkpoint(tmp_path / "moe", "gated_moe")))
    _drafts_exactly(make_engine, path, rows=2)


def test_a_float_head_beside_a_quantized_target(
    make_engine, tiny_quant_model: Path, tiny_chat_model: Path, tmp_path: Path
) -> None:
    """A 4-bit target with a float head (HF ships heads unquantized): the head's layer is
    built in float, and drafts exactly."""
    path = copy_with_head(tiny_quant_model, tmp_path / "quant-mtp", like=tiny_chat_model)
    _drafts_exactly(make_engine, path, rows=2)


@pytest.mark.parametrize(("family", "sidecar"), [("glm4_moe", False), ("deepseek_v3", True)])
def test_a_next_token_layer_as_deepseek_and_glm_ship_it(
    make_engine, tmp_path: Path, family: str, sidecar: bool
) -> None:
    """A tiny GLM-4 MoE / DeepSeek-V3 (a dense first layer, an MoE second) whose head sits at
    model.layers.2 (in its safetensors; DeepSeek's in an mtp.safetensors, see
    make_nextn_checkpoint), named enorm / hnorm / eh_proj / shared_head, experts apart,
    DeepSeek's kv_b_proj unsplit: it loads (built like the target's last, sparse, layer,
    sanitized as the target's) and drafts, exactly, alone and in a batch."""
    from tests.mtp_checkpoints import make_nextn_checkpoint

    path = make_nextn_checkpoint(tmp_path / family, family, sidecar=sidecar)
    _drafts_exactly(make_engine, path, rows=3, alone_first=True)
