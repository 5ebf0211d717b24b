"""backend.lockstep_channel.Channel on a one-rank group (all_sum is then the identity): every
message length comes back whole, across the fixed head's boundary."""

from __future__ import annotations

import pytest

from mlxd.backend.lockstep_channel import HEAD_BYTES, Channel, StepMsg, decode, encode


@pytest.mark.parametrize("size", [1, HEAD_BYTES - 4, HEAD_BYTES - 3, HEAD_BYTES, 5000])
def test_every_length_crosses_whole(size: int) -> None:
    import mlx.core as mx

    channel = Channel(mx.distributed.init())
    data = bytes((7 * i + 3) % 256 for i in range(size))
    assert channel._exchange(data) == data
    assert decode(channel._exchange(encode(StepMsg()))) == StepMsg()
    assert channel.sends == 2 and channel.send_seconds > 0


def test_an_empty_message_means_rank_0_is_gone() -> None:
    """What a follower's all_sum returns once rank 0 died: its own zeros."""
    import mlx.core as mx

    channel = Channel(mx.distributed.init())
    with pytest.raises(RuntimeError, match="rank 0 is gone"):
        channel._exchange(b"")
    assert channel.broken is not None
