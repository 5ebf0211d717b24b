"""Run the app under uvicorn: bind first, preload the model, serve, drain on SIGTERM/Ctrl-C.

uvicorn settings are chosen for bursts: keep-alive on, a listen backlog of 2048 (mlx-lm's
server accepts 5 pending connections), one worker (one engine per process), asyncio + h11
with a header timeout and a connection cap (server/connections.py).
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import uvicorn

from mlxd.errors import InvalidRequest, MlxdError
from mlxd.server.app import create_app
from mlxd.server.guard.connections import guarded_protocol
from mlxd.server.lifecycle import Lifecycle
from mlxd.server.settings import ServerSettings

if TYPE_CHECKING:
    from fastapi import FastAPI

    from mlxd.engine import Engine, ModelInfo
    from mlxd.store.model_ref import ModelRef
    from mlxd.types import DraftKind

BACKLOG = 2048
ABORT_GRACE_SECONDS = 2.0  # after the drain: time for aborted streams to send their error


class PortInUse(MlxdError):
    exit_code = 10
    code = "port_in_use"


class MlxdServer(uvicorn.Server):
    """uvicorn.Server whose first signal (SIGTERM or SIGINT) drains instead of stopping at once.

    First SIGTERM/SIGINT: new requests get 503, running ones get drain_seconds, the rest
    are aborted with an error event, then uvicorn shuts down. A second signal: at once.
    """

    def __init__(
        self, config: uvicorn.Config, lifecycle: Lifecycle, drain_seconds: float, banner: str
    ) -> None:
        super().__init__(config)
        self.lifecycle = lifecycle
        self.drain_seconds = drain_seconds
        self.banner = banner
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining = False
        self._tasks: set[asyncio.Task[None]] = set()  # strong refs: the loop keeps weak ones

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets=sockets)
        if self.started:  # listening now: this line is the "ready" signal scripts wait for
            print(self.banner, file=sys.stderr, flush=True)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not recorded in _captured_signals: uvicorn would re-raise it after serving, and
        # a drained shutdown must exit 0.
        if self._draining or self._loop is None:
            self.lifecycle.abort_all()
            self.force_exit = self.should_exit = True
            return
        self._draining = True
        self.lifecycle.draining = True
        # Signal handlers run between bytecodes: hand the drain to the loop, never run it here.
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        from mlxd.chat.session import stop_constraint_compiles

        stop_constraint_compiles()  # a compile in flight would hold the exit for its budget
        task = asyncio.get_running_loop().create_task(self._drain())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drain(self) -> None:
        aborted = await self.lifecycle.drain(self.drain_seconds)
        if aborted:
            print(f"mlxd serve: drain timeout, {aborted} request(s) stopped", file=sys.stderr)
            for _ in range(int(ABORT_GRACE_SECONDS / 0.05)):
                if not self.lifecycle.active:
                    break
                await asyncio.sleep(0.05)
        self.should_exit = True


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind (without listening) before loading the model: a busy port fails fast, in one line,
    and nothing accepts connections until the model is loaded and uvicorn listens."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise MlxdError(f"cannot bind {host}: {e.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise PortInUse(f"port {port} on {host} is already in use") from None
        raise MlxdError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.set_inheritable(True)
    return sock


def resolve_default(model: str | None, trust_remote_code: bool) -> tuple[ModelRef, str]:
    """(ModelRef, served name) of the model to preload; raises MlxdError with the reason.

    Runs before the engine starts, so a bad --model fails in about a second."""
    from mlxd.store.runnable import runnable_model

    ref = runnable_model(model, trust_remote_code=trust_remote_code, notify=_print_line)
    return ref, served_name(ref)


def served_name(ref: ModelRef) -> str:
    """A directory given on the command line is served under its folder name, not its path."""
    return ref.path.name if ref.source == "path" else ref.name


def resolve_draft(
    draft: str | None, kind: DraftKind | None, trust_remote_code: bool
) -> ModelRef | Path | None:
    """--draft-model, checked like --model before the engine starts (a directory: its path,
    so that it is named by its folder, never by where it is); --draft-kind model or dflash
    without one is refused."""
    from mlxd.types import DraftKind

    if draft is None:
        if kind in (DraftKind.MODEL, DraftKind.DFLASH):
            raise InvalidRequest(f"--draft-kind {kind} needs --draft-model", param="draft_kind")
        return None
    from mlxd.store.runnable import runnable_draft

    ref = runnable_draft(draft, trust_remote_code=trust_remote_code)
    return ref.path if ref.source == "path" else ref


def _print_line(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def serve(
    settings: ServerSettings,
    model: str | None,
    engine_overrides: dict[str, Any],
    shard: str = "auto",
    draft_model: str | None = None,
) -> int:
    """Bind, load, serve until a signal; returns the exit code (0 after a drained stop).
    Under mlx.launch, rank 0 serves and the other ranks follow it (engine.lockstep)."""
    from mlxd.engine import Engine, EngineConfig
    from mlxd.engine.lockstep import cluster_role, follow_leader, leader_backend
    from mlxd.types import DraftKind

    cfg = EngineConfig.from_settings(**engine_overrides)
    role = cluster_role(shard)
    if role is not None and not role.leader:
        return follow_leader(cfg, role)
    warn_if_exposed(settings)
    sock = bind_socket(settings.host, settings.port)
    socks = [sock]
    try:
        if settings.ollama_port:  # Ollama's address too: the same app behind a second socket
            socks.append(bind_socket(settings.host, settings.ollama_port))
        ref, name = resolve_default(model, settings.trust_remote_code)
        draft = resolve_draft(draft_model, cfg.draft_kind, settings.trust_remote_code)
        leader = leader_backend(cfg, role) if role is not None else None
        engine = Engine(cfg, leader.backend if leader is not None else None)
        if leader is not None:
            leader.watch_ranks(lambda detail: _rank_failed(engine, detail), _rank_stall_seconds())
    except BaseException:
        for s in socks:
            s.close()
        raise
    try:
        # The default is never unloaded; its draft model is loaded and kept with it.
        info = engine.load_model(ref.path, name, pin=True, draft=draft)
        if cfg.draft_kind is DraftKind.MTP and info.mtp_problem is not None:
            raise InvalidRequest(f"--draft-kind mtp: {info.mtp_problem}", param="draft_kind")
        app = create_app(engine, settings, default_model=info)
        cluster = f" ({leader.describe()})" if leader is not None else ""
        notes = _draft_note(engine, info) + _one_at_a_time_note(info) + cluster
        banner = _banner(socks, info.name, notes)
        server = MlxdServer(
            _uvicorn_config(app, settings), app.state.mlxd.lifecycle, settings.drain_seconds, banner
        )
        server.run(sockets=socks)
    finally:
        for s in socks:
            s.close()
        engine.close()
        if leader is not None and leader.fault is not None:
            # A collective on the broken ring never returns: MLX's teardown would wait for
            # its stream thread forever, so leave without it (the launcher sees exit 1).
            sys.stderr.flush()
            os._exit(1)
    return 0


def _uvicorn_config(app: FastAPI, settings: ServerSettings) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        loop="asyncio",
        http=guarded_protocol(settings.header_timeout, settings.max_connections),
        ws="none",
        lifespan="off",
        backlog=BACKLOG,
        # Connections + tasks; above our own cap, which evicts idle connections first.
        limit_concurrency=2 * settings.max_connections,
        timeout_keep_alive=settings.keep_alive,  # type: ignore[arg-type]
        log_level="warning",
        access_log=False,
        server_header=False,
    )


def _banner(socks: list[socket.socket], name: str, notes: str) -> str:
    """The one line `serve` prints when it is ready (tests and scripts wait for it)."""
    main, *more = (_address(s) for s in socks)
    also = "".join(f", Ollama clients on {url}" for url in more)
    return f"mlxd serve: {name} on {main}/v1{notes}{also}"


def _address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def _draft_note(engine: Engine, info: ModelInfo) -> str:
    attached = engine.draft_of(info)
    if attached is None:
        return ""
    return f" (draft {attached.model}, {attached.kind}, {attached.num_draft_tokens} tokens)"


def _one_at_a_time_note(info: ModelInfo) -> str:
    if not info.unbatchable:
        return ""
    return f" (served one at a time: its {', '.join(info.unbatchable)} cannot be batched)"


def _rank_failed(engine: Engine, detail: str) -> None:
    print(
        f"mlxd serve: {detail}; requests fail, /health and new requests get 503 until the "
        "job stops",
        file=sys.stderr,
        flush=True,
    )
    engine.fail(detail)


def _rank_stall_seconds() -> float:
    from mlxd.config import setting_float

    return setting_float("rank_stall_seconds")


def warn_if_exposed(settings: ServerSettings) -> None:
    if settings.loopback or settings.api_key:
        return
    bar = "!" * 72
    print(
        f"{bar}\nWARNING: mlxd serve is binding {settings.host} WITHOUT an API key.\n"
        "Anyone who can reach this address can use the server. Set --api-key or\n"
        f"MLXD_API_KEY, or bind 127.0.0.1.\n{bar}",
        file=sys.stderr,
        flush=True,
    )
