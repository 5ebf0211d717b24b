"""mlx-lm internals mlxd relies on, in one place (mlx-lm is pinned in pyproject.toml).

Nothing else in mlxd reads or writes mlx-lm's private state. What we rely on:

- `BatchGenerator.prefill_batch_size` is read at every `next()`, so setting it sizes the next
  prefill group, and so is `prefill_step_size`, the tokens of each prompt the next chunk
  runs (`PromptProcessingBatch.prompt` gets chunks no longer than that);
  `_unprocessed_sequences` holds the prompts not yet started, in arrival order,
  as tuples whose [0] is the uid and [1] the prompt's token segments; `_prompt_batch` is the
  group being prefilled (length 0 when none); `_generation_batch._num_tokens[i]` is 0 for a
  sequence whose first token the next `next()` returns.
- `BatchGenerator.insert_segments` prefills each segment with chunks that never cross its end
  and ends a segment before the last prompt token; `next()` reports each segment end
  (`end_of_segment`, not `end_of_prompt`) when the cache holds exactly the tokens before it,
  and `extract_cache` then returns that cache and its tokens (mlx-lm's server saves its
  prompt caches this way). `first_segments` reads the segments of `_unprocessed_sequences`.
- `can_trim_prompt_cache(cache)` says whether every layer is trimmable; each layer's `trim(n)`
  returns how many positions it cut (`trim_cache` takes the least).
- `TokenizerWrapper._detokenizer` is the prototype `detokenizer` copies; the BPE one drops
  the first token's leading space in `_maybe_trim_space`: `keep_leading_space` turns that off,
  so that streamed text equals `tokenizer.decode(ids)`; its `_decode_bytes(text)` turns the
  byte-level alphabet back into bytes with `_byte_decoder()` (overridden to decode byte 0).
- A sequence's logits processors are called once per decode step with its tokens so far: the
  first call's last token is the prompt's last token, each later call's last token is the
  one sampled at the previous call (backend/structured/grammar_mask.py feeds it to its grammar).
- `mlx_lm.utils.load` gets its tokenizer from `mlx_lm.tokenizer_utils.AutoTokenizer.
  from_pretrained(path, trust_remote_code=...)`; `load` puts the stand-in of
  tokenizer/lazy_transformers.py in that name, which returns a CheckpointTokenizer during mlxd's
  loads. TokenizerWrapper forwards unknown attributes (and their assignment) to the tokenizer and
  takes a tokenizer class whose `apply_chat_template` is not transformers' for a custom renderer,
  so `load` sets `has_chat_template` for a CheckpointTokenizer as it is for transformers'.

- A `BatchKVCache` that holds one row has no left padding (`filter` shifts the rows left by
  their least padding, `merge` of one cache pads nothing), and `make_mask(N)` is then all
  True for a one-token step, which is what no mask means: `unmask_single_row` swaps the
  class of such a generation batch's caches to one that builds none (as `KVCache` does),
  and back in `extend` when the batch grows. Models call `make_mask(N, return_array=...,
  window_size=...)` through `create_attention_mask`, which returns its result as is.
- `GenerationBatch._step` (run by `next()`, and once by `__init__` for a new batch's first
  tokens) feeds `_next_tokens`, sets `_next_tokens` / `_next_logprobs` (one row each) for
  the next step, appends the fed tokens to `tokens` and returns them with
  `_current_logprobs`; `_token_context[i]` is row i's TokenBuffer; `samplers`,
  `logits_processors` and `fallback_sampler` are per row / the batch's. A BatchGenerator
  keeps one `_generation_batch` for its life, so swapping its class swaps the step of every
  row after its first token (BatchedGenerationBatch; the first comes from mlx-lm's own step,
  which calls each row's sampler and processors alone: they give the same tokens).
- `BatchGenerator.next()` with no prompt waiting (`_unprocessed_sequences`) or being
  prefilled (`_prompt_batch`) does only this, on its `stream`: `_generation_batch.next()`,
  then its `_counters` (`decode_time`, `generation_tokens`, `generation_steps`) and
  `mx.clear_cache()` every 512 generation steps (`next_step` does just that). A
  `GenerationBatch.next()` step counts each row's token in `_num_tokens`, finishes it with
  `length` at `max_tokens` and `stop` when its `_matchers[i].advance(token)` says so (a
  finished row's Response carries `extract_cache(i)` and `tokens[i]`), then `filter`s the
  rows kept (BatchedGenerationBatch.next does the same with less Python per row).
- `models.base.scaled_dot_product_attention` calls the module global
  `quantized_scaled_dot_product_attention` (looked up at each call) for a cache with `bits`:
  backend/kv/attention.py's `install` (run by `quantize_kv`) puts mlxd's attention there.
- Speculation's step and per-row cache rewinds are in backend/mlx_lm/verify_step.py, the
  same door's second room (it documents what it relies on).

The Protocols name what we use of mlx-lm's objects, private members included, so mypy checks
them against the installed mlx-lm; tests/integration/backend/mlx_lm/test_compat.py checks
the behaviour and fails on any mlx-lm other than PINNED.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Sequence, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

import mlx.core as mx
from mlx_lm import tokenizer_utils, utils
from mlx_lm.generate import BatchGenerator, GenerationBatch, StopSequences
from mlx_lm.models.cache import BatchKVCache, can_trim_prompt_cache
from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer, TokenizerWrapper, _byte_decoder

from mlxd.backend.sampling.logits_processing import BatchBias, process_rows
from mlxd.backend.sampling.samplers import sample_rows
from mlxd.backend.tokenizer import lazy_transformers
from mlxd.backend.tokenizer.checkpoint_tokenizer import CheckpointTokenizer
from mlxd.types import FinishReason

if TYPE_CHECKING:
    from mlx.nn.layers.base import Module

    from mlxd.backend.sampling.samplers import Processor, Sampler

PINNED = "0.32.2"  # the mlx-lm these helpers were checked against

# A prompt not yet started, in BatchGenerator._unprocessed_sequences: (uid, token segments, ...)
_Queued = tuple[int, list[list[int]], *tuple[object, ...]]


class CacheLayer(Protocol):
    """One layer of a model's KV cache (mlx-lm's KVCache, RotatingKVCache, ...)."""

    @property
    def nbytes(self) -> int: ...


PromptCache = list[CacheLayer]  # one layer per transformer block


class Generated(Protocol):
    """One new token of one sequence, from `BatchGenerator.next()`."""

    @property
    def uid(self) -> int: ...
    @property
    def token(self) -> int: ...
    @property
    def logprobs(self) -> mx.array: ...
    @property
    def finish_reason(self) -> str | None: ...  # "stop", "length" or None
    @property
    def prompt_cache(self) -> PromptCache | None: ...  # set when finished
    @property
    def all_tokens(self) -> list[int] | None: ...  # set when finished


class Prefilled(Protocol):
    """Prefill progress of one sequence, from `BatchGenerator.next()`."""

    @property
    def uid(self) -> int: ...
    @property
    def end_of_segment(self) -> bool: ...  # the chunk just run ended one of its segments
    @property
    def end_of_prompt(self) -> bool: ...  # its prefill is over (its first token comes next)


class _Decoding(Protocol):
    @property
    def _num_tokens(self) -> list[int]: ...
    def next(self) -> Sequence[Generated]: ...
    @property
    def uids(self) -> list[int]: ...
    @property
    def prompt_cache(self) -> list[object]: ...


class _Counters(Protocol):
    decode_time: float
    generation_tokens: int
    generation_steps: int


class BatchGen(Protocol):
    """What mlxd uses of `BatchGenerator`; the underscored members are private state."""

    prefill_batch_size: int
    prefill_step_size: int

    def insert_segments(
        self,
        segments: list[list[list[int]]],
        max_tokens: list[int] | None = None,
        caches: list[PromptCache] | None = None,
        all_tokens: list[list[int]] | None = None,
        samplers: list[Sampler] | None = None,
        logits_processors: list[list[Processor]] | None = None,
        stop_sequences: list[StopSequences] | None = None,
    ) -> list[int]: ...

    def remove(
        self, uids: list[int], return_prompt_caches: bool = False
    ) -> dict[int, tuple[PromptCache, list[int]]]: ...

    def extract_cache(self, uids: list[int]) -> dict[int, tuple[PromptCache, list[int]]]: ...

    def next(self) -> tuple[list[Prefilled], list[Generated]]: ...

    def close(self) -> None: ...

    @property
    def _prompt_batch(self) -> Sized: ...
    @property
    def _unprocessed_sequences(self) -> Collection[_Queued]: ...
    @property
    def _generation_batch(self) -> _Decoding: ...
    @property
    def _counters(self) -> _Counters: ...
    @property
    def stream(self) -> mx.Stream: ...


def new_batch_generator(
    model: Module, *, completion_batch_size: int, prefill_batch_size: int, prefill_step_size: int
) -> BatchGen:
    """A BatchGenerator whose decode steps are BatchedGenerationBatch's."""
    gen: BatchGen = BatchGenerator(
        model,
        completion_batch_size=completion_batch_size,
        prefill_batch_size=prefill_batch_size,
        prefill_step_size=prefill_step_size,
    )
    batch = gen._generation_batch
    batch.__class__ = BatchedGenerationBatch
    batch._mlxd_bias = BatchBias()  # type: ignore[attr-defined]
    return gen


class BatchedGenerationBatch(GenerationBatch):
    """mlx-lm's GenerationBatch whose step processes and samples the whole batch at once:
    every row's logit_bias in one op, every row's draw in one expression (greedy and seeded
    rows alike; backend.logits_processing, backend.sampling), other processors and filters
    on their own rows only. The rest is mlx-lm's step."""

    _mlxd_bias: BatchBias
    _next_tokens: mx.array

    def _step(self) -> tuple[list[int], list[mx.array]]:
        inputs = self._current_tokens = self._next_tokens  # type: ignore[assignment]
        self._current_logprobs = self._next_logprobs
        logits = self.model(inputs[:, None], cache=self.prompt_cache)[:, -1, :]
        logits, contexts = process_rows(
            logits, inputs, self.logits_processors or [], self._token_context, self._mlxd_bias
        )
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        samplers = self.samplers or [self.fallback_sampler] * len(self.uids)
        self._next_tokens = sample_rows(logprobs, samplers)
        # One op for all rows (mlx-lm slices each), computed only where read (logprobs asked).
        flat = logprobs.reshape(-1)
        rows = len(self.uids)
        self._next_logprobs = [flat] if rows == 1 else cast("list[mx.array]", mx.split(flat, rows))
        mx.async_eval(self._next_tokens, contexts)  # type: ignore[no-untyped-call]
        mx.eval(inputs)
        fed = cast("list[int]", inputs.tolist())
        for tokens, token in zip(self.tokens, fed, strict=True):
            tokens.append(token)
        return fed, self._current_logprobs

    def next(self) -> list[GenerationBatch.Response]:
        """mlx-lm's `next()` (one step; count, `length` / `stop`, drop the finished rows),
        with less Python per row: at one row on a 0.25M-parameter model each microsecond of
        it is about 0.15% of a step."""
        uids = self.uids
        if not uids:
            return []
        tokens, logprobs = self._step()
        response, counts, limits = self.Response, self._num_tokens, self.max_tokens
        matchers = self._matchers
        responses = []
        ended = False
        for i, token in enumerate(tokens):
            count = counts[i] = counts[i] + 1
            reason = "length" if count >= limits[i] else None
            if matchers[i].advance(token):
                reason = "stop"
            if reason is None:
                responses.append(response(uids[i], token, logprobs[i], None, None, None))
            else:
                cache, all_tokens = self.extract_cache(i), self.tokens[i]
                responses.append(response(uids[i], token, logprobs[i], reason, cache, all_tokens))
                ended = True
        if ended:
            self.filter([i for i, r in enumerate(responses) if r.finish_reason is None])
        return responses


def next_step(gen: BatchGen) -> tuple[list[Prefilled], list[Generated]]:
    """`gen.next()`. With no prompt waiting or being prefilled, only what `next()` then does
    (the decode step on its stream, its counters, an MLX cache clear every 512 steps),
    without its prefill bookkeeping: the same tokens, less Python per step."""
    if len(gen._prompt_batch) or gen._unprocessed_sequences:
        return gen.next()
    batch, counters = gen._generation_batch, gen._counters
    if not batch.uids:
        return [], []
    with mx.stream(gen.stream):
        tic = time.perf_counter()
        responses = batch.next()
        counters.decode_time += time.perf_counter() - tic
        counters.generation_tokens += len(responses)
        counters.generation_steps += 1
        if counters.generation_steps % 512 == 0:
            mx.clear_cache()
    return [], cast("list[Generated]", responses)


# The one map from mlx-lm's finish strings to mlxd's reasons (BatchGenerator and our verify
# step both report "stop" or "length").
_FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH}


def finish_reason(token: Generated) -> FinishReason | None:
    """Why this token ended its sequence, or None if it did not."""
    reason = token.finish_reason
    return None if reason is None else _FINISH[reason]


def prefilling(gen: BatchGen) -> bool:
    """A group of prompts is being prefilled (it keeps its members until done)."""
    return len(gen._prompt_batch) > 0


def prompts_waiting(gen: BatchGen) -> bool:
    """Some prompt has not started its prefill."""
    return len(gen._unprocessed_sequences) > 0


def waiting_prompts(gen: BatchGen) -> Iterator[tuple[int, int]]:
    """(uid, prompt length) of each prompt whose prefill has not started, in arrival order."""
    for seq in gen._unprocessed_sequences:
        yield seq[0], sum(len(segment) for segment in seq[1])


def segment_ended(progress: Prefilled) -> bool:
    """The sequence's cache now ends where one of its inserted segments ends (not at the end
    of its prompt: the prefill of a segment of one last token is reported as that)."""
    return progress.end_of_segment and not progress.end_of_prompt


def first_segments(gen: BatchGen, prompts: int) -> Iterator[tuple[int, int]]:
    """(uid, length of its first segment) of the first `prompts` waiting prompts."""
    for seq, _ in zip(gen._unprocessed_sequences, range(prompts), strict=False):
        yield seq[0], len(seq[1][0])


def first_token_due(gen: BatchGen) -> bool:
    """A sequence that finished its prefill gets its first token from the next `next()`."""
    return 0 in gen._generation_batch._num_tokens


class _SingleRowKVCache(BatchKVCache):
    """A one-row BatchKVCache (no left padding): a one-token step attends to every cached
    position, so it builds no mask, like mlx-lm's single-sequence `KVCache` (the same values
    bit for bit; the mask's ops cost ~15% of a step on a 0.25M-parameter model)."""

    def make_mask(self, N: int, return_array: bool = False, **kwargs: object) -> mx.array | None:
        if N == 1 and kwargs.get("window_size") is None:
            return None
        mask: mx.array = super().make_mask(N, return_array=return_array, **kwargs)
        return mask

    def extend(self, other: BatchKVCache) -> None:
        layer: BatchKVCache = self
        layer.__class__ = BatchKVCache  # more rows: masks again
        layer.extend(other)  # type: ignore[no-untyped-call]


def unmask_single_row(gen: BatchGen) -> None:
    """Before a step: a generation batch of one row whose caches are all plain BatchKVCache
    steps without the attention mask (see _SingleRowKVCache). Costs a length and a type test
    otherwise."""
    batch = gen._generation_batch
    if len(batch.uids) != 1:
        return
    cache = batch.prompt_cache
    if not cache or type(cache[0]) is not BatchKVCache:
        return  # swapped already, or another kind of cache
    if all(type(layer) is BatchKVCache for layer in cache):
        for layer in cache:
            layer.__class__ = _SingleRowKVCache


def limit_next_prefill(gen: BatchGen, prompts: int) -> None:
    """At most `prompts` waiting prompts start prefilling at the next `next()` (0: none)."""
    gen.prefill_batch_size = prompts


def set_prefill_chunk(gen: BatchGen, tokens: int) -> None:
    """The next `next()` prefills at most `tokens` of each prompt (`prefill_step_size`, read
    at every step to cut the next chunk of each prompt's first segment)."""
    gen.prefill_step_size = tokens


def prefill_group_size(gen: BatchGen) -> int:
    """Prompts being prefilled side by side (0: none)."""
    return len(gen._prompt_batch)


def decoding_rows(gen: BatchGen) -> int:
    """Sequences past their prefill: the rows the next step decodes."""
    return len(gen._generation_batch.uids)


def prefill_limit(gen: BatchGen) -> int:
    """What `limit_next_prefill` last set (another rank's runner copies it to stay in step)."""
    limit: int = gen.prefill_batch_size
    return limit


def trim_cache(cache: PromptCache, tokens: int) -> int:
    """Trim `tokens` from the end of a trimmable cache, in place; returns how many went from
    every layer (the least: a layer may refuse, backend.kv's full-precision tail does)."""
    if not cache or not can_trim_prompt_cache(cache):
        return 0
    trimmed = [layer.trim(tokens) for layer in cache]  # type: ignore[attr-defined]
    return min(n if isinstance(n, int) else 0 for n in trimmed)


def load(
    path: Path, *, trust_remote_code: bool, lazy: bool = False
) -> tuple[Module, TokenizerWrapper]:
    """`mlx_lm.utils.load` of a local checkpoint, its tokenizer following `tokenizer_route`."""
    model, config = utils.load_model(path, lazy=lazy, trust_remote_code=trust_remote_code)
    eos = config.get("eos_token_id")
    return model, load_tokenizer(path, eos, trust_remote_code=trust_remote_code)


def load_tokenizer(
    path: Path, eos_token_ids: int | list[int] | None = None, *, trust_remote_code: bool = False
) -> TokenizerWrapper:
    """`mlx_lm.utils.load_tokenizer`, with a CheckpointTokenizer where the route allows."""
    tokenizer_utils.AutoTokenizer = lazy_transformers.AutoTokenizer  # type: ignore[attr-defined,assignment]
    load: Callable[..., TokenizerWrapper] = utils.load_tokenizer
    with lazy_transformers.checkpoint_tokenizers():
        tokenizer = load(
            path, {"trust_remote_code": trust_remote_code}, eos_token_ids=eos_token_ids
        )
    inner = tokenizer._tokenizer
    if isinstance(inner, CheckpointTokenizer):
        tokenizer.has_chat_template = (
            inner.chat_template is not None or tokenizer._chat_template is not None
        )
    keep_leading_space(tokenizer)
    return tokenizer


class _ExactBPEDetokenizer(BPEStreamingDetokenizer):
    """mlx-lm's BPE streaming detokenizer without the first token's space trim, and with the
    byte 0x00 decoded: mlx-lm tests the byte map's value for truth, so the character of byte
    0 ("\u0100") came out as itself instead of "\x00"."""

    def _maybe_trim_space(self, current_text: str) -> str:
        return current_text

    def _decode_bytes(self, seq: str) -> str:
        byte_of = _byte_decoder()
        out = bytearray()
        for char in seq:
            byte = byte_of.get(char)
            if byte is None:  # an added token's text (no byte mapping): its own UTF-8
                out.extend(char.encode("utf-8"))
            else:
                out.append(byte)
        return out.decode("utf-8", "replace")


def keep_leading_space(tokenizer: TokenizerWrapper) -> None:
    """Streamed text keeps a leading space of the first token (as `decode` does): the model's
    exact text, which a client sending an answer back re-tokenizes to the same ids."""
    detokenizer = tokenizer._detokenizer
    if type(detokenizer) is BPEStreamingDetokenizer:
        detokenizer.__class__ = _ExactBPEDetokenizer  # same state, one method less
