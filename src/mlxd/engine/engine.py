"""Engine: the facade the CLI and the server share. One thread owns every MLX call.

Callers talk to the engine thread only through typed messages on one inbox; results come back
through per-request collectors (tokens) and futures (model loads). A watchdog thread fails
every handle if active requests make no progress for `watchdog_seconds`, so nothing waits
forever on a stuck step.
"""

from __future__ import annotations

import atexit
import itertools
import queue
import threading
import time
import weakref
from concurrent.futures import Future
from dataclasses import replace
from os import PathLike
from pathlib import Path
from typing import Protocol

from mlxd.backend import factory
from mlxd.backend.api import Backend
from mlxd.engine import kv_budget
from mlxd.engine.collector import Collector
from mlxd.engine.core import EngineCore, LiveRequests
from mlxd.engine.embedding import (
    EmbedHandle,
    EmbedJob,
    EmbedRequest,
    fail_job,
    validate_embed,
)
from mlxd.engine.engine_config import EngineConfig
from mlxd.engine.handle import RequestHandle
from mlxd.engine.inbox import Cancel, Embed, KeepAlive, LoadModel, Message, Shutdown, Submit
from mlxd.engine.loaded_models import AttachedDraft, DraftInfo, LoadedModels, ModelInfo
from mlxd.engine.loops import LoopWatch
from mlxd.engine.request import EngineRequest, Request, budget, validate
from mlxd.engine.residency import resident_models
from mlxd.engine.stats import EngineHealth, EngineState, EngineStats, ResidentModel
from mlxd.errors import (
    EngineBusy,
    EngineFault,
    EngineUnavailable,
    InvalidRequest,
    ModelNotFound,
    from_code,
    one_line,
)
from mlxd.types import DraftKind, FinishEvent, FinishReason, ModelKind, SamplingParams

_ids = itertools.count(1)
# Long enough for a chat template render (MLXD_TEMPLATE_SECONDS) and tokenization between a
# server's model look-up and its submit; a reservation nobody uses only delays an unload.
RESERVE_SECONDS = 10.0
_open_engines: weakref.WeakSet[Engine] = weakref.WeakSet()


@atexit.register
def _close_open_engines() -> None:
    # The engine thread must release its MLX streams before the interpreter exits.
    for engine in list(_open_engines):
        engine.close()


def _source(path: ModelSource | str | PathLike[str], name: str | None) -> tuple[str, Path]:
    """(name, directory) of a model to load; the name defaults to the source's own."""
    if isinstance(path, str | PathLike):
        directory = Path(path).expanduser()
        return name or directory.name, directory
    return name or path.name, Path(path.path).expanduser()


MTP_HEAD = "mtp head"  # what AttachedDraft names as the model of a checkpoint's MTP head


def _no_drafter(kind: DraftKind, info: ModelInfo) -> str:
    """Why a request's draft kind `model` / `dflash` cannot run on `info` (one line)."""
    wanted = "a draft model" if kind is DraftKind.MODEL else "a DFlash drafter"
    if info.draft is None:
        return f"no draft model is attached to {info.name}"
    return f"{info.draft.name}, attached to {info.name}, is not {wanted} (draft_kind {kind})"


class ModelSource(Protocol):
    """A model to load: its name and its directory (a store ModelRef is one)."""

    @property
    def name(self) -> str: ...
    @property
    def path(self) -> Path: ...


class Engine:
    """Thread-safe facade; see docs/ARCHITECTURE.md for the contract."""

    def __init__(self, cfg: EngineConfig | None = None, backend: Backend | None = None) -> None:
        self.cfg = cfg or EngineConfig.from_settings()
        self._backend = backend if backend is not None else factory.mlx_backend(self.cfg.backend)
        self._models = LoadedModels()
        self._live = LiveRequests()
        self._inbox: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._queued = 0  # submitted and not yet admitted: what max_queue bounds
        self._embed_jobs: dict[str, EmbedJob] = {}  # unanswered embeddings, for _fail_all
        self._state = EngineState.READY
        self._detail: str | None = None
        self._core = EngineCore(self.cfg, self._backend, self._models, self._live, self._dequeued)
        self._thread = threading.Thread(target=self._loop, name="mlxd-engine", daemon=True)
        self._stop = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name="mlxd-watchdog", daemon=True)
        self._thread.start()
        self._watchdog.start()
        _open_engines.add(self)

    # ---- models ---------------------------------------------------------------------

    def load_model(
        self,
        path: ModelSource | str | PathLike[str],
        name: str | None = None,
        *,
        pin: bool = False,
        draft: ModelSource | str | PathLike[str] | None = None,
    ) -> ModelInfo:
        """Load (once) and register a model; blocks. `path` is a directory, or anything with
        `.name` and `.path` (a store ModelRef); `name` defaults to its name (a directory's
        last part). Counts as a use of the model (LRU, TTL). `pin`: never unload it (by TTL
        or LRU); a pin is kept for the name, also across a reload. Loading may unload other
        idle models to stay within `max_models`. `draft` (same forms): a draft model with
        the same vocabulary, loaded and unloaded with this one, for speculation of kind
        `model`. Raises ModelBroken / ModelRefused / ModelNotFound with a one-line reason,
        InvalidRequest when the draft's vocabulary differs."""
        name, directory = _source(path, name)
        drafted = None
        if draft is not None:
            draft_name, draft_dir = _source(draft, None)
            drafted = DraftInfo(draft_name, draft_dir.resolve())
        entry = self._models.touch(name)
        if entry is not None and entry.info.path.resolve() != directory.resolve():
            raise InvalidRequest(f"another model is already loaded as {name!r}")
        # Without `draft`, a loaded model is taken with whatever draft it has.
        if entry is not None and drafted is not None and entry.info.draft != drafted:
            raise InvalidRequest(f"{name!r} is already loaded with another draft model")
        if pin:
            self._models.pin(name)
            entry = self._models.touch(name)  # again: it may have gone just before the pin
        if entry is not None:
            return entry.info
        reply: Future[ModelInfo] = Future()
        self._post(LoadModel(name, directory, reply, drafted))
        return reply.result()

    def reserve(self, name: str, seconds: float = RESERVE_SECONDS) -> ModelInfo:
        """The loaded model `name`, kept loaded (by neither TTL nor LRU unloaded) until the
        next submit for it, or `seconds` at most; the request then keeps it loaded while it
        lives. For a caller that looked a model up and submits to it shortly, like the server
        between resolving a request's model and submitting. Raises ModelNotFound."""
        entry = self._models.reserve(name, seconds)
        if entry is None:
            raise ModelNotFound(f"model {name!r} is not loaded")
        return entry.info

    def keep_alive(self, name: str, seconds: float | None) -> None:
        """Keep the loaded model `name` for `seconds` after its last use instead of the TTL
        (math.inf: no TTL; 0: unload it as soon as it is idle; None: the TTL again), as
        Ollama's `keep_alive` asks. A pin outranks it; a model not loaded is left alone."""
        self._check_open()
        self._post(KeepAlive(name, seconds))

    # ---- requests -------------------------------------------------------------------

    def submit(self, req: EngineRequest) -> RequestHandle:
        """Queue a request. Raises at once: EngineBusy, ContextOverflow, InvalidRequest,
        ModelNotFound, EngineUnavailable."""
        self._check_open()  # again under the lock below; this one gives the clearer error
        # acquire: from here until the engine thread takes the Submit, the model cannot be
        # unloaded; every path that does not post the Submit releases it.
        entry = self._models.acquire(req.model)
        if entry is None:
            raise ModelNotFound(f"model {req.model!r} is not loaded")
        try:
            request = self._make_request(req, entry.info)
            with self._lock:
                self._check_open()
                if self._queued >= self.cfg.max_queue:
                    raise EngineBusy(f"engine queue is full ({self.cfg.max_queue} waiting)")
                self._queued += 1
                self._live.add(request)
                self._inbox.put(Submit(request))
        except BaseException:
            self._models.release(req.model)
            raise
        return RequestHandle(request, self._cancel)

    def embed(self, req: EmbedRequest) -> EmbedHandle:
        """Queue an embedding request (batched with others by the engine thread). Raises at
        once: InvalidRequest (not an embedding model; no, too many, empty or too long inputs),
        EngineBusy, ModelNotFound, EngineUnavailable."""
        self._check_open()
        entry = self._models.acquire(req.model)
        if entry is None:
            raise ModelNotFound(f"model {req.model!r} is not loaded")
        try:
            validate_embed(req, entry.info, self.cfg.embed_max_inputs)
            job = EmbedJob(f"emb-{next(_ids)}", req, Future())
            with self._lock:
                self._check_open()
                if self._queued >= self.cfg.max_queue:
                    raise EngineBusy(f"engine queue is full ({self.cfg.max_queue} waiting)")
                self._queued += 1
                self._embed_jobs[job.request_id] = job
                self._inbox.put(Embed(job))
        except BaseException:
            self._models.release(req.model)
            raise
        job.reply.add_done_callback(lambda _: self._embed_jobs.pop(job.request_id, None))
        return EmbedHandle(job, self._cancel)

    def _make_request(self, req: EngineRequest, info: ModelInfo) -> Request:
        info.require(ModelKind.GENERATION)
        validate(req, info.vocab_size, takes_images=info.image_processor is not None)
        max_tokens = budget(
            len(req.prompt_ids), info.context_window, req.params, self.cfg.max_tokens_ceiling
        )
        params = self._with_draft(req.params, info)
        kv_limit = self.kv_budget_bytes(info)
        kv_bytes = kv_budget.request_bytes(
            len(req.prompt_ids), max_tokens, info, kv_limit, params.draft_kind
        )
        return Request(
            kv_bytes=kv_bytes,
            kv_budget=kv_limit,
            request_id=f"req-{next(_ids)}",
            model=req.model,
            prompt_ids=list(req.prompt_ids),
            params=params,
            max_tokens=max_tokens,
            collector=Collector(until_shown=req.until_shown),
            grammar=req.grammar,
            boundaries=req.boundaries,
            images=req.images,
            reasoning=req.reasoning,
            loops=LoopWatch(req.params.loop_repeats) if req.params.loop_repeats else None,
        )

    def kv_budget_bytes(self, info: ModelInfo) -> int | None:
        """The KV byte budget requests for `info` are admitted under (engine.kv_budget)."""
        return kv_budget.budget_bytes(self.cfg.kv_budget_bytes, info)

    def draft_of(self, info: ModelInfo) -> AttachedDraft | None:
        """The draft model loaded with `info`, with the engine's defaults for it; or its
        MTP head (model `mtp head`) when the engine's default kind is mtp and it has one."""
        kind = self._default_kind(info)
        if info.draft is None:
            if kind is DraftKind.MTP and info.mtp_problem is None:
                per_token = info.mtp_kv.bytes_per_token
                return AttachedDraft(MTP_HEAD, kind, self.cfg.num_draft_tokens, per_token)
            return None
        per_token = info.draft_kv.bytes_per_token
        return AttachedDraft(info.draft.name, kind, self.cfg.num_draft_tokens, per_token)

    def _default_kind(self, info: ModelInfo) -> DraftKind:
        """The draft kind of a request that does not choose: the engine's, else `model` on a
        model loaded with a draft, else none."""
        attached = info.draft.kind if info.draft is not None else DraftKind.NONE
        return self.cfg.draft_kind or attached

    def _with_draft(self, params: SamplingParams, info: ModelInfo) -> SamplingParams:
        """The request's speculation settings, the engine's where it left them unset."""
        kind = params.draft_kind or self._default_kind(info)
        attached = info.draft.kind if info.draft is not None else None
        if kind in (DraftKind.MODEL, DraftKind.DFLASH) and kind is not attached:
            if params.draft_kind is kind:
                raise InvalidRequest(_no_drafter(kind, info), param="draft_kind")
            kind = DraftKind.NONE  # the engine's default, on a model without such a draft
        if kind is DraftKind.MTP and info.mtp_problem is not None:
            if params.draft_kind is DraftKind.MTP:
                raise InvalidRequest(info.mtp_problem, param="draft_kind")
            kind = DraftKind.NONE
        k = params.num_draft_tokens or self.cfg.num_draft_tokens
        if kind is params.draft_kind and k == params.num_draft_tokens:
            return params
        return replace(params, draft_kind=kind, num_draft_tokens=k)

    def _cancel(self, request_id: str) -> None:
        self._inbox.put(Cancel(request_id))

    def _dequeued(self) -> None:
        with self._lock:
            self._queued -= 1

    # ---- lifecycle ------------------------------------------------------------------

    def health(self) -> EngineHealth:
        """Cheap and non-blocking."""
        state, detail, blas = self._state, self._detail, self._backend.blas()
        cluster = self._backend.cluster()
        kv = (self._core.scheduler.kv_bytes_in_use, self._budget_now())
        if state.open and self._stalled():
            message = self._stall_message()
            return EngineHealth(False, EngineState.STALLED, message, blas, cluster, *kv)
        return EngineHealth(state.open, state, detail, blas, cluster, *kv)

    def resident(self) -> tuple[ResidentModel, ...]:
        """Each loaded model now (residency.resident_models); cheap, from any thread."""
        live, ttl = self._live.snapshot(), self.cfg.model_ttl_seconds
        embedding = [job.request.model for job in self._core.embeds.jobs()]  # one C-level copy
        return resident_models(self._models, live, ttl, time.monotonic(), embedding)

    def stats(self) -> EngineStats:
        core = self._core
        return EngineStats(
            running=len(core.scheduler.running),
            waiting=self._queued,
            counters=core.counters.snapshot(),
            cache=self._backend.cache_stats(),
            kv_tokens_in_use=core.scheduler.kv_in_use,
            kv_bytes_in_use=core.scheduler.kv_bytes_in_use,
            kv_budget_bytes=self._budget_now(),
            model=core.model,
            models_loaded=tuple(self._models.names()),
            blas=self._backend.blas(),
            cluster=self._backend.cluster(),
        )

    def _budget_now(self) -> int | None:
        """The byte budget of the model running now (or loaded last)."""
        scheduler = self._core.scheduler
        if scheduler.kv_budget_bytes is not None or self._core.model is None:
            return scheduler.kv_budget_bytes
        entry = self._models.get(self._core.model)
        return self.kv_budget_bytes(entry.info) if entry is not None else None

    def drain(self, timeout_s: float) -> bool:
        """Refuse new submits; wait up to `timeout_s` for accepted requests to finish."""
        with self._lock:
            if self._state is EngineState.READY:
                self._state = EngineState.DRAINING
        deadline = time.monotonic() + timeout_s
        while self._live.snapshot() or self._embed_jobs:
            if time.monotonic() >= deadline or not self._state.open:
                return not (self._live.snapshot() or self._embed_jobs)
            time.sleep(0.01)
        return True

    def fail(self, detail: str) -> None:
        """From any thread, for a fault outside the engine (a rank of a distributed job died):
        fail every handle with `detail` and refuse new work (health: failed, `detail`)."""
        with self._lock:
            if not self._state.open:
                return
            self._state, self._detail = EngineState.FAILED, detail
        self._fail_all(detail, EngineFault.code)
        self._inbox.put(Shutdown())  # if the stuck step ever returns, the loop exits

    def close(self) -> None:
        """Fail pending handles (EngineUnavailable-style FinishEvent), stop and join threads."""
        with self._lock:
            if self._state is EngineState.CLOSED:
                return
            # A stalled thread may never come back: do not wait long for it.
            join_s = 30.0 if self._state.open else 1.0
            self._state, self._detail = EngineState.CLOSED, "engine closed"
        self._fail_all("engine closed", EngineUnavailable.code)
        self._inbox.put(Shutdown())
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=join_s)
        self._watchdog.join(timeout=5)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- engine thread --------------------------------------------------------------

    def _post(self, msg: Message) -> None:
        with self._lock:
            self._check_open(allow_draining=True)
            self._inbox.put(msg)

    def _check_open(self, allow_draining: bool = False) -> None:
        state = self._state
        if state is EngineState.READY or (allow_draining and state is EngineState.DRAINING):
            return
        detail = f": {self._detail}" if self._detail else ""
        raise EngineUnavailable(f"engine is {self._state}{detail}")

    def _loop(self) -> None:
        core, inbox = self._core, self._inbox
        try:
            while self._state.open:
                if not self._handle_messages(block=not core.has_work):
                    break
                core.residency.maintain()
                # Decode without looking further while no message comes (every change of
                # state, a close or a failure included, posts one).
                while core.has_work and inbox.empty():
                    core.step()
                    core.residency.maintain()
        except BaseException as exc:  # a fault outside any one request: fatal
            self._die(f"engine fault: {one_line(exc)}")
        finally:
            code = EngineFault.code if self._state is EngineState.FAILED else EngineUnavailable.code
            self._fail_all(self._detail or "engine stopped", code)
            self._reject_inbox()
            core.close()

    def _handle_messages(self, block: bool) -> bool:
        """Apply pending messages (waiting for one when idle); False on Shutdown."""
        inbox, core = self._inbox, self._core
        if not block and inbox.empty():
            return True
        try:
            # Idle, an engine sleeps until a message comes, or until a model's TTL is due.
            msg = inbox.get(timeout=core.residency.idle_timeout()) if block else inbox.get_nowait()
        except queue.Empty:
            return True
        while True:
            if isinstance(msg, Shutdown):
                return False
            core.handle(msg)
            if inbox.empty():
                return True
            msg = inbox.get_nowait()

    def _die(self, detail: str) -> None:
        with self._lock:
            if self._state.open:
                self._state, self._detail = EngineState.FAILED, detail

    def _fail_all(self, message: str, code: str | None) -> None:
        """Finish every live handle with an error; safe from any thread."""
        for request in self._live.snapshot():
            self._live.discard(request)
            event = FinishEvent(
                reason=FinishReason.ERROR,
                usage=request.usage(),
                timings=request.timings(time.monotonic()),
                error=message,
                error_code=code,
            )
            request.collector.finish(event)
        error = from_code(code, message)
        for job in list(self._embed_jobs.values()):
            fail_job(job, error)

    def _reject_inbox(self) -> None:
        while True:
            try:
                msg = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(msg, LoadModel) and not msg.reply.done():
                msg.reply.set_exception(EngineUnavailable(f"engine is {self._state}"))
            elif isinstance(msg, Embed):
                fail_job(msg.job, EngineUnavailable(f"engine is {self._state}"))
            elif isinstance(msg, Submit):
                msg.request.collector.finish(
                    FinishEvent(
                        FinishReason.ERROR,
                        msg.request.usage(),
                        error=f"engine is {self._state}",
                        error_code=EngineUnavailable.code,
                    )
                )

    # ---- watchdog -------------------------------------------------------------------

    def _stalled(self) -> bool:
        core = self._core
        if not core.has_work or core.loading:
            return False
        return time.monotonic() - core.last_progress > self.cfg.watchdog_seconds

    def _stall_message(self) -> str:
        return f"no engine progress for more than {self.cfg.watchdog_seconds:g}s"

    def _watch(self) -> None:
        period = min(1.0, self.cfg.watchdog_seconds / 4)
        while not self._stop.wait(period):
            if not self._state.open or not self._stalled():
                continue
            with self._lock:
                if not self._state.open:
                    continue
                self._state, self._detail = EngineState.STALLED, self._stall_message()
            self._fail_all(self._stall_message(), EngineFault.code)
            self._inbox.put(Shutdown())  # if the stuck step ever returns, the loop exits
