"""The benchmarks still run: each in-process one (and the server one) in its smallest
configuration, as `python -m benchmarks.NAME` from the repository root, prints one JSON object.

They reach into the engine, the runner and the chat layer, so an interface change breaks them
where an import check cannot see it. No figure is checked: these runs are seconds long on
tiny checkpoints, nothing a measurement could rest on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

RUNS = {
    "engine_bench": ["--sections", "single", "--models", "small", "--tokens", "4",
                     "--repeats", "1"],
    "structured_bench": ["--tokens", "8", "--clients", "2", "--rounds", "1", "--requests", "1",
                         "--sections", "throughput"],
    "distributed_steps": ["--size", "tiny", "--rows", "2", "--steps", "3", "--rounds", "1",
                          "--jobs", "1proc_1t"],
    "server_bench": ["--kind", "tiny", "--max-tokens", "4", "--requests", "1", "--concurrency",
                     "1", "--loads", "greedy", "--servers", "mlxd"],
    "experiments.prefill_plan_bench": ["--kind", "tiny", "--concurrency", "2", "--requests", "2",
                                       "--max-tokens", "4", "--policies", "planner,one"],
    "experiments.prefill_plan_model": [],
    "embeddings_bench": ["--size", "tiny", "--seconds", "0.5", "--clients", "1,2", "--chats", "2",
                         "--tokens", "4"],
    "soak": ["--minutes", "0.1", "--clients", "2", "--sample-seconds", "2"],
    "vision_bench": ["--family", "qwen2_5_vl", "--clients", "2", "--per-client", "1",
                     "--max-tokens", "4", "--rounds", "1", "--servers", "mlxd"],
    "kv_memory_bench": ["--kind", "tiny", "--kv-group-size", "32", "--context", "64",
                        "--conversations", "2", "--quality-prompts", "2", "--quality-tokens",
                        "4", "--long", "256", "--decode-tokens", "4", "--bits", "0,8@16",
                        "--peers", "mlxd"],
    "long_prompt_bench": ["--servers", "mlxd", "--long", "256", "--before", "0.3", "--after",
                          "0.1", "--row-tokens", "4000"],
    "speculation_kinds_bench": ["--batches", "1", "--tokens", "6", "--size", "tiny", "--rounds",
                                "1"],
    "experiments.kv_scheme_bench": ["--kind", "tiny", "--settings", "8/32", "--prompts", "2",
                                    "--tokens", "4", "--context", "64", "--decode", "4",
                                    "--rounds", "1"],
    "experiments.sampling_bench": ["--trees", f"new={ROOT / 'src'}", "--rows", "1", "--loads",
                                   "greedy_bias", "--steps", "5", "--rounds", "1"],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(RUNS))
def test_benchmark_runs_and_prints_json(name: str, tmp_path: Path) -> None:
    env = dict(os.environ, MLXD_HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *RUNS[name]],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert isinstance(json.loads(done.stdout), dict)
