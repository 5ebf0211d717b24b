"""Benchmark `mlxd serve` against its peers on the same checkpoint, side by side in one run.

Peers: `python -m mlx_lm.server` (this venv's mlx-lm, or --mlx-lm-python), `vllm-mlx serve DIR
--continuous-batching` (--vllm-mlx BIN) and `rapid-mlx serve DIR` (--rapid-mlx BIN), each from
its own venv. Closed loop: N streaming clients (1, 8, 16 by default), each sending its share of
--requests distinct prompts (~256 tokens) one after another; per server and load it reports
time to first token (p50/p99/mean), inter-token latency and aggregate tokens/s, as JSON on
stdout. Two loads: greedy, and temperature 0.7 with a `seed` in every request. EOS is
suppressed with logit_bias, so every request decodes max_tokens. --rounds repeats every
(server, load, clients) cell in alternating server order. --blas mkl runs every server with
Intel MKL (mlxd by MLXD_BLAS, the peers by preloading libmkl_rt), `ships` with what each
ships with (mlxd: MKL; peers: mlx's reference BLAS), `reference` all without MKL.

    python -m benchmarks.server_bench                      # 0.25M-parameter checkpoint
    python -m benchmarks.server_bench --kind big --max-tokens 32
    python -m benchmarks.server_bench --servers mlxd,mlxd-base --mlxd-base OLD_CHECKOUT
    python -m benchmarks.server_bench --kind tiny --max-tokens 128 --requests 48 --rounds 2 \
        --servers mlxd,mlx_lm,vllm-mlx,rapid-mlx --vllm-mlx VENV/bin/vllm-mlx --rapid-mlx ...
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

from benchmarks.common import (
    ROOT,
    Sample,
    blas_env,
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
    stream_chat,
    token_count,
)


def server_command(kind: str, model: Path, port: int, args: argparse.Namespace) -> list[str]:
    if kind in ("mlxd", "mlxd-base"):
        return mlxd_serve(model, port)
    if kind == "mlx_lm":
        python = args.mlx_lm_python or sys.executable
        return [python, "-m", "mlx_lm.server", "--model", str(model), "--port", str(port)]
    if kind == "vllm-mlx":
        return [args.vllm_mlx, "serve", str(model), "--port", str(port), "--continuous-batching"]
    if kind == "rapid-mlx":
        return [args.rapid_mlx, "serve", str(model), "--port", str(port)]
    raise ValueError(kind)


def server_env(
    kind: str, env: dict[str, str], args: argparse.Namespace, python: str
) -> dict[str, str]:
    """The BLAS of --blas; mlxd-base runs another mlxd source tree (an older checkout)."""
    env = blas_env(env, args.blas, python, peer=not kind.startswith("mlxd"))
    if kind == "mlxd-base":
        env["PYTHONPATH"] = str(Path(args.mlxd_base) / "src")
    elif kind == "mlxd":
        env["PYTHONPATH"] = str(ROOT / "src")
    return env


WORDS = (
    "river stone light cloud paper music garden window silver orange forest engine winter "
    "harbor candle letter bridge mountain market signal planet morning thunder violet ocean"
).split()


def prompt_text(client_id: int, n: int, words: int) -> str:
    """Distinct for every (client, request): no prompt is a prefix of another's."""
    body = " ".join(
        WORDS[(client_id * 7 + n * 13 + i * (n + 3)) % len(WORDS)] for i in range(words)
    )
    return f"Client {client_id} request {n}: {body}. Summarize."


def request_body(
    load: str, client_id: int, n: int, args: argparse.Namespace, eos: int
) -> dict[str, object]:
    body: dict[str, object] = {
        "model": "default",
        "messages": [{"role": "user", "content": prompt_text(client_id, n, args.prompt_words)}],
        "max_tokens": args.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "logit_bias": {str(eos): -100.0},
        "temperature": 0.0,
    }
    if load == "seeded":
        body["temperature"] = 0.7
        body["seed"] = 1000 * client_id + n
    return body


async def run_level(
    kind: str,
    url: str,
    load: str,
    clients: int,
    per_client: int,
    args: argparse.Namespace,
    eos: int,
    model: str,
) -> dict[str, float]:
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(timeout=900, limits=limits) as client:
        errors = 0

        async def worker(cid: int) -> list[Sample]:
            nonlocal errors
            out = []
            for n in range(per_client):
                body = request_body(load, cid, n, args, eos)
                body["model"] = model
                if kind == "rapid-mlx":  # refuses logit_bias; accepts vLLM's ignore_eos
                    del body["logit_bias"]
                    body["ignore_eos"] = True
                try:
                    out.append(await stream_chat(client, url, body))
                except httpx.HTTPError:  # a reset or refused connection counts, not crashes
                    errors += 1
            return out

        t0 = time.perf_counter()
        results = await asyncio.gather(*(worker(i) for i in range(clients)))
        wall = time.perf_counter() - t0
    samples = [s for r in results for s in r]
    ttfts = sorted(s.ttft for s in samples)
    gaps = sorted(g for s in samples for g in s.gaps)
    tokens = sum(s.tokens for s in samples)
    return {
        "clients": clients,
        "requests": len(samples),
        "failed_requests": errors,
        "tokens": tokens,
        "wall_s": round(wall, 3),
        "agg_tok_s": round(tokens / wall, 1),
        "ttft_p50_ms": round(1000 * pct(ttfts, 50), 1),
        "ttft_p99_ms": round(1000 * pct(ttfts, 99), 1),
        "ttft_mean_ms": round(1000 * statistics.fmean(ttfts), 1) if ttfts else 0.0,
        "itl_p50_ms": round(1000 * pct(gaps, 50), 2),
        "itl_p99_ms": round(1000 * pct(gaps, 99), 2),
    }


def bench_server(
    kind: str, model_dir: Path, env: dict[str, str], args: argparse.Namespace, eos: int, load: str
) -> list[dict[str, float]]:
    """One server process: a warm-up, then every concurrency level of one load."""
    port = free_port()
    cmd = server_command(kind, model_dir, port, args)
    env = server_env(kind, env, args, Path(cmd[0]).parent.as_posix() + "/python")
    model = "default" if kind.startswith("mlxd") else str(model_dir)
    with running(cmd, port, env) as url:
        asyncio.run(run_level(kind, url, "greedy", 1, 1, args, eos, model))  # warm-up
        out = []
        for c in args.concurrency:
            per_client = max(1, args.requests // c)
            out.append(asyncio.run(run_level(kind, url, load, c, per_client, args, eos, model)))
            progress(f"{kind} {load} {c}", out[-1])
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", default="small", help="tests/checkpoints.py size: tiny/small/big")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--prompt-words", type=int, default=48, help="~256 tokens on tiny")
    parser.add_argument("--requests", type=int, default=16, help="requests per level (closed loop)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--concurrency", default="1,8,16")
    parser.add_argument("--loads", default="greedy,seeded")
    parser.add_argument("--servers", default="mlxd,mlx_lm")
    parser.add_argument("--blas", default="ships", choices=["ships", "mkl", "reference"])
    parser.add_argument("--mlx-lm-python", default=None, help="python of a venv with mlx-lm")
    parser.add_argument("--vllm-mlx", default="vllm-mlx", help="the vllm-mlx executable")
    parser.add_argument("--rapid-mlx", default="rapid-mlx", help="the rapid-mlx executable")
    parser.add_argument("--mlxd-base", default=None, help="server mlxd-base: an mlxd checkout")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]

    from tests.checkpoints import make_checkpoint

    work = scratch("mlxd-bench-")
    model_dir = make_checkpoint(work / f"bench-{args.kind}", "chat", size=args.kind)
    eos = eos_id(model_dir)
    env = isolated_env(work)
    servers = args.servers.split(",")
    report: dict[str, object] = {
        "checkpoint": args.kind,
        "parameters": param_count(model_dir),
        "prompt_tokens": token_count(model_dir, prompt_text(0, 0, args.prompt_words)),
        "max_tokens": args.max_tokens,
        "requests_per_level": args.requests,
        "rounds": args.rounds,
        "blas": args.blas,
        "cpu_count": os.cpu_count(),
    }
    results: dict[str, dict[str, list[list[dict[str, float]]]]] = {
        s: {load: [] for load in args.loads.split(",")} for s in servers
    }
    for r in range(args.rounds):
        for load in args.loads.split(","):
            for server in servers if r % 2 == 0 else servers[::-1]:
                results[server][load].append(bench_server(server, model_dir, env, args, eos, load))
    report["results"] = results
    report["summary"] = _summary(results, args)
    emit(report)


def _summary(
    results: dict[str, dict[str, list[list[dict[str, float]]]]], args: argparse.Namespace
) -> dict[str, dict[str, dict[str, list[float]]]]:
    """server -> load -> figure -> one value per concurrency level: the median over rounds."""
    out: dict[str, dict[str, dict[str, list[float]]]] = {}
    for server, loads in results.items():
        out[server] = {}
        for load, rounds in loads.items():
            out[server][load] = {
                key: [
                    statistics.median(rnd[i][key] for rnd in rounds)
                    for i in range(len(args.concurrency))
                ]
                for key in ("agg_tok_s", "ttft_p99_ms", "ttft_mean_ms")
            }
    return out


if __name__ == "__main__":
    main()
