"""The lockstep channel of a distributed job: rank 0's typed messages to the other ranks
(backend.distributed drives it). They travel on one TCP link per follower once rank 0 opened
them (`listen_links`, `connect_link`), else over the job's own mlx.distributed group."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from mlxd.errors import one_line
from mlxd.types import SamplingParams

if TYPE_CHECKING:
    from collections.abc import Callable

    import mlx.core as mx

T = TypeVar("T")


# ---- messages ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HelloMsg:
    heartbeat_port: int  # rank 0's RankMonitor: followers send their heartbeats there
    stall_seconds: float  # a follower exits when rank 0's echoes stop this long
    lockstep_port: int = 0  # later messages come on a TCP link to this port (0: the ring)


@dataclass(frozen=True, slots=True)
class LoadMsg:
    path: str
    name: str


@dataclass(frozen=True, slots=True)
class MakeRunnerMsg:
    name: str


@dataclass(frozen=True, slots=True)
class InsertMsg:
    prompt_ids: list[int]
    params: dict[str, Any]
    max_tokens: int
    request_id: str
    boundaries: list[int]
    uid: int  # what rank 0's insert returned: every rank must agree
    cached: int


@dataclass(frozen=True, slots=True)
class RemoveMsg:
    uids: list[int]
    keep_cache: bool


@dataclass(frozen=True, slots=True)
class StepMsg:
    prefill_limit: int  # waiting prompts the step may start prefilling (rank 0's planner)


@dataclass(frozen=True, slots=True)
class CloseRunnerMsg:
    pass


@dataclass(frozen=True, slots=True)
class UnloadMsg:
    name: str


@dataclass(frozen=True, slots=True)
class StopMsg:
    pass


LockstepMsg = (
    HelloMsg
    | LoadMsg
    | MakeRunnerMsg
    | InsertMsg
    | RemoveMsg
    | StepMsg
    | CloseRunnerMsg
    | UnloadMsg
    | StopMsg
)
_KINDS: dict[str, type[LockstepMsg]] = {
    cls.__name__: cls
    for cls in (
        HelloMsg,
        LoadMsg,
        MakeRunnerMsg,
        InsertMsg,
        RemoveMsg,
        StepMsg,
        CloseRunnerMsg,
        UnloadMsg,
        StopMsg,
    )
}


def encode(msgs: list[LockstepMsg]) -> bytes:
    """JSON, not pickle: a follower never executes what arrives."""
    return json.dumps([{"kind": type(m).__name__, **dataclasses.asdict(m)} for m in msgs]).encode()


def decode(data: bytes) -> list[LockstepMsg]:
    out: list[LockstepMsg] = []
    for fields in json.loads(data):
        out.append(_KINDS[fields.pop("kind")](**fields))
    return out


def params_to_wire(params: SamplingParams) -> dict[str, Any]:
    return dataclasses.asdict(params)


def params_from_wire(fields: dict[str, Any]) -> SamplingParams:
    fields = dict(fields)
    fields["logit_bias"] = tuple((int(t), float(b)) for t, b in fields["logit_bias"])
    fields["stop_token_ids"] = tuple(fields["stop_token_ids"])
    return SamplingParams(**fields)


HEAD_BYTES = 256  # a length and the message's first bytes: one collective for most messages

# Messages that only change the batch: rank 0 holds them back and sends them with the next
# message that makes the followers run something (a step, a close), in one broadcast.
_DEFERRED = (InsertMsg, RemoveMsg)


class Channel:
    """Rank 0 -> all ranks. On TCP links once `attach`ed (each message a 4-byte length and
    its bytes), else over the job's own group: `all_sum`s in which only rank 0 contributes
    non-zeros, a fixed head (length + first bytes), then the rest if any.

    Rank 0 never waits for a broadcast. On the links, a follower reads each step as soon as
    rank 0 sent it, with no collective of its own on the ring. On the ring, rank 0's
    collectives are queued on the batch's stream behind the step in flight (so every rank
    meets the model's collectives and these in the same order) and rank 0 goes on to build
    the next step meanwhile."""

    def __init__(self, group: mx.distributed.Group) -> None:
        self.group = group
        self.rank = group.rank()
        self.size = group.size()
        self.broken: str | None = None  # after a failed exchange, the channel is never used again
        self.sends = 0  # rank 0: broadcasts, and the host seconds spent queueing them
        self.send_seconds = 0.0
        self._held: list[LockstepMsg] = []  # rank 0: deferred messages, sent with the next
        self._in_flight: list[mx.array] = []  # rank 0: the last ring broadcast's collectives
        self._links: dict[int, socket.socket] = {}  # rank -> TCP link (a follower: {0: ...})

    def attach(self, links: dict[int, socket.socket]) -> None:
        """Send (rank 0) or receive (a follower) every later message on these links."""
        for link in links.values():
            link.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link.settimeout(None)
        self._links = links

    @property
    def on_links(self) -> bool:
        return bool(self._links)

    def send(self, msg: LockstepMsg) -> None:
        """Broadcast `msg` (with the messages held back before it); inserts and removals
        are held until the next message that is not one."""
        assert self.rank == 0
        if self.broken is not None:
            raise RuntimeError(f"distributed channel is down: {self.broken}")
        self._held.append(msg)
        if isinstance(msg, _DEFERRED):
            return
        msgs, self._held = self._held, []
        data = encode(msgs)
        if self._links:
            self._guarded(lambda: self._send_links(data))
        else:
            asynchronous = isinstance(msg, StepMsg)
            self._guarded(lambda: self._send_bytes(data, asynchronous=asynchronous))

    def receive(self) -> list[LockstepMsg]:
        """A follower: the next broadcast's messages, in rank 0's order."""
        assert self.rank != 0
        if self.broken is not None:
            raise RuntimeError(f"distributed channel is down: {self.broken}")
        read = self._receive_link if self._links else self._receive_bytes
        return decode(self._guarded(read))

    def refuse(self, detail: str) -> None:
        """From any thread: every later exchange raises instead of touching the ring."""
        if self.broken is None:
            self.broken = detail

    def _guarded(self, exchange: Callable[[], T]) -> T:
        try:
            return exchange()
        except Exception as exc:
            self.broken = one_line(exc)
            raise

    def _send_links(self, data: bytes) -> None:
        started = time.perf_counter()
        frame = len(data).to_bytes(4, "little") + data
        for rank, link in self._links.items():
            try:
                link.sendall(frame)
            except OSError as exc:
                raise RuntimeError(
                    f"rank {rank} is gone: its process exited or its link broke"
                ) from exc
        self.sends += 1
        self.send_seconds += time.perf_counter() - started

    def _receive_link(self) -> bytes:
        link = self._links[0]
        n = int.from_bytes(_read_exactly(link, 4), "little")
        return _read_exactly(link, n)

    def _send_bytes(self, data: bytes, *, asynchronous: bool) -> None:
        import mlx.core as mx
        import numpy as np
        from mlx_lm.generate import generation_stream

        started = time.perf_counter()
        head = np.zeros(HEAD_BYTES, dtype=np.uint8)
        head[:4] = np.frombuffer(len(data).to_bytes(4, "little"), dtype=np.uint8)
        first = data[: HEAD_BYTES - 4]
        head[4 : 4 + len(first)] = np.frombuffer(first, dtype=np.uint8)
        parts = [mx.array(head)]
        if len(data) > HEAD_BYTES - 4:
            parts.append(mx.array(np.frombuffer(data[HEAD_BYTES - 4 :], dtype=np.uint8)))
        stream = generation_stream
        self._in_flight = [
            mx.distributed.all_sum(p, group=self.group, stream=stream) for p in parts
        ]
        for part in self._in_flight:  # one call each: one eval may run them in any order
            if asynchronous:
                mx.async_eval(part)  # type: ignore[no-untyped-call]
            else:  # the followers are about to load, stop...: no step to overlap with
                mx.eval(part)
        self.sends += 1
        self.send_seconds += time.perf_counter() - started

    def _receive_bytes(self) -> bytes:
        import mlx.core as mx
        import numpy as np
        from mlx_lm.generate import generation_stream

        stream = generation_stream  # behind this rank's step in flight, as on rank 0
        head = mx.zeros((HEAD_BYTES,), dtype=mx.uint8)
        got = np.array(mx.distributed.all_sum(head, group=self.group, stream=stream))
        n = int.from_bytes(got[:4].tobytes(), "little")
        if n == 0:  # every message has a kind: only this rank's own zeros came back
            raise RuntimeError("rank 0 is gone: the ring delivered an empty message")
        out = got[4 : 4 + n].tobytes()
        if n > HEAD_BYTES - 4:
            rest = mx.zeros((n - (HEAD_BYTES - 4),), dtype=mx.uint8)
            tail = mx.distributed.all_sum(rest, group=self.group, stream=stream)
            out += np.array(tail).tobytes()
        return out


def _read_exactly(link: socket.socket, n: int, closed: str = "rank 0 is gone") -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = link.recv(min(n - len(data), 1 << 20))
        if not chunk:
            raise RuntimeError(f"{closed}: its lockstep link closed")
        data += chunk
    return bytes(data)


# ---- opening the links ------------------------------------------------------------------


def listen_links() -> socket.socket:
    """Rank 0: a listener on a free port for the followers' lockstep links."""
    return socket.create_server(("", 0))


def accept_links(listener: socket.socket, size: int, seconds: float) -> dict[int, socket.socket]:
    """Rank 0: one link from every follower (each names its rank first), within `seconds`;
    raises naming a rank that did not connect."""
    links: dict[int, socket.socket] = {}
    deadline = time.monotonic() + seconds
    try:
        while len(links) < size - 1:
            listener.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                missing = min(set(range(1, size)) - links.keys())
                raise RuntimeError(
                    f"rank {missing} never opened its lockstep link to rank 0"
                ) from None
            conn.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                rank = int.from_bytes(_read_exactly(conn, 4, "a follower"), "little")
            except (OSError, RuntimeError):
                rank = -1
            if not 0 < rank < size or rank in links:
                conn.close()  # not one of ours
                continue
            links[rank] = conn
    except BaseException:
        for conn in links.values():
            conn.close()
        raise
    finally:
        listener.close()
    return links


def connect_link(host: str, port: int, rank: int, seconds: float) -> socket.socket:
    """A follower: its lockstep link to rank 0 (raises OSError when unreachable)."""
    conn = socket.create_connection((host, port), timeout=seconds)
    conn.sendall(rank.to_bytes(4, "little"))
    return conn
