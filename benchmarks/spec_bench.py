"""Speculative decoding on the demo model with copy-heavy work (issue 14); prints JSON.

    python -m benchmarks.spec_bench                               # engine mode, ~2-3 min
    python -m benchmarks.spec_bench --rounds 2 --servers mlxd,mlxd-ngram,mlxd-draft,mlx_lm-draft

Engine mode (default): the same greedy requests (repeat, fix or edit a given paragraph or
piece of code) without speculation (`plain`), with `ngram` speculation as the engine runs it
(the drafting policy, speculation/draft_policy.py, picks each step's verify width from measured
costs) and with every draft verified (`ngram_every`, the policy's costs forced flat: the
engine before the policy), on one engine, alternating (ABC CBA per round), at each batch
size: aggregate tokens/s, `speedup` (ngram over plain), `speedup_every_draft_verified`
(ngram_every over plain), tokens per target forward pass of `ngram` (pooled over requests,
forwards counted by forwards_of), its acceptance rate, and whether every output of each kind
is identical to the one without speculation. `step_cost_ratio` is the
time of one (K+1)-token forward over one 1-token forward at the same batch size and context
(the model alone); `engine_step_cost_ratio` the same for whole engine steps (a wave's seconds
over its longest request's forwards, speculating over not), which also counts the per-step
work outside the model. The speed-up is about tokens per forward over the step-cost ratio:
on a CPU the ratio is close to K+1, which hides the gain; where it is near 1 (Apple silicon
at small batches) the speed-up approaches the tokens per forward.

Server mode (--servers; after engine mode unless --no-engine): 8 concurrent streaming
clients, each sending --requests-per-client copy tasks one after another, against `mlxd
serve` without speculation (`mlxd`), with `--draft-kind ngram` (`mlxd-ngram`), with the
model as its own draft (`mlxd-draft`, skipped when this mlxd has no --draft-model), and
`mlx_lm.server --draft-model` with the same self-draft (`mlx_lm-draft`; --mlx-lm-python
picks its venv). Each round starts every server in turn, in alternating order; the median
round is kept (of two, the better). Every server runs with Intel MKL. Reported: aggregate
completion tokens/s and the ratio to `mlx_lm-draft`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import (
    blas_env,
    emit,
    fast_blas,
    free_port,
    mlxd_serve,
    progress,
    running,
    stream_chat,
)

fast_blas()  # before mlx is imported

from mlxd.backend.mlx_lm import compat  # noqa: E402
from mlxd.backend.speculation.draft_policy import StepCosts  # noqa: E402
from mlxd.engine import Engine, EngineConfig, EngineRequest  # noqa: E402
from mlxd.store.default_model import default_model  # noqa: E402
from mlxd.types import DraftKind, FinishEvent, SamplingParams  # noqa: E402

PARAGRAPH = (
    "The committee met on Tuesday to review the budget for the new library. After a long "
    "discussion, the members agreed that the reading room should stay open until nine in the "
    "evening, that the children's section needs new shelves, and that the roof must be "
    "repaired before winter. The treasurer said the money for the roof is already set aside."
)
CODE = (
    "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
    "    return total / len(values)\n\n\ndef variance(values):\n    m = mean(values)\n"
    "    total = 0\n    for v in values:\n        total += (v - m) ** 2\n"
    "    return total / len(value)\n"
)
TASKS = [
    f"Repeat this paragraph exactly, word for word:\n\n{PARAGRAPH}",
    f"Fix the bug in this code and print the whole corrected code:\n\n{CODE}",
    f"Rewrite this paragraph, changing only 'Tuesday' to 'Monday':\n\n{PARAGRAPH}",
    f"Copy this code exactly, adding a docstring to each function:\n\n{CODE}",
]
SERVERS = ("mlxd", "mlxd-ngram", "mlxd-draft", "mlx_lm-draft")


# ---- engine mode ------------------------------------------------------------------------


def task_prompts(path: Path) -> list[list[int]]:
    """TASKS as the demo model's chat prompts (token ids)."""
    tokenizer = compat.load_tokenizer(path)
    return [
        list(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": t}], add_generation_prompt=True
            )
        )
        for t in TASKS
    ]


def wave(
    engine: Engine, model: str, prompts: list[list[int]], params: SamplingParams
) -> tuple[list[list[int]], list[FinishEvent], float]:
    """Submit every prompt at once; (outputs, finishes, wall seconds)."""
    started = time.perf_counter()
    handles = [engine.submit(EngineRequest(model, p, params)) for p in prompts]
    done = [h.collect() for h in handles]
    return [d[0] for d in done], [d[1] for d in done], time.perf_counter() - started


@contextmanager
def every_draft_verified(on: bool) -> Iterator[None]:
    """While on, the drafting policy sees every width and reading the sampled tokens as free
    (and the plain step measured): every draft is verified, as before the policy."""
    if not on:
        yield
        return
    ratio, needs_plain, look = StepCosts.ratio, StepCosts.needs_plain, StepCosts.look_cost
    StepCosts.ratio = lambda self, rows, width, kinds="": 1.0
    StepCosts.needs_plain = lambda self, rows: False
    StepCosts.look_cost = lambda self, rows: 0.0
    try:
        yield
    finally:
        StepCosts.ratio, StepCosts.needs_plain, StepCosts.look_cost = ratio, needs_plain, look


def forwards_of(finish: FinishEvent) -> int:
    """Target forwards that made one request's tokens: its prefill's last one (the first
    token), then one per decode step, which emits its next token plus the drafts accepted."""
    return finish.usage.completion_tokens - finish.timings.accepted_draft_tokens + 1


def bench_size(
    engine: Engine, model: str, prompts: list[list[int]], args: argparse.Namespace
) -> dict[str, Any]:
    plain = SamplingParams(max_tokens=args.tokens)
    spec = SamplingParams(
        max_tokens=args.tokens, draft_kind=DraftKind.NGRAM, num_draft_tokens=args.k
    )
    kinds = ("plain", "ngram", "ngram_every")
    speeds: dict[str, list[float]] = {kind: [] for kind in kinds}
    step_s: dict[str, list[float]] = {kind: [] for kind in kinds}  # wave s per batch step
    outputs: dict[str, list[list[int]]] = {}
    identical = True
    completion = accepted = drafted = forwards = 0
    every = [0, 0]  # [completion tokens, forwards] with every draft verified
    by_task = [[0, 0] for _ in TASKS]  # [completion tokens, forwards] per task
    for _ in range(args.rounds):
        for kind in (*kinds, *reversed(kinds)):
            with every_draft_verified(kind == "ngram_every"):
                params = plain if kind == "plain" else spec
                outs, finishes, secs = wave(engine, model, prompts, params)
            speeds[kind].append(sum(len(o) for o in outs) / secs)
            step_s[kind].append(secs / max(forwards_of(f) for f in finishes))
            identical = identical and outputs.setdefault(kind, outs) == outs
            if kind == "ngram_every":
                every[0] += sum(f.usage.completion_tokens for f in finishes)
                every[1] += sum(forwards_of(f) for f in finishes)
            if kind == "ngram":
                completion += sum(f.usage.completion_tokens for f in finishes)
                forwards += sum(forwards_of(f) for f in finishes)
                for i, f in enumerate(finishes):
                    by_task[i % len(TASKS)][0] += f.usage.completion_tokens
                    by_task[i % len(TASKS)][1] += forwards_of(f)
                drafted += sum(f.timings.draft_tokens for f in finishes)
                accepted += sum(f.timings.accepted_draft_tokens for f in finishes)
    tps = {kind: statistics.median(speeds[kind]) for kind in kinds}
    return {
        "tokens_per_s_plain": round(tps["plain"], 2),
        "tokens_per_s_ngram": round(tps["ngram"], 2),
        "speedup": round(tps["ngram"] / tps["plain"], 3),
        "speedup_every_draft_verified": round(tps["ngram_every"] / tps["plain"], 3),
        "tokens_per_target_forward": round(completion / max(forwards, 1), 3),
        # the drafts' own yield: what a verify forward brings when width costs nothing
        "tokens_per_target_forward_every_draft_verified": round(every[0] / max(every[1], 1), 3),
        # a wave lasts as long as its slowest row: the task that drafts worst bounds the speed-up
        "tokens_per_target_forward_by_task": [round(c / f, 3) for c, f in by_task if f],
        "engine_step_cost_ratio": round(
            statistics.median(step_s["ngram"]) / statistics.median(step_s["plain"]), 3
        ),
        "drafted": drafted,
        "accepted": accepted,
        "acceptance": round(accepted / drafted, 3) if drafted else 0.0,
        "identical_to_plain": identical
        and outputs["plain"] == outputs["ngram"] == outputs["ngram_every"],
        "completion_tokens_per_wave": sum(len(o) for o in outputs["plain"]),
    }


def step_cost_ratio(path: Path, k: int, batch: int, context: int = 200, reps: int = 8) -> float:
    """Median seconds of a (batch, k+1) forward over a (batch, 1) forward after `context`
    cached tokens (the cache is trimmed back after each timed forward)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    model, _ = compat.load(path, trust_remote_code=False)
    cache = make_prompt_cache(model)
    mx.eval(model(mx.full((batch, context), 7, dtype=mx.uint32), cache=cache))

    def timed(width: int) -> float:
        times = []
        for _ in range(reps):
            started = time.perf_counter()
            mx.eval(model(mx.full((batch, width), 5, dtype=mx.uint32), cache=cache))
            times.append(time.perf_counter() - started)
            compat.trim_cache(cache, width)
        return statistics.median(times)

    timed(1)  # warm-up
    return timed(k + 1) / timed(1)


def engine_mode(args: argparse.Namespace) -> dict[str, Any]:
    ref = default_model()
    prompts = task_prompts(ref.path)
    report: dict[str, Any] = {"model": ref.name}
    engine = Engine(EngineConfig.from_settings(max_batch=max(args.sizes)))
    try:
        info = engine.load_model(ref.path)
        wave(engine, info.name, prompts, SamplingParams(max_tokens=1))  # warm-up, prompts cached
        for size in args.sizes:
            batch = [prompts[i % len(prompts)] for i in range(size)]
            report[f"batch_{size}"] = bench_size(engine, info.name, batch, args)
            progress(f"batch {size}", report[f"batch_{size}"])
    finally:
        engine.close()
    report["step_cost_ratio"] = {
        f"batch_{size}": round(step_cost_ratio(ref.path, args.k, size), 3) for size in args.sizes
    }
    return report


# ---- server mode ------------------------------------------------------------------------


def server_command(kind: str, model: Path, port: int, args: argparse.Namespace) -> list[str]:
    k = str(args.k)
    if kind.startswith("mlx_lm"):
        python = args.mlx_lm_python or sys.executable
        return [python, "-m", "mlx_lm.server", "--model", str(model), "--port", str(port),
                "--draft-model", str(model), "--num-draft-tokens", k]  # fmt: skip
    spec = {
        "mlxd": [],
        "mlxd-ngram": ["--draft-kind", "ngram", "--num-draft-tokens", k],
        "mlxd-draft": [
            "--draft-model",
            str(model),
            "--draft-kind",
            "model",
            "--num-draft-tokens",
            k,
        ],
    }
    return mlxd_serve(model, port, *spec[kind])


def mlxd_has_draft_model() -> bool:
    help_text = subprocess.run(
        [sys.executable, "-m", "mlxd.cli.main", "serve", "--help"], capture_output=True, text=True
    ).stdout
    return "--draft-model" in help_text


async def clients(url: str, model: str, args: argparse.Namespace) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=args.clients + 4)
    async with httpx.AsyncClient(timeout=900, limits=limits) as client:

        async def worker(cid: int) -> int:
            tokens = 0
            for n in range(args.requests_per_client):
                task = TASKS[(cid + n) % len(TASKS)]
                body = {
                    "model": model,
                    "messages": [{"role": "user", "content": f"(client {cid}, task {n})\n{task}"}],
                    "max_tokens": args.tokens,
                    "temperature": 0.0,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
                tokens += (await stream_chat(client, url, body)).tokens
            return tokens

        started = time.perf_counter()
        counts = await asyncio.gather(*(worker(c) for c in range(args.clients)))
        wall = time.perf_counter() - started
    return {
        "tokens": sum(counts),
        "wall_s": round(wall, 2),
        "agg_tok_s": round(sum(counts) / wall, 2),
    }


def one_server(kind: str, path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Start one server, warm it with one request, run the clients, stop it."""
    cmd = server_command(kind, path, port := free_port(), args)
    python = args.mlx_lm_python or sys.executable
    env = blas_env(dict(os.environ), "mkl", python, peer=not kind.startswith("mlxd"))
    with running(cmd, port, env) as url:
        model = "default" if kind.startswith("mlxd") else str(path)
        warm = argparse.Namespace(**{**vars(args), "clients": 1, "requests_per_client": 1})
        asyncio.run(clients(url, model, warm))
        return asyncio.run(clients(url, model, args))


def server_mode(args: argparse.Namespace) -> dict[str, Any]:
    """Every server once per round, in alternating order; the median round per server."""
    ref = default_model()
    report: dict[str, Any] = {
        "clients": args.clients, "requests_per_client": args.requests_per_client,
        "rounds": args.rounds,
    }  # fmt: skip
    kinds = list(args.servers)
    if "mlxd-draft" in kinds and not mlxd_has_draft_model():
        kinds.remove("mlxd-draft")
        report["mlxd-draft"] = {"skipped": "this mlxd has no serve --draft-model"}
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    for round_ in range(args.rounds):
        for kind in kinds if round_ % 2 == 0 else kinds[::-1]:
            runs[kind].append(one_server(kind, ref.path, args))
            progress(kind, runs[kind][-1])
    for kind, results in runs.items():
        results.sort(key=lambda r: r["agg_tok_s"])
        report[kind] = {
            **results[len(results) // 2],
            "agg_tok_s_rounds": [r["agg_tok_s"] for r in results],
        }
    peer = report.get("mlx_lm-draft", {}).get("agg_tok_s")
    for kind in kinds:
        if peer and kind != "mlx_lm-draft":
            report[kind]["vs_mlx_lm_draft"] = round(report[kind]["agg_tok_s"] / peer, 3)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=96, help="max_tokens per request")
    ap.add_argument("--k", type=int, default=4, help="num_draft_tokens")
    ap.add_argument("--sizes", default="1,8", help="engine mode: batch sizes")
    ap.add_argument("--rounds", type=int, default=1, help="ABBA rounds per size; server rounds")
    ap.add_argument("--servers", default="", help=f"also server mode: some of {','.join(SERVERS)}")
    ap.add_argument("--no-engine", action="store_true", help="server mode only")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--mlx-lm-python", default="/work/peers/mlxlm/bin/python")
    args = ap.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.servers = [s for s in args.servers.split(",") if s]
    unknown = set(args.servers) - set(SERVERS)
    if unknown:
        ap.error(f"unknown servers: {sorted(unknown)}")
    report: dict[str, Any] = {"k": args.k, "tokens": args.tokens}
    if not args.no_engine:
        report["engine"] = engine_mode(args)
    if args.servers:
        report["servers"] = server_mode(args)
    emit(report)


if __name__ == "__main__":
    main()
