"""Instructions per decode step, counted by valgrind (callgrind): a load-proof figure.

  python -m benchmarks.experiments.step_instructions [--steps 128] [--kind small]

Runs, each under `valgrind --tool=callgrind --instr-atstart=no --separate-threads=yes`,
mlx-lm's `generate_step` (token ids) and the engine (one stream, sync consumer), both
greedy on the same prompt; instrumentation is switched on (callgrind_control) only for
`--steps` steady decode steps after a warm-up. Prints JSON: instructions per step of each
thread that ran (the Python thread, the MLX stream worker, ...). Wall time on a shared
machine swings by 2x; instruction counts do not (valgrind serializes threads, so waits and
their wake-ups are not what a real run pays: read the Python and worker threads' counts).
Needs valgrind (apt-get install valgrind).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys

from benchmarks.common import ROOT, emit, fast_blas, scratch


def _ctl(*args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(os.getpid())], check=True, capture_output=True)


def child(variant: str, kind: str, steps: int) -> None:
    """Under valgrind: warm up, count `steps` decode steps, print the steps counted."""
    import resource

    real = resource.setrlimit

    def tolerant(*a: object) -> None:  # valgrind lowers the fd limit that mlx-lm raises
        try:
            real(*a)  # type: ignore[arg-type]
        except ValueError:
            pass

    resource.setrlimit = tolerant  # type: ignore[assignment]
    fast_blas()  # first, as the engine has it
    from tests.checkpoints import make_checkpoint

    ckpt = make_checkpoint(scratch("mlxd-cg-model-") / kind, kind)
    prompt = [random.Random(0).randrange(10, 400) for _ in range(16)]
    if variant == "raw":
        import mlx.core as mx
        from mlx_lm.generate import generate_step
        from mlx_lm.utils import load

        model, _ = load(str(ckpt))
        gen = generate_step(mx.array(prompt), model, max_tokens=-1)
        for _ in range(8):
            next(gen)
        _ctl("-i", "on")
        for _ in range(steps):
            next(gen)
        _ctl("-i", "off")
        print("STEPS", steps)
        return
    from mlxd.engine import Engine, EngineConfig, EngineRequest
    from mlxd.types import SamplingParams, TokenEvent

    engine = Engine(EngineConfig.from_settings(max_batch=1, prefix_cache_bytes=0))
    info = engine.load_model(ckpt, name="bench")
    params = SamplingParams(max_tokens=100_000, ignore_eos=True)
    handle = engine.submit(EngineRequest(model=info.name, prompt_ids=prompt, params=params))
    counters, seen, start = engine._core.counters, 0, None
    for event in handle:
        if isinstance(event, TokenEvent):
            seen += len(event.token_ids)
            if start is None and seen >= 8:
                _ctl("-i", "on")
                start = counters.steps_total
            elif start is not None and counters.steps_total - start >= steps:
                _ctl("-i", "off")
                print("STEPS", counters.steps_total - start)
                break
    handle.cancel()
    engine.close()


def measure(variant: str, kind: str, steps: int) -> dict[str, int]:
    out = scratch("mlxd-cg-")
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--separate-threads=yes",
        f"--callgrind-out-file={out}/cg.%p",
        sys.executable,
        "-m",
        "benchmarks.experiments.step_instructions",
        "--child",
        variant,
        "--kind",
        kind,
        "--steps",
        str(steps),
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    counted = int(re.search(r"STEPS (\d+)", run.stdout).group(1))  # type: ignore[union-attr]
    per_thread = {}
    for f in sorted(out.glob("cg.*-*")):
        total = int(re.search(r"^totals: (\d+)", f.read_text(), re.M).group(1))  # type: ignore[union-attr]
        if total:
            per_thread[f"thread {f.name.rsplit('-', 1)[1]}"] = total // counted
    return per_thread


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--kind", default="small")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.kind, args.steps)
        return
    result = {v: measure(v, args.kind, args.steps) for v in ("raw", "engine")}
    emit({"kind": args.kind, "steps": args.steps, "instructions_per_step": result}, None)


if __name__ == "__main__":
    main()
