"""backend.lockstep_channel.Channel on a one-rank group (all_sum is then the identity): every
message length comes back whole, across the fixed head's boundary, and inserts and removals
travel with the next step. On TCP links (real sockets on 127.0.0.1): the same messages arrive
in order, a closed link names the rank that left, a rank that never connects is named."""

from __future__ import annotations

import threading

import pytest

from mlxd.backend.distributed.lockstep_channel import (
    HEAD_BYTES,
    Channel,
    InsertMsg,
    RemoveMsg,
    StepMsg,
    StopMsg,
    accept_links,
    connect_link,
    decode,
    encode,
    listen_links,
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


def _linked() -> tuple[Channel, Channel]:
    """Rank 0's channel and a follower's (rank 1 of a 2-rank job), joined by a real link."""
    import mlx.core as mx

    leader, follower = Channel(mx.distributed.init()), Channel(mx.distributed.init())
    follower.rank, leader.size = 1, 2
    listener = listen_links()
    port = listener.getsockname()[1]
    got: dict[int, object] = {}
    opener = threading.Thread(target=lambda: got.update(link=connect_link("127.0.0.1", port, 1, 5)))
    opener.start()
    leader.attach(accept_links(listener, 2, 5))
    opener.join()
    follower.attach({0: got["link"]})  # type: ignore[dict-item]
    return leader, follower


def test_messages_cross_a_link_in_order() -> None:
    leader, follower = _linked()
    assert leader.on_links and follower.on_links
    big = InsertMsg(list(range(50_000)), {}, 8, "r", [], 3, 0)  # many reads of the socket
    leader.send(RemoveMsg([3], True))
    leader.send(StepMsg(1))
    leader.send(big)
    leader.send(StepMsg(0))
    leader.send(StopMsg())
    assert follower.receive() == [RemoveMsg([3], True), StepMsg(1)]
    assert follower.receive() == [big, StepMsg(0)]
    assert follower.receive() == [StopMsg()]
    assert leader.sends == 3 and leader._in_flight == []  # nothing went on the ring


def test_a_closed_link_names_who_left() -> None:
    leader, follower = _linked()
    follower._links[0].close()  # the follower died
    with pytest.raises(RuntimeError, match="rank 1 is gone"):
        for _ in range(100):  # the first sends may still fit the kernel's buffers
            leader.send(StepMsg(0))
    assert leader.broken is not None and "rank 1 is gone" in leader.broken
    leader2, follower2 = _linked()
    leader2._links[1].close()  # rank 0 died
    with pytest.raises(RuntimeError, match="rank 0 is gone"):
        follower2.receive()


def test_a_rank_that_never_connects_is_named() -> None:
    with pytest.raises(RuntimeError, match="rank 1 never opened its lockstep link"):
        accept_links(listen_links(), 2, 0.2)
