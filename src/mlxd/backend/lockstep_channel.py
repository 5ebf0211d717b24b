"""The lockstep channel of a distributed job: rank 0's typed messages to the other ranks,
sent over the job's own mlx.distributed group (backend.distributed drives it)."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlxd.errors import one_line
from mlxd.types import SamplingParams

if TYPE_CHECKING:
    import mlx.core as mx


# ---- messages ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HelloMsg:
    heartbeat_port: int  # rank 0's RankMonitor: followers send their heartbeats there
    stall_seconds: float  # a follower exits when rank 0's echoes stop this long


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
    max_new: int
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
    pass


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


def encode(msg: LockstepMsg) -> bytes:
    """JSON, not pickle: a follower never executes what arrives."""
    return json.dumps({"kind": type(msg).__name__, **dataclasses.asdict(msg)}).encode()


def decode(data: bytes) -> LockstepMsg:
    fields = json.loads(data)
    return _KINDS[fields.pop("kind")](**fields)


def params_to_wire(params: SamplingParams) -> dict[str, Any]:
    return dataclasses.asdict(params)


def params_from_wire(fields: dict[str, Any]) -> SamplingParams:
    fields = dict(fields)
    fields["logit_bias"] = tuple((int(t), float(b)) for t, b in fields["logit_bias"])
    fields["stop_token_ids"] = tuple(fields["stop_token_ids"])
    return SamplingParams(**fields)


HEAD_BYTES = 256  # a length and the message's first bytes: one collective for most messages


class Channel:
    """Rank 0 -> all ranks, over the job's own group: `all_sum`s in which only rank 0
    contributes non-zeros. A fixed head (length + first bytes), then the rest if any."""

    def __init__(self, group: mx.distributed.Group) -> None:
        self.group = group
        self.rank = group.rank()
        self.size = group.size()
        self.broken: str | None = None  # after a failed exchange, the ring is never used again
        self.sends = 0  # rank 0: messages broadcast, and the seconds their collectives took
        self.send_seconds = 0.0

    def send(self, msg: LockstepMsg) -> None:
        assert self.rank == 0
        self._exchange(encode(msg))

    def receive(self) -> LockstepMsg:
        assert self.rank != 0
        return decode(self._exchange(b""))

    def refuse(self, detail: str) -> None:
        """From any thread: every later exchange raises instead of touching the ring."""
        if self.broken is None:
            self.broken = detail

    def _exchange(self, data: bytes) -> bytes:
        if self.broken is not None:
            raise RuntimeError(f"distributed channel is down: {self.broken}")
        try:
            return self._all_sum_bytes(data)
        except Exception as exc:
            self.broken = one_line(exc)
            raise

    def _all_sum_bytes(self, data: bytes) -> bytes:
        import mlx.core as mx
        import numpy as np
        from mlx_lm.generate import generation_stream

        # The batch's stream: queued behind the step still in flight (async_eval), so every
        # rank meets the model's collectives and these in the same order.
        stream = generation_stream
        if self.rank == 0:  # wait for that step here, so the timing covers the broadcast only
            mx.synchronize(stream)
            started = time.perf_counter()
        # One collective for the usual message (a step: a few bytes), two for a long one.
        head = np.zeros(HEAD_BYTES, dtype=np.uint8)
        if self.rank == 0:
            head[:4] = np.frombuffer(len(data).to_bytes(4, "little"), dtype=np.uint8)
            first = data[: HEAD_BYTES - 4]
            head[4 : 4 + len(first)] = np.frombuffer(first, dtype=np.uint8)
        got = np.array(mx.distributed.all_sum(mx.array(head), group=self.group, stream=stream))
        n = int.from_bytes(got[:4].tobytes(), "little")
        if n == 0:  # every message has a kind: only this rank's own zeros came back
            raise RuntimeError("rank 0 is gone: the ring delivered an empty message")
        out = got[4 : 4 + n].tobytes()
        if n > HEAD_BYTES - 4:
            rest = np.frombuffer(data[HEAD_BYTES - 4 :], dtype=np.uint8) if self.rank == 0 else None
            if rest is None:
                rest = np.zeros(n - (HEAD_BYTES - 4), dtype=np.uint8)
            tail = mx.distributed.all_sum(mx.array(rest), group=self.group, stream=stream)
            out += np.array(tail).tobytes()
        if self.rank == 0:
            self.sends += 1
            self.send_seconds += time.perf_counter() - started
        return out
