"""Embedding requests in the engine: the request, its result and handle, and the queue the
engine thread takes bounded batches from, between decode steps.

A request's inputs are token-id rows. Each engine step embeds one batch of rows of one model,
taken first come first served across requests, within `embed_step_tokens` padded tokens (a
longer row runs alone), so many small requests share a forward pass and a decode step never
waits for more than one such batch.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mlxd.errors import InvalidRequest, MlxdError
from mlxd.types import ModelKind

if TYPE_CHECKING:
    from mlxd.engine.loaded_models import ModelInfo


@dataclass(frozen=True, slots=True)
class EmbedRequest:
    """What a caller submits: the model's name and token-id rows (one vector each)."""

    model: str
    inputs: list[list[int]]


@dataclass(frozen=True, slots=True)
class EmbedResult:
    """One vector per input row, in order, and the tokens embedded."""

    vectors: list[list[float]]
    prompt_tokens: int


@dataclass(slots=True)
class EmbedJob:
    """One request on the engine thread: the rows not yet embedded and the vectors so far."""

    request_id: str
    request: EmbedRequest
    reply: Future[EmbedResult]
    vectors: list[list[float] | None] = field(default_factory=list)
    next_row: int = 0  # rows before it are taken (embedded, or in the batch being embedded)

    def __post_init__(self) -> None:
        self.vectors = [None] * len(self.request.inputs)

    @property
    def complete(self) -> bool:
        return all(v is not None for v in self.vectors)

    def result(self) -> EmbedResult:
        tokens = sum(len(row) for row in self.request.inputs)
        return EmbedResult([v for v in self.vectors if v is not None], tokens)


@dataclass(frozen=True, slots=True)
class EmbedBatch:
    """One step's rows: (job, row index) pairs of one model."""

    model: str
    rows: list[tuple[EmbedJob, int]]

    def ids(self) -> list[list[int]]:
        return [job.request.inputs[i] for job, i in self.rows]

    @property
    def padded_tokens(self) -> int:
        return len(self.rows) * max(len(job.request.inputs[i]) for job, i in self.rows)


class EmbedPace:
    """How many padded tokens one step may embed: `step_tokens` while nothing decodes; beside
    decoding rows, what fits in `step_s` at the model's measured cost per token, so a decode
    step waits for embeddings about `step_s` at most (one row always runs)."""

    def __init__(self, step_tokens: int, step_s: float) -> None:
        self.step_tokens = step_tokens
        self.step_s = step_s
        self._cost: dict[str, float] = {}  # model -> seconds per padded token (running mean)

    def budget(self, model: str, decoding: bool) -> int:
        cost = self._cost.get(model)
        if not decoding or cost is None or cost <= 0:
            return self.step_tokens  # unmeasured: the first batch measures it
        return max(1, min(self.step_tokens, int(self.step_s / cost)))

    def measured(self, model: str, tokens: int, seconds: float) -> None:
        cost = seconds / max(tokens, 1)
        last = self._cost.get(model)
        self._cost[model] = cost if last is None else (last + cost) / 2


class EmbedQueue:
    """The engine thread's embedding jobs, first come first served."""

    def __init__(self) -> None:
        self._jobs: deque[EmbedJob] = deque()

    @property
    def has_work(self) -> bool:
        return bool(self._jobs)

    def add(self, job: EmbedJob) -> None:
        self._jobs.append(job)

    def models_in_use(self) -> set[str]:
        return {job.request.model for job in self._jobs}

    def find(self, request_id: str) -> EmbedJob | None:
        return next((j for j in self._jobs if j.request_id == request_id), None)

    def remove(self, job: EmbedJob) -> None:
        self._jobs.remove(job)

    def jobs(self) -> list[EmbedJob]:
        return list(self._jobs)

    def take(self, budget: Callable[[str], int]) -> EmbedBatch | None:
        """The next batch: rows of the oldest job's model, in order, while the padded batch
        (rows x longest row) stays within `budget(model)` tokens; at least one row."""
        model = next((j.request.model for j in self._jobs if j.next_row < len(j.vectors)), None)
        if model is None:
            return None
        tokens = budget(model)
        rows: list[tuple[EmbedJob, int]] = []
        width = 0
        for job in (j for j in self._jobs if j.request.model == model):
            while job.next_row < len(job.vectors):
                length = len(job.request.inputs[job.next_row])
                if rows and (len(rows) + 1) * max(width, length) > tokens:
                    return EmbedBatch(model, rows)
                rows.append((job, job.next_row))
                width = max(width, length)
                job.next_row += 1
        return EmbedBatch(model, rows)


class EmbedHandle:
    """A caller's view of one embedding request: wait for its result (sync or async), or
    cancel it (freed at the next step boundary). A failure raises its MlxdError."""

    def __init__(self, job: EmbedJob, cancel: Callable[[str], None]) -> None:
        self._job = job
        self._cancel = cancel

    @property
    def request_id(self) -> str:
        return self._job.request_id

    def result(self, timeout: float | None = None) -> EmbedResult:
        return self._job.reply.result(timeout)

    async def wait(self) -> EmbedResult:
        return await asyncio.wrap_future(self._job.reply)

    def cancel(self) -> None:
        if not self._job.reply.done():
            self._cancel(self._job.request_id)


def fail_job(job: EmbedJob, error: MlxdError) -> None:
    if not job.reply.done():
        job.reply.set_exception(error)


def validate_embed(req: EmbedRequest, info: ModelInfo, max_inputs: int) -> None:
    """Raise InvalidRequest unless `info` is an embedding model and every row fits it."""
    info.require(ModelKind.EMBEDDING)
    count = len(req.inputs)
    check_count(count, max_inputs)
    window, vocab = info.context_window, info.vocab_size
    for index, row in enumerate(req.inputs):
        where = f"input[{index}]" if count > 1 else "input"
        if not row:
            raise InvalidRequest(f"{where} is empty", param="input")
        if len(row) > window:
            raise InvalidRequest(
                f"{where} is {len(row)} tokens; {info.name} takes at most {window}",
                param="input",
            )
        if vocab and (min(row) < 0 or max(row) >= vocab):
            raise InvalidRequest(
                f"{where} holds a token id outside the vocabulary (0..{vocab - 1})",
                param="input",
            )


def check_count(count: int, max_inputs: int) -> None:
    """Raise InvalidRequest unless a request of `count` inputs may be embedded."""
    if count == 0:
        raise InvalidRequest("input must hold at least one item", param="input")
    if count > max_inputs:
        raise InvalidRequest(
            f"input holds {count} items; at most {max_inputs} per request", param="input"
        )
