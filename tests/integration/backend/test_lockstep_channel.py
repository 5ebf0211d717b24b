"""backend.lockstep_channel.Channel on a one-rank group (all_sum is then the identity): every
message length comes back whole, across the fixed head's boundary, and inserts and removals
travel with the next step."""

from __future__ import annotations

import pytest

from mlxd.backend.lockstep_channel import (
    HEAD_BYTES,
    Channel,
    RemoveMsg,
    StepMsg,
    StopMsg,
    decode,
    encode,
)


def _sent(channel: Channel) -> bytes:
    """What the last broadcast delivers (rank 0 itself never reads it back)."""
    import numpy as np

    head, *tail = (np.array(part) for part in channel._in_flight)
    n = int.from_bytes(head[:4].tobytes(), "little")
    return (head[4:].tobytes() + b"".join(t.tobytes() for t in tail))[:n]


@pytest.mark.parametrize("size", [1, HEAD_BYTES - 4, HEAD_BYTES - 3, HEAD_BYTES, 5000])
def test_every_length_crosses_whole(size: int) -> None:
    import mlx.core as mx

    channel = Channel(mx.distributed.init())
    data = bytes((7 * i + 3) % 256 for i in range(size))
    channel._send_bytes(data, asynchronous=True)
    assert _sent(channel) == data
    channel.send(StepMsg(2))
    assert decode(_sent(channel)) == [StepMsg(2)]
    assert channel.sends == 2 and channel.send_seconds > 0


def test_removals_wait_for_the_next_step() -> None:
    import mlx.core as mx

    channel = Channel(mx.distributed.init())
    channel.send(RemoveMsg([3], True))
    assert channel.sends == 0
    channel.send(RemoveMsg([4], False))
    channel.send(StepMsg(2))
    assert channel.sends == 1
    assert decode(_sent(channel)) == [RemoveMsg([3], True), RemoveMsg([4], False), StepMsg(2)]
    channel.send(StopMsg())
    assert decode(_sent(channel)) == [StopMsg()]


def test_an_empty_message_means_rank_0_is_gone() -> None:
    """What a follower's all_sum returns once rank 0 died: its own zeros."""
    import mlx.core as mx

    channel = Channel(mx.distributed.init())
    channel.rank = 1  # a follower's view of a ring where nobody sends
    with pytest.raises(RuntimeError, match="rank 0 is gone"):
        channel.receive()
    assert channel.broken is not None


def test_the_wire_format_round_trips() -> None:
    msgs = [RemoveMsg([1, 2], True), StepMsg(2)]
    assert decode(encode(msgs)) == msgs
