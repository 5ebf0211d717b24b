"""Reference BLAS vs MKL, side by side in one run; prints JSON.

  python -m benchmarks.experiments.blas_bench [--model DIR] [--repeats 3] [--modes reference,mkl]

Each measurement runs in a fresh child process (the BLAS is chosen before mlx is imported), the
modes alternate, and medians are reported with the ratio mkl/reference:
  matmul_gflops   1024x576 @ 576x1536 float32
  ttft_s          time to first token, ~95-token prompt, demo model, mlx-lm stream_generate
  decode_tps      single-stream decode tok/s after the first token
  batch8_tps      8 prompts of ~60 tokens, 32 new tokens each, BatchGenerator, prefill included
With no --model the embedded default model (imported into the store) is used.
MLXD_BLAS_THREADS in the environment picks MKL's threading (1: sequential).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from benchmarks.common import ROOT, emit

CHILD = r"""
import json, sys, time
from mlxd.backend import blas
blas.active()  # before mlx is imported: MLXD_BLAS picks it
import mlx.core as mx
from mlx_lm.generate import BatchGenerator, stream_generate
from mlx_lm.utils import load

out = {"blas": blas.active().name}
a = mx.random.normal((1024, 576)); b = mx.random.normal((576, 1536)); mx.eval(a, b)
for _ in range(3):
    mx.eval(a @ b)
t = time.perf_counter()
for _ in range(10):
    mx.eval(a @ b)
out["matmul_gflops"] = 2 * 1024 * 576 * 1536 / ((time.perf_counter() - t) / 10) / 1e9

model, tok = load(sys.argv[1])
model.set_dtype(mx.float32)
text = " ".join(["The quick brown fox jumps over the lazy dog."] * 9) + " Summarize."
prompt = tok.encode(text)[:95]
tok.eos_token_ids = set()
times = []
t0 = time.perf_counter()
for _ in stream_generate(model, tok, mx.array(prompt), max_tokens=24):
    times.append(time.perf_counter())
out["prompt_tokens"] = len(prompt)
out["ttft_s"] = times[0] - t0
out["decode_tps"] = (len(times) - 1) / (times[-1] - times[0])

prompts = [tok.encode(f"Question {i}: " + text)[: 60 + i] for i in range(8)]
gen = BatchGenerator(model, max_tokens=32, completion_batch_size=8, prefill_batch_size=8)
n, t0 = 0, time.perf_counter()
gen.insert(prompts, max_tokens=[32] * 8)
while True:
    responses = gen.next_generated()
    if not responses:
        break
    n += len(responses)
    if all(r.finish_reason for r in responses) and len(gen._generation_batch) == 0:
        break
out["batch8_tps"] = n / (time.perf_counter() - t0)
gen.close()
print(json.dumps(out))
"""


def default_model() -> str:
    from mlxd.store.default_model import default_model as find

    return str(find().path)


def run_child(model: str, mode: str) -> dict[str, float]:
    env = dict(os.environ, MLXD_BLAS=mode, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, model], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", default="reference,mkl")
    args = ap.parse_args()
    model = args.model or default_model()
    modes = args.modes.split(",")
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for i in range(args.repeats):
        order = modes if i % 2 == 0 else modes[::-1]
        for mode in order:
            runs[mode].append(run_child(model, mode))
    keys = ["matmul_gflops", "ttft_s", "decode_tps", "batch8_tps"]
    result: dict[str, object] = {
        "model": model,
        "repeats": args.repeats,
        "blas_threads": os.environ.get("MLXD_BLAS_THREADS", "1"),
        "active": {m: runs[m][0]["blas"] for m in modes},
    }
    medians = {m: {k: statistics.median(r[k] for r in runs[m]) for k in keys} for m in modes}
    result["median"] = medians
    if "reference" in medians and "mkl" in medians:
        ref, mkl = medians["reference"], medians["mkl"]
        result["speedup_mkl"] = {
            k: (ref[k] / mkl[k] if k == "ttft_s" else mkl[k] / ref[k]) for k in keys
        }
    emit(result)


if __name__ == "__main__":
    main()
