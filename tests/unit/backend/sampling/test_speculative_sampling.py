"""The accept/resample rule against the exact distribution it must reproduce: with target
distributions p_j fixed per position, every emitted position j must be distributed as p_j,
whatever the drafts propose (a draft model's q, or a one-hot prompt-lookup draft)."""

from __future__ import annotations

import itertools

import mlx.core as mx
import numpy as np
import pytest

from mlxd.backend.sampling import speculative_sampling as rule

V = 4


def _law_per_position(p: np.ndarray, q: np.ndarray, grid: int) -> np.ndarray:
    """The exact law of the token emitted at positions 0..K of one verify step, drafts drawn
    from q (one-hot rows: fixed drafts), uniforms on a stratified grid of `grid` points per
    position (the acceptance probabilities are then exact to 1/grid). A position after the
    step's last token is drawn by the next step from p_j (the base case, position 0, holds
    nothing of that kind)."""
    k = q.shape[0]
    drafts = np.array(list(itertools.product(range(V), repeat=k)))  # [D, K]
    weight = np.prod(q[np.arange(k), drafts], axis=-1)  # [D]
    us = (np.arange(grid) + 0.5) / grid
    u = np.array(list(itertools.product(us, repeat=k)))  # [G, K]
    d_idx, u_idx = np.meshgrid(np.arange(len(drafts)), np.arange(len(u)), indexing="ij")
    d_idx, u_idx = d_idx.ravel(), u_idx.ravel()
    batch = len(d_idx)
    pb = mx.broadcast_to(mx.array(p), (batch, *p.shape))
    qb = mx.broadcast_to(mx.array(q), (batch, *q.shape))
    draft = mx.array(drafts[d_idx])
    n = rule.accepted_count(pb, qb, draft, mx.array(u[u_idx], dtype=mx.float32))
    nxt = np.array(rule.next_distribution(pb, qb, n))  # [B, V]
    n_np = np.array(n)
    w = weight[d_idx] / len(u)
    law = np.zeros((k + 1, V))
    for j in range(k + 1):
        if j < k:  # the draft at position j, where accepted
            drafted = n_np > j
            np.add.at(law[j], drafts[d_idx[drafted], j], w[drafted])
        law[j] += (w[n_np == j][:, None] * nxt[n_np == j]).sum(axis=0)
        law[j] += w[n_np < j].sum() * p[j]
    return law


def _dist(rng: np.random.Generator, rows: int, zeros: int = 0) -> np.ndarray:
    x = rng.gamma(0.7, size=(rows, V))
    x[:, :zeros] = 0.0  # a token the sampler's filters removed (top-k, top-p, min-p)
    return (x / x.sum(axis=-1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("k", [1, 2])
def test_draft_model_rule_reproduces_the_target(k: int) -> None:
    rng = np.random.default_rng(k)
    p = _dist(rng, k + 1, zeros=1)
    q = _dist(rng, k)
    grid = 400 if k == 1 else 120
    law = _law_per_position(p, q, grid)
    assert law == pytest.approx(p, abs=2 * k / grid)
    # The check has power: the drafts alone are far from the target.
    assert np.abs(q - p[:k]).max() > 0.1


@pytest.mark.parametrize("k", [1, 3])
def test_one_hot_drafts_reproduce_the_target(k: int) -> None:
    rng = np.random.default_rng(10 + k)
    p = _dist(rng, k + 1)
    drafts = mx.array(rng.integers(0, V, size=k))
    q = np.array(rule.one_hot(drafts, V))
    assert q.sum(axis=-1).tolist() == [1.0] * k
    law = _law_per_position(p, q, grid=1000 if k == 1 else 12)
    assert law == pytest.approx(p, abs=2 * k / (1000 if k == 1 else 12) + 1e-6)


def test_rejection_draws_from_the_residual_and_full_acceptance_from_p_k() -> None:
    p = mx.array([[0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4]])
    q = mx.array([[0.1, 0.6, 0.3, 0.0]])
    residual = rule.next_distribution(p, q, mx.array(0))
    assert np.array(residual) == pytest.approx([1.0, 0.0, 0.0, 0.0])
    assert np.array(rule.next_distribution(p, q, mx.array(1))) == pytest.approx(np.array(p[1]))
    # accepted: u * q(x) < p(x); token 1 has p/q = 0.5
    draft = mx.array([1])
    assert rule.accepted_count(p, q, draft, mx.array([0.49])).item() == 1
    assert rule.accepted_count(p, q, draft, mx.array([0.51])).item() == 0
    # p == q: the residual has no mass, the next token comes from p itself
    same = rule.next_distribution(p, mx.array(p[:1]), mx.array(0))
    assert np.array(same) == pytest.approx(np.array(p[0]))


def test_only_leading_acceptances_count() -> None:
    p = mx.full((3, 4, V), 0.25)
    draft = mx.broadcast_to(mx.array([0, 1, 2]), (3, 3))
    u = mx.array([[0.1, 0.9, 0.1], [0.9, 0.1, 0.1], [0.1, 0.1, 0.1]])
    n = rule.accepted_count(p, rule.one_hot(draft, V), draft, u)
    assert n.tolist() == [1, 0, 3]


def test_a_seeded_sampler_verifies_within_its_filtered_distribution() -> None:
    """SeededSampler.verify takes p after the request's filters: with top-k every emitted
    token is in its position's top k, a draft outside them is never accepted, and a seed
    repeats its verdict."""
    from mlxd.backend.sampling.samplers import make_sampler
    from mlxd.types import SamplingParams

    logits = mx.random.normal((3, 50), key=mx.random.key(0)) * 2
    lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    top = np.argsort(-np.array(lp), axis=-1)[:, :2]
    outside = int(np.argsort(-np.array(lp[1]))[10])
    draft = [int(top[0, 0]), outside]
    verdicts = set()
    for seed in range(60):
        params = SamplingParams(temperature=0.9, top_p=0.95, top_k=2, seed=seed)
        n, token = make_sampler(params, 50).verify(lp, draft)
        again = make_sampler(params, 50).verify(lp, draft)
        assert (n.item(), token.item()) == (again[0].item(), again[1].item())
        verdicts.add((n.item(), token.item()))
    assert {n for n, _ in verdicts} == {0, 1}  # the first draft is accepted, or not
    assert all(token in top[n] and token != draft[n] for n, token in verdicts)
