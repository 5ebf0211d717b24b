"""One model's continuous batch: mlx-lm's `BatchGenerator` plus the prefix cache.

BatchGenerator already interleaves chunked prefill with decode (each `next()` decodes one token
for the running batch, then prefills one chunk), keeps per-sequence samplers, logits processors,
stop tokens and max_tokens, and frees a sequence with `remove(uids)`. This class only adapts it
to the engine: token ids in, `StepOutput`s out, caches to and from the prefix cache.

A prompt is inserted in segments that end at its snapshot points (end of the system prompt,
start of the last message, where the next turn departs, all but the last token): a prefill
chunk never crosses a segment end, and BatchGenerator reports each one, so the cache is copied
there into the prefix cache (mlx-lm's server does the same for its system and user segments).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.generate import StopSequences
from mlx_lm.models.cache import make_prompt_cache

from mlxd.backend import vision
from mlxd.backend.api import BackendConfig, LoadedModel, NewSequence, StepOutput, StepResult
from mlxd.backend.mlx_lm import compat
from mlxd.backend.mlx_lm import verify_step as spec_compat
from mlxd.backend.prefill_plan import PrefillPlanner
from mlxd.backend.prefix.cache import (
    MIN_REUSE_TOKENS,
    PrefixCache,
    SnapshotKind,
    Turn,
    trimmable_at,
)
from mlxd.backend.sampling.samplers import (
    GREEDY,
    Processor,
    Sampler,
    guard_processor,
    guard_sampler,
    make_processors,
    make_sampler,
    token_logprob,
)
from mlxd.backend.speculation.draft_model import DraftModel
from mlxd.backend.speculation.draft_policy import draft_policy_every
from mlxd.backend.speculation.drafts import Drafts
from mlxd.backend.structured.grammar_mask import GrammarMask
from mlxd.types import DraftKind, ImageInputs, PromptBoundaries, SamplingParams


class BatchRunner:
    """Runs sequences of one loaded model; every method must be called on the engine thread."""

    def __init__(
        self, loaded: LoadedModel, model_key: str, prefix_cache: PrefixCache, config: BackendConfig
    ) -> None:
        self.loaded = loaded
        self.model_key = model_key
        self.prefix_cache = prefix_cache
        self.fault_hook = config.fault_hook
        self.vocab_size = loaded.vocab_size
        self.max_prefill_batch = max(1, min(config.prefill_batch, config.max_batch))
        self.prefill_chunk = config.prefill_chunk
        self._planner = (
            PrefillPlanner(self.max_prefill_batch, config.prefill_group_tokens, self.prefill_chunk)
            if config.prefill_group_tokens
            else None
        )
        self._gen = compat.new_batch_generator(
            loaded.model,
            completion_batch_size=config.max_batch,
            prefill_batch_size=self.max_prefill_batch,
            prefill_step_size=self.prefill_chunk,
        )
        self._top_n: dict[int, int] = {}  # uid -> top_logprobs, only for logprobs requests
        self._failed: dict[int, BaseException] = {}  # uid -> first sampler/processor error
        self._snapshots: dict[int, _SnapshotPlan] = {}  # uid -> where its cache is copied
        # A plain attention cache can always be cut back to any prefix of what it holds: the
        # answer's snapshot serves every shorter prompt, so it needs no mid-prompt ones.
        self._always_trimmable = trimmable_at(make_prompt_cache(loaded.model), 1 << 62)
        self._drafts: Drafts | None = None  # set by the first speculating sequence
        # Every speculating row verifies its whole draft (MLXD_DRAFT_POLICY=every, or ranks in
        # lockstep, whose drafts may not follow one rank's timings).
        self._every_draft = draft_policy_every()
        self._rewindable = spec_compat.rows_rewindable(loaded.model)  # can speculate
        self._planned: int | None = None  # plan_step's padded prefill tokens (see _plan_prefill)
        # The group being timed from its first prefill step to its first tokens (planner's G):
        # (perf_counter at the start of that step, its padded prompt tokens in all).
        self._group: tuple[float, int] | None = None
        self._group_tokens = 0  # padded tokens of the group plan_step started, 0: none
        self._group_due = False  # the next step returns the timed group's first tokens

    def insert(self, seq: NewSequence) -> tuple[int, int]:
        """Queue one sequence; returns (uid, cached prompt tokens reused from the prefix cache).
        A `grammar` masks its logits last. A sampler or logits processor that raises is
        reported in the next StepResult. An image prompt is prefilled here, its images'
        features in the embeddings (backend.vision), and joins the batch for its last token;
        the prefix cache sees it under vision.cache_key."""
        prompt_ids, params, images = seq.prompt_ids, seq.params, seq.images
        key = prompt_ids if images is None else vision.cache_key(prompt_ids, images)
        reuse = self.prefix_cache.fetch(self.model_key, key, seq.boundaries.next_turn)
        cached = start = reuse.tokens
        cache = reuse.cache
        if images is not None and vision.needs_image_prefill(prompt_ids, images, cached):
            cache = self._prefill_images(prompt_ids, images, cache, cached)
            start = len(prompt_ids) - 1
        plan = self._plan(prompt_ids, key, seq.boundaries, reuse.turn, start)
        report = _FailureReport(self._failed)
        sampler = make_sampler(params, self.vocab_size)
        if sampler is not GREEDY or self.fault_hook is not None:
            sampler = guard_sampler(sampler, report, self.fault_hook, seq.request_id)
        procs = [guard_processor(p, report) for p in make_processors(params)]
        if seq.grammar is not None:
            procs.append(guard_processor(GrammarMask(seq.grammar), report))
        stops = set(params.stop_token_ids)
        if not params.ignore_eos:
            stops |= self.loaded.eos_token_ids
        (uid,) = self._gen.insert_segments(
            [plan.segments(start)],
            max_tokens=[seq.max_tokens],
            caches=[cache] if cache is not None else None,
            all_tokens=[prompt_ids[:start]],
            samplers=[sampler],
            logits_processors=[procs],
            stop_sequences=[StopSequences([[t] for t in sorted(stops)] or None)],
        )
        report.uid = uid  # set before any step can call the sampler
        if self._speculates(params, sampler, procs):
            assert params.draft_kind is not None  # _speculates checked it
            fixed = self._every_draft or (sampler is not GREEDY and params.seed is not None)
            self._speculation().add(uid, params.draft_kind, params.num_draft_tokens or 0, fixed)
        if params.logprobs:
            self._top_n[uid] = params.top_logprobs
        if self.prefix_cache.enabled:
            self._snapshots[uid] = plan
        return uid, cached

    def _plan(
        self,
        prompt: list[int],
        key: list[int],
        boundaries: PromptBoundaries,
        turn: Turn,
        cached: int,
    ) -> _SnapshotPlan:
        """Where this prompt's cache is copied. BatchGenerator always ends a segment before
        the last prompt token; the other ends are the chat layer's boundaries."""
        last, system = len(prompt) - 1, boundaries.system
        kinds: dict[int, SnapshotKind | None] = {last: None}
        if not self._always_trimmable:
            for point in (boundaries.history, boundaries.next_turn):
                if abs(point - system) >= MIN_REUSE_TOKENS:  # else the system one serves
                    kinds[min(point, last)] = SnapshotKind.HISTORY
            kinds[last] = SnapshotKind.PROMPT
        kinds[system] = SnapshotKind.SYSTEM
        points = deque(
            (at, kind)
            for at, kind in sorted(kinds.items())
            if cached < at <= last and (at == last or at >= MIN_REUSE_TOKENS)
        )
        answer = self._always_trimmable or turn.next_turn >= len(prompt)
        return _SnapshotPlan(prompt, key, turn, points, answer)

    def remove(self, uids: list[int], *, keep_cache: bool = True) -> None:
        """Drop sequences in any stage; their KV so far goes to the prefix cache."""
        if not uids:
            return
        caches = self._gen.remove(
            uids, return_prompt_caches=keep_cache and self.prefix_cache.enabled
        )
        for uid in uids:
            self._top_n.pop(uid, None)
            self._failed.pop(uid, None)
            if self._drafts is not None:
                self._drafts.discard(uid)
            plan = self._snapshots.pop(uid, None)
            if plan is not None and uid in caches:
                cache, tokens = caches[uid]
                within = len(tokens) < len(plan.prompt)
                kind = SnapshotKind.PROMPT if within else SnapshotKind.ANSWER
                self._store(plan.keyed(tokens), cache, kind, plan.turn)

    def awaits_snapshot(self, prompt_ids: list[int]) -> bool:
        """A sequence of this batch is about to store a snapshot holding more of this prompt
        than the prefix cache can give now: starting it after that skips prefilling the same
        tokens twice (requests sharing a system prompt that arrive together)."""
        if not self._snapshots:
            return False
        coming = 0
        for plan in self._snapshots.values():
            for at, kind in plan.points:
                if kind is not None and at > coming and prompt_ids[:at] == plan.key[:at]:
                    coming = at
        if coming < MIN_REUSE_TOKENS:
            return False
        return coming - self.prefix_cache.reusable(self.model_key, prompt_ids) >= MIN_REUSE_TOKENS

    @property
    def prefill_pending(self) -> bool:
        """Prompts wait or are being prefilled: the next step may run a prefill chunk."""
        return compat.prefilling(self._gen) or compat.prompts_waiting(self._gen)

    def waiting_uids(self) -> list[int]:
        """Sequences whose prefill has not started yet, in arrival order."""
        return [uid for uid, _ in compat.waiting_prompts(self._gen)]

    def run_in_lockstep(self) -> None:
        """Other ranks run the same steps (mlx.launch): every speculating row verifies its
        whole draft, since the drafting policy's timings are this rank's alone and every
        rank's forward must have the same shape."""
        self._every_draft = True

    def plan_step(self) -> int:
        """Decide how many waiting prompts the next step may start prefilling (the planner's
        choice, when it is on) and return that limit: `follow_plan` applies it to another
        rank's runner, which then steps exactly as this one."""
        if self._planner is not None:
            self._planned = self._plan_prefill(self._planner)
        return compat.prefill_limit(self._gen)

    def follow_plan(self, limit: int) -> None:
        compat.limit_next_prefill(self._gen, limit)

    def step(self, *, planned: bool = False) -> StepResult:
        """One decode step for the running batch, then one prefill chunk (`planned`: the
        caller ran `plan_step` for it already)."""
        if not planned:
            self.plan_step()
        compat.unmask_single_row(self._gen)
        started = time.perf_counter()
        prompt_resps, gen_resps = compat.next_step(self._gen)
        if self._planner is not None:
            self._observe(self._planner, started, time.perf_counter())
        if prompt_resps and self._drafts is not None:
            self._drafts.policy.costs.spoil()  # this step's time went to a prefill too
        if self._snapshots:
            self._segments_done([r.uid for r in prompt_resps if compat.segment_ended(r)])
        top_n, drafts = self._top_n, self._drafts
        if top_n:
            outputs = []
            for r in gen_resps:
                n = top_n.get(r.uid)
                lp = token_logprob(r.logprobs, r.token, n) if n is not None else None
                outputs.append(StepOutput(r.uid, r.token, compat.finish_reason(r), lp))
        else:  # hot path (no logprobs requested): one comprehension, no per-token lookups
            outputs = [StepOutput(r.uid, r.token, compat.finish_reason(r), None) for r in gen_resps]
        for r in gen_resps:
            if r.finish_reason is not None:
                self._finished(r)
        failed = self._failed
        if failed:  # the dict stays: each sequence's _FailureReport holds it
            failed = dict(failed)
            self._failed.clear()
        else:
            failed = {}
        if drafts is None:
            return StepResult(outputs, failed)
        return StepResult(outputs, failed, drafts.take_counts())

    def _finished(self, r: compat.Generated) -> None:
        """A sequence ended in this step: forget it, keep its final cache (prompt + answer)."""
        self._top_n.pop(r.uid, None)
        if self._drafts is not None:
            self._drafts.discard(r.uid)
        plan = self._snapshots.pop(r.uid, None)
        if plan is not None and plan.answer:
            tokens = plan.keyed(r.all_tokens)
            self._store(tokens, r.prompt_cache, SnapshotKind.ANSWER, plan.turn)

    def _speculates(self, params: SamplingParams, sampler: Sampler, procs: list[Processor]) -> bool:
        """Rows without logits processors draft, greedy or sampled (a sampler that verifies:
        the accept/resample rule), on models whose cache rewinds per row (plain KV caches);
        kind `model` needs the loaded model's draft."""
        kind = params.draft_kind
        if kind is None or kind is DraftKind.NONE or not params.num_draft_tokens:
            return False
        if kind is DraftKind.MODEL and self.loaded.draft is None:
            return False
        if procs or not (sampler is GREEDY or isinstance(sampler, spec_compat.DraftVerifier)):
            return False
        return self._rewindable

    def _speculation(self) -> Drafts:
        if self._drafts is None:
            draft = self.loaded.draft
            model = None
            if draft is not None:
                model = DraftModel(draft.model, self.vocab_size, self.prefill_chunk)
            self._drafts = Drafts(model)
            spec_compat.enable_speculation(self._gen, self._drafts)
        return self._drafts

    def _segments_done(self, uids: list[int]) -> None:
        """These sequences' caches now end at their next snapshot point: copy the ones kept."""
        keep = []
        for uid in uids:
            plan = self._snapshots.get(uid)
            if plan is not None and plan.points:
                _, kind = plan.points.popleft()
                if kind is not None:
                    keep.append((uid, kind, plan))
        if not keep:
            return
        caches = self._gen.extract_cache([uid for uid, _, _ in keep])
        for uid, kind, plan in keep:
            cache, tokens = caches[uid]
            self._store(plan.keyed(list(tokens)), cache, kind, plan.turn)

    def close(self) -> None:
        self._gen.close()

    def _plan_prefill(self, planner: PrefillPlanner) -> int | None:
        """Pick how many waiting prompts the next prefill step takes, first come first served
        (see prefill_plan: the larger of the head rule's group and the tail rule's: one at a
        time when compute-bound, else the least mean plus longest wait of the queue).
        Returns the padded prompt tokens the step will prefill (0: it only decodes), or None
        when its cost says nothing clean (a group mid-prefill, or one longer than a chunk).
        mlx-lm has no public way to size the next group: see mlx_lm_compat."""
        gen = self._gen
        self._group_tokens = 0
        due = compat.first_token_due(gen)
        self._group_due = due and self._group is not None
        if compat.prefilling(gen):
            return None  # a group being prefilled keeps its members
        if not compat.prompts_waiting(gen):
            return 0
        if due:
            # A sequence just finished its prefill and its first token is computed in this
            # step: emit it before the next prompt's prefill chunk, else that token would
            # wait for the whole chunk (one decode step of delay for the next prompt instead).
            compat.limit_next_prefill(gen, 0)
            return 0
        lengths = [length for _, length in compat.waiting_prompts(gen)]
        count = planner.plan(lengths)
        compat.limit_next_prefill(gen, count)
        # A prompt cut at snapshot points prefills one segment per step: the first one is
        # what this step runs.
        longest = max(first for _, first in compat.first_segments(gen, count))
        if longest > planner.chunk:
            return None
        self._group_tokens = count * max(lengths[:count])
        return count * longest

    def _observe(self, planner: PrefillPlanner, started: float, ended: float) -> None:
        """Feed the planner this step's cost (see _plan_prefill) and time the groups: from
        the step that starts one to the step that returns its first tokens."""
        prefilled = self._planned
        if prefilled == 0:
            planner.observe_decode(ended - started)
        elif prefilled is not None:
            planner.observe_prefill(ended - started, prefilled)
        if self._group_due and self._group is not None:
            planner.observe_group(ended - self._group[0], self._group[1])
            self._group = None
        if self._group_tokens and compat.prefilling(self._gen):  # the planned group started
            self._group = (started, self._group_tokens)

    def _store(
        self,
        tokens: list[int] | None,
        cache: compat.PromptCache | None,
        kind: SnapshotKind,
        turn: Turn,
    ) -> None:
        if tokens and cache:
            self.prefix_cache.store(self.model_key, tokens, cache, kind, turn)

    def _prefill_images(
        self,
        prompt_ids: list[int],
        images: ImageInputs,
        cache: compat.PromptCache | None,
        cached: int,
    ) -> compat.PromptCache:
        parts, model = self.loaded.vision, self.loaded.model
        if parts is None or not isinstance(model, vision.TextModel):
            raise ValueError("this model takes text only")
        return vision.prefill_images(
            parts, model, prompt_ids, images, cache, cached, self.prefill_chunk
        )


@dataclass(slots=True)
class _SnapshotPlan:
    """One sequence's snapshot points still ahead (prompt position, kind; None: a segment end
    that is not kept), and whether its final cache (prompt + answer) is kept. `key` is the
    prompt as the prefix cache sees it (an image prompt's runs carry the image digests)."""

    prompt: list[int]
    key: list[int]
    turn: Turn
    points: deque[tuple[int, SnapshotKind | None]]
    answer: bool

    def keyed(self, tokens: list[int] | None) -> list[int] | None:
        """`tokens` (the prompt, then generated ones) as the prefix cache keys them."""
        if tokens is None or self.key is self.prompt:
            return tokens
        return self.key[: len(tokens)] + tokens[len(self.key) :]

    def segments(self, cached: int) -> list[list[int]]:
        """The prompt after the cached tokens, cut at each point."""
        ends = [at for at, _ in self.points] + [len(self.prompt)]
        starts = [cached, *ends[:-1]]
        return [self.prompt[a:b] for a, b in zip(starts, ends, strict=True)]


class _FailureReport:
    """One sequence's `on_error` for its guarded sampler and processors: keeps the first
    exception per uid until the step's result reports it."""

    __slots__ = ("uid", "_failed")

    def __init__(self, failed: dict[int, BaseException]) -> None:
        self.uid = -1  # set once inserted; the sampler runs only in later steps
        self._failed = failed

    def __call__(self, exc: BaseException) -> None:
        self._failed.setdefault(self.uid, exc)


def release_thread_streams() -> None:
    """Call last on the engine thread: a thread that exits holding MLX thread-local streams
    makes the process abort at exit ("terminate called without an active exception")."""
    mx.synchronize()
    mx.clear_streams()
