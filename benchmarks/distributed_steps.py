"""Per-step breakdown of distributed decoding, without HTTP: the runner driven directly, one
process (MKL with 1 and with 2 threads) against 2 ranks (`mlx.launch -n 2 --backend ring`,
tensor parallel, 1 MKL thread each), on the same generated checkpoint; JSON on stdout.
Job 2ranks_spin is 2ranks with MLXD_RING_WAIT_MS=0: MLX's ring threads spin while they wait.

Each job inserts --rows greedy sequences, prefills them, then times --steps decode steps:
  step_ms        wall time per step (rank 0): what sets tokens/s
  cpu_ms         rank 0's CPU time per step (all its threads)
  send_ms        rank 0: host time to send a step's message (2 ranks)
  wait_ms        rank 1: time per step spent waiting for rank 0's next message
  apply_ms       rank 1: time per step running it (building the graph, computing, and
                 waiting inside the forward's all_sums for rank 0)
  threads_ms     rank 0's CPU per step by thread (name/id; threads1_ms: rank 1's): the MLX
                 stream thread computes, the ring's socket threads wait (spin when _spin)
More rows make a step more compute-bound (a step reads the weights once for every row):
--rows 8,32 shows how the ratio moves with it. Rounds alternate the order of the jobs.

    python -m benchmarks.distributed_steps --size xl --rows 8,32 --steps 40 --rounds 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import ROOT, emit, fast_blas, free_port, progress, scratch

# 2ranks_spin: MLXD_RING_WAIT_MS=0, MLX's ring threads spinning while they wait (before/after).
JOBS = ("1proc_1t", "1proc_2t", "2ranks", "2ranks_spin")


def worker(path: Path, rows: int, steps: int) -> None:
    """One job (under mlx.launch for 2 ranks): rank 0 prints one JSON line, rank 1 another."""
    fast_blas()
    from mlxd.backend.distributed import cluster as dist
    from mlxd.backend.distributed import launch_env
    from mlxd.engine.engine_config import EngineConfig

    # Every row decodes at once (else rows over max_batch wait for a row to finish).
    cfg = EngineConfig(max_batch=max(rows, EngineConfig().max_batch))
    options = dataclasses.replace(cfg.backend, prefix_cache_dir="")
    if not launch_env.launched():
        backend = dist.MlxBackend(options)
        runner = backend.make_runner(path.name, backend.load(path))
        print(json.dumps(drive(runner, rows, steps, None)), flush=True)
        return
    group = launch_env.init_group()
    if group.rank() == 0:
        leader = dist.DistributedBackend(group, dist.ShardMode.TENSOR, options)
        leader.watch_ranks(lambda detail: print(detail, file=sys.stderr), 30.0)
        runner = leader.make_runner(path.name, leader.load(path))
        print(json.dumps(drive(runner.inner, rows, steps, runner)), flush=True)
        leader.shutdown()
        return
    follower = dist.Follower(dist.Channel(group), dist.MlxBackend(options), dist.ShardMode.TENSOR)
    waits: list[float] = []
    applies: list[float] = []
    cpu: list[dict[str, tuple[str, int]]] = []
    while True:
        started = time.perf_counter()
        msgs = follower.channel.receive()
        received = time.perf_counter()
        cpu = [*cpu[-steps:], thread_cpu()]
        going = all(follower.apply(m) for m in msgs)
        waits.append(received - started)
        applies.append(time.perf_counter() - received)
        if not going:
            break
    timed = slice(-steps - 1, -1)  # the timed steps: the last messages before the stop
    threads = thread_cpu_since(cpu[0], steps)  # from the first timed step to the stop
    got = {"wait_ms": _ms(waits[timed]), "apply_ms": _ms(applies[timed]), "threads1_ms": threads}
    print(json.dumps({"rank": 1, **got}))
    follower.close()


def drive(runner, rows: int, steps: int, lockstep) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Prefill `rows` sequences, then time `steps` decode steps (through `lockstep` when set)."""
    from mlxd.backend.api import NewSequence
    from mlxd.types import SamplingParams

    step = lockstep.step if lockstep is not None else runner.step
    greedy = SamplingParams(temperature=0.0, ignore_eos=True)
    for i in range(rows):
        seq = NewSequence([5 + i, *range(3, 43)], greedy, 100_000, f"r{i}")
        (lockstep or runner).insert(seq)
    while runner.prefill_pending:
        step()
    for _ in range(3):
        step()
    sent = (lockstep.channel.send_seconds, lockstep.channel.sends) if lockstep else (0.0, 0)
    threads = thread_cpu()
    cpu, started = time.process_time(), time.perf_counter()
    for _ in range(steps):
        step()
    wall = time.perf_counter() - started
    out = {
        "rank": 0,
        "step_ms": round(1000 * wall / steps, 2),
        "cpu_ms": round(1000 * (time.process_time() - cpu) / steps, 2),
        "tok_s": round(rows * steps / wall, 1),
        "threads_ms": thread_cpu_since(threads, steps),
    }
    if lockstep is not None:
        seconds, count = lockstep.channel.send_seconds - sent[0], lockstep.channel.sends - sent[1]
        out["send_ms"] = round(1000 * seconds / max(1, count), 3)
    return out


def thread_cpu() -> dict[str, tuple[str, int]]:
    """CPU clock ticks so far of each of this process's threads, by thread id (with its name)."""
    out: dict[str, tuple[str, int]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:  # the thread ended
            continue
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        utime, stime = fields.split()[11:13]
        out[tid] = (name, int(utime) + int(stime))
    return out


def thread_cpu_since(before: dict[str, tuple[str, int]], steps: int) -> dict[str, float]:
    """Each thread's CPU milliseconds per step since `before` (threads under 0.1 ms left out)."""
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid, (name, ticks) in thread_cpu().items():
        ms = (ticks - before.get(tid, (name, 0))[1]) * tick_ms / steps
        if ms >= 0.1:
            out[f"{name}/{tid}"] = round(ms, 2)
    return out


def _ms(values: list[float]) -> float:
    """Mean milliseconds (as step_ms is: their sum is what a step costs)."""
    return round(1000 * statistics.fmean(values), 2) if values else 0.0


def run_job(job: str, model: Path, rows: int, steps: int) -> dict[str, float]:
    python = sys.executable
    worker = ["-m", "benchmarks.distributed_steps", "--worker", str(model), str(rows), str(steps)]
    cmd = [python, *worker]
    if job.startswith("2ranks"):
        launcher = Path(python).parent / "mlx.launch"
        port = str(free_port())
        cmd = [str(launcher), "-n", "2", "--backend", "ring", "-p", port, "--python", python]
        cmd += worker
    env = dict(os.environ, MLXD_BLAS="mkl", MLXD_BLAS_THREADS="2" if job.endswith("2t") else "1")
    if job == "2ranks_spin":
        env["MLXD_RING_WAIT_MS"] = "0"
    # An open pipe as stdin: mlx.launch spins a core polling a stdin at end of file.
    with subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        out, _ = proc.communicate(timeout=1200)
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"{job} printed no result")
    merged: dict[str, float] = {}
    for line in sorted(lines, key=lambda d: d.pop("rank")):
        merged |= line
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="xl", help="tests/checkpoints.py size")
    parser.add_argument("--rows", default="8,32", help="sequences decoding together")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jobs", default=",".join(JOBS), help=f"some of {', '.join(JOBS)}")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(Path(args.worker[0]), int(args.worker[1]), int(args.worker[2]))
        return
    from tests.checkpoints import make_checkpoint

    work = scratch("mlxd-dist-steps-")
    model = make_checkpoint(work / f"steps-{args.size}", "chat", size=args.size)
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    jobs = args.jobs.split(",")
    for rows in [int(r) for r in args.rows.split(",")]:
        per_job: dict[str, list[dict[str, float]]] = {job: [] for job in jobs}
        for r in range(args.rounds):
            for job in jobs if r % 2 == 0 else jobs[::-1]:
                got = run_job(job, model, rows, args.steps)
                got["load_avg"] = round(os.getloadavg()[0], 2)
                per_job[job].append(got)
                progress(f"rows {rows} {job}", got)
        results[f"{rows}_rows"] = per_job
    emit({"checkpoint": args.size, "results": results, "summary": summary(results)}, None)


_NUMBERS = ("step_ms", "cpu_ms", "tok_s", "send_ms", "wait_ms", "apply_ms", "load_avg")


def summary(results: dict[str, dict[str, list[dict[str, float]]]]) -> dict[str, object]:
    """Medians per job, and 2 ranks' tokens/s over each single process's."""
    out: dict[str, object] = {}
    for rows, per_job in results.items():
        med = {
            job: {k: statistics.median(r[k] for r in runs) for k in runs[0] if k in _NUMBERS}
            for job, runs in per_job.items()
        }
        med["ratios"] = {
            f"{two}_over_{one}": round(med[two]["tok_s"] / med[one]["tok_s"], 2)
            for two in med
            if two.startswith("2ranks")
            for one in med
            if one.startswith("1proc")
        }
        out[rows] = med
    return out


if __name__ == "__main__":
    main()
