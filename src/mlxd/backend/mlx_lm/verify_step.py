"""mlx-lm internals for speculative decoding: the verifying decode step and per-row cache
rewinds (speculation/drafts.py decides what to draft; mlx_lm/compat.py holds every other
mlx-lm internal, and its pin test covers this module too).

What we rely on:

- A `BatchGenerator` keeps one `_generation_batch` for its life (new sequences are `extend`ed
  into it), so swapping that object's class swaps its `next()`. Between steps a row's
  `_next_tokens[i]` is sampled but neither emitted nor in the cache, `_next_logprobs[i]` is
  the distribution it was drawn from, `tokens[i]` is what the cache holds, `_matchers`,
  `_num_tokens`, `max_tokens`, `samplers`, `logits_processors`, `_token_context` are per
  row. A `BatchKVCache` (and backend.kv's `BatchQuantizedKVCache`, which keeps its contract)
  rewinds per row with `trim` (all rows) then `prepare(right_padding=)`
  and `finalize()` (rolls each row right into its left padding). `samplers[i]` is None or
  `greedy_sampler` for a greedy row; a sampled row's verifies drafts (DraftVerifier).
  The draft model's batch cache (speculation/draft_model.py) is built with `BatchKVCache.merge`
  of single-row caches, grows with `extend`, shrinks with `filter`, rewinds as the target's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

import mlx.core as mx
from mlx_lm.generate import GenerationBatch
from mlx_lm.models.cache import ArraysCache, BatchKVCache, KVCache, make_prompt_cache
from mlx_lm.sample_utils import greedy_sampler

from mlxd.backend.kv import (
    BatchFullTailKVCache,
    BatchQuantizedKVCache,
    RowFullTailKVCache,
    RowQuantizedKVCache,
)
from mlxd.backend.mlx_lm.compat import BatchedGenerationBatch
from mlxd.backend.mlx_lm.hidden_tap import HiddenTap
from mlxd.backend.mlx_lm.prefill_tap import Primer, enable_priming
from mlxd.backend.mlx_lm.recurrent_rollback import RecurrentRollback, recurrent_mixers
from mlxd.backend.sampling.logits_processing import process_rows

# Single-row caches a batch row of which can be rewound, and those batches.
_ROW_KV = (KVCache, RowQuantizedKVCache, RowFullTailKVCache)
_BATCH_KV = (BatchKVCache, BatchQuantizedKVCache, BatchFullTailKVCache)

if TYPE_CHECKING:
    from mlx.nn.layers.base import Module

    from mlxd.backend.mlx_lm.compat import BatchGen, PromptCache
    from mlxd.backend.sampling.samplers import Sampler


class RowDrafter(Primer, Protocol):
    """What the verifying step (and the prefill, `prime`) asks of speculation.drafts.Drafts."""

    def propose(
        self, uids: list[int], contexts: list[list[int]], last: list[int], room: list[int]
    ) -> list[list[int]]: ...

    def accepted_length(self, targets: list[int], draft: list[int]) -> int: ...

    def record(self, uid: int, drafted: int, accepted: int) -> None: ...

    def started(self, rows: int, width: int, at: float | None = None) -> None: ...

    def parks(self, uids: list[int], room: list[int], contexts: list[list[int]]) -> bool: ...

    def observe(self, uids: list[int], hidden: object, kept: list[int]) -> None: ...

    def idle(self) -> bool: ...


@runtime_checkable
class DraftVerifier(Protocol):
    """A sampled row's sampler that verifies drafts (backend.sampling.SeededSampler)."""

    def verify(self, logprobs: mx.array, draft: list[int]) -> tuple[mx.array, mx.array]: ...


def rows_rewindable(model: Module) -> bool:
    """Every layer of the model's cache is a plain KV cache, full precision or quantized
    (batched: a BatchKVCache or BatchQuantizedKVCache), the kind a row can be rewound in;
    rotating and recurrent caches cannot."""
    return all(type(layer) in _ROW_KV for layer in make_prompt_cache(model))


def target_rewindable(model: Module) -> bool:
    """A row of the model's batch cache can be rewound after a verify: every layer a plain
    KV cache (as rows_rewindable) or a recurrent one RecurrentRollback rolls back."""
    mixers = recurrent_mixers(model)
    return all(
        type(layer) in _ROW_KV or (type(layer) is ArraysCache and index in mixers)
        for index, layer in enumerate(make_prompt_cache(model))
    )


def rewind_rows(cache: PromptCache, rejected: list[int]) -> None:
    """Drop each row's last `rejected[i]` positions from a batch KV cache: the common part is
    trimmed, the rest of each row is shifted right into its left padding, so every row ends
    at the shared write position again. Recurrent layers are skipped: RecurrentRollback
    restores them."""
    common = min(rejected)
    rest = [r - common for r in rejected]
    shift = max(rest) > 0
    for layer in cache:
        if type(layer) is ArraysCache:
            continue
        assert isinstance(layer, _BATCH_KV), "speculation needs plain KV caches"
        if common:
            layer.trim(common)
        if shift:
            layer.prepare(right_padding=rest)
            layer.finalize()


def batch_rows(caches: list[PromptCache]) -> PromptCache:
    """One batch KV cache holding each of `caches` (single-row plain KV caches) as a row,
    left-padded to the longest (`BatchKVCache.merge`, per layer)."""
    layers = zip(*caches, strict=True)
    return [BatchKVCache.merge(list(layer)) for layer in layers]  # type: ignore[no-untyped-call]


def append_rows(cache: PromptCache, rows: PromptCache) -> None:
    """Add the rows of batch cache `rows` after those of `cache`, in place (`extend`)."""
    for layer, more in zip(cache, rows, strict=True):
        assert isinstance(layer, BatchKVCache), "needs a batch KV cache"
        layer.extend(more)  # type: ignore[no-untyped-call]


def keep_rows(cache: PromptCache, indices: list[int]) -> None:
    """Keep only these rows of a batch KV cache, in place (`filter`; `indices` not empty)."""
    for layer in cache:
        assert isinstance(layer, BatchKVCache), "needs a batch KV cache"
        layer.filter(mx.array(indices))  # type: ignore[no-untyped-call]


def enable_speculation(
    gen: BatchGen, drafter: RowDrafter, model: Module, *, hidden: bool = False
) -> None:
    """From now on each decode step of `gen` verifies the drafts `drafter` proposes
    (`model`'s recurrent layers, if any, are rolled back after each verify); `hidden`: each
    step's pre-norm hidden states go to `drafter.observe`, each prefill's to `drafter.prime`
    (an MTP head reads them)."""
    batch = gen._generation_batch
    batch.__class__ = SpeculativeGenerationBatch
    batch._mlxd_drafter = drafter  # type: ignore[attr-defined]
    batch._mlxd_rollback = RecurrentRollback.for_model(model)  # type: ignore[attr-defined]
    tap = HiddenTap.on(model) if hidden else None
    batch._mlxd_tap = tap  # type: ignore[attr-defined]
    if tap is not None:
        enable_priming(gen, drafter, tap)


class SpeculativeGenerationBatch(BatchedGenerationBatch):
    """mlx-lm's GenerationBatch whose `next()` verifies drafts: one forward over each row's
    [next token, drafts..., padding], then per row the accepted drafts are emitted after
    the next token, the target's token after them becomes the row's next token, and the
    rejected positions leave its cache. A step where no row drafts is a plain batched one
    (mlx_lm.compat.BatchedGenerationBatch)."""

    _mlxd_drafter: RowDrafter
    _mlxd_rollback: RecurrentRollback | None
    _mlxd_tap: HiddenTap | None

    def next(self) -> list[GenerationBatch.Response]:
        if not self.uids:
            return []
        if self._mlxd_drafter.idle():  # no row speculates: mlx-lm's step, nothing around it
            return super().next()
        room = [m - n - 1 for m, n in zip(self.max_tokens, self._num_tokens, strict=True)]
        uids, last = list(self.uids), []
        drafts: list[list[int]] = [[] for _ in uids]
        if self._mlxd_drafter.parks(uids, room, self.tokens):  # plain: do not read its tokens
            began = time.perf_counter()
        else:
            mx.eval(self._next_tokens)
            last = cast("list[int]", self._next_tokens.tolist())
            began = time.perf_counter()  # the drafting counts in the step it drafts for
            drafts = self._mlxd_drafter.propose(self.uids, self.tokens, last, room)
        width = max(len(d) for d in drafts)
        self._mlxd_drafter.started(len(self.uids), width, began)
        if width == 0:
            responses, kept = super().next(), [1] * len(uids)
        else:
            responses, kept = self._verify(last, drafts, width)
        tap = self._mlxd_tap
        if tap is not None and tap.last is not None:
            self._mlxd_drafter.observe(uids, tap.last, kept)
        return responses

    def _verify(
        self, last: list[int], drafts: list[list[int]], width: int
    ) -> tuple[list[GenerationBatch.Response], list[int]]:
        """The step's responses, and how many of the forward's positions each row kept."""
        rows = [[t, *d] + [0] * (width - len(d)) for t, d in zip(last, drafts, strict=True)]
        inputs = mx.array(rows, dtype=mx.uint32)
        rollback = self._mlxd_rollback
        saved = rollback.save(self.prompt_cache) if rollback is not None else None
        logits = self._processed(self.model(inputs, cache=self.prompt_cache), inputs)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        judged = self._judge(logprobs, drafts)
        emitted = [[t, *d[:n]] for t, d, (n, _) in zip(last, drafts, judged, strict=True)]
        kept, finish = self._cut(emitted)
        for uid, draft, tokens in zip(self.uids, drafts, kept, strict=True):
            # Drafts after a stop token (or past the budget) were verified, never emitted.
            self._mlxd_drafter.record(uid, len(draft), len(tokens) - 1)
        next_tokens = [token for _, token in judged]
        next_logprobs = [logprobs[i, n] for i, (n, _) in enumerate(judged)]
        rewind_rows(self.prompt_cache, [width + 1 - len(t) for t in kept])
        if rollback is not None and saved is not None:
            rollback.restore(self.prompt_cache, saved, [len(t) for t in kept])
        responses = self._emit(kept, finish, logprobs, next_tokens, next_logprobs)
        return responses, [len(t) for t in kept]

    def _judge(self, logprobs: mx.array, drafts: list[list[int]]) -> list[tuple[int, int]]:
        """Per row: how many drafts it accepts and the token that follows them. A greedy row
        keeps the drafts equal to the target's argmax; a sampled row's sampler verifies them
        with the accept/resample rule (backend.speculative_sampling), or draws its one token
        from position 0 when it has no draft."""
        greedy = mx.argmax(logprobs, axis=-1)
        samplers: list[Sampler | None] = (
            list(self.samplers) if self.samplers else [None] * len(self.uids)
        )
        verdicts: list[tuple[mx.array, mx.array] | None] = []
        for e, (s, draft) in enumerate(zip(samplers, drafts, strict=True)):
            if s is None or s is greedy_sampler:
                verdicts.append(None)
            elif draft and isinstance(s, DraftVerifier):
                verdicts.append(s.verify(logprobs[e, : len(draft) + 1], draft))
            else:
                verdicts.append((mx.array(0), s(logprobs[e : e + 1, 0, :])[0]))
        mx.eval(greedy, [v for v in verdicts if v is not None], self._next_logprobs)
        chosen = cast("list[list[int]]", greedy.tolist())
        judged = []
        for row, draft, verdict in zip(chosen, drafts, verdicts, strict=True):
            if verdict is None:
                n = self._mlxd_drafter.accepted_length(row, draft)
                judged.append((n, row[n]))
            else:
                judged.append((cast(int, verdict[0].item()), cast(int, verdict[1].item())))
        return judged

    def _processed(self, logits: mx.array, inputs: mx.array) -> mx.array:
        """Logits processors see the row's first position only: rows with processors do not
        draft (a stateful processor such as a grammar cannot take back a token)."""
        processors = self.logits_processors or []
        if not any(processors):
            return logits
        first, _ = process_rows(
            logits[:, 0, :], inputs[:, 0], processors, self._token_context, self._mlxd_bias
        )
        return mx.concatenate([first[:, None, :], logits[:, 1:, :]], axis=1)

    def _cut(self, emitted: list[list[int]]) -> tuple[list[list[int]], list[str | None]]:
        """Each row's tokens up to its first finish (a stop token, the budget; counted in
        `_num_tokens`), and that finish."""
        kept: list[list[int]] = []
        finish: list[str | None] = []
        for i, tokens in enumerate(emitted):
            reason = None
            for count, token in enumerate(tokens, 1):
                self._num_tokens[i] += 1
                if self._num_tokens[i] >= self.max_tokens[i]:
                    reason = "length"
                if self._matchers[i].advance(token):
                    reason = "stop"
                if reason is not None:
                    tokens = tokens[:count]
                    break
            kept.append(tokens)
            finish.append(reason)
        return kept, finish

    def _emit(
        self,
        kept: list[list[int]],
        finish: list[str | None],
        logprobs: mx.array,
        next_tokens: list[int],
        next_logprobs: list[mx.array],
    ) -> list[GenerationBatch.Response]:
        """Responses for each row's kept tokens (its cache rewound to them), then drop the
        finished rows (as mlx-lm's next() does)."""
        responses = []
        keep = []
        for i, tokens in enumerate(kept):
            self.tokens[i].extend(tokens)
            lps = [self._next_logprobs[i]] + [logprobs[i, j] for j in range(len(tokens) - 1)]
            for j, (token, lp) in enumerate(zip(tokens, lps, strict=True)):
                done = finish[i] if j == len(tokens) - 1 else None
                responses.append(
                    self.Response(
                        uid=self.uids[i],
                        token=token,
                        logprobs=lp,
                        finish_reason=done,
                        prompt_cache=self.extract_cache(i) if done else None,
                        all_tokens=self.tokens[i] if done else None,
                    )
                )
            if finish[i] is None:
                keep.append(i)
        self._next_tokens = mx.array(next_tokens, dtype=mx.uint32)
        self._next_logprobs = next_logprobs
        if len(keep) < len(self.uids):
            self.filter(keep)
        return responses
