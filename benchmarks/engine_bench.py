"""Engine benchmarks, measured side by side in one run; prints JSON.

  python -m benchmarks.engine_bench [--tokens 32] [--repeats 3] [--sections single,batch,ttft,turn]
                                     [--models big,small] [--sizes 1,4,8,16]

Sections (issue 4):
  single  single-stream decode: engine vs mlx-lm's generate_step, token ids on both sides
          (goal: ratio >= 0.97); also vs stream_generate (which detokenizes on the timed
          thread); the small checkpoint decodes 16x --tokens (short runs are mostly noise)
  batch   aggregate decode tok/s at 1/4/8/16 concurrent: engine vs raw BatchGenerator
          on a ~29M (float16 by default, as in the issue) and a ~0.25M checkpoint, both
          prefilling the whole wave in one group (goal: ratio >= 0.95)
  ttft    mean time to first token, 4 concurrent 256-token prompts: engine vs whole-wave prefill
  turn    time to first token of a second chat turn with a 1,000-token history: cache hit vs cold
Runs alternate in ABBA order after a warm-up and report medians, the median of the per-turn
ratios (ratio_paired: the steadier figure on a shared machine), their spread, and the ratio of
process CPU time per run (cpu_ratio); never read absolute seconds across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from pathlib import Path

from benchmarks.common import emit, fast_blas, scratch

# Before any mlx import, for the engine and raw mlx-lm alike (loaded after mlx, the whole run
# was on the reference BLAS). MLXD_BLAS=reference: off.
BLAS = fast_blas()

import mlx.core as mx  # noqa: E402
from mlx_lm.generate import BatchGenerator, generate_step, stream_generate  # noqa: E402
from mlx_lm.utils import load  # noqa: E402
from tests.checkpoints import make_checkpoint  # noqa: E402

from mlxd.engine import Engine, EngineConfig, EngineRequest  # noqa: E402
from mlxd.types import FinishEvent, SamplingParams, TokenEvent  # noqa: E402


def prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(10, vocab) for _ in range(length)] for _ in range(n)]


# ---- raw mlx-lm ----------------------------------------------------------------------


def raw_single(model, prompt: list[int], n: int) -> float:
    """Decode tok/s of mlx-lm's single-stream loop (`generate_step`, the loop under
    stream_generate), first token excluded (it carries the prefill). Token ids only, as the
    engine's consumer here takes them: stream_generate also detokenizes and builds a
    response per token on the timed thread, which the engine side does not do."""
    times = []
    for _ in zip(generate_step(mx.array(prompt), model, max_tokens=n), range(n), strict=False):
        times.append(time.perf_counter())
    return (len(times) - 1) / (times[-1] - times[0])


def raw_stream(model, tokenizer, prompt: list[int], n: int) -> float:
    """Decode tok/s of stream_generate (text per token), first token excluded."""
    tokenizer.eos_token_ids = set()
    times = []
    for _ in stream_generate(model, tokenizer, mx.array(prompt), max_tokens=n):
        times.append(time.perf_counter())
    return (len(times) - 1) / (times[-1] - times[0])


def raw_batch(model, batch: list[list[int]], n: int) -> float:
    """Aggregate decode tok/s of BatchGenerator, from the first generated token to the last."""
    gen = BatchGenerator(
        model, max_tokens=n, completion_batch_size=len(batch), prefill_batch_size=len(batch)
    )
    gen.insert(batch, max_tokens=[n] * len(batch))
    first = None
    count = 0
    while True:
        responses = gen.next_generated()
        if not responses:
            break
        if first is None:
            first = time.perf_counter()
        else:
            count += len(responses)
        if all(r.finish_reason for r in responses) and len(gen._generation_batch) == 0:
            break
    last = time.perf_counter()  # before close(): the window ends at the last token, as below
    gen.close()
    return count / (last - first)


def raw_wave_ttft(model, batch: list[list[int]]) -> float:
    """mlx-lm's wave behaviour: the whole wave is prefilled before anyone decodes."""
    gen = BatchGenerator(
        model, max_tokens=1, completion_batch_size=len(batch), prefill_batch_size=len(batch)
    )
    t0 = time.perf_counter()
    gen.insert(batch, max_tokens=[1] * len(batch))
    ttfts: list[float] = []
    while len(ttfts) < len(batch):
        for _ in gen.next_generated():
            ttfts.append(time.perf_counter() - t0)
    gen.close()
    return statistics.mean(ttfts)


# ---- engine --------------------------------------------------------------------------


async def _consume(handle, t0: float) -> tuple[float, float, int]:
    first = last = 0.0
    count = 0
    async for ev in handle:
        if isinstance(ev, TokenEvent):
            now = time.perf_counter()
            if count == 0:
                first = now
            last = now
            count += len(ev.token_ids)
        elif isinstance(ev, FinishEvent) and ev.error:
            raise RuntimeError(ev.error)
    return first - t0, last, count


def engine_run(engine: Engine, name: str, batch: list[list[int]], n: int) -> dict:
    params = SamplingParams(max_tokens=n, ignore_eos=True)

    async def go():
        t0 = time.perf_counter()
        handles = [
            engine.submit(EngineRequest(model=name, prompt_ids=p, params=params)) for p in batch
        ]
        return t0, await asyncio.gather(*(_consume(h, t0) for h in handles))

    t0, results = asyncio.run(go())
    first = min(t0 + r[0] for r in results)
    last = max(r[1] for r in results)
    tokens = sum(r[2] for r in results) - len(results)  # first tokens carry the prefill
    return {
        "ttft_mean": statistics.mean(r[0] for r in results),
        "ttfts": sorted(round(r[0], 3) for r in results),
        "decode_tps": tokens / max(last - first, 1e-9),
    }


# ---- sections ------------------------------------------------------------------------


def alternate(a, b, repeats: int, warm: bool = True, c=None) -> dict:
    """A and B (and C) run in turns (ABBA order, after one untimed warm-up of each), medians
    reported. `ratio_paired` is the median of each turn's A/B: two runs side by side share
    the machine's load, so it drifts less on a busy machine; `pair_min`/`pair_max` show the
    spread. `ratio_best` compares the best run of each (timeit's rule: noise only ever slows
    a run down, and this machine has seconds-long slow phases of up to 2x). `cpu_ratio` is
    B's process CPU time per run over A's (all threads; the steadier figure of the work
    each does under load, >1: A works less). C, when given, is a second B (`vs_c`)."""
    runs = {"a": a, "b": b} | ({"c": c} if c is not None else {})
    if warm:
        for fn in runs.values():
            fn()
    out: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    for i in range(repeats):
        for k in list(runs) if i % 2 == 0 else list(runs)[::-1]:
            c0 = time.process_time()
            out[k].append(runs[k]())
            cpu[k].append(time.process_time() - c0)
    result = _ratios(out["a"], out["b"], cpu["a"], cpu["b"])
    if c is not None:
        vs_c = _ratios(out["a"], out["c"], cpu["a"], cpu["c"])
        result["vs_c"] = {"c": vs_c.pop("raw"), **{k: v for k, v in vs_c.items() if k != "engine"}}
    return result


def _ratios(ra: list[float], rb: list[float], ca: list[float], cb: list[float]) -> dict:
    ma, mb = statistics.median(ra), statistics.median(rb)
    pairs = [x / y for x, y in zip(ra, rb, strict=True)]
    return {
        "engine": round(ma, 2),
        "raw": round(mb, 2),
        "ratio": round(ma / mb, 3),
        "ratio_paired": round(statistics.median(pairs), 3),
        "ratio_best": round(max(ra) / max(rb), 3),
        "pair_min": round(min(pairs), 3),
        "pair_max": round(max(pairs), 3),
        "cpu_ratio": round(statistics.median(y / x for x, y in zip(ca, cb, strict=True)), 3),
    }


def section_single(ckpt: Path, n: int, repeats: int) -> dict:
    model, tok = load(str(ckpt))
    engine = Engine(EngineConfig.from_settings(max_batch=1, prefix_cache_bytes=0))
    info = engine.load_model(ckpt, name="bench")
    p = prompts(1, 16, len(tok.get_vocab()))[0]
    try:
        r = alternate(
            lambda: engine_run(engine, info.name, [p], n)["decode_tps"],
            lambda: raw_single(model, p, n),
            repeats,
            c=lambda: raw_stream(model, tok, p, n),
        )
    finally:
        engine.close()
    r["raw_is"] = "generate_step (token ids)"
    r["vs_stream_generate"] = r.pop("vs_c")
    r["tokens"] = n
    return r


def section_batch(ckpt: Path, n: int, repeats: int, sizes: list[int]) -> dict:
    """Like with like: raw BatchGenerator prefills the whole wave in one group, so the engine
    does too (prefill_group_tokens=0: up to prefill_batch, 16, prompts per group). With its
    planner on, the engine may start a burst in groups (first streams earlier: the ttft
    section and server_bench measure that), and the decode window would then include the
    later groups' prefills and the tail where fewer rows decode. `first_token_spread_s`
    (median over the engine's runs) shows whether the rows started together."""
    model, tok = load(str(ckpt))
    out = {}
    cfg = dict(max_batch=max(sizes), prefix_cache_bytes=0, prefill_group_tokens=0)
    engine = Engine(EngineConfig.from_settings(**cfg))
    info = engine.load_model(ckpt, name="bench")
    try:
        for b in sizes:
            batch = prompts(b, 16, len(tok.get_vocab()), seed=b)
            spread: list[float] = []

            def run_engine(batch=batch, spread=spread) -> float:
                r = engine_run(engine, info.name, batch, n)
                spread.append(r["ttfts"][-1] - r["ttfts"][0])
                return r["decode_tps"]

            out[str(b)] = alternate(
                run_engine, lambda batch=batch: raw_batch(model, batch, n), repeats
            )
            out[str(b)]["first_token_spread_s"] = round(statistics.median(spread), 3)
    finally:
        engine.close()
    return out


def section_ttft(ckpt: Path, repeats: int) -> dict:
    """4 concurrent 256-token prompts. First come first served, each prompt's first token
    would come at 1/4, 2/4, 3/4 and 4/4 of the wave's prefill time: mean 0.625 of it."""
    model, tok = load(str(ckpt))
    engine = Engine(EngineConfig.from_settings(max_batch=8, prefix_cache_bytes=0))
    info = engine.load_model(ckpt, name="bench")
    batch = prompts(4, 256, len(tok.get_vocab()), seed=7)
    each: list[list[float]] = []

    def run_engine() -> float:
        r = engine_run(engine, info.name, batch, 4)
        each.append(r["ttfts"])
        return r["ttft_mean"]

    try:
        r = alternate(run_engine, lambda: raw_wave_ttft(model, batch), repeats, warm=False)
    finally:
        engine.close()
    return {
        "mean_ttft_s_engine": r["engine"],
        "mean_ttft_s_whole_wave": r["raw"],
        "ratio": r["ratio"],
        "ratio_paired": r["ratio_paired"],
        "fcfs_ideal_ratio": 0.625,
        "engine_ttfts_s_each_run": each,
    }


def section_turn(ckpt: Path, repeats: int) -> dict:
    """One engine: turn 2 extends a cached history (hit) vs a same-length unseen one (cold)."""
    vocab = json.loads((ckpt / "config.json").read_text())["vocab_size"]
    engine = Engine(EngineConfig.from_settings(max_batch=1))
    info = engine.load_model(ckpt, name="bench")
    hot_t, cold_t, cached = [], [], []
    try:
        for i in range(repeats):
            history = prompts(1, 1000, vocab, seed=3 + i)[0]
            engine_run(engine, info.name, [history], 8)  # turn 1 fills the prefix cache
            new = prompts(1, 20, vocab, seed=100 + i)[0]
            hot_t.append(_first_token(engine, info.name, history + new, cached))
            unseen = prompts(1, 1000, vocab, seed=1000 + i)[0]
            cold_t.append(_first_token(engine, info.name, unseen + new, []))
    finally:
        engine.close()
    return {
        "ttft_s_cache_hit": round(statistics.median(hot_t), 4),
        "ttft_s_cold": round(statistics.median(cold_t), 4),
        "speedup": round(statistics.median(cold_t) / statistics.median(hot_t), 2),
        "cached_tokens": cached,
    }


def _first_token(engine: Engine, name: str, prompt: list[int], cached: list[int]) -> float:
    params = SamplingParams(max_tokens=2, ignore_eos=True)
    t0 = time.perf_counter()
    handle = engine.submit(EngineRequest(model=name, prompt_ids=prompt, params=params))
    first = 0.0
    for ev in handle:
        if isinstance(ev, TokenEvent) and not first:
            first = time.perf_counter() - t0
        if isinstance(ev, FinishEvent):
            cached.append(ev.usage.cached_tokens)
    return first


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sections", default="single,batch,ttft,turn")
    ap.add_argument("--sizes", default="1,4,8,16")
    ap.add_argument("--models", default="big,small", help="checkpoints for single/batch")
    ap.add_argument("--demo", type=Path, help="also a checkpoint dir (e.g. the imported SmolLM2)")
    ap.add_argument("--dtype", default="float16", help="weights of the ~29M checkpoint")
    args = ap.parse_args()
    models = set(args.models.split(",")) | ({"demo"} if args.demo else set())
    sections = set(args.sections.split(","))
    sizes = [int(s) for s in args.sizes.split(",")]
    tmp = scratch("mlxd-bench-")
    needs_big = "big" in models or sections & {"ttft", "turn"}
    big = make_checkpoint(tmp / "big", "big", dtype=args.dtype) if needs_big else tmp / "big"
    small = make_checkpoint(tmp / "small", "small")
    result: dict = {
        "blas": BLAS,
        "checkpoints": {"big": f"~29M params {args.dtype}", "small": "~0.25M params float32"},
        "tokens": args.tokens,
        "repeats": args.repeats,
    }
    if "single" in sections:
        result["single_stream_decode_tps"] = {
            name: section_single(ckpt, args.tokens * mult, args.repeats)
            for name, ckpt, mult in (("big", big, 1), ("small", small, 16), ("demo", args.demo, 1))
            if name in models
        }
    if "batch" in sections:
        result["aggregate_decode_tps"] = {
            name: section_batch(ckpt, args.tokens * mult, args.repeats, sizes)
            for name, ckpt, mult in (("big", big, 1), ("small", small, 4))
            if name in models
        }
    if "ttft" in sections:
        result["ttft_4x256"] = section_ttft(big, args.repeats)
    if "turn" in sections:
        result["second_turn_1000_history"] = section_turn(big, args.repeats)
    emit(result)


if __name__ == "__main__":
    main()
