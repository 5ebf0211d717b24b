"""Scheduler: which waiting requests join the running batch, and when to swap models.

Policy: first come first served. The head of the queue is admitted when a batch slot is free
and its worst-case KV (prompt + max new tokens) fits the token budget and, in bytes (at its
model's bytes per token), its byte budget next to the running requests; a request bigger
than the whole token budget runs only alone, so it can never starve (one bigger than the
byte budget is refused at submit: engine.Engine).
A request for another model blocks the queue until the running batch drains, then the
engine swaps models. Pure Python: no mlx, engine thread only.
"""

from __future__ import annotations

from collections import deque

from mlxd.engine.request import Request, RequestStatus


class Scheduler:
    def __init__(self, max_batch: int, kv_budget_tokens: int) -> None:
        self.max_batch = max_batch
        self.kv_budget_tokens = kv_budget_tokens
        self.waiting: deque[Request] = deque()
        self.running: dict[int, Request] = {}  # backend uid -> request
        self.kv_in_use = 0
        self.kv_bytes_in_use = 0
        self.kv_budget_bytes: int | None = None  # the last admitted request's byte budget

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def admissible(self, model: str | None, rows: int | None = None) -> list[Request]:
        """Pop and return the waiting requests that may start now on `model`, whose batch
        holds at most `rows` sequences (None: max_batch)."""
        admitted: list[Request] = []
        limit = self.max_batch if rows is None else min(rows, self.max_batch)
        while self.waiting and len(self.running) + len(admitted) < limit:
            head = self.waiting[0]
            if head.model != model:
                break
            in_flight = self.kv_in_use + sum(r.kv_tokens for r in admitted)
            alone = not self.running and not admitted
            if not alone and in_flight + head.kv_tokens > self.kv_budget_tokens:
                break
            if not alone and not self._fits_bytes(head, admitted):
                break
            admitted.append(self.waiting.popleft())
        return admitted

    def _fits_bytes(self, head: Request, admitted: list[Request]) -> bool:
        if head.kv_budget is None:
            return True
        in_flight = self.kv_bytes_in_use + sum(r.kv_bytes for r in admitted)
        return in_flight + head.kv_bytes <= head.kv_budget

    def put_back(self, requests: list[Request]) -> None:
        """Return popped, still waiting requests to the head of the queue, in order."""
        self.waiting.extendleft(reversed(requests))

    def model_to_swap_in(self, current: str | None) -> str | None:
        """The model the queue needs next, once nothing runs on the current one."""
        if self.running or not self.waiting:
            return None
        head = self.waiting[0].model
        return head if head != current else None

    def models_in_use(self) -> set[str]:
        """Models with requests waiting or running."""
        busy = {r.model for r in self.waiting}
        busy.update(r.model for r in self.running.values())
        return busy

    def start(self, request: Request, uid: int) -> None:
        request.uid = uid
        request.status = RequestStatus.PREFILLING
        self.running[uid] = request
        self.kv_in_use += request.kv_tokens
        self.kv_bytes_in_use += request.kv_bytes
        self.kv_budget_bytes = request.kv_budget

    def remove(self, request: Request) -> None:
        """Forget a request in any state (finished, cancelled or failed)."""
        if request.uid is not None and self.running.pop(request.uid, None) is request:
            self.kv_in_use -= request.kv_tokens
            self.kv_bytes_in_use -= request.kv_bytes
        elif request.status is RequestStatus.WAITING:
            try:
                self.waiting.remove(request)
            except ValueError:
                pass
        request.status = RequestStatus.FINISHED
