"""EngineCore: everything the engine thread does. One step = schedule, run, postprocess.

Only the engine thread calls into a core. It owns the scheduler, the active runner (one
model's batch) and, through the Backend protocol, every MLX call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from mlxd.backend.api import Backend, DraftCount, NewSequence, Runner, StepResult
from mlxd.engine.collector import Collector, StreamWaker
from mlxd.engine.embedding import EmbedBatch, EmbedJob, EmbedPace, EmbedQueue, fail_job
from mlxd.engine.engine_config import EngineConfig
from mlxd.engine.inbox import Cancel, Embed, KeepAlive, LoadModel, Message, Submit
from mlxd.engine.loaded_models import LoadedModels, ModelEntry
from mlxd.engine.request import Request, RequestStatus
from mlxd.engine.residency import Residency
from mlxd.engine.scheduler import Scheduler
from mlxd.engine.stats import Counters
from mlxd.errors import EngineFault, EngineUnavailable, MlxdError, ModelNotFound, one_line
from mlxd.types import FinishEvent, FinishReason


def _sequence(request: Request) -> NewSequence:
    """What the runner needs of a request to start its sequence."""
    return NewSequence(
        request.prompt_ids,
        request.params,
        request.max_tokens,
        request.request_id,
        request.grammar,
        request.boundaries,
        request.images,
        request.reasoning,
    )


class LiveRequests:
    """request_id -> Request for every unfinished request; any thread may snapshot it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, Request] = {}

    def add(self, request: Request) -> None:
        with self._lock:
            self._by_id[request.request_id] = request

    def get(self, request_id: str) -> Request | None:
        with self._lock:
            return self._by_id.get(request_id)

    def discard(self, request: Request) -> None:
        with self._lock:
            self._by_id.pop(request.request_id, None)

    def snapshot(self) -> list[Request]:
        with self._lock:
            return list(self._by_id.values())


class EngineCore:
    def __init__(
        self,
        cfg: EngineConfig,
        backend: Backend,
        models: LoadedModels,
        live: LiveRequests,
        on_dequeue: Callable[[], None],
    ) -> None:
        self.cfg = cfg
        self.backend = backend
        self.models = models
        self.live = live
        self.on_dequeue = on_dequeue  # a waiting request left the queue (admitted or ended)
        self.scheduler = Scheduler(cfg.max_batch, cfg.kv_budget_tokens)
        self.embeds = EmbedQueue()
        self.embed_pace = EmbedPace(cfg.embed_step_tokens, cfg.embed_step_s)
        self.counters = Counters()
        self.model: str | None = None
        self.runner: Runner | None = None
        self.last_progress = time.monotonic()
        self.loading = False
        self.waker = StreamWaker(cfg.stream_interval_s)
        self.residency = Residency(
            models,
            cfg.max_models,
            cfg.model_ttl_seconds,
            busy=lambda: self.scheduler.models_in_use() | self.embeds.models_in_use(),
            unload=self._release_model,
        )

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work or self.embeds.has_work

    # ---- messages -------------------------------------------------------------------

    def handle(self, msg: Message) -> None:
        if not self.has_work:  # idle time is not a stall: the watchdog clock starts now
            self.last_progress = time.monotonic()
        if isinstance(msg, Submit):
            self.scheduler.add(msg.request)
            self.models.release(msg.request.model)  # busy now: the scheduler holds it
            self.counters.requests_total += 1
        elif isinstance(msg, Embed):
            self.embeds.add(msg.job)
            self.models.release(msg.job.request.model)
            self.counters.requests_total += 1
        elif isinstance(msg, Cancel):
            self._cancel(msg.request_id)
        elif isinstance(msg, LoadModel):
            self._load(msg)
        elif isinstance(msg, KeepAlive) and self.models.keep_alive(msg.name, msg.seconds):
            self.residency.used(msg.name)  # re-arms the TTL check with the new limit

    def _cancel(self, request_id: str) -> None:
        request = self.live.get(request_id)
        job = self.embeds.find(request_id) if request is None else None
        if job is not None:
            job.reply.cancel()
            self._end_job(job, "cancelled")
        if request is None or request.finished:
            return
        self.finish(request, FinishReason.CANCELLED)

    def _load(self, msg: LoadModel) -> None:
        if msg.reply.done():
            return
        try:
            entry = self._loaded_entry(msg)
        except MlxdError as exc:
            msg.reply.set_exception(exc)
            return
        except Exception as exc:  # a loader bug must not kill the engine
            msg.reply.set_exception(EngineFault(f"loading {msg.name} failed: {one_line(exc)}"))
            return
        try:
            self.residency.loaded(msg.name)  # before replying: the caller sees the limit applied
        finally:
            msg.reply.set_result(entry.info)

    def _loaded_entry(self, msg: LoadModel) -> ModelEntry:
        """The entry of `msg.name`, loaded first (with its draft) unless it already is;
        registered as used now. A load is not a stall: `loading` keeps the watchdog quiet."""
        self.loading = True
        try:
            entry = self.models.get(msg.name)
            if entry is None:
                draft = msg.draft
                loaded = (
                    self.backend.load(msg.path)
                    if draft is None
                    else self.backend.load(msg.path, draft.path)
                )
                entry = ModelEntry.of(msg.name, loaded, draft)
            self.models.put(entry)
            return entry
        finally:
            self.loading = False
            self.last_progress = time.monotonic()

    # ---- one step -------------------------------------------------------------------

    def step(self) -> None:
        """One engine step: schedule, run the batch, postprocess its tokens."""
        if self.cfg.fault_hook is not None:
            self.cfg.fault_hook("step", None)
        runner = self._schedule()
        if runner is not None:
            result = self._run(runner)
            if result is not None:
                self._postprocess(result)
        if self.embeds.has_work:
            decoding = bool(self.scheduler.running)
            self._embed(self.embeds.take(lambda m: self.embed_pace.budget(m, decoding)))
        self.counters.steps_total += 1
        self.last_progress = time.monotonic()

    def _schedule(self) -> Runner | None:
        """Swap in the model the queue needs and admit what fits; the runner to step, or
        None when nothing runs. With nothing waiting there is nothing to decide."""
        scheduler = self.scheduler
        if scheduler.waiting:
            self._swap_model_if_needed()
            self._admit()
        return self.runner if scheduler.running else None

    def _swap_model_if_needed(self) -> None:
        wanted = self.scheduler.model_to_swap_in(self.model)
        if wanted is None:
            return
        entry = self.models.get(wanted)
        self._close_runner()
        if entry is None:  # unloaded meanwhile: fail what waits for it
            for request in [r for r in self.scheduler.waiting if r.model == wanted]:
                self.fail(request, f"model {wanted} is not loaded", ModelNotFound.code)
            return
        self.runner = self.backend.make_runner(wanted, entry.loaded)
        self.model = wanted

    def _admit(self) -> None:
        if self.runner is None:
            return
        later = []
        rows = 1 if self.runner.one_at_a_time else None
        for request in self.scheduler.admissible(self.model, rows):
            if self.runner.awaits_snapshot(request.prompt_ids):
                later.append(request)  # a running prefill is about to cache its prefix
                continue
            request.admitted_at = time.monotonic()
            try:
                uid, cached = self.runner.insert(_sequence(request))
            except Exception as exc:  # this request cannot start; the others can
                self.fail(request, f"request failed: {one_line(exc)}", EngineFault.code)
                continue
            self.on_dequeue()
            request.cached_tokens = cached
            self.scheduler.start(request, uid)
            self.counters.admitted(request.prompt_len, cached, self.cfg.prefix_cache_bytes > 0)
        self.scheduler.put_back(later)

    def _run(self, runner: Runner) -> StepResult | None:
        """One batched step; None when it raised (its batch is failed and dropped)."""
        if self.waker.pending and runner.prefill_pending:
            self.waker.flush(time.monotonic())  # a prefill step can be long: deliver first
        try:
            return runner.step()
        except Exception as exc:
            # The batch's state is unknown after a failed step: fail its requests, start over.
            self._fail_batch(exc)
            return None

    def _postprocess(self, result: StepResult) -> None:
        """Deliver the step's tokens, end the sequences that finished, wake consumers, and
        fail the sequences whose sampler or logits processor raised."""
        now = time.monotonic()
        if result.drafts:
            self._count_drafts(result.drafts)
        self.counters.parked_steps_total += result.parked
        first, later = self._deliver(result, now)
        self.counters.generation_tokens_total += len(result.tokens)
        self.waker.step_done(now, first, later)
        running = self.scheduler.running
        for uid, exc in result.failed.items():
            request = running.get(uid)
            if request is not None:
                self.fail(request, f"request failed: {one_line(exc)}", EngineFault.code)

    def _count_drafts(self, drafts: dict[int, DraftCount]) -> None:
        """Add the step's speculation to its requests (before delivery ends any of them)."""
        running, counters = self.scheduler.running, self.counters
        for uid, count in drafts.items():
            counters.draft_tokens_total += count.drafted
            counters.accepted_tokens_total += count.accepted
            request = running.get(uid)
            if request is not None:
                request.draft_tokens += count.drafted
                request.accepted_draft_tokens += count.accepted
                kind = request.params.draft_kind
                if kind is not None and kind.value in counters.drafted_by_kind:
                    counters.drafted_by_kind[kind.value] += count.drafted
                    counters.accepted_by_kind[kind.value] += count.accepted

    def _deliver(self, result: StepResult, now: float) -> tuple[list[Collector], list[Collector]]:
        """Push each token to its request's collector (the stop token itself is never
        emitted) and finish the requests that ended. Returns the collectors to wake now (a first
        token, or a consumer that shows nothing yet) and the others, for the wake-up."""
        running, failed = self.scheduler.running, result.failed
        first: list[Collector] = []
        later: list[Collector] = []
        for out in result.tokens:
            request = running.get(out.uid)
            if request is None or (failed and out.uid in failed):
                continue
            request.completion_tokens += 1
            collector, finish = request.collector, out.finish
            if finish is None:
                collector.put(out.token, out.logprob)
                shown = request.first_token_at is not None and not collector.until_shown
                # a first token, or a consumer that shows nothing yet, wakes now
                (later if shown else first).append(collector)
            elif finish is not FinishReason.STOP:  # the stop token itself is never emitted
                collector.put(out.token, out.logprob)
            if request.first_token_at is None:
                request.first_token_at = now
                request.status = RequestStatus.DECODING
            if finish is not None:
                self.finish(request, finish, in_backend=False)
            elif request.loops is not None and request.loops.push(out.token):
                self.finish(request, FinishReason.LOOP)  # after its last token, delivered
        return first, later

    def _fail_batch(self, exc: Exception) -> None:
        message = f"batch step failed: {one_line(exc)}"
        for request in list(self.scheduler.running.values()):
            self.fail(request, message, EngineFault.code, in_backend=False)
        self._close_runner()

    def _close_runner(self) -> None:
        if self.runner is not None:
            self.runner.close()
        self.runner, self.model = None, None

    # ---- embeddings -----------------------------------------------------------------

    def _embed(self, batch: EmbedBatch | None) -> None:
        """Run one batch of embedding rows beside the decode step; answer the jobs it ends."""
        if batch is None:
            return
        entry = self.models.get(batch.model)
        try:
            if entry is None or entry.loaded.embedder is None:
                raise ModelNotFound(f"embedding model {batch.model} is not loaded")
            began = time.perf_counter()
            vectors = entry.loaded.embedder.embed(batch.ids())
            self.embed_pace.measured(batch.model, batch.padded_tokens, time.perf_counter() - began)
        except Exception as exc:  # this batch's requests fail; the engine goes on
            error = (
                exc
                if isinstance(exc, MlxdError)
                else EngineFault(f"embedding failed: {one_line(exc)}")
            )
            for job in {id(j): j for j, _ in batch.rows}.values():
                fail_job(job, error)
                self._end_job(job, FinishReason.ERROR.value)
            return
        for (job, row), vector in zip(batch.rows, vectors, strict=True):
            job.vectors[row] = vector
        self.counters.embedded_tokens_total += sum(len(ids) for ids in batch.ids())
        for job in {id(j): j for j, _ in batch.rows}.values():
            if job.complete and not job.reply.done():
                job.reply.set_result(job.result())
                self._end_job(job, FinishReason.STOP.value)

    def _end_job(self, job: EmbedJob, reason: str) -> None:
        """`job` leaves the queue (answered, failed or cancelled)."""
        if job in self.embeds.jobs():
            self.embeds.remove(job)
            self.on_dequeue()
            self.residency.used(job.request.model)
            self.counters.by_reason[reason] += 1

    # ---- endings --------------------------------------------------------------------

    def finish(
        self,
        request: Request,
        reason: FinishReason,
        error: str | None = None,
        error_code: str | None = None,
        *,
        in_backend: bool = True,
    ) -> None:
        """End a request in any state: free its slot (and its sequence in the backend when
        `in_backend`), then deliver its FinishEvent."""
        if request.finished:
            return
        if request.status is RequestStatus.WAITING:
            self.on_dequeue()
        elif in_backend and request.uid is not None and self.runner is not None:
            self.runner.remove([request.uid], keep_cache=reason is FinishReason.CANCELLED)
        self.scheduler.remove(request)
        self.live.discard(request)
        self.residency.used(request.model)
        self.counters.by_reason[reason.value] += 1
        now = time.monotonic()
        request.collector.finish(
            FinishEvent(
                reason=reason,
                usage=request.usage(),
                timings=request.timings(now),
                error=error,
                error_code=error_code,
            )
        )

    def fail(self, request: Request, message: str, code: str, *, in_backend: bool = True) -> None:
        self.finish(request, FinishReason.ERROR, message, code, in_backend=in_backend)

    def _release_model(self, name: str) -> None:
        """`name` left the table (residency): stop its runner, free what the backend holds."""
        if self.model == name:
            self._close_runner()
        self.backend.unload(name)

    def close(self) -> None:
        """Engine thread, on exit: fail waiting embeddings, release the runner, then the
        backend's thread state."""
        for job in self.embeds.jobs():
            fail_job(job, EngineUnavailable("engine stopped"))
        try:
            if self.runner is not None:
                self.runner.close()
        finally:
            self.runner = None
            self.backend.shutdown()
