"""backend.embedding.pooling on real mlx arrays: each mode of a right-padded batch equals the
same row pooled alone, and matches its definition."""

from __future__ import annotations

import mlx.core as mx
import pytest

from mlxd.backend.embedding.pooling import POOLINGS, normalized, pool


@pytest.mark.parametrize("mode", POOLINGS)
def test_a_padded_row_pools_as_it_does_alone(mode: str) -> None:
    mx.random.seed(3)
    short, long = mx.random.normal((3, 8)), mx.random.normal((5, 8))
    padded = mx.concatenate([short, mx.full((2, 8), 99.0)])  # padding that would show
    batch = mx.stack([padded, long])
    mask = mx.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=mx.float32)
    pooled = pool(batch, mask, [3, 5], mode)
    alone = pool(short[None], mx.ones((1, 3)), [3], mode)
    assert mx.allclose(pooled[0], alone[0], atol=1e-6).item()
    expected = {
        "cls": short[0],
        "last": short[2],
        "mean": short.mean(axis=0),
        "max": short.max(axis=0),
    }[mode]
    assert mx.allclose(alone[0], expected, atol=1e-6).item()


def test_normalized_rows_have_unit_length_and_zero_stays_zero() -> None:
    rows = normalized(mx.array([[3.0, 4.0], [0.0, 0.0]]))
    assert mx.allclose(rows, mx.array([[0.6, 0.8], [0.0, 0.0]]), atol=1e-6).item()


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown pooling"):
        pool(mx.zeros((1, 1, 2)), mx.ones((1, 1)), [1], "sum")
