"""The backend's contract with the engine: the `Backend` and `Runner` Protocols, what they take
(`BackendConfig`, `NewSequence`) and what they give back (`LoadedModel`, `StepResult`, stats).

Plain values and Protocols only: importing this module loads neither mlx nor a native library
(the MLX backend loads those when it is built: backend.factory).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mlxd.checkpoint import EmbeddingSpec
from mlxd.types import (
    FinishReason,
    ImageInputs,
    PromptBoundaries,
    ReasoningMarkers,
    SamplingParams,
    TokenLogprob,
)

if TYPE_CHECKING:
    from mlx.nn.layers.base import Module
    from mlx_lm.tokenizer_utils import TokenizerWrapper

    from mlxd.backend.structured.grammar import CompiledGrammar as CompiledGrammar
    from mlxd.backend.vision import VisionParts

# Test hook: called as hook(site, request_id). Site "sample" runs inside one request's sampler
# (an exception fails that request only); site "step" runs once per engine step on the engine
# thread (an exception there is a fatal engine fault). Production code leaves it None.
FaultHook = Callable[[str, str | None], None]


@dataclass(frozen=True, slots=True)
class BackendConfig:
    """What the MLX backend and its runners are built with (EngineConfig.backend derives it
    from the engine's settings of the same names). The defaults are the neutral values: one
    prompt per prefill group, no planner, no prefix cache."""

    max_batch: int
    prefill_chunk: int
    prefill_batch: int = 1
    prefill_group_tokens: int = 0  # 0: no prefill planner
    prefix_cache_bytes: int = 0
    kv_bits: int = 0  # attention KV quantized to these bits (backend/kv); 0: full precision
    kv_group_size: int = 64
    kv_key_bits: int = 0  # quantized KV: the keys' own bits (16: 16-bit levels); 0: as kv_bits
    kv_quant_start: int = 0  # quantized KV: recent positions also kept in full precision
    prefix_cache_dir: str = ""  # "": no disk tier
    prefix_cache_disk_bytes: int = 0
    trust_remote_code: bool = False
    fault_hook: FaultHook | None = None


class ShardMode(StrEnum):
    """How a distributed job splits a model across its ranks."""

    TENSOR = "tensor"  # model.shard(group): every rank holds a slice of every layer
    PIPELINE = "pipeline"  # model.model.pipeline(group): every rank holds some layers
    AUTO = "auto"  # tensor where the architecture implements it, else pipeline


@dataclass(frozen=True, slots=True)
class ClusterRole:
    """The part this process plays in an `mlx.launch` job of more than one rank."""

    rank: int
    size: int
    mode: ShardMode

    @property
    def leader(self) -> bool:
        return self.rank == 0


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A model ready to run: the mlx module, its TokenizerWrapper and what we read about it.
    What `Backend.load` returns; the engine builds its ModelInfo from it. A vision checkpoint
    has `vision` (mlx-vlm's model and processor); `model` is then its language model."""

    path: Path
    model: Module
    tokenizer: TokenizerWrapper
    config: dict[str, Any]
    context_window: int
    vocab_size: int
    generation_defaults: dict[str, Any] = field(default_factory=dict)
    eos_token_ids: set[int] = field(default_factory=set)
    vision: VisionParts | None = None
    draft: LoadedModel | None = None  # the draft model speculation (kind `model`) runs
    mtp: Module | None = None  # the checkpoint's MTP head (kind `mtp`: speculation.mtp_head)
    mtp_problem: str = ""  # without a head: why (no tensors, shapes that do not fit)
    dflash: Module | None = None  # a DFlash drafter (kind `dflash`: speculation.dflash_load)
    embedder: Embedder | None = None  # an embedding model's forward pass (no runner then)
    weight_bytes: int = 0  # the parameters' bytes as loaded (the draft's not included)
    kv: KvFootprint = field(default_factory=lambda: KvFootprint())  # what its sequences hold
    draft_kv: KvFootprint = field(default_factory=lambda: KvFootprint())  # draft/dflash's, a row
    mtp_kv: KvFootprint = field(default_factory=lambda: KvFootprint())  # its MTP head's, a row
    kv_headroom: int | None = None  # bytes the process could still use once it loaded
    # Its cache layers the batch cannot merge (backend.mlx_lm.one_row): served one at a time.
    unbatchable: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class KvFootprint:
    """The KV bytes one sequence of a model holds (backend.kv.footprint measures them):
    `per_token` for each position of its full-attention layers, `(window, per_token)` of each
    sliding-window group (bounded by its window), and `fixed` recurrent state."""

    per_token: int = 0
    windows: tuple[tuple[int, int], ...] = ()
    fixed: int = 0

    def bytes_for(self, tokens: int) -> int:
        """Bytes of a sequence holding `tokens` positions."""
        windowed = sum(min(tokens, window) * per for window, per in self.windows)
        return self.per_token * tokens + windowed + self.fixed

    @property
    def bytes_per_token(self) -> int:
        """Bytes each position adds while it is inside every window (short contexts)."""
        return self.per_token + sum(per for _, per in self.windows)

    def plus(self, other: KvFootprint) -> KvFootprint:
        """What a sequence holding both (a target's row and its drafter's) holds."""
        windows = dict(self.windows)
        for window, per in other.windows:
            windows[window] = windows.get(window, 0) + per
        per_token, fixed = self.per_token + other.per_token, self.fixed + other.fixed
        return KvFootprint(per_token, tuple(sorted(windows.items())), fixed)


class Embedder(Protocol):
    """An embedding model's batched forward pass (backend.embedding.MlxEmbedder)."""

    @property
    def dimensions(self) -> int: ...  # the length of each vector

    @property
    def spec(self) -> EmbeddingSpec: ...  # its pooling and normalizing

    def embed(self, rows: list[list[int]]) -> list[list[float]]: ...  # one vector per row


@dataclass(frozen=True, slots=True)
class NewSequence:
    """One sequence for `Runner.insert`. `max_tokens` is its budget of generated tokens;
    `grammar` (compiled before submit) masks its logits; `boundaries` are where the chat
    layer's prompt parts end (prefix-cache snapshot points); `images` are merged into the
    prompt's embeddings at prefill; `reasoning` are the markers params.max_reasoning_tokens
    counts and forces."""

    prompt_ids: list[int]
    params: SamplingParams
    max_tokens: int
    request_id: str
    grammar: CompiledGrammar | None = None
    boundaries: PromptBoundaries = PromptBoundaries()
    images: ImageInputs | None = None
    reasoning: ReasoningMarkers | None = None


@dataclass(slots=True)
class StepOutput:
    """One generated token of one sequence; `finish` is STOP, LENGTH or None."""

    uid: int
    token: int
    finish: FinishReason | None
    logprob: TokenLogprob | None


@dataclass(frozen=True, slots=True)
class DraftCount:
    """One sequence's speculation in one step: draft tokens verified, and how many of them
    the target accepted."""

    drafted: int
    accepted: int


@dataclass(slots=True)
class StepResult:
    """The step's tokens, and the sequences whose sampler or logits processor raised during
    it (uid -> the first exception): the engine fails those and ignores their tokens.
    `drafts` holds the rows that verified drafts in the step (uid -> counts); `parked`: the
    step's rows offered drafts and the drafting policy verified none (it loses there)."""

    tokens: list[StepOutput]
    failed: dict[int, BaseException] = field(default_factory=dict)
    drafts: dict[int, DraftCount] = field(default_factory=dict)
    parked: int = 0


@dataclass(frozen=True, slots=True)
class PrefixCacheStats:
    """The prefix cache now (bytes, entries) and since start (the counters)."""

    bytes: int = 0  # what it holds, as its budget counts it
    entries: int = 0
    stored: int = 0  # snapshots stored
    evictions: int = 0  # entries dropped to stay within the byte budget
    pruned: int = 0  # entries made redundant by a newer one (same conversation, or trimmable)
    files_rejected: int = 0  # disk tier files deleted because they did not check
    kv_bytes: int = 0  # of `bytes`, the KV arrays alone (the rest: its index and objects)


@dataclass(frozen=True, slots=True)
class RankStatus:
    """One rank of a distributed job as rank 0 sees it. `up` is None where nothing watches
    it (no heartbeat under that launcher); `heartbeat_age` is seconds since its last beat."""

    rank: int
    up: bool | None
    heartbeat_age: float | None = None


@dataclass(frozen=True, slots=True)
class ClusterStats:
    """A distributed job (backend.distributed): its ranks, its split, and rank 0's lockstep
    broadcasts (count, and seconds in their collectives after rank 0's queued work is done)."""

    size: int
    layout: str  # "tensor" or "pipeline"
    ranks: tuple[RankStatus, ...]
    broadcasts: int = 0
    broadcast_seconds: float = 0.0


class Runner(Protocol):
    """One model's continuous batch (backend.batch.BatchRunner, or a fake in unit tests)."""

    @property
    def one_at_a_time(self) -> bool: ...  # its cache cannot be batched: one sequence at once

    def insert(self, seq: NewSequence) -> tuple[int, int]: ...  # (uid, prefix-cached tokens)

    def remove(self, uids: list[int], *, keep_cache: bool = True) -> None: ...

    def awaits_snapshot(self, prompt_ids: list[int]) -> bool: ...  # start it later: a hit

    def step(self) -> StepResult: ...

    @property
    def prefill_pending(self) -> bool: ...  # the next step may prefill (a long step)

    def close(self) -> None: ...


class Backend(Protocol):
    """Loads models and makes runners; the only door to MLX."""

    def load(self, path: Path, draft: Path | None = None) -> LoadedModel: ...  # draft attached

    def make_runner(self, name: str, model: LoadedModel) -> Runner: ...

    def cache_stats(self) -> PrefixCacheStats: ...

    def blas(self) -> str: ...  # which BLAS the CPU matmuls use ("mkl", "reference", ...)

    def cluster(self) -> ClusterStats | None: ...  # the ranks of a distributed job, or None

    def unload(self, name: str) -> None: ...  # free what a dropped model held (prefix cache)

    def shutdown(self) -> None: ...  # called last, on the engine thread


class ClusterLeader(Protocol):
    """Rank 0 of a distributed job, as the front door that serves it sees it."""

    @property
    def backend(self) -> Backend: ...  # what rank 0's engine runs on

    def watch_ranks(self, on_fault: Callable[[str], None], stall_seconds: float) -> None: ...

    def describe(self) -> str: ...  # e.g. "2 ranks, tensor"

    @property
    def fault(self) -> str | None: ...  # why the job can no longer step, or None
