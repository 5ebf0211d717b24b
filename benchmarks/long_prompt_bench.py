"""Do decoding streams keep flowing while a long prompt arrives? `mlxd serve` against
`mlx_lm.server` and vllm-mlx on one checkpoint, side by side in one run.

Per server: 4 streaming chat clients decode (EOS suppressed with logit_bias) for --before
seconds, then one --long-token prompt arrives (max_tokens 1, so its answer time is its time
to first token); --after seconds after it is answered the streams close. Each stream's
inter-token gaps are classed by the arrival of their later token: before the long request,
during it (sent to answered), after it. Per phase: median, p99 and p99/median of the 4
streams' gaps, and `p99_during_over_median_before`, the rows' worst stall against their usual
pace (issue 30's goal: <= 3, and below both peers'). The checkpoint is the generated `long2`
llama (two layers, a 32k window: a 16k prompt prefills in seconds to tens of seconds on CPU;
the `plain` template: no reasoning or tool markers, so every token streams as content);
peers run with their defaults (vllm-mlx with --continuous-batching). `mlxd` streams as it
ships (tokens coalesced into a chunk at most every MLXD_STREAM_INTERVAL_MS, 20 ms);
`mlxd-per-token` sets it to 0, one chunk per token as the peers send them: its gaps are the
engine's steps, and the goal is judged on it.

    python -m benchmarks.long_prompt_bench --servers mlxd,mlxd-per-token,mlx_lm,vllm-mlx \
        --vllm-mlx /work/peers/vllm-mlx/bin/vllm-mlx
    python -m benchmarks.long_prompt_bench --servers mlxd --long 512 --before 0.5 --after 0.2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import (
    ROOT,
    emit,
    eos_id,
    free_port,
    isolated_env,
    mlxd_serve,
    param_count,
    pct,
    progress,
    running,
    scratch,
    sse_lines,
)

ROWS = 4
WORDS = (
    "river stone light cloud paper music garden window silver orange forest engine winter "
    "harbor candle letter bridge mountain market signal planet morning thunder violet ocean"
).split()


def long_text(model_dir: Path, tokens: int) -> str:
    """User text of about `tokens` tokens under the checkpoint's tokenizer (the template adds
    a few): enough words encoded, cut to `tokens` ids and decoded."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    words = " ".join(WORDS[(i * 7 + i // 25) % len(WORDS)] for i in range(tokens))
    ids = tokenizer.encode(words).ids
    while len(ids) < tokens:  # the BPE may merge words: add more until there are enough
        words += " " + words
        ids = tokenizer.encode(words).ids
    return str(tokenizer.decode(ids[:tokens]))


def server_command(kind: str, model: Path, port: int, args: argparse.Namespace) -> list[str]:
    if kind.startswith("mlxd"):
        return mlxd_serve(model, port, *args.mlxd_args)
    if kind == "mlx_lm":
        python = args.mlx_lm_python or sys.executable
        return [python, "-m", "mlx_lm.server", "--model", str(model), "--port", str(port)]
    if kind == "vllm-mlx":
        return [args.vllm_mlx, "serve", str(model), "--port", str(port), "--continuous-batching"]
    raise ValueError(kind)


async def stream_arrivals(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], arrivals: list[float]
) -> None:
    """Stream a chat completion, appending the perf_counter of every chunk with text, until
    it ends or the task is cancelled (which closes the connection: the server cancels)."""
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in sse_lines(r):
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            delta = choices[0].get("delta") or {}
            if any(delta.get(k) for k in ("content", "reasoning_content", "reasoning")):
                arrivals.append(time.perf_counter())


def chat_body(model: str, text: str, max_tokens: int, eos: int, stream: bool) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": stream,
        "logit_bias": {str(eos): -100.0},
    }


async def measure(url: str, model: str, text: str, args: argparse.Namespace, eos: int) -> dict:
    """The 4 streams, the long request among them, and the figures of their gaps."""
    limits = httpx.Limits(max_connections=ROWS + 4)
    async with httpx.AsyncClient(timeout=900, limits=limits) as client:
        warm = chat_body(model, "Hello there", 2, eos, stream=False)
        (await client.post(url + "/v1/chat/completions", json=warm)).raise_for_status()
        arrivals: list[list[float]] = [[] for _ in range(ROWS)]
        tasks = [
            asyncio.create_task(
                stream_arrivals(
                    client,
                    url,
                    chat_body(model, f"Stream {i}: tell a story.", args.row_tokens, eos, True),
                    out,
                )
            )
            for i, out in enumerate(arrivals)
        ]
        while not all(len(out) >= 2 for out in arrivals):
            await _check(tasks)
            await asyncio.sleep(0.02)
        await asyncio.sleep(args.before)
        sent = time.perf_counter()
        body = chat_body(model, text, 1, eos, stream=False)
        response = await client.post(url + "/v1/chat/completions", json=body)
        answered = time.perf_counter()
        response.raise_for_status()
        await asyncio.sleep(args.after)
        await _check(tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    usage = response.json().get("usage") or {}
    phases = {"before": (sent - args.before, sent), "during": (sent, answered)}
    phases["after"] = (answered, answered + args.after)
    out: dict[str, Any] = {
        "long_prompt_tokens": usage.get("prompt_tokens"),
        "long_ttft_s": round(answered - sent, 3),
        "row_tokens_during": [sum(sent <= t <= answered for t in a) for a in arrivals],
    }
    for name, (start, end) in phases.items():
        out[name] = _figures([g for a in arrivals for g in _gaps(a, start, end)])
    before, during = out["before"]["median_ms"], out["during"]["p99_ms"]
    out["p99_during_over_median_before"] = round(during / before, 2) if before else None
    return out


async def _check(tasks: list[asyncio.Task[None]]) -> None:
    """A stream that ended early (an error, or its budget used up) spoils the run: raise."""
    for task in tasks:
        if task.done():
            task.result()
            raise RuntimeError("a stream ended before the run did: raise --row-tokens")


def _gaps(arrivals: list[float], start: float, end: float) -> list[float]:
    """Gaps whose later token arrived in [start, end)."""
    return [b - a for a, b in zip(arrivals, arrivals[1:], strict=False) if start <= b < end]


def _figures(gaps: list[float]) -> dict[str, float | int | None]:
    if not gaps:
        return {"gaps": 0, "median_ms": None, "p99_ms": None, "p99_over_median": None}
    gaps.sort()
    median, p99 = statistics.median(gaps), pct(gaps, 99)
    return {
        "gaps": len(gaps),
        "median_ms": round(1000 * median, 2),
        "p99_ms": round(1000 * p99, 2),
        "max_ms": round(1000 * gaps[-1], 2),
        "p99_over_median": round(p99 / median, 2) if median else None,
    }


def bench_server(
    kind: str, model_dir: Path, text: str, env: dict[str, str], args: argparse.Namespace
) -> dict[str, Any]:
    port = free_port()
    cmd = server_command(kind, model_dir, port, args)
    server_env = env
    if kind.startswith("mlxd"):
        server_env = dict(env, PYTHONPATH=str(ROOT / "src"))
    if kind == "mlxd-per-token":  # one chunk per token, as the peers stream
        server_env["MLXD_STREAM_INTERVAL_MS"] = "0"
    model = "default" if kind.startswith("mlxd") else str(model_dir)
    log = Path(args.work) / f"{kind}.log"
    with running(cmd, port, server_env, log=log) as url:
        result = asyncio.run(measure(url, model, text, args, eos_id(model_dir)))
    progress(kind, result)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", default="long2", help="tests/checkpoints.py size")
    parser.add_argument("--window", type=int, default=32768, help="the checkpoint's window")
    parser.add_argument("--long", type=int, default=16384, help="the long prompt's tokens")
    parser.add_argument("--before", type=float, default=4.0, help="seconds of decode before")
    parser.add_argument("--after", type=float, default=2.0, help="seconds of decode after")
    parser.add_argument("--row-tokens", type=int, default=16000, help="each stream's max_tokens")
    parser.add_argument("--servers", default="mlxd,mlxd-per-token,mlx_lm")
    parser.add_argument("--mlxd-args", default="", help="extra `mlxd serve` flags, one string")
    parser.add_argument("--mlx-lm-python", default=None, help="python of a venv with mlx-lm")
    parser.add_argument("--vllm-mlx", default="vllm-mlx", help="the vllm-mlx executable")
    args = parser.parse_args()
    args.mlxd_args = args.mlxd_args.split()

    from tests.checkpoints import make_checkpoint

    work = scratch("mlxd-long-")
    args.work = str(work)
    model_dir = make_checkpoint(
        work / f"bench-{args.kind}", "plain", size=args.kind, window=args.window
    )
    text = long_text(model_dir, args.long)
    env = isolated_env(work)
    report: dict[str, Any] = {
        "checkpoint": args.kind,
        "parameters": param_count(model_dir),
        "window": args.window,
        "long_text_tokens": args.long,
        "rows": ROWS,
        "before_s": args.before,
        "after_s": args.after,
        "cpu_count": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    report["results"] = {
        server: bench_server(server, model_dir, text, env, args)
        for server in args.servers.split(",")
    }
    emit(report)


if __name__ == "__main__":
    main()
