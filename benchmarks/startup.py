"""Start-up cost of `mlxd run MODEL "hi" --max-tokens 1` next to
`python -m mlx_lm generate --model MODEL --prompt hi --max-tokens 1`, run alternately so both
see the same machine load. Prints one JSON object (wall seconds; medians and minimums).

    python benchmarks/startup.py [--model DIR] [--repeat 7]

Without --model a tiny random checkpoint (tests/checkpoints.py) is built in a temp dir.
Also timed: bare interpreter, `import mlx_lm`, `import transformers`, `mlxd --help`.
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

PY = sys.executable


def wall(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.decode()[-500:]}")
    return elapsed


def commands(model: str) -> dict[str, list[str]]:
    return {
        "mlxd_run": [PY, "-m", "mlxd.cli.main", "run", model, "hi", "--max-tokens", "1"],
        "mlx_lm_generate": [
            PY, "-m", "mlx_lm", "generate", "--model", model, "--prompt", "hi",
            "--max-tokens", "1",
        ],
        "python_bare": [PY, "-c", "pass"],
        "import_mlx_lm": [PY, "-c", "import mlx_lm"],
        "import_transformers": [PY, "-c", "import transformers"],
        "mlxd_help": [PY, "-m", "mlxd.cli.main", "--help"],
    }  # fmt: skip


def summary(times: list[float]) -> dict[str, float]:
    return {
        "median_s": round(statistics.median(times), 3),
        "min_s": round(min(times), 3),
        "runs": len(times),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint directory (default: a tiny one)")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(_tiny_model(Path(tmp)))
        env = dict(os.environ, MLXD_HOME=str(Path(tmp) / "home"), HF_HUB_OFFLINE="1")
        cmds = commands(model)
        for cmd in cmds.values():  # warm the page cache once
            wall(cmd, env)
        times: dict[str, list[float]] = {name: [] for name in cmds}
        for _ in range(args.repeat):
            for name, cmd in cmds.items():
                times[name].append(wall(cmd, env))
    result = {name: summary(t) for name, t in times.items()}
    ratios = [a / b for a, b in zip(times["mlxd_run"], times["mlx_lm_generate"], strict=True)]
    print(
        json.dumps(
            {
                "model": model,
                "cpu_count": os.cpu_count(),
                "timings": result,
                "ratio_mlxd_over_mlx_lm": {
                    "of_medians": round(
                        result["mlxd_run"]["median_s"] / result["mlx_lm_generate"]["median_s"], 3
                    ),
                    "median_of_pairs": round(statistics.median(ratios), 3),
                    "target": 1.1,
                },
            },
            indent=2,
        )
    )


def _tiny_model(tmp: Path) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.checkpoints import make_checkpoint

    return make_checkpoint(tmp / "tiny-chat", "chat")


if __name__ == "__main__":
    main()
