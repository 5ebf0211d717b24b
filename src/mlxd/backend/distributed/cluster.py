"""Serving one model across the ranks of an `mlx.launch` job (mlx.distributed).

Rank 0 runs the whole engine (HTTP, scheduler, chat layer) on a `DistributedBackend`; every
other rank runs `follow`. Each runner call rank 0 makes (load, insert, remove, step, close) is
broadcast first as a typed message, so every rank runs the same batched steps in lockstep on
its shard of the model. Followers never decide anything: rank 0 fixes each request's seed
(unseeded requests get a random one) and how many prompts each step starts prefilling (its
timing-based planner runs on rank 0 only), so the ranks' batches stay identical.
See docs/usage/distributed.md.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlxd.backend.api import (
    BackendConfig,
    ClusterStats,
    LoadedModel,
    NewSequence,
    RankStatus,
    ShardMode,
    StepResult,
)
from mlxd.backend.batch import BatchRunner
from mlxd.backend.distributed.lockstep_channel import (
    Channel,
    CloseRunnerMsg,
    HelloMsg,
    InsertMsg,
    LoadMsg,
    LockstepMsg,
    MakeRunnerMsg,
    RemoveMsg,
    StepMsg,
    StopMsg,
    UnloadMsg,
    accept_links,
    connect_link,
    listen_links,
    params_from_wire,
    params_to_wire,
)
from mlxd.backend.distributed.rank_monitor import RankMonitor, leader_address, send_heartbeats
from mlxd.backend.loader import load_checkpoint
from mlxd.backend.mlx_backend import MlxBackend
from mlxd.errors import InvalidRequest, MlxdError, ModelBroken, one_line
from mlxd.types import PromptBoundaries

if TYPE_CHECKING:
    from collections.abc import Callable

    import mlx.core as mx


class DistributedUnsupported(MlxdError):
    code = "distributed_unsupported"


# ---- loading ----------------------------------------------------------------------------


def load_sharded(
    path: Path, group: mx.distributed.Group, mode: ShardMode, *, trust_remote_code: bool
) -> LoadedModel:
    """Load `path` with its weights split across `group` (every rank calls this)."""
    import mlx.core as mx

    base = load_checkpoint(path, trust_remote_code=trust_remote_code, lazy=True)
    model = base.model
    mode = resolve_mode(model, mode, path.name)
    try:
        if mode is ShardMode.TENSOR:
            model.shard(group)
        else:
            model.model.pipeline(group)
        mx.eval(model.parameters())  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise ModelBroken(f"cannot shard {path.name}: {one_line(exc)}") from exc
    return base


def resolve_mode(model: Any, mode: ShardMode, name: str) -> ShardMode:
    """The split `mode` means for this model (AUTO: tensor where the architecture has it).
    Weights are loaded lazily, so a rank evaluates only its own layers: a pipeline split
    needs no model.safetensors.index.json (mlx-lm's `sharded_load` reads one)."""
    can_tensor = hasattr(model, "shard")
    can_pipeline = hasattr(getattr(model, "model", None), "pipeline")
    if mode is ShardMode.AUTO:
        mode = ShardMode.TENSOR if can_tensor else ShardMode.PIPELINE
    if mode is ShardMode.TENSOR and not can_tensor:
        raise DistributedUnsupported(f"{name}: this architecture has no tensor sharding")
    if mode is ShardMode.PIPELINE and not can_pipeline:
        raise DistributedUnsupported(f"{name}: this architecture has no pipeline sharding")
    return mode


# ---- rank 0 -----------------------------------------------------------------------------


class LockstepRunner:
    """A BatchRunner whose every state change is first broadcast to the followers."""

    def __init__(self, inner: BatchRunner, channel: Channel) -> None:
        self.inner = inner
        self.channel = channel
        inner.run_in_lockstep()

    @property
    def one_at_a_time(self) -> bool:
        return self.inner.one_at_a_time

    def insert(self, seq: NewSequence) -> tuple[int, int]:
        if seq.grammar is not None or seq.images is not None:
            what = "structured output" if seq.grammar is not None else "images"
            raise DistributedUnsupported(f"{what} is not supported in distributed mode yet")
        if seq.params.seed is None:  # every rank must draw the same tokens
            seq = dataclasses.replace(
                seq, params=dataclasses.replace(seq.params, seed=secrets.randbits(63))
            )
        uid, cached = self.inner.insert(seq)
        self.channel.send(
            InsertMsg(
                list(seq.prompt_ids),
                params_to_wire(seq.params),
                seq.max_tokens,
                seq.request_id,
                list(seq.boundaries.positions()),
                uid,
                cached,
            )
        )
        return uid, cached

    def remove(self, uids: list[int], *, keep_cache: bool = True) -> None:
        self.channel.send(RemoveMsg(list(uids), keep_cache))
        self.inner.remove(uids, keep_cache=keep_cache)

    def awaits_snapshot(self, prompt_ids: list[int]) -> bool:
        return self.inner.awaits_snapshot(prompt_ids)

    def step(self) -> StepResult:
        self.channel.send(StepMsg(self.inner.plan_step()))
        return self.inner.step(planned=True)

    @property
    def prefill_pending(self) -> bool:
        return self.inner.prefill_pending

    def close(self) -> None:
        try:
            self.channel.send(CloseRunnerMsg())
        finally:
            self.inner.close()


class DistributedBackend(MlxBackend):
    """Rank 0's backend: loads sharded and hands out LockstepRunners."""

    def __init__(self, group: mx.distributed.Group, mode: ShardMode, config: BackendConfig) -> None:
        super().__init__(config)
        self.group = group
        self.mode = mode
        self.layout = mode  # the split of the last model loaded (AUTO resolved)
        self.channel = Channel(group)
        self.monitor: RankMonitor | None = None

    def watch_ranks(self, on_fault: Callable[[str], None], stall_seconds: float) -> None:
        """Start rank 0's RankMonitor (when the launcher tells rank 0's address); `on_fault`
        gets one line naming the rank that died or stalled."""
        if leader_address() is None:
            return

        def failed(detail: str) -> None:
            self.channel.refuse(detail)
            on_fault(detail)

        self.monitor = RankMonitor(self.group.size(), failed, stall_seconds)
        listener = listen_links()
        port = int(listener.getsockname()[1])
        self.channel.send(HelloMsg(self.monitor.port, stall_seconds, port))
        try:
            self.channel.attach(accept_links(listener, self.group.size(), stall_seconds))
        except RuntimeError as exc:  # the ring still works, but that rank cannot follow
            failed(one_line(exc, with_type=False))

    def cluster(self) -> ClusterStats:
        size = self.group.size()
        if self.monitor is not None:
            followers = self.monitor.ranks()
        else:  # no heartbeat under this launcher: nothing to say
            followers = tuple(RankStatus(rank, None) for rank in range(1, size))
        return ClusterStats(
            size=size,
            layout=self.layout.value,
            ranks=(RankStatus(0, True), *followers),
            broadcasts=self.channel.sends,
            broadcast_seconds=self.channel.send_seconds,
        )

    @property
    def fault(self) -> str | None:
        """Why the job can no longer run steps (a rank died or stalled), or None."""
        return self.channel.broken

    def load(self, path: Path, draft: Path | None = None) -> LoadedModel:
        if draft is not None:
            raise InvalidRequest("a draft model is not supported under mlx.launch yet")
        self.channel.send(LoadMsg(str(path), path.name))
        loaded = load_sharded(path, self.group, self.mode, trust_remote_code=self.trust_remote_code)
        self.layout = resolve_mode(loaded.model, self.mode, path.name)
        return loaded

    def make_runner(self, name: str, model: LoadedModel) -> LockstepRunner:  # type: ignore[override]
        self.channel.send(MakeRunnerMsg(name))
        return LockstepRunner(super().make_runner(name, model), self.channel)

    def unload(self, name: str) -> None:
        self.channel.send(UnloadMsg(name))
        super().unload(name)

    def shutdown(self) -> None:
        if self.monitor is not None:  # followers leave now: not a fault
            self.monitor.close()
        try:
            self.channel.send(StopMsg())
        finally:
            super().shutdown()


# ---- ranks 1..N-1 -----------------------------------------------------------------------


def _leader_lost(rank: int, detail: str, stopping: threading.Event) -> None:
    """Rank 0 died or stalled: leave at once, since this rank's next collective would wait
    forever (and so would MLX's teardown). The launcher then stops the rest of the job."""
    if stopping.is_set():
        return
    _leaving.acquire()  # held until the exit: the heartbeat and the link may both notice
    try:
        print(f"mlxd serve (rank {rank}): {detail}; exiting", file=sys.stderr, flush=True)
    finally:
        os._exit(1)


_leaving = threading.Lock()


class LockstepDiverged(RuntimeError):
    """A follower's runner disagreed with rank 0's: the ranks no longer run the same batch."""


def follow(group: mx.distributed.Group, backend: MlxBackend, mode: ShardMode) -> None:
    """Apply rank 0's messages until it stops (a StopMsg). A broken ring or a lost rank 0
    ends this process with exit code 1 and one line on stderr (no traceback)."""
    follower = Follower(Channel(group), backend, mode)
    try:
        while all(follower.apply(msg) for msg in follower.channel.receive()):
            pass
    except Exception as exc:
        _leader_lost(follower.channel.rank, f"stopped: {one_line(exc)}", follower.stopping)
    follower.close()


class Follower:
    """A follower's state: the models rank 0 loaded and the runner it drives."""

    def __init__(self, channel: Channel, backend: MlxBackend, mode: ShardMode) -> None:
        self.channel = channel
        self.backend = backend
        self.mode = mode
        self.models: dict[str, LoadedModel] = {}
        self.runner: BatchRunner | None = None
        self.stopping = threading.Event()  # a StopMsg came: rank 0 leaving is no fault

    def apply(self, msg: LockstepMsg) -> bool:
        """Run one message; False after a StopMsg."""
        if isinstance(msg, StopMsg):
            self.stopping.set()
            return False
        if isinstance(msg, HelloMsg):
            self._hello(msg)
        elif isinstance(msg, LoadMsg):
            self.models[msg.name] = load_sharded(
                Path(msg.path),
                self.channel.group,
                self.mode,
                trust_remote_code=self.backend.trust_remote_code,
            )
        elif isinstance(msg, MakeRunnerMsg):
            self._close_runner()
            self.runner = self.backend.make_runner(msg.name, self.models[msg.name])
            self.runner.run_in_lockstep()
        elif isinstance(msg, InsertMsg):
            self._insert(msg)
        elif isinstance(msg, RemoveMsg) and self.runner is not None:
            self.runner.remove(msg.uids, keep_cache=msg.keep_cache)
        elif isinstance(msg, StepMsg):
            runner = self._live_runner("step")
            runner.follow_plan(msg.prefill_limit)
            runner.step(planned=True)
        elif isinstance(msg, CloseRunnerMsg):
            self._close_runner()
        elif isinstance(msg, UnloadMsg):
            self.models.pop(msg.name, None)
            self.backend.unload(msg.name)
        return True

    def close(self) -> None:
        self._close_runner()
        self.backend.shutdown()

    def _hello(self, msg: HelloMsg) -> None:
        address = leader_address()
        if address is None:
            return
        rank, stopping = self.channel.rank, self.stopping
        send_heartbeats(
            address,
            msg.heartbeat_port,
            rank,
            msg.stall_seconds,
            lambda detail: _leader_lost(rank, detail, stopping),
        )
        if msg.lockstep_port:  # every later message comes on this link, not the ring
            try:
                link = connect_link(address, msg.lockstep_port, rank, msg.stall_seconds)
            except OSError as exc:
                where = f"{address}:{msg.lockstep_port}"
                detail = f"rank 0 is unreachable at {where}: {one_line(exc, with_type=False)}"
                _leader_lost(rank, detail, stopping)
                return
            self.channel.attach({0: link})

    def _insert(self, msg: InsertMsg) -> None:
        seq = NewSequence(
            msg.prompt_ids,
            params_from_wire(msg.params),
            msg.max_tokens,
            msg.request_id,
            boundaries=PromptBoundaries(*msg.boundaries),
        )
        got = self._live_runner("insert").insert(seq)
        if got != (msg.uid, msg.cached):
            raise LockstepDiverged(f"insert gave {got}, rank 0 {(msg.uid, msg.cached)}")

    def _live_runner(self, what: str) -> BatchRunner:
        if self.runner is None:
            raise LockstepDiverged(f"{what} with no runner")
        return self.runner

    def _close_runner(self) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None
