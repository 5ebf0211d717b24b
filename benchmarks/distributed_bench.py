"""Benchmark distributed serving: `mlxd serve` on 2 ranks (`mlx.launch -n 2 --backend ring`,
tensor parallel) against one mlxd process and against `mlx_lm.server` on 2 ranks, on the
same generated checkpoint and load; JSON on stdout (progress on stderr).

Servers (--servers):
  mlxd_1proc_2t  one process, MKL with 2 threads per matmul (MLXD_BLAS_THREADS=2): both cores
  mlxd_1proc_1t  one process, MKL sequential (1 thread): one core for matmuls
  mlxd_2ranks    two ranks, MKL sequential each: both cores, each on half of every layer
  mlx_lm_2ranks  mlx-lm's server under its own venv's mlx.launch, tensor parallel (its
                 default when the architecture has `shard`), MKL sequential per rank
                 (LD_PRELOAD of libmkl_rt, as server_bench --blas mkl does)
  mlx_lm_1proc   mlx-lm's server, one process, MKL sequential
  mlxd_2ranks_base  mlxd_2ranks from another mlxd checkout (--mlxd-base DIR): before/after
The fair single-process baseline on this 2-core machine is the better of the two mlxd_1proc
rows: 2 ranks x 1 thread use the same 2 cores as 1 process x 2 threads.

Load: closed loop, N streaming clients (8 by default; --concurrency 1,8 adds one), each
sending its share of --requests distinct prompts one after another (server_bench's clients,
EOS suppressed so every request decodes max_tokens). Per server and level: aggregate
tokens/s, TTFT, ITL. Then a prefill-heavy row (--prefill-words long prompts, 2 tokens
each, one per client at the top level): TTFT where compute dominates most.

Communication, two numbers:
  broadcast_ms    mlxd's /metrics (mlxd_lockstep_broadcast_seconds): rank 0's host time to
                  queue each step's broadcast (it never waits for it); per step.
  probe           a separate 2-rank job times all_sum on the ring: one [clients, hidden]
                  float32 reduction (tensor parallel runs 2 per layer per decode step, inside
                  the forward, where they cannot be timed apart) and the broadcast's one small
                  all_sum; `est_comm_per_step_ms` = 2 x layers x reduction + broadcast.

    python -m benchmarks.distributed_bench  # xl (93M), 8 clients + prefill row, 2 rounds
    python -m benchmarks.distributed_bench --concurrency 1,8 --rounds 1  # adds 1 client
    python -m benchmarks.distributed_bench --size medium --max-tokens 16 --requests 8  # quick
    python -m benchmarks.distributed_bench --servers mlxd_2ranks,mlxd_2ranks_base \
        --mlxd-base OLD_CHECKOUT --prefill-words 0 --rounds 3  # 2 ranks, before and after
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from benchmarks.common import (
    ROOT,
    emit,
    eos_id,
    fast_blas,
    free_port,
    isolated_env,
    param_count,
    progress,
    running,
    scratch,
    token_count,
)
from benchmarks.server_bench import prompt_text, run_level

SERVERS = (
    "mlxd_1proc_2t",
    "mlxd_1proc_1t",
    "mlxd_2ranks",
    "mlx_lm_2ranks",
    "mlx_lm_1proc",
    "mlxd_2ranks_base",
)
PEER_BIN = Path("/work/peers/mlxlm/bin")


def _launcher(bin_dir: Path, python: str) -> list[str]:
    return [
        str(bin_dir / "mlx.launch"),
        "-n",
        "2",
        "--backend",
        "ring",
        "-p",
        str(free_port()),
        "--python",
        python,
    ]


def server_command(name: str, model: Path, port: int, args: argparse.Namespace) -> list[str]:
    mlxd = ["-m", "mlxd.cli.main", "serve", "--model", str(model), "--port", str(port)]
    mlx_lm = ["-m", "mlx_lm.server", "--model", str(model), "--port", str(port)]
    peer_python = str(Path(args.mlx_lm_bin) / "python")
    if name.startswith("mlxd_1proc"):
        return [sys.executable, *mlxd]
    if name in ("mlxd_2ranks", "mlxd_2ranks_base"):
        return [*_launcher(Path(sys.executable).parent, sys.executable), *mlxd, "--shard", "tensor"]
    if name == "mlx_lm_2ranks":
        return [*_launcher(Path(args.mlx_lm_bin), peer_python), *mlx_lm]
    if name == "mlx_lm_1proc":
        return [peer_python, *mlx_lm]
    raise ValueError(name)


def server_env(name: str, base: dict[str, str], args: argparse.Namespace) -> dict[str, str]:
    """MKL everywhere; 2 threads per matmul only for mlxd_1proc_2t."""
    env = dict(base, MLXD_BLAS="mkl", MLXD_BLAS_THREADS="2" if name.endswith("_2t") else "1")
    if name == "mlxd_2ranks_base":  # another mlxd source tree (a checkout of an older commit)
        if not args.mlxd_base:
            raise SystemExit("mlxd_2ranks_base needs --mlxd-base DIR")
        env["PYTHONPATH"] = str(Path(args.mlxd_base) / "src")
    if name.startswith("mlx_lm"):
        env.update(
            LD_PRELOAD=str(Path(sys.prefix) / "lib" / "libmkl_rt.so.3"),
            MKL_THREADING_LAYER="SEQUENTIAL",
        )
    return env


def broadcast_totals(url: str) -> tuple[float, int]:
    """(seconds, count) of mlxd's lockstep broadcasts so far (0, 0 for other servers)."""
    try:
        text = httpx.get(url + "/metrics", timeout=10).text
    except httpx.HTTPError:
        return 0.0, 0
    values = {}
    for line in text.splitlines():
        if line.startswith("mlxd_lockstep_broadcast_seconds_"):
            key, value = line.split()
            values[key] = float(value)
    return (
        values.get("mlxd_lockstep_broadcast_seconds_sum", 0.0),
        int(values.get("mlxd_lockstep_broadcast_seconds_count", 0)),
    )


def bench_server(
    name: str, model_dir: Path, env: dict[str, str], args: argparse.Namespace, eos: int
) -> list[dict[str, float]]:
    """One server (and, under mlx.launch, its ranks): a warm-up, then every concurrency level."""
    port = free_port()
    cmd = server_command(name, model_dir, port, args)
    model = "default" if name.startswith("mlxd") else str(model_dir)
    with running(cmd, port, server_env(name, env, args), group=True) as url:
        asyncio.run(run_level(name, url, "greedy", 1, 1, args, eos, model))  # warm-up
        out = []
        for clients in args.concurrency:
            per_client = max(1, args.requests // clients)
            seconds, count = broadcast_totals(url)
            level = asyncio.run(
                run_level(name, url, "greedy", clients, per_client, args, eos, model)
            )
            seconds2, count2 = broadcast_totals(url)
            level["load_avg"] = round(os.getloadavg()[0], 2)  # the machine is shared
            if count2 > count:
                level["broadcasts"] = count2 - count
                level["broadcast_ms"] = round(1000 * (seconds2 - seconds) / (count2 - count), 3)
            out.append(level)
            progress(f"{name} {clients}", level)
        if args.prefill_words:  # long prompts, few tokens: TTFT, where compute dominates
            heavy = argparse.Namespace(
                **(vars(args) | {"prompt_words": args.prefill_words, "max_tokens": 2})
            )
            clients = max(args.concurrency)
            level = asyncio.run(run_level(name, url, "greedy", clients, 1, heavy, eos, model))
            level["phase"] = "prefill"  # type: ignore[assignment]
            out.append(level)
            progress(f"{name} prefill {clients}", level)
        return out


# ---- the collective probe (a 2-rank job of its own) ---------------------------------------


def probe_main(hidden: int, rows: list[int], iterations: int) -> None:
    """Under mlx.launch: time all_sum on the ring; rank 0 prints one JSON line."""
    import mlx.core as mx

    from mlxd.backend.distributed.launch_env import init_group
    from mlxd.backend.distributed.lockstep_channel import HEAD_BYTES

    group = init_group()  # as the servers join it: MLXD_RING_WAIT_MS applies

    def timed(run: Callable[[], None], n: int) -> float:
        for _ in range(5):
            run()
        started = time.perf_counter()
        for _ in range(n):
            run()
        return (time.perf_counter() - started) / n

    def reduction(b: int) -> Callable[[], None]:
        x = mx.ones((b, 1, hidden), dtype=mx.float32)
        return lambda: mx.eval(mx.distributed.all_sum(x, group=group))

    head = mx.zeros((HEAD_BYTES,), dtype=mx.uint8)

    def broadcast() -> None:  # as backend.distributed.Channel sends a step: one fixed head
        mx.eval(mx.distributed.all_sum(head, group=group))

    out = {
        f"reduction_{b}x{hidden}_us": round(1e6 * timed(reduction(b), iterations), 1) for b in rows
    }
    out["broadcast_us"] = round(1e6 * timed(broadcast, iterations), 1)
    if group.rank() == 0:
        print(json.dumps(out), flush=True)


def probe(config: dict[str, int], rows: list[int]) -> dict[str, dict[str, float]]:
    """The probe with the ring waiting in the kernel (mlxd's default) and spinning (MLX's)."""
    return {
        "kernel_wait": probe_once(config, rows, os.environ.get("MLXD_RING_WAIT_MS", "1")),
        "mlx_spin": probe_once(config, rows, "0"),
    }


def probe_once(config: dict[str, int], rows: list[int], wait_ms: str) -> dict[str, float]:
    cmd = [
        *_launcher(Path(sys.executable).parent, sys.executable),
        "-m",
        "benchmarks.distributed_bench",
        "--probe",
        str(config["hidden_size"]),
        ",".join(map(str, rows)),
    ]
    env = dict(os.environ, MLXD_BLAS_THREADS="1", MLXD_RING_WAIT_MS=wait_ms)
    done = subprocess.run(
        cmd, env=env, cwd=ROOT, stdin=subprocess.PIPE, capture_output=True, text=True, timeout=300
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"probe failed: {done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(lines[-1])
    layers = config["num_hidden_layers"]
    for b in rows:
        per_layer = 2 * result[f"reduction_{b}x{config['hidden_size']}_us"]
        estimate = (layers * per_layer + result["broadcast_us"]) / 1000
        result[f"est_comm_per_step_ms_{b}_rows"] = round(estimate, 3)
    return result


# ---- main -------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="xl", help="tests/checkpoints.py size (tiny..xxl)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--prompt-words", type=int, default=48)
    parser.add_argument(
        "--prefill-words",
        type=int,
        default=64,
        help="prefill-heavy phase: prompts this long, 2 tokens each, at the top level (0: off)",
    )
    parser.add_argument("--requests", type=int, default=16, help="requests per level")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", default="8")
    parser.add_argument("--servers", default=",".join(SERVERS[:4]))
    parser.add_argument("--mlx-lm-bin", default=str(PEER_BIN), help="bin/ of a venv with mlx-lm")
    parser.add_argument("--mlxd-base", default=None, help="server mlxd_2ranks_base: a checkout")
    parser.add_argument("--probe", nargs=2, metavar=("HIDDEN", "ROWS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        probe_main(int(args.probe[0]), [int(r) for r in args.probe[1].split(",")], 200)
        return
    args.concurrency = [int(c) for c in args.concurrency.split(",")]

    fast_blas()  # MKL before mlx, as the servers load it
    from tests.checkpoints import make_checkpoint

    work = scratch("mlxd-dist-bench-")
    model_dir = make_checkpoint(work / f"bench-{args.size}", "chat", size=args.size)
    config = json.loads((model_dir / "config.json").read_text())
    eos = eos_id(model_dir)
    env = isolated_env(work)
    servers = args.servers.split(",")
    results: dict[str, list[list[dict[str, float]]]] = {s: [] for s in servers}
    for r in range(args.rounds):
        for name in servers if r % 2 == 0 else servers[::-1]:
            results[name].append(bench_server(name, model_dir, env, args, eos))
    report = {
        "checkpoint": args.size,
        "parameters": param_count(model_dir),
        "hidden_size": config["hidden_size"],
        "layers": config["num_hidden_layers"],
        "prompt_tokens": token_count(model_dir, prompt_text(0, 0, args.prompt_words)),
        "max_tokens": args.max_tokens,
        "requests_per_level": args.requests,
        "rounds": args.rounds,
        "cpu_count": os.cpu_count(),
        "results": results,
        "summary": summary(
            results,
            [f"{c}_clients" for c in args.concurrency]
            + ([f"prefill_{max(args.concurrency)}_clients"] if args.prefill_words else []),
        ),
        "probe": probe(config, args.concurrency),
    }
    emit(report)


def summary(results: dict[str, list[list[dict[str, float]]]], rows: list[str]) -> dict[str, object]:
    """Medians over rounds per server and row (each concurrency level, then the prefill
    phase), and the issue's ratios: tokens/s, and TTFT as a speed-up (theirs / ours)."""
    figures: dict[str, dict[str, list[float]]] = {}
    for name, rounds in results.items():
        keys = ("agg_tok_s", "ttft_mean_ms", "ttft_p99_ms", "itl_p50_ms", "broadcast_ms")
        figures[name] = {
            key: [
                statistics.median(rnd[i].get(key, 0.0) for rnd in rounds) for i in range(len(rows))
            ]
            for key in keys
        }
    ratios: dict[str, list[float]] = {}
    two = figures.get("mlxd_2ranks")
    singles = [figures[n] for n in ("mlxd_1proc_2t", "mlxd_1proc_1t") if n in figures]
    peer = figures.get("mlx_lm_2ranks")
    if two and singles:
        best_tok = [max(col) for col in zip(*(f["agg_tok_s"] for f in singles), strict=True)]
        best_ttft = [min(col) for col in zip(*(f["ttft_mean_ms"] for f in singles), strict=True)]
        ratios["mlxd_2ranks_over_best_1proc"] = _ratios(two["agg_tok_s"], best_tok)
        ratios["ttft_speedup_over_best_1proc"] = _ratios(best_ttft, two["ttft_mean_ms"])
    base = figures.get("mlxd_2ranks_base")
    if two and base:
        ratios["mlxd_2ranks_over_base"] = _ratios(two["agg_tok_s"], base["agg_tok_s"])
    if two and peer:
        ratios["mlxd_2ranks_over_mlx_lm_2ranks"] = _ratios(two["agg_tok_s"], peer["agg_tok_s"])
        ratios["ttft_speedup_over_mlx_lm_2ranks"] = _ratios(
            peer["ttft_mean_ms"], two["ttft_mean_ms"]
        )
    return {"rows": rows, "figures": figures, "ratios": ratios}


def _ratios(top: list[float], bottom: list[float]) -> list[float]:
    return [round(a / b, 2) if b else 0.0 for a, b in zip(top, bottom, strict=True)]


if __name__ == "__main__":
    main()
