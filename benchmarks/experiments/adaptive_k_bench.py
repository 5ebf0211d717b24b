"""Adaptive K per row vs fixed K for ngram speculation (issue 14); prints JSON.

    python -m benchmarks.experiments.adaptive_k_bench                  # K 4 and 8, batch 1, ~8 min
    python -m benchmarks.experiments.adaptive_k_bench --k 8 --sizes 1,8 --rounds 3

The demo model answers spec_bench's copy-heavy tasks (greedy, ngram drafts) with a fixed K
(`fixed`: what mlxd does) and with an adaptive K per row (`adaptive`: after a rejection the
row's next draft is at most accepted + 1 tokens, after a full acceptance one more, up to K),
alternating ABBA per round on one engine. The adaptive policy is installed here, around
backend.speculative.Drafts.record (mlxd does not ship it: see docs/engine-design.md). Per mode:
median tokens/s and tokens per CPU-second of this process (less sensitive than wall time to
other processes on a shared machine), drafted / accepted tokens, tokens per target forward,
and whether the outputs equal the fixed-K ones (greedy: they must).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from benchmarks.common import emit, progress
from benchmarks.spec_bench import task_prompts, wave
from mlxd.backend.speculation import drafts as speculative
from mlxd.engine import Engine, EngineConfig
from mlxd.store.default_model import default_model
from mlxd.types import DraftKind, SamplingParams

MODES = ("fixed", "adaptive")


class AdaptiveK:
    """Wraps Drafts.record: a row's draft cap (its `_Row.k`, read by propose) follows its
    last verification while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.caps: dict[int, int] = {}  # uid -> the request's K
        self._record = speculative.Drafts.record

    def install(self) -> None:
        policy = self

        def record(drafts: speculative.Drafts, uid: int, drafted: int, accepted: int) -> None:
            row = drafts.rows.get(uid)
            if policy.on and row is not None and drafted:
                cap = policy.caps.setdefault(uid, row.k)
                row.k = accepted + 1 if accepted < drafted else min(cap, row.k + 1)
            policy._record(drafts, uid, drafted, accepted)

        speculative.Drafts.record = record  # type: ignore[method-assign]


def bench(
    engine: Engine, model: str, prompts: list[list[int]], k: int, size: int, args: Any
) -> dict[str, Any]:
    policy = args.policy
    params = SamplingParams(max_tokens=args.tokens, draft_kind=DraftKind.NGRAM, num_draft_tokens=k)
    if size == 1:
        waves = [[p] for p in prompts]  # one task at a time
    else:
        waves = [[prompts[i % len(prompts)] for i in range(size)]]
    speed: dict[str, list[float]] = {m: [] for m in MODES}
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    counts = {m: [0, 0, 0] for m in MODES}  # drafted, accepted, completion
    outputs: dict[str, list[list[int]]] = {}
    for _ in range(args.rounds):
        for mode in (*MODES, *reversed(MODES)):
            policy.on = mode == "adaptive"
            tokens, secs, cpu_started, outs = 0, 0.0, time.process_time(), []
            for batch in waves:
                got, finishes, wall = wave(engine, model, batch, params)
                tokens, secs, outs = tokens + sum(len(o) for o in got), secs + wall, outs + got
                for f in finishes:
                    counts[mode][0] += f.timings.draft_tokens
                    counts[mode][1] += f.timings.accepted_draft_tokens
                    counts[mode][2] += f.usage.completion_tokens
            speed[mode].append(tokens / secs)
            cpu[mode].append(tokens / (time.process_time() - cpu_started))
            outputs.setdefault(mode, outs)
    report: dict[str, Any] = {}
    for mode in MODES:
        drafted, accepted, completion = counts[mode]
        report[mode] = {
            "tokens_per_s": round(statistics.median(speed[mode]), 2),
            "tokens_per_cpu_s": round(statistics.median(cpu[mode]), 2),
            "drafted": drafted,
            "accepted": accepted,
            "tokens_per_target_forward": round(completion / max(completion - accepted, 1), 3),
        }
    fixed, adaptive = report["fixed"], report["adaptive"]
    report["adaptive_over_fixed"] = {
        "wall": round(adaptive["tokens_per_s"] / fixed["tokens_per_s"], 3),
        "cpu": round(adaptive["tokens_per_cpu_s"] / fixed["tokens_per_cpu_s"], 3),
        "per_round_wall": [
            round(a / f, 3) for a, f in zip(speed["adaptive"], speed["fixed"], strict=True)
        ],
    }
    report["identical_outputs"] = outputs["fixed"] == outputs["adaptive"]
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", default="4,8", help="num_draft_tokens values")
    ap.add_argument("--sizes", default="1", help="batch sizes")
    ap.add_argument("--rounds", type=int, default=2, help="ABBA rounds")
    ap.add_argument("--tokens", type=int, default=96, help="max_tokens per request")
    args = ap.parse_args()
    args.policy = AdaptiveK()
    args.policy.install()
    ref = default_model()
    prompts = task_prompts(ref.path)
    sizes = [int(s) for s in args.sizes.split(",")]
    report: dict[str, Any] = {"model": ref.name, "tokens": args.tokens, "rounds": args.rounds}
    engine = Engine(EngineConfig.from_settings(max_batch=max(sizes)))
    try:
        info = engine.load_model(ref.path)
        wave(engine, info.name, prompts, SamplingParams(max_tokens=1))  # warm-up, prompts cached
        for k in (int(x) for x in args.k.split(",")):
            for size in sizes:
                result = bench(engine, info.name, prompts, k, size, args)
                report[f"k_{k}_batch_{size}"] = result
                progress(f"k {k} batch {size}", result)
    finally:
        engine.close()
    emit(report)


if __name__ == "__main__":
    main()
