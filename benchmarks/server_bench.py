"""Benchmark `mlxd serve` against `python -m mlx_lm.server` on the same checkpoint.

Many concurrent streaming clients (1, 4, 8, 16 by default); per server and load it reports time
to first token (p50/p99), inter-token latency (p50/p99) and aggregate tokens/s, as JSON on
stdout. Two loads: greedy, and a client mix at temperature 0.7 with a `seed` in every request.
EOS is suppressed with logit_bias on both servers, so every request decodes max_tokens.

    python benchmarks/server_bench.py                      # 0.25M-parameter checkpoint
    python benchmarks/server_bench.py --kind big --max-tokens 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass
class Sample:
    ttft: float
    gaps: list[float] = field(default_factory=list)
    tokens: int = 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(kind: str, model: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    if kind == "mlxd":
        cmd = [
            sys.executable,
            "-m",
            "mlxd.cli.main",
            "serve",
            "--model",
            str(model),
            "--port",
            str(port),
        ]
    else:
        cmd = [
            sys.executable,
            "-m",
            "mlx_lm.server",
            "--model",
            str(model),
            "--port",
            str(port),
            "--log-level",
            "WARNING",
        ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{kind} server did not start")


async def one_request(client: httpx.AsyncClient, url: str, body: dict[str, object]) -> Sample:
    t0 = time.perf_counter()
    sample: Sample | None = None
    last = t0
    chunks = 0
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if data.get("usage"):
                usage_tokens = data["usage"]["completion_tokens"]
                if sample is not None:
                    sample.tokens = usage_tokens
            if not data.get("choices"):
                continue
            delta = data["choices"][0].get("delta") or {}
            text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
            if not text:
                continue
            now = time.perf_counter()
            chunks += 1
            if sample is None:
                sample = Sample(ttft=now - t0)
            else:
                sample.gaps.append(now - last)
            last = now
    assert sample is not None, "no content streamed"
    if not sample.tokens:
        sample.tokens = chunks
    return sample


def request_body(load: str, client_id: int, n: int, max_tokens: int, eos: int) -> dict[str, object]:
    body: dict[str, object] = {
        "model": "default",
        "messages": [
            {
                "role": "user",
                "content": f"Client {client_id} asks question {n}: what is the capital of France?",
            }
        ],
        "max_tokens": max_tokens,
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
    url: str, load: str, clients: int, per_client: int, max_tokens: int, eos: int, model: str
) -> dict[str, float]:
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        errors = 0

        async def worker(cid: int) -> list[Sample]:
            nonlocal errors
            out = []
            for n in range(per_client):
                body = request_body(load, cid, n, max_tokens, eos)
                body["model"] = model
                try:
                    out.append(await one_request(client, url, body))
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
        "itl_p50_ms": round(1000 * pct(gaps, 50), 2),
        "itl_p99_ms": round(1000 * pct(gaps, 99), 2),
    }


def pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[min(int(p), 99) - 1]


def bench_server(
    kind: str, model_dir: Path, env: dict[str, str], args: argparse.Namespace, eos: int
) -> dict[str, list[dict[str, float]]]:
    proc, url = start(kind, model_dir, env)
    model = "default" if kind == "mlxd" else str(model_dir)
    try:
        asyncio.run(run_level(url, "greedy", 1, 1, 8, eos, model))  # warm-up
        out: dict[str, list[dict[str, float]]] = {}
        for load in ("greedy", "seeded"):
            out[load] = [
                asyncio.run(run_level(url, load, c, args.per_client, args.max_tokens, eos, model))
                for c in args.concurrency
            ]
            print(f"{kind} {load}: {json.dumps(out[load])}", file=sys.stderr, flush=True)
        return out
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", default="small", help="tests/checkpoints.py size: tiny/small/big")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--per-client", type=int, default=2, help="requests per client")
    parser.add_argument("--concurrency", default="1,4,8,16")
    parser.add_argument("--skip-mlx-lm", action="store_true")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]

    from tests.checkpoints import make_checkpoint

    work = Path(tempfile.mkdtemp(prefix="mlxd-bench-"))
    kind = "chat" if args.kind == "tiny" else args.kind
    model_dir = make_checkpoint(work / f"bench-{args.kind}", kind)
    eos = int(json.loads((model_dir / "config.json").read_text())["eos_token_id"])
    env = dict(
        os.environ, MLXD_HOME=str(work / "home"), HF_HOME=str(work / "hf"), HF_HUB_OFFLINE="1"
    )
    params = _param_count(model_dir)
    report: dict[str, object] = {
        "checkpoint": args.kind,
        "parameters": params,
        "max_tokens": args.max_tokens,
        "per_client": args.per_client,
        "cpu_count": os.cpu_count(),
    }
    servers = ["mlxd"] + ([] if args.skip_mlx_lm else ["mlx_lm"])
    results = {s: bench_server(s, model_dir, env, args, eos) for s in servers}
    report["results"] = results
    if "mlx_lm" in results:
        report["ratio_mlxd_over_mlx_lm"] = {
            load: [
                {
                    "clients": a["clients"],
                    "agg_tok_s": round(a["agg_tok_s"] / max(b["agg_tok_s"], 1e-9), 2),
                    "ttft_p99": round(a["ttft_p99_ms"] / max(b["ttft_p99_ms"], 1e-9), 2),
                }
                for a, b in zip(results["mlxd"][load], results["mlx_lm"][load], strict=True)
            ]
            for load in ("greedy", "seeded")
        }
    print(json.dumps(report, indent=2))


def _param_count(model_dir: Path) -> int:
    import mlx.core as mx

    weights = mx.load(str(model_dir / "model.safetensors"))
    return int(sum(v.size for v in weights.values()))


if __name__ == "__main__":
    main()
