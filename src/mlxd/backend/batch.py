"""One model's continuous batch: mlx-lm's `BatchGenerator` plus the prefix cache.

BatchGenerator already interleaves chunked prefill with decode (each `next()` decodes one token
for the running batch, then prefills one chunk), keeps per-sequence samplers, logits processors,
stop tokens and max_tokens, and frees a sequence with `remove(uids)`. This class only adapts it
to the engine: token ids in, `StepOutput`s out, caches to and from the prefix cache.

The decisions live beside it: where each sequence's cache is copied (prefix.snapshot_plan),
how many prompts a step starts prefilling and what steps cost (prefill_plan), who drafts
(speculation), each row's sampler and logits processors (sampling), and every touch of
mlx-lm's private state (mlx_lm.compat).
"""

from __future__ import annotations

import copy
import time

import mlx.core as mx
from mlx_lm.generate import StopSequences
from mlx_lm.models.cache import make_prompt_cache

from mlxd.backend import vision
from mlxd.backend.api import BackendConfig, LoadedModel, NewSequence, StepOutput, StepResult
from mlxd.backend.mlx_lm import compat, one_row, row_deltas
from mlxd.backend.mlx_lm import verify_step as spec_compat
from mlxd.backend.prefill_plan import PrefillPlanner
from mlxd.backend.prefix import PrefixCache, SnapshotKind, SnapshotPlan, SnapshotPlans
from mlxd.backend.sampling.reasoning_budget import ReasoningBudget
from mlxd.backend.sampling.samplers import (
    GREEDY,
    Processor,
    Sampler,
    Vocabulary,
    row_sampling,
    token_logprob,
)
from mlxd.backend.speculation import Drafts, batch_drafts, draft_policy_every
from mlxd.backend.structured.grammar_mask import GrammarMask
from mlxd.types import DraftKind, ImageInputs, SamplingParams


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
        self._vocab = Vocabulary(loaded.vocab_size, loaded.tokenizer)
        # A cache the batch cannot merge (mlx_lm.one_row): one row at a time (the engine admits
        # one), no prefix cache (a snapshot is a copy the batch extracts) and no speculation.
        unbatchable = loaded.unbatchable  # found at load (unbatchable_layers)
        self.one_at_a_time = bool(unbatchable)
        rows = 1 if unbatchable else config.max_batch
        self._keeps_snapshots = prefix_cache.enabled and not unbatchable
        self.max_prefill_batch = max(1, min(config.prefill_batch, rows))
        self.prefill_chunk = config.prefill_chunk
        self._planner = (
            PrefillPlanner(self.max_prefill_batch, config.prefill_group_tokens, self.prefill_chunk)
            if config.prefill_group_tokens and not unbatchable
            else None
        )
        self._gen = compat.new_batch_generator(
            loaded.model,
            completion_batch_size=rows,
            prefill_batch_size=self.max_prefill_batch,
            prefill_step_size=self.prefill_chunk,
        )
        self._top_n: dict[int, int] = {}  # uid -> top_logprobs, only for logprobs requests
        self._failed: dict[int, BaseException] = {}  # uid -> first sampler/processor error
        self._snapshots = SnapshotPlans.for_model(
            loaded.model
        )  # where each sequence's cache is copied
        self._drafts: Drafts | None = None  # set by the first speculating sequence
        # Every speculating row verifies its whole draft (MLXD_DRAFT_POLICY=every, or ranks in
        # lockstep, whose drafts may not follow one rank's timings).
        self._every_draft = draft_policy_every()
        self._rewindable = spec_compat.target_rewindable(loaded.model)  # can speculate

    def insert(self, seq: NewSequence) -> tuple[int, int]:
        """Queue one sequence; returns (uid, cached prompt tokens reused from the prefix cache).
        A `grammar` masks its logits last. A sampler or logits processor that raises is
        reported in the next StepResult. An image prompt is prefilled here, its images'
        features in the embeddings (backend.vision), and joins the batch for its last token;
        the prefix cache sees it under vision.cache_key. On an M-RoPE model each row carries
        its position delta in its cache (mlx_lm.row_deltas)."""
        prompt_ids, params, images = seq.prompt_ids, seq.params, seq.images
        key = prompt_ids if images is None else vision.cache_key(prompt_ids, images)
        reuse = self.prefix_cache.fetch(self.model_key, key, seq.boundaries.next_turn)
        cached = reuse.tokens
        plan = self._snapshots.plan(prompt_ids, key, seq.boundaries, reuse.turn, cached)
        cache, start = self._image_cache(prompt_ids, images, reuse.cache, cached, plan)
        if self.one_at_a_time:
            cache = one_row.one_row_cache(cache or make_prompt_cache(self.loaded.model))
        if start != cached:  # an image prefill ran (and took the points before `start`)
            plan = self._snapshots.plan(prompt_ids, key, seq.boundaries, reuse.turn, start)
        report = _FailureReport(self._failed)
        masks: list[Processor] = []
        if params.max_reasoning_tokens is not None and seq.reasoning is not None:
            masks.append(ReasoningBudget(params.max_reasoning_tokens, seq.reasoning))
        if seq.grammar is not None:
            masks.append(GrammarMask(seq.grammar))  # after the budget: it sees forced tokens
        sampler, procs = row_sampling(
            params, self._vocab, report, self.fault_hook, seq.request_id, masks
        )
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
            drafts = self._speculation()
            drafts.add(uid, params.draft_kind, params.num_draft_tokens or 0, fixed)
            if reuse.side is not None:  # the head's state over the reused prefix
                drafts.restore(uid, reuse.side)
        if params.logprobs:
            self._top_n[uid] = params.top_logprobs
        if self._keeps_snapshots:
            self._snapshots.add(uid, plan)
        return uid, cached

    def remove(self, uids: list[int], *, keep_cache: bool = True) -> None:
        """Drop sequences in any stage; their KV so far goes to the prefix cache."""
        if not uids:
            return
        caches = self._gen.remove(uids, return_prompt_caches=keep_cache and self._keeps_snapshots)
        for uid in uids:
            self._top_n.pop(uid, None)
            self._failed.pop(uid, None)
            plan = self._snapshots.pop(uid)
            if plan is not None and uid in caches:
                cache, tokens = caches[uid]
                self._store(uid, plan, tokens, cache, plan.kind_at_end(tokens))
            if self._drafts is not None:
                self._drafts.discard(uid)

    def awaits_snapshot(self, prompt_ids: list[int]) -> bool:
        """A sequence of this batch is about to store a snapshot holding more of this prompt
        than the prefix cache can give now: starting it after that skips prefilling the same
        tokens twice (requests sharing a system prompt that arrive together)."""
        if not self._snapshots:
            return False
        reusable = self.prefix_cache.reusable(self.model_key, prompt_ids)
        return self._snapshots.worth_waiting(prompt_ids, reusable)

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
            self._plan_prefill(self._planner)
        return compat.prefill_limit(self._gen)

    def follow_plan(self, limit: int) -> None:
        compat.limit_next_prefill(self._gen, min(limit, self.max_prefill_batch))

    def step(self, *, planned: bool = False) -> StepResult:
        """One decode step for the running batch, then one prefill chunk (`planned`: the
        caller ran `plan_step` for it already)."""
        if not planned:
            self.plan_step()
        compat.unmask_single_row(self._gen)
        started = time.perf_counter()
        prompt_resps, gen_resps = compat.next_step(self._gen)
        if self._planner is not None:
            self._planner.step_done(started, time.perf_counter(), compat.prefilling(self._gen))
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
        return StepResult(outputs, failed, drafts.take_counts(), drafts.take_parked())

    def _finished(self, r: compat.Generated) -> None:
        """A sequence ended in this step: forget it, keep its final cache (prompt + answer)."""
        self._top_n.pop(r.uid, None)
        plan = self._snapshots.pop(r.uid)
        if plan is not None and plan.answer:
            self._store(r.uid, plan, r.all_tokens, r.prompt_cache, SnapshotKind.ANSWER)
        if self._drafts is not None:
            self._drafts.discard(r.uid)

    def _speculates(self, params: SamplingParams, sampler: Sampler, procs: list[Processor]) -> bool:
        """Rows without logits processors draft, greedy or sampled (a sampler that verifies:
        the accept/resample rule), on models whose cache rewinds per row (plain KV caches,
        recurrent layers mlx_lm.recurrent_rollback knows); kind `model` needs the loaded
        model's draft. XTC's coin is one per draw: its rows do not verify drafts."""
        kind = params.draft_kind
        if kind is None or kind is DraftKind.NONE or not params.num_draft_tokens:
            return False
        if params.xtc_probability > 0.0 and not params.greedy:
            return False
        if kind is DraftKind.MODEL and self.loaded.draft is None:
            return False
        if kind is DraftKind.MTP and self.loaded.mtp is None:
            return False
        if kind is DraftKind.DFLASH and self.loaded.dflash is None:
            return False
        if procs or not (sampler is GREEDY or isinstance(sampler, spec_compat.DraftVerifier)):
            return False
        return self._rewindable

    def _speculation(self) -> Drafts:
        if self._drafts is None:
            self._drafts = batch_drafts(self.loaded, self.vocab_size, self.prefill_chunk)
            hidden = self.loaded.mtp is not None or self.loaded.dflash is not None
            spec_compat.enable_speculation(
                self._gen, self._drafts, self.loaded.model, hidden=hidden
            )
        return self._drafts

    def _segments_done(self, uids: list[int]) -> None:
        """These sequences' caches now end at their next snapshot point: copy the ones kept."""
        keep = self._snapshots.segments_done(uids)
        if not keep:
            return
        caches = self._gen.extract_cache([uid for uid, _, _ in keep])
        for uid, kind, plan in keep:
            cache, tokens = caches[uid]
            self._store(uid, plan, list(tokens), cache, kind)

    def close(self) -> None:
        self._gen.close()

    def _plan_prefill(self, planner: PrefillPlanner) -> None:
        """Pick how many waiting prompts the next prefill step takes, first come first served
        (see prefill_plan: the larger of the head rule's group and the tail rule's: one at a
        time when compute-bound, else the least mean plus longest wait of the queue), and
        tell the planner what the step will cost. mlx-lm has no public way to size the next
        group: see mlx_lm.compat."""
        gen = self._gen
        due = compat.first_token_due(gen)
        if compat.prefilling(gen):  # a prompt longer than a chunk, or cut at snapshot points
            beside = self._chunk_beside_decoding(planner)
            return planner.expect(None, first_tokens=due, beside=beside)  # the group stays
        if not compat.prompts_waiting(gen):
            return planner.expect(0, first_tokens=due)
        if due:
            # A sequence just finished its prefill and its first token is computed in this
            # step: emit it before the next prompt's prefill chunk, else that token would
            # wait for the whole chunk (one decode step of delay for the next prompt instead).
            compat.limit_next_prefill(gen, 0)
            return planner.expect(0, first_tokens=due)
        lengths = [length for _, length in compat.waiting_prompts(gen)]
        count = planner.plan(lengths)
        compat.limit_next_prefill(gen, count)
        # A prompt cut at snapshot points prefills one segment per step: the first one is
        # what this step runs.
        longest = max(first for _, first in compat.first_segments(gen, count))
        if longest > planner.chunk:
            return planner.expect(None, beside=self._chunk_beside_decoding(planner))
        compat.set_prefill_chunk(gen, planner.chunk)  # a prompt of one chunk runs at once
        return planner.expect(count * longest, count * max(lengths[:count]))

    def _chunk_beside_decoding(self, planner: PrefillPlanner) -> int:
        """Size the next chunk of a prompt longer than one: smaller beside decoding rows, so
        their tokens keep coming while it prefills (prefill_plan.chunk_beside); a prompt of
        one chunk still runs in one step. Returns the prompt tokens the step runs beside
        decoding rows (0: none decode), whose cost sizes the next chunk."""
        gen = self._gen
        prompts = max(compat.prefill_group_size(gen), 1)
        decoding = compat.decoding_rows(gen)
        size = planner.chunk_beside(decoding, prompts)
        compat.set_prefill_chunk(gen, size)
        return size * prompts if decoding else 0

    def _store(
        self,
        uid: int | None,
        plan: SnapshotPlan,
        tokens: list[int] | None,
        cache: compat.PromptCache | None,
        kind: SnapshotKind,
    ) -> None:
        """Copy a cache holding `tokens` (the prompt, then generated ones) as `plan` keys them,
        with sequence `uid`'s MTP head state over them when it has one (None: a cache copied
        before its sequence joined the batch, an image prefill's)."""
        keyed = plan.keyed(tokens)
        if keyed and cache and tokens is not None:
            cache = row_deltas.without_delta(cache)
            drafts = self._drafts
            side = None
            if drafts is not None and uid is not None:
                side = drafts.head_state(uid, len(tokens), kind is SnapshotKind.ANSWER)
            self.prefix_cache.store(self.model_key, keyed, cache, kind, plan.turn, side)

    def _image_cache(
        self,
        prompt_ids: list[int],
        images: ImageInputs | None,
        cache: compat.PromptCache | None,
        cached: int,
        plan: SnapshotPlan,
    ) -> tuple[compat.PromptCache | None, int]:
        """vision.joining_cache, an image prefill copying its cache into the prefix cache at
        `plan`'s kept points: the batch's segments start after it, so a cache that cannot be
        cut back (a sliding window past full) would otherwise keep no prefix of an image turn."""
        kept = [(at, kind) for at, kind in plan.points if kind is not None]
        keep = dict(kept) if self._keeps_snapshots else {}

        def at_point(at: int, filled: compat.PromptCache) -> None:
            self._store(None, plan, plan.prompt[:at], copy.deepcopy(filled), keep[at])

        return vision.joining_cache(
            self.loaded.vision, self.loaded.model, prompt_ids, images, cache, cached,
            self.prefill_chunk, list(keep), at_point,
        )  # fmt: skip


class _FailureReport:
    """One sequence's `on_error` for its guarded sampler and processors: keeps the first
    exception per uid until the step's result reports it."""

    __slots__ = ("uid", "_failed")

    def __init__(self, failed: dict[int, BaseException]) -> None:
        self.uid = -1  # set once inserted; the sampler runs only in later steps
        self._failed = failed

    def __call__(self, exc: BaseException) -> None:
        self._failed.setdefault(self.uid, exc)


def unbatchable_layers(model: object) -> tuple[str, ...]:
    """Class names of the model's cache layers the batch cannot merge, looked at once when
    it loads (MlxBackend.load): a model with any is served one sequence at a time."""
    return tuple(one_row.unbatchable_layers(model))


def release_thread_streams() -> None:
    """Call last on the engine thread: a thread that exits holding MLX thread-local streams
    makes the process abort at exit ("terminate called without an active exception")."""
    mx.synchronize()
    mx.clear_streams()
