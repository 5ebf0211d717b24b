"""Structured output benchmarks, in-process on the real engine; prints JSON (issue 15).

  python -m benchmarks.structured_bench [--model DIR] [--tokens 64] [--clients 8] [--rounds 2]
                                        [--requests 3] [--sections mask,throughput]

Sections:
  mask        mask cost per constrained token (microseconds of the engine thread's CPU time)
              with 1 and with 8 constrained requests decoding at once: what GrammarMask spends
              feeding the grammar and computing the next mask, excluding its wait for the
              previous step's token (that wait is the step itself); also decode tok/s
              constrained vs free at the same size
  throughput  aggregate completion tok/s of `--clients` closed-loop clients (threads calling
              the chat layer, as the server's handlers do), half of them constrained, against
              all of them free (goal: ratio >= 0.9); rounds run in ABBA order and the median of
              the per-pair ratios is reported (ratio_paired), the steadier figure on a shared
              machine. cpu_ratio compares the process's CPU time per token (free / half), which
              other processes on the machine disturb less than wall time; decode_step_ms is the
              median time of one engine step decoding a full batch with 0 and with half of its
              rows constrained (step_ratio = free / half), the most direct figure
Without --model a ~0.25M-parameter checkpoint ("small", tests/checkpoints.py) is built: its
steps take a few milliseconds, so per-token overhead shows most there. Free requests ignore
EOS and run --tokens tokens; constrained ones answer an array of exactly N one-digit
integers, N chosen so their answers are about as long (reported as tokens_per_request).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import emit, fast_blas

fast_blas()  # before mlx is imported

from tests.checkpoints import make_checkpoint  # noqa: E402

from mlxd.backend import batch  # noqa: E402
from mlxd.backend.structured import grammar_mask  # noqa: E402
from mlxd.chat.chat_request import ChatRequest  # noqa: E402
from mlxd.chat.options import ChatOptions  # noqa: E402
from mlxd.chat.session import start_chat  # noqa: E402
from mlxd.engine import Engine, EngineConfig, ModelInfo  # noqa: E402
from mlxd.types import FinishEvent, FinishReason  # noqa: E402

NO_THINK = {"enable_thinking": False}


def digits_schema(items: int) -> dict[str, Any]:
    digit = {"type": "integer", "minimum": 0, "maximum": 9}
    return {"type": "array", "items": digit, "minItems": items, "maxItems": items}


def options(constrained: bool, tokens: int, items: int) -> dict[str, Any]:
    if not constrained:
        return {"max_tokens": tokens, "ignore_eos": True}
    fmt = {"type": "json_schema", "json_schema": {"name": "d", "schema": digits_schema(items)}}
    return {"max_tokens": 4 * tokens, "response_format": fmt}


def ask(engine: Engine, info: ModelInfo, i: int, opts: dict[str, Any]) -> tuple[int, float]:
    """One request to the end: (completion tokens, seconds)."""
    t0 = time.perf_counter()
    messages = [{"role": "user", "content": f"Request {i}: list some digits."}]
    request = ChatRequest(messages, ChatOptions.parse(opts), template_kwargs=NO_THINK)
    events = list(start_chat(engine, info, request))
    finish = events[-1]
    assert isinstance(finish, FinishEvent) and finish.reason is not FinishReason.ERROR, finish
    return finish.usage.completion_tokens, time.perf_counter() - t0


def items_for(engine: Engine, info: ModelInfo, tokens: int) -> tuple[int, int]:
    """N such that an answer of N digits takes about `tokens` tokens; (N, its tokens)."""
    used, _ = ask(engine, info, 0, options(True, tokens, 8))
    per_item = max(1.0, (used - 1) / 8)
    items = max(1, round((tokens - 1) / per_item))
    return items, ask(engine, info, 0, options(True, tokens, items))[0]


class MaskTimer:
    """Times GrammarMask's own work per token (feeding the previous token, computing the next
    mask) in CPU time of the engine thread: on a loaded machine wall time also counts the
    time the thread waits for a core."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._fed = 0.0

    def __enter__(self) -> MaskTimer:
        cls = grammar_mask.GrammarMask
        self._saved = (cls._advance, cls._allowed)
        advance, allowed = self._saved

        def timed_advance(mask: grammar_mask.GrammarMask, token: int) -> None:
            t0 = time.thread_time()
            try:
                advance(mask, token)
            finally:
                self._fed = time.thread_time() - t0

        def timed_allowed(mask: grammar_mask.GrammarMask, width: int) -> Any:
            t0 = time.thread_time()
            try:
                return allowed(mask, width)
            finally:
                self.samples.append(time.thread_time() - t0 + self._fed)
                self._fed = 0.0

        cls._advance, cls._allowed = timed_advance, timed_allowed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        grammar_mask.GrammarMask._advance, grammar_mask.GrammarMask._allowed = self._saved  # type: ignore[method-assign]


class StepTimer:
    """Durations of BatchRunner.step() by (sequences that got a token, constrained ones)."""

    def __init__(self) -> None:
        self.steps: dict[tuple[int, int], list[float]] = {}
        self._masks = 0

    def __enter__(self) -> StepTimer:
        runner, mask = batch.BatchRunner, grammar_mask.GrammarMask
        self._saved = (runner.step, mask.__call__)
        step, call = self._saved

        def counted(m: grammar_mask.GrammarMask, tokens: Any, logits: Any) -> Any:
            self._masks += 1
            return call(m, tokens, logits)

        def timed(r: batch.BatchRunner) -> Any:
            self._masks = 0
            t0 = time.perf_counter()
            result = step(r)
            key = (len(result.tokens), self._masks)
            self.steps.setdefault(key, []).append(time.perf_counter() - t0)
            return result

        runner.step, mask.__call__ = timed, counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        batch.BatchRunner.step, grammar_mask.GrammarMask.__call__ = self._saved  # type: ignore[method-assign]

    def median_ms(self, tokens: int, masks: int) -> float | None:
        times = self.steps.get((tokens, masks))
        return round(1e3 * statistics.median(times), 2) if times else None


def concurrent(n: int, work: Callable[[int], tuple[int, float]]) -> tuple[int, float]:
    """Run work(0..n-1) on n threads at once: (total tokens, wall seconds)."""
    results: list[tuple[int, float]] = [(0, 0.0)] * n
    barrier = threading.Barrier(n + 1)

    def run(i: int) -> None:
        barrier.wait()
        results[i] = work(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return sum(r[0] for r in results), time.perf_counter() - t0


def mask_section(engine: Engine, info: ModelInfo, tokens: int, items: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for size in (1, 8):
        done = free = 0
        wall = free_wall = 0.0
        with MaskTimer() as timer:  # free requests have no mask: they add no samples
            for _ in range(3):  # alternate, so both see the same machine
                count, seconds = concurrent(
                    size, lambda i: ask(engine, info, i, options(True, tokens, items))
                )
                done, wall = done + count, wall + seconds
                count, seconds = concurrent(
                    size, lambda i: ask(engine, info, i, options(False, tokens, items))
                )
                free, free_wall = free + count, free_wall + seconds
        us = sorted(1e6 * s for s in timer.samples)
        out[f"batch_{size}"] = {
            "mask_us_per_token": {
                "median": round(statistics.median(us), 1),
                "p90": round(us[int(0.9 * (len(us) - 1))], 1),
                "mean": round(statistics.fmean(us), 1),
                "tokens": len(us),
            },
            "constrained_tok_s": round(done / wall, 1),
            "free_tok_s": round(free / free_wall, 1),
        }
    return out


def throughput_section(
    engine: Engine,
    info: ModelInfo,
    tokens: int,
    items: int,
    clients: int,
    rounds: int,
    per_client: int,
) -> dict[str, Any]:
    def wave(half: bool) -> tuple[float, float]:
        """(aggregate tok/s, CPU microseconds per token) of one wave of all clients."""

        def client(i: int) -> tuple[int, float]:
            constrained = half and i < clients // 2
            total = 0
            t0 = time.perf_counter()
            for r in range(per_client):
                total += ask(engine, info, i * 100 + r, options(constrained, tokens, items))[0]
            return total, time.perf_counter() - t0

        cpu = time.process_time()
        count, wall = concurrent(clients, client)
        return count / wall, 1e6 * (time.process_time() - cpu) / count

    wave(True)  # warm-up: grammar cache, MLX kernels
    free: list[tuple[float, float]] = []
    half: list[tuple[float, float]] = []
    with StepTimer() as steps:
        for _ in range(rounds):  # A B B A
            free.append(wave(False))
            half += [wave(True), wave(True)]
            free.append(wave(False))
    step_free = steps.median_ms(clients, 0)
    step_half = steps.median_ms(clients, clients // 2)
    pairs = [(half[2 * k : 2 * k + 2], free[2 * k : 2 * k + 2]) for k in range(rounds)]
    ratios = [sum(h[0] for h in hs) / sum(f[0] for f in fs) for hs, fs in pairs]
    cpu_ratios = [sum(f[1] for f in fs) / sum(h[1] for h in hs) for hs, fs in pairs]
    return {
        "clients": clients,
        "constrained_clients": clients // 2,
        "free_tok_s": [round(v[0], 1) for v in free],
        "half_constrained_tok_s": [round(v[0], 1) for v in half],
        "free_cpu_us_per_token": [round(v[1], 1) for v in free],
        "half_constrained_cpu_us_per_token": [round(v[1], 1) for v in half],
        "ratio_paired": round(statistics.median(ratios), 3),
        "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        "cpu_ratio_paired": round(statistics.median(cpu_ratios), 3),
        "cpu_ratio_range": [round(min(cpu_ratios), 3), round(max(cpu_ratios), 3)],
        "decode_step_ms": {"free": step_free, "half_constrained": step_half},
        "step_ratio": round(step_free / step_half, 3) if step_free and step_half else None,
        "goal": 0.9,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, help="checkpoint dir (default: the small tiny one)")
    ap.add_argument("--tokens", type=int, default=64, help="tokens per answer")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2, help="ABBA pairs")
    ap.add_argument("--requests", type=int, default=3, help="requests per client and wave")
    ap.add_argument("--sections", default="mask,throughput")
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or make_checkpoint(Path(tmp) / "small", "small")
        engine = Engine(EngineConfig.from_settings(max_batch=args.clients))
        try:
            info = engine.load_model(model)
            items, used = items_for(engine, info, args.tokens)
            report: dict[str, Any] = {
                "model": str(args.model) if args.model else "tests/checkpoints.py small",
                "vocab": info.vocab_size,
                "tokens_per_request": {"free": args.tokens, "constrained": used, "items": items},
            }
            if "mask" in sections:
                report["mask"] = mask_section(engine, info, args.tokens, items)
            if "throughput" in sections:
                report["throughput"] = throughput_section(
                    engine, info, args.tokens, items, args.clients, args.rounds, args.requests
                )
        finally:
            engine.close()
    emit(report)


if __name__ == "__main__":
    main()
