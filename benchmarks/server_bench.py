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

    python benchmarks/server_bench.py                      # 0.25M-parameter checkpoint
    python benchmarks/server_bench.py --kind big --max-tokens 32
    python benchmarks/server_bench.py --servers mlxd,mlxd-base --mlxd-base OLD_CHECKOUT
    python benchmarks/server_bench.py --kind tiny --max-tokens 128 --requests 48 --rounds 2 \
        --servers mlxd,mlx_lm,vllm-mlx,rapid-mlx --vllm-mlx VENV/bin/vllm-mlx --rapid-mlx ...
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
from collections.abc import AsyncIterator
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


def server_command(kind: str, model: Path, port: int, args: argparse.Namespace) -> list[str]:
    if kind in ("mlxd", "mlxd-base"):
        return [sys.executable, "-m", "mlxd.cli.main", "serve", "--model", str(model)] + [
            "--port",
            str(port),
        ]
    if kind == "mlx_lm":
        python = args.mlx_lm_python or sys.executable
        return [python, "-m", "mlx_lm.server", "--model", str(model), "--port", str(port)]
    if kind == "vllm-mlx":
        return [args.vllm_mlx, "serve", str(model), "--port", str(port), "--continuous-batching"]
    if kind == "rapid-mlx":
        return [args.rapid_mlx, "serve", str(model), "--port", str(port)]
    raise ValueError(kind)


def blas_env(kind: str, env: dict[str, str], blas: str, python: str) -> dict[str, str]:
    """mlxd picks its BLAS with MLXD_BLAS; a peer gets MKL by preloading its runtime."""
    env = dict(env, MLXD_BLAS="mkl" if blas in ("mkl", "ships") else "reference")
    if not kind.startswith("mlxd") and blas == "mkl":
        lib = Path(python).resolve().parents[1] / "lib" / "libmkl_rt.so.3"
        if not lib.is_file():
            lib = Path(sys.prefix) / "lib" / "libmkl_rt.so.3"
        env.update(LD_PRELOAD=str(lib), MKL_THREADING_LAYER="SEQUENTIAL")
    return env


def start(
    kind: str, model: Path, env: dict[str, str], args: argparse.Namespace
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = server_command(kind, model, port, args)
    env = blas_env(kind, env, args.blas, Path(cmd[0]).parent.as_posix() + "/python")
    if kind == "mlxd-base":  # another mlxd source tree (a checkout of an older commit)
        env["PYTHONPATH"] = str(Path(args.mlxd_base) / "src")
    elif kind == "mlxd":
        env["PYTHONPATH"] = str(ROOT / "src")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, wait_ready(proc, port, f"{kind} server: {' '.join(cmd)}")


def stop(proc: subprocess.Popen[bytes], seconds: float = 30.0) -> None:
    """Terminate a benchmarked server; kill it if it has not exited after `seconds`."""
    proc.terminate()
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()


def wait_ready(
    proc: subprocess.Popen[bytes], port: int, what: str, path: str = "/v1/models", seconds=300.0
) -> str:
    """The server's base URL once `path` answers 200; kills it and raises if it exits or takes
    longer than `seconds` (every benchmark that starts a server uses this)."""
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return url
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{what} did not start")


async def sse_lines(response: httpx.Response) -> AsyncIterator[str]:
    """Lines split on LF only, as SSE defines them (aiter_lines also splits on U+2028 etc.)."""
    buf = b""
    async for chunk in response.aiter_bytes():
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r").decode()


async def one_request(client: httpx.AsyncClient, url: str, body: dict[str, object]) -> Sample:
    t0 = time.perf_counter()
    sample: Sample | None = None
    last = t0
    chunks = usage_tokens = 0
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in sse_lines(r):
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if data.get("usage"):
                usage_tokens = data["usage"]["completion_tokens"]
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
    if sample is None:  # nothing visible streamed (held back to the end): the client's TTFT
        sample = Sample(ttft=time.perf_counter() - t0)
    sample.tokens = usage_tokens
    if not sample.tokens:
        sample.tokens = chunks
    return sample


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
        "ttft_mean_ms": round(1000 * statistics.fmean(ttfts), 1) if ttfts else 0.0,
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
    kind: str, model_dir: Path, env: dict[str, str], args: argparse.Namespace, eos: int, load: str
) -> list[dict[str, float]]:
    """One server process: a warm-up, then every concurrency level of one load."""
    proc, url = start(kind, model_dir, env, args)
    model = "default" if kind.startswith("mlxd") else str(model_dir)
    try:
        asyncio.run(run_level(kind, url, "greedy", 1, 1, args, eos, model))  # warm-up
        out = []
        for c in args.concurrency:
            per_client = max(1, args.requests // c)
            out.append(asyncio.run(run_level(kind, url, load, c, per_client, args, eos, model)))
            print(f"{kind} {load} {c}: {json.dumps(out[-1])}", file=sys.stderr, flush=True)
        return out
    finally:
        stop(proc)


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

    work = Path(tempfile.mkdtemp(prefix="mlxd-bench-"))
    kind = "chat" if args.kind == "tiny" else args.kind
    model_dir = make_checkpoint(work / f"bench-{args.kind}", kind)
    eos = int(json.loads((model_dir / "config.json").read_text())["eos_token_id"])
    env = dict(
        os.environ, MLXD_HOME=str(work / "home"), HF_HOME=str(work / "hf"), HF_HUB_OFFLINE="1"
    )
    servers = args.servers.split(",")
    report: dict[str, object] = {
        "checkpoint": args.kind,
        "parameters": _param_count(model_dir),
        "prompt_tokens": _prompt_tokens(model_dir, args.prompt_words),
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
    print(json.dumps(report, indent=2))


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


def _prompt_tokens(model_dir: Path, words: int) -> int:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    return len(tok.encode(prompt_text(0, 0, words)).ids)


def _param_count(model_dir: Path) -> int:
    import mlx.core as mx

    weights = mx.load(str(model_dir / "model.safetensors"))
    return int(sum(v.size for v in weights.values()))


if __name__ == "__main__":
    main()
