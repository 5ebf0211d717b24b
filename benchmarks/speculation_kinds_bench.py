"""Speculation kinds side by side (issue 27): mtp, ngram, a draft model and a DFlash drafter
against no speculation, on self-consistent pairs and on a hybrid target; prints JSON.

    python -m benchmarks.speculation_kinds_bench                 # ~5 min on a loaded 2-core VM
    python -m benchmarks.speculation_kinds_bench --batches 1 --tokens 16 --size tiny --rounds 1

Pairs (tests/checkpoints.py, tests/mtp_checkpoints.py, tests/dflash_checkpoints.py; random
weights, built here):
- `self_consistent`: a llama whose greedy next token is a fixed function of the current one,
  with an MTP head computing the same function, and itself as the draft model (both
  predict it exactly, so acceptance is ~100% and the figures show the mechanics' cost);
- `self_consistent_dflash`: a Qwen3 that repeats its current token and a DFlash drafter
  predicting exactly that (the repeater; a DFlash drafter cannot follow the llama's function,
  a draft position sees no other position's draft);
- `hybrid`: a Qwen3-Next (gated delta-net + attention layers, --size) with a random MTP head,
  the tiny llama of the same tokenizer as draft model (random drafts: mostly rejected, rolled
  back every step: mlx_lm/recurrent_rollback.py); `hybrid_dflash`: the same target with a
  random DFlash drafter (a model carries one draft: a draft model or a DFlash drafter).

Per pair and batch size, waves of `batch` random prompts (greedy) after untimed warm-ups
(`--warmup` waves of every variant: the policy's first measurements at a batch width, which
a server makes once, are not what it costs after):
`plain_spec_engine` (no speculation asked, on the engine that speculates: what its
speculative step costs a row that never drafts), each kind as the drafting policy runs it by
default, and `<kind>_every` (every draft verified, the policy's costs forced flat: what the
mechanics give where width is free). `--rounds` rounds; in each, every variant's wave runs
between two waves of the baseline (`plain`: a second engine, same checkpoint, that never
speculated), the order reversed every other round. Per variant: `speedup`, the median over
rounds of the baseline's mean beside it over its own seconds, and `spread` (least, greatest);
median tokens/s; `tokens_per_forward` (completion tokens over target forwards, pooled; plain
is 1), drafted / accepted counts, `parked_share` (steps the policy parked over the engine's
steps), `policy` (`drafts`, or `parked`: no draft was verified), and whether every wave's
output equals the baseline's.
`step_cost_ratio`: seconds of a (K+1)-wide forward over a 1-wide one at each batch size (the
model alone, after --context cached tokens). `rollback` (hybrid): per batch size, the
recompute the rollback runs after a verify and the per-step-state alternative it replaced
(the recurrent layers fed one position at a time, every state kept), each over the verify
forward's seconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.common import emit, fast_blas, progress, scratch
from benchmarks.spec_bench import every_draft_verified

fast_blas()  # before mlx is imported

from tests.checkpoints import make_checkpoint  # noqa: E402
from tests.dflash_checkpoints import make_dflash_drafter, make_repeater_pair  # noqa: E402
from tests.mtp_checkpoints import add_mtp_head, make_successor_checkpoint  # noqa: E402

from mlxd.engine import Engine, EngineConfig, EngineRequest, ModelInfo  # noqa: E402
from mlxd.types import DraftKind, FinishEvent, SamplingParams  # noqa: E402

KINDS = (DraftKind.MTP, DraftKind.NGRAM, DraftKind.MODEL)
DFLASH = (DraftKind.DFLASH,)


def build_pairs(work: Path, size: str) -> dict[str, tuple[Path, Path, tuple[DraftKind, ...]]]:
    """pair name -> (target, its draft model or DFlash drafter, the kinds run on it)."""
    consistent = make_successor_checkpoint(work / "successor")
    repeater, repeater_dflash = make_repeater_pair(work / "repeater")
    hybrid = make_checkpoint(work / "hybrid", "gated", size=size)
    add_mtp_head(hybrid)
    draft = make_checkpoint(work / "draft", "chat")
    hybrid_dflash = make_dflash_drafter(work / "hybrid-dflash", hybrid)
    return {
        "self_consistent": (consistent, consistent, KINDS),
        "self_consistent_dflash": (repeater, repeater_dflash, DFLASH),
        "hybrid": (hybrid, draft, KINDS),
        "hybrid_dflash": (hybrid, hybrid_dflash, DFLASH),
    }


def wave(engine: Engine, info: ModelInfo, prompts: list[list[int]], params: SamplingParams):
    started = time.perf_counter()
    handles = [engine.submit(EngineRequest(info.name, p, params)) for p in prompts]
    results = [h.collect() for h in handles]
    return [r[0] for r in results], [r[1] for r in results], time.perf_counter() - started


def forwards(finishes: list[FinishEvent]) -> int:
    """Target forwards that made a wave's tokens: the prefill's last one (the first token),
    then one per decode step (its next token plus the drafts it accepted), so plain is 1.0."""
    return sum(f.usage.completion_tokens - f.timings.accepted_draft_tokens for f in finishes)


def bench_batch(
    engines: tuple[Engine, Engine],
    info: ModelInfo,
    batch: int,
    args: argparse.Namespace,
    kinds: tuple[DraftKind, ...] = KINDS,
) -> dict[str, dict[str, Any]]:
    """`--rounds` rounds of waves, each variant's wave between two of the baseline's (an
    engine that never speculated), the variants' order reversed every other round; a row per
    variant with its median and spread of ratios to the baseline waves beside it."""
    import random

    baseline, engine = engines
    rng = random.Random(batch)
    top = info.vocab_size - 1  # never the last id (the DFlash drafters' mask token)
    prompts = [[rng.randrange(3, top) for _ in range(12)] for _ in range(batch)]
    base = dict(max_tokens=args.tokens, ignore_eos=True, num_draft_tokens=args.k)
    plain = SamplingParams(draft_kind=DraftKind.NONE, **base)
    variants = {"plain_spec_engine": (DraftKind.NONE, False)}
    for kind in kinds:
        variants[kind.value] = (kind, False)
        variants[f"{kind.value}_every"] = (kind, True)
    wave(baseline, info, prompts, plain)  # kernels, first shapes
    for kind, every in (variants["plain_spec_engine"], (kinds[0], True)):
        with every_draft_verified(every):
            wave(engine, info, prompts, SamplingParams(draft_kind=kind, **base))
    for _ in range(args.warmup):  # the policy measures each kind's step costs at this width
        for kind, every in variants.values():
            with every_draft_verified(every):
                wave(engine, info, prompts, SamplingParams(draft_kind=kind, **base))
    plain_out, _, before = wave(baseline, info, prompts, plain)
    ratios: dict[str, list[float]] = {name: [] for name in variants}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    tallies: dict[str, Counter[str]] = {name: Counter() for name in variants}
    identical = dict.fromkeys(variants, True)
    plain_s = [before]
    for round_ in range(args.rounds):
        for name in list(variants)[:: -1 if round_ % 2 else 1]:
            kind, every = variants[name]
            steps = engine.stats().counters
            with every_draft_verified(every):
                outs, finishes, secs = wave(
                    engine, info, prompts, SamplingParams(draft_kind=kind, **base)
                )
            after = engine.stats().counters
            *_, next_plain = wave(baseline, info, prompts, plain)
            ratios[name].append((before + next_plain) / 2 / secs)
            seconds[name].append(secs)
            plain_s.append(next_plain)
            before = next_plain
            identical[name] &= outs == plain_out
            tallies[name].update(_tally(finishes, steps, after))
    rows: dict[str, dict[str, Any]] = {"plain": _row(Counter(), plain_s, [1.0], args.tokens, batch)}
    for name in variants:
        rows[name] = _row(tallies[name], seconds[name], ratios[name], args.tokens, batch)
        rows[name]["identical_to_plain"] = identical[name]
    return rows


def _tally(finishes: list[FinishEvent], before: Any, after: Any) -> dict[str, int]:
    """One wave's counts: tokens, target forwards, drafted / accepted, steps and parked ones."""
    return {
        "tokens": sum(f.usage.completion_tokens for f in finishes),
        "forwards": forwards(finishes),
        "drafted": sum(f.timings.draft_tokens for f in finishes),
        "accepted": sum(f.timings.accepted_draft_tokens for f in finishes),
        "steps": after.steps_total - before.steps_total,
        "parked": after.parked_steps_total - before.parked_steps_total,
    }


def _row(
    tally: Counter[str], seconds: list[float], ratios: list[float], tokens: int, batch: int
) -> dict[str, Any]:
    """A variant's figures: `speedup` is the median of its rounds' ratios to the baseline
    waves beside them, `spread` their least and greatest; `parked_share` the policy's parked
    steps over the engine's steps in its waves (0 where it verified whenever rows offered)."""
    row: dict[str, Any] = {
        "tokens_per_s": round(tokens * batch / statistics.median(seconds), 1),
        "speedup": round(statistics.median(ratios), 3),
        "spread": [round(min(ratios), 3), round(max(ratios), 3)],
    }
    if tally:
        row["tokens_per_forward"] = round(tally["tokens"] / max(tally["forwards"], 1), 3)
        row["drafted"], row["accepted"] = tally["drafted"], tally["accepted"]
        row["parked_share"] = round(tally["parked"] / max(tally["steps"], 1), 3)
        row["policy"] = "drafts" if tally["drafted"] else "parked"
    return row


def step_cost_ratio(path: Path, k: int, batch: int, context: int, reps: int = 5) -> float:
    """Median seconds of a (batch, k+1) forward over a (batch, 1) one after `context` cached
    tokens (a fresh cache per timed forward: recurrent caches cannot be trimmed back)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache
    from mlx_lm.utils import load_model

    model, _ = load_model(path)

    def timed(width: int) -> float:
        times = []
        for _ in range(reps):
            cache = make_prompt_cache(model)
            mx.eval(model(mx.full((batch, context), 7, dtype=mx.uint32), cache=cache))
            started = time.perf_counter()
            mx.eval(model(mx.full((batch, width), 5, dtype=mx.uint32), cache=cache))
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    timed(1)
    return round(timed(k + 1) / timed(1), 3)


def rollback_costs(path: Path, k: int, batch: int, reps: int = 4) -> dict[str, float]:
    """The rollback's recompute, and per-step states for the window, over the verify's time."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache
    from mlx_lm.utils import load_model

    from mlxd.backend.mlx_lm.recurrent_rollback import RecurrentRollback

    model, _ = load_model(path)
    rollback = RecurrentRollback.for_model(model)
    assert rollback is not None
    window = mx.full((batch, k + 1), 5, dtype=mx.uint32)
    kept = [1 + i % (k + 1) for i in range(batch)]
    verify, recompute, per_step = [], [], []
    for _ in range(reps):
        cache = make_prompt_cache(model)
        mx.eval(model(mx.full((batch, 64), 7, dtype=mx.uint32), cache=cache))
        started = time.perf_counter()
        saved = rollback.save(cache)
        mx.eval(model(window, cache=cache), [c.state for c in cache])
        verify.append(time.perf_counter() - started)
        inputs = dict(rollback._tape.inputs)
        started = time.perf_counter()
        rollback.restore(cache, saved, kept)
        recompute.append(time.perf_counter() - started)
        started = time.perf_counter()
        states = []
        for index, mixer in rollback._mixers.items():  # one position at a time, all kept
            layer = cache[index]
            layer.state = saved.states[index]
            layer.cache = list(layer.cache)
            for j in range(k + 1):
                type(mixer).__mro__[1].__call__(mixer, inputs[index][:, j : j + 1], None, layer)
                states.append(list(layer.cache))
        mx.eval(states)
        per_step.append(time.perf_counter() - started)
    base = statistics.median(verify)
    return {
        "verify_s": round(base, 4),
        "recompute_over_verify": round(statistics.median(recompute) / base, 3),
        "per_step_states_over_verify": round(statistics.median(per_step) / base, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", default="1,4,8", help="batch sizes, comma-separated")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per request")
    parser.add_argument("--rounds", type=int, default=3, help="waves per variant")
    parser.add_argument("--warmup", type=int, default=2, help="untimed waves per variant")
    parser.add_argument("--pairs", default="", help="pairs to run, comma-separated (all)")
    parser.add_argument("--k", type=int, default=3, help="draft tokens per step (K)")
    parser.add_argument("--size", default="small", help="the hybrid target's size")
    parser.add_argument("--context", type=int, default=64, help="cached tokens (step cost)")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    work = scratch("spec-kinds-")
    report: dict[str, Any] = {"k": args.k, "tokens": args.tokens, "rounds": args.rounds}
    report["warmup"] = args.warmup
    report["load_average"], report["pairs"] = [round(x, 2) for x in os.getloadavg()], {}
    try:
        chosen = set(args.pairs.split(",")) if args.pairs else None
        for name, (target, draft, kinds) in build_pairs(work, args.size).items():
            if chosen is not None and name not in chosen:
                continue
            config = EngineConfig.from_settings(max_batch=max(batches))
            engine, baseline = Engine(config), Engine(config)
            try:
                info = engine.load_model(target, name=name, draft=draft)
                baseline.load_model(target, name=name)
                pair: dict[str, Any] = {"by_batch": {}, "step_cost_ratio": {}}
                for batch in batches:
                    rows = bench_batch((baseline, engine), info, batch, args, kinds)
                    pair["by_batch"][str(batch)] = rows
                    ratio = step_cost_ratio(target, args.k, batch, args.context)
                    pair["step_cost_ratio"][str(batch)] = ratio
                    progress(f"{name} batch {batch}", rows[kinds[0].value])
                if name == "hybrid":
                    pair["rollback"] = {str(b): rollback_costs(target, args.k, b) for b in batches}
                report["pairs"][name] = pair
            finally:
                engine.close()
                baseline.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    emit(report)


if __name__ == "__main__":
    main()
