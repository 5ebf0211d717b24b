"""A fake Backend for pure-Python engine tests: no mlx. Sequence `uid` emits tokens
prompt[-1] + 1, + 2, ... after prefilling its prompt in chunks, like BatchRunner. A prompt
starting with 666 fails its insert; one starting with 777 has its sampler fail at its third
token (reported in that step's result, like BatchRunner's guarded samplers). Prompts starting
with 555 share a prefix: one waits while another is being prefilled (awaits_snapshot)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mlxd.backend.api import (
    ClusterStats,
    LoadedModel,
    NewSequence,
    PrefixCacheStats,
    StepOutput,
    StepResult,
)
from mlxd.types import FinishReason

VOCAB = 1000


def fake_model(path: Path, context_window: int = 64) -> LoadedModel:
    """A LoadedModel with no weights and no tokenizer (the fake runner needs neither)."""
    return LoadedModel(Path(path), None, None, {}, context_window, VOCAB)  # type: ignore[arg-type]


@dataclass
class FakeSeq:
    uid: int
    prompt: list[int]
    max_tokens: int
    stops: set[int]
    prefilled: int = 0
    generated: int = 0


@dataclass
class FakeRunner:
    model: str
    chunk: int = 4
    seqs: dict[int, FakeSeq] = field(default_factory=dict)
    next_uid: int = 0
    fail_at_step: int | None = None  # raise on this step (1-based)
    steps: int = 0
    inserted: list[tuple[int, int]] = field(default_factory=list)  # (prompt[0], step)
    closed: bool = False
    one_at_a_time: bool = False

    def insert(self, seq: NewSequence) -> tuple[int, int]:
        prompt = seq.prompt_ids
        if prompt[0] == 666:
            raise ValueError("fake insert failure")
        uid, self.next_uid = self.next_uid, self.next_uid + 1
        self.seqs[uid] = FakeSeq(uid, list(prompt), seq.max_tokens, set(seq.params.stop_token_ids))
        self.inserted.append((prompt[0], self.steps))
        return uid, 0

    def remove(self, uids: list[int], *, keep_cache: bool = True) -> None:
        for uid in uids:
            self.seqs.pop(uid, None)

    def awaits_snapshot(self, prompt_ids: list[int]) -> bool:
        return prompt_ids[0] == 555 and any(
            s.prompt[0] == 555 and s.prefilled < len(s.prompt) for s in self.seqs.values()
        )

    @property
    def prefill_pending(self) -> bool:
        return any(seq.prefilled < len(seq.prompt) for seq in self.seqs.values())

    def step(self) -> StepResult:
        self.steps += 1
        if self.steps == self.fail_at_step:
            raise RuntimeError("fake step failure")
        tokens = []
        failed: dict[int, BaseException] = {}
        for seq in list(self.seqs.values()):
            if seq.prefilled < len(seq.prompt):
                seq.prefilled = min(len(seq.prompt), seq.prefilled + self.chunk)
                continue
            seq.generated += 1
            if seq.prompt[0] == 777 and seq.generated == 3:
                failed[seq.uid] = ValueError("fake sampler failure")
            token = (seq.prompt[-1] + seq.generated) % VOCAB
            finish: FinishReason | None = None
            if token in seq.stops:
                finish = FinishReason.STOP
            elif seq.generated >= seq.max_tokens:
                finish = FinishReason.LENGTH
            if finish:
                del self.seqs[seq.uid]
            tokens.append(StepOutput(seq.uid, token, finish, None))
        return StepResult(tokens, failed)

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeBackend:
    context_window: int = 64
    runners: list[FakeRunner] = field(default_factory=list)
    fail_first_runner_at: int | None = None
    shut_down: bool = False

    def load(self, path: Path) -> LoadedModel:
        return fake_model(path, self.context_window)

    def make_runner(self, name: str, model: LoadedModel) -> FakeRunner:
        runner = FakeRunner(name)
        if not self.runners:
            runner.fail_at_step = self.fail_first_runner_at
        self.runners.append(runner)
        return runner

    def cache_stats(self) -> PrefixCacheStats:
        return PrefixCacheStats()

    def blas(self) -> str:
        return "none"

    def cluster(self) -> ClusterStats | None:
        return None

    def unload(self, name: str) -> None:
        pass

    def shutdown(self) -> None:
        self.shut_down = True
