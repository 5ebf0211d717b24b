"""One step's draws and logit biases over a whole batch (backend.sampling.sample_rows,
backend.logits_processing.process_rows): each row's result is exactly what its own sampler and
processors give on that row alone, in any batch; the draws follow softmax at the request's
temperature after its filters (chi-square goodness of fit against the exact law)."""

from __future__ import annotations

import math
from collections import Counter

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import TokenBuffer
from mlx_lm.sample_utils import make_presence_penalty, make_repetition_penalty

from mlxd.backend.sampling import draws
from mlxd.backend.sampling.logits_processing import (
    BatchBias,
    GuardedProcessor,
    LogitBias,
    process_rows,
)
from mlxd.backend.sampling.samplers import GREEDY, Sampler, guard_sampler, make_sampler, sample_rows
from mlxd.types import SamplingParams

V = 64

# Every kind of row a batch can hold: greedy, tempered, each filter, several filters.
ROWS = [
    dict(temperature=0.0),
    dict(temperature=0.7),
    dict(temperature=1.3, top_k=3),
    dict(temperature=0.9, top_p=0.8),
    dict(temperature=1.0, min_p=0.05),
    dict(temperature=0.5, top_p=0.95, top_k=10),
    dict(temperature=0.0),
    dict(temperature=1.7),
]


def samplers(rows: list[int]) -> list[Sampler]:
    """Fresh samplers for ROWS[i], i in `rows`, each seeded by its ROWS index."""
    return [make_sampler(SamplingParams(seed=i, **ROWS[i]), V) for i in rows]  # type: ignore[arg-type]


def logprobs(step: int, rows: int) -> mx.array:
    x = mx.random.normal((rows, V), key=mx.random.key(step)) * 3.0
    return x - mx.logsumexp(x, axis=-1, keepdims=True)


def test_each_row_draws_what_it_draws_alone_in_any_batch() -> None:
    order = list(range(len(ROWS)))
    batch, alone = samplers(order), samplers(order)
    other_order = [5, 2, 7, 0, 3]  # another batch: fewer rows, other neighbours
    other = samplers(other_order)
    for step in range(6):
        lp = logprobs(step, len(ROWS))
        tokens = sample_rows(lp, batch).tolist()
        by_itself = [int(s(lp[e : e + 1]).item()) for e, s in enumerate(alone)]  # type: ignore[arg-type]
        assert tokens == by_itself, step
        assert sample_rows(lp[mx.array(other_order)], other).tolist() == [
            tokens[i] for i in other_order
        ]
    greedy = [e for e, row in enumerate(ROWS) if row["temperature"] == 0.0]
    assert all(tokens[e] == int(mx.argmax(lp[e]).item()) for e in greedy)


def test_a_seed_repeats_and_each_draw_moves_on() -> None:
    lp = mx.broadcast_to(logprobs(0, 1), (40, V))

    def fresh(seed: int) -> Sampler:
        return make_sampler(SamplingParams(temperature=1.0, seed=seed), V)

    twins = sample_rows(lp[:2], [fresh(3), fresh(3)]).tolist()
    assert twins[0] == twins[1]  # one seed, one draw index: one token
    one = fresh(3)
    stream = [int(sample_rows(lp[:1], [one]).item()) for _ in range(40)]
    assert stream[0] == twins[0] and len(set(stream)) > 5  # later draws move on
    assert len(set(sample_rows(lp, [fresh(s) for s in range(40)]).tolist())) > 5


def _kept(p: np.ndarray, top_p: float, top_k: int) -> np.ndarray:
    """The tokens mlx-lm's top-p then top-k keep (written here from their definitions): a
    token stays if the mass strictly above it is below top_p, and it is among the k best."""
    above = np.array([p[p > x].sum() for x in p])
    keep = above < top_p
    if top_k:
        keep &= np.argsort(np.argsort(-p)) < top_k
    return keep


def _critical(df: int) -> float:
    """The 0.999 quantile of chi-square (Wilson-Hilferty; scipy is not a dependency)."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + 3.0902 * math.sqrt(a)) ** 3


@pytest.mark.parametrize(
    "params",
    [dict(temperature=1.3), dict(temperature=0.6, top_p=0.9, top_k=5), dict(temperature=0.8)],
)
def test_draws_follow_softmax_at_temperature_after_the_filters(params: dict) -> None:
    n, vocab = 6000, 8
    logits = np.array([2.0, 1.6, 1.1, 0.9, 0.4, 0.0, -0.5, -1.5], dtype=np.float32)
    lp = logits - np.log(np.exp(logits).sum())
    keep = _kept(np.exp(lp), params.get("top_p", 1.0), params.get("top_k", 0))
    w = np.where(keep, np.exp(lp / params["temperature"]), 0.0)
    law = w / w.sum()
    rows = [make_sampler(SamplingParams(seed=s, **params), vocab) for s in range(n)]
    batch = mx.broadcast_to(mx.array(lp)[None], (n, vocab))
    seen = Counter(sample_rows(batch, rows).tolist())
    assert set(seen) <= set(np.flatnonzero(keep).tolist())  # never a filtered token
    expected = n * law[keep]
    observed = np.array([seen[t] for t in np.flatnonzero(keep)])
    stat = float(((observed - expected) ** 2 / expected).sum())
    assert stat < _critical(int(keep.sum()) - 1), (stat, observed, expected)


def test_uniforms_are_uniform_exact_in_float32_and_never_repeat() -> None:
    key = draws.stream_key(12345)
    us = np.array([draws.uniform(key, i) for i in range(20000)])
    lanes = [draws.uniform(key, 7, lane) for lane in range(17)]
    assert us.min() >= 0.0 and us.max() < 1.0
    assert np.all(us * 2**draws.UNIFORM_BITS == np.floor(us * 2**draws.UNIFORM_BITS))
    assert len(set(lanes)) == len(lanes) and draws.uniform(draws.stream_key(12346), 0) != us[0]
    counts = np.bincount((us * 20).astype(int), minlength=20)
    assert float(((counts - 1000) ** 2 / 1000).sum()) < _critical(19)


def test_inverse_cdf_never_draws_a_zero_weight_token() -> None:
    w = mx.array([[0.0, 0.25, 0.0, 0.75, 0.0, 0.0]] * 4)
    top = 1.0 - 2.0**-draws.UNIFORM_BITS
    u = mx.array([[0.0], [0.2499], [0.25], [top]])
    assert draws.inverse_cdf(w, u).tolist() == [1, 1, 3, 3]


def _processors(on_error: list[BaseException]) -> list[list]:
    def broken(tokens: mx.array, logits: mx.array) -> mx.array:
        raise RuntimeError("processor broke")

    def record(exc: BaseException) -> None:
        on_error.append(exc)

    return [
        [LogitBias([(3, -100.0), (5, 2.5)])],
        [],
        [LogitBias([(3, 7.0)]), make_repetition_penalty(1.5, 8)],
        [make_presence_penalty(0.5, 8)],
        [GuardedProcessor(LogitBias([(0, -1.0), (V - 1, 1.0)]), record)],
        [GuardedProcessor(broken, record)],
        [make_presence_penalty(0.7, 8), LogitBias([(2, 1.0)])],  # bias not first: per row
    ]


def test_batched_logit_bias_and_processors_equal_each_row_alone() -> None:
    errors: list[BaseException] = []
    procs = _processors(errors)
    history = [[(7 * e + j) % V for j in range(5)] for e in range(len(procs))]
    inputs = mx.array([4, 9, 3, 3, 1, 2, 5])
    logits = mx.random.normal((len(procs), V), key=mx.random.key(1))
    contexts = [TokenBuffer(h) for h in history]
    got, _ = process_rows(logits, inputs, procs, contexts, BatchBias())
    for e, row_procs in enumerate(procs):
        row = logits[e : e + 1]
        context = mx.array(history[e] + [int(inputs[e].item())])
        for p in row_procs:
            row = p(context, row)
        assert np.array_equal(np.array(got[e : e + 1]), np.array(row)), e
    assert len(errors) == 2 and all("broke" in str(x) for x in errors)  # row 5, batch + alone
    assert np.array_equal(np.array(got[5]), np.array(logits[5]))  # a failure: unchanged


def test_batch_bias_follows_rows_joining_and_leaving() -> None:
    bias = BatchBias()
    a, b, c = LogitBias([(1, 5.0)]), LogitBias([(2, -5.0)]), LogitBias([(1, 1.0), (4, 2.0)])
    zeros = mx.zeros((3, 6))
    for rows in ([a, None, b], [a, b], [c, a, b], [None, None, c]):
        x = zeros[: len(rows)]
        got = bias.apply(x, rows)  # type: ignore[arg-type]
        want = [r(mx.array([]), x[e : e + 1]) if r else x[e : e + 1] for e, r in enumerate(rows)]
        assert np.array_equal(np.array(got), np.array(mx.concatenate(want))), rows


def test_a_failing_draw_fails_only_its_row() -> None:
    errors: list[BaseException] = []

    def hook(point: str, request_id: str | None) -> None:
        if request_id == "r1":
            raise RuntimeError("sampler broke")

    rows = [1, 2, 3]
    guarded = [guard_sampler(s, errors.append, hook, f"r{e}") for e, s in enumerate(samplers(rows))]
    lp = logprobs(9, len(rows))
    tokens = sample_rows(lp, guarded).tolist()
    alone = samplers(rows)
    assert tokens[1] == int(mx.argmax(lp[1]).item()) and len(errors) == 1
    assert [tokens[0], tokens[2]] == [int(alone[i](lp[i : i + 1]).item()) for i in (0, 2)]
    assert sample_rows(lp, [GREEDY] * len(rows)).tolist() == mx.argmax(lp, axis=-1).tolist()
