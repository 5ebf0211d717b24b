"""Start-up cost of `mlxd run MODEL "hi" --max-tokens 1` next to
`python -m mlx_lm generate --model MODEL --prompt hi --max-tokens 1`: whole processes, run
alternately so both see the same machine load. Prints one JSON object: per command the median
and minimum wall seconds and CPU seconds (user + system, the child's own), and the machine's
load average before and after (wall times on a busy machine stretch; CPU times barely move).

    python -m benchmarks.startup [--model DIR] [--repeat 9] [--demo] [--as-is] [--before SRC]
                                 [--server]

Without --model a tiny random checkpoint (tests/checkpoints.py) is built in a temp dir. --demo
adds the same pair on the demo model (SmolLM2, imported into a temp store on first use).
Children run without PYTHONDONTWRITEBYTECODE so mlxd's sources are byte-compiled once, as an
installed package is (--as-is keeps the environment unchanged). Also timed: a bare interpreter,
`import mlx_lm`, `import transformers`, `mlxd --help`; and, once each, whether `mlxd run`
imported transformers. --before SRC adds `mlxd_run_before`: the same run with an older mlxd's
`src` directory first on PYTHONPATH (e.g. a `git worktree` of an earlier commit). --server
starts `mlxd serve --model MODEL` once and adds `mlxd_run_server`, `mlxd run --server URL hi
--max-tokens 1` against it (a warm model: no load, no mlx import), with its ratio to the
in-process `mlxd_run` and whether it imported mlx.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.common import PY, emit

TARGET_S = 0.5  # issue 12: `mlxd run TINY hi --max-tokens 1`, whole process, median
# Records the modules `mlxd ...` imported (argv[1]: where), then runs it as `python -m` would.
RECORD_IMPORTS = (
    "import atexit, json, runpy, sys; out = sys.argv.pop(1); "
    "atexit.register(lambda: open(out, 'w').write(json.dumps(sorted(sys.modules)))); "
    "runpy.run_module('mlxd.cli.main', run_name='__main__', alter_sys=True)"
)


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) for one run of `cmd`; a leading `NAME=VALUE`
    word sets that variable for this command (as a shell does)."""
    while cmd and "=" in cmd[0]:
        name, value = cmd[0].split("=", 1)
        env, cmd = {**env, name: value}, cmd[1:]
    cpu_before = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.decode()[-500:]}")
    return wall, _children_cpu() - cpu_before  # one child at a time: this one's CPU


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def commands(
    model: str, demo: str | None, before: str | None, server: str | None = None
) -> dict[str, list[str]]:
    run = [PY, "-m", "mlxd.cli.main", "run"]
    generate = [PY, "-m", "mlx_lm", "generate", "--prompt", "hi", "--max-tokens", "1", "--model"]
    cmds = {
        "mlxd_run": [*run, model, "hi", "--max-tokens", "1"],
        "mlx_lm_generate": [*generate, model],
        "python_bare": [PY, "-c", "pass"],
        "import_mlx_lm": [PY, "-c", "import mlx_lm"],
        "import_transformers": [PY, "-c", "import transformers"],
        "mlxd_help": [PY, "-m", "mlxd.cli.main", "--help"],
    }
    if before:  # the older tree first on the path
        cmds["mlxd_run_before"] = [f"PYTHONPATH={before}", *run, model, "hi", "--max-tokens", "1"]
    if demo:
        cmds["mlxd_run_demo"] = [*run, "hi", "--max-tokens", "1"]  # the default model
        cmds["mlx_lm_generate_demo"] = [*generate, demo]
    if server:
        cmds["mlxd_run_server"] = [*run, "--server", server, "hi", "--max-tokens", "1"]
    return cmds


@contextmanager
def serving(model: str, env: dict[str, str]) -> Iterator[str]:
    """A `mlxd serve --model MODEL` on a free port for the whole run; yields its URL."""
    proc = subprocess.Popen(
        [PY, "-m", "mlxd.cli.main", "serve", "--model", model, "--port", "0"], env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            ready = re.search(r"mlxd serve: \S+ on (http://\S+)/v1", line)
            if ready:
                break
        else:
            raise SystemExit("mlxd serve exited before it was ready")
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep it drained
        yield ready.group(1)
    finally:
        proc.terminate()  # SIGTERM: the server drains and exits
        proc.wait(timeout=60)


def summary(runs: list[tuple[float, float]]) -> dict[str, float | int]:
    walls, cpus = [w for w, _ in runs], [c for _, c in runs]
    return {
        "median_s": round(statistics.median(walls), 3),
        "min_s": round(min(walls), 3),
        "cpu_median_s": round(statistics.median(cpus), 3),
        "runs": len(runs),
    }


def imports_of(args: list[str], env: dict[str, str], tmp: Path) -> set[str]:
    """The top-level packages `mlxd ARGS` imported."""
    out = tmp / "modules.json"
    subprocess.run(
        [PY, "-c", RECORD_IMPORTS, str(out), *args], env=env, check=True,
        stdin=subprocess.DEVNULL, capture_output=True,
    )  # fmt: skip
    return {m.split(".")[0] for m in json.loads(out.read_text())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint directory (default: a tiny one)")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--demo", action="store_true", help="also time the demo model")
    parser.add_argument("--as-is", action="store_true", help="keep PYTHONDONTWRITEBYTECODE")
    parser.add_argument("--before", help="an older mlxd's src directory, for mlxd_run_before")
    parser.add_argument("--server", action="store_true", help="also time run --server URL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        model = args.model or str(_tiny_model(tmp))
        env = dict(os.environ, MLXD_HOME=str(tmp / "home"), HF_HUB_OFFLINE="1")
        env.pop("MLXD_SERVER", None)
        if not args.as_is:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        demo = _demo_model(env) if args.demo else None
        with serving(model, env) if args.server else _no_server() as url:
            cmds = commands(model, demo, args.before, url)
            runs, loads = _time_all(cmds, env, args.repeat)
            imported = {"mlxd_run": imports_of(cmds["mlxd_run"][3:], env, tmp)}
            if url:
                imported["mlxd_run_server"] = imports_of(cmds["mlxd_run_server"][3:], env, tmp)
    result = {name: summary(r) for name, r in runs.items()}
    report = {
        "model": model,
        "cpu_count": os.cpu_count(),
        "load_average_before_after": loads,
        "bytecode_cached": not args.as_is,
        "timings": result,
        "mlxd_run_target_median_s": TARGET_S,
        "mlxd_run_imports_transformers": "transformers" in imported["mlxd_run"],
        "ratio_mlxd_over_mlx_lm": _ratios(runs, "mlxd_run", "mlx_lm_generate"),
    }
    if "mlxd_run_server" in runs:
        report["ratio_server_over_in_process"] = _ratios(runs, "mlxd_run_server", "mlxd_run")
        report["mlxd_run_server_imports_mlx"] = bool(
            {"mlx", "mlx_lm"} & imported["mlxd_run_server"]
        )
    emit(report)


@contextmanager
def _no_server() -> Iterator[None]:
    yield None


def _time_all(
    cmds: dict[str, list[str]], env: dict[str, str], repeat: int
) -> tuple[dict[str, list[tuple[float, float]]], list[float]]:
    """Every command `repeat` times, alternating (after one warm-up run each); and the load
    average before and after."""
    for cmd in cmds.values():  # warm the page cache (and write bytecode) once
        timed(cmd, env)
    load_before = os.getloadavg()
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in cmds}
    for _ in range(repeat):
        for name, cmd in cmds.items():
            runs[name].append(timed(cmd, env))
    load_after = os.getloadavg()
    return runs, [round(load_before[0], 2), round(load_after[0], 2)]


def _ratios(runs: dict[str, list[tuple[float, float]]], a: str, b: str) -> dict[str, float]:
    """a over b: the ratio of the medians, and the median of the per-round ratios."""
    pairs = [x[0] / y[0] for x, y in zip(runs[a], runs[b], strict=True)]
    medians = statistics.median(w for w, _ in runs[a]) / statistics.median(w for w, _ in runs[b])
    return {"of_medians": round(medians, 3), "median_of_pairs": round(statistics.median(pairs), 3)}


def _tiny_model(tmp: Path) -> Path:
    from tests.checkpoints import make_checkpoint

    return make_checkpoint(tmp / "tiny-chat", "chat")


def _demo_model(env: dict[str, str]) -> str:
    """The demo model's checkpoint directory, imported into the temp store by a first run."""
    subprocess.run(
        [PY, "-m", "mlxd.cli.main", "run", "hi", "--max-tokens", "1"], env=env, check=True,
        stdin=subprocess.DEVNULL, capture_output=True,
    )  # fmt: skip
    from mlxd.config import DEFAULT_MODEL_NAME

    return str(Path(env["MLXD_HOME"]) / "models" / DEFAULT_MODEL_NAME)


if __name__ == "__main__":
    main()
