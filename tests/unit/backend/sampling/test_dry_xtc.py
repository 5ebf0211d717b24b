"""DRY and XTC on logits (backend.sampling.dry, samplers.XtcFilter): which tokens lose what,
breakers, windows, and XTC's seeded coin."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np

from mlxd.backend.sampling import dry
from mlxd.backend.sampling.samplers import XtcFilter, make_processors, make_sampler
from mlxd.types import SamplingParams

V = 16
NONE = np.zeros(0, dtype=np.int64)


def runs(tokens: list[int], breakers: list[int] | None = None) -> dict[int, int]:
    ids, lengths = dry.repeat_lengths(np.array(tokens), np.array(breakers or [], dtype=np.int64))
    return dict(zip(ids.tolist(), lengths.tolist(), strict=True))


def test_repeat_lengths_find_the_token_that_would_extend_each_repetition() -> None:
    # ... 1 2 3 ... 1 2 -> 3 would repeat "1 2 3" (run 2); 9 followed the other 2 (run 1).
    assert runs([1, 2, 3, 4, 2, 9, 5, 1, 2]) == {3: 2, 9: 1}
    assert runs([5, 6, 7]) == {}  # the last token never occurred before
    assert runs([4]) == {} and runs([]) == {}


def test_the_longest_run_per_token_wins() -> None:
    # "7 1 2 x" twice, then "7 1 2": x extends a run of 3; the shorter "1 2 x" matches count less.
    assert runs([7, 1, 2, 8, 0, 1, 2, 8, 0, 7, 1, 2]) == {8: 3}


def test_breakers_end_runs_and_are_never_penalized() -> None:
    tokens = [1, 2, 3, 1, 2, 3, 1, 2]
    assert runs(tokens) == {3: 5}
    assert runs(tokens, breakers=[3]) == {}  # 3 follows each copy: it is kept free
    assert runs([1, 2, 5, 0, 1, 2], breakers=[0]) == {5: 2}  # run cut at the breaker 0
    assert runs([1, 2, 5, 1, 0, 2], breakers=[0]) == {5: 1}  # only the "2" after the breaker
    assert runs([1, 2, 5, 1, 2, 0], breakers=[0]) == {}  # ends in a breaker


def test_runs_are_capped() -> None:
    tokens = [3] * 500
    assert runs(tokens) == {3: dry.MAX_MATCH}


def penalized(
    params: SamplingParams, tokens: list[int], breakers: tuple[int, ...] = ()
) -> list[float]:
    (proc,) = make_processors(params, breakers)
    out = proc(mx.array(tokens), mx.zeros((1, V)))
    return [float(x) for x in out[0].tolist()]


def test_dry_subtracts_multiplier_times_base_to_the_excess_length() -> None:
    params = SamplingParams(dry_multiplier=0.8, dry_base=2.0, dry_allowed_length=2)
    tokens = [1, 2, 3, 4, 5, 0, 1, 2, 3, 4]  # 5 would extend "1 2 3 4": run 4
    logits = penalized(params, tokens)
    assert math.isclose(logits[5], -0.8 * 2.0 ** (4 - 2), rel_tol=1e-6)
    assert all(x == 0.0 for i, x in enumerate(logits) if i != 5)
    # Below the allowed length: nothing.
    assert penalized(params, [1, 5, 0, 1]) == [0.0] * V


def test_dry_window_sees_only_the_last_n_tokens() -> None:
    tokens = [1, 2, 3, 4, 5, 0, 6, 7, 8, 9, 10, 1, 2, 3, 4]
    whole = SamplingParams(dry_multiplier=1.0, dry_allowed_length=2)
    assert penalized(whole, tokens)[5] < 0
    near = SamplingParams(dry_multiplier=1.0, dry_allowed_length=2, dry_penalty_last_n=8)
    assert penalized(near, tokens) == [0.0] * V
    off = SamplingParams(dry_multiplier=1.0, dry_penalty_last_n=0)
    assert not off.dry and make_processors(off) == []


def test_dry_breakers_reach_the_processor() -> None:
    params = SamplingParams(dry_multiplier=1.0, dry_allowed_length=1)
    tokens = [1, 2, 5, 0, 1, 2]
    assert penalized(params, tokens)[5] < 0
    assert penalized(params, tokens, breakers=(5,)) == [0.0] * V  # a breaker is never penalized
    assert penalized(params, tokens, breakers=(2,)) == [0.0] * V  # nor anything after one


class Tok:
    """The two tokenizer methods breaker_ids and Vocabulary use."""

    eos_token_ids = (15,)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) % V for c in text]


def test_breaker_ids_take_each_breakers_last_token() -> None:
    assert dry.breaker_ids(Tok(), ["\n", "ab"]) == {ord("\n") % V, ord("b") % V}  # type: ignore[arg-type]


def lp(values: list[float]) -> mx.array:
    x = mx.array([values])
    return x - mx.logsumexp(x, axis=-1, keepdims=True)


def test_xtc_drops_every_top_choice_but_the_least_likely() -> None:
    probs = [0.4, 0.3, 0.2, 0.05, 0.05]
    x = lp([math.log(p) for p in probs])
    always = SamplingParams(temperature=1.0, xtc_probability=1.0, xtc_threshold=0.15)
    out = XtcFilter(always, seed=1, keep=[])(x)[0].tolist()
    assert out[0] == out[1] == -math.inf  # above 0.15, not the least likely of them
    assert all(math.isfinite(v) for v in out[2:])
    kept = XtcFilter(always, seed=1, keep=[0])(x)[0].tolist()
    assert math.isfinite(kept[0]) and kept[1] == -math.inf  # a kept token is never dropped
    one = SamplingParams(temperature=1.0, xtc_probability=1.0, xtc_threshold=0.35)
    assert XtcFilter(one, seed=1, keep=[])(x).tolist() == x.tolist()  # one above: nothing


def test_xtc_coin_follows_the_seed() -> None:
    x = lp([2.0, 1.9, 0.0, -1.0])
    half = SamplingParams(temperature=1.0, xtc_probability=0.5, xtc_threshold=0.1)

    def applied(seed: int) -> list[bool]:
        f = XtcFilter(half, seed=seed, keep=[])
        return [f(x)[0, 0].item() == -math.inf for _ in range(200)]

    first = applied(3)
    assert first == applied(3)  # the same seed: the same coins
    assert first != applied(4)
    assert 60 < sum(first) < 140  # about half of 200 draws


def test_a_sampler_with_xtc_draws_the_same_alone_each_time() -> None:
    params = SamplingParams(temperature=1.0, xtc_probability=0.5, xtc_threshold=0.1, seed=5)
    x = lp([2.0, 1.9, 1.8, 0.0])
    a, b = make_sampler(params, V), make_sampler(params, V)
    drawn = [int(a(x).item()) for _ in range(30)]
    assert drawn == [int(b(x).item()) for _ in range(30)]
    always = make_sampler(SamplingParams(temperature=1.0, xtc_probability=1.0, seed=5), V)
    assert not {0, 1} & {int(always(x).item()) for _ in range(30)}  # both above 0.1 but 2
