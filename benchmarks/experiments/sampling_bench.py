"""CPU time of one decode step of the batch runner, per load and batch size; prints JSON.

    python -m benchmarks.experiments.sampling_bench [--trees new=src,old=/work/wt/base/src]
        [--rows 1,8,16] [--loads greedy,greedy_bias,seeded,seeded_bias] [--steps 150]
        [--rounds 3] [--kind chat]

Each tree (an mlxd `src` directory: this checkout's and, say, main's before a change) runs in
its own subprocess, in alternating order per round, on the same tiny checkpoint: `rows`
sequences are inserted together, prefilled, then `--steps` decode steps (no prefill among them)
are timed one by one with the process's CPU clock and the wall clock. Loads: `greedy`,
`seeded` (temperature 0.7, a seed per row), and each with a `logit_bias` entry per row
(`_bias`: what server_bench sends, EOS suppressed). Reported per tree, load and rows: the
median over rounds of each round's median per-step CPU and wall milliseconds, and the
new/old ratio of CPU time (below 1: the first tree is cheaper). Never a timed assertion.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, emit, fast_blas

LOADS = {
    "greedy": {},
    "greedy_bias": {"bias": True},
    "seeded": {"temperature": 0.7},
    "seeded_bias": {"temperature": 0.7, "bias": True},
}


def child(checkpoint: Path, rows: list[int], loads: list[str], steps: int) -> dict[str, object]:
    """Runs inside one tree's interpreter: {load: {rows: [cpu_ms, wall_ms]}}."""
    fast_blas()
    from mlxd.backend.api import BackendConfig, NewSequence
    from mlxd.backend.batch import BatchRunner
    from mlxd.backend.loader import load_checkpoint
    from mlxd.backend.prefix.cache import PrefixCache
    from mlxd.types import SamplingParams

    loaded = load_checkpoint(checkpoint)
    eos = min(loaded.eos_token_ids) if loaded.eos_token_ids else 0
    out: dict[str, object] = {}
    for load in loads:
        spec = LOADS[load]
        per_rows: dict[str, list[float]] = {}
        for n in rows:
            config = BackendConfig(max_batch=n, prefill_chunk=512, prefill_batch=n)
            runner = BatchRunner(loaded, "m", PrefixCache(0), config)
            uids = []
            for i in range(n):
                params = SamplingParams(
                    temperature=float(spec.get("temperature", 0.0)),
                    seed=100 + i,
                    logit_bias=((eos, -100.0),) if spec.get("bias") else (),
                    max_tokens=steps + 64,
                )
                prompt = [10 + (7 * i + 3 * j) % 400 for j in range(48)]
                seq = NewSequence(prompt, params, steps + 64, f"r{i}")
                uids.append(runner.insert(seq)[0])
            started: set[int] = set()
            while started != set(uids):  # prefill, until every row decodes
                started |= {o.uid for o in runner.step().tokens}
            for _ in range(5):
                runner.step()
            cpu, wall = [], []
            for _ in range(steps):
                c0, w0 = time.process_time(), time.perf_counter()
                runner.step()
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - w0)
            runner.close()
            per_rows[str(n)] = [
                round(1000 * statistics.median(cpu), 4),
                round(1000 * statistics.median(wall), 4),
            ]
        out[load] = per_rows
    return out


def run_tree(src: str, args: argparse.Namespace, checkpoint: Path) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=src)  # the tree's mlxd first (the cwd holds none)
    cmd = [
        sys.executable, "-m", "benchmarks.experiments.sampling_bench", "--child", str(checkpoint),
        "--rows", args.rows, "--loads", args.loads, "--steps", str(args.steps),
    ]  # fmt: skip
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trees", default=f"new={ROOT / 'src'},old=/work/wt/base/src")
    parser.add_argument("--rows", default="1,8,16")
    parser.add_argument("--loads", default="greedy,greedy_bias,seeded,seeded_bias")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kind", default="chat", help="tests/checkpoints.py kind")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    loads = args.loads.split(",")
    if args.child:
        emit(child(Path(args.child), rows, loads, args.steps), None)
        return
    from tests.checkpoints import make_checkpoint

    trees = dict(t.split("=", 1) for t in args.trees.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(tmp) / "model"
        make_checkpoint(checkpoint, args.kind)
        runs: dict[str, list[dict[str, object]]] = {name: [] for name in trees}
        for r in range(args.rounds):
            order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))
            for name, src in order:
                runs[name].append(run_tree(src, args, checkpoint))
    report: dict[str, object] = {"steps": args.steps, "rounds": args.rounds, "kind": args.kind}
    medians: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for name, results in runs.items():
        medians[name] = {
            load: {
                n: {
                    "cpu_ms": round(statistics.median(res[load][n][0] for res in results), 4),  # type: ignore[index]
                    "wall_ms": round(statistics.median(res[load][n][1] for res in results), 4),  # type: ignore[index]
                }
                for n in map(str, rows)
            }
            for load in loads
        }
    report["per_step"] = medians
    names = list(trees)
    if len(names) == 2:
        a, b = names
        report[f"cpu_ratio_{a}_over_{b}"] = {
            load: {
                n: round(medians[a][load][n]["cpu_ms"] / medians[b][load][n]["cpu_ms"], 3)
                for n in map(str, rows)
            }
            for load in loads
        }
    emit(report)


if __name__ == "__main__":
    main()
